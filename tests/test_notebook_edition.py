"""The notebook edition (tools/notebook_edition.py, `make notebooks`): plain Jupyter markdown.

notebooks/chapters/ and student/chapters/ are committed, opened by the Colab buttons and
offered as the pages' downloads. They must be what the chapters generate now, hold no MyST
role or directive syntax in any markdown cell, keep every code cell and output of the chapter
(bare ``rec(...)`` bookkeeping aside), and the student edition must hold no solution.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from book import ROOT, toc_chapters

sys.path.insert(0, str(ROOT / "tools"))
import notebook_edition as edition  # noqa: E402

CHAPTERS = toc_chapters()
IDS = [p.stem for p in CHAPTERS]
MYST = re.compile(
    r"\{[a-z]+(?::[a-z]+)?\}`"  # a role: {glue:text}`key`, {cite:p}`key`
    r"|^[ \t>]*(`{3,}|:{3,})\{"  # a directive fence: ```{prf:theorem}
    r"|^\([\w:\-]+\)=\s*$",  # a MyST target: (label)=
    re.M,
)


def _nb(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _edition(folder: str, chapter: Path) -> dict:
    return _nb(ROOT / folder / "chapters" / chapter.name)


def test_the_editions_are_current():
    wrong = edition.stale()
    assert not wrong, f"out of date, run `make notebooks`: {wrong}"


@pytest.mark.parametrize("folder", list(edition.EDITIONS))
@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_markdown_is_plain_jupyter(chapter, folder):
    for i, cell in enumerate(_edition(folder, chapter)["cells"]):
        if cell["cell_type"] == "markdown":
            m = MYST.search("".join(cell["source"]))
            assert not m, f"{folder}/{chapter.name} cell {i}: MyST syntax {m.group(0)!r}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_code_and_outputs_are_the_chapters(chapter):
    """Same code cells in the same order, same outputs (but a predict cell's, which the reader
    sees by running it: tests/test_predict.py); only bookkeeping lines go."""
    src = [c for c in _nb(chapter)["cells"] if c["cell_type"] == "code"]
    out = [c for c in _edition("notebooks", chapter)["cells"] if c["cell_type"] == "code"]
    assert len(src) == len(out)
    for a, b in zip(src, out):
        if edition.PREDICT_TAG in a.get("metadata", {}).get("tags", []):
            assert b["outputs"] == []
        else:
            assert a["outputs"] == b["outputs"]
        kept = "".join(b["source"]).replace(edition.DEEPER_COMMENT, "", 1).splitlines()
        original = "".join(a["source"]).splitlines()
        assert set(kept) <= set(original) | {""}, f"{chapter.name}: a code line changed"


def test_a_glued_value_and_a_citation_are_rendered():
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "source": 'rec("x", 0.12345)\ny = 1',
                "outputs": [
                    {
                        "output_type": "display_data",
                        "data": {edition.GLUE_MIME: "0.12345"},
                        "metadata": {"scrapbook": {"name": "ch99_x", "mime_prefix": ""}},
                    }
                ],
            },
            {
                "cell_type": "markdown",
                "metadata": {},
                "source": "x is {glue:text}`ch99_x:.2f` {cite:p}`ch99-vaswani2017attention`.\n"
                "```{prf:theorem} T\n:label: thm-x\nBody.\n```\nSee {prf:ref}`thm-x`.",
            },
        ]
    }
    out = edition.convert(nb)
    text = out["cells"][1]["source"]
    assert "x is 0.12 (Vaswani et al., 2017)." in text
    assert "> **Theorem (T).**" in text and "See Theorem (T)." in text
    assert out["cells"][0]["source"] == "y = 1"  # the bookkeeping call left out


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_student_edition_has_the_exercises_but_no_solution(chapter):
    full = _edition("notebooks", chapter)["cells"]
    student = _edition("student", chapter)["cells"]

    def count(cells, heading):
        return sum(
            "".join(c["source"]).count(heading) for c in cells if c["cell_type"] == "markdown"
        )

    assert count(student, "### Exercise") == count(full, "### Exercise")
    assert count(student, "#### Solution") == 0
    assert not [c for c in student if edition.SOLUTION_TAG in c["metadata"].get("tags", [])]
    solutions = [c for c in full if edition.SOLUTION_TAG in c["metadata"].get("tags", [])]
    if count(full, "### Exercise"):
        assert solutions, f"{chapter.name}: no cell tagged {edition.SOLUTION_TAG!r}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_deeper_code_is_marked_optional(chapter):
    for cell in _edition("notebooks", chapter)["cells"]:
        if edition.DEEPER_TAG in cell["metadata"].get("tags", []):
            assert "".join(cell["source"]).startswith(edition.DEEPER_COMMENT)


def _first_author_and_year(entry) -> tuple[str, str]:
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    first = edition._plain(" ".join(people[0].last_names)) if people else None
    return first, entry.fields.get("year", "n.d.")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_each_reference_label_names_its_own_entry(chapter):
    """A reference list item's bold label (author, year) belongs to the entry it labels."""
    bib = edition._bibliography().entries
    by_title = {edition._plain(e.fields.get("title", "")).lower(): e for e in bib.values()}
    for cell in _edition("notebooks", chapter)["cells"]:
        source = "".join(cell["source"])
        for label, body in re.findall(r"^- \*\*(.+?)\.\*\* (.+)$", source, re.M):
            # the entry whose title the item quotes (the longest, as "Deep learning" is inside
            # "Dive into deep learning")
            found = [(len(t), e) for t, e in by_title.items() if t and t in body.lower()]
            if not found:
                continue
            entry = max(found, key=lambda pair: pair[0])[1]
            first, year = _first_author_and_year(entry)
            assert year in label, f"{chapter.name}: {label!r} labels an entry of {year}"
            if first:
                assert label.startswith(first), f"{chapter.name}: {label!r} labels {first}'s"


def test_cross_references_read_as_words():
    text = edition._Converter({"cells": []}).inline(
        "see exercise {ref}`ex-a` and {doc}`09_transformers_everywhere`"
    )
    assert "exercise ex-a" in text  # an unknown label stays as it is
    assert "chapter 9, *Transformers everywhere*" in text
    conv = edition._Converter({"cells": []})
    conv.labels["ex-b"] = "Exercise (Predict)"
    assert conv.inline("exercise {ref}`ex-b`") == "Exercise (Predict)"
