"""A main path for newcomers: each teaching chapter opens with "The idea", marks what is deeper.

Conventions (CONTRIBUTING.md):

* the title cell holds, after the title, an admonition titled "The idea" (class ``idea``):
  three sentences a reader can stop at and still have the chapter's point;
* the first figure after the setup is the chapter's key picture: a code cell tagged
  ``idea-picture`` and ``hide-input`` (the website shows the picture, not its code);
* material beyond the main line sits in collapsed admonitions titled "Deeper: ..." (class
  ``dropdown deeper``), and every code cell of a deeper part is tagged ``deeper`` and
  ``hide-cell`` (collapsed on the website, still executed and tested by nbval); an explorer
  never hides in a deeper part.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tools.book import toc_chapters

WIDGET = "application/vnd.jupyter.widget-view+json"
IDEA = re.compile(r"^(`{3,}|:{3,})\{admonition\} The idea[ \t]*\n:class:[^\n]*\bidea\b", re.M)
DEEPER = re.compile(r"^(`{3,}|:{3,})\{admonition\} Deeper: \S[^\n]*\n:class: ([^\n]*)$", re.M)
TEACHING = [p for p in toc_chapters() if "summary" not in p.stem]


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _tags(cell: dict) -> set[str]:
    return set(cell["metadata"].get("tags", []))


def _has_image(cell: dict) -> bool:
    return any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


@pytest.mark.parametrize("path", TEACHING, ids=[p.stem for p in TEACHING])
def test_chapter_opens_with_the_idea_and_its_picture(path: Path):
    cells = _cells(path)
    title = "".join(cells[0]["source"])
    assert IDEA.search(title), f"{path.name}: the title cell has no 'The idea' admonition"
    box = title[IDEA.search(title).end() :].split("```")[0]
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", box.strip()) if s]
    assert 2 <= len(sentences) <= 5, f"{path.name}: 'The idea' should be about three sentences"
    pictures = [i for i, c in enumerate(cells) if _has_image(c)]
    assert pictures, f"{path.name}: no figure at all"
    first = cells[pictures[0]]
    assert {"idea-picture", "hide-input"} <= _tags(first), (
        f"{path.name}: the first figure (cell {pictures[0]}) must be the key picture, "
        "tagged idea-picture and hide-input"
    )


@pytest.mark.parametrize("path", TEACHING, ids=[p.stem for p in TEACHING])
def test_deeper_parts_are_marked_and_collapsed(path: Path):
    cells = _cells(path)
    boxes = [
        m for c in cells if c["cell_type"] == "markdown"
        for m in DEEPER.finditer("".join(c["source"]))
    ]  # fmt: skip
    assert boxes, f"{path.name}: no 'Deeper: ...' part"
    for m in boxes:
        assert {"dropdown", "deeper"} <= set(m.group(2).split()), (
            f"{path.name}: a Deeper admonition must have ':class: dropdown deeper'"
        )
    for i, cell in enumerate(cells):
        if "deeper" in _tags(cell):
            assert "hide-cell" in _tags(cell), f"{path.name} cell {i}: deeper without hide-cell"
            widgets = [o for o in cell.get("outputs", []) if WIDGET in o.get("data", {})]
            assert not widgets, f"{path.name} cell {i}: an explorer inside a deeper part"


@pytest.mark.parametrize("path", toc_chapters(), ids=[p.stem for p in toc_chapters()])
def test_backtick_fences_have_no_backtick_in_their_title(path: Path):
    """CommonMark ends a backtick fence's info string at a backtick: a directive written
    ```{admonition} Deeper: `x` is not a directive at all, and the page shows its source.
    Such titles need a colon fence (:::{admonition} ...)."""
    broken = [
        line
        for c in _cells(path)
        if c["cell_type"] == "markdown"
        for line in "".join(c["source"]).splitlines()
        if re.match(r"^\s*`{3,}\{[^}]+\}.*`", line)
    ]
    assert not broken, f"{path.name}: {broken}"


SUMMARY = [p for p in toc_chapters() if "summary" in p.stem]
HIDDEN = {"hide-input", "remove-input", "hide-cell", "remove-cell"}


@pytest.mark.parametrize("path", SUMMARY, ids=[p.stem for p in SUMMARY])
def test_summary_hides_its_bookkeeping(path: Path):
    # The summary should read as a summary: on the website, the code that loads the
    # chapters' recorded figures and formats them (every code cell after the setup cell
    # that touches `results`) shows its output, not its input.
    cells = [c for c in _cells(path) if c["cell_type"] == "code"]
    shown = [
        i
        for i, c in enumerate(cells[1:], 2)
        if re.search(r"\bresults\b", "".join(c["source"])) and not _tags(c) & HIDDEN
    ]
    assert SUMMARY and not shown, (
        f"{path.name}: code cells {shown} (counting code cells from 1) do bookkeeping on "
        "the recorded results with their input shown; tag them hide-input"
    )
