"""Checkers for chapter 6, "Positional encodings".

* 6.1 :func:`check_sinusoidal`: the sinusoidal encoding ``(n, d)`` from its formula.
* 6.2 :func:`check_shift_matrix`: the ``d x d`` matrix ``M_k`` with ``PE[pos + k] = M_k PE[pos]``.
* 6.3 :func:`check_alibi_slopes`: ALiBi's per-head slopes, including head counts that are not
  powers of two.
* 6.4 :func:`check_rope`: rotary position embedding of ``(n, d)`` vectors at given positions.

Each compares the reader's function with the library's (:mod:`selfattn.positional`) on
several cases, edge cases included, and names the first case that differs.
"""

from __future__ import annotations

import torch

from ..positional import alibi_slopes, apply_rope, sinusoidal_encoding, sinusoidal_shift_matrix
from ._core import Mismatch, call_answer, checker, expect_close

__all__ = ["check_sinusoidal", "check_shift_matrix", "check_alibi_slopes", "check_rope"]


def _tensor(got, case: str) -> torch.Tensor:
    if not isinstance(got, torch.Tensor):
        try:
            got = torch.as_tensor(got)
        except Exception:
            raise Mismatch(f"case {case}: expected a tensor, got {type(got).__name__}") from None
    return got.double()


@checker("6.1", "sinusoidal encoding")
def check_sinusoidal(answer):
    """``answer(n, d)`` -> ``PE`` ``(n, d)``, base 10000: sin in even columns, cos in odd."""
    for n, d in ((1, 2), (4, 2), (10, 8), (7, 6), (50, 64)):
        case = f"n={n}, d={d}"
        got = _tensor(call_answer(answer, n, d), case)
        expect_close(
            got, sinusoidal_encoding(n, d, dtype=torch.float64), case=case, atol=1e-5, rtol=1e-5
        )


@checker("6.2", "the shift as a block rotation")
def check_shift_matrix(answer):
    """``answer(k, d)`` -> ``M_k`` ``(d, d)`` with ``PE[pos + k] = M_k @ PE[pos]`` (base 10000)."""
    for k, d in ((1, 2), (3, 8), (0, 4), (-2, 6), (10, 16)):
        case = f"k={k}, d={d}"
        got = _tensor(call_answer(answer, k, d), case)
        expect_close(
            got,
            sinusoidal_shift_matrix(k, d, dtype=torch.float64),
            case=case,
            atol=1e-5,
            rtol=1e-5,
        )


@checker("6.3", "ALiBi slopes")
def check_alibi_slopes(answer):
    """``answer(h)`` -> the ``h`` slopes of Press et al. (2022), a sequence or tensor ``(h,)``."""
    for h in (1, 2, 4, 8, 16, 3, 5, 6, 12, 20):
        case = f"num_heads={h}"
        got = _tensor(call_answer(answer, h), case).flatten()
        expect_close(got, alibi_slopes(h).double(), case=case, atol=1e-6, rtol=1e-5)


@checker("6.4", "rotary position embedding")
def check_rope(answer):
    """``answer(x, positions)`` must rotate the pairs ``(x[:, 2i], x[:, 2i+1])`` of ``x (n, d)``.

    Row ``r`` turns by the angle ``positions[r] * theta_i``, ``theta_i = 10000^(-2i/d)``.
    """
    g = torch.Generator().manual_seed(6)
    for n, d, positions in (
        (1, 2, [0]),
        (1, 2, [5]),
        (4, 8, [0, 1, 2, 3]),
        (3, 16, [7, 100, 2048]),
        (5, 64, [0, 3, 1, 4, 1]),
    ):
        case = f"n={n}, d={d}, positions={positions}"
        x = torch.randn(n, d, generator=g, dtype=torch.float64)
        pos = torch.tensor(positions)
        got = _tensor(call_answer(answer, x.clone(), pos.clone()), case)
        expect_close(got, apply_rope(x, pos), case=case, atol=1e-5, rtol=1e-5)
