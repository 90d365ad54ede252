"""Checkers for chapter 7's exercises (cost of attention, online softmax, FlashAttention's IO).

Each checker runs the reader's answer on several cases and prints one line:
passed, not attempted yet, or the first case that failed with expected vs got.
"""

from __future__ import annotations

import math

import torch

from ._core import Mismatch, call_answer, checker, expect_close, expect_true

__all__ = [
    "check_attention_flops",
    "check_merge_states",
    "check_causal_tiles",
    "check_tiled_reads",
    "check_ds_tile",
    "ds_tile_mistakes",
]


def _expect_int(got, expected: int, *, case: str) -> None:
    try:
        value = int(got)
    except (TypeError, ValueError):
        raise Mismatch(f"case {case}: return a number, got {type(got).__name__}") from None
    if value != got and not (isinstance(got, float) and got.is_integer()):
        raise Mismatch(f"case {case}: expected a whole number, got {got!r}")
    expect_true(value == expected, f"case {case}: expected {expected}, got {value}")


@checker("7.1", "FLOPs of attention")
def check_attention_flops(answer) -> None:
    """``answer(n, m, d_k, d_v)`` must return the floating-point operations of one head's
    ``softmax(Q K^T) V`` matmuls, counting a multiply-add as 2: ``2 n m d_k + 2 n m d_v``
    (the softmax's O(n m) is left out)."""
    for n, m, dk, dv in ((4, 4, 8, 8), (1, 7, 3, 5), (128, 64, 64, 32), (1024, 1024, 64, 64)):
        _expect_int(
            call_answer(answer, n, m, dk, dv),
            2 * n * m * dk + 2 * n * m * dv,
            case=f"n={n}, m={m}, d_k={dk}, d_v={dv}",
        )


def _state(s: torch.Tensor, v: torch.Tensor):
    mu = s.max()  # the running max is mu in chapter 7 (m counts the keys)
    p = torch.exp(s - mu)
    return mu, p.sum(), p @ v


@checker("7.2", "merging two online-softmax states")
def check_merge_states(answer) -> None:
    """``answer(mu1, l1, o1, mu2, l2, o2)`` gets the states ``(max, sum of exp(s - max),
    unnormalised output sum exp(s - max) v)`` of two disjoint blocks of keys and must return the
    state ``(mu, l, o)`` of their union; ``o / l`` is then softmax attention over both blocks."""
    g = torch.Generator().manual_seed(7)
    cases = [
        (
            "similar scores",
            torch.randn(5, generator=g, dtype=torch.float64),
            torch.randn(4, generator=g, dtype=torch.float64),
        ),
        (
            "second block much larger",
            torch.randn(3, generator=g, dtype=torch.float64),
            30 + torch.randn(6, generator=g, dtype=torch.float64),
        ),
        (
            "first block much larger",
            50 + torch.randn(2, generator=g, dtype=torch.float64),
            torch.randn(3, generator=g, dtype=torch.float64),
        ),
        (
            "one key each",
            torch.tensor([0.5], dtype=torch.float64),
            torch.tensor([-1.5], dtype=torch.float64),
        ),
    ]
    for name, s1, s2 in cases:
        v1 = torch.randn(len(s1), 3, generator=g, dtype=torch.float64)
        v2 = torch.randn(len(s2), 3, generator=g, dtype=torch.float64)
        a, b = _state(s1, v1), _state(s2, v2)
        got = call_answer(answer, *a, *b)
        expect_true(
            isinstance(got, (tuple, list)) and len(got) == 3,
            f"case {name}: return a tuple (mu, l, o)",
        )
        mu, total, o = (torch.as_tensor(x, dtype=torch.float64) for x in got)
        em, el, eo = _state(torch.cat([s1, s2]), torch.cat([v1, v2]))
        expect_close(mu, em, case=f"{name}: mu", atol=1e-9, rtol=1e-9)
        expect_close(total, el, case=f"{name}: l", atol=1e-9, rtol=1e-9)
        expect_close(o, eo, case=f"{name}: o", atol=1e-9, rtol=1e-9)


def _causal_tiles(n: int, bq: int, bk: int) -> int:
    total = 0
    for qs in range(0, n, bq):
        last_query = min(qs + bq, n) - 1
        total += math.ceil(
            (last_query + 1) / bk
        )  # key blocks starting at or before the last query
    return total


@checker("7.3", "tiles computed with causal skipping")
def check_causal_tiles(answer) -> None:
    """``answer(n, block_q, block_k)`` must return how many (query block, key block) tiles causal
    tiled attention computes when it skips every tile lying entirely above the diagonal (keys
    all later than every query of the block). ``n`` need not be a multiple of the blocks."""
    for n, bq, bk in (
        (64, 16, 16),
        (10, 4, 4),
        (100, 32, 16),
        (7, 3, 5),
        (1, 8, 8),
        (50, 10, 25),
        (33, 8, 3),
    ):
        _expect_int(
            call_answer(answer, n, bq, bk),
            _causal_tiles(n, bq, bk),
            case=f"n={n}, block_q={bq}, block_k={bk}",
        )


@checker("7.4", "slow-memory reads of tiled attention")
def check_tiled_reads(answer) -> None:
    """``answer(n, d, block_q)`` must return the elements tiled attention (FlashAttention-2 order)
    reads from slow memory: Q once (``n d``), and all of K and V once per query block
    (``ceil(n / block_q)`` blocks, ``2 n d`` each)."""
    for n, d, bq in ((64, 8, 16), (100, 16, 32), (1, 4, 8), (1000, 64, 48), (4096, 64, 128)):
        _expect_int(
            call_answer(answer, n, d, bq),
            n * d + math.ceil(n / bq) * 2 * n * d,
            case=f"n={n}, d={d}, block_q={bq}",
        )


def _ds_variants(q_i, k_j, v_j, do_i, lse_i, d_i) -> dict[str, torch.Tensor]:
    """The right dS tile ("right") and each named mistake's, from the same inputs."""
    scale = q_i.shape[-1] ** -0.5
    s = q_i @ k_j.T * scale
    p = torch.exp(s - lse_i[:, None])
    dp = do_i @ v_j.T
    d = d_i[:, None]
    return {
        "right": p * (dp - d),
        "S recomputed without the scale 1/sqrt(d)": torch.exp(q_i @ k_j.T - lse_i[:, None])
        * (dp - d),
        "rowsum of this tile's P o dP used for D (D sums over the whole row of keys)": p
        * (dp - (p * dp).sum(-1, keepdim=True)),
        "rowsum(dP) used for D (D = rowsum(dO o O), a sum of P o dP)": p
        * (dp - dp.sum(-1, keepdim=True)),
        "P recomputed as a softmax over this tile only, not exp(S - L)": torch.softmax(s, -1)
        * (dp - d),
        "the factor P left out (dS = P o (dP - D))": dp - d,
        "D subtracted the wrong way round (dP - D, not D - dP)": p * (d - dp),
    }


def ds_tile_mistakes() -> list[str]:
    """The names of the mistakes :func:`check_ds_tile` recognises."""
    t = torch.zeros(1, 1, dtype=torch.float64)
    z = torch.zeros(1, dtype=torch.float64)
    return [name for name in _ds_variants(t, t, t, t, z, z) if name != "right"]


@checker("7.5", "the backward's dS for one tile")
def check_ds_tile(answer) -> None:
    """``answer(q_i, k_j, v_j, do_i, lse_i, d_i)`` gets one tile's inputs, a query block
    ``q_i`` and ``do_i`` ``(r, d)``, a key block ``k_j`` and ``v_j`` ``(c, d)``, and the rows'
    saved log-sum-exp ``lse_i`` and ``D_i = rowsum(dO o O)`` ``(r,)``, and must return the
    tile ``dS_ij = P_ij o (dP_ij - D_i)`` ``(r, c)``, with ``P_ij = exp(Q_i K_j^T / sqrt(d)
    - L_i)`` and ``dP_ij = dO_i V_j^T``. A wrong answer that matches a common mistake is
    named."""
    g = torch.Generator().manual_seed(75)
    for r, c, m, d, start in ((5, 6, 14, 8, 4), (3, 1, 9, 16, 8), (4, 7, 7, 4, 0)):
        q = torch.randn(r, d, generator=g, dtype=torch.float64)
        k = torch.randn(m, d, generator=g, dtype=torch.float64)
        v = torch.randn(m, d, generator=g, dtype=torch.float64)
        do = torch.randn(r, d, generator=g, dtype=torch.float64)
        s = q @ k.T / d**0.5
        lse = torch.logsumexp(s, -1)
        o = torch.softmax(s, -1) @ v
        d_row = (do * o).sum(-1)
        k_j, v_j = k[start : start + c], v[start : start + c]
        case = f"{r} queries, keys {start}..{start + c - 1} of {m}, d={d}"
        got = call_answer(answer, q, k_j, v_j, do, lse, d_row)
        variants = _ds_variants(q, k_j, v_j, do, lse, d_row)
        right = variants.pop("right")
        try:
            g_t = torch.as_tensor(got, dtype=torch.float64)
        except Exception:
            g_t = None
        if g_t is not None and g_t.shape == right.shape:
            if not torch.allclose(g_t, right, atol=1e-9, rtol=1e-9):
                for name, wrong in variants.items():
                    if torch.allclose(g_t, wrong, atol=1e-9, rtol=1e-9):
                        raise Mismatch(f"case {case}: looks like {name}")
        expect_close(got, right, case=case, atol=1e-9, rtol=1e-9)
