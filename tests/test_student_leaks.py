"""No solution leaks to a student: a scan of the notebooks, the checkers and the student site.

The student edition (`make book-student`, ``student/chapters/``) is the book a course
publishes (issue 34). A solution can reach a student by four roads, and this scans each:

* the **student notebooks** (``student/chapters/``, and the Chinese ``student/zh/chapters/``):
  no solution cell, no line of a
  solution's code, no sentence of a solution's prose, and no predict answer in the
  exercise's own cells (the predict cell itself, which the reader runs after predicting,
  has no saved output there);
* the **checkers' docstrings**, which the API page renders and ``help()`` prints: the
  module's docstring, each checker's, and every other public function's (the planted-bug
  functions, the helpers) state what is checked, never the answer: no predict answer, no
  solution line, and, for a find-the-bug exercise, neither the planted bug's code nor its
  fix (the code the solution changes);
* the **checkers' messages** for a wrong or not-attempted answer, in English and in Chinese:
  no predict answer (a message may explain a named mistake, but never prints the right
  value), no solution line;
* the **student site** (``_build/student/html``, when built): the chapters' pages carry no
  solution line or solution prose and show no predict answer outside the collapsed predict
  cells, and its API page carries no checker helper that computes an answer.

Each exercise's answer is collected from the chapter itself, not typed here: a predict
exercise's answer is what its solution cell passes to the checker (the cell is run with the
checker replaced by a recorder; the checker then confirms the answer passes), written as
numbers (``26``, ``4.95``, ``45,613,056``) and as the solution's own expression (``7 + 1 +
2``); a build or find-the-bug exercise's answer is its solution's code lines that appear in
no other cell of the chapter. A predict answer that the exercise's statement itself gives
as data (chapter 6's "key at 20", whose answer is 20) is scanned for by its expression only.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import html as html_lib
import importlib
import inspect
import io
import json
import math
import re
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tools import notebook_edition  # noqa: E402
from tools.book import ROOT, toc_chapters

STUDENT = ROOT / "student" / "chapters"
#: The student notebooks in each language: the Chinese edition (student/zh/) is scanned too.
STUDENT_EDITIONS = {"en": STUDENT, "zh": ROOT / "student" / "zh" / "chapters"}
STUDENT_SITE = ROOT / "_build" / "student" / "html"
# Lines too generic to identify a solution (tests_site/test_student.py keeps the same list).
#: A cell that prints the data a prediction starts from, shown on purpose (tests/test_predict.py).
PREDICT_DATA = "predict-data"
GENERIC = {"", "return", "pass", ")", "]", "}", "else:", "try:", "))", "),", "],"}


def _src(cell: dict) -> str:
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def _tags(cell: dict) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def _squash(text: str) -> str:
    """Text with every run of whitespace removed: code is matched whatever its spacing."""
    return re.sub(r"\s+", "", text)


@dataclass
class Exercise:
    chapter: str  # "01"
    label: str  # "predict-layers"
    title: str  # "Predict, then run: layers for a distance of 100"
    statement: str = ""  # the exercise's markdown and the reader's cells, as a student sees
    solution_code: list[str] = field(default_factory=list)
    solution_prose: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.title.split(":")[0].strip().lower()

    @property
    def name(self) -> str:
        return f"ch{self.chapter}-{self.label}"


def _exercises(path: Path) -> list[Exercise]:
    """A chapter's exercises, with their statements and solutions (gated directives)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    found: list[Exercise] = []
    current, in_exercise, in_solution = None, False, False
    for cell in nb["cells"]:
        src = _src(cell)
        if cell["cell_type"] == "markdown":
            start = re.search(r"\{exercise-start\}\s*(.*)\n(?:.*\n)*?:label: ex-ch\d\d-(\S+)", src)
            if start:
                current = Exercise(path.name[:2], start.group(2), start.group(1).strip())
                found.append(current)
                in_exercise = True
            if "{solution-start}" in src:
                in_solution = True
            if current is not None and in_solution:
                current.solution_prose.append(src)
            elif current is not None and in_exercise:
                current.statement += src + "\n"
            if "{exercise-end}" in src:
                in_exercise = False
            if "{solution-end}" in src:
                in_solution = False
            continue
        if current is None:
            continue
        if in_solution or notebook_edition.SOLUTION_TAG in _tags(cell):
            current.solution_code.append(src)
        elif in_exercise and notebook_edition.PREDICT_TAG not in _tags(cell):
            current.statement += src + "\n"  # not the predict cell: it reveals the answer
    return found


def _other_lines(path: Path) -> set[str]:
    """Stripped lines of every cell that is not a solution (code and prose)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    lines, in_solution = set(), False
    for cell in nb["cells"]:
        src = _src(cell)
        if cell["cell_type"] == "markdown":
            if "{solution-start}" in src:
                in_solution = True
            if not in_solution:
                lines |= {ln.strip() for ln in src.splitlines()}
            if "{solution-end}" in src:
                in_solution = False
        elif not in_solution and notebook_edition.SOLUTION_TAG not in _tags(cell):
            lines |= {ln.strip() for ln in src.splitlines()}
    return lines


def solution_lines(ex: Exercise, elsewhere: set[str]) -> list[str]:
    """The solution's code lines that no other cell of the chapter has (the stub, the checker
    call and a find-the-bug exercise's quoted function are shared, so they do not count)."""
    lines = {ln.strip() for src in ex.solution_code for ln in src.splitlines()}
    return sorted(
        ln
        for ln in lines - elsewhere - GENERIC
        if not ln.startswith("# @title") and len(_squash(ln)) >= 8
    )


def prose_sentences(ex: Exercise) -> list[str]:
    """Sentences of the solution's prose long enough to identify it (MyST fences dropped)."""
    text = "\n".join(ex.solution_prose)
    text = "\n".join(ln for ln in text.splitlines() if not re.match(r"\s*(```|:::|:\w+:)", ln))
    text = re.sub(r"\{[a-z:]+\}`[^`]*`", " ", text)  # roles: their rendering differs
    sentences = re.split(r"(?<=[.:;!?])\s+", re.sub(r"\s+", " ", text))
    return [s for s in sentences if len(s) >= 40 and "$" not in s and "`" not in s]


# ----------------------------------------------------------------------------- predict answers


def _chapter_namespace(path: Path) -> dict:
    """The chapter's imports and top-level function definitions, without running its cells."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    ns: dict = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code" or notebook_edition.SOLUTION_TAG in _tags(cell):
            continue
        code = "\n".join(
            ln for ln in _src(cell).splitlines() if not ln.lstrip().startswith(("%", "!"))
        )
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef)):
                with contextlib.suppress(Exception):
                    exec(ast.unparse(node), ns)
    return ns


def _checkers(module, label: str) -> list:
    return [
        f
        for name, f in vars(module).items()
        if callable(f) and getattr(f, "exercise", None) == label and name.startswith("check_")
    ]


def predict_answer(ex: Exercise, module):
    """What the exercise's solution cell hands its checker, or None when the cell cannot run
    outside the chapter (it then uses a value the chapter computed)."""
    recorded: dict = {}
    ns = _chapter_namespace(ROOT / "chapters" / _chapter_file(ex.chapter))
    fakes = {
        name: (lambda answer, *a, _label=f.exercise, **k: recorded.setdefault(_label, answer))
        for name, f in vars(module).items()
        if getattr(f, "exercise", None) is not None
    }
    ns.update(fakes)
    # the chapter imports its module as one name (``from selfattn.exercises import ch03 as ex``)
    proxy = types.SimpleNamespace(**{**vars(module), **fakes})
    for name, value in list(ns.items()):
        if value is module:
            ns[name] = proxy
    for src in ex.solution_code:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(Exception):
            exec(src, ns)
    value = recorded.get(ex.label)
    return value() if callable(value) else value


def _captured_expected(checker, module):
    """The right value a predict checker compares with, read by wrapping the module's
    comparison helpers while it judges a wrong answer (for a solution cell that needs the
    chapter's own values to run)."""
    seen: list = []
    wrap = {
        "expect_close": lambda got, expected, **k: seen.append(float(expected)),
        "expect_predicted": lambda p, variants, **k: seen.append(variants["right"]),
        "expect_predicted_close": lambda p, right, mistakes, **k: seen.append(float(right)),
    }
    saved = {name: vars(module).get(name) for name in wrap}
    try:
        for name, fake in wrap.items():
            if saved[name] is not None:
                setattr(module, name, fake)
        with contextlib.redirect_stdout(io.StringIO()):
            checker(-12345.678)
    finally:
        for name, original in saved.items():
            if original is not None:
                setattr(module, name, original)
    return seen[0] if seen else None


def number_forms(value) -> list[str]:
    """The ways a number is written in prose or a message."""
    v = float(value)
    if v.is_integer():
        n = int(v)
        forms = {str(n), f"{n:,}", f"{n:.1f}"}
    else:
        forms = {f"{v:.2f}", f"{v:.3f}", f"{v:.4f}", f"{v:.3g}", f"{v:.4g}", f"{v:.5g}"}
        forms = {f for f in forms if len(f.replace("-", "").replace(".", "")) >= 3}
    return sorted(forms)


def number_pattern(forms: list[str]) -> re.Pattern:
    alternatives = "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
    return re.compile(rf"(?<![\w.,])(?:{alternatives})(?![\w]|[.,]\d)")


def solution_expressions(ex: Exercise) -> list[str]:
    """The right-hand sides of the solution's ``..._solution = <expression>`` assignments."""
    out = []
    for src in ex.solution_code:
        with contextlib.suppress(SyntaxError):
            for node in ast.walk(ast.parse(src)):
                if (
                    isinstance(node, ast.Assign)
                    and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id.endswith("_solution")
                ):
                    expression = ast.get_source_segment(src, node.value) or ""
                    # as prose writes it: PREDICTION_SIGMA**4 is sigma**4
                    loose = re.sub(r"\b[A-Za-z_]\w*\.(?=[A-Za-z_])", "", expression)  # ex.X: X
                    loose = re.sub(
                        r"\b[A-Z][A-Z0-9]*_([A-Z0-9]+)\b", lambda m: m[1].lower(), loose
                    )
                    out += [e for e in {expression, loose} if len(_squash(e)) >= 5]
    return out


# ----------------------------------------------------------------------------- find-the-bug fix


def bug_fragments(ex: Exercise, module) -> list[str]:
    """For a find-the-bug exercise: the planted bug's code and its fix, as the fragments of the
    lines that differ between the module's buggy function (the one the exercise names,
    ``buggy_...`` in chapters 1-9, ``..._buggy`` in chapters 12-13) and the solution's code."""
    found = re.findall(r"\b(buggy_\w+|[A-Za-z]\w*_buggy)\b", ex.statement)
    names = [n for n in found if hasattr(module, n)]
    if not names:
        return []
    buggy = inspect.getsource(getattr(module, names[0]))
    buggy_body = buggy.split('"""')[-1] if buggy.count('"""') >= 2 else buggy
    old = [_code(ln) for ln in buggy_body.splitlines() if _code(ln)]
    new = [_code(ln) for src in ex.solution_code for ln in src.splitlines() if _code(ln)]
    old_text, new_text = _squash("".join(old)), _squash("".join(new))
    fragments = set()
    for a_line, b_line in _changed_pairs(old, new):
        tokens_a, tokens_b = _tokens(a_line), _tokens(b_line)
        sm = difflib.SequenceMatcher(a=tokens_a, b=tokens_b, autojunk=False)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                continue
            # the bug's code (not in the fix) and the fix's code (not in the bug)
            for tokens, lo, hi, other in (
                (tokens_a, i1, i2, new_text),
                (tokens_b, j1, j2, old_text),
            ):
                # widen the changed tokens, leftwards first, until the fragment is distinctive
                while len(_squash("".join(tokens[lo:hi]))) < 5 and (lo > 0 or hi < len(tokens)):
                    lo, hi = (lo - 1, hi) if lo > 0 else (lo, hi + 1)
                piece = "".join(tokens[lo:hi])
                core = piece.strip(",()[] =")
                if len(piece) >= 5 and not core.isidentifier() and piece not in other:
                    fragments.add(piece)
    return sorted(fragments)


def _code(line: str) -> str:
    """A line's code without its comment and surrounding spaces."""
    return line.split("#")[0].strip()


def _tokens(line: str) -> list[str]:
    return re.findall(r"\w+|[^\w\s]", line)


def _changed_pairs(old: list[str], new: list[str]):
    """(buggy line, fixed line) pairs of lines that the fix changed but kept similar."""
    for b_line in new:
        if b_line in old:
            continue
        close = difflib.get_close_matches(b_line, old, n=1, cutoff=0.6)
        if close:
            yield close[0], b_line


# ----------------------------------------------------------------------------- the chapters


def _chapter_file(nn: str) -> str:
    return next(p.name for p in CHAPTERS if p.name.startswith(nn))


CHAPTERS = toc_chapters()


def _modules():
    out = {}
    for path in CHAPTERS:
        with contextlib.suppress(ImportError):
            out[path.name[:2]] = importlib.import_module(f"selfattn.exercises.ch{path.name[:2]}")
    return out


MODULES = _modules()


@dataclass
class Answer:
    """What would give an exercise away: patterns searched for in text a student sees."""

    exercise: Exercise
    lines: list[str]  # solution code lines (stripped)
    prose: list[str]  # solution prose sentences
    numbers: re.Pattern | None  # a predict answer's value
    expressions: list[str]  # a predict solution's expression, squashed
    fragments: list[str]  # a find-the-bug exercise's bug and fix, squashed

    def in_text(self, text: str, *, numbers: bool = True, code: bool = True) -> list[str]:
        found = []
        squashed = _squash(text)
        if code:
            found += [f"solution line {ln!r}" for ln in self.lines if _squash(ln) in squashed]
            found += [f"solution {e!r}" for e in self.expressions if _squash(e) in squashed]
        if numbers and self.numbers is not None:
            found += [f"the answer {m.group(0)!r}" for m in self.numbers.finditer(text)]
        return found


def _answers() -> list[Answer]:
    out = []
    for path in CHAPTERS:
        nn = path.name[:2]
        module = MODULES.get(nn)
        elsewhere = _other_lines(path)
        for ex in _exercises(path):
            numbers, expressions, fragments = None, [], []
            if ex.kind.startswith("predict") and module is not None:
                checkers = _checkers(module, ex.label)
                value = predict_answer(ex, module)
                if value is None and checkers:
                    value = _captured_expected(checkers[0], module)
                assert value is not None, f"{ex.name}: no answer found for the predict exercise"
                with contextlib.redirect_stdout(io.StringIO()):
                    assert all(c(value).passed for c in checkers), (
                        f"{ex.name}: the collected answer {value!r} does not pass its checker"
                    )
                forms = number_forms(value)
                # a number the statement gives as data cannot be told from the answer by value
                if not number_pattern(forms).search(ex.statement):
                    numbers = number_pattern(forms)
                expressions = solution_expressions(ex)
            if ex.kind.startswith("find the bug") and module is not None:
                fragments = bug_fragments(ex, module)
            out.append(
                Answer(
                    ex,
                    solution_lines(ex, elsewhere),
                    prose_sentences(ex),
                    numbers,
                    expressions,
                    fragments,
                )
            )
    return out


ANSWERS = _answers()
IDS = [a.exercise.name for a in ANSWERS]


def test_every_exercise_has_something_to_scan_for():
    """The collection works: each build / find-the-bug exercise has solution lines, each
    predict exercise an answer (so a test below that finds nothing proves something)."""
    assert ANSWERS, "no exercises found"
    empty = [a.exercise.name for a in ANSWERS if not (a.lines or a.numbers or a.expressions)]
    assert not empty, f"nothing identifies these exercises' solutions: {empty}"
    predict = [a for a in ANSWERS if a.exercise.kind.startswith("predict")]
    assert len(predict) >= 10 and all(a.numbers or a.expressions for a in predict)
    bugs = [a for a in ANSWERS if a.exercise.kind.startswith("find the bug")]
    assert sum(bool(a.fragments) for a in bugs) >= len(bugs) // 2, [
        a.exercise.name for a in bugs if not a.fragments
    ]


# ----------------------------------------------------------------------------- the notebooks


def _student_exercise_cells(answer: Answer, language: str = "en") -> list[dict]:
    """The cells of the exercise in the student notebook: from its heading to the next one
    (in Chinese, the heading of the same number: "### 练习 3.2：...")."""
    nb = json.loads((STUDENT / _chapter_file(answer.exercise.chapter)).read_text())
    cells, inside, number = [], False, None
    for cell in nb["cells"]:
        src = _src(cell)
        if cell["cell_type"] == "markdown" and re.match(r"\s*#{1,4} ", src):
            inside = answer.exercise.title.split(":")[-1].strip().lower() in src.lower()
            found = re.search(r"^#+ Exercise (\d+\.\d+)", src, re.M)
            if inside and found and number is None:
                number = found[1]
        if inside:
            cells.append(cell)
    if language == "en":
        return cells
    path = STUDENT_EDITIONS[language] / _chapter_file(answer.exercise.chapter)
    cells, inside = [], False
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        src = _src(cell)
        if cell["cell_type"] == "markdown" and re.match(r"\s*#{1,4} ", src):
            inside = number is not None and f"练习 {number}：" in src
        if inside:
            cells.append(cell)
    return cells


def _outputs_text(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if "text" in out:
            parts.append("".join(out["text"]) if isinstance(out["text"], list) else out["text"])
        for key in ("text/plain", "text/markdown"):
            v = out.get("data", {}).get(key)
            if v:
                parts.append("".join(v) if isinstance(v, list) else v)
    return "\n".join(parts)


@pytest.mark.parametrize("language", list(STUDENT_EDITIONS))
@pytest.mark.parametrize("answer", ANSWERS, ids=IDS)
def test_student_notebook_carries_no_solution(answer, language):
    path = STUDENT_EDITIONS[language] / _chapter_file(answer.exercise.chapter)
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert not [c for c in nb["cells"] if notebook_edition.SOLUTION_TAG in _tags(c)]
    text = "\n".join(_src(c) for c in nb["cells"])
    lines = {ln.strip() for ln in text.splitlines()}
    leaked = [ln for ln in answer.lines if ln in lines]
    leaked += [s for s in answer.prose if s in re.sub(r"\s+", " ", text)]
    assert not leaked, f"{path.name}: the solution of {answer.exercise.name}: {leaked[:3]}"
    cells = _student_exercise_cells(answer, language)
    assert cells, f"{answer.exercise.name}: its heading is missing from {path}"
    for cell in cells:
        if notebook_edition.PREDICT_TAG in _tags(cell):
            assert not cell.get("outputs"), f"{path.name}: a predict cell keeps its output"
            continue
        if PREDICT_DATA in _tags(cell):
            continue  # the data the reader predicts from (tests/test_predict.py)
        found = answer.in_text(_src(cell) + "\n" + _outputs_text(cell), code=False)
        assert not found, f"{path.name}, {answer.exercise.name}: {found}"


# ----------------------------------------------------------------------------- the checkers


def _docstrings(module) -> dict[str, str]:
    """The docstrings the API page renders: the module's and each public member's."""
    docs = {module.__name__: module.__doc__ or ""}
    for name in getattr(module, "__all__", ()):
        obj = getattr(module, name)
        if callable(obj):
            docs[f"{module.__name__}.{name}"] = inspect.getdoc(obj) or ""
    return docs


def _module_constant_comments(module) -> str:
    """The ``#:`` comments above the module's constants (autodoc renders them)."""
    return "\n".join(re.findall(r"^#: ?(.*)$", inspect.getsource(module), re.M))


@pytest.mark.parametrize("answer", ANSWERS, ids=IDS)
def test_checker_docstrings_state_no_answer(answer):
    module = MODULES.get(answer.exercise.chapter)
    if module is None:
        pytest.skip("no checkers for this chapter")
    docs = _docstrings(module)
    docs["#: comments"] = _module_constant_comments(module)
    leaks = []
    for where, doc in docs.items():
        found = answer.in_text(doc)
        found += [
            f"the bug or its fix {f!r}" for f in answer.fragments if _squash(f) in _squash(doc)
        ]
        leaks += [f"{where}: {f}" for f in found]
    assert not leaks, f"{answer.exercise.name}: " + "; ".join(leaks)


def _stub(*args, **kwargs):
    raise NotImplementedError


def _wrong_answers(answer: Answer, checker, module):
    """Answers that are not the solution: the stub, nothing, the planted bugs, and for a
    predict exercise the numbers around the answer and the likely mistakes."""
    yield None
    yield _stub
    yield lambda *a, **k: None
    yield lambda *a, **k: 0.0
    for name in dir(module):
        if name.startswith("buggy_"):
            yield getattr(module, name)
    if answer.exercise.kind.startswith("predict"):
        value = predict_answer(answer.exercise, module)
        if value is None:
            value = _captured_expected(checker, module)
        v = float(value)
        candidates = {0.0, 1.0, v + 1, v - 1, v + 2, v - 2, 2 * v, v / 2, 4 * v, 8 * v, v * v}
        candidates |= {v * math.sqrt(2), v / math.sqrt(2), round(v, 1) + 0.5}
        if v.is_integer() and 0 < v < 500:
            candidates |= set(range(0, 4 * int(v) + 10))
        candidates |= set(range(0, 30))
        for c in sorted(candidates):
            if not math.isclose(c, v, rel_tol=1e-9, abs_tol=1e-9):
                yield int(c) if float(c).is_integer() else c


@pytest.fixture(params=["en", "zh"])
def checker_language(request):
    """The checkers' messages in each language they speak (selfattn.set_language)."""
    import selfattn

    previous = selfattn.set_language(request.param)
    yield request.param
    selfattn.set_language(previous)


@pytest.mark.parametrize("answer", ANSWERS, ids=IDS)
def test_checker_messages_state_no_answer(answer, checker_language):
    module = MODULES.get(answer.exercise.chapter)
    if module is None:
        pytest.skip("no checkers for this chapter")
    checkers = _checkers(module, answer.exercise.label)
    if not checkers:
        pytest.skip("no checker by this label (tests/test_exercise_labels.py checks labels)")
    leaks = set()
    for checker in checkers:
        for wrong in _wrong_answers(answer, checker, module):
            with contextlib.redirect_stdout(io.StringIO()):
                result = checker(wrong)
            assert not result.passed, f"{answer.exercise.name}: {wrong!r} passed"
            for found in answer.in_text(result.message):
                leaks.add(f"after {getattr(wrong, '__name__', wrong)!r}: {found}")
    assert not leaks, f"{answer.exercise.name}: " + "; ".join(sorted(leaks)[:6])


# ----------------------------------------------------------------------------- the student site


def _page_text(path: Path, *, drop_predict: bool) -> str:
    """A built page's text: tags stripped, the collapsed predict cells' outputs left out (the
    reader opens them after predicting), and a cell that prints the exercise's data."""
    page = path.read_text(encoding="utf-8")
    if drop_predict:
        page = re.sub(
            r'<div class="cell (?:docutils container )?[^"]*tag_predict[^"]*".*?'
            r'(?=<div class="cell |<section|</section)',
            " ",
            page,
            flags=re.S,
        )
    page = re.sub(r"<script.*?</script>|<style.*?</style>", " ", page, flags=re.S)
    return html_lib.unescape(re.sub(r"<[^>]+>", "", page))


def _needs_site():
    if not (STUDENT_SITE / "index.html").is_file():
        pytest.skip("no student site: run `make book-student`")


@pytest.mark.parametrize("answer", ANSWERS, ids=IDS)
def test_student_site_page_carries_no_solution(answer):
    _needs_site()
    stem = _chapter_file(answer.exercise.chapter).removesuffix(".ipynb")
    page = STUDENT_SITE / "chapters" / f"{stem}.html"
    text = _page_text(page, drop_predict=True)
    squashed_lines = {_squash(ln) for ln in text.splitlines()}
    leaked = [ln for ln in answer.lines if _squash(ln) in squashed_lines]
    leaked += [s for s in answer.prose if s in re.sub(r"\s+", " ", text)]
    assert not leaked, f"{page.name}: the solution of {answer.exercise.name}: {leaked[:3]}"


def _module_chunks(page: str) -> dict[str, str]:
    """The API page's HTML cut at each exercise module's ``automodule`` target."""
    marks = [
        (m.start(), m.group(1))
        for m in re.finditer(r'id="module-(selfattn\.exercises\.ch\d\d)"', page)
    ]
    ends = [start for start, _ in marks[1:]] + [len(page)]
    return {name: page[start:end] for (start, name), end in zip(marks, ends)}


_QUOTES = str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"'})


def _html_text(html: str) -> str:
    """The text of HTML, Sphinx's smart quotes made straight again."""
    return html_lib.unescape(re.sub(r"<[^>]+>", "", html)).translate(_QUOTES)


def _letters(text: str) -> str:
    """Only the letters and digits: a docstring's reST and its HTML compare equal."""
    return re.sub(r"[^A-Za-z0-9]", "", re.sub(r":\w+:`~?", "", text))


def _answer_helpers(module) -> dict[str, str]:
    """The public functions of an exercise module that are neither checkers nor constants,
    with their docstrings' first sentence: the planted bugs and the reference helpers."""
    out = {}
    for name in getattr(module, "__all__", ()):
        obj = getattr(module, name)
        if callable(obj) and not name.startswith("check_") and not name.isupper():
            first = re.split(r"(?<=[.:])\s", " ".join((inspect.getdoc(obj) or "").split()))[0]
            if len(first) >= 20:
                out[name] = first
    return out


def test_student_site_api_page_carries_no_answer():
    """The student site's API page documents the checkers, but not the planted-bug functions
    (whose docstrings describe the bug) nor the helpers that compute an answer (their
    signatures stay, for cross-references), and no exercise module's section has an answer.
    The full site documents them (else this test would prove nothing)."""
    _needs_site()
    chunks = _module_chunks((STUDENT_SITE / "api.html").read_text(encoding="utf-8"))
    full_page = ROOT / "_build" / "html" / "api.html"
    full = _html_text(full_page.read_text(encoding="utf-8")) if full_page.is_file() else None
    leaks = []
    for nn, module in MODULES.items():
        text = " ".join(_html_text(chunks.get(module.__name__, "")).split())
        assert text, f"{module.__name__} is not on the student API page"
        for name, first in _answer_helpers(module).items():
            if _letters(first) in _letters(text):
                leaks.append(f"ch{nn}: {name}'s docstring ({first[:50]!r})")
            if full is not None:
                assert _letters(first) in _letters(full), f"{name}: not on the full API page"
        for answer in ANSWERS:
            if answer.exercise.chapter != nn:
                continue
            found = answer.in_text(text, numbers=False)
            found += [repr(f) for f in answer.fragments if _squash(f) in _squash(text)]
            leaks += [f"{answer.exercise.name}: {f}" for f in found]
    assert not leaks, "; ".join(leaks[:10])
