"""The explorer builder: every view precomputed, every control linked to the stacks it selects."""

from __future__ import annotations

import itertools

import ipywidgets as widgets
import matplotlib
import pytest
from ipywidgets.widgets.widget_link import Link
from selfattn.widgets import Control, grid_explorer, view_values, visible_view

matplotlib.use("Agg")


def _render(a, b, c):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2.0, 1.5))
    ax.plot([0, a], [0, len(b) + c])
    return fig


CONTROLS = [
    Control("a", [1, 2, 3], value=2),
    Control("b", [("ex", "x"), ("why", "yy")], kind="toggle"),
    Control("c", [0.5, 1.0, 2.0], value=2.0, kind="dropdown"),
]


@pytest.fixture(scope="module")
def box():
    return grid_explorer(CONTROLS, _render, dpi=30)


def _leaves(node):
    if isinstance(node, widgets.Stack):
        return [leaf for child in node.children for leaf in _leaves(child)]
    return [node]


def _stacks(node, depth=0):
    if isinstance(node, widgets.Stack):
        yield depth, node
        for child in node.children:
            yield from _stacks(child, depth + 1)


def test_one_view_per_grid_point_each_naming_its_values(box):
    leaves = _leaves(box.children[1])
    assert box.grid_size == len(leaves) == 3 * 2 * 3
    expected = [
        [a, b, c]
        for a, b, c in itertools.product(["1", "2", "3"], ["ex", "why"], ["0.5", "1", "2"])
    ]
    assert [view_values(leaf.value) for leaf in leaves] == expected
    for leaf, (a, b, c) in zip(leaves, expected):
        assert f'alt="Explorer view: a = {a}, b = {b}, c = {c}"' in leaf.value
        assert 'src="data:image/png;base64,' in leaf.value


def test_every_stack_is_jslinked_to_its_control(box):
    stacks = list(_stacks(box.children[1]))
    assert len(box.links) == len(stacks) == 1 + 3 + 3 * 2
    assert all(isinstance(link, Link) for link in box.links)
    for depth, stack in stacks:
        control = box.controls[depth]
        mine = [
            link
            for link in box.links
            if link.source == (control, "index") and link.target == (stack, "selected_index")
        ]
        assert len(mine) == 1, f"stack at depth {depth} is not linked to control {depth}"
        # Starts at the control's value, as the browser will show it before any move.
        assert stack.selected_index == control.index


def test_initial_view_is_the_initial_values(box):
    assert view_values(visible_view(box)) == ["2", "ex", "2"]


def test_moving_a_control_selects_its_view(box):
    a, b, c = box.controls
    for value, label in ((3, "3"), (1, "1"), (2, "2")):
        a.value = value
        assert view_values(visible_view(box))[0] == label
    b.value = "yy"
    c.value = 0.5
    assert view_values(visible_view(box)) == ["2", "why", "0.5"]
    b.index = 0
    assert view_values(visible_view(box)) == ["2", "ex", "0.5"]


def test_controls_are_selection_widgets_of_the_asked_kind(box):
    a, b, c = box.controls
    assert isinstance(a, widgets.SelectionSlider)
    assert isinstance(b, widgets.ToggleButtons)
    assert isinstance(c, widgets.Dropdown)
    assert [a.description, b.description, c.description] == ["a", "b", "c"]
    # Usable on a phone: the row wraps rather than squeezing a slider to a dot.
    assert all(w.layout.min_width == "220px" for w in box.controls)


def test_custom_alt_text_keeps_the_values():
    box = grid_explorer(
        [Control("a", [1, 2])], lambda a: _render(a, "x", 0), alt=lambda a: f"line to {a}"
    )
    assert 'alt="line to 1 (a = 1)"' in visible_view(box)


def test_views_are_small_pngs(box):
    sizes = [len(leaf.value) for leaf in _leaves(box.children[1])]
    assert max(sizes) < 20_000


def test_bad_input():
    with pytest.raises(ValueError, match="kind"):
        Control("a", [1], kind="knob")
    with pytest.raises(ValueError, match="must be one of"):
        Control("a", [1, 2], value=3)
    with pytest.raises(ValueError, match="at least one option"):
        Control("a", [])
    with pytest.raises(ValueError, match="at least one control"):
        grid_explorer([], _render)
    with pytest.raises(ValueError, match="names must differ"):
        grid_explorer([Control("a", [1]), Control("a", [2])], _render)


def test_views_that_draw_the_same_figure_are_drawn_once():
    drawn = []

    def render(a, b):
        drawn.append((a, b))
        return _render(a, "x", 0)

    box = grid_explorer(
        [Control("a", [1, 2]), Control("b", [10, 20, 30])],
        render,
        view_key=lambda a, b: (a, None if a == 1 else b),  # b matters only when a is 2
        dpi=30,
    )
    assert drawn == [(1, 10), (2, 10), (2, 20), (2, 30)]
    assert box.grid_size == len(_leaves(box.children[1])) == 6
    box.controls[1].value = 30
    assert view_values(visible_view(box)) == ["1", "30"]
