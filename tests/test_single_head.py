"""SingleHeadSelfAttention and KeyValueRecallModel (chapter 3), and the key-value recall data."""

import math

import pytest
import torch
import torch.nn.functional as F
from selfattn.data import key_value_recall
from selfattn.models import KeyValueRecallModel, SingleHeadSelfAttention


def test_single_head_matches_torch_sdpa_and_the_scale_switch():
    torch.manual_seed(0)
    att = SingleHeadSelfAttention(8, 16, 4)
    x = torch.randn(3, 5, 8)
    q, k, v = att.w_q(x), att.w_k(x), att.w_v(x)
    out, w = att(x, return_weights=True)
    assert out.shape == (3, 5, 4) and w.shape == (3, 5, 5)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v), atol=1e-5)
    att.scaled = False
    assert att.scale == 1.0
    assert torch.allclose(att(x), F.scaled_dot_product_attention(q, k, v, scale=1.0), atol=1e-5)
    att.scaled = True
    assert att.scale == 1 / math.sqrt(16)


def test_single_head_mask_and_bad_input():
    att = SingleHeadSelfAttention(4, 4)
    x = torch.randn(2, 3, 4)
    causal = torch.ones(3, 3, dtype=torch.bool).tril()
    _, w = att(x, causal, return_weights=True)
    assert torch.all(w[:, 0, 1:] == 0)
    with pytest.raises(
        ValueError, match=r"x must have shape \(\.\.\., n, d_model=4\), got \(2, 3, 5\)"
    ):
        att(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="d_k must be >= 1, got 0"):
        SingleHeadSelfAttention(4, 0)


def test_recall_data_is_consistent_and_deterministic():
    b = key_value_recall(
        50, n_pairs=8, n_keys=16, n_values=16, generator=torch.Generator().manual_seed(1)
    )
    assert b.keys.shape == b.values.shape == (50, 8) and b.query.shape == b.target.shape == (50,)
    assert all(len(set(row.tolist())) == 8 for row in b.keys)  # distinct keys per problem
    hit = b.keys == b.query[:, None]
    assert torch.all(hit.sum(1) == 1)
    assert torch.equal(b.values[hit], b.target)
    again = key_value_recall(50, generator=torch.Generator().manual_seed(1))
    assert all(torch.equal(a, c) for a, c in zip(b, again))
    with pytest.raises(
        ValueError, match="n_pairs=20 distinct keys cannot be drawn from n_keys=16"
    ):
        key_value_recall(4, n_pairs=20)
    with pytest.raises(ValueError, match="must be >= 1"):
        key_value_recall(0)


@pytest.fixture
def one_thread():
    # Tiny matrices: a second thread only adds synchronisation, which on a busy machine costs
    # seconds.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_recall_model_shapes_and_learning(one_thread):
    torch.manual_seed(0)
    model = KeyValueRecallModel(16, 16, d_model=32, d_k=32)
    g = torch.Generator().manual_seed(0)
    b = key_value_recall(8, generator=g)
    logits, w = model(b.keys, b.values, b.query, return_weights=True)
    assert logits.shape == (8, 16) and w.shape == (8, 9)
    assert torch.allclose(w.sum(-1), torch.ones(8))
    with pytest.raises(ValueError, match="expected keys \\(B, p\\)"):
        model(b.keys, b.values[:, :3], b.query)
    # A short run learns the task (chance is 1/16).
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        b = key_value_recall(64, generator=g)
        loss = F.cross_entropy(model(b.keys, b.values, b.query), b.target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    test = key_value_recall(500, generator=g)
    with torch.no_grad():
        acc = (
            (model(test.keys, test.values, test.query).argmax(-1) == test.target)
            .float()
            .mean()
            .item()
        )
    assert acc > 0.9


@pytest.mark.parametrize("d_k", [16, 512])
def test_the_chapters_control_starts_where_the_scaled_model_starts(d_k):
    # Chapter 3's control: the unscaled model with W_q and W_k shrunk by d_k^(-1/4) computes
    # exactly the scaled model's function (same seed, same draws), although it is unscaled.
    b = key_value_recall(32, generator=torch.Generator().manual_seed(0))
    outputs = {}
    for name in ("scaled", "unscaled", "control"):
        torch.manual_seed(0)
        model = KeyValueRecallModel(16, 16, 64, d_k, scaled=name == "scaled")
        if name == "control":
            with torch.no_grad():
                model.attention.w_q.weight.mul_(d_k**-0.25)
                model.attention.w_k.weight.mul_(d_k**-0.25)
        outputs[name] = model(b.keys, b.values, b.query, return_weights=True)
    for got, expected in zip(outputs["control"], outputs["scaled"]):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    # ...and the unscaled model does not: its weights are far sharper.
    sharp, flat = outputs["unscaled"][1].amax(-1).mean(), outputs["scaled"][1].amax(-1).mean()
    assert sharp > flat + 0.1
