"""Chapter 7's checkers take the reference solutions, reject wrong answers, and see stubs."""

import math

import torch
from selfattn.exercises.ch07 import (
    check_attention_flops,
    check_causal_tiles,
    check_ds_tile,
    check_merge_states,
    check_tiled_reads,
    ds_tile_mistakes,
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


def ds_solution(q_i, k_j, v_j, do_i, lse_i, d_i):
    p = torch.exp(q_i @ k_j.T / q_i.shape[-1] ** 0.5 - lse_i[:, None])
    return p * (do_i @ v_j.T - d_i[:, None])


def test_ds_tile_passes_the_solution_and_names_each_mistake(capsys):
    assert check_ds_tile(ds_solution).passed
    assert check_ds_tile(stub).status == "not attempted"
    assert "not attempted yet" in capsys.readouterr().out

    def p_of(q_i, k_j, lse_i, scale=True):
        s = q_i @ k_j.T / (q_i.shape[-1] ** 0.5 if scale else 1)
        return torch.exp(s - lse_i[:, None])

    wrong = {
        "without the scale": lambda q, k, v, do, lse, d: (
            p_of(q, k, lse, scale=False) * (do @ v.T - d[:, None])
        ),
        "rowsum of this tile's P o dP": lambda q, k, v, do, lse, d: (
            p_of(q, k, lse) * (do @ v.T - (p_of(q, k, lse) * (do @ v.T)).sum(-1, keepdim=True))
        ),
        "rowsum(dP) used for D": lambda q, k, v, do, lse, d: (
            p_of(q, k, lse) * (do @ v.T - (do @ v.T).sum(-1, keepdim=True))
        ),
        "softmax over this tile only": lambda q, k, v, do, lse, d: (
            torch.softmax(q @ k.T / q.shape[-1] ** 0.5, -1) * (do @ v.T - d[:, None])
        ),
        "the factor P left out": lambda q, k, v, do, lse, d: do @ v.T - d[:, None],
        "the wrong way round": lambda q, k, v, do, lse, d: (
            p_of(q, k, lse) * (d[:, None] - do @ v.T)
        ),
    }
    assert len(wrong) == len(ds_tile_mistakes())
    for words, answer in wrong.items():
        result = check_ds_tile(answer)
        assert not result
        assert "looks like" in result.message and words in result.message, result.message
    # a wrong answer that is no named mistake still fails, with the largest difference
    result = check_ds_tile(lambda *a: 2 * ds_solution(*a))
    assert not result and "looks like" not in result.message
    # a tile of the wrong shape (dS transposed) is refused
    assert not check_ds_tile(lambda *a: ds_solution(*a).T)
