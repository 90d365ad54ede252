"""Checkers for chapter 4's exercises (masking).

Each checker runs the reader's answer on several cases, edge cases included,
and prints one line: passed, not attempted yet, or the first case that failed
with expected vs got. None of them raises.
"""

from __future__ import annotations

import torch

from ..attention import softmax
from ..masks import causal_mask, padding_mask, sliding_window_mask
from ._core import call_answer, checker, expect_close, expect_shape, expect_true

__all__ = [
    "check_padding_mask",
    "check_sliding_window",
    "check_masked_softmax",
    "check_decoding_mask",
]


def _expect_bool_mask(got, expected: torch.Tensor, *, case: str) -> None:
    expect_true(
        isinstance(got, torch.Tensor),
        f"case {case}: return a torch.Tensor, got {type(got).__name__}",
    )
    expect_shape(got, expected.shape, case=case)
    expect_true(
        got.dtype == torch.bool,
        f"case {case}: return a bool mask (True = may attend), got dtype {got.dtype}",
    )
    if torch.equal(got, expected):
        return
    expect_true(
        not torch.equal(~got, expected),
        f"case {case}: every entry is flipped: this book's masks use True = may attend "
        "(SDPA's convention)",
    )
    idx = tuple((got != expected).nonzero()[0].tolist())
    expect_true(
        False,
        f"case {case}: {int((got != expected).sum())} entries differ, e.g. at {idx}: "
        f"expected {bool(expected[idx])}, got {bool(got[idx])}",
    )


@checker("4.1", "padding mask")
def check_padding_mask(answer) -> None:
    """``answer(lengths, max_len)`` for a list of ``B`` lengths must return a bool ``(B, max_len)``
    mask, ``True`` at the real tokens (positions ``< length``)."""
    cases = [([3, 1, 4], 4), ([2], 5), ([0, 2], 3), ([1], 1), ([5, 5], 5)]
    for lengths, max_len in cases:
        expected = padding_mask(lengths, max_len)[:, 0]
        got = call_answer(answer, list(lengths), max_len)
        _expect_bool_mask(got, expected, case=f"lengths={lengths}, max_len={max_len}")


@checker("4.2", "sliding-window mask")
def check_sliding_window(answer) -> None:
    """``answer(n, window)`` must return the causal sliding-window mask ``(n, n)``: query ``i``
    sees keys ``i - window + 1 .. i`` (``window`` keys, itself included)."""
    for n, window in ((6, 3), (5, 1), (4, 4), (3, 10), (1, 1), (8, 2)):
        _expect_bool_mask(
            call_answer(answer, n, window),
            sliding_window_mask(n, window),
            case=f"n={n}, window={window}",
        )


@checker("4.3", "masked softmax without NaN")
def check_masked_softmax(answer) -> None:
    """``answer(scores, mask)`` for float ``scores (..., m)`` and bool ``mask`` of the same shape
    (``True`` = may attend) must return softmax weights that are exactly 0 where the mask is
    ``False``, and all zeros (not NaN, not uniform) for a row with no allowed key."""
    g = torch.Generator().manual_seed(4)
    s = torch.randn(4, 5, generator=g, dtype=torch.float64)
    mixed = torch.tensor(
        [[1, 1, 0, 0, 1], [0, 0, 0, 0, 1], [1, 1, 1, 1, 1], [0, 1, 0, 1, 0]], dtype=torch.bool
    )
    empty_row = mixed.clone()
    empty_row[1] = False
    cases = [
        (
            "causal mask (5, 5)",
            torch.randn(5, 5, generator=g, dtype=torch.float64),
            causal_mask(5),
        ),
        ("a mixed mask", s, mixed),
        ("a fully masked row (row 1)", s, empty_row),
        ("every row masked", s, torch.zeros(4, 5, dtype=torch.bool)),
        ("large scores around 1e4", s * 1e4, mixed),
        (
            "batched (2, 3, 4)",
            torch.randn(2, 3, 4, generator=g, dtype=torch.float64),
            torch.rand(2, 3, 4, generator=g) > 0.4,
        ),
    ]
    for name, scores, mask in cases:
        expected = softmax(scores.masked_fill(~mask, float("-inf")))
        got = call_answer(answer, scores.clone(), mask.clone())
        expect_true(
            isinstance(got, torch.Tensor),
            f"case {name}: return a torch.Tensor, got {type(got).__name__}",
        )
        expect_true(
            not torch.isnan(got).any(),
            f"case {name}: your weights contain NaN; a fully masked row must give zeros",
        )
        expect_close(got, expected, case=name, atol=1e-9, rtol=1e-7)


@checker("4.4", "the causal mask for decoding with a cache")
def check_decoding_mask(answer) -> None:
    """``answer(n, m)`` must return the causal mask ``(n, m)`` for ``n`` new queries that are the
    **last** ``n`` positions of a sequence of ``m`` keys (bottom-right alignment): query ``i``
    sees keys ``0 .. i + m - n``."""
    for n, m in ((1, 5), (2, 4), (3, 3), (1, 1), (4, 9)):
        expected = causal_mask(n, m, align="bottom_right")
        _expect_bool_mask(
            call_answer(answer, n, m), expected, case=f"n={n} new queries, m={m} keys"
        )
