"""Chapter 3's explorer and its static figure."""

import math

import matplotlib
import numpy as np
import pytest
import torch
from selfattn.widgets import ch03, view_values, visible_view

matplotlib.use("Agg")


def test_query_weights_match_a_direct_computation():
    g = torch.Generator().manual_seed(5)
    q, k = torch.randn(1024, generator=g), torch.randn(7, 1024, generator=g)
    for d_k, scaled in ((4, True), (64, False), (1024, True)):
        r = ch03.query_weights(d_k, scaled, n_keys=7, seed=5)
        s = (k[:, :d_k] @ q[:d_k]).double() / (math.sqrt(d_k) if scaled else 1.0)
        assert np.allclose(r.weights, torch.softmax(s, 0).numpy(), atol=1e-12)
        assert (
            math.isclose(r.weights.sum(), 1.0, rel_tol=1e-12) and r.max_weight == r.weights.max()
        )


def test_entropy_bounds_and_saturation():
    r = ch03.query_weights(1024, scaled=False, n_keys=16, seed=4)
    assert r.entropy < 0.01 and r.max_weight > 0.999  # unscaled at d_k = 1024: one-hot
    for d_k in ch03.D_K_CHOICES:
        r = ch03.query_weights(d_k, scaled=True)
        assert 0 <= r.entropy <= math.log(16) + 1e-12
    one = ch03.query_weights(8, n_keys=1)
    assert one.weights.tolist() == [1.0] and one.entropy == 0.0


def test_bad_input():
    with pytest.raises(ValueError, match="d_k must be between 1 and 1024, got 2048"):
        ch03.query_weights(2048)
    with pytest.raises(ValueError, match="n_keys must be >= 1"):
        ch03.query_weights(4, n_keys=0)
    with pytest.raises(ValueError, match="d_k must be one of"):
        ch03.explorer(d_k=100)
    with pytest.raises(ValueError, match="seed must be from 0 to 4"):
        ch03.explorer(seed=5)


def test_static_figure_has_titles_and_labels():
    fig = ch03.plot_explorer_grid((4, 1024))
    axes = fig.axes
    assert len(axes) == 4
    assert all(ax.get_title() and ax.get_xlabel() for ax in axes)
    assert "unscaled" in axes[3].get_title() and "1024" in axes[3].get_title()


def test_explorer_shows_the_view_of_each_control_value():
    box = ch03.explorer(d_k=64, scaled=True, seed=4)
    slider, toggle, draw = box.controls
    assert box.grid_size == len(ch03.D_K_CHOICES) * 2 * len(ch03.DRAWS)
    assert view_values(visible_view(box)) == ["64", "by 1/√d_k", "4"]
    slider.value = 1024
    toggle.value = False
    draw.value = 3
    shown = visible_view(box)
    assert view_values(shown) == ["1024", "unscaled", "3"]
    r = ch03.query_weights(1024, False, seed=3)
    assert f"largest weight {r.max_weight:.2f}" in shown
