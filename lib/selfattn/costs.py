"""Cost formulas: parameters, floating-point operations and bytes of attention (chapters 5, 7).

Each function is the closed form a chapter derives and then checks against a measurement
(a parameter count, an autograd hook, the cache's ``nbytes``), so the formula is written
once, here. Conventions:

* a multiply-add counts as **2** floating-point operations; softmax, biases and masking
  are left out (they are ``O(n m)``, the matmuls ``O(n m d)``);
* ``n`` queries, ``m`` keys (``m = n`` for self-attention without a cache), ``d_k`` the
  width of queries and keys, ``d_v`` that of values, ``heads`` independent heads;
* bytes are ``elements x dtype.itemsize``; ``dtype`` is a ``torch.dtype``.

Per head: :func:`attention_flops` (``QK^T`` and ``PV``), :func:`scores_bytes` (the
``n x m`` matrices a plain implementation materialises) and :func:`saved_for_backward_bytes`
(what autograd keeps for the backward pass: the weights, or FlashAttention's output and
log-sum-exp). Per layer: :func:`mha_param_count`, :func:`mha_flops` (with the projections)
and :func:`kv_cache_bytes`.
"""

from __future__ import annotations

import torch

from ._checks import require_bool, require_int

__all__ = [
    "attention_flops",
    "scores_bytes",
    "saved_for_backward_bytes",
    "mha_param_count",
    "mha_flops",
    "kv_cache_bytes",
]


def _itemsize(dtype: torch.dtype) -> int:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__} {dtype!r}")
    return torch.empty((), dtype=dtype).element_size()


def attention_flops(
    n: int,
    m: int | None = None,
    d_k: int = 64,
    d_v: int | None = None,
    *,
    heads: int = 1,
    batch: int = 1,
) -> int:
    """Operations of the matmuls of ``softmax(Q K^T / sqrt(d_k)) V``: ``2 n m d_k + 2 n m d_v``.

    ``Q K^T`` is ``(n, d_k) x (d_k, m)``, ``n m d_k`` multiply-adds; ``P V`` is
    ``(n, m) x (m, d_v)``, ``n m d_v``. Self-attention with ``d_v = d_k = d``: ``4 n^2 d``
    per head. ``m`` defaults to ``n``, ``d_v`` to ``d_k``; the total is multiplied by
    ``heads`` and ``batch``.
    """
    n = require_int(n, "n", 0)
    m = n if m is None else require_int(m, "m", 0)
    d_k = require_int(d_k, "d_k", 1)
    d_v = d_k if d_v is None else require_int(d_v, "d_v", 1)
    heads = require_int(heads, "heads", 1)
    batch = require_int(batch, "batch", 1)
    return batch * heads * (2 * n * m * d_k + 2 * n * m * d_v)


def scores_bytes(
    n: int,
    m: int | None = None,
    *,
    heads: int = 1,
    batch: int = 1,
    dtype: torch.dtype = torch.float32,
) -> int:
    """Memory of the score (or weight) matrices: ``batch x heads x n x m x itemsize``.

    What a plain implementation materialises at once, one ``(n, m)`` matrix per head;
    FlashAttention never holds it. ``m`` defaults to ``n``.
    """
    n = require_int(n, "n", 0)
    m = n if m is None else require_int(m, "m", 0)
    heads = require_int(heads, "heads", 1)
    batch = require_int(batch, "batch", 1)
    return batch * heads * n * m * _itemsize(dtype)


def saved_for_backward_bytes(
    n: int,
    m: int | None = None,
    d_v: int = 64,
    *,
    kernel: str = "plain",
    heads: int = 1,
    batch: int = 1,
    dtype: torch.dtype = torch.float32,
) -> int:
    """Bytes autograd keeps between the forward and the backward pass, beyond ``q, k, v``.

    * ``kernel="plain"``: the weights ``P = softmax(S)``, one ``(n, m)`` matrix per head
      (softmax's backward needs its output, the matmul's backward needs ``P``: the same
      tensor), ``batch x heads x n x m x itemsize``;
    * ``kernel="flash"``: the output ``(n, d_v)`` and the row log-sum-exp ``(n,)`` per head,
      the log-sum-exp in float32 whatever ``dtype`` is (the backward recomputes ``P``
      block by block from it): ``batch x heads x (n d_v itemsize + 4 n)``.

    ``m`` defaults to ``n``.
    """
    n = require_int(n, "n", 0)
    m = n if m is None else require_int(m, "m", 0)
    d_v = require_int(d_v, "d_v", 1)
    heads = require_int(heads, "heads", 1)
    batch = require_int(batch, "batch", 1)
    size = _itemsize(dtype)
    if kernel == "plain":
        return batch * heads * n * m * size
    if kernel == "flash":
        return batch * heads * (n * d_v * size + n * 4)
    raise ValueError(f"kernel must be 'plain' or 'flash', got {kernel!r}")


def _kv_width(d_model: int, num_heads: int | None, num_kv_heads: int | None) -> int:
    """``d_kv = num_kv_heads * d_head``: the width of the keys (``d_model`` without GQA)."""
    if num_heads is not None:
        num_heads = require_int(num_heads, "num_heads", 1)
        if d_model % num_heads:
            raise ValueError(f"num_heads={num_heads} must divide d_model={d_model}")
    if num_kv_heads is None:
        return d_model
    if num_heads is None:
        raise ValueError("num_kv_heads needs num_heads too (d_head = d_model // num_heads)")
    num_kv_heads = require_int(num_kv_heads, "num_kv_heads", 1)
    if num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads}")
    return num_kv_heads * (d_model // num_heads)


def mha_param_count(
    d_model: int,
    *,
    bias: bool = True,
    num_heads: int | None = None,
    num_kv_heads: int | None = None,
) -> int:
    """Parameters of :class:`~selfattn.multihead.MultiHeadAttention`: ``4 d^2`` (+ ``4 d`` biases).

    The same for every number of heads ``h``. With grouped-query attention
    (``num_kv_heads`` key/value heads of ``d_head = d / num_heads``, so keys and values
    of width ``d_kv = num_kv_heads * d_head``): ``2 d^2 + 2 d d_kv`` weights
    (+ ``2 d + 2 d_kv`` biases).
    """
    d_model = require_int(d_model, "d_model", 1)
    bias = require_bool(bias, "bias")
    d_kv = _kv_width(d_model, num_heads, num_kv_heads)
    weights = 2 * d_model * d_model + 2 * d_model * d_kv
    return weights + ((2 * d_model + 2 * d_kv) if bias else 0)


def mha_flops(
    n: int,
    d_model: int,
    m: int | None = None,
    *,
    num_heads: int | None = None,
    num_kv_heads: int | None = None,
) -> int:
    """Floating-point operations of one multi-head attention forward pass for one sequence.

    ``2 n d (3d)`` for the fused QKV projection (self-attention; for cross-attention the
    keys/values cost ``4 m d^2`` instead of ``4 n d^2``), ``2 n m d`` for the scores,
    ``2 n m d`` for weights @ values (:func:`attention_flops` summed over the heads) and
    ``2 n d^2`` for the output projection. Self-attention (``m = n``): ``8 n d^2 + 4 n^2 d``.
    Softmax and biases are ignored. With ``num_kv_heads`` (GQA) the key/value projections
    cost ``4 m d d_kv`` instead.
    """
    n = require_int(n, "n", 0)
    d_model = require_int(d_model, "d_model", 1)
    m = n if m is None else require_int(m, "m", 0)
    d_kv = _kv_width(d_model, num_heads, num_kv_heads)
    projections = 4 * n * d_model**2 + 4 * m * d_model * d_kv
    return projections + attention_flops(n, m, d_model)


def kv_cache_bytes(
    num_layers: int,
    num_heads: int,
    d_head: int,
    n: int,
    dtype: torch.dtype = torch.float32,
    *,
    batch: int = 1,
    num_kv_heads: int | None = None,
) -> int:
    """Memory of a KV cache: ``2 x layers x heads x d_head x n x bytes`` (x batch).

    With grouped-query attention only the ``num_kv_heads`` key/value heads are cached:
    ``heads`` is then ``num_kv_heads`` (which must divide ``num_heads``), a saving of
    ``num_heads / num_kv_heads``.
    """
    num_layers = require_int(num_layers, "num_layers", 1)
    num_heads = require_int(num_heads, "num_heads", 1)
    if num_kv_heads is not None:
        num_kv_heads = require_int(num_kv_heads, "num_kv_heads", 1)
        if num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads}")
        num_heads = num_kv_heads
    d_head = require_int(d_head, "d_head", 1)
    n = require_int(n, "n", 0)
    batch = require_int(batch, "batch", 1)
    return 2 * num_layers * num_heads * d_head * n * _itemsize(dtype) * batch
