"""Chapter 13's explorer: read-back errors of a linear-attention and a delta-rule state."""

import matplotlib
import pytest
import torch
from selfattn.widgets import ch13, view_values, visible_view

matplotlib.use("Agg")


def test_delta_rule_reads_the_newest_pair_exactly():
    for pairs in ch13.EXPLORER_PAIRS:
        err = ch13.readback_errors("delta rule", pairs, 1.0)
        assert err[-1] < 1e-12


def test_orthonormal_keys_all_exact_with_the_delta_rule():
    # d_k orthogonal directions hold d_k pairs exactly; the sum also, but only for beta = 1
    assert ch13.readback_errors("delta rule", 4, 1.0).shape == (4,)
    assert torch.isfinite(ch13.readback_errors("linear attention", 16, 0.5)).all()


def test_explorer_views_and_static_grid():
    box = ch13.explorer()
    assert box.grid_size == 12
    assert "delta rule" in view_values(visible_view(box))
    fig = ch13.plot_explorer_grid()
    assert len(fig.axes) >= 2


def test_bad_input():
    with pytest.raises(ValueError, match="rule must be one of"):
        ch13.readback_errors("softmax", 4)
    with pytest.raises(ValueError, match="pairs must be one of"):
        ch13.explorer(pairs=5)
