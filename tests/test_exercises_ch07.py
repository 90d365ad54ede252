"""Chapter 7's checkers take the reference solutions, name the likely mistakes, see stubs."""

import math

import numpy as np
import pytest
import torch
from selfattn.efficient import tiled_attention_io
from selfattn.exercises.ch07 import (
    DKDV_CASES,
    PLANTED,
    bytes_read_mistakes,
    causal_tiles_mistakes,
    check_bytes_read_prediction,
    check_causal_tiles_prediction,
    check_dkdv_pass,
    check_ds_tile,
    check_online_attention,
    check_tile_kind,
    dkdv_pass_mistakes,
    ds_tile_mistakes,
    online_attention_mistakes,
    tile_kind_mistakes,
)


def stub(*args):
    raise NotImplementedError


def failed_with(result, words):
    """The checker failed and its message contains ``words``."""
    return not result and words in result.message


# -- 7.1 tile kind (build) --------------------------------------------------------------------


def right_kind(q0, q1, k0, k1):
    if k0 > q1 - 1:  # every key after the block's last query
        return "skip"
    if k1 - 1 <= q0:  # the block's first query already sees the last key
        return "full"
    return "mask"


def brute_kind(q0, q1, k0, k1):
    allowed = torch.arange(k0, k1)[None, :] <= torch.arange(q0, q1)[:, None]
    return "skip" if not allowed.any() else "full" if allowed.all() else "mask"


def test_tile_kind_passes_the_solution_and_sees_the_stub():
    assert check_tile_kind(right_kind).passed
    assert check_tile_kind(brute_kind).passed
    assert check_tile_kind(lambda *t: right_kind(*t).upper()).passed  # any case
    assert check_tile_kind(stub).status == "not attempted"


@pytest.mark.parametrize(
    "rule, words",
    [
        (
            lambda q0, q1, k0, k1: "skip" if k0 > q1 else "full" if k1 - 1 <= q0 else "mask",
            "not skipped",
        ),
        (
            lambda q0, q1, k0, k1: "full" if k1 <= q0 else "skip" if k0 >= q1 else "mask",
            "was given a mask",
        ),
        (  # full judged by the last query: a correctness bug
            lambda q0, q1, k0, k1: "skip" if k0 >= q1 else "full" if k1 <= q1 else "mask",
            "earliest query",
        ),
        (  # skip judged by the first query: drops keys the later queries need
            lambda q0, q1, k0, k1: "skip" if k0 > q0 else "full" if k1 - 1 <= q0 else "mask",
            "latest query",
        ),
    ],
)
def test_tile_kind_names_each_mistake(rule, words):
    result = check_tile_kind(rule)
    assert not result and words in result.message


def test_tile_kind_names_block_numbers_and_reports_others():
    blocks = {}

    def by_block_number(q0, q1, k0, k1):  # knows the block sizes of the grid being asked
        if q0 == 0 and k0 == 0:
            blocks["bq"], blocks["bk"] = q1, k1
        i, j = q0 // blocks["bq"], k0 // blocks["bk"]
        return "skip" if j > i else "full" if j < i else "mask"

    result = check_tile_kind(by_block_number)
    assert not result and "block numbers" in result.message
    always_mask = check_tile_kind(lambda *t: "mask")
    assert not always_mask and "expected 'skip', got 'mask'" in always_mask.message
    assert "return 'skip', 'full' or 'mask'" in check_tile_kind(lambda *t: 1).message
    assert not check_tile_kind(lambda *t: True)
    assert len(set(tile_kind_mistakes())) == 5


# -- 7.2 online softmax (find the bug) ----------------------------------------------------


def online(s, v, block, fix="right"):
    mu = torch.tensor(-math.inf, dtype=s.dtype)
    ell = torch.zeros((), dtype=s.dtype)
    o = torch.zeros(v.shape[-1], dtype=v.dtype)
    for start in range(0, len(s), block):
        s_b, v_b = s[start : start + block], v[start : start + block]
        mu_new = torch.maximum(mu, s_b.max())
        alpha = torch.exp(mu - mu_new)
        p = torch.exp(s_b - mu_new)
        ell = (1.0 if fix == "l" else alpha) * ell + p.sum()
        if fix == "planted":
            o = o + p @ v_b
        elif fix == "inverse":
            o = (1 / alpha if alpha > 0 else 0.0) * o + p @ v_b
        elif fix == "new too":
            o = alpha * (o + p @ v_b)
        else:
            o = alpha * o + p @ v_b
        mu = mu_new
    return o / ell


def test_online_attention_passes_the_fix_and_treats_the_planted_bug_as_not_attempted():
    assert check_online_attention(online).passed
    assert check_online_attention(lambda s, v, b: torch.softmax(s, 0) @ v).passed
    assert check_online_attention(stub).status == "not attempted"
    planted = check_online_attention(lambda s, v, b: online(s, v, b, "planted"))
    assert planted.status == "not attempted"
    assert PLANTED["online_attention"] in online_attention_mistakes()


@pytest.mark.parametrize(
    "fix, words",
    [
        ("inverse", "divided by alpha instead of multiplied"),
        ("new too", "the new block was rescaled by alpha too"),
        ("l", "now l is not rescaled"),
    ],
)
def test_online_attention_names_the_likely_wrong_fixes(fix, words):
    result = check_online_attention(lambda s, v, b: online(s, v, b, fix))
    assert failed_with(result, words), result.message


def test_online_attention_names_the_planted_bug_when_only_some_cases_keep_it():
    def half_fixed(s, v, block):  # right for one block, planted bug otherwise
        return online(s, v, block, "right" if block == 3 else "planted")

    result = check_online_attention(half_fixed)
    assert failed_with(result, PLANTED["online_attention"]), result.message
    assert failed_with(check_online_attention(lambda s, v, b: v.mean(0)), "largest difference")


def test_online_attention_tells_a_float32_answer_to_compute_in_float64():
    # right to float32's rounding: told so, not shown two values that print alike
    for answer in (
        lambda s, v, b: online(s.float(), v.float(), b),
        lambda s, v, b: online(s.float(), v.float(), b).double(),
    ):
        result = check_online_attention(answer)
        assert failed_with(result, "correct to float32 precision"), result.message
        assert "float64" in result.message and "expected" not in result.message
    # a named mistake computed in float32 is still named
    result = check_online_attention(lambda s, v, b: online(s.float(), v.float(), b, "inverse"))
    assert failed_with(result, "divided by alpha instead of multiplied"), result.message
    # a real error just above float32's rounding is not called float32 precision
    result = check_online_attention(lambda s, v, b: online(s, v, b) + 1e-4)
    assert failed_with(result, "largest difference"), result.message


# -- 7.3 and 7.4 predictions --------------------------------------------------------------


def test_causal_tiles_prediction():
    right = sum(math.ceil(min(qs + 128, 1000) / 64) for qs in range(0, 1000, 128))
    assert right == 72
    assert check_causal_tiles_prediction(right).passed
    assert check_causal_tiles_prediction(72.0).passed
    assert check_causal_tiles_prediction(None).status == "not attempted"
    named = {
        128: "that is every tile",
        36: "T(T+1)/2",
        64: "exactly half of all tiles",
        71: "rounds the key blocks down",
    }
    assert len(named) == len(causal_tiles_mistakes())
    for value, words in named.items():
        result = check_causal_tiles_prediction(value)
        assert failed_with(result, words), result.message
    assert failed_with(check_causal_tiles_prediction(70), "70 is not right")
    assert failed_with(check_causal_tiles_prediction("72"), "write a number")
    assert failed_with(check_causal_tiles_prediction(True), "write a number")
    # a number of another type is read as the number it holds
    for value in (np.int64(72), np.array(72.0), torch.tensor(72)):
        assert check_causal_tiles_prediction(value).passed, value
    assert not check_causal_tiles_prediction(72.5)
    assert not check_causal_tiles_prediction(float("nan"))


def test_bytes_read_prediction():
    n, d = 4096, 64
    right = 2 * (n * d + math.ceil(n / 96) * 2 * n * d)
    assert right == 2 * tiled_attention_io(n, d, 65536, blocks=(96, 64)).reads
    assert check_bytes_read_prediction(right).passed
    assert check_bytes_read_prediction(None).status == "not attempted"
    named = {
        right // 2: "counts elements, not bytes",
        2 * 3 * n * d: "once per query block",
        2 * (n * d + (n // 96) * 2 * n * d): "the last, short query block was left out",
        2 * (n * d + n / 96 * 2 * n * d): "a fractional number of query blocks",
        2 * math.ceil(n / 96) * 2 * n * d: "Q was left out",
        right + 2 * (n * d + n): "that includes the writes",
    }
    assert len(named) == len(bytes_read_mistakes())
    for value, words in named.items():
        result = check_bytes_read_prediction(value)
        assert failed_with(result, words), result.message
    assert failed_with(check_bytes_read_prediction(right + 2), "is not right")
    assert str(right) not in check_bytes_read_prediction(right + 2).message


# -- 7.5 dS tile (find the bug) -----------------------------------------------------------


def ds_solution(q_i, k_j, v_j, do_i, lse_i, d_i):
    p = torch.exp(q_i @ k_j.T / q_i.shape[-1] ** 0.5 - lse_i[:, None])
    return p * (do_i @ v_j.T - d_i[:, None])


def p_of(q_i, k_j, lse_i, scale=True):
    s = q_i @ k_j.T / (q_i.shape[-1] ** 0.5 if scale else 1)
    return torch.exp(s - lse_i[:, None])


def test_ds_tile_passes_the_solution_and_treats_the_planted_bug_as_not_attempted(capsys):
    assert check_ds_tile(ds_solution).passed
    assert check_ds_tile(stub).status == "not attempted"
    assert "not attempted yet" in capsys.readouterr().out

    def planted(q, k, v, do, lse, d):
        p, dp = p_of(q, k, lse), do @ v.T
        return p * (dp - (p * dp).sum(-1, keepdim=True))

    assert check_ds_tile(planted).status == "not attempted"
    assert ds_tile_mistakes()[0] == PLANTED["ds_tile"]


def test_ds_tile_names_each_mistake():
    wrong = {
        "without the scale": lambda q, k, v, do, lse, d: (
            p_of(q, k, lse, scale=False) * (do @ v.T - d[:, None])
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
    assert len(wrong) == len(ds_tile_mistakes()) - 1  # all but the planted one
    for words, answer in wrong.items():
        result = check_ds_tile(answer)
        assert failed_with(result, "looks like") and words in result.message, result.message
    # a wrong answer that is no named mistake still fails, with the largest difference
    result = check_ds_tile(lambda *a: 2 * ds_solution(*a))
    assert not result and "looks like" not in result.message
    # a tile of the wrong shape (dS transposed) is refused
    assert not check_ds_tile(lambda *a: ds_solution(*a).T)


def test_ds_tile_tells_a_float32_answer_to_compute_in_float64():
    result = check_ds_tile(lambda *a: ds_solution(*(t.float() for t in a)))
    assert failed_with(result, "correct to float32 precision"), result.message
    assert "float64" in result.message and "expected" not in result.message
    result = check_ds_tile(lambda *a: ds_solution(*(t.float() for t in a)).double())
    assert failed_with(result, "correct to float32 precision"), result.message

    # a named mistake computed in float32 is still named
    def no_scale(q, k, v, do, lse, d):
        return p_of(q, k, lse, scale=False) * (do @ v.T - d[:, None])

    result = check_ds_tile(lambda *a: no_scale(*(t.float() for t in a)))
    assert failed_with(result, "without the scale"), result.message


# -- 7.6 the tutorial's non-causal backward (find the bug) ------------------------------------


def dkdv(q, k, v, do, lse, d_row, block, causal, bug=""):
    """The reader's dK/dV pass: the planted bug, a partial fix, or the fix."""
    n, scale = q.shape[0], q.shape[-1] ** -0.5
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for ks in range(0, n, block):
        k_j, v_j = k[ks : ks + block], v[ks : ks + block]
        first = ks if (causal or bug in ("planted", "start")) else 0
        for qs in range(first, n, block):
            q_i, do_i = q[qs : qs + block], do[qs : qs + block]
            s = q_i @ k_j.T * scale
            if (causal or bug == "planted") and bug != "no mask":
                rows = torch.arange(qs, qs + len(q_i))[:, None]
                cols = torch.arange(ks, ks + len(k_j))[None, :]
                s = s.masked_fill(cols > rows, -math.inf)
            p = torch.exp(s - lse[qs : qs + block, None])
            dv[ks : ks + block] += p.T @ do_i
            ds = p * (do_i @ v_j.T - d_row[qs : qs + block, None])
            dk[ks : ks + block] += ds.T @ q_i * (1.0 if bug == "scale" else scale)
    return dk, dv


def test_dkdv_pass_passes_the_fix_and_treats_the_planted_bug_as_not_attempted():
    assert check_dkdv_pass(dkdv).passed
    assert check_dkdv_pass(stub).status == "not attempted"
    planted = check_dkdv_pass(lambda *a: dkdv(*a, bug="planted"))
    assert planted.status == "not attempted"
    assert dkdv_pass_mistakes()[0] == PLANTED["dkdv_pass"]
    assert "#4541" in PLANTED["dkdv_pass"]


def test_dkdv_pass_right_answer_is_autograd_of_sdpa():
    # The checker's right answer, and so the solution, is the gradient of SDPA itself; the
    # planted bug is right on the causal cases only.
    g = torch.Generator().manual_seed(1)
    for n, d, block, causal in DKDV_CASES:
        q, k, v, do = (
            torch.randn(n, d, generator=g, dtype=torch.float64, requires_grad=True)
            for _ in range(4)
        )
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        want = torch.autograd.grad(o, (k, v), do)
        s = q @ k.T / d**0.5
        if causal:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
        args = [x.detach() for x in (q, k, v, do, torch.logsumexp(s, -1), (do * o).sum(-1))]
        for got, w in zip(dkdv(*args, block, causal), want):
            torch.testing.assert_close(got, w, atol=1e-12, rtol=1e-12)
        planted_right = all(
            torch.allclose(a, w, atol=1e-9)
            for a, w in zip(dkdv(*args, block, causal, "planted"), want)
        )
        assert planted_right == causal


@pytest.mark.parametrize(
    "bug, words",
    [
        ("start", "query blocks before each key block are still left out"),
        ("no mask", "with causal=True no mask is applied"),
        ("scale", "softmax scale"),
    ],
)
def test_dkdv_pass_names_each_mistake(bug, words):
    result = check_dkdv_pass(lambda *a: dkdv(*a, bug=bug))
    assert failed_with(result, words), result.message


def test_dkdv_pass_reports_other_wrong_answers():
    result = check_dkdv_pass(lambda *a: tuple(2 * x for x in dkdv(*a)))
    assert not result and "largest difference" in result.message
    result = check_dkdv_pass(lambda *a: dkdv(*a)[0])
    assert failed_with(result, "return (dk, dv)"), result.message
    result = check_dkdv_pass(lambda *a: tuple(x.float() for x in dkdv(*a)))
    assert failed_with(result, "correct to float32 precision"), result.message
