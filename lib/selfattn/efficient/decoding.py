"""FlashDecoding: a few new queries against a long key/value cache, split over the keys.

When a model generates, each step has one new query (or a few) and a cache of ``m``
keys and values, ``m`` in the thousands. FlashAttention parallelises over queries, and
there is only one, so Flash-Decoding (Dao, Haziza, Massa and Sizov 2023) splits the
*keys* instead:

1. cut the cache into chunks; for each chunk ``c`` (in parallel on a GPU) compute the
   chunk's own attention output ``O_c`` and its row log-sum-exp
   ``L_c = log sum_{j in c} exp(s_j)``, with :func:`partial_attention`;
2. merge the partial results exactly with :func:`merge_attention_states`, the
   online-softmax identity written with log-sum-exps::

       L = log(exp(L_a) + exp(L_b)),   O = exp(L_a - L) O_a + exp(L_b - L) O_b

   which holds because ``exp(L_a) O_a = sum_{j in a} exp(s_j) v_j``: the weighted sum of
   two partial softmax averages, reweighted by their shares of the total, is the softmax
   average over both.

The result equals attention over the whole cache (:func:`flash_decoding` is tested against
torch SDPA); only the order of the sums changes. On this CPU it is a teaching
implementation: the chunks run one after the other, and the point is the merge. New
queries sit at the end of the sequence, so ``causal`` aligns bottom-right: query ``i`` of
``n`` sees keys ``j <= i + m - n``.
"""

from __future__ import annotations

import torch

from .._checks import (
    require_bool,
    require_float_tensors,
    require_int,
    require_qkv,
    require_same_device,
    require_scale,
)
from ._tiled import work_dtype

__all__ = ["partial_attention", "merge_attention_states", "flash_decoding"]


def partial_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None = None,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over one chunk of keys, with the row log-sum-exp that lets it be merged.

    Args:
        q: ``(..., n, d_k)``; k: ``(..., c, d_k)``; v: ``(..., c, d_v)`` (batch dims broadcast).
        scale: multiplies the scores; defaults to ``1 / sqrt(d_k)``.
        mask: optional bool, broadcastable to ``(..., n, c)``, True = may attend.

    Returns:
        ``(out, lse)``: ``out (..., n, d_v) = softmax(s) v`` over this chunk and
        ``lse (..., n) = log sum_j exp(s_j)``, in float32 for half inputs (float64 stays
        float64). A row that sees no key of the chunk has ``out = 0`` and ``lse = -inf``,
        so it weighs nothing in a merge.
    """
    require_qkv(q, k, v)
    scale = require_scale(scale, q.shape[-1])
    work = work_dtype(q.dtype)
    s = q.to(work) @ k.to(work).transpose(-2, -1) * scale
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor, got {getattr(mask, 'dtype', mask)!r}")
        s = s.masked_fill(~mask.to(s.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    # exp(s - lse) is the chunk's softmax; a row with no key has lse = -inf: shift it by 0.
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, 0.0).unsqueeze(-1))
    out = p @ v.to(work)
    return out, lse.expand(out.shape[:-1])  # v may carry batch dims that q and k do not


def merge_attention_states(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine the attention results of two disjoint sets of keys into the result over both.

    The online-softmax identity: with ``L = log(exp(L_a) + exp(L_b))``,
    ``O = exp(L_a - L) O_a + exp(L_b - L) O_b``. Exact (up to rounding), associative and
    commutative, so chunks can be merged in any order or as a tree.

    Args:
        out_a, out_b: ``(..., n, d_v)`` partial outputs, each normalised over its own keys.
        lse_a, lse_b: ``(..., n)`` their row log-sum-exps (``-inf``: no key, weighs nothing).

    Returns:
        ``(out, lse)`` with the same shapes (broadcast).
    """
    require_float_tensors(out_a=out_a, lse_a=lse_a, out_b=out_b, lse_b=lse_b)
    if out_a.shape[:-1] != lse_a.shape or out_b.shape[:-1] != lse_b.shape:
        raise ValueError(
            f"each lse must have its output's shape without the last dim, got out_a "
            f"{tuple(out_a.shape)} with lse_a {tuple(lse_a.shape)}, out_b {tuple(out_b.shape)} "
            f"with lse_b {tuple(lse_b.shape)}"
        )
    require_same_device(out_a=out_a, lse_a=lse_a, out_b=out_b, lse_b=lse_b)
    lse = torch.logaddexp(lse_a, lse_b)
    # Both -inf (neither part saw a key): shift by 0, so both weights are exp(-inf) = 0.
    ref = torch.where(torch.isfinite(lse), lse, 0.0)
    w_a = torch.exp(lse_a - ref).unsqueeze(-1)  # share of the total softmax mass in part a
    w_b = torch.exp(lse_b - ref).unsqueeze(-1)
    return w_a * out_a + w_b * out_b, lse


def flash_decoding(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    chunk_size: int = 1024,
    causal: bool = False,
    scale: float | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Split-KV attention for decoding: partial results per chunk of keys, merged exactly.

    Equal to ``torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)``
    (with ``causal``: with ``attn_mask=causal_lower_right(n, m)``).

    Args:
        q: ``(..., n, d_k)``, the new queries (``n`` small: 1 when generating one token).
        k: ``(..., m, d_k)``, the cached keys (the new ones included); v: ``(..., m, d_v)``.
        chunk_size: keys per chunk (>= 1; ``m`` need not be a multiple of it).
        causal: the queries are the last ``n`` positions; query ``i`` sees keys
            ``j <= i + m - n`` (bottom-right alignment).
        scale: multiplies the scores; defaults to ``1 / sqrt(d_k)``.
        return_lse: also return the row log-sum-exp ``(..., n)`` (float32 for half inputs).

    Returns:
        ``(..., n, d_v)`` in the dtype of ``q`` (and the lse when asked). A query that
        sees no key gets zeros.

    Raises:
        TypeError: bad tensors, ``chunk_size`` not an int, a scale that is not a number.
        ValueError: shapes that do not fit, tensors on different devices, ``chunk_size`` < 1.
    """
    causal = require_bool(causal, "causal")
    return_lse = require_bool(return_lse, "return_lse")
    batch = require_qkv(q, k, v)
    chunk_size = require_int(chunk_size, "chunk_size", 1)
    scale = require_scale(scale, q.shape[-1])
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    work = work_dtype(q.dtype)
    # The empty state: no keys seen, output 0, log-sum-exp -inf.
    out = torch.zeros(*batch, n, d_v, dtype=work, device=q.device)
    lse = torch.full((*batch, n), float("-inf"), dtype=work, device=q.device)
    i = torch.arange(n, device=q.device)[:, None]
    for c0 in range(0, m, chunk_size):  # on a GPU: all chunks at once, one per thread block
        c1 = min(c0 + chunk_size, m)
        j = torch.arange(c0, c1, device=q.device)[None, :]
        mask = j <= i + (m - n) if causal else None
        out_c, lse_c = partial_attention(
            q, k[..., c0:c1, :], v[..., c0:c1, :], scale=scale, mask=mask
        )
        out, lse = merge_attention_states(out, lse, out_c, lse_c)
    out = out.to(q.dtype)
    return (out, lse) if return_lse else out
