"""Chapter 9's explorer and its static figure: image patches with attention laid over them."""

import matplotlib
import numpy as np
import pytest
import torch
from selfattn.widgets import ch09, view_values, visible_view

matplotlib.use("Agg")


def test_patch_grid_is_row_major():
    w = torch.arange(16.0)
    grid = ch09.patch_grid(w)
    assert grid.shape == (4, 4) and grid[1, 0] == 4 and grid[3, 2] == 14
    with pytest.raises(ValueError, match="square grid"):
        ch09.patch_grid(torch.ones(15))
    with pytest.raises(ValueError, match=r"\(P,\)"):
        ch09.patch_grid(torch.ones(4, 4))


def test_overlay_draws_the_weights_where_the_patches_are():
    import matplotlib.pyplot as plt

    image = torch.zeros(3, 40, 40)
    w = torch.zeros(16)
    w[6] = 1.0  # row 1, column 2: pixels y 10-20, x 20-30
    ax = ch09.overlay_attention(image, w, title="t")
    heat = ax.images[1].get_array()
    assert heat.shape == (4, 4) and heat[1, 2] == 1.0 and heat.sum() == 1.0
    assert ax.get_title() == "t" and ax.get_xlabel() == "x (pixels)"
    assert len(ax.texts) == 16  # each cell labelled with its weight
    plt.close("all")
    with pytest.raises(ValueError, match=r"\(C, H, W\)"):
        ch09.overlay_attention(torch.zeros(40, 40), w)


def test_static_figure_and_explorer():
    import ipywidgets
    import matplotlib.pyplot as plt

    images, weights = torch.rand(3, 3, 24, 24), torch.softmax(torch.randn(3, 9), -1)
    fig = ch09.plot_overlays(images, weights, ["a", "b", "c"], suptitle="s", ncols=2)
    assert len(fig.axes) == 4 and not fig.axes[3].axison  # the spare panel is blank
    plt.close(fig)
    with pytest.raises(ValueError, match="3 images, 3 weight rows and 2 titles"):
        ch09.plot_overlays(images, weights, ["a", "b"], suptitle="s")
    box = ch09.explorer(images, {"v1": weights, "v2": weights.flip(0)}, ["a", "b", "c"], index=1)
    assert isinstance(box, ipywidgets.VBox)
    slider, dropdown = box.children[0].children
    assert slider.value == 1 and [v for _, v in dropdown.options] == ["v1", "v2"]
    assert view_values(visible_view(box)) == ["1", "v1"]
    dropdown.value = "v2"
    slider.value = 2
    assert view_values(visible_view(box)) == ["2", "v2"]
    assert "Image 2 (c) with the attention of v2" in visible_view(box)
    with pytest.raises(ValueError, match="one per image"):
        ch09.explorer(images, {"v": weights[:2]}, ["a", "b", "c"])
    with pytest.raises(ValueError, match="index"):
        ch09.explorer(images, {"v": weights}, ["a", "b", "c"], index=3)
    plt.close("all")
    assert np.isfinite(weights.numpy()).all()
