"""Chapter 7's checkers take the reference solutions, reject wrong answers, and see stubs."""

import math

import torch
from selfattn.exercises.ch07 import (
    check_attention_flops,
    check_causal_tiles,
    check_merge_states,
    check_tiled_reads,
)


def stub(*args):
    raise NotImplementedError


def test_attention_flops():
    assert check_attention_flops(lambda n, m, dk, dv: 2 * n * m * dk + 2 * n * m * dv).passed
    assert not check_attention_flops(
        lambda n, m, dk, dv: n * m * dk + n * m * dv
    )  # multiply-add as 1
    assert not check_attention_flops(
        lambda n, m, dk, dv: 4 * n * n * dk
    )  # assumes n = m, d_k = d_v
    assert check_attention_flops(stub).status == "not attempted"


def right_merge(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    a1, a2 = torch.exp(m1 - m), torch.exp(m2 - m)
    return m, a1 * l1 + a2 * l2, a1 * o1 + a2 * o2


def test_merge_states():
    assert check_merge_states(right_merge).passed

    def no_rescale(m1, l1, o1, m2, l2, o2):
        return torch.maximum(m1, m2), l1 + l2, o1 + o2

    def inverse_rescale(m1, l1, o1, m2, l2, o2):  # the FA-2 paper's typo
        m = torch.maximum(m1, m2)
        a1, a2 = torch.exp(m - m1), torch.exp(m - m2)
        return m, a1 * l1 + a2 * l2, a1 * o1 + a2 * o2

    def rescale_only_l(m1, l1, o1, m2, l2, o2):
        m = torch.maximum(m1, m2)
        a1, a2 = torch.exp(m1 - m), torch.exp(m2 - m)
        return m, a1 * l1 + a2 * l2, o1 + o2

    for wrong in (no_rescale, inverse_rescale, rescale_only_l):
        assert not check_merge_states(wrong)
    assert check_merge_states(stub).status == "not attempted"


def test_causal_tiles():
    def right(n, bq, bk):
        return sum(math.ceil(min(qs + bq, n) / bk) for qs in range(0, n, bq))

    def all_tiles(n, bq, bk):
        return math.ceil(n / bq) * math.ceil(n / bk)

    def half(n, bq, bk):
        t = math.ceil(n / bq)
        return t * (t + 1) // 2

    assert check_causal_tiles(right).passed
    assert not check_causal_tiles(all_tiles)
    assert not check_causal_tiles(half)  # right only for equal blocks dividing n
    assert check_causal_tiles(stub).status == "not attempted"


def test_tiled_reads():
    assert check_tiled_reads(lambda n, d, b: n * d + math.ceil(n / b) * 2 * n * d).passed
    assert not check_tiled_reads(lambda n, d, b: 3 * n * d)  # K, V read only once
    assert not check_tiled_reads(
        lambda n, d, b: n * d + (n // b) * 2 * n * d
    )  # floor instead of ceil
    assert not check_tiled_reads(lambda n, d, b: n * d + n / b * 2 * n * d)  # fractional blocks
    assert check_tiled_reads(stub).status == "not attempted"
