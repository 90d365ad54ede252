"""Tiny models trained on the book's pages, one module per family.

Each submodule defines ``__all__``; this package re-exports them so readers
write ``from selfattn.models import ...``.
"""

from .attention_decoder import *  # noqa: F401,F403
from .attention_decoder import __all__ as _attention_decoder_all
from .heads import *  # noqa: F401,F403
from .heads import __all__ as _heads_all
from .positional import *  # noqa: F401,F403
from .positional import __all__ as _positional_all
from .recurrent import *  # noqa: F401,F403
from .recurrent import __all__ as _recurrent_all
from .single_head import *  # noqa: F401,F403
from .single_head import __all__ as _single_head_all
from .tiny_attention import *  # noqa: F401,F403
from .tiny_attention import __all__ as _tiny_attention_all
from .transformer import *  # noqa: F401,F403
from .transformer import __all__ as _transformer_all

__all__: list[str] = [
    *_attention_decoder_all,
    *_heads_all,
    *_positional_all,
    *_recurrent_all,
    *_single_head_all,
    *_tiny_attention_all,
    *_transformer_all,
]
