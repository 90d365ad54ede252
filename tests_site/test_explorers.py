"""Every chapter's explorer answers its controls on the static site, with no kernel.

The explorers are built by ``selfattn.widgets.grid_explorer``: each view is an ``<img>``
(class ``selfattn-explorer-view``) whose ``data-values`` is the JSON list of the control
labels it was drawn for, and only the selected view is in the page. For every explorer on
every chapter page, each control is moved with the keyboard to three positions; after each
move the shown view must be a different one, drawn for the value the control now shows, with
every other control's value unchanged. At a phone's width (390 px) every control keeps a
usable width. And axe-core finds no serious or critical violation on any page, except those
listed in ``NOT_OURS`` (the theme's and packages', each with its reason).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import CHAPTERS, PAGES, ROOT, page_id

EXPLORER = ".selfattn-explorer"
CONTROL = ".selfattn-explorer-control"
VIEW = "img.selfattn-explorer-view"
# Any input widget: on a page, each must belong to an explorer (no control that changes nothing).
INPUT_WIDGETS = ".widget-slider, .widget-dropdown, .widget-toggle-buttons, .widget-checkbox"


def _calls_an_explorer(toc_entry: str) -> bool:
    notebook = ROOT / f"{toc_entry}.ipynb"
    if not notebook.exists():
        return False
    cells = json.loads(notebook.read_text())["cells"]
    return any(c["cell_type"] == "code" and ".explorer(" in "".join(c["source"]) for c in cells)


def _view(explorer) -> tuple[list[str], str]:
    """(labels, alt) of the one view the explorer shows."""
    views = explorer.locator(VIEW)
    assert views.count() == 1, f"expected one visible view, found {views.count()}"
    img = views.first
    return json.loads(img.get_attribute("data-values")), img.get_attribute("alt")


def _kind(control) -> str:
    classes = control.get_attribute("class")
    for kind in ("widget-dropdown", "widget-toggle-buttons", "widget-slider"):
        if kind in classes:
            return kind
    raise AssertionError(f"unknown control kind: {classes}")


def _shown(control, kind: str) -> str:
    """The value label the control shows the reader now."""
    if kind == "widget-dropdown":
        # ipywidgets writes the option labels with no-break spaces
        text = control.locator("select").evaluate("s => s.options[s.selectedIndex].text")
        return text.replace("\xa0", " ")
    if kind == "widget-toggle-buttons":
        return control.locator("button.mod-active").inner_text().strip()
    return control.locator(".widget-readout").inner_text().strip()


def _move(control, kind: str, step: int) -> None:
    """One keyboard move of the control: ``step`` is +1 (next value) or -1 (previous)."""
    if kind == "widget-dropdown":
        select = control.locator("select")
        n = select.evaluate("s => s.options.length")
        index = select.evaluate("s => s.selectedIndex")
        select.focus()
        select.select_option(index=(index + step) % n)
    elif kind == "widget-toggle-buttons":
        buttons = control.locator("button")
        n = buttons.count()
        active = [i for i in range(n) if "mod-active" in buttons.nth(i).get_attribute("class")]
        target = buttons.nth((active[0] + step) % n)
        target.focus()
        target.press("Enter")
    else:
        handle = control.locator(".noUi-handle")
        handle.focus()
        handle.press("ArrowRight" if step > 0 else "ArrowLeft")


def _positions(page, explorer, k: int, control, kind: str, label: str) -> None:
    before, _ = _view(explorer)
    step = +1
    for move in range(3):
        shown_before = _shown(control, kind)
        _move(control, kind, step)
        page.wait_for_timeout(100)
        if _shown(control, kind) == shown_before:  # at the end of a slider: go back instead
            step = -step
            _move(control, kind, step)
            page.wait_for_timeout(100)
        now = _shown(control, kind)
        assert now != shown_before, f"{label}: move {move + 1} did not change the control"
        labels, alt = _view(explorer)
        assert labels[k] == now, (
            f"{label}: the control shows {now!r} but the view is drawn for {labels[k]!r}"
        )
        others = [x for i, x in enumerate(labels) if i != k]
        assert others == [x for i, x in enumerate(before) if i != k], (
            f"{label}: moving it changed other controls' values in the view"
        )
        assert f"{now}" in alt, f"{label}: the view's alt text does not name {now!r}: {alt}"
        before = labels


@pytest.mark.parametrize("entry", CHAPTERS, ids=page_id)
def test_every_explorer_control_selects_its_view(site_page, entry):
    toc, html = entry
    page, log = site_page(html)
    explorers = page.locator(EXPLORER)
    if _calls_an_explorer(toc):
        assert explorers.count() >= 1, f"{html}: the chapter calls an explorer, none is drawn"
    outside = page.locator(INPUT_WIDGETS).evaluate_all(
        f"ws => ws.filter(w => !w.closest('{EXPLORER}')).length"
    )
    assert outside == 0, f"{html}: {outside} control(s) outside an explorer change nothing"
    for e in range(explorers.count()):
        explorer = explorers.nth(e)
        explorer.scroll_into_view_if_needed()
        controls = explorer.locator(CONTROL)
        n_labels = len(_view(explorer)[0])
        assert controls.count() == n_labels >= 1
        for k in range(controls.count()):
            control = controls.nth(k)
            kind = _kind(control)
            name = control.locator(".widget-label").first.inner_text().strip()
            _positions(page, explorer, k, control, kind, f"{html} explorer {e} control {name!r}")
    assert not log.problems(), log.problems()


@pytest.mark.parametrize("entry", CHAPTERS, ids=page_id)
def test_explorer_controls_keep_a_usable_width_on_a_phone(phone_page, entry):
    _, html = entry
    phone, log = phone_page(html)
    controls = phone.locator(f"{EXPLORER} {CONTROL}")
    for k in range(controls.count()):
        control = controls.nth(k)
        control.scroll_into_view_if_needed()
        box = control.bounding_box()
        assert box and box["width"] > 100, f"{html}: control {k} is {box} wide at 390 px"
        assert box["x"] >= 0 and box["x"] + box["width"] <= 391, (
            f"{html}: control {k} sticks out of the phone's screen: {box}"
        )
        track = control.locator(".noUi-target")
        if track.count():
            width = track.first.bounding_box()["width"]
            assert width > 100, f"{html}: slider {k}'s track is {width:.0f} px wide"
    views = phone.locator(f"{EXPLORER} {VIEW}")
    for k in range(views.count()):
        box = views.nth(k).bounding_box()
        assert box is None or box["width"] <= 391, f"{html}: view {k} is wider than the phone"
    assert not log.problems(), f"{html}:\n  " + "\n  ".join(log.problems())


# axe-core (npm package axe-core 4.x), run in each page. Not vendored: AXE_CORE_JS names its
# axe.min.js (default node_modules/axe-core/axe.min.js, what `npm install axe-core@4` makes).
AXE_JS = Path(os.environ.get("AXE_CORE_JS", ROOT / "node_modules" / "axe-core" / "axe.min.js"))
# Violations that come from the theme or a package, not from the book's pages: (rule, a CSS
# selector its nodes match, why it is not the book's to fix).
NOT_OURS = [
    (
        "label-content-name-mismatch",
        ".search-button-field, .theme-switch-button",
        "sphinx-book-theme's search and theme buttons: aria-label differs from their text",
    ),
    (
        "aria-required-children",
        ".citation-list",
        "docutils' citation list (role=list without listitem children) from sphinxcontrib-bibtex",
    ),
    (
        "color-contrast",
        ".exercise.admonition a.reference",
        "links in sphinx-exercise's boxes: pydata-sphinx-theme's link colour #176de8 on the "
        "theme's admonition background #ecf3ff is 4.29:1 (book.css could darken these links)",
    ),
    (
        "label-content-name-mismatch",
        "summary[aria-label='Toggle hidden content']",
        "myst-nb's hide-output toggle: aria-label 'Toggle hidden content', visible text "
        "'Show code cell output'",
    ),
    (
        "aria-input-field-name",
        ".selfattn-explorer .noUi-handle",
        "ipywidgets 8's slider handle (noUiSlider) carries no aria-label; the widget's visible "
        "label is not tied to it (upstream, @jupyter-widgets/controls)",
    ),
]
AXE_RUN_JS = """async () => {
  const r = await axe.run(document, {resultTypes: ['violations']});
  return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map(n => ({target: n.target.join(' '), html: n.html.slice(0, 160)}))}));
}"""


def _axe(page) -> list[dict]:
    # require.js is on widget pages: hide its define() so axe's UMD wrapper sets window.axe.
    page.evaluate(
        """src => { const d = window.define; window.define = undefined;
                    try { (0, eval)(src); } finally { window.define = d; } }""",
        AXE_JS.read_text(),
    )
    return page.evaluate(AXE_RUN_JS)


def _not_ours(page, rule: str, target: str) -> bool:
    return any(
        rule == r
        and page.evaluate("([t, s]) => !!document.querySelector(t)?.matches(s)", [target, s])
        for r, s, _ in NOT_OURS
    )


@pytest.mark.skipif(
    not AXE_JS.exists(), reason=f"no axe-core at {AXE_JS} (npm install axe-core@4)"
)
@pytest.mark.parametrize("entry", PAGES, ids=page_id)
def test_axe_finds_no_serious_violation_of_the_books_making(site_page, entry):
    _, html = entry
    page, _ = site_page(html)
    bad = [
        f"{v['impact']} {v['id']} ({v['help']}): {n['target']}  {n['html']}"
        for v in _axe(page)
        if v["impact"] in ("serious", "critical")
        for n in v["nodes"]
        if not _not_ours(page, v["id"], n["target"])
    ]
    assert not bad, f"{html}: axe found\n" + "\n".join(bad)
