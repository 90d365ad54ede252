"""Chapter 4's checkers accept the reference solutions, reject plausible wrong answers, name the
likely mistakes by their diagnosis, and see stubs."""

import math

import numpy as np
import pytest
import selfattn
import torch
from selfattn.exercises.ch04 import (
    PREDICTION_LENGTH,
    PREDICTION_MAX_LEN,
    buggy_decoding_attention,
    buggy_masked_attention,
    check_allowed_pairs_prediction,
    check_decoding_bug,
    check_mask_convention_bug,
    check_padding_mask,
    check_sliding_window,
)


def stub(*args):
    raise NotImplementedError


# ---- 4.1 padding mask ---------------------------------------------------------------------------
def test_padding_mask():
    def right(lengths, max_len):
        return torch.arange(max_len)[None, :] < torch.tensor(lengths)[:, None]

    def flipped(lengths, max_len):  # nn.MultiheadAttention's key_padding_mask convention
        return ~right(lengths, max_len)

    def off_by_one(lengths, max_len):
        return torch.arange(max_len)[None, :] <= torch.tensor(lengths)[:, None]

    assert check_padding_mask(right).passed
    assert "flipped" in check_padding_mask(flipped).message
    result = check_padding_mask(off_by_one)
    assert not result and "the first pad, is marked as a real" in result.message, result.message
    assert "<" not in result.message  # the mistake is named, not the change (issue 45)
    assert not check_padding_mask(lambda lengths, max_len: right(lengths, max_len).int())
    assert check_padding_mask(stub).status == "not attempted"


# ---- 4.2 sliding window -------------------------------------------------------------------------
def test_sliding_window():
    def right(n, window):
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        return (j <= i) & (i - j < window)

    def one_too_many(n, window):
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        return (j <= i) & (i - j <= window)

    def not_causal(n, window):
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        return (i - j).abs() < window

    assert check_sliding_window(right).passed
    assert "window + 1 keys" in check_sliding_window(one_too_many).message
    assert "not causal" in check_sliding_window(not_causal).message
    assert check_sliding_window(stub).status == "not attempted"


# ---- 4.3 find the bug: the mask convention ------------------------------------------------------
def scores_of(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def fixed_masked_attention(q, k, v, mask):
    scores = scores_of(q, k).masked_fill(~mask, float("-inf"))
    return selfattn.softmax(scores) @ v


CONVENTION_WRONG = {
    "the bug left in": (buggy_masked_attention, "still masks where the mask is True"),
    "mask after the softmax": (
        lambda q, k, v, mask: (torch.softmax(scores_of(q, k), -1) * mask) @ v,
        "after the softmax",
    ),
    "torch.softmax (NaN row)": (
        lambda q, k, v, mask: (
            torch.softmax(scores_of(q, k).masked_fill(~mask, float("-inf")), -1) @ v
        ),
        "NaN",
    ),
}


def test_convention_bug_accepts_the_fix():
    assert check_mask_convention_bug(fixed_masked_attention).passed
    assert check_mask_convention_bug(selfattn.scaled_dot_product_attention).passed


@pytest.mark.parametrize("name", CONVENTION_WRONG)
def test_convention_bug_names_the_mistake(name):
    wrong, diagnosis = CONVENTION_WRONG[name]
    result = check_mask_convention_bug(wrong)
    assert result.status == "failed" and diagnosis in result.message, result.message


def test_convention_bug_rejects_a_finite_fill():
    # -1e9 gives the query with no allowed key uniform weights instead of zeros.
    def finite(q, k, v, mask):
        return torch.softmax(scores_of(q, k).masked_fill(~mask, -1e9), -1) @ v

    result = check_mask_convention_bug(finite)
    assert result.status == "failed" and "no key" in result.message, result.message


def test_buggy_masked_attention_is_the_flipped_mask():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 8, generator=g) for _ in range(3))
    mask = selfattn.causal_mask(4)
    assert torch.allclose(
        buggy_masked_attention(q, k, v, mask),
        selfattn.scaled_dot_product_attention(q, k, v, ~mask),
    )


# ---- 4.4 find the bug: decoding with a cache ----------------------------------------------------
def fixed_decoding(q_new, k, v):
    n, m = q_new.shape[-2], k.shape[-2]
    allowed = torch.ones(n, m, dtype=torch.bool).tril(diagonal=m - n)
    return selfattn.scaled_dot_product_attention(q_new, k, v, allowed)


DECODING_WRONG = {
    "the bug left in": (buggy_decoding_attention, "still aligned top-left"),
    "offset with the wrong sign": (
        lambda q, k, v: selfattn.scaled_dot_product_attention(
            q,
            k,
            v,
            torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(q.shape[-2] - k.shape[-2]),
        ),
        "wrong sign",
    ),
    "no mask": (lambda q, k, v: selfattn.scaled_dot_product_attention(q, k, v), "no mask"),
}


def test_decoding_bug_accepts_the_fix_and_the_library():
    assert check_decoding_bug(fixed_decoding).passed
    assert check_decoding_bug(
        lambda q, k, v: selfattn.scaled_dot_product_attention(
            q, k, v, selfattn.causal_mask(q.shape[-2], k.shape[-2], alignment="bottom_right")
        )
    ).passed


@pytest.mark.parametrize("name", DECODING_WRONG)
def test_decoding_bug_names_the_mistake(name):
    wrong, diagnosis = DECODING_WRONG[name]
    result = check_decoding_bug(wrong)
    assert result.status == "failed" and diagnosis in result.message, result.message


def test_buggy_decoding_matches_only_without_a_cache():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(5, 8, generator=g) for _ in range(3))
    full = selfattn.scaled_dot_product_attention(q, k, v, selfattn.causal_mask(5))
    assert torch.allclose(buggy_decoding_attention(q, k, v), full)  # n = m: no difference
    assert not torch.allclose(buggy_decoding_attention(q[-2:], k, v), full[-2:])


# ---- 4.5 predict, then run: allowed pairs -----------------------------------------------------
def true_count():
    mask = selfattn.padding_mask([PREDICTION_LENGTH], PREDICTION_MAX_LEN) & selfattn.causal_mask(
        PREDICTION_MAX_LEN
    )
    return int(mask.sum())


def test_prediction_accepts_the_count():
    count = true_count()
    assert check_allowed_pairs_prediction(count).passed
    assert check_allowed_pairs_prediction(float(count)).passed
    assert check_allowed_pairs_prediction(np.int64(count)).passed
    assert check_allowed_pairs_prediction(torch.tensor(count)).passed
    assert check_allowed_pairs_prediction(lambda: count).passed


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (28, "padded queries (rows) still attend"),
        (55, "causal mask alone"),
        (70, "padding mask alone"),
        (42, "left out the diagonal"),
    ],
)
def test_prediction_names_the_mistake(wrong, diagnosis):
    result = check_allowed_pairs_prediction(wrong)
    assert result.status == "failed" and diagnosis in result.message, result.message


def test_prediction_rejects_other_answers():
    assert check_allowed_pairs_prediction(true_count() + 1).status == "failed"
    assert check_allowed_pairs_prediction("49").status == "failed"
    assert check_allowed_pairs_prediction(True).status == "failed"


# ---- every checker: stubs are "not attempted", crashes are reported -----------------------------
ALL = [
    check_padding_mask,
    check_sliding_window,
    check_mask_convention_bug,
    check_decoding_bug,
    check_allowed_pairs_prediction,
]


@pytest.mark.parametrize("check", ALL, ids=lambda c: c.__name__)
def test_stub_is_not_attempted(check, capsys):
    assert check(stub).status == "not attempted"
    assert check(lambda *a: None).status == "not attempted"
    assert check(None).status == "not attempted"
    assert capsys.readouterr().out.count("not attempted yet") == 3


@pytest.mark.parametrize("check", ALL, ids=lambda c: c.__name__)
def test_a_crash_is_reported_not_raised(check):
    def crashes(*args):
        raise RuntimeError("boom")

    result = check(crashes)
    assert result.status == "failed" and "RuntimeError: boom" in result.message
