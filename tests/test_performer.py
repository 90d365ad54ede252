"""FAVOR+: unbiased random features, orthogonal blocks, convergence to softmax attention."""

import math

import pytest
import torch
import torch.nn.functional as F
from selfattn.efficient.performer import (
    gaussian_projection,
    performer_attention,
    positive_random_features,
)


def test_orthogonal_blocks_are_orthogonal_and_gaussian_sized():
    g = torch.Generator().manual_seed(0)
    w = gaussian_projection(48, 16, generator=g, dtype=torch.float64)
    assert w.shape == (48, 16)
    for b in range(3):
        block = w[16 * b : 16 * (b + 1)]
        gram = block @ block.T
        off = gram - torch.diag(torch.diagonal(gram))
        assert off.abs().max() < 1e-10  # rows of one block are orthogonal
    # Row norms are those of Gaussian vectors: mean square norm d.
    big = gaussian_projection(4096, 16, generator=g, dtype=torch.float64)
    assert abs((big * big).sum(-1).mean().item() - 16) < 0.5
    iid = gaussian_projection(5, 3, orthogonal=False, generator=g)
    assert iid.shape == (5, 3)


def test_features_estimate_the_exponential_kernel_without_bias():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 8, generator=g, dtype=torch.float64) * 0.4
    q, k = x[0:1], x[1:2]
    draws = []
    for _ in range(200):
        w = gaussian_projection(64, 8, orthogonal=False, generator=g, dtype=torch.float64)
        draws.append((positive_random_features(q, w) @ positive_random_features(k, w).T).item())
    draws = torch.tensor(draws)
    exact = math.exp((q * k).sum().item())
    stderr = draws.std().item() / math.sqrt(len(draws))
    assert abs(draws.mean().item() - exact) < 4 * stderr
    assert (draws > 0).all()  # positive features: a positive estimate, always


def test_stabilizers_cancel_in_attention():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 4, generator=g, dtype=torch.float64)
    w = gaussian_projection(8, 4, generator=g, dtype=torch.float64)
    plain = positive_random_features(x, w)
    row = positive_random_features(x, w, stabilize="row")
    ratio = plain / row
    torch.testing.assert_close(ratio, ratio[:, :1].expand_as(ratio))  # one factor per row
    every = positive_random_features(x, w, stabilize="all")
    torch.testing.assert_close(plain / every, (plain / every)[0, 0].expand_as(plain))
    with pytest.raises(ValueError, match="stabilize"):
        positive_random_features(x, w, stabilize="column")
    with pytest.raises(ValueError, match="projection"):
        positive_random_features(x, w[:, :3])


@pytest.mark.parametrize("causal", [False, True])
def test_converges_to_softmax_attention(causal):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 32, 8, generator=g, dtype=torch.float64) * 0.5 for _ in range(3))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def err(r):
        errs = []
        for s in range(4):
            out = performer_attention(
                q, k, v, num_features=r, causal=causal, generator=torch.Generator().manual_seed(s)
            )
            errs.append(((out - ref).norm() / ref.norm()).item())
        return sum(errs) / len(errs)

    small, large = err(8), err(2048)
    assert large < small / 4
    assert large < 0.05


def test_fixed_projection_is_the_kernel_formula():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    w = gaussian_projection(16, 4, generator=g, dtype=torch.float64)
    out = performer_attention(q, k, v, projection=w, scale=0.25, eps=0.0)
    a = positive_random_features(q * 0.5, w) @ positive_random_features(k * 0.5, w).T
    torch.testing.assert_close(out, (a @ v) / a.sum(-1, keepdim=True))  # stabilizers cancel
    assert (
        performer_attention(q.float(), k.float(), v.float(), projection=w).dtype == torch.float32
    )


def test_bad_input():
    q = torch.randn(3, 4)
    with pytest.raises(ValueError, match="num_features"):
        performer_attention(q, q, q, num_features=0)
    with pytest.raises(ValueError, match="scale"):
        performer_attention(q, q, q, scale=-1.0)
    with pytest.raises(TypeError):
        positive_random_features([1.0], torch.randn(2, 1))
