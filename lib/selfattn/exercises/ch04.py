"""Checkers for chapter 4's exercises (masking).

In the chapter's order (:data:`EXERCISES`, whose labels number them): ``padding`` and
``window`` (build, :func:`check_padding_mask`, :func:`check_sliding_window`),
``convention-bug`` and ``decoding-bug`` (find the bug: :func:`check_mask_convention_bug`
fixes :func:`buggy_masked_attention`, :func:`check_decoding_bug` fixes
:func:`buggy_decoding_attention`) and ``predict-pairs`` (predict, then run,
:func:`check_allowed_pairs_prediction`).

A wrong answer that is one of the likely mistakes is named.
"""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention, softmax
from ..i18n import _
from ..masks import causal_mask, padding_mask, sliding_window_mask
from ._core import (
    Mismatch,
    call_answer,
    checker,
    expect_close,
    expect_shape,
    expect_true,
    read_prediction,
)

__all__ = [
    "EXERCISES",
    "check_padding_mask",
    "check_sliding_window",
    "buggy_masked_attention",
    "check_mask_convention_bug",
    "buggy_decoding_attention",
    "check_decoding_bug",
    "PREDICTION_LENGTH",
    "PREDICTION_MAX_LEN",
    "check_allowed_pairs_prediction",
]

#: The labels of chapter 4's exercises (``ex-ch04-<label>``), in the chapter's order.
EXERCISES = ("padding", "window", "convention-bug", "decoding-bug", "predict-pairs")


def _expect_bool_mask(
    got, expected: torch.Tensor, *, case: str, mistakes: dict | None = None
) -> None:
    expect_true(
        isinstance(got, torch.Tensor),
        _("case {case}: return a torch.Tensor, got {what}", case=case, what=type(got).__name__),
    )
    expect_shape(got, expected.shape, case=case)
    expect_true(
        got.dtype == torch.bool,
        _(
            "case {case}: return a bool mask (True = may attend), got dtype {dtype}",
            case=case,
            dtype=got.dtype,
        ),
    )
    if torch.equal(got, expected):
        return
    expect_true(
        not torch.equal(~got, expected),
        _(
            "case {case}: every entry is flipped: this book's masks use True = may attend "
            "(SDPA's convention)",
            case=case,
        ),
    )
    for diagnosis, wrong in (mistakes or {}).items():
        expect_true(
            not torch.equal(got, wrong),
            _("case {case}: {diagnosis}", case=case, diagnosis=diagnosis),
        )
    idx = tuple((got != expected).nonzero()[0].tolist())
    expect_true(
        False,
        _(
            "case {case}: {count} entries differ, e.g. at {idx}: expected {expected}, got {got}",
            case=case,
            count=int((got != expected).sum()),
            idx=idx,
            expected=bool(expected[idx]),
            got=bool(got[idx]),
        ),
    )


@checker("padding", "padding mask")
def check_padding_mask(answer) -> None:
    """``answer(lengths, max_len)`` for a list of ``B`` lengths must return a bool ``(B, max_len)``
    mask, ``True`` at the real tokens (positions ``< length``).

    Named mistakes: every entry flipped (``True`` at the padding, the convention of
    ``nn.MultiheadAttention``'s ``key_padding_mask``) and ``<=`` instead of ``<``."""
    cases = [([3, 1, 4], 5), ([2], 5), ([0, 2], 3), ([1], 1), ([5, 5], 5)]
    for lengths, max_len in cases:
        expected = padding_mask(lengths, max_len)[:, 0]
        positions, lens = torch.arange(max_len)[None, :], torch.tensor(lengths)[:, None]
        mistakes = {
            _(
                "one position too many per sequence: position `length`, the first pad, is "
                "marked as a real token"
            ): positions <= lens,
        }
        got = call_answer(answer, list(lengths), max_len)
        _expect_bool_mask(
            got, expected, case=f"lengths={lengths}, max_len={max_len}", mistakes=mistakes
        )


@checker("window", "sliding-window mask")
def check_sliding_window(answer) -> None:
    """``answer(n, window)`` must return the causal sliding-window mask ``(n, n)``: query ``i``
    sees keys ``i - window + 1 .. i`` (``window`` keys, itself included).

    Named mistakes: ``window + 1`` keys (``i - j <= window``) and a band that is not causal
    (``|i - j| < window``)."""
    for n, window in ((6, 3), (5, 1), (4, 4), (3, 10), (1, 1), (8, 2)):
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        mistakes = {
            _("each query sees window + 1 keys, itself included"): (j <= i) & (i - j <= window),
            _("the band is not causal: it also lets a query see the next window - 1 keys"): (
                i - j
            ).abs()
            < window,
        }
        _expect_bool_mask(
            call_answer(answer, n, window),
            sliding_window_mask(n, window),
            case=f"n={n}, window={window}",
            mistakes=mistakes,
        )


def _scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def buggy_masked_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Masked attention with one planted bug, for "find the bug: the mask convention".

    ``q (..., n, d_k)``, ``k (..., m, d_k)``, ``v (..., m, d_v)``, bool ``mask`` broadcastable
    to ``(..., n, m)`` in this book's convention (``True`` = may attend); returns
    ``(..., n, d_v)``.
    """
    scores = _scores(q, k)  # (..., n, m)
    scores = scores.masked_fill(mask, float("-inf"))
    # selfattn.softmax: a row with nothing to attend to gets zero weights, not NaN
    return softmax(scores) @ v


@checker("convention-bug", "find the bug: the mask convention")
def check_mask_convention_bug(answer) -> None:
    """``answer(q, k, v, mask)`` must be :func:`buggy_masked_attention` with its bug
    fixed, compared with the book's masked attention (a query with no allowed key gives a
    zero output). The likely mistakes, the bug left in among them, are named."""
    g = torch.Generator().manual_seed(43)

    def qkv(*batch, n, m, d=8):
        return (
            torch.randn(*batch, n, d, generator=g, dtype=torch.float64),
            torch.randn(*batch, m, d, generator=g, dtype=torch.float64),
            torch.randn(*batch, m, 3, generator=g, dtype=torch.float64),
        )

    no_keys = causal_mask(4).clone()
    no_keys[2] = False  # query 2 may attend to nothing
    cases = [
        (_("a causal mask (5, 5)"), qkv(n=5, m=5), causal_mask(5)),
        (
            _("a padding mask (2, 1, 6), lengths 4 and 6"),
            qkv(2, n=6, m=6),
            padding_mask([4, 6], 6),
        ),
        (_("query 2 may attend to no key"), qkv(n=4, m=4), no_keys),
    ]
    for name, (q, k, v), mask in cases:
        expected = scaled_dot_product_attention(q, k, v, mask)
        got = call_answer(answer, q.clone(), k.clone(), v.clone(), mask.clone())
        expect_true(
            isinstance(got, torch.Tensor),
            _(
                "case {case}: return a torch.Tensor, got {what}",
                case=name,
                what=type(got).__name__,
            ),
        )
        s = _scores(q, k)
        mistakes = {
            _(
                "still masks where the mask is True, at the keys each query may attend to "
                "(this book's and SDPA's convention)"
            ): buggy_masked_attention(q, k, v, mask),
            _(
                "you mask the weights after the softmax: the forbidden keys took part in "
                "the normalisation, so each row no longer sums to 1"
            ): (torch.softmax(s, dim=-1) * mask) @ v,
            _(
                "the query that may attend to no key comes out NaN (torch.softmax of a row "
                "that is all -inf)"
            ): torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v,
        }
        expect_close(got, expected, case=name, atol=1e-9, rtol=1e-7, mistakes=mistakes)


def buggy_decoding_attention(
    q_new: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """Cached decoding attention with one planted bug, for "find the bug: decoding with a cache".

    ``q_new (..., n, d_k)`` are the queries of the **last** ``n`` positions, ``k (..., m, d_k)``
    and ``v (..., m, d_v)`` the keys and values of all ``m`` positions (``m - n`` of them kept
    from earlier steps); returns ``(..., n, d_v)``.
    """
    n, m = q_new.shape[-2], k.shape[-2]
    allowed = torch.ones(n, m, dtype=torch.bool, device=q_new.device).tril()  # (n, m)
    return scaled_dot_product_attention(q_new, k, v, allowed)


@checker("decoding-bug", "find the bug: decoding with a cache")
def check_decoding_bug(answer) -> None:
    """``answer(q_new, k, v)`` must be :func:`buggy_decoding_attention` with its bug
    fixed: the result equals the last ``n`` rows of a full causal pass. The likely mistakes,
    the bug left in among them, are named."""
    g = torch.Generator().manual_seed(44)
    for n, m in ((1, 5), (2, 6), (3, 7), (4, 4)):
        q_all, k, v = (torch.randn(2, m, 8, generator=g, dtype=torch.float64) for _ in range(3))
        q_new = q_all[:, m - n :]
        expected = scaled_dot_product_attention(q_all, k, v, causal_mask(m))[:, m - n :]
        got = call_answer(answer, q_new.clone(), k.clone(), v.clone())
        expect_true(
            isinstance(got, torch.Tensor),
            _(
                "case {case}: return a torch.Tensor, got {what}",
                case=f"n={n}, m={m}",
                what=type(got).__name__,
            ),
        )
        ones = torch.ones(n, m, dtype=torch.bool)
        mistakes = {
            _(
                "the triangle is still aligned top-left (is_causal=True's alignment): the new "
                "queries, the last n positions, do not see the keys just before them"
            ): (buggy_decoding_attention(q_new, k, v)),
            _(
                "the offset has the wrong sign: the triangle moved the other way, and each new "
                "query sees even fewer keys"
            ): scaled_dot_product_attention(q_new, k, v, ones.tril(n - m)),
            _("no mask: the earlier new queries now see the newer positions"): (
                scaled_dot_product_attention(q_new, k, v)
            ),
        }
        case = _("n={n} new queries, m={m} keys", n=n, m=m)
        expect_close(got, expected, case=case, atol=1e-9, rtol=1e-7, mistakes=mistakes)


#: For "predict the allowed pairs", the real length of the sequence.
PREDICTION_LENGTH: int = 7
#: For the same prediction, the length it is padded to.
PREDICTION_MAX_LEN: int = 10


@checker("predict-pairs", "predict the allowed pairs")
def check_allowed_pairs_prediction(prediction) -> None:
    """``prediction`` (a number written before the cell that counts) must be the number of
    ``True`` entries of ``padding_mask([7], 10) & causal_mask(10)``: the (query, key) pairs that
    may attend in a sequence of :data:`PREDICTION_LENGTH` real tokens padded to
    :data:`PREDICTION_MAX_LEN`.

    ``prediction`` may also be a function returning the number. The likely mistakes are
    named; a wrong prediction is never told the right value."""
    value = read_prediction(prediction)
    L, M = PREDICTION_LENGTH, PREDICTION_MAX_LEN
    expected = sum(min(i + 1, L) for i in range(M))
    mistakes = {
        L * (L + 1) // 2: _(
            "you counted only the real queries; the padding mask removes padded keys "
            "(columns), so the padded queries (rows) still attend to the real keys"
        ),
        M * (M + 1) // 2: _(
            "that is the causal mask alone; the padding mask also removes the padded keys"
        ),
        M * L: _(
            "that is the padding mask alone; the causal mask also removes every key after "
            "the query"
        ),
        sum(min(i, L) for i in range(M)): _(
            "you left out the diagonal: a query may attend to its own position"
        ),
    }
    if value == expected:
        return
    if value in mistakes:
        raise Mismatch(f"{value:g}: {mistakes[value]}")
    raise Mismatch(
        _(
            "your prediction {value} is not the count; draw the mask row by row before "
            "running the next cell",
            value=f"{value:g}",
        )
    )
