"""Each chapter says how long it takes (issue 34): _ext/book_teaching.py's line under the title.

The arithmetic is checked on small inputs; the chapters must carry what it reads (every code
cell's recorded ``execution`` timestamps); and on the built site (``_build/html``, and the
Chinese edition in ``_build/html/zh``, when built) every chapter's page has the line right
under its title, whose run time is the notebook's recorded one, and whose reading time agrees
with an independent count of the page's main-path words (or characters, in Chinese).
"""

from __future__ import annotations

import json
import math
import os
import re
from datetime import datetime
from pathlib import Path

import book_teaching as bt  # noqa: E402
import pytest

from tools.book import ROOT, toc_chapters

CHAPTERS = toc_chapters()
SITE = Path(os.environ.get("SITE_HTML", ROOT / "_build" / "html"))  # as tests_site/ reads it
#: Cells that tools insert after a recording (tools/apply_quizzes.py: a concept check, the
#: progress line), which run in no measurable time: they may lack timestamps.
TOOL_CELLS = {"concept-check", "exercise-progress"}


def _cell(kind="code", src="x = 1\n", tags=(), seconds=None):
    cell = {"cell_type": kind, "source": src, "metadata": {"tags": list(tags)}}
    if seconds is not None:
        cell["metadata"]["execution"] = {
            "iopub.execute_input": "2026-12-01T10:00:00.000000Z",
            "shell.execute_reply": f"2026-12-01T10:00:{seconds:02d}.500000Z",
        }
    return cell


def test_words_and_characters_are_counted_by_language():
    assert bt.count_words("The scores, q_i . k_j, sum to 1.") == (7, 0)
    assert bt.count_words("注意力权重 softmax 之和为 1") == (2, 8)
    assert bt.reading_minutes(400, 0) == pytest.approx(2.0)
    assert bt.reading_minutes(0, 600) == pytest.approx(2.0)


def test_the_notebook_parts_split_run_time_and_solution_lines():
    nb = {
        "cells": [
            _cell(seconds=30),  # main path: 30.5 s
            _cell(tags=["deeper", "hide-cell"], seconds=8),
            _cell("markdown", "```{exercise-start} Build: x\n:label: ex-ch01-x\n```\n"),
            _cell(src="def f():\n    raise NotImplementedError\n", seconds=1),
            _cell("markdown", "```{exercise-end}\n```\n"),
            _cell("markdown", "````{solution-start} ex-ch01-x\n:class: dropdown\n````\n"),
            _cell(
                src="# @title Solution\n# a comment\ndef f_solution():\n\n    return 1\n",
                tags=["solution"],
                seconds=2,
            ),
            _cell("markdown", "````{solution-end}\n````\n"),
            _cell(seconds=None),  # no timestamps: contributes nothing
        ]
    }
    parts = bt.notebook_parts(nb)
    assert parts["seconds"] == {"main": 30.5, "deeper": 8.5, "exercises": 1.5 + 2.5}
    assert parts["exercises"] == 1
    assert parts["solution_lines"] == 2  # the def and the return; comments and blanks aside
    times = bt.chapter_times({"main": (2100, 0), "deeper": (0, 900), "exercises": (50, 0)}, parts)
    # 10.5 min of reading rounds up to 15 (above 10: a multiple of 5); 30.5 s to 1 minute
    assert (times.read, times.run) == (15, 1)
    assert times.deeper == math.ceil(900 / 300 + 8.5 / 60)  # 4
    assert times.exercises == math.ceil(50 / 200 + 4 / 60 + 2 * bt.MINUTES_PER_SOLUTION_LINE)
    line = bt.time_line(times, "en")
    assert line.startswith("Main path: about 15 min to read and 1 min to run")
    assert "1 exercise: about 3 min" in line
    assert "15 分钟" in bt.time_line(times, "zh")
    no_extras = bt.ChapterTimes(3, 1, 1, 1, 0)
    assert bt.time_line(no_extras, "en", deeper=False) == (
        "Main path: about 3 min to read and 1 min to run"
    )


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_code_cell_has_its_recorded_run_time(chapter):
    """The run time is the recording's (tools/execute.py saves the timestamps), not a guess."""
    nb = json.loads(chapter.read_text(encoding="utf-8"))
    code = [
        c
        for c in nb["cells"]
        if c["cell_type"] == "code" and not TOOL_CELLS & set(c["metadata"].get("tags", []))
    ]
    missing = [i for i, c in enumerate(code) if "execution" not in c["metadata"]]
    assert not missing, f"{chapter.name}: code cells {missing} have no execution timestamps"


# ----------------------------------------------------------------------------- the built pages


def _stamp(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _main_run_seconds(nb) -> float:
    """Independently of the extension: the main path's cells, by their tags and directives."""
    total, inside = 0.0, False
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            if re.search(r"\{(exercise|solution)-start\}", src):
                inside = True
            if re.search(r"\{(exercise|solution)-end\}", src):
                inside = False
            continue
        tags = cell["metadata"].get("tags", [])
        if inside or "deeper" in tags or "solution" in tags:
            continue
        ex = cell["metadata"].get("execution", {})
        if "iopub.execute_input" in ex and "shell.execute_reply" in ex:
            total += (
                _stamp(ex["shell.execute_reply"]) - _stamp(ex["iopub.execute_input"])
            ).total_seconds()
    return total


def _page_counts(html: str) -> tuple[str, int, int]:
    """The time line, and the main path's (words, Chinese characters) of a built page, counted
    from the HTML: Deeper parts, exercises, solutions and outputs left out."""
    bs4 = pytest.importorskip("bs4")
    soup = bs4.BeautifulSoup(html, "html.parser")
    article = soup.find("article") or soup
    line = article.find("p", class_="reading-time")
    assert line is not None, "no time line"
    text = line.get_text()
    line.decompose()
    drop = ("deeper", "tag_deeper", "exercise", "solution", "cell_output", "headerlink")
    for el in article.find_all(class_=lambda c: c and any(k in c.split() for k in drop)):
        el.decompose()
    for el in article.find_all(["script", "style", "button"]):
        el.decompose()
    words = 0
    for el in article.find_all(class_="math"):
        words += bt.DISPLAY_MATH_WORDS if el.name == "div" else bt.MATH_WORDS
        el.decompose()
    w, c = bt.count_words(article.get_text(" "))
    return text, words + w, c


def _built(folder: Path, chapter: Path) -> Path:
    page = folder / "chapters" / f"{chapter.stem}.html"
    if not page.is_file():
        pytest.skip(f"not built: {page} (make book)")
    return page


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_the_page_says_how_long_the_chapter_takes(chapter, lang):
    page = _built(SITE if lang == "en" else SITE / "zh", chapter)
    html = page.read_text(encoding="utf-8")
    # right under the title
    assert re.search(r"</h1>\s*<p class=\"reading-time\">", html), f"{page}: not under the title"
    line, words, cjk = _page_counts(html)
    pattern = {
        "en": r"Main path: about (\d+) min to read and (\d+) min to run",
        "zh": r"主线：阅读约 (\d+) 分钟，运行约 (\d+) 分钟",
    }[lang]
    found = re.search(pattern, line)
    assert found, f"{page}: {line!r}"
    read, run = int(found[1]), int(found[2])
    nb = json.loads(chapter.read_text(encoding="utf-8"))
    assert run == bt._round(_main_run_seconds(nb) / 60), f"{page}: run {run} min"
    # the reading time agrees with the page's own main-path text, counted another way
    estimate = bt.reading_minutes(words, cjk)
    assert abs(estimate - read) <= max(5, 0.25 * read), (
        f"{page}: the line says {read} min, the page's main path reads in {estimate:.1f}"
    )
    exercises = sum(
        "".join(c["source"]).count("{exercise-start}")
        for c in nb["cells"]
        if c["cell_type"] == "markdown"
    )
    if exercises:
        count = re.search(r"(\d+) (?:exercises|道练习)", line)
        assert count and int(count[1]) == exercises, f"{page}: {line!r}"
