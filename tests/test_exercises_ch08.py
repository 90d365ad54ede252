"""Chapter 8's checkers take the reference solutions, reject wrong answers, and see stubs."""

import torch
import torch.nn.functional as F
from selfattn.exercises.ch08 import (
    check_linear_attention,
    check_linear_step,
    check_receptive_field,
    check_window_pairs,
)


def stub(*args):
    raise NotImplementedError


def test_window_pairs():
    assert check_window_pairs(lambda n, w: sum(min(i + 1, w) for i in range(n))).passed
    assert not check_window_pairs(lambda n, w: n * w)  # ignores the first rows
    assert not check_window_pairs(lambda n, w: n * (n + 1) // 2)  # full causal
    assert check_window_pairs(stub).status == "not attempted"


def test_receptive_field():
    assert check_receptive_field(lambda w, layers: layers * (w - 1) + 1).passed
    assert not check_receptive_field(lambda w, layers: layers * w)
    assert not check_receptive_field(lambda w, layers: w**layers)
    assert check_receptive_field(stub).status == "not attempted"


def phi(x):
    return F.elu(x) + 1


def test_linear_attention():
    def right(q, k, v):
        kv = phi(k).transpose(-2, -1) @ v
        z = phi(k).sum(-2)
        return (phi(q) @ kv) / ((phi(q) * z.unsqueeze(-2)).sum(-1, keepdim=True) + 1e-6)

    def unnormalised(q, k, v):
        return phi(q) @ (phi(k).transpose(-2, -1) @ v)

    def softmax_attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    def raw_features(q, k, v):  # no feature map: can divide by ~0
        kv = k.transpose(-2, -1) @ v
        return (q @ kv) / ((q * k.sum(-2).unsqueeze(-2)).sum(-1, keepdim=True) + 1e-6)

    assert check_linear_attention(right).passed
    for wrong in (unnormalised, softmax_attention, raw_features):
        assert not check_linear_attention(wrong)
    assert check_linear_attention(stub).status == "not attempted"


def test_linear_step():
    def right(S, z, q, k, v):
        S = S + torch.outer(phi(k), v)
        z = z + phi(k)
        return (phi(q) @ S) / (phi(q) @ z + 1e-6), S, z

    def read_before_write(S, z, q, k, v):
        out = (phi(q) @ S) / (phi(q) @ z + 1e-6)
        return out, S + torch.outer(phi(k), v), z + phi(k)

    def forgets_z(S, z, q, k, v):
        S = S + torch.outer(phi(k), v)
        return (phi(q) @ S) / (phi(q) @ z + 1e-6), S, z

    assert check_linear_step(right).passed
    assert not check_linear_step(read_before_write)
    assert not check_linear_step(forgets_z)
    assert check_linear_step(stub).status == "not attempted"
