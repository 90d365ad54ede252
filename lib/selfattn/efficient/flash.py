"""FlashAttention in plain PyTorch: tiles, online softmax, no n x m matrix.

Notation: ``n`` queries, ``m`` keys, ``d_k`` and ``d_v`` the head sizes. The forward
pass is FlashAttention-2's (Dao 2023): an outer loop over blocks of queries, an inner
loop over blocks of keys, and for every query row three running quantities, updated
block by block:

* ``mu``: the largest score seen so far (the running maximum),
* ``ell``: the sum of ``exp(score - mu)`` seen so far,
* ``acc``: the *unnormalised* output, ``sum_j exp(s_j - mu) v_j``.

When a new block raises the maximum from ``mu`` to ``mu_new``, everything accumulated
so far is rescaled by ``alpha = exp(mu - mu_new)`` (not by its inverse: FA-2's
Algorithm 1, whose ``m`` is this running maximum, prints
``diag(exp(m_old - m_new))^{-1}``, a typo). Only after the last key block is the output
divided by ``ell``. The working memory is a few tiles of ``block_q x block_k`` scores,
so it does not grow with ``n m``. (``M``, in :mod:`selfattn.efficient.io_model`, is the
fast-memory size; nothing here is called ``M``.)

Two versions: :func:`flash_attention_reference` is that recurrence and nothing else;
:func:`flash_attention` is the optimised CPU version (lazy rescaling, reused buffers)
with a backward pass (FlashAttention-2's Algorithm 2) that recomputes the score tiles
from the saved row log-sum-exp instead of storing the ``n x m`` probabilities.

Causal alignment: with ``n != m`` "causal" needs an anchor. ``"top_left"`` (torch SDPA's
``is_causal``): query ``i`` sees keys ``j <= i``. ``"bottom_right"`` (torch's
``causal_lower_right``, flash-attn >= 2.1, decoding against a cache): the last query
sees the last key, query ``i`` sees ``j <= i + m - n``. A query that sees no key at all
(bottom-right with ``n > m``) gets an output of zeros, never NaN, as everywhere in the
book (and as torch SDPA gives).
"""

from __future__ import annotations

import math

import torch

from .._checks import check_qkv, check_scale, require_bool, require_float, require_int
from ..masks import causal_diagonal

__all__ = ["flash_attention", "flash_attention_reference", "online_softmax_steps"]

# Lazy rescaling. Each query block takes its reference max mu from its first tile, and keeps it
# while the tiles' exp(s - mu) stay moderate: their row sums below this limit (2^64; float32 goes
# to 3e38). A tile that breaks the limit (a score more than ~40 above mu) is recomputed with mu
# raised to the new max and the accumulators rescaled by exp(mu_old - mu_new), as in FA-2. The
# result is the same: the online-softmax identity holds for ANY reference mu, the max only guards
# against overflow. Skipped: a max pass over each tile and the rescale of acc, for almost every
# tile.
_RESCALE_LIMIT = 2.0**64


def _check_attention_args(q, k, v, alignment, scale) -> tuple[tuple[int, ...], int, float]:
    """The checks every tiled kernel starts with: ``(batch shape, diagonal offset, scale)``."""
    batch = check_qkv(q, k, v)  # also: one device for q, k and v
    offset = causal_diagonal(q.shape[-2], k.shape[-2], alignment)
    return batch, offset, check_scale(scale, q.shape[-1])


def _flatten_batch(batch: tuple[int, ...], *tensors: torch.Tensor) -> list[torch.Tensor]:
    """``(..., L, d)`` tensors broadcast to ``batch`` and flattened to ``(B, L, d)``.

    Autograd sees the broadcast as expand + reshape, and sums the gradients back for us.
    """
    return [
        t.expand(*batch, *t.shape[-2:]).reshape(math.prod(batch), *t.shape[-2:]) for t in tensors
    ]


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    # Half inputs are computed in float32, as the GPU kernels accumulate in float32.
    return torch.float64 if dtype == torch.float64 else torch.float32


def flash_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    alignment: str = "top_left",
    scale: float | None = None,
    block_q: int = 64,
    block_k: int = 64,
) -> torch.Tensor:
    r"""FlashAttention's forward pass: the bare recurrence below, and nothing else.

    For each block of queries ``Q_i`` and then each block of keys and values ``K_j, V_j``::

        S     = Q_i K_j^T * scale
        mu'   = max(mu, rowmax(S))
        P     = exp(S - mu')
        ell   = exp(mu - mu') ell + rowsum(P)
        acc   = exp(mu - mu') acc + P V_j
        mu    = mu'

    and after the last key block ``O_i = acc / ell``. Slow (a fresh tile per step, a
    max pass and a rescale every time) and meant to be read; :func:`flash_attention`
    is tested against it.

    Args:
        q: ``(..., n, d_k)``; k: ``(..., m, d_k)``; v: ``(..., m, d_v)`` (batch dims broadcast).
        causal: mask the keys after each query's diagonal, anchored by ``alignment``.
        alignment: ``"top_left"`` (query ``i`` sees ``j <= i``) or ``"bottom_right"``
            (``j <= i + m - n``).
        scale: multiplies the scores; defaults to ``1 / sqrt(d_k)``.
        block_q, block_k: the tile sizes (any values >= 1).

    Returns:
        ``(..., n, d_v)`` in the dtype of ``q`` (half inputs computed in float32); rows
        that see no key are zeros.
    """
    causal = require_bool(causal, "causal")
    batch, offset, scale = _check_attention_args(q, k, v, alignment, scale)
    block_q, block_k = require_int(block_q, "block_q", 1), require_int(block_k, "block_k", 1)
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    dtype, work = q.dtype, _work_dtype(q.dtype)
    q, k, v = q.to(work), k.to(work), v.to(work)
    out = q.new_zeros(*batch, n, d_v)
    # The paper starts mu at -inf; the lowest finite float does the same job and keeps a row
    # that has seen no key yet at exp(-inf - mu) = 0 instead of exp(-inf + inf) = NaN.
    lowest = torch.finfo(work).min
    for i0 in range(0, n, block_q):
        i1 = min(i0 + block_q, n)
        q_i = q[..., i0:i1, :]
        mu = q.new_full((*batch, i1 - i0, 1), lowest)
        ell = q.new_zeros(*batch, i1 - i0, 1)
        acc = q.new_zeros(*batch, i1 - i0, d_v)
        for j0 in range(0, m, block_k):
            j1 = min(j0 + block_k, m)
            s = q_i @ k[..., j0:j1, :].transpose(-2, -1) * scale
            if causal:
                i = torch.arange(i0, i1, device=q.device)[:, None]
                j = torch.arange(j0, j1, device=q.device)[None, :]
                s = s.masked_fill(j > i + offset, float("-inf"))
            mu_new = torch.maximum(mu, s.amax(dim=-1, keepdim=True))
            p = torch.exp(s - mu_new)
            alpha = torch.exp(mu - mu_new)
            ell = alpha * ell + p.sum(dim=-1, keepdim=True)
            acc = alpha * acc + p @ v[..., j0:j1, :]
            mu = mu_new
        # ell >= 1 for a row that saw a key (its max contributes exp(0)); ell = 0 only for a
        # row that saw none, whose output is defined as 0.
        out[..., i0:i1, :] = acc / torch.where(ell > 0, ell, 1.0)
    return out.to(dtype)


def _tile_scores(qa, kt, s_buf, qs, qe, ks, ke, causal, offset):
    """q k^T - mu for one tile (the -mu rides in the matmul as qa's extra column)."""
    s = (
        torch.bmm(qa, kt[:, :, ks:ke], out=s_buf)
        if s_buf is not None
        else torch.bmm(qa, kt[:, :, ks:ke])
    )
    if causal and ke - 1 > qs + offset:  # the tile crosses the diagonal: mask it
        i = torch.arange(qs, qe, device=qa.device)[:, None]
        j = torch.arange(ks, ke, device=qa.device)[None, :]
        s.masked_fill_(j > i + offset, float("-inf"))
    return s


def _flash_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    batch: tuple[int, ...],
    *,
    scale: float,
    causal: bool,
    offset: int,
    block_q: int,
    block_k: int,
    want_lse: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The optimised forward: ``(out (B, n, d_v), lse (B, n) or None)`` in the work dtype."""
    n, m, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    work = _work_dtype(q.dtype)
    # Flatten the batch dimensions so every tile product is one batched matmul (bmm).
    bh = math.prod(batch)
    qf = (q.to(work) * scale).expand(*batch, n, d_k).reshape(bh, n, d_k)
    out = torch.empty(bh, n, d_v, dtype=work, device=q.device)
    lse = torch.full((bh, n), float("-inf"), dtype=work, device=q.device) if want_lse else None
    if out.numel() == 0 or m == 0:  # no keys: zeros, as torch SDPA gives
        return out.zero_(), lse
    # Keys get an extra column of ones and each query block an extra column holding -mu, so the
    # tile product [q | -mu] @ [k | 1]^T = q k^T - mu already has the running max subtracted:
    # one pass over the tile saved (the CPU analogue of keeping work inside the matmul).
    k1 = torch.cat(
        [k.to(work).expand(*batch, m, d_k).reshape(bh, m, d_k), k.new_ones(bh, m, 1, dtype=work)],
        dim=-1,
    )
    kt = k1.transpose(1, 2)  # (B, d_k + 1, m), a view
    vf = v.to(work).expand(*batch, m, d_v).reshape(bh, m, d_v)
    neg_inf = float("-inf")
    # Reused buffers: a fresh multi-megabyte tile per step would cost page faults every time.
    s_buf = torch.empty(bh, min(block_q, n), min(block_k, m), dtype=work, device=q.device)
    qa_buf = torch.empty(bh, min(block_q, n), d_k + 1, dtype=work, device=q.device)
    # Only bottom-right with n > m has rows that see no key (every other row sees key 0).
    may_be_empty = causal and offset < 0

    for qs in range(0, n, block_q):  # outer loop: one block of queries at a time (FA-2 order)
        qe = min(qs + block_q, n)
        rows = qe - qs
        qa = qa_buf[:, :rows]
        qa[..., :d_k] = qf[:, qs:qe]
        qa[..., d_k:] = 0.0  # no reference max yet: the first tile gives raw scores
        mu = None  # (B, rows, 1) reference max: every exp below is exp(score - mu)
        ell = torch.zeros((bh, rows, 1), dtype=work, device=q.device)
        acc = torch.zeros((bh, rows, d_v), dtype=work, device=q.device)
        # Causal: keys beyond the block's last diagonal are masked for every row, so skip them.
        k_end = max(0, min(m, qe + offset)) if causal else m
        for ks in range(0, k_end, block_k):  # inner loop: one block of keys and values
            ke = min(ks + block_k, k_end)
            full = rows == s_buf.shape[1] and ke - ks == s_buf.shape[2]

            s = _tile_scores(qa, kt, s_buf if full else None, qs, qe, ks, ke, causal, offset)
            if first := mu is None:  # first tile (holds key 0): its row max is the reference
                mu = s.amax(dim=-1, keepdim=True)
                if may_be_empty:  # a row that sees no key: any finite reference will do
                    mu.masked_fill_(mu == neg_inf, 0.0)
                s.sub_(mu)
                qa[..., d_k:] = -mu
            p = s.exp_()  # in place: the tile's exp(s - mu)
            row_sum = p.sum(dim=-1, keepdim=True)
            if not first and not bool(row_sum.max() <= _RESCALE_LIMIT):  # rare: the max jumped
                s = _tile_scores(qa, kt, s_buf if full else None, qs, qe, ks, ke, causal, offset)
                delta = s.amax(dim=-1, keepdim=True).clamp_(min=0.0)  # how far each max rose
                s.sub_(delta)
                alpha = torch.exp(-delta)  # = exp(mu_old - mu_new): rescale what was accumulated
                ell.mul_(alpha)
                acc.mul_(alpha)
                mu = mu + delta
                qa[..., d_k:] = -mu
                p = s.exp_()
                row_sum = p.sum(dim=-1, keepdim=True)
            ell.add_(row_sum)  # ell <- alpha ell + rowsum(p)
            acc.baddbmm_(p, vf[:, ks:ke])  # O <- alpha O + p v
        if want_lse:  # log sum_j exp(s_j) = mu + log(ell); -inf for a row that saw no key
            lse[:, qs:qe] = (ell.log() + (0.0 if mu is None else mu)).squeeze(-1)
        if may_be_empty or mu is None:  # ell = 0 only where acc = 0: give 0, not 0/0
            ell.masked_fill_(ell == 0, 1.0)
        torch.div(acc, ell, out=out[:, qs:qe])
    return out, lse


def _band_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    d_out: torch.Tensor,
    *,
    scale: float,
    offset: int,
    lo: int | None,
    hi: int | None,
    block_q: int,
    block_k: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashAttention-2's backward pass (Algorithm 2) for 3-d ``(B, n, d)`` work-dtype tensors.

    Key ``j`` is visible to query ``i`` when ``lo <= j - (i + offset) <= hi`` (``None``: no
    bound), which covers full, causal and sliding-window attention. Nothing of size n x m is
    kept: each tile's probabilities are recomputed from the saved ``lse`` as
    ``P = exp(S - lse)``, and with ``D = rowsum(dO * O)``::

        dV_j += P^T dO_i,   dP = dO_i V_j^T,   dS = P * (dP - D_i),
        dQ_i += scale dS K_j,   dK_j += scale dS^T Q_i

    Extra memory: ``D``, the gradients and one tile, O(n d + block_q block_k).
    """
    n, m = q.shape[-2], k.shape[-2]
    delta = (d_out * out).sum(dim=-1, keepdim=True)  # D_i = rowsum(dO_i * O_i) = sum_j P dP
    # A row that saw no key has lse = -inf; +inf makes its P = exp(S - inf) = 0, not NaN.
    lse = torch.where(torch.isfinite(lse), lse, float("inf")).unsqueeze(-1)
    q_scaled = q * scale  # S = (scale Q) K^T, and dK_j += dS^T (scale Q_i)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for ks in range(0, m, block_k):  # outer loop over key blocks: dK_j, dV_j stay local
        ke = min(ks + block_k, m)
        k_j, v_j = k[:, ks:ke], v[:, ks:ke]
        dk_j, dv_j = dk[:, ks:ke], dv[:, ks:ke]
        # The queries that see any key of this block: lo <= j - i - offset <= hi for some j.
        q_start = 0 if hi is None else max(0, ks - offset - hi)
        q_stop = n if lo is None else min(n, ke - 1 - offset - lo + 1)
        for qs in range(q_start, q_stop, block_q):
            qe = min(qs + block_q, q_stop)
            q_i, do_i = q_scaled[:, qs:qe], d_out[:, qs:qe]
            s = torch.bmm(q_i, k_j.transpose(1, 2))
            # Mask only the tiles that cross an edge of the band (j - i - offset in [lo, hi]).
            rel_min, rel_max = ks - (qe - 1) - offset, ke - 1 - qs - offset
            if (lo is not None and rel_min < lo) or (hi is not None and rel_max > hi):
                rel = (
                    torch.arange(ks, ke, device=q.device)[None, :]
                    - torch.arange(qs, qe, device=q.device)[:, None]
                    - offset
                )
                hidden = torch.zeros_like(rel, dtype=torch.bool)
                if lo is not None:
                    hidden |= rel < lo
                if hi is not None:
                    hidden |= rel > hi
                s.masked_fill_(hidden, float("-inf"))
            p = s.sub_(lse[:, qs:qe]).exp_()  # the tile of P, recomputed (in place)
            dv_j.add_(torch.bmm(p.transpose(1, 2), do_i))
            ds = torch.bmm(do_i, v_j.transpose(1, 2)).sub_(delta[:, qs:qe]).mul_(p)  # P(dP - D)
            dq[:, qs:qe].add_(torch.bmm(ds, k_j), alpha=scale)
            dk_j.add_(torch.bmm(ds.transpose(1, 2), q_i))
    return dq, dk, dv


class _RecomputingAttention(torch.autograd.Function):
    """A tiled kernel with the shared backward, FA-2's Algorithm 2 (:func:`_band_backward`).

    A subclass names its forward ``kernel(q, k, v, batch, *, want_lse, **options)`` (returning
    ``(out, lse)`` in the work dtype) and ``band(options)``, the keyword arguments of
    :func:`_band_backward` that describe which keys each query sees.
    """

    @classmethod
    def run(cls, q, k, v, batch: tuple[int, ...], **options) -> torch.Tensor:
        """``(..., n, d_v)``: the kernel alone without gradients, else through autograd."""
        n, d_v = q.shape[-2], v.shape[-1]
        if not _needs_grad(q, k, v):
            out, _ = cls.kernel(q, k, v, batch, **options)
            return out.reshape(*batch, n, d_v).to(q.dtype)
        q3, k3, v3 = _flatten_batch(batch, q, k, v)
        return cls.apply(q3, k3, v3, cls, options).reshape(*batch, n, d_v)

    @staticmethod
    def forward(ctx, q, k, v, kind, options):
        out, lse = kind.kernel(q, k, v, (q.shape[0],), want_lse=True, **options)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.band = kind.band(options)
        return out.to(q.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        work = out.dtype
        grads = _band_backward(
            q.to(work), k.to(work), v.to(work), out, lse, d_out.to(work), **ctx.band
        )
        return (*(g.to(t.dtype) for g, t in zip(grads, (q, k, v))), None, None)


class _FlashAttention(_RecomputingAttention):
    """Forward: the optimised kernel, saving O and the row log-sum-exp. Backward: Algorithm 2."""

    kernel = staticmethod(_flash_forward)

    @staticmethod
    def band(options: dict) -> dict:
        hi = 0 if options["causal"] else None
        keep = ("scale", "offset", "block_q", "block_k")
        return dict(lo=None, hi=hi, **{key: options[key] for key in keep})


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    block_q: int = 256,
    block_k: int = 512,
    alignment: str = "top_left",
) -> torch.Tensor:
    r"""softmax(q k^T * scale) v computed tile by tile with the online softmax; differentiable.

    Equal to ``torch.nn.functional.scaled_dot_product_attention(q, k, v,
    is_causal=causal, scale=scale)`` (to about 1e-6 in float32), but the n x m score
    matrix never exists: only ``block_q x block_k`` tiles of it, one at a time. The
    same holds for the gradients: when an input requires grad, the forward saves only
    the output and the row log-sum-exp, and the backward pass (FlashAttention-2's
    Algorithm 2) recomputes each tile of probabilities, so training needs O(n d) extra
    memory, not O(n m). Without gradients the forward runs alone.

    Args:
        q: queries ``(..., n, d_k)``.
        k: keys ``(..., m, d_k)``.
        v: values ``(..., m, d_v)``; the batch dimensions ``...`` broadcast.
        causal: each query sees only the keys up to its diagonal. Key blocks that lie
            entirely past the diagonal are skipped, not computed and masked.
        scale: multiplies the scores; defaults to ``1 / sqrt(d_k)``.
        block_q: rows of queries per outer-loop step. Any value >= 1; ``n`` need
            not be a multiple of it (the last block is shorter).
        block_k: keys per inner-loop step; same rules.
        alignment: where the causal diagonal sits when ``n != m``: ``"top_left"``
            (query ``i`` sees ``j <= i``, SDPA's ``is_causal``) or ``"bottom_right"``
            (``j <= i + m - n``, torch's ``causal_lower_right``; the one for decoding
            against a cache). Ignored when not ``causal``.

    Returns:
        ``(..., n, d_v)`` in the dtype of ``q``. float16 / bfloat16 inputs are
        processed in float32 tiles (as the GPU kernels accumulate in float32). A
        query that sees no key (bottom-right with ``n > m``, or ``m = 0``) gives zeros.

    Raises:
        TypeError: non-float or mixed-dtype tensors, block sizes that are not ints, a
            scale that is not a number.
        ValueError: shapes that do not fit together, tensors on different devices,
            block sizes below 1, an unknown alignment.
    """
    causal = require_bool(causal, "causal")
    batch, offset, scale = _check_attention_args(q, k, v, alignment, scale)
    block_q, block_k = require_int(block_q, "block_q", 1), require_int(block_k, "block_k", 1)
    return _FlashAttention.run(
        q, k, v, batch, scale=scale, causal=causal, offset=offset, block_q=block_q, block_k=block_k
    )


def online_softmax_steps(scores: torch.Tensor, values: torch.Tensor, block: int) -> list[dict]:
    """The online-softmax recurrence for ONE query, block by block, with every intermediate kept.

    For teaching (the book's step-by-step run and explorer): after block ``t`` the
    record holds the running max ``m`` (the dict key; ``mu`` in this module's
    docstrings), running sum ``l``, unnormalised output ``acc``, the rescale factor
    ``alpha = exp(mu_old - mu_new)`` applied to the old ``l`` and ``acc``, and
    ``out = acc / l``, the softmax attention output over the keys seen so far (zeros
    while every score seen is ``-inf``, i.e. masked).

    Args:
        scores: ``(m,)`` the query's (already scaled) scores against m keys.
        values: ``(m, d_v)`` the values.
        block: keys per step (>= 1).

    Returns:
        One dict per block, with keys ``start, stop, m, l, alpha, acc, out``
        (floats and float64 tensors).
    """
    block = require_int(block, "block", 1)
    require_float(scores, "scores")
    require_float(values, "values")
    if scores.dim() != 1 or values.dim() != 2 or values.shape[0] != scores.shape[0]:
        raise ValueError(
            f"online_softmax_steps needs scores (m,) and values (m, d_v), got "
            f"{tuple(scores.shape)} and {tuple(values.shape)}"
        )
    s_all, v_all = scores.double().cpu(), values.double().cpu()
    mu, ell = float("-inf"), 0.0
    acc = torch.zeros(values.shape[1], dtype=torch.float64)
    steps = []
    for start in range(0, s_all.shape[0], block):
        s, vb = s_all[start : start + block], v_all[start : start + block]
        mu_new = max(mu, float(s.max()))
        if mu_new == float("-inf"):  # every score so far masked: nothing to accumulate yet
            alpha, p = 0.0, torch.zeros_like(s)
        else:
            alpha = math.exp(mu - mu_new) if mu != float("-inf") else 0.0
            p = torch.exp(s - mu_new)
        ell = alpha * ell + float(p.sum())
        acc = alpha * acc + p @ vb
        mu = mu_new
        steps.append(
            dict(
                start=start,
                stop=start + s.shape[0],
                m=mu,
                l=ell,
                alpha=alpha,
                acc=acc.clone(),
                out=acc / ell if ell > 0 else torch.zeros_like(acc),
            )
        )
    return steps
