"""Sliding-window attention that computes only the band: O(n w), not O(n^2).

:func:`sliding_window_attention` never builds the n x n score matrix: it cuts the
queries into blocks and gives each block only the keys its window can reach, so
time and memory grow as ``n * window``, not ``n^2`` (Beltagy et al. 2020's
Longformer, and the sliding window of Mistral-style decoders). A window of ``w``
means what :func:`selfattn.masks.sliding_window_mask` means: ``w`` keys, the query's
own position included (``i - w < j <= i``, or ``|i - j| < w`` when not causal). The
dense masks of the other sparse patterns are in :mod:`selfattn.efficient.sparse`.

With ``n`` queries and ``m`` keys the band follows a diagonal anchored by ``alignment``
(see :mod:`selfattn.efficient.flash`): ``"bottom_right"`` (the default) puts key
``i + m - n`` on query ``i``'s diagonal (a window over the end of a cache),
``"top_left"`` key ``i``. A
query whose band holds no key gets zeros. :func:`sliding_window_attention_reference` is
the short blocked version that the fast one is tested against.

The tile: a block of ``block_q`` queries against the ``block_q + window - 1`` keys its
band can reach (``+ window - 1`` more when not causal); the key side of the tile is set
by the window, so only ``block_q`` is a parameter.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.nn.functional as F

from .._checks import require_int
from ..attention import softmax
from ._tiled import Recompute, TiledArgs, check_tiled, flatten_batch, needs_grad, work_dtype

__all__ = ["sliding_window_attention", "sliding_window_attention_reference"]


# Score entries computed at once (16 MiB of float32): bounds a sliding window's working memory.
_GROUP_ELEMENTS = 1 << 22


def _check_window(q, k, v, window, causal, alignment, scale, block_q, clip=False) -> TiledArgs:
    """The tiled arguments with the band of ``window`` keys: ``lo = -(window - 1)``, and
    ``hi = 0`` (causal) or ``window - 1``. ``block_q=None``: ``max(window, 16)``.

    With ``clip``, a window wider than ``max(n, m)`` (which sees what ``max(n, m)`` sees)
    and a block longer than ``n`` (one block) are clipped when a single tile would outgrow
    the working-memory bound (``window=10**5`` with ``n=5`` would ask for 10**10 scores).
    Smaller calls keep their tile layout as given.
    """
    a = check_tiled(q, k, v, causal, alignment, scale, block_q=1)
    window = require_int(window, "window", 1)
    if block_q is not None:
        block_q = require_int(block_q, "block_q", 1)
    block = max(window, 16) if block_q is None else block_q
    if clip and block * (block + 2 * (window - 1)) > _GROUP_ELEMENTS:
        n, m = q.shape[-2], k.shape[-2]
        window = min(window, max(n, m, 1))
        block = min(max(window, 16) if block_q is None else block_q, max(n, 1))
    hi = 0 if a.causal else window - 1
    return replace(a, block_q=block, block_k=block, lo=-(window - 1), hi=hi)


def sliding_window_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    *,
    causal: bool = True,
    alignment: str = "bottom_right",
    scale: float | None = None,
    block_q: int = 64,
) -> torch.Tensor:
    r"""Sliding-window attention, blocked and plain: what :func:`sliding_window_attention` does.

    For each block of queries ``[i0, i1)``, take the keys its band can reach, score them,
    hide the ones outside each query's band and apply the softmax::

        keys   = [i0 + offset - (window - 1), i1 - 1 + offset + right]  (clipped to [0, m))
        S      = Q_block K_keys^T * scale,   S[i, j] = -inf outside the band
        O_block = softmax(S) V_keys

    Args: as :func:`sliding_window_attention` (``block_q`` >= 1, default 64).

    Returns:
        ``(..., n, d_v)`` in the dtype of ``q`` (half inputs computed in float32).
    """
    a = _check_window(q, k, v, window, causal, alignment, scale, block_q)
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    dtype, work = q.dtype, work_dtype(q.dtype)
    q, k, v = q.to(work), k.to(work), v.to(work)
    out = q.new_zeros(*a.batch, n, d_v)
    for i0 in range(0, n, a.block_q):
        i1 = min(i0 + a.block_q, n)
        j0, j1 = max(0, i0 + a.offset + a.lo), min(m, i1 - 1 + a.offset + a.hi + 1)
        if j0 >= j1:  # the band of every query in the block is outside the keys
            continue
        s = q[..., i0:i1, :] @ k[..., j0:j1, :].transpose(-2, -1) * a.scale
        i = torch.arange(i0, i1, device=q.device)[:, None]
        j = torch.arange(j0, j1, device=q.device)[None, :]
        rel = j - i - a.offset
        s = s.masked_fill((rel < a.lo) | (rel > a.hi), float("-inf"))
        out[..., i0:i1, :] = softmax(s) @ v[..., j0:j1, :]  # softmax: zeros for an empty row
    return out.to(dtype)


def _band_tiles(q, k, v, a: TiledArgs, work):
    """Each query block with the keys and values its band reaches, as views.

    Returns ``(qb (B, nb, block, d_k), kw (B, nb, span, d_k), vw (B, nb, span, d_v),
    hidden (nb, block, span))``: ``hidden`` marks the tile entries outside the band or
    on padding. Padded key row ``t`` holds key ``t + start`` (zeros outside ``[0, m)``):
    every block's reach is then a window ``[b * block, b * block + span)`` of the padded
    sequence, and ``unfold`` gives all of them as a view, without a copy.
    """
    n, m, block = q.shape[-2], k.shape[-2], a.block_q
    back, right = -a.lo, a.hi  # positions seen before and after the diagonal
    nb, span = -(-n // block), block + back + right  # blocks; keys one block can reach
    start, length = a.offset - back, nb * block + span - block
    front = min(length, max(0, -start))
    first, stop = max(0, start), min(m, start + length)
    seg = max(0, stop - first)

    def padded(t):
        t = flatten_batch(a.batch, t.to(work))[0][:, first : first + seg]
        return F.pad(t, (0, 0, front, length - front - seg))

    qf = flatten_batch(a.batch, q.to(work))[0]
    qb = F.pad(qf, (0, 0, 0, nb * block - n)).reshape(qf.shape[0], nb, block, -1)
    kw = padded(k).unfold(1, span, block).transpose(-1, -2)
    vw = padded(v).unfold(1, span, block).transpose(-1, -2)
    # In tile coordinates query r of block b is position b*block + r, key c is b*block + c + start.
    r = torch.arange(block, device=q.device)[:, None]
    c = torch.arange(span, device=q.device)[None, :]
    rel = (c - back) - r  # key position minus the query's diagonal
    allowed = (rel >= -back) & (rel <= right)  # (block, span), the same for every block
    key_pos = torch.arange(nb, device=q.device)[:, None] * block + c + start  # (nb, span)
    real_key = (key_pos >= 0) & (key_pos < m)  # not padding before key 0 or past key m - 1
    return qb, kw, vw, ~(allowed[None, :, :] & real_key[:, None, :])


def _window_forward(q, k, v, a: TiledArgs, want_lse: bool = False):
    """The band-only forward: ``(out (*batch, n, d_v), lse (B, n) or None)``, work dtype."""
    n, m, d_v, block = q.shape[-2], k.shape[-2], v.shape[-1], a.block_q
    work, bh = work_dtype(q.dtype), math.prod(a.batch)
    if bh * n * d_v == 0 or m == 0:  # nothing to compute, or no keys: zeros
        out = torch.zeros(*a.batch, n, d_v, dtype=work, device=q.device)
        lse = torch.full((bh, n), float("-inf"), dtype=work, device=q.device)
        return out, (lse if want_lse else None)
    qb, kw, vw, hidden = _band_tiles(q, k, v, a, work)
    nb, span = kw.shape[1], kw.shape[2]
    out = torch.empty(bh, nb, block, d_v, dtype=work, device=q.device)
    lse = torch.empty(bh, nb, block, dtype=work, device=q.device) if want_lse else None
    # Blocks are processed a group at a time, so the working memory (score tiles and the copies
    # matmul makes of the strided key windows) stays bounded whatever n is; only the output grows.
    group = max(1, _GROUP_ELEMENTS // (bh * block * span))
    for g0 in range(0, nb, group):
        g1 = min(g0 + group, nb)
        scores = torch.matmul(qb[:, g0:g1] * a.scale, kw[:, g0:g1].transpose(-1, -2))
        scores.masked_fill_(hidden[g0:g1], float("-inf"))  # (B, G, block, span)
        # Softmax in place. A row with no key in its band (or a padded query row) has max -inf:
        # shift it by 0 instead, and divide its zero sum by 1, so it gives zeros, not NaN.
        row_max = scores.amax(dim=-1, keepdim=True)
        row_max.masked_fill_(row_max == float("-inf"), 0.0)
        scores.sub_(row_max).exp_()
        row_sum = scores.sum(dim=-1, keepdim=True)
        if want_lse:
            lse[:, g0:g1] = (row_max + row_sum.log()).squeeze(-1)
        row_sum.masked_fill_(row_sum == 0, 1.0)
        scores.div_(row_sum)
        torch.matmul(scores, vw[:, g0:g1], out=out[:, g0:g1])
    out = out.reshape(bh, nb * block, d_v)[:, :n].reshape(*a.batch, n, d_v)
    return out, (lse.reshape(bh, nb * block)[:, :n] if want_lse else None)


def sliding_window_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    *,
    causal: bool = True,
    scale: float | None = None,
    block_q: int | None = None,
    alignment: str = "bottom_right",
) -> torch.Tensor:
    r"""Attention on a band of ``window`` keys, computing only the band: O(n * window)::

        S_b = Q_b K_b^T * scale,   S_b[i, j] = -inf outside i's band,   O_b = softmax(S_b) V_b

    for each block ``Q_b`` of ``block_q`` queries and the keys ``K_b, V_b`` its band reaches.

    Query ``i`` sees keys ``j`` with ``i - window < j <= i`` (``causal``) or
    ``|i - j| < window`` (not causal), exactly as dense attention with
    :func:`selfattn.masks.sliding_window_mask` would, but without building the n x m matrix.
    With ``m != n`` keys, ``i`` is replaced by the query's diagonal ``i + offset``
    (``offset = 0`` top-left, ``m - n`` bottom-right).

    How: block ``b`` (queries ``[s, s + B)``, ``B = block_q``) can only reach keys
    ``[s - window + 1, s + B)`` (or up to ``s + B + window - 1``), so each block computes a
    ``B x (B + window - 1)`` tile against a strided *view* of the padded keys, masks the
    out-of-band corners of the tile, and applies the softmax. Work: ``n / B`` tiles of
    ``B (B + window)``, i.e. about ``n (B + window)``: linear in n. Differentiable: when an
    input requires grad the forward saves the output and the row log-sum-exp, and the
    backward recomputes the band tile by tile (FlashAttention-2's Algorithm 2), O(n d)
    extra memory.

    Args:
        q, k, v: ``(..., n, d_k)``, ``(..., m, d_k)``, ``(..., m, d_v)``; batch dims broadcast.
        window: keys each query sees looking back, itself included (>= 1); not causal: the
            same reach forward too. A window beyond ``max(n, m)`` changes nothing.
        causal: only look back.
        scale: defaults to ``1 / sqrt(d_k)``.
        block_q: queries per tile; default ``max(window, 16)`` (any n works, not only
            multiples).
        alignment: ``"bottom_right"`` (default) or ``"top_left"``: where the band's
            diagonal sits when ``n != m`` (see :func:`selfattn.efficient.flash.flash_attention`).

    Returns:
        ``(..., n, d_v)`` in the dtype of ``q``; float16 / bfloat16 inputs are computed in
        float32 (scores, softmax and sums). A query whose band holds no key gets zeros.

    Raises:
        TypeError: bad tensors, or ``window`` / ``block_q`` not an int.
        ValueError: ``window`` or ``block_q`` below 1, shapes that do not fit, tensors on
            different devices, an unknown alignment.
    """
    a = _check_window(q, k, v, window, causal, alignment, scale, block_q, clip=True)
    if needs_grad(q, k, v):  # the forward saves O and lse; the backward recomputes the band
        return Recompute.apply(q, k, v, _window_forward, a)
    return _window_forward(q, k, v, a)[0].to(q.dtype)
