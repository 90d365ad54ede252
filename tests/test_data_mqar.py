"""MQAR: problems are well formed, the mixers run, a tiny softmax model learns to recall."""

import pytest
import torch
from selfattn.data.mqar import MIXERS, RecallMixerModel, mqar_batch, train_mqar, window_recall
from selfattn.efficient.sliding_window import sliding_window_attention


def test_batch_queries_each_stored_key_once_with_its_value():
    b = mqar_batch(5, 6, n_keys=10, n_values=7, generator=torch.Generator().manual_seed(0))
    assert b.keys.shape == b.values.shape == b.targets.shape == (5, 12)
    assert (b.targets[:, :6] == -100).all() and (b.values[:, 6:] == 7).all()
    for row in range(5):
        stored = dict(zip(b.keys[row, :6].tolist(), b.values[row, :6].tolist()))
        assert len(stored) == 6  # distinct keys
        assert sorted(b.keys[row, 6:].tolist()) == sorted(stored)  # each queried once
        for key, target in zip(b.keys[row, 6:].tolist(), b.targets[row, 6:].tolist()):
            assert stored[key] == target
    with pytest.raises(ValueError, match="n_pairs"):
        mqar_batch(2, 11, n_keys=10)


@pytest.mark.parametrize("mixer", MIXERS)
def test_mixers_are_causal(mixer):
    torch.manual_seed(0)
    model = RecallMixerModel(mixer, d_model=16, n_keys=20, n_values=9, window=3)
    b = mqar_batch(2, 5, n_keys=20, n_values=9, generator=torch.Generator().manual_seed(1))
    out = model(b.keys, b.values)
    assert out.shape == (2, 10, 9)
    keys = b.keys.clone()
    keys[:, -1] = (keys[:, -1] + 1) % 20  # change the last token only
    torch.testing.assert_close(model(keys, b.values)[:, :-1], out[:, :-1])


def test_softmax_mixer_is_torch_sdpa_to_the_bit():
    # The recorded MQAR runs were trained with torch's causal kernel: the library's
    # kernel="torch" path must give the very same numbers.
    torch.manual_seed(0)
    model = RecallMixerModel("softmax", d_model=16, n_keys=20, n_values=9)
    x = torch.randn(3, 10, 16)
    q, k, v = model.qkv(x).chunk(3, dim=-1)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.equal(model.attend(x), expected)


def test_state_budgets():
    soft = RecallMixerModel("softmax", d_model=32)
    window = RecallMixerModel("sliding_window", d_model=32, window=16)
    lin = RecallMixerModel("linear", d_model=32)
    assert soft.state_numbers(128) == 2 * 128 * 32
    assert window.state_numbers(128) == 2 * 16 * 32 == window.state_numbers(1000)
    assert lin.state_numbers(128) == 32 * 32 + 32
    with pytest.raises(ValueError, match="mixer"):
        RecallMixerModel("rnn")


def test_softmax_attention_learns_to_recall_a_few_pairs():
    r = train_mqar("softmax", 4, steps=150, batch=32, lr=1e-2, d_model=32, eval_batch=128)
    assert r["recall"] > 0.9 and r["n"] == 8


@pytest.mark.parametrize("p, w", [(4, 16), (8, 16), (9, 16), (16, 16), (32, 16), (5, 3)])
def test_window_recall_counts_the_pairs_the_window_sees(p, w):
    # Which tokens each query sees, read off the sliding window itself: with equal
    # scores, a query's output is the mean of the one-hot rows of the tokens it sees.
    # Query m (position p + m) asks for each of the p pairs (positions 0 .. p-1) with
    # equal probability, so the share it can find is its visible pairs over p.
    n = 2 * p
    zeros = torch.zeros(1, n, 1)
    seen = sliding_window_attention(zeros, zeros, torch.eye(n)[None], w)[0] > 0
    share = seen[p:, :p].sum().item() / p**2
    chance = 1 / 64
    assert window_recall(p, w, n_values=64) == pytest.approx(share + (1 - share) * chance)
    assert window_recall(p, w) <= 1.0


def test_window_recall_is_one_when_every_pair_is_in_view():
    # 8 pairs and their 8 queries are 16 tokens: a window of 16 sees them all.
    assert window_recall(8, 16) == 1.0
    assert window_recall(16, 16) < 0.5
    assert window_recall(1000, 16) < 0.02
    with pytest.raises(ValueError, match="n_pairs"):
        window_recall(0)


def test_chapter_8_uses_the_library_bound():
    # The chapter once had its own copy, which did not cap the visible pairs at p.
    import json
    from pathlib import Path

    nb = Path(__file__).parents[1] / "chapters" / "08_sparse_and_linear.ipynb"
    code = "".join(
        "".join(c["source"])
        for c in json.loads(nb.read_text())["cells"]
        if c["cell_type"] == "code"
    )
    assert "def window_recall" not in code and "window_recall(" in code
