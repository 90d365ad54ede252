"""Checkers for chapter 8's exercises (sliding windows, receptive fields, linear attention).

Each checker runs the reader's answer on several cases and prints one line:
passed, not attempted yet, or the first case that failed with expected vs got.
"""

from __future__ import annotations

import torch

from ..efficient.linear import LinearAttentionState, linear_attention, linear_attention_step
from ._core import Mismatch, call_answer, checker, expect_close, expect_true

__all__ = [
    "check_window_pairs",
    "check_receptive_field",
    "check_linear_attention",
    "check_linear_step",
]


def _expect_int(got, expected: int, *, case: str) -> None:
    try:
        value = int(got)
    except (TypeError, ValueError):
        raise Mismatch(f"case {case}: return a number, got {type(got).__name__}") from None
    expect_true(value == got, f"case {case}: expected a whole number, got {got!r}")
    expect_true(value == expected, f"case {case}: expected {expected}, got {value}")


@checker("8.1", "pairs a causal sliding window computes")
def check_window_pairs(answer) -> None:
    """``answer(n, window)`` must return how many (query, key) pairs causal sliding-window
    attention computes: query ``i`` sees ``min(i + 1, window)`` keys (itself and up to
    ``window - 1`` before)."""
    for n, w in ((10, 3), (5, 5), (3, 10), (1, 1), (1000, 64), (7, 1)):
        _expect_int(
            call_answer(answer, n, w),
            sum(min(i + 1, w) for i in range(n)),
            case=f"n={n}, window={w}",
        )


@checker("8.2", "receptive field of stacked windows")
def check_receptive_field(answer) -> None:
    """``answer(window, layers)`` must return how many input positions can influence the last
    output of a long sequence after ``layers`` stacked causal sliding-window layers of
    ``window`` keys each."""
    for w, layers in ((4, 1), (4, 3), (2, 5), (1, 7), (256, 32), (3, 2)):
        _expect_int(
            call_answer(answer, w, layers),
            layers * (w - 1) + 1,
            case=f"window={w}, layers={layers}",
        )


@checker("8.3", "linear attention, non-causal")
def check_linear_attention(answer) -> None:
    """``answer(q, k, v)`` for q ``(..., n, d)``, k ``(..., m, d)``, v ``(..., m, d_v)`` must
    return non-causal linear attention with phi(x) = elu(x) + 1 and eps = 1e-6 added to the
    normaliser, computed in O(n): phi(q) (phi(k)^T v) / (phi(q) . sum_j phi(k_j) + eps)."""
    g = torch.Generator().manual_seed(8)
    for shape_q, shape_k, dv in (
        ((6, 4), (6, 4), 3),
        ((1, 8), (5, 8), 2),
        ((2, 3, 7, 4), (2, 3, 9, 4), 5),
    ):
        q = torch.randn(*shape_q, generator=g, dtype=torch.float64)
        k = torch.randn(*shape_k, generator=g, dtype=torch.float64)
        v = torch.randn(*shape_k[:-1], dv, generator=g, dtype=torch.float64)
        got = call_answer(answer, q.clone(), k.clone(), v.clone())
        expect_close(
            got,
            linear_attention(q, k, v),
            case=f"q {tuple(q.shape)}, k {tuple(k.shape)}",
            atol=1e-9,
            rtol=1e-7,
        )


@checker("8.4", "a step of causal linear attention")
def check_linear_step(answer) -> None:
    """``answer(S, z, q_t, k_t, v_t)`` with state ``S (d, d_v)``, ``z (d,)`` and the new token's
    ``q_t, k_t (d,)``, ``v_t (d_v,)`` must return ``(out_t, S_new, z_new)``: absorb token t first
    (S += phi(k_t) v_t^T, z += phi(k_t)), then read
    out_t = phi(q_t) S_new / (phi(q_t) . z_new + 1e-6)."""
    g = torch.Generator().manual_seed(9)
    d, dv = 4, 3
    state = LinearAttentionState.empty((), d, dv, dtype=torch.float64)
    for t in range(5):
        q, k, v = (
            torch.randn(d, generator=g, dtype=torch.float64),
            torch.randn(d, generator=g, dtype=torch.float64),
            torch.randn(dv, generator=g, dtype=torch.float64),
        )
        got = call_answer(answer, state.s.clone(), state.z.clone(), q, k, v)
        expect_true(
            isinstance(got, (tuple, list)) and len(got) == 3,
            f"step {t}: return a tuple (out_t, S_new, z_new)",
        )
        out, state = linear_attention_step(state, q, k, v)
        expect_close(got[0], out, case=f"step {t}: out_t", atol=1e-9, rtol=1e-7)
        expect_close(got[1], state.s, case=f"step {t}: S_new", atol=1e-9, rtol=1e-7)
        expect_close(got[2], state.z, case=f"step {t}: z_new", atol=1e-9, rtol=1e-7)
