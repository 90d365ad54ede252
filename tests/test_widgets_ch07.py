"""Chapter 7's explorer (the online softmax block by block) and its static figure."""

import matplotlib
import pytest
import torch
from selfattn.widgets import ch07, view_values, visible_view

matplotlib.use("Agg")


@pytest.mark.parametrize("n, block", [(16, 4), (16, 3), (7, 8), (1, 1)])
@pytest.mark.parametrize("seed", ch07.EXPLORER_SEEDS)
def test_each_step_is_softmax_attention_over_the_keys_seen(n, block, seed):
    run = ch07.tile_run(n, block, seed)
    assert len(run.steps) == -(-n // block)
    for step in run.steps:
        seen = slice(0, step["stop"])
        oracle = torch.softmax(run.scores[seen], 0) @ run.values[seen]
        assert torch.allclose(step["out"], oracle, atol=1e-12)
        assert step["mu"] == run.scores[seen].max().item()
    assert torch.allclose(run.steps[-1]["out"], run.exact, atol=1e-12)
    assert torch.allclose(run.exact, torch.softmax(run.scores, 0) @ run.values)


@pytest.mark.parametrize("seed", ch07.EXPLORER_SEEDS)
def test_the_late_large_score_moves_the_max(seed):
    steps = ch07.tile_run(16, 4, seed).steps
    moved = [t for t, st in enumerate(steps) if t > 0 and st["alpha"] < 1]
    assert moved, "the explorer's point (alpha < 1 when the max moves) needs a move"
    for prev, st in zip(steps, steps[1:]):
        assert (st["alpha"] < 1) == (st["mu"] > prev["mu"])


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="n >= 1 and block >= 1"):
        ch07.tile_run(0, 4)
    with pytest.raises(ValueError, match="step must be in 1..4"):
        ch07.plot_tile_step(5)
    with pytest.raises(ValueError, match="n must be from 4 to 32"):
        ch07.explorer(n=3)
    with pytest.raises(ValueError, match="block must be one of"):
        ch07.explorer(block=5)
    with pytest.raises(ValueError, match="seed one of"):
        ch07.explorer(seed=9)


def test_static_figure_has_a_row_per_step_with_titles_and_labels():
    fig = ch07.plot_explorer_grid((1, 4))
    assert len(fig.axes) == 6
    assert all(ax.get_title() and ax.get_xlabel() for ax in fig.axes)
    assert fig.axes[0].get_title().startswith("step 1/4")
    assert fig.axes[3].get_title().startswith("step 4/4")


def test_explorer_shows_the_view_of_each_control_value():
    box = ch07.explorer(n=4, block=4, seed=1)
    block, seed, step = box.controls
    assert view_values(visible_view(box)) == ["4", "1", "1"]
    block.value, seed.value, step.value = 2, 2, 2
    shown = visible_view(box)
    assert view_values(shown) == ["2", "2", "2"]
    assert "blocks of 2, after step 2 of 2" in shown
    block.value = 8  # one block only: the last step is shown, and the view says so
    assert "there are only 1 steps" in visible_view(box)
