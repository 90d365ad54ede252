"""Chapter 12's explorer, its static figure and its diagram."""

import matplotlib
import pytest
import torch
from selfattn import diagrams
from selfattn.efficient.sparse import layout_from_mask
from selfattn.widgets import ch12, view_values, visible_view

matplotlib.use("Agg")


@pytest.mark.parametrize("pattern", ch12.PATTERNS)
def test_tile_kinds_agree_with_the_layout(pattern):
    mask = ch12.pattern_mask(pattern, 40)  # 40: tiles of 16 do not divide it
    kinds = ch12.tile_kinds(mask, 16)
    assert torch.equal(kinds > 0, layout_from_mask(mask, 16))
    assert kinds.shape == (3, 3) and (kinds.diagonal() > 0).all()


def test_tile_kinds_of_a_causal_mask():
    kinds = ch12.tile_kinds(ch12.pattern_mask("causal", 16), 4)
    assert torch.equal(kinds.diagonal(), torch.ones(4, dtype=torch.long))  # partial
    assert int((kinds == 2).sum()) == 6 and int((kinds == 0).sum()) == 6


def test_static_figure_and_explorer():
    import ipywidgets
    import matplotlib.pyplot as plt

    fig = ch12.plot_explorer_grid(("causal", "documents"), block=8)
    assert len(fig.axes) == 4
    plt.close(fig)
    box = ch12.explorer(pattern="BigBird", block=4)
    assert isinstance(box, ipywidgets.VBox) and box.grid_size == 12
    dropdown, slider = box.children[0].children
    assert view_values(visible_view(box)) == ["BigBird", "4"]
    dropdown.value, slider.value = "documents", 16
    assert view_values(visible_view(box)) == ["documents", "16"]
    assert "documents mask on 64 positions" in visible_view(box)
    with pytest.raises(ValueError, match="pattern"):
        ch12.explorer(pattern="strided")
    with pytest.raises(ValueError, match="block"):
        ch12.explorer(block=5)


def test_block_mask_tiles_diagram():
    fig = diagrams.block_mask_tiles()
    assert "3 full tiles" in fig.alt and "6 partial" in fig.alt and "7 tiles" in fig.alt
    fig = diagrams.block_mask_tiles(n=8, block=8, window=8)
    assert "0 full tiles" in fig.alt and "1 partial" in fig.alt
    with pytest.raises(ValueError, match="^block "):
        diagrams.block_mask_tiles(n=8, block=9)
