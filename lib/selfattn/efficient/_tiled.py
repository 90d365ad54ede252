"""The framework the tiled kernels share: checked arguments, work dtype, and one backward.

:func:`flash_attention`, :func:`sliding_window_attention` and the tiled kernels that
follow them take the same arguments (``q``, ``k``, ``v``, ``causal``, ``alignment``,
``scale`` and the tile sizes ``block_q x block_k``), checked once here by
:func:`check_tiled`. When an input needs a gradient they run through
:class:`Recompute`: its forward saves only the output ``O`` and the row log-sum-exp,
and its backward is FlashAttention-2's Algorithm 2 (:func:`band_backward`), which
recomputes each tile of probabilities instead of storing the ``n x m`` matrix.

Which keys a query sees is a *band*: key ``j`` is visible to query ``i`` when
``lo <= j - (i + offset) <= hi`` (``None``: no bound). Full attention has no bound,
causal attention ``hi = 0``, a sliding window of ``w`` keys ``lo = -(w - 1)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._checks import (
    require_bool,
    require_int,
    require_qkv,
    require_scale,
)
from ..masks import causal_diagonal

__all__: list[str] = []


@dataclass(frozen=True)
class TiledArgs:
    """The checked arguments of a tiled kernel.

    Attributes:
        batch: the broadcast batch shape of q, k and v.
        causal: whether the band stops at the diagonal.
        offset: the diagonal: query ``i``'s is key ``i + offset`` (0 top-left, ``m - n``
            bottom-right; 0 when not causal).
        scale: multiplies the scores.
        block_q, block_k: the tile, queries x keys.
        lo, hi: the band (see the module docstring).
    """

    batch: tuple[int, ...]
    causal: bool
    offset: int
    scale: float
    block_q: int
    block_k: int
    lo: int | None = None
    hi: int | None = None


def check_tiled(q, k, v, causal, alignment, scale, **blocks) -> TiledArgs:
    """Check a tiled kernel's arguments once; ``blocks`` are its tile sizes, ints >= 1.

    Without ``block_k`` the key tile is the query tile (a band kernel's key tile is
    set by its band, not by the caller).
    """
    causal = require_bool(causal, "causal")
    batch = require_qkv(q, k, v)  # also: one device for q, k and v
    offset = causal_diagonal(q.shape[-2], k.shape[-2], alignment)
    scale = require_scale(scale, q.shape[-1])
    sizes = {name: require_int(size, name, 1) for name, size in blocks.items()}
    block_q = sizes["block_q"]
    block_k = sizes.get("block_k", block_q)
    hi = 0 if causal else None
    return TiledArgs(batch, causal, offset, scale, block_q, block_k, hi=hi)


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; everything else (half inputs too) is computed in float32.

    As the GPU kernels accumulate half inputs in float32.
    """
    return torch.float64 if dtype == torch.float64 else torch.float32


def flatten_batch(batch: tuple[int, ...], *tensors: torch.Tensor) -> list[torch.Tensor]:
    """``(..., L, d)`` tensors broadcast to ``batch`` and flattened to ``(B, L, d)``."""
    return [
        t.expand(*batch, *t.shape[-2:]).reshape(math.prod(batch), *t.shape[-2:]) for t in tensors
    ]


def needs_grad(*tensors: torch.Tensor) -> bool:
    """Whether autograd will want a backward pass through these tensors."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _band_hidden(qs, qe, ks, ke, a: TiledArgs, device) -> torch.Tensor | None:
    """The entries of tile ``[qs, qe) x [ks, ke)`` outside the band (None: the tile is inside)."""
    rel_min, rel_max = ks - (qe - 1) - a.offset, ke - 1 - qs - a.offset
    if not ((a.lo is not None and rel_min < a.lo) or (a.hi is not None and rel_max > a.hi)):
        return None
    rel = (
        torch.arange(ks, ke, device=device)[None, :]
        - torch.arange(qs, qe, device=device)[:, None]
        - a.offset
    )
    hidden = torch.zeros_like(rel, dtype=torch.bool)
    if a.lo is not None:
        hidden |= rel < a.lo
    if a.hi is not None:
        hidden |= rel > a.hi
    return hidden


def band_backward(q, k, v, out, lse, d_out, a: TiledArgs):
    """FlashAttention-2's backward pass (Algorithm 2) for ``(B, n, d)`` work-dtype tensors.

    Nothing of size n x m is kept: each tile's probabilities are recomputed from the
    saved ``lse`` as ``P = exp(S - lse)``, and with ``D = rowsum(dO * O)``::

        dV_j += P^T dO_i,   dP = dO_i V_j^T,   dS = P * (dP - D_i),
        dQ_i += scale dS K_j,   dK_j += scale dS^T Q_i

    Only the keys of ``a``'s band are visited. Extra memory: ``D``, the gradients and one
    tile, O(n d + block_q block_k).
    """
    n, m = q.shape[-2], k.shape[-2]
    delta = (d_out * out).sum(dim=-1, keepdim=True)  # D_i = rowsum(dO_i * O_i) = sum_j P dP
    # A row that saw no key has lse = -inf; +inf makes its P = exp(S - inf) = 0, not NaN.
    lse = torch.where(torch.isfinite(lse), lse, float("inf")).unsqueeze(-1)
    q_scaled = q * a.scale  # S = (scale Q) K^T, and dK_j += dS^T (scale Q_i)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for ks in range(0, m, a.block_k):  # outer loop over key blocks: dK_j, dV_j stay local
        ke = min(ks + a.block_k, m)
        k_j, v_j = k[:, ks:ke], v[:, ks:ke]
        dk_j, dv_j = dk[:, ks:ke], dv[:, ks:ke]
        # The queries that see any key of this block: lo <= j - i - offset <= hi for some j.
        q_start = 0 if a.hi is None else max(0, ks - a.offset - a.hi)
        q_stop = n if a.lo is None else min(n, ke - 1 - a.offset - a.lo + 1)
        for qs in range(q_start, q_stop, a.block_q):
            qe = min(qs + a.block_q, q_stop)
            q_i, do_i = q_scaled[:, qs:qe], d_out[:, qs:qe]
            s = torch.bmm(q_i, k_j.transpose(1, 2))
            hidden = _band_hidden(qs, qe, ks, ke, a, q.device)  # only tiles on a band edge
            if hidden is not None:
                s.masked_fill_(hidden, float("-inf"))
            p = s.sub_(lse[:, qs:qe]).exp_()  # the tile of P, recomputed (in place)
            dv_j.add_(torch.bmm(p.transpose(1, 2), do_i))
            ds = torch.bmm(do_i, v_j.transpose(1, 2)).sub_(delta[:, qs:qe]).mul_(p)  # P(dP - D)
            dq[:, qs:qe].add_(torch.bmm(ds, k_j), alpha=a.scale)
            dk_j.add_(torch.bmm(ds.transpose(1, 2), q_i))
    return dq, dk, dv


class Recompute(torch.autograd.Function):
    """A tiled kernel with the backward that recomputes its tiles (:func:`band_backward`).

    ``Recompute.apply(q, k, v, kernel, a)``: ``kernel(q, k, v, a, want_lse=True)`` returns
    ``(out (*batch, n, d_v), lse (B, n))`` in the work dtype. The forward saves q, k, v
    (flattened to ``(B, L, d)``), the output and ``lse``: O(n d) memory, never P.
    """

    @staticmethod
    def forward(ctx, q, k, v, kernel, a: TiledArgs):
        out, lse = kernel(q, k, v, a, want_lse=True)
        q3, k3, v3 = flatten_batch(a.batch, q, k, v)
        ctx.save_for_backward(q3, k3, v3, out.reshape(-1, *out.shape[-2:]), lse)
        ctx.a, ctx.shapes = a, (q.shape, k.shape, v.shape)
        return out.to(q.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        work = out.dtype
        d_out = d_out.reshape(out.shape).to(work)
        grads = band_backward(q.to(work), k.to(work), v.to(work), out, lse, d_out, ctx.a)
        # Back to each input's own shape: broadcast batch dimensions are summed over.
        return (
            *(
                g.to(t.dtype).reshape(*ctx.a.batch, *g.shape[-2:]).sum_to_size(shape)
                for g, t, shape in zip(grads, (q, k, v), ctx.shapes)
            ),
            None,
            None,
        )
