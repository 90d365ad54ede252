"""For teaching from the book (issue 34): how long a chapter takes, and the student API page.

**How long a chapter takes.** Under each chapter's title one line says about how long its
main path takes to read and to run, and how long its Deeper parts and its exercises take,
in the page's language. The numbers are computed when the page is built, never typed:

* *reading*: the words of the page as built (the translated text in the Chinese edition:
  the transform runs after Sphinx's ``Locale``), prose and code alike, at
  :data:`WORDS_PER_MINUTE` words a minute; Chinese characters at :data:`CJK_PER_MINUTE` a
  minute (Chinese is read by the character, Latin words in it at the English rate). An
  equation counts as :data:`MATH_WORDS` words (inline) or :data:`DISPLAY_MATH_WORDS`
  (displayed), whatever its TeX. Outputs are not read;
* *running*: the recorded run time of the chapter's code cells, from each cell's
  ``execution`` timestamps (``iopub.execute_input`` to ``shell.execute_reply``), which
  ``make execute`` (tools/execute.py) saves in the committed notebook;
* the **main path** is everything but the Deeper parts (admonitions of class ``deeper``
  and code cells tagged ``deeper``) and the exercises (sphinx-exercise's nodes, solutions
  included on the full site; the solutions' reading is not counted, so the student site
  shows the same numbers);
* an **exercise** takes the reading of its statement and code cells, plus
  :data:`MINUTES_PER_SOLUTION_LINE` minute per line of its solution's code (comments and
  blank lines aside): the time to write and check it, counted from the notebook, so the
  student site, which has no solutions, shows the same figure.

Minutes are rounded up to whole minutes, and above 10 to a multiple of 5 (they are
estimates). :func:`chapter_times` does the arithmetic; tests/test_reading_time.py checks it
and the line on the built pages.

**The student API page.** In the student edition (``book_student_edition``) the API page
keeps the checkers' documentation but drops the docstrings of the exercise modules' other
functions: the planted-bug functions (whose docstrings would describe the bug) and the
reference helpers that compute an answer. Their signatures stay, so cross-references resolve.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from docutils import nodes
from sphinx.transforms import SphinxTransform

#: Reading speed of English prose and code, words a minute.
WORDS_PER_MINUTE = 200
#: Reading speed of Chinese, characters a minute.
CJK_PER_MINUTE = 300
#: An inline equation and a displayed one, read as this many words.
MATH_WORDS, DISPLAY_MATH_WORDS = 5, 20
#: Writing and checking one line of an exercise's solution, minutes.
MINUTES_PER_SOLUTION_LINE = 1.0

_WORD = re.compile(r"[A-Za-z0-9_]+")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_MAIN, _DEEPER, _EXERCISE, _SKIP = "main", "deeper", "exercises", "skip"


def count_words(text: str) -> tuple[int, int]:
    """``(latin words, Chinese characters)`` in ``text``."""
    return len(_WORD.findall(text)), len(_CJK.findall(text))


def reading_minutes(words: int, cjk: int) -> float:
    return words / WORDS_PER_MINUTE + cjk / CJK_PER_MINUTE


def _stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def cell_seconds(cell: dict) -> float:
    """The recorded run time of a code cell (0 when it has no timestamps)."""
    ex = cell.get("metadata", {}).get("execution", {})
    start, end = ex.get("iopub.execute_input"), ex.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    return max((_stamp(end) - _stamp(start)).total_seconds(), 0.0)


def _source(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def notebook_parts(nb: dict) -> dict:
    """From the notebook: the run seconds of the main path, the Deeper parts and the
    exercises, and the exercises' count and solution code lines."""
    seconds = {_MAIN: 0.0, _DEEPER: 0.0, _EXERCISE: 0.0}
    exercises, solution_lines = 0, 0
    in_exercise = in_solution = False
    for cell in nb["cells"]:
        src = _source(cell)
        if cell["cell_type"] == "markdown":
            exercises += src.count("{exercise-start}") + len(re.findall(r"```\{exercise\}", src))
            in_exercise = "{exercise-start}" in src or (
                in_exercise and "{exercise-end}" not in src
            )
            in_solution = "{solution-start}" in src or (
                in_solution and "{solution-end}" not in src
            )
            continue
        if cell["cell_type"] != "code":
            continue
        tags = set(cell.get("metadata", {}).get("tags", []))
        part = (
            _EXERCISE
            if in_exercise or in_solution or "solution" in tags
            else _DEEPER
            if "deeper" in tags
            else _MAIN
        )
        seconds[part] += cell_seconds(cell)
        if in_solution or "solution" in tags:
            solution_lines += sum(
                1
                for line in src.splitlines()
                if line.strip() and not line.strip().startswith(("#", "%"))
            )
    return {"seconds": seconds, "exercises": exercises, "solution_lines": solution_lines}


def _round(minutes: float) -> int:
    m = max(1, math.ceil(minutes - 1e-9))
    return m if m <= 10 else 5 * math.ceil(m / 5)


@dataclass
class ChapterTimes:
    read: int  # the main path's reading, minutes
    run: int  # the main path's recorded run time, minutes
    deeper: int  # the Deeper parts: reading and running
    exercises: int  # the exercises: reading, running, writing the solutions
    count: int  # how many exercises


def chapter_times(text: dict[str, tuple[int, int]], parts: dict) -> ChapterTimes:
    """The rounded minutes from the words per part (``{part: (words, cjk)}``) and the
    notebook's parts (:func:`notebook_parts`)."""
    sec = parts["seconds"]
    return ChapterTimes(
        read=_round(reading_minutes(*text.get(_MAIN, (0, 0)))),
        run=_round(sec[_MAIN] / 60),
        deeper=_round(reading_minutes(*text.get(_DEEPER, (0, 0))) + sec[_DEEPER] / 60),
        exercises=_round(
            reading_minutes(*text.get(_EXERCISE, (0, 0)))
            + sec[_EXERCISE] / 60
            + parts["solution_lines"] * MINUTES_PER_SOLUTION_LINE
        ),
        count=parts["exercises"],
    )


#: The line's clauses in each language: the main path, the Deeper parts, the exercises. The
#: stopwatch before it is drawn by the stylesheet (_assets/book.css), not typed: an emoji needs
#: a colour-emoji font, which the printing Chromium may not have (the PDF showed an empty box).
LINES = {
    "en": (
        "Main path: about {read} min to read and {run} min to run",
        "Deeper parts: about {deeper} min",
        "{count} exercises: about {exercises} min",
    ),
    "zh": (
        "主线：阅读约 {read} 分钟，运行约 {run} 分钟",
        "深入部分：约 {deeper} 分钟",
        "{count} 道练习：约 {exercises} 分钟",
    ),
}


def time_line(times: ChapterTimes, lang: str, *, deeper: bool = True) -> str:
    """The line under the title; a chapter without Deeper parts or exercises omits them."""
    main, deep, exercises = LINES[lang]
    if times.count == 1:
        exercises = exercises.replace("{count} exercises:", "{count} exercise:")
    clauses = [main] + ([deep] if deeper else []) + ([exercises] if times.count else [])
    return " · ".join(clauses).format(**vars(times))


def _part(node, current: str) -> str:
    name = type(node).__name__
    if name.startswith("solution"):
        return _SKIP
    if name.startswith("exercise"):
        return _EXERCISE
    classes = node.get("classes", []) if isinstance(node, nodes.Element) else []
    if current == _MAIN and ("deeper" in classes or "tag_deeper" in classes):
        return _DEEPER
    if isinstance(node, nodes.container) and node.get("nb_element") == "cell_code_output":
        return _SKIP
    if "reading-time" in classes:
        return _SKIP
    return current


def doctree_text(doctree) -> dict[str, tuple[int, int]]:
    """``{part: (latin words, cjk characters)}`` of the page, parts as in the module's doc."""
    counts = {_MAIN: [0, 0], _DEEPER: [0, 0], _EXERCISE: [0, 0]}

    def visit(node, part):
        part = _part(node, part)
        if part == _SKIP:
            return
        if isinstance(node, nodes.math):
            counts[part][0] += MATH_WORDS
            return
        if isinstance(node, nodes.math_block):
            counts[part][0] += DISPLAY_MATH_WORDS
            return
        if isinstance(node, (nodes.Text,)):
            words, cjk = count_words(str(node))
            counts[part][0] += words
            counts[part][1] += cjk
            return
        for child in node.children:
            visit(child, part)

    visit(doctree, _MAIN)
    return {k: (v[0], v[1]) for k, v in counts.items()}


class ChapterTime(SphinxTransform):
    """Put the chapter's time line under its title (chapters/ pages only)."""

    # After Sphinx's Locale (20, the Chinese text) and sphinx-exercise's merges (10).
    default_priority = 30

    def apply(self) -> None:
        docname = self.env.docname
        if not docname.startswith("chapters/"):
            return
        path = Path(self.env.doc2path(docname))
        if path.suffix != ".ipynb" or not path.is_file():
            return
        parts = notebook_parts(json.loads(path.read_text(encoding="utf-8")))
        section = next(iter(self.document.findall(nodes.section)), None)
        if section is None or not isinstance(section[0], nodes.title):
            return
        lang = "zh" if str(self.config.language or "").startswith("zh") else "en"
        text = doctree_text(self.document)
        times = chapter_times(text, parts)
        deeper = bool(text[_DEEPER][0] or text[_DEEPER][1] or parts["seconds"][_DEEPER])
        line = nodes.paragraph("", time_line(times, lang, deeper=deeper), classes=["reading-time"])
        section.insert(1, line)


def _answer_helper(name: str) -> bool:
    """A public member of a chapter's exercise module that is not a checker or a constant."""
    found = re.match(r"^selfattn\.exercises\.ch\d\d\.(\w+)$", name)
    if not found:
        return False
    member = found[1]
    return not (member.startswith("check_") or member.isupper())


def hide_answer_helpers(app, what, name, obj, options, lines) -> None:
    if app.config.book_student_edition and _answer_helper(name):
        lines[:] = []


def setup(app):
    app.add_transform(ChapterTime)
    app.connect("autodoc-process-docstring", hide_answer_helpers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
