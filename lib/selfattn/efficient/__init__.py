"""Efficient attention: FlashAttention in PyTorch and Triton, sparse, linear.

* ``flash``: ``flash_attention``, tiled with the online softmax, differentiable, beside
  ``flash_attention_reference`` (the bare recurrence) and the one-query step-by-step
  ``online_softmax_steps``
* ``triton_flash``: ``triton_flash_attention``, the same forward pass as a Triton kernel
  (Triton is imported only when it is called)
* ``decoding``: ``flash_decoding`` (split-KV decoding against a long cache), its
  ``partial_attention`` per chunk and the exact ``merge_attention_states``
* ``io_model``: slow/fast-memory traffic of standard vs tiled attention
* ``sparse``: ``sliding_window_attention`` (band only, O(n w), differentiable), its blocked
  reference, and sparse masks
* ``linear``: ``linear_attention`` (parallel/chunked), its recurrent form and decoding state
"""

from . import io_model
from .decoding import flash_decoding, merge_attention_states, partial_attention
from .flash import flash_attention, flash_attention_reference, online_softmax_steps
from .io_model import TwoLevelMemory, flash_block_sizes, standard_attention_io, tiled_attention_io
from .linear import (
    LinearAttentionState,
    elu_feature_map,
    linear_attention,
    linear_attention_recurrent,
    linear_attention_step,
)
from .sliding_window import sliding_window_attention, sliding_window_attention_reference
from .sparse import (
    block_sparse_mask,
    receptive_field,
    strided_mask,
)
from .triton_flash import triton_available, triton_flash_attention

__all__ = [
    "flash_attention",
    "flash_attention_reference",
    "online_softmax_steps",
    "flash_decoding",
    "merge_attention_states",
    "partial_attention",
    "triton_flash_attention",
    "triton_available",
    "TwoLevelMemory",
    "standard_attention_io",
    "tiled_attention_io",
    "flash_block_sizes",
    "sliding_window_attention",
    "sliding_window_attention_reference",
    "strided_mask",
    "block_sparse_mask",
    "receptive_field",
    "elu_feature_map",
    "linear_attention",
    "linear_attention_recurrent",
    "linear_attention_step",
    "LinearAttentionState",
    "io_model",
]
