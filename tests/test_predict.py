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
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
from tools import notebook_edition  # noqa: E402
from tools.book import toc_chapters  # noqa: E402

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


# ------------------------------------------------------------------ predict before you run
#: Chapters whose main path must hold a prediction (issue 45: "Predict before you run").
PREDICTING_CHAPTERS = [p for p in CHAPTERS if 1 <= int(p.name[:2]) <= 9]
#: A code cell where the reader writes a one-line guess before the experiment runs.
GUESS = "guess"
CONCEPT_CHECK = "concept-check"
#: Words of a markdown cell that asks the reader to commit to an answer.
ASKS = re.compile(r"\b(predict|guess|write down|before you run|commit)", re.I)


def main_path_predictions(nb: dict) -> list[tuple[int, str]]:
    """``(index, why not)`` of each main-path experiment tagged ``predict``; ``why not`` is
    empty where it is a prediction: a code cell outside every exercise and Deeper part, and,
    since the experiment before it (the previous code cell that is not a guess or a concept
    check), a question (a markdown cell with a question mark) and a commitment (a concept
    check, a code cell tagged ``guess``, or the question asking to predict / guess / write
    down), and after it a markdown cell that reads the answer."""
    cells = nb["cells"]
    found, in_exercise = [], False
    for i, cell in enumerate(cells):
        text = _src(cell)
        if cell["cell_type"] == "markdown":
            if "{exercise-start}" in text:
                in_exercise = True
            if "{exercise-end}" in text or "{solution-end}" in text:
                in_exercise = False
            continue
        tags = _tags(cell)
        if PREDICT not in tags or in_exercise or tags & {"deeper", "hide-cell", "solution"}:
            continue
        asked = committed = False
        for before in reversed(cells[:i]):
            btags = _tags(before)
            if before["cell_type"] == "markdown":
                btext = _src(before)
                asked = asked or "?" in btext or "？" in btext
                committed = committed or bool(ASKS.search(btext))
                if re.search(r"^#{1,2} ", btext, re.M) or "{exercise-end}" in btext:
                    break  # the question belongs to this section
            elif CONCEPT_CHECK in btags:
                asked = committed = True
            elif GUESS in btags:
                committed = True
            else:
                break  # the experiment before: the question must come after it
        answered = any(c["cell_type"] == "markdown" for c in cells[i + 1 : i + 4])
        why = []
        if not asked:
            why.append("no question before it")
        if not committed:
            why.append("no concept check, guess cell or 'predict'/'guess' wording before it")
        if not answered:
            why.append("no prose after it reads the answer")
        found.append((i, "; ".join(why)))
    return found


@pytest.mark.parametrize("path", PREDICTING_CHAPTERS, ids=lambda p: p.name[:2])
def test_each_chapter_predicts_before_an_experiment(path):
    """Issue 45: in each of chapters 1-9 at least one main-path experiment is a prediction.

    The question comes before the cell; the reader commits to an answer (a concept check, or
    a one-line guess: a code cell tagged ``guess`` or the question asking for one); the cell
    is tagged ``predict`` and ``hide-output`` (its output collapsed on the website, cleared
    in the editions, as checked above), and the answer comes only after the output.
    """
    found = main_path_predictions(_chapter(path))
    good = [i for i, why in found if not why]
    assert good, (
        f"{path.name}: no main-path prediction (a 'predict' cell outside exercises and Deeper "
        f"parts, a question and a commitment before it, prose after it); candidates: {found}"
    )
    for i in good:
        tags = _tags(_chapter(path)["cells"][i])
        assert "hide-output" in tags, f"{path.name} cell {i}: tag it 'hide-output' too"


def test_a_prediction_needs_its_question_first():
    """The hygiene test above fails on an experiment whose answer is announced first."""

    def md(text):
        return {"cell_type": "markdown", "metadata": {}, "source": text}

    def code(tags, out="0.5\n"):
        return {
            "cell_type": "code",
            "metadata": {"tags": tags},
            "outputs": [{"name": "stdout", "output_type": "stream", "text": out}],
            "source": "print(0.5)",
        }

    good = {
        "cells": [
            md("## 2.3 Scores"),
            md("Predict: will the weight on the noun be above one half?"),
            code([GUESS], ""),
            code([PREDICT, "hide-output"]),
            md("It is above one half."),
        ]
    }
    assert [why for _, why in main_path_predictions(good)] == [""]
    announced = {
        "cells": [
            md("## 2.3 Scores"),
            md("The weight on the noun is above one half, as the cell shows."),
            code([PREDICT, "hide-output"]),
            md("It is."),
        ]
    }
    assert main_path_predictions(announced)[0][1]
    in_exercise = {"cells": [md("```{exercise-start} Predict, then run\n```"), *good["cells"]]}
    assert main_path_predictions(in_exercise) == []
