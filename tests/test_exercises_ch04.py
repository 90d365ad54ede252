"""Chapter 4's checkers accept the reference solutions, reject plausible wrong answers,
and see stubs."""

import torch
from selfattn.exercises.ch04 import (
    check_decoding_mask,
    check_masked_softmax,
    check_padding_mask,
    check_sliding_window,
)


def stub(*args):
    raise NotImplementedError


def test_padding_mask():
    def right(lengths, max_len):
        return torch.arange(max_len)[None, :] < torch.tensor(lengths)[:, None]

    def flipped(lengths, max_len):  # nn.MultiheadAttention's key_padding_mask convention
        return ~right(lengths, max_len)

    def off_by_one(lengths, max_len):
        return torch.arange(max_len)[None, :] <= torch.tensor(lengths)[:, None]

    assert check_padding_mask(right).passed
    assert not check_padding_mask(flipped)
    assert "flipped" in check_padding_mask(flipped).message
    assert not check_padding_mask(off_by_one)
    assert not check_padding_mask(lambda lengths, max_len: right(lengths, max_len).int())
    assert check_padding_mask(stub).status == "not attempted"


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
    assert not check_sliding_window(one_too_many)
    assert not check_sliding_window(not_causal)
    assert check_sliding_window(stub).status == "not attempted"


def test_masked_softmax():
    def right(scores, mask):
        scores = scores.masked_fill(~mask, float("-inf"))
        row_max = scores.amax(-1, keepdim=True)
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        e = torch.exp(scores - row_max)
        total = e.sum(-1, keepdim=True)
        return e / torch.where(total == 0, torch.ones_like(total), total)

    def minus_1e9(scores, mask):  # uniform weights on a fully masked row
        return torch.softmax(scores.masked_fill(~mask, -1e9), -1)

    def minus_inf(scores, mask):  # NaN on a fully masked row
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)

    def multiply_after(scores, mask):  # zeros out after softmax without renormalising
        return torch.softmax(scores, -1) * mask

    assert check_masked_softmax(right).passed
    for wrong in (minus_1e9, minus_inf, multiply_after):
        assert not check_masked_softmax(wrong), wrong.__name__
    assert "NaN" in check_masked_softmax(minus_inf).message
    assert check_masked_softmax(stub).status == "not attempted"


def test_decoding_mask():
    def right(n, m):
        return torch.ones(n, m, dtype=torch.bool).tril(m - n)

    def top_left(n, m):  # what is_causal=True does
        return torch.ones(n, m, dtype=torch.bool).tril()

    def all_keys(n, m):
        return torch.ones(n, m, dtype=torch.bool)

    assert check_decoding_mask(right).passed
    assert not check_decoding_mask(top_left)
    assert not check_decoding_mask(all_keys)
    assert check_decoding_mask(stub).status == "not attempted"
