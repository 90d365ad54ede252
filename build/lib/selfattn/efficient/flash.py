"""FlashAttention's forward pass in plain PyTorch: tiles, online softmax, no n x n matrix (chapter 7).

The algorithm is FlashAttention-2's (Dao 2023): an outer loop over blocks of
queries, an inner loop over blocks of keys, and for every query row three running
quantities, updated block by block:

* ``m``: the largest score seen so far,
* ``l``: the sum of ``exp(score - m)`` seen so far,
* ``acc``: the *unnormalised* output, ``sum_j exp(s_j - m) v_j``.

When a new block raises the maximum from ``m`` to ``m_new``, everything accumulated
so far is rescaled by ``alpha = exp(m - m_new)`` (not by its inverse: FA-2's
Algorithm 1 prints ``diag(exp(m_old - m_new))^{-1}``, a typo). Only after the last
key block is the output divided by ``l``. The working memory is a few tiles of
``block_q x block_k`` scores, so it does not grow with ``n^2``.
"""

from __future__ import annotations

import math

import torch

from .._checks import check_qkv

__all__ = ["flash_attention", "online_softmax_steps"]

# Lazy rescaling. Each query block takes its reference max m from its first tile, and keeps it
# while the tiles' exp(s - m) stay moderate: their row sums below this limit (2^64; float32 goes to
# 3e38). A tile that breaks the limit (a score more than ~40 above m) is recomputed with m raised
# to the new max and the accumulators rescaled by exp(m_old - m_new), as in FA-2. The result is the
# same: the online-softmax identity holds for ANY reference m, the max only guards against
# overflow. Skipped: a max pass over each tile and the rescale of acc, for almost every tile.
_RESCALE_LIMIT = 2.0**64


def _check_block(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value}")
    return value


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    block_q: int = 256,
    block_k: int = 512,
) -> torch.Tensor:
    r"""softmax(q k^T * scale) v computed tile by tile with the online softmax.

    Equal to ``torch.nn.functional.scaled_dot_product_attention(q, k, v,
    is_causal=causal, scale=scale)`` (to about 1e-6 in float32), but the n x m score
    matrix never exists: only ``block_q x block_k`` tiles of it, one at a time.

    Args:
        q: queries ``(..., n, d_k)``.
        k: keys ``(..., m, d_k)``.
        v: values ``(..., m, d_v)``; the batch dimensions ``...`` broadcast.
        causal: query ``i`` sees keys ``j <= i`` (top-left aligned, as SDPA's
            ``is_causal``). Key blocks that lie entirely above the diagonal are
            skipped, not computed and masked.
        scale: multiplies the scores; defaults to ``1 / sqrt(d_k)``.
        block_q: rows of queries per outer-loop step. Any value >= 1; ``n`` need
            not be a multiple of it (the last block is shorter).
        block_k: keys per inner-loop step; same rules.

    Returns:
        ``(..., n, d_v)`` in the dtype of ``q``. float16 / bfloat16 inputs are
        processed in float32 tiles (as the GPU kernels accumulate in float32).

    Raises:
        TypeError: non-float or mixed-dtype tensors, block sizes that are not ints.
        ValueError: shapes that do not fit together, block sizes below 1.
    """
    batch = check_qkv(q, k, v)
    block_q = _check_block(block_q, "block_q")
    block_k = _check_block(block_k, "block_k")
    n, m, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d_k)
    out_dtype = q.dtype
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    # Flatten the batch dimensions so every tile product is one batched matmul (bmm).
    qf = (q.to(work) * scale).expand(*batch, n, d_k).reshape(-1, n, d_k)
    bh = qf.shape[0]
    # Keys get an extra column of ones and each query block an extra column holding -m, so the
    # tile product [q | -m] @ [k | 1]^T = q k^T - m already has the running max subtracted:
    # one pass over the tile saved (the CPU analogue of keeping work inside the matmul).
    k1 = torch.cat(
        [k.to(work).expand(*batch, m, d_k).reshape(-1, m, d_k), k.new_ones(bh, m, 1, dtype=work)],
        dim=-1,
    )
    kt = k1.transpose(1, 2)  # (B, d_k + 1, m), a view
    vf = v.to(work).expand(*batch, m, d_v).reshape(-1, m, d_v)
    out = torch.empty(bh, n, d_v, dtype=work, device=q.device)
    neg_inf = float("-inf")
    # Reused buffers: a fresh multi-megabyte tile per step would cost page faults every time.
    s_buf = torch.empty(bh, min(block_q, n), min(block_k, m), dtype=work, device=q.device)
    qa_buf = torch.empty(bh, min(block_q, n), d_k + 1, dtype=work, device=q.device)

    for qs in range(0, n, block_q):  # outer loop: one block of queries at a time (FA-2 order)
        qe = min(qs + block_q, n)
        rows = qe - qs
        qa = qa_buf[:, :rows]
        qa[..., :d_k] = qf[:, qs:qe]
        qa[..., d_k:] = 0.0  # no reference max yet: the first tile gives raw scores
        m_i = None  # (B, rows, 1) reference max: every exp below is exp(score - m_i)
        l_i = torch.zeros((bh, rows, 1), dtype=work, device=q.device)
        acc = torch.zeros((bh, rows, d_v), dtype=work, device=q.device)
        # Causal: keys beyond the block's last query are masked for every row, so skip them.
        k_end = min(m, qe) if causal else m
        for ks in range(0, k_end, block_k):  # inner loop: one block of keys and values
            ke = min(ks + block_k, k_end)
            full = rows == s_buf.shape[1] and ke - ks == s_buf.shape[2]

            def tile_scores():  # q k^T - m_i for this tile (the -m_i rides in the matmul)
                s = (
                    torch.bmm(qa, kt[:, :, ks:ke], out=s_buf)
                    if full
                    else torch.bmm(qa, kt[:, :, ks:ke])
                )
                if causal and ke - 1 > qs:  # the tile crosses the diagonal: mask j > i
                    i = torch.arange(qs, qe, device=q.device)[:, None]
                    j = torch.arange(ks, ke, device=q.device)[None, :]
                    s.masked_fill_(j > i, neg_inf)
                return s

            s = tile_scores()
            if (
                first := m_i is None
            ):  # first tile: its row max is the reference (finite: key 0 is visible)
                m_i = s.amax(dim=-1, keepdim=True)
                s.sub_(m_i)
                qa[..., d_k:] = -m_i
            p = s.exp_()  # in place: the tile's exp(s - m_i)
            row_sum = p.sum(dim=-1, keepdim=True)
            if not first and not bool(row_sum.max() <= _RESCALE_LIMIT):  # rare: the max jumped up
                s = tile_scores()
                delta = s.amax(dim=-1, keepdim=True).clamp_(min=0.0)  # how far each row's max rose
                s.sub_(delta)
                alpha = torch.exp(-delta)  # = exp(m_old - m_new): rescale what was accumulated
                l_i.mul_(alpha)
                acc.mul_(alpha)
                m_i = m_i + delta
                qa[..., d_k:] = -m_i
                p = s.exp_()
                row_sum = p.sum(dim=-1, keepdim=True)
            l_i.add_(row_sum)  # l <- alpha l + rowsum(p)
            acc.baddbmm_(p, vf[:, ks:ke])  # O <- alpha O + p v
        torch.div(acc, l_i, out=out[:, qs:qe])
    return out.reshape(*batch, n, d_v).to(out_dtype)


def online_softmax_steps(scores: torch.Tensor, values: torch.Tensor, block: int) -> list[dict]:
    """The online-softmax recurrence for ONE query, block by block, with every intermediate kept.

    For teaching (chapter 7's step-by-step run and explorer): after block ``t`` the
    record holds the running max ``m``, running sum ``l``, unnormalised output
    ``acc``, the rescale factor ``alpha = exp(m_old - m_new)`` applied to the old
    ``l`` and ``acc``, and ``out = acc / l``, the softmax attention output over the
    keys seen so far.

    Args:
        scores: ``(m,)`` the query's (already scaled) scores against m keys.
        values: ``(m, d_v)`` the values.
        block: keys per step (>= 1).

    Returns:
        One dict per block, with keys ``start, stop, m, l, alpha, acc, out``
        (floats and float64 tensors).
    """
    block = _check_block(block, "block")
    if scores.dim() != 1 or values.dim() != 2 or values.shape[0] != scores.shape[0]:
        raise ValueError(
            f"online_softmax_steps needs scores (m,) and values (m, d_v), got {tuple(scores.shape)} "
            f"and {tuple(values.shape)}"
        )
    s_all, v_all = scores.double(), values.double()
    m_run, l_run = float("-inf"), 0.0
    acc = torch.zeros(values.shape[1], dtype=torch.float64)
    steps = []
    for start in range(0, s_all.shape[0], block):
        s, vb = s_all[start : start + block], v_all[start : start + block]
        m_new = max(m_run, float(s.max()))
        alpha = math.exp(m_run - m_new) if m_run != float("-inf") else 0.0
        p = torch.exp(s - m_new)
        l_run = alpha * l_run + float(p.sum())
        acc = alpha * acc + p @ vb
        m_run = m_new
        steps.append(
            dict(
                start=start,
                stop=start + s.shape[0],
                m=m_run,
                l=l_run,
                alpha=alpha,
                acc=acc.clone(),
                out=acc / l_run,
            )
        )
    return steps
