"""Chapter 8's checkers pass the right answers, name the likely mistakes, and see stubs."""

import pytest
import torch
import torch.nn.functional as F
from selfattn.efficient.linear import linear_attention
from selfattn.exercises.ch08 import (
    STRIDED_CASE,
    band_mask_mistakes,
    causal_linear_buggy,
    causal_linear_mistakes,
    check_band_mask,
    check_causal_linear,
    check_decayed_step,
    check_linear_step,
    check_strided_prediction,
    decayed_step_mistakes,
    strided_mistakes,
)


def stub(*args):
    raise NotImplementedError


def phi(x):
    return F.elu(x) + 1


def band(n, w, causal=True):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return ((i - j < w) & (j <= i)) if causal else ((i - j).abs() < w)


def test_band_mask_right_and_named_mistakes():
    assert check_band_mask(band).passed
    assert check_band_mask(lambda n, w, c: band(n, w, c).int().numpy()).passed  # 0/1 accepted
    assert check_band_mask(stub).status == "not attempted"
    off_by_one, inverted, forward = band_mask_mistakes()

    def wide(n, w, causal=True):
        return band(n, w + 1, causal)

    assert off_by_one in check_band_mask(wide).message
    assert inverted in check_band_mask(lambda n, w, c: ~band(n, w, c)).message
    assert (
        forward in check_band_mask(lambda n, w, c: band(n, w, c).T if c else band(n, w, c)).message
    )
    assert not check_band_mask(lambda n, w, c: torch.ones(n, n, dtype=torch.bool))


def test_strided_prediction_right_and_named_mistakes():
    n, s = STRIDED_CASE
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    right = int(((j <= i) & (((i - j) < s) | ((i - j) % s == 0))).sum())
    assert check_strided_prediction(right).passed
    assert check_strided_prediction(None).status == "not attempted"
    local_only, twice, triangle, strided_only = strided_mistakes()
    local = sum(min(r + 1, s) for r in range(n))
    strided = sum(r // s + 1 for r in range(n))
    assert local_only in check_strided_prediction(local).message
    assert twice in check_strided_prediction(local + strided).message
    assert triangle in check_strided_prediction(n * (n + 1) // 2).message
    assert strided_only in check_strided_prediction(strided).message
    assert "expected" in check_strided_prediction(right + 1).message


def causal_right(q, k, v):
    fq, fk = phi(q), phi(k)
    kv = fk.unsqueeze(-1) * v.unsqueeze(-2)
    s, z = kv.cumsum(-3), fk.cumsum(-2)
    return (fq.unsqueeze(-2) @ s).squeeze(-2) / ((fq * z).sum(-1, keepdim=True) + 1e-6)


def test_causal_linear_right_and_named_mistakes():
    assert check_causal_linear(causal_right).passed
    assert check_causal_linear(stub).status == "not attempted"
    not_causal, unnormalised = causal_linear_mistakes()
    # the untouched exercise runs the planted bug: not attempted, as in chapter 7 (issue 30)
    assert check_causal_linear(causal_linear_buggy).status == "not attempted"

    def half_fixed(q, k, v):  # the bug fixed on 2-D inputs only: no longer "not attempted"
        out = causal_linear_buggy(q, k, v)
        return linear_attention(q, k, v, causal=True) if q.dim() == 2 else out

    assert check_causal_linear(half_fixed).status == "failed"

    def everything(q, k, v):
        fq, fk = phi(q), phi(k)
        return (fq @ (fk.transpose(-2, -1) @ v)) / (
            (fq * fk.sum(-2).unsqueeze(-2)).sum(-1, keepdim=True) + 1e-6
        )

    def no_normaliser(q, k, v):
        return (phi(q) @ phi(k).transpose(-2, -1)).tril() @ v

    assert not_causal in check_causal_linear(everything).message
    assert unnormalised in check_causal_linear(no_normaliser).message
    assert not check_causal_linear(lambda q, k, v: F.scaled_dot_product_attention(q, k, v))


def step_right(S, z, q, k, v, gamma):
    S = gamma * S + torch.outer(phi(k), v)
    z = gamma * z + phi(k)
    return (phi(q) @ S) / (phi(q) @ z + 1e-6), S, z


def test_decayed_step_right_and_named_mistakes():
    assert check_decayed_step(step_right).passed
    assert check_decayed_step(stub).status == "not attempted"
    late, read_first, z_not_decayed = decayed_step_mistakes()

    def decay_after(S, z, q, k, v, gamma):
        S, z = gamma * (S + torch.outer(phi(k), v)), gamma * (z + phi(k))
        return (phi(q) @ S) / (phi(q) @ z + 1e-6), S, z

    def read_before(S, z, q, k, v, gamma):
        out = (phi(q) @ (gamma * S)) / (phi(q) @ (gamma * z) + 1e-6)
        return out, gamma * S + torch.outer(phi(k), v), gamma * z + phi(k)

    def z_forgets_nothing(S, z, q, k, v, gamma):
        S, z = gamma * S + torch.outer(phi(k), v), z + phi(k)
        return (phi(q) @ S) / (phi(q) @ z + 1e-6), S, z

    assert late in check_decayed_step(decay_after).message
    assert read_first in check_decayed_step(read_before).message
    assert z_not_decayed in check_decayed_step(z_forgets_nothing).message
    assert not check_decayed_step(lambda S, z, q, k, v, g: (v, S, z))


def test_linear_step_without_decay():
    assert check_linear_step(lambda S, z, q, k, v: step_right(S, z, q, k, v, 1.0)).passed
    assert not check_linear_step(lambda S, z, q, k, v: step_right(S, z, q, k, v, 0.5))
    assert check_linear_step(stub).status == "not attempted"


@pytest.mark.parametrize("bad", ["three", [[1, 2]], torch.zeros(3, 3) + 0.5])
def test_band_mask_rejects_non_masks(bad):
    assert not check_band_mask(lambda n, w, c: bad)
