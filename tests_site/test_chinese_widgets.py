"""The Chinese pages' explorers and diagrams speak Chinese (issue 51, items 2 and 3).

Read from the built HTML of the Chinese site (``make book-zh``), no browser needed:

* the widget state each page embeds (``<script type="application/vnd.jupyter.widget-state+json">``,
  what the explorers are drawn from): no control name, option label or view alt text with an
  English word (names, acronyms and chapter 2's English input sentences aside: see
  ``tests/test_zh_widgets.py``);
* the diagrams (the idea pictures of ``selfattn.diagrams``): each page offers every figure as
  SVG (``_ext/book_figures.py``), and matplotlib writes each label's string into the SVG as
  a comment: every diagram of the chapter is there with Chinese labels, none with English
  words (the label strings are checked, not the pixels).
"""

from __future__ import annotations

import html
import json
import re
from urllib.parse import unquote

import pytest
from bs4 import BeautifulSoup
from conftest import CHAPTERS, ROOT, SITE_HTML, page_id

from tests.test_zh_widgets import english_words, load, zh_widgets  # tests/test_zh_widgets.py

ZH_HTML = SITE_HTML / "zh"
CJK = re.compile(r"[\u4e00-\u9fff]")


def _page(entry):
    page = ZH_HTML / entry[1]
    if not page.exists():
        pytest.skip(f"no Chinese site built at {ZH_HTML} (make book-zh)")
    return page, BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")


@pytest.mark.parametrize("entry", CHAPTERS, ids=page_id)
def test_explorer_labels_and_views_are_chinese(entry):
    page, soup = _page(entry)
    script = soup.find("script", type="application/vnd.jupyter.widget-state+json")
    if zh_widgets().widget_state(load(ROOT / f"{entry[0]}.ipynb")):
        assert script is not None, f"{entry[0]}: the explorer's widget state is not in the page"
    if script is None:
        return
    texts = []
    for model in json.loads(script.string)["state"].values():
        state = model.get("state", {})
        texts += [state.get("description") or ""] + list(state.get("_options_labels", []))
        if "selfattn-explorer-view" in str(state.get("value", "")):
            alt = re.search(r'alt="([^"]*)"', state["value"]).group(1)
            texts.append(html.unescape(alt))
    english = [(text[:60], english_words(text)) for text in texts if english_words(text)]
    assert not english, f"zh/{entry[1]}: {len(english)} explorer texts with English: {english[:3]}"


def _svg_labels(page, soup) -> list[list[str]]:
    """The label strings of each SVG figure the page offers, in order."""
    found = []
    for link in soup.select("p.figure-svg a.download"):
        svg = (page.parent / unquote(link["href"])).resolve().read_text(encoding="utf-8")
        found.append([c.strip() for c in re.findall(r"<!--(.*?)-->", svg, re.S) if c.strip()])
    return found


@pytest.mark.parametrize("entry", CHAPTERS, ids=page_id)
def test_diagrams_are_drawn_with_chinese_labels(entry):
    cells = zh_widgets().diagram_cells(load(ROOT / f"{entry[0]}.ipynb"))
    if not cells:
        pytest.skip(f"{entry[0]} draws no diagram")
    page, soup = _page(entry)
    # A diagram is a figure with Chinese labels (the other figures' plots stay English).
    diagrams = [labels for labels in _svg_labels(page, soup) if any(map(CJK.search, labels))]
    assert len(diagrams) == len(cells), (
        f"zh/{entry[1]}: {len(cells)} diagrams in the chapter, {len(diagrams)} drawn in Chinese"
    )
    english = [
        (label, english_words(label)) for d in diagrams for label in d if english_words(label)
    ]
    assert not english, f"zh/{entry[1]}: diagram labels with English: {english[:3]}"
