"""One way to build every chapter's explorer: precomputed views that answer without a kernel.

A chapter's explorer is a few controls over a grid of values and a render function that
draws one figure per combination. :func:`grid_explorer` draws every view once, as a small
PNG inside an HTML ``<img>`` with alt text naming its values, and holds the views in nested
``ipywidgets.Stack`` widgets: level ``k`` of the nesting is selected by control ``k``
through ``ipywidgets.jslink``. A jslink runs in the browser and is saved with the widget
state, so the controls work on the static website (no Python), in Jupyter and on Colab.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Control", "grid_explorer", "figure_png", "figure_rows", "view_values", "visible_view"]

#: the CSS class of every explorer's outer box, of its controls and of each view's ``<img>``
EXPLORER_CLASS = "selfattn-explorer"
CONTROL_CLASS = "selfattn-explorer-control"
VIEW_CLASS = "selfattn-explorer-view"


@dataclass(frozen=True)
class Control:
    """One control of an explorer: a name, the grid of values it offers, and its widget kind.

    Attributes:
        name: the label shown beside the control and used as the keyword of ``render``.
        options: the values, or ``(label, value)`` pairs (the label is what the reader sees).
        value: the value selected first (default: the first option).
        kind: ``"slider"`` (``SelectionSlider``), ``"dropdown"`` or ``"toggle"``
            (``ToggleButtons``).
    """

    name: str
    options: Sequence[Any]
    value: Any = None
    kind: str = "slider"
    pairs: tuple[tuple[str, Any], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in ("slider", "dropdown", "toggle"):
            raise ValueError(
                f"kind must be 'slider', 'dropdown' or 'toggle', got {self.kind!r} "
                f"for control {self.name!r}"
            )
        pairs = tuple(
            (str(o[0]), o[1]) if isinstance(o, tuple) and len(o) == 2 else (_option_label(o), o)
            for o in self.options
        )
        if not pairs:
            raise ValueError(f"control {self.name!r} needs at least one option, got none")
        object.__setattr__(self, "pairs", pairs)
        if self.value is not None and self.value not in self.values:
            raise ValueError(f"{self.name} must be one of {self.values}, got {self.value!r}")

    @property
    def values(self) -> list[Any]:
        return [v for _, v in self.pairs]

    @property
    def labels(self) -> list[str]:
        return [lab for lab, _ in self.pairs]

    @property
    def index(self) -> int:
        """Index of the first selected value."""
        return 0 if self.value is None else self.values.index(self.value)


def _option_label(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def figure_png(fig, *, dpi: int = 64, colors: int = 96) -> bytes:
    """The figure as a small PNG: drawn at ``dpi``, reduced to ``colors`` palette colours.

    Plots use few colours, so a palette PNG is several times smaller than an RGBA one
    at no visible cost; the figure is closed afterwards.
    """
    import matplotlib.pyplot as plt
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, facecolor="white")
    plt.close(fig)
    image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    small = image.quantize(colors=colors, method=Image.Quantize.FASTOCTREE)
    out = io.BytesIO()
    small.save(out, format="PNG", optimize=True)
    return out.getvalue()


def figure_rows(
    settings: Sequence[Any],
    draw_row: Callable[[Any, Any], Any],
    *,
    ncols: int,
    row_size: tuple[float, float],
    suptitle: str | None = None,
):
    """The static figure beside an explorer: its view for a few settings, one row each.

    Args:
        settings: one entry per row, handed to ``draw_row``.
        draw_row: ``draw_row(setting, axes)`` draws the view for ``setting`` on ``axes``, the
            row's 1-D array of ``ncols`` Axes.
        ncols: Axes per row.
        row_size: ``(width, height)`` of one row in inches; the figure is ``len(settings)``
            rows high.
        suptitle: a title over every row, or ``None``.

    Returns:
        The matplotlib figure, laid out with ``tight_layout``.
    """
    import matplotlib.pyplot as plt

    width, height = row_size
    fig, axes = plt.subplots(
        len(settings), ncols, figsize=(width, height * len(settings)), squeeze=False
    )
    for setting, row in zip(settings, axes):
        draw_row(setting, row)
    if suptitle is not None:
        fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


def _view_html(png: bytes, alt: str, labels: Sequence[str]) -> str:
    src = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    return (
        f'<img class="{VIEW_CLASS}" src="{src}" alt="{html.escape(alt)}" '
        f"data-values='{html.escape(json.dumps(list(labels)), quote=True)}' "
        'style="max-width:100%;height:auto">'
    )


def view_values(view_html: str) -> list[str]:
    """The control labels a view was drawn for (read back from its ``data-values``)."""
    start = view_html.index("data-values='") + len("data-values='")
    return json.loads(html.unescape(view_html[start : view_html.index("'", start)]))


def _control_widget(control: Control):
    import ipywidgets as widgets

    options = list(control.pairs)
    # Wide enough to drag on a phone (390 px); the row wraps instead of shrinking it.
    layout = widgets.Layout(width="auto", min_width="220px", max_width="30em", flex="1 1 220px")
    style = {"description_width": "initial"}
    common = dict(
        options=options,
        index=control.index,
        description=control.name,
        layout=layout,
        style=style,
    )
    if control.kind == "slider":
        w = widgets.SelectionSlider(continuous_update=True, **common)
    elif control.kind == "dropdown":
        w = widgets.Dropdown(**common)
    else:
        w = widgets.ToggleButtons(**common)
    w.add_class(CONTROL_CLASS)
    return w


def _view_stacks(
    controls: Sequence[Control],
    draw_view: Callable[[tuple[int, ...]], Any],
) -> tuple[Any, list[list]]:
    """Nested ``Stack`` widgets over the product of the controls' options.

    The stack at depth ``k`` chooses among control ``k``'s options; each leaf is
    ``draw_view(path)``, ``path`` the option index of every control. Returns the outermost
    stack and the stacks of each depth, outermost first (a control selects all of its depth).
    """
    import ipywidgets as widgets

    stacks_by_level: list[list] = [[] for _ in controls]

    def build(level: int, path: tuple[int, ...]):
        if level == len(controls):
            return draw_view(path)
        control = controls[level]
        stack = widgets.Stack(
            [build(level + 1, path + (i,)) for i in range(len(control.pairs))],
            selected_index=control.index,
        )
        stacks_by_level[level].append(stack)
        return stack

    return build(0, ()), stacks_by_level


def _link_controls(control_widgets: Sequence[Any], stacks_by_level: Sequence[list]) -> list:
    """Tie each control's ``index`` to the ``selected_index`` of the stacks of its depth.

    In the browser through ``jslink`` (returned: the link models are saved with the widget
    state); with a kernel also through an observer, so that a value set from Python (or by a
    frontend without the links) selects the same view.
    """
    import ipywidgets as widgets

    links = [
        widgets.jslink((w, "index"), (stack, "selected_index"))
        for w, stacks in zip(control_widgets, stacks_by_level)
        for stack in stacks
    ]

    def follow(level: int):
        def on_change(change) -> None:
            for stack in stacks_by_level[level]:
                stack.selected_index = change["new"]

        return on_change

    for level, w in enumerate(control_widgets):
        w.observe(follow(level), names="index")
    return links


def grid_explorer(
    controls: Sequence[Control],
    render: Callable[..., Any],
    *,
    alt: Callable[..., str] | None = None,
    title: str = "Explorer view",
    view_key: Callable[..., Hashable] | None = None,
    dpi: int = 64,
    colors: int = 96,
):
    """An explorer whose every view is precomputed, so its controls work without a kernel.

    Args:
        controls: the explorer's controls, outermost first; the grid is their product.
        render: ``render(*values)`` (one value per control, in order) -> a matplotlib figure
            (closed here).
        alt: ``alt(*values)`` -> the view's alt text; default ``title`` and every
            ``name = label``. The alt text always ends with the control values.
        title: the start of the default alt text.
        view_key: ``view_key(*values)`` -> a key equal for combinations that draw the same
            figure (say, a window size the chosen mask does not use): each such figure is
            drawn once. Each combination still has its own view and alt text.
        dpi, colors: size of each view's PNG (see :func:`figure_png`).

    Returns:
        An ``ipywidgets.VBox`` (class ``selfattn-explorer``): a row of controls, then nested
        ``Stack`` widgets holding ``prod(len(c.options))`` views. Each ``Stack`` at depth ``k``
        is jslinked to control ``k``'s ``index``; each view is an ``HTML`` widget with one
        ``<img>`` whose ``alt`` names its values and whose ``data-values`` attribute is the
        JSON list of the control labels.
    """
    import ipywidgets as widgets

    if not controls:
        raise ValueError("grid_explorer needs at least one control, got none")
    names = [c.name for c in controls]
    if len(set(names)) != len(names):
        raise ValueError(f"control names must differ, got {names}")
    control_widgets = [_control_widget(c) for c in controls]
    pngs: dict[Hashable, bytes] = {}  # one PNG per distinct view_key

    def draw_view(path: tuple[int, ...]):
        values = [c.pairs[i][1] for c, i in zip(controls, path)]
        labels = [c.pairs[i][0] for c, i in zip(controls, path)]
        named = ", ".join(f"{c.name} = {lab}" for c, lab in zip(controls, labels))
        text = f"{alt(*values)} ({named})" if alt else f"{title}: {named}"
        key = tuple(values) if view_key is None else view_key(*values)
        if key not in pngs:
            pngs[key] = figure_png(render(*values), dpi=dpi, colors=colors)
        return widgets.HTML(_view_html(pngs[key], text, labels))

    views, stacks_by_level = _view_stacks(controls, draw_view)
    links = _link_controls(control_widgets, stacks_by_level)
    row = widgets.Box(control_widgets, layout=widgets.Layout(flex_flow="row wrap"))
    box = widgets.VBox([row, views])
    box.add_class(EXPLORER_CLASS)
    box.links = links  # keep the link models reachable (they are saved with the widget state)
    box.controls = control_widgets
    box.grid_size = len(list(itertools.product(*(c.pairs for c in controls))))
    return box


def visible_view(box) -> str:
    """The HTML of the view the explorer ``box`` shows now (follows the selected indices)."""
    node = box.children[1]
    while not hasattr(node, "value") or not isinstance(node.value, str):
        node = node.children[node.selected_index]
    return node.value


# ----------------------------------------------------------------------------- languages
# An explorer is drawn in English; another edition translates its saved widget state (the
# controls' names and option labels, each view's alt text and data-values), so the same
# recorded views serve every language and no view is drawn twice. A view's alt text is
# ``"<sentence> (<name> = <label>, ...)"``; its sentence, with the view's own option labels
# (those with words) written ``{L0}``, ``{L1}``, ... (the control's index) and its numbers
# ``{0}``, ``{1}``, ... (in order), is one message for every view that differs only in
# those: a translation keeps each slot and may move it.
CONTROL_MODELS = ("SelectionSliderModel", "DropdownModel", "ToggleButtonsModel")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?!\w)")
_SLOT = re.compile(r"\{(L?\d+)\}")
_ALT = re.compile(r'alt="([^"]*)"')
_VALUES = re.compile(r"data-values='([^']*)'")


def has_words(text: str) -> bool:
    """True for a text with an English word (two letters or more) to translate."""
    return bool(re.search(r"[A-Za-z]{2,}", text))


def view_alt_template(alt: str, labels: Sequence[str]) -> tuple[str, list[str], list[str]]:
    """``(sentence template, control names, numbers)`` of a view's alt text (see above).

    Raises:
        ValueError: if ``alt`` does not end with ``labels`` named, as :func:`grid_explorer`
            writes them.
    """
    pattern = r" \(" + ", ".join(rf"([^=,()]+?) = {re.escape(lab)}" for lab in labels) + r"\)$"
    match = re.search(pattern, alt)
    if match is None:
        raise ValueError(f"a view's alt text ending with the values {list(labels)}, got {alt!r}")
    sentence = alt[: match.start()]
    for i, lab in sorted(enumerate(labels), key=lambda pair: -len(pair[1])):
        if has_words(lab):
            sentence = re.sub(rf"(?<!\w){re.escape(lab)}(?!\w)", f"{{L{i}}}", sentence)
    numbers = _NUMBER.findall(sentence)
    count = itertools.count()
    template = _NUMBER.sub(lambda m: f"{{{next(count)}}}", sentence)
    return template, list(match.groups()), numbers


def _views(state: dict):
    """``(model state, alt, labels)`` of every explorer view in a saved widget state."""
    for model in state.values():
        value = model.get("state", {}).get("value")
        if model.get("model_name") == "HTMLModel" and isinstance(value, str):
            if VIEW_CLASS in value and _ALT.search(value) and _VALUES.search(value):
                alt = html.unescape(_ALT.search(value).group(1))
                yield model["state"], alt, view_values(value)


def _controls(state: dict):
    for model in state.values():
        if model.get("model_name") in CONTROL_MODELS:
            yield model["state"]


def state_messages(state: dict) -> list[str]:
    """The texts to translate in a saved widget state (``metadata.widgets[...]["state"]``):
    the controls' names, their option labels with words, and the views' alt templates."""
    found = []
    for control in _controls(state):
        found.append(control.get("description", ""))
        found.extend(control.get("_options_labels", []))
    for _, alt, labels in _views(state):
        found.append(view_alt_template(alt, labels)[0])
    return [text for text in dict.fromkeys(found) if text.strip() and has_words(text)]


def translate_state(state: dict, translate: Callable[[str], str | None]) -> list[str]:
    """Translate a saved widget state in place; returns the messages with no translation.

    Args:
        state: ``metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]``.
        translate: English message -> translation, or ``None`` when there is none (the
            text then stays English and is returned). Texts without words need none.
    """
    missing: list[str] = []

    def tr(text: str) -> str:
        if not has_words(text):
            return text
        done = translate(text)
        if not done:
            missing.append(text)
            return text
        return done

    for control in _controls(state):
        if control.get("description"):
            control["description"] = tr(control["description"])
        if "_options_labels" in control:
            control["_options_labels"] = [tr(lab) for lab in control["_options_labels"]]
    for view, alt, labels in _views(state):
        template, names, numbers = view_alt_template(alt, labels)
        shown = [tr(lab) for lab in labels]
        slots = {str(i): n for i, n in enumerate(numbers)}
        slots.update({f"L{i}": lab for i, lab in enumerate(shown)})
        done = translate(template) if has_words(template) else template
        if not done:
            missing.append(template)
        sentence = _SLOT.sub(lambda m, slots=slots: slots[m.group(1)], done or template)
        named = "，".join(f"{tr(name)} = {lab}" for name, lab in zip(names, shown))
        text = f"{sentence}（{named}）" if done else f"{sentence} ({named})"
        alt_attr = f'alt="{html.escape(text)}"'
        values_attr = f"data-values='{html.escape(json.dumps(shown), quote=True)}'"
        value = _ALT.sub(lambda _, a=alt_attr: a, view["value"], count=1)
        view["value"] = _VALUES.sub(lambda _, a=values_attr: a, value, count=1)
    return list(dict.fromkeys(missing))
