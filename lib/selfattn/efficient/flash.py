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

Causal alignment: with ``n != m`` "causal" needs an anchor. ``"bottom_right"``, the
default here as everywhere in the library (``mask="causal"`` included; torch's
``causal_lower_right``, flash-attn >= 2.1, decoding against a cache): the last query sees
the last key, query ``i`` sees ``j <= i + m - n``. ``"top_left"`` (torch SDPA's
``is_causal``): query ``i`` sees keys ``j <= i``. A query that sees no key at all
(bottom-right with ``n > m``) gets an output of zeros, never NaN, as everywhere in the
book (and as torch SDPA gives).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._checks import require_float, require_int
from ..attention import Kernel, register_kernel
from ._tiled import Recompute, TiledArgs, check_tiled, flatten_batch, needs_grad, work_dtype

__all__ = ["flash_attention", "flash_attention_reference", "online_softmax_steps"]

# Lazy rescaling. Each query block takes its reference max mu from its first tile, and keeps it
# while the tiles' exp(s - mu) stay moderate: their row sums below this limit (2^64; float32 goes
# to 3e38). A tile that breaks the limit (a score ~44 above mu) is recomputed with mu raised to
# the new max and the accumulators rescaled by exp(mu_old - mu_new), as in FA-2. The
# result is the same: the online-softmax identity holds for ANY reference mu, the max only guards
# against overflow. Skipped: a max pass over each tile and the rescale of acc, for almost every
# tile.
_RESCALE_LIMIT = 2.0**64

# Base 2, as FlashAttention's kernels (and the Triton tutorial) compute it: exp(x) = 2^(x log2 e),
# so the queries are scaled by log2(e) once and every tile takes exp2, which torch vectorises
# about 4x faster on the CPU than exp (float32, within an ulp). mu is then in base-2 units and
# the natural log-sum-exp is ln 2 * (mu + log2 ell).
_LOG2_E = math.log2(math.e)


# fmt: off
def flash_attention_reference(
    q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False,
    alignment: str = "bottom_right", scale: float | None = None,
    block_q: int = 64, block_k: int = 64,
) -> Tensor:
    """FlashAttention's forward pass, the bare recurrence, written to be read.

    The arguments and the result are :func:`flash_attention`'s (default tiles
    64 x 64). A fresh tile per step, a max pass and a rescale every time: slow,
    and :func:`flash_attention` is tested against it.
    """
    a = check_tiled(q, k, v, causal, alignment, scale,
                    block_q=block_q, block_k=block_k)
    n, m, dtype = q.shape[-2], k.shape[-2], q.dtype
    work = work_dtype(dtype)  # half inputs: computed in float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    out = q.new_zeros(*a.batch, n, v.shape[-1])
    for i0 in range(0, n, a.block_q):  # a block of queries Q_i
        q_i = q[..., i0 : i0 + a.block_q, :]
        i = torch.arange(i0, i0 + q_i.shape[-2], device=q.device)[:, None]
        # The lowest float, not -inf: exp(mu - mu') is then 0, not NaN,
        # for a row that has seen no key yet.
        mu = q.new_full((*q_i.shape[:-1], 1), torch.finfo(work).min)
        ell = torch.zeros_like(mu)
        acc = torch.zeros_like(out[..., i0 : i0 + a.block_q, :])
        for j0 in range(0, m, a.block_k):  # a block of keys K_j, values V_j
            k_j = k[..., j0 : j0 + a.block_k, :]
            v_j = v[..., j0 : j0 + a.block_k, :]
            s = q_i @ k_j.transpose(-2, -1) * a.scale
            if a.causal:
                j = torch.arange(j0, j0 + s.shape[-1], device=q.device)
                s = s.masked_fill(j > i + a.offset, float("-inf"))
            mu_new = torch.maximum(mu, s.amax(dim=-1, keepdim=True))
            p = torch.exp(s - mu_new)
            alpha = torch.exp(mu - mu_new)
            ell = alpha * ell + p.sum(dim=-1, keepdim=True)
            acc = alpha * acc + p @ v_j
            mu = mu_new
        # ell = 0 only in a row that saw no key: its output is 0.
        ell = torch.where(ell > 0, ell, 1.0)
        out[..., i0 : i0 + a.block_q, :] = acc / ell
    return out.to(dtype)
# fmt: on


def _tile_scores(qa, kt, s_buf, qs, qe, ks, ke, a: TiledArgs):
    """q k^T log2(e) - mu for one tile (the -mu rides in the matmul as qa's extra column)."""
    s = (
        torch.bmm(qa, kt[:, :, ks:ke], out=s_buf)
        if s_buf is not None
        else torch.bmm(qa, kt[:, :, ks:ke])
    )
    if a.causal and ke - 1 > qs + a.offset:  # the tile crosses the diagonal: mask it
        i = torch.arange(qs, qe, device=qa.device)[:, None]
        j = torch.arange(ks, ke, device=qa.device)[None, :]
        s.masked_fill_(j > i + a.offset, float("-inf"))
    return s


def _keys_with_ones(k, v, a: TiledArgs, work):
    """``(k^T with a row of ones (B, d_k + 1, m), v (B, m, d_v))`` in the work dtype.

    Each query block gets an extra column holding ``-mu``, so the tile product
    ``[q | -mu] @ [k | 1]^T = q k^T - mu`` already has the running max subtracted: one
    pass over the tile saved (the CPU analogue of keeping work inside the matmul).
    """
    k3, v3 = flatten_batch(a.batch, k.to(work), v.to(work))
    ones = k3.new_ones(*k3.shape[:-1], 1)
    return torch.cat([k3, ones], dim=-1).transpose(1, 2), v3


def _flash_forward(q, k, v, a: TiledArgs, want_lse: bool = False):
    """The optimised forward: ``(out (*batch, n, d_v), lse (B, n) or None)``, work dtype."""
    n, m, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    work = work_dtype(q.dtype)
    # every tile: one batched matmul, in base-2 units (see _LOG2_E)
    qf = flatten_batch(a.batch, q.to(work) * (a.scale * _LOG2_E))[0]
    bh = qf.shape[0]
    out = torch.zeros(bh, n, d_v, dtype=work, device=q.device)
    lse = torch.full((bh, n), float("-inf"), dtype=work, device=q.device) if want_lse else None
    if out.numel() == 0 or m == 0:  # no keys: zeros, as torch SDPA gives
        return out.reshape(*a.batch, n, d_v), lse
    kt, vf = _keys_with_ones(k, v, a, work)
    # Reused buffers: a fresh multi-megabyte tile per step would cost page faults every time.
    s_buf = torch.empty(bh, min(a.block_q, n), min(a.block_k, m), dtype=work, device=q.device)
    qa_buf = torch.empty(bh, min(a.block_q, n), d_k + 1, dtype=work, device=q.device)
    # Only bottom-right with n > m has rows that see no key (every other row sees key 0).
    may_be_empty = a.causal and a.offset < 0
    for qs in range(0, n, a.block_q):  # outer loop: one block of queries at a time (FA-2 order)
        qe = min(qs + a.block_q, n)
        qa = qa_buf[:, : qe - qs]
        qa[..., :d_k] = qf[:, qs:qe]
        qa[..., d_k:] = 0.0  # no reference max yet: the first tile gives raw scores
        mu = None  # (B, rows, 1) reference max: every exp2 below is 2^(score - mu)
        ell = torch.zeros((bh, qe - qs, 1), dtype=work, device=q.device)
        acc = torch.zeros((bh, qe - qs, d_v), dtype=work, device=q.device)
        # Causal: keys beyond the block's last diagonal are masked for every row, so skip them.
        k_end = max(0, min(m, qe + a.offset)) if a.causal else m
        for ks in range(0, k_end, a.block_k):  # inner loop: one block of keys and values
            ke = min(ks + a.block_k, k_end)
            full = qe - qs == s_buf.shape[1] and ke - ks == s_buf.shape[2]
            tile = (qa, kt, s_buf if full else None, qs, qe, ks, ke, a)
            s = _tile_scores(*tile)
            if first := mu is None:  # first tile (holds key 0): its row max is the reference
                mu = s.amax(dim=-1, keepdim=True)
                if may_be_empty:  # a row that sees no key: any finite reference will do
                    mu.masked_fill_(mu == float("-inf"), 0.0)
                s.sub_(mu)
                qa[..., d_k:] = -mu
            p = s.exp2_()  # in place: the tile's 2^(s - mu) = exp(natural score - natural mu)
            row_sum = p.sum(dim=-1, keepdim=True)
            if not first and not bool(row_sum.max() <= _RESCALE_LIMIT):  # rare: the max jumped
                mu, p = _raise_max(tile, mu, ell, acc)
                row_sum = p.sum(dim=-1, keepdim=True)
            ell.add_(row_sum)  # ell <- alpha ell + rowsum(p)
            acc.baddbmm_(p, vf[:, ks:ke])  # acc <- alpha acc + p v
        if want_lse:  # log sum_j exp(s_j) = ln 2 (mu + log2 ell); -inf for a row that saw no key
            lse[:, qs:qe] = (ell.log2() + (0.0 if mu is None else mu)).squeeze(-1) * math.log(2)
        if may_be_empty or mu is None:  # ell = 0 only where acc = 0: give 0, not 0/0
            ell.masked_fill_(ell == 0, 1.0)
        torch.div(acc, ell, out=out[:, qs:qe])
    return out.reshape(*a.batch, n, d_v), lse


def _raise_max(tile, mu, ell, acc):
    """The rare rescale (see ``_RESCALE_LIMIT``): ``(mu_new, 2^(s - mu_new))`` for the tile.

    Rescales ``ell`` and ``acc`` in place by ``alpha = 2^(mu - mu_new)``, and writes the
    new ``-mu`` into the query block's extra column.
    """
    qa = tile[0]
    s = _tile_scores(*tile)
    delta = s.amax(dim=-1, keepdim=True).clamp_(min=0.0)  # how far each row's max rose
    s.sub_(delta)
    alpha = torch.exp2(-delta)  # = 2^(mu - mu_new): rescale what was accumulated
    ell.mul_(alpha)
    acc.mul_(alpha)
    mu = mu + delta
    qa[..., qa.shape[-1] - 1 :] = -mu
    return mu, s.exp2_()


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    block_q: int = 256,
    block_k: int = 512,
    alignment: str = "bottom_right",
) -> torch.Tensor:
    r"""softmax(q k^T * scale) v, by tiles ``Q_i`` x ``K_j, V_j`` (online softmax)::

        S = Q_i K_j^T * scale,   mu' = max(mu, rowmax(S)),   P = exp(S - mu')
        ell = exp(mu - mu') ell + rowsum(P),   acc = exp(mu - mu') acc + P V_j,   mu = mu'

    over the key blocks ``j`` for each query block ``i``, then ``O_i = acc / ell``.
    Differentiable.

    :func:`flash_attention_reference` is exactly that recurrence. This is equal to
    ``torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
    scale=scale)`` for ``n = m`` (to about 1e-6 in float32; for ``n != m`` SDPA's
    ``is_causal`` is ``alignment="top_left"``), but the n x m score matrix never
    exists: only ``block_q x block_k`` tiles of it, one at a time. The
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
        alignment: where the causal diagonal sits when ``n != m``: ``"bottom_right"``
            (the default, as ``mask="causal"``: ``j <= i + m - n``, torch's
            ``causal_lower_right``; the one for decoding against a cache) or
            ``"top_left"`` (query ``i`` sees ``j <= i``, SDPA's ``is_causal``). Ignored
            when not ``causal``.

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
    a = check_tiled(q, k, v, causal, alignment, scale, block_q=block_q, block_k=block_k)
    if needs_grad(q, k, v):  # the forward saves O and lse; the backward recomputes P
        return Recompute.apply(q, k, v, _flash_forward, a)
    return _flash_forward(q, k, v, a)[0].to(q.dtype)


def online_softmax_steps(scores: torch.Tensor, values: torch.Tensor, block_k: int) -> list[dict]:
    """The online-softmax recurrence for ONE query, block by block, with every intermediate kept.

    For teaching (the book's step-by-step run and explorer): after block ``t`` the
    record holds the running max ``mu``, running sum ``ell``, unnormalised output
    ``acc``, the rescale factor ``alpha = exp(mu_old - mu_new)`` applied to the old
    ``ell`` and ``acc``, and ``out = acc / ell``, the softmax attention output over the
    keys seen so far (zeros while every score seen is ``-inf``, i.e. masked).

    Args:
        scores: ``(m,)`` the query's (already scaled) scores against m keys.
        values: ``(m, d_v)`` the values.
        block_k: keys per step (>= 1).

    Returns:
        One dict per block, with keys ``start, stop, mu, ell, alpha, acc, out``
        (floats and float64 tensors).
    """
    block_k = require_int(block_k, "block_k", 1)
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
    for start in range(0, s_all.shape[0], block_k):
        s, vb = s_all[start : start + block_k], v_all[start : start + block_k]
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
                mu=mu,
                ell=ell,
                alpha=alpha,
                acc=acc.clone(),
                out=acc / ell if ell > 0 else torch.zeros_like(acc),
            )
        )
    return steps


def _flash_kernel(a) -> Tensor:
    """``kernel="flash"`` of :func:`selfattn.attention.scaled_dot_product_attention`: the same
    attention computed tile by tile, on the arguments that function has already checked
    (trusting: :func:`flash_attention`'s default tiles, the diagonal aligned bottom-right)."""
    q, k, v = a.q, a.k, a.v
    batch = q.shape[:-2]
    if not batch == k.shape[:-2] == v.shape[:-2]:
        batch = torch.broadcast_shapes(batch, k.shape[:-2], v.shape[:-2])
    offset = k.shape[-2] - q.shape[-2]  # causal_diagonal(n, m, "bottom_right")
    t = TiledArgs(tuple(batch), a.causal, offset, a.scale, 256, 512, hi=0 if a.causal else None)
    if needs_grad(q, k, v):
        return Recompute.apply(q, k, v, _flash_forward, t)
    return _flash_forward(q, k, v, t)[0].to(q.dtype)


# The kernel registers itself (the core's registry never imports the kernels above it).
register_kernel(
    "flash",
    Kernel(_flash_kernel, masks=False, dropout=False, score_bias=False, causal="always"),
)
