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
from .decoding import flash_decoding, merge_attention_states, partial_attention
from .delta_rule import delta_rule, delta_rule_step, gated_delta_rule
from .flash import flash_attention, flash_attention_reference, online_softmax_steps
from .io_model import (
    TwoLevelMemory,
    flash_backward_block_sizes,
    flash_block_sizes,
    standard_attention_backward_io,
    standard_attention_io,
    tiled_attention_backward_io,
    tiled_attention_io,
)
from .linear import (
    LinearAttentionState,
    decayed_linear_attention,
    elu_feature_map,
    linear_attention,
    linear_attention_recurrent,
    linear_attention_step,
)
from .paged import PagedKVCache, allocation_slots, paged_attention
from .performer import gaussian_projection, performer_attention, positive_random_features
from .sliding_window import sliding_window_attention, sliding_window_attention_reference
from .sparse import (
    bigbird_layout,
    bigbird_mask,
    block_sparse_attention,
    block_sparse_mask,
    layout_from_mask,
    longformer_mask,
    receptive_field,
    sink_window_mask,
    strided_mask,
)
from .ssd import semiseparable_mask, ssd_attention, ssd_recurrent
from .triton_flash import compile_for_gpu, triton_available, triton_flash_attention

__all__ = [
    "flash_attention",
    "flash_attention_reference",
    "online_softmax_steps",
    "flash_decoding",
    "merge_attention_states",
    "partial_attention",
    "PagedKVCache",
    "paged_attention",
    "allocation_slots",
    "triton_flash_attention",
    "triton_available",
    "compile_for_gpu",
    "TwoLevelMemory",
    "standard_attention_io",
    "tiled_attention_io",
    "flash_block_sizes",
    "standard_attention_backward_io",
    "tiled_attention_backward_io",
    "flash_backward_block_sizes",
    "sliding_window_attention",
    "sliding_window_attention_reference",
    "strided_mask",
    "block_sparse_mask",
    "receptive_field",
    "longformer_mask",
    "bigbird_layout",
    "bigbird_mask",
    "sink_window_mask",
    "layout_from_mask",
    "block_sparse_attention",
    "elu_feature_map",
    "linear_attention",
    "linear_attention_recurrent",
    "linear_attention_step",
    "LinearAttentionState",
    "decayed_linear_attention",
    "gaussian_projection",
    "positive_random_features",
    "performer_attention",
    "gated_delta_rule",
    "delta_rule",
    "delta_rule_step",
    "ssd_recurrent",
    "ssd_attention",
    "semiseparable_mask",
    "io_model",
]
