"""Chapter 1 and 2 explorers: the views they draw are right, and bad input is refused."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from selfattn.data import CorefTask  # noqa: E402
from selfattn.gradient_reach import gradient_reach  # noqa: E402
from selfattn.models import AttentionClassifier  # noqa: E402
from selfattn.widgets import ch01, ch02  # noqa: E402


def test_ch01_profiles_are_gradient_reach_and_shorter_lengths_reuse_the_draw():
    profiles = ch01.reach_profiles(16, d=4, seed=1)
    assert set(profiles) == {"RNN (tanh)", "LSTM", "self-attention"}
    encoders = ch01.random_encoders(4, seed=1)
    x = torch.randn(ch01.LENGTHS[-1], 4, generator=torch.Generator().manual_seed(2))[:16]
    np.testing.assert_allclose(
        profiles["LSTM"], gradient_reach(encoders["LSTM"], x.double()).numpy(), rtol=1e-12
    )
    assert profiles["LSTM"].dtype == np.float64
    # the RNN's reach at distance 15 is far below its reach at distance 0
    assert profiles["RNN (tanh)"][0] < 1e-2 * profiles["RNN (tanh)"][-1]
    with pytest.raises(ValueError, match="n must be between 1 and 256, got 0"):
        ch01.reach_profiles(0)
    with pytest.raises(ValueError, match="dtype must be torch.float32 or torch.float64"):
        ch01.reach_profiles(8, dtype=torch.float16)


def test_ch01_float64_follows_the_decay_where_float32_gives_zero():
    f64 = ch01.reach_profiles(256, seed=0)
    f32 = ch01.reach_profiles(256, seed=0, dtype=torch.float32)
    rnn64, rnn32 = f64["RNN (tanh)"][::-1], f32["RNN (tanh)"][::-1]  # index = distance
    # the same weights: where float32 is comfortably in range, the two agree
    np.testing.assert_allclose(rnn32[:20], rnn64[:20], rtol=1e-3)
    # float64 never reaches 0, and decays monotonically in trend (no cliff)
    assert (rnn64 > 0).all() and rnn64[255] < 1e-60
    assert (rnn32 == 0).any()  # float32's own gradient underflows at long distances
    steps = np.diff(np.log10(rnn64[10:]))
    assert steps.max() < 1.0 and steps.min() > -3.0  # no sudden drop of many decades


def test_ch01_figures_and_explorer():
    ax = ch01.plot_reach(8, d=4)
    assert ax.get_yscale() == "log" and "n = 8" in ax.get_title() and ax.get_xlabel()
    fig = ch01.plot_reach_grid((8, 16), d=4)
    assert len(fig.axes) == 2
    plt.close("all")
    assert ch01.explorer(n=16, d=4).children
    with pytest.raises(ValueError, match="n must be one of"):
        ch01.explorer(n=17)
    with pytest.raises(ValueError, match="seed must be from 0 to 4"):
        ch01.explorer(seed=9)


def test_ch02_weights_figures_and_explorer():
    task = CorefTask()
    torch.manual_seed(0)
    model = AttentionClassifier(
        len(task.vocab),
        task.num_classes,
        d_model=8,
        num_layers=2,
        num_heads=2,
        positions="learned",
        max_len=11,
    )
    example = task.example(0, "animal", "street", "tired")
    weights = ch02.sentence_weights(model, task, example)
    assert len(weights) == 2 and weights[0].shape == (2, 11, 11)
    np.testing.assert_allclose(weights[1].sum(-1), np.ones((2, 11)), rtol=1e-5)
    cold = ch02.sentence_weights(model, task, example, temperature=0.01)
    assert (cold[0].max(-1) >= weights[0].max(-1) - 1e-6).all()  # a cold softmax is sharper
    assert np.median(cold[0].max(-1)) > 0.99  # and mostly one-hot
    axes = ch02.plot_sentence(model, task, example, layer=0, head=1)
    assert "layer 1/2, head 2" in axes[0].get_title()
    with pytest.raises(ValueError, match="head must be in 0..1, got 2"):
        ch02.plot_sentence(model, task, example, head=2)
    other = task.example(1, "dog", "river", "wet")
    fig = ch02.plot_sentences(model, task, [example, other])
    assert len(fig.axes) == 2
    # each panel names the model's answer and says whether it is right
    for ax, ex in zip(fig.axes, (example, other)):
        answer = ch02.model_answer(model, task, ex)
        with torch.no_grad():
            ids = task.encode(list(ex.tokens))[None]
            logits = model(ids, torch.tensor([ex.it_position]))
        assert answer == task.nouns[int(logits.argmax())]
        title = ax.get_title()
        assert f"model: {answer}" in title
        if answer == ex.antecedent:
            assert "(right)" in title
        else:
            assert f"(wrong; it = {ex.antecedent})" in title
    plt.close("all")
    assert ch02.explorer(model, task, [example]).children
    with pytest.raises(ValueError, match="at least one example"):
        ch02.explorer(model, task, [])


def test_ch01_forget_gates_match_a_step_by_step_lstm():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(3, 4, batch_first=True)
    x = torch.randn(2, 5, 3)
    gates = ch01.lstm_forget_gates(lstm, x)
    assert gates.shape == (2, 5, 4)
    # step by step with LSTMCell sharing the weights: c_t = f_t c_{t-1} + i_t g_t
    cell = torch.nn.LSTMCell(3, 4)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(cell, name).copy_(getattr(lstm, f"{name}_l0"))
    h = c = torch.zeros(2, 4)
    with torch.no_grad():
        for t in range(5):
            i, f, g, o = (
                x[:, t] @ cell.weight_ih.T + cell.bias_ih + h @ cell.weight_hh.T + cell.bias_hh
            ).chunk(4, dim=-1)
            torch.testing.assert_close(gates[:, t], torch.sigmoid(f))
            h, c = cell(x[:, t], (h, c))
    with pytest.raises(ValueError, match="x must have shape"):
        ch01.lstm_forget_gates(lstm, torch.randn(5, 3))
    with pytest.raises(ValueError, match="one-layer batch_first"):
        ch01.lstm_forget_gates(torch.nn.LSTM(3, 4), x)
