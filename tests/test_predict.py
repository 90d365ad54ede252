"""No "predict, then run" answer is shown before the reader has predicted (issue 32).

A predict exercise's reveal is the code cell tagged ``predict`` (the cell the reader runs after
writing down a prediction; its output is the answer). Here, for every such cell of every
chapter:

* it is a code cell outside any solution, and the chapter keeps its output (strict nbval
  checks it; the website needs it);
* in both notebook editions (``notebooks/``: Colab and the download; ``student/``) its output is
  empty, and its answer (each line of the output, or the ``predict.answer`` string of the
  cell's metadata) appears in no earlier cell, output or markdown;
* on the website the output is collapsed (``_ext/book_site.py``; the browser test
  ``tests_site/test_practice.py`` checks it is not visible until the reader opens it).

Every "Predict, then run" exercise of the chapters (its title starts so) either has a predict
cell or reveals nothing before its solution (no output of its own cells besides the
checker's ⏳ line), so a new predict exercise cannot leak its answer unnoticed. A cell that
prints the data the prediction starts from (chapter 6's scores at positions 3 and 5, from
which the reader infers the score at 105 and 103) is tagged ``predict-data`` and stays shown.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import notebook_edition  # noqa: E402
from book import toc_chapters  # noqa: E402

PREDICT = notebook_edition.PREDICT_TAG
#: A cell that prints the exercise's given data (which the reader reasons from), not its answer.
PREDICT_DATA = "predict-data"
CHAPTERS = toc_chapters()


def _src(cell) -> str:
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def _tags(cell) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def _text(out: dict) -> str:
    if "text" in out:
        t = out["text"]
        return "".join(t) if isinstance(t, list) else t
    data = out.get("data", {})
    parts = []
    for key in ("text/plain", "text/html", "text/markdown"):
        if key in data:
            v = data[key]
            parts.append("".join(v) if isinstance(v, list) else v)
    return "\n".join(parts)


def answers(cell: dict) -> list[str]:
    """What the predict cell reveals: its metadata's answer, else its output lines."""
    meta = cell.get("metadata", {}).get("predict", {})
    if isinstance(meta, dict) and meta.get("answer"):
        return [str(meta["answer"])]
    lines = []
    for out in cell.get("outputs", []):
        for line in _text(out).splitlines():
            line = line.strip()
            # The checker's own "not attempted" line is not the answer.
            if len(line) >= 3 and not line.startswith("⏳"):
                lines.append(line)
    return lines


def _predict_cells(nb: dict) -> list[tuple[int, dict]]:
    return [(i, c) for i, c in enumerate(nb["cells"]) if PREDICT in _tags(c)]


def _chapter(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name[:2])
def test_predict_cells_are_well_formed(path):
    for i, cell in _predict_cells(_chapter(path)):
        where = f"{path.name} cell {i} ({cell.get('id')})"
        assert cell["cell_type"] == "code", f"{where}: a predict cell is a code cell"
        assert "solution" not in _tags(cell), f"{where}: a solution is not a predict cell"
        assert cell.get("outputs"), f"{where}: the chapter keeps the answer's output"
        assert answers(cell), f"{where}: no answer found in its output"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name[:2])
@pytest.mark.parametrize("folder", list(notebook_edition.EDITIONS))
def test_no_answer_visible_in_editions(path, folder):
    chapter = _chapter(path)
    edition = notebook_edition.convert(
        chapter,
        solutions=notebook_edition.EDITIONS[folder],
        chapter=int(path.name[:2]),
    )
    committed = ROOT / folder / "chapters" / path.name
    assert committed.exists(), f"{committed}: missing (make notebooks)"
    for generated in (edition, _chapter(committed)):
        cells = generated["cells"]
        by_id = {c.get("id"): k for k, c in enumerate(cells)}
        for _, original in _predict_cells(chapter):
            k = by_id[original["id"]]
            cell = cells[k]
            assert cell["outputs"] == [], f"{folder}/{path.name}: {cell['id']} shows its output"
            assert cell.get("execution_count") is None
            before = []
            for c in cells[:k]:
                if c["cell_type"] == "markdown":
                    before.append(_src(c))
                before.extend(_text(o) for o in c.get("outputs", []))
            seen = "\n".join(before)
            for answer in answers(original):
                assert answer not in seen, (
                    f"{folder}/{path.name}: the answer of {cell['id']} ({answer!r}) is shown "
                    "before it"
                )


def _exercises(nb: dict):
    """``(title, [cells])`` of each exercise: from its exercise-start to its solution-start."""
    out, current = [], None
    for cell in nb["cells"]:
        text = _src(cell)
        m = re.search(r"^```\{exercise-start\}\s*(.*)$", text, re.M)
        if cell["cell_type"] == "markdown" and m:
            current = (m[1].strip(), [])
            out.append(current)
            continue
        if cell["cell_type"] == "markdown" and (
            "{solution-start}" in text or "{exercise-end}" in text
        ):
            current = None
            continue
        if current is not None:
            current[1].append(cell)
    return out


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name[:2])
def test_every_predict_exercise_hides_its_answer(path):
    """A "Predict, then run" exercise's cells print nothing but the checker's ⏳ line, or the
    cell that prints more is a predict cell (collapsed on the site, cleared in the editions)."""
    for title, cells in _exercises(_chapter(path)):
        if not title.lower().startswith("predict"):
            continue
        for cell in cells:
            if cell["cell_type"] != "code" or _tags(cell) & {PREDICT, PREDICT_DATA}:
                continue
            shown = [
                line.strip()
                for out in cell.get("outputs", [])
                for line in _text(out).splitlines()
                if line.strip()
            ]
            extra = [s for s in shown if not s.startswith("⏳")]
            assert not extra, (
                f"{path.name}: exercise {title!r} shows {extra[:2]} before the reader acts: "
                "tag that cell 'predict' (and 'hide-output')"
            )


def test_convert_clears_predict_outputs():
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": 3,
                "id": "p",
                "metadata": {"tags": ["predict", "hide-output"]},
                "outputs": [{"name": "stdout", "output_type": "stream", "text": "37\n"}],
                "source": "print(37)",
            }
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    out = notebook_edition.convert(nb)
    assert out["cells"][0]["outputs"] == [] and out["cells"][0]["execution_count"] is None
    assert nb["cells"][0]["outputs"]  # the chapter itself is unchanged
