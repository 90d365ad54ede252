"""Chapter 14's explorer (causal ring attention step by step) and its static figure."""

import matplotlib
import pytest
from selfattn.distributed import ring_work
from selfattn.widgets import ch14, view_values, visible_view

matplotlib.use("Agg")


@pytest.mark.parametrize("P", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_schedule_covers_the_causal_triangle_once(P, layout):
    sched = ch14.ring_schedule(P, layout)
    assert len(sched) == P
    blocks = [(a, b) for step in sched for _, a, b in step]
    c = 2 * P
    assert sorted(blocks) == [(a, b) for a in range(c) for b in range(c) if b <= a]
    work = [sum(1 for step in sched for r2, _, _ in step if r2 == r) for r in range(P)]
    if layout == "zigzag":  # the same as the library's count, in chunk blocks
        assert work == [round(4 * w) for w in ring_work(P, "zigzag")]
    else:
        assert work == [4 * r + 3 for r in range(P)]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="layout must be one of"):
        ch14.ring_schedule(2, "ring")
    with pytest.raises(ValueError, match="world_size must be an int"):
        ch14.ring_schedule(0, "zigzag")
    with pytest.raises(ValueError, match="step must be in 1..2"):
        ch14.plot_ring_step(2, "zigzag", 3)
    with pytest.raises(ValueError, match="world_size must be one of"):
        ch14.explorer(world_size=3)


def test_static_figure_has_titles_and_labels():
    fig = ch14.plot_work_grid(2)
    assert len(fig.axes) == 4
    assert all(ax.get_title() and ax.get_xlabel() for ax in fig.axes)
    assert fig.axes[2].get_title().startswith("zigzag, P = 2")


def test_explorer_shows_the_view_of_each_control_value():
    box = ch14.explorer(world_size=2)
    layout, P, step = box.controls
    assert view_values(visible_view(box)) == ["contiguous", "2", "1"]
    layout.value, P.value, step.value = "zigzag", 4, 3
    shown = visible_view(box)
    assert view_values(shown) == ["zigzag", "4", "3"]
    assert "after step 3" in shown
    P.value, step.value = 2, 4
    assert "only 2 steps" in visible_view(box)
