"""selfattn: the shared library of *Self-Attention, Executed*.

Every chapter imports it; every public name is tested. Modules, one concept each:

* ``attention``: softmax and scaled dot-product attention (chapter 3)
* ``reference``: the same in NumPy, step by step (chapter 3)
* ``masks``: boolean masks, True = may attend (chapters 3-4)
* ``multihead``: MultiHeadAttention, KVCache, cross-attention (chapter 5)
* ``costs``: parameter, FLOP and byte counts (chapters 1, 5, 7, 8)
* ``efficient``: FlashAttention (PyTorch, Triton), sliding-window and linear attention,
  FlashDecoding (chapters 5, 7-8); ``bench``: the ``make bench`` harness (imported on demand)
* ``models``: the tiny models the chapters train, and chapter 5's decoding model
  (``attention_stack``, ``generate``, imported on demand)
* ``viz``: the shared plots; ``diagrams``: schematic figures (chapters 1-8);
  ``runtime``: ``setup()``; ``results``: glued figures
* ``train``: the training loop; ``exercises``: the checkers
* ``norms``: RMSNorm (chapter 11); ``hf``: ``from_transformers``, the bridge to the models
  of Hugging Face ``transformers`` (imported on first use; ``transformers`` is not needed to
  import ``selfattn``)
"""

from . import (
    diagrams,
    efficient,
    flex,  # noqa: F401  (registers kernel="flex")
    reference,
)
from .attention import *  # noqa: F401,F403
from .attention import __all__ as _attention_all
from .costs import *  # noqa: F401,F403
from .costs import __all__ as _costs_all
from .i18n import set_language  # noqa: F401  (selfattn.set_language("zh"): Chinese checkers)
from .masks import *  # noqa: F401,F403
from .masks import __all__ as _masks_all
from .multihead import *  # noqa: F401,F403
from .multihead import __all__ as _multihead_all
from .positional import *  # noqa: F401,F403
from .positional import __all__ as _positional_all
from .results import (
    ClaimError,
    Recorder,
    chapter_titles,
    claim,
    claim_note,
    failed_claims,
    load_recorded,
    load_results,
    record,
    recorder,
    recording,
)
from .runtime import get_device, setup
from .train import train_loop
from .viz import plot_attention

__version__ = "0.1.0"

#: Names that live in :mod:`selfattn.models.attention_decoder` (chapter 5's decoding model),
#: imported on first use (PEP 562), so that ``import selfattn`` does not load the models.
_FROM_MODELS = ("attention_stack", "generate")
#: The transformers bridge (:mod:`selfattn.hf`), also imported on first use.
_FROM_HF = ("from_transformers",)

__all__ = [
    *_attention_all,
    *_costs_all,
    *_masks_all,
    *_multihead_all,
    *_positional_all,
    "ClaimError",
    "claim",
    "claim_note",
    "failed_claims",
    "get_device",
    "load_recorded",
    "chapter_titles",
    "load_results",
    "plot_attention",
    "record",
    "recorder",
    "recording",
    "Recorder",
    "diagrams",
    "efficient",
    "reference",
    "setup",
    "train_loop",
    *_FROM_MODELS,
    *_FROM_HF,
]


def __getattr__(name: str):
    if name in _FROM_MODELS:
        from .models import attention_decoder

        return getattr(attention_decoder, name)
    if name in _FROM_HF:  # the transformers bridge (selfattn.hf), on first use
        from .hf import from_transformers

        return from_transformers
    raise AttributeError(f"module 'selfattn' has no attribute {name!r}")
