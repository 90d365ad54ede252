"""Efficient attention: FlashAttention in PyTorch and Triton, sparse, linear.

* ``flash``: ``flash_attention``, tiled with the online softmax, differentiable, beside
  ``flash_attention_reference`` (the bare recurrence) and the one-query step-by-step
  ``online_softmax_steps``
* ``triton_flash``: ``triton_flash_attention``, the same algorithm as Triton kernels, and
  ``compile_for_gpu`` (ahead-of-time compilation for a GPU generation)
* ``decoding``: ``flash_decoding`` (split-KV decoding against a long cache), its
  ``partial_attention`` per chunk and the exact ``merge_attention_states``
* ``paged``: ``PagedKVCache`` (a KV cache in fixed-size blocks), ``paged_attention``,
  ``allocation_slots``
* ``io_model``: slow/fast-memory traffic of standard vs tiled attention, forward and backward
* ``sliding_window``: ``sliding_window_attention`` (band only, O(n w), differentiable) and
  its blocked reference
* ``sparse``: the sparse patterns as masks (strided, Longformer, BigBird, attention sinks,
  block layouts) and ``block_sparse_attention``
* ``linear``: ``linear_attention`` (parallel/chunked), its recurrent form, decoding state
  and ``decayed_linear_attention``; ``performer``: random-feature softmax attention
* ``delta_rule``: ``gated_delta_rule`` (recurrent and chunked WY/UT forms), ``delta_rule``
  and one decoding step ``delta_rule_step``; ``ssd``: Mamba-2's scalar-decay state-space
  layer as a recurrence (``ssd_recurrent``) and as masked attention (``ssd_attention``)

Everything their ``__all__`` lists is exported here, except two modules whose names stay in
the submodule:

* ``triton_kernels`` (the ``@triton.jit`` kernels): importing it defines the kernels, and
  Triton fixes at that moment, for the whole process, whether they are compiled or
  interpreted (``TRITON_INTERPRET=1``); ``triton_flash`` imports it on its first call,
  so ``import selfattn`` never does.
* ``triton_configs`` (launch settings, shared-memory estimates, grid limits): the Triton
  launcher's tuning tables, read by ``triton_flash``, the tests and ``make gpu-check``,
  not by a chapter.

``_tiled`` holds what the tiled kernels share (argument checks, the work dtype, and the
autograd function whose backward is FlashAttention-2's Algorithm 2).
"""

from . import io_model
from .decoding import *  # noqa: F401,F403
from .decoding import __all__ as _decoding_all
from .delta_rule import *  # noqa: F401,F403
from .delta_rule import __all__ as _delta_rule_all
from .flash import *  # noqa: F401,F403
from .flash import __all__ as _flash_all
from .io_model import *  # noqa: F401,F403
from .io_model import __all__ as _io_model_all
from .linear import *  # noqa: F401,F403
from .linear import __all__ as _linear_all
from .paged import *  # noqa: F401,F403
from .paged import __all__ as _paged_all
from .performer import *  # noqa: F401,F403
from .performer import __all__ as _performer_all
from .sliding_window import *  # noqa: F401,F403
from .sliding_window import __all__ as _sliding_window_all
from .sparse import *  # noqa: F401,F403
from .sparse import __all__ as _sparse_all
from .ssd import *  # noqa: F401,F403
from .ssd import __all__ as _ssd_all
from .triton_flash import *  # noqa: F401,F403
from .triton_flash import __all__ as _triton_flash_all

__all__ = [
    *_flash_all,
    *_decoding_all,
    *_paged_all,
    *_triton_flash_all,
    *_io_model_all,
    *_sliding_window_all,
    *_sparse_all,
    *_linear_all,
    *_performer_all,
    *_delta_rule_all,
    *_ssd_all,
    "io_model",
]
