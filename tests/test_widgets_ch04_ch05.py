"""Chapter 4 and 5 explorers: the views they draw are right, and bad input is refused."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from selfattn import causal_mask, sliding_window_mask  # noqa: E402
from selfattn.widgets import ch04, ch05  # noqa: E402


def test_ch04_masks_and_weights():
    assert torch.equal(ch04.mask_for("causal", 5), causal_mask(5))
    assert torch.equal(ch04.mask_for("sliding window", 6, window=2), sliding_window_mask(6, 2))
    pad = ch04.mask_for("padding", 4, length=2)
    assert pad[:, 2:].sum() == 0 and pad[:, :2].all()
    view = ch04.mask_view("padding + causal", 6, length=3)
    assert torch.allclose(view.weights.sum(-1), torch.ones(6))
    assert torch.equal(view.weights[~view.mask], torch.zeros(int((~view.mask).sum())))
    empty = ch04.mask_view("padding", 4, length=0)
    assert torch.equal(empty.weights, torch.zeros(4, 4))  # nothing to attend to: zeros, not NaN
    with pytest.raises(ValueError, match="kind must be one of"):
        ch04.mask_for("diagonal", 4)
    fig = ch04.plot_explorer_grid()
    assert len(fig.axes) == 9  # 3 rows x (mask, weights, colour bar)
    plt.close("all")
    assert ch04.explorer(kind="causal", n=8, length=5).children


def test_ch05_head_views():
    w = torch.softmax(torch.randn(2, 5, 5), -1)
    tokens = list("abcde")
    assert torch.allclose(torch.as_tensor(ch05.head_token_weights(w, 1, 3)), w[1, 3].double())
    with pytest.raises(ValueError, match="head must be in 0..1"):
        ch05.head_token_weights(w, 2, 0)
    with pytest.raises(ValueError, match=r"\(h, n, n\)"):
        ch05.head_token_weights(w[0], 0, 0)
    with pytest.raises(ValueError, match="expected n=5"):
        ch05.plot_head_token(w, tokens[:3], 0, 0)
    fig = ch05.plot_explorer_grid(w, tokens, query=4)
    assert len(fig.axes) == 2
    plt.close("all")
    assert ch05.explorer(w, tokens).children
