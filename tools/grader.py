"""Otter-grader assignments from the book's exercises: one per chapter that has exercises.

    python tools/grader.py                   # make grader: every chapter, then verify them
    python tools/grader.py --chapters 3 5    # some chapters
    python tools/grader.py --no-verify       # write the assignments only

For each chapter this writes an otter "master notebook", ``_build/grader/chNN/chNN.ipynb``
(otter assign's format: an assignment config, then one question per exercise), and runs
``otter assign`` on it into ``_build/grader/chNN/dist/``: ``autograder/`` holds the notebook
with the reference solutions and the autograder zip (``chNN-autograder_*.zip``, for Gradescope
or ``otter grade``), ``student/`` the notebook a course hands out.

A question is the exercise as the chapter has it, taken from the chapter by the same code that
the book's tests and notebook editions use (``tests/test_exercise_labels.py`` finds each
exercise's cells by its label, ``tools/notebook_edition.py`` turns its MyST statement into
plain Jupyter markdown): the statement, the cells the exercise shows (a buggy function to
fix, the data a prediction is about), the reader's stub as the prompt, the book's reference
solution (the ``{solution-start}`` cell, its answer bound to the stub's name) as the solution,
and one test per checker call of the exercise. The test imports the checker from
``selfattn.exercises.chNN`` (a submission cannot replace it) and fails exactly when the
checker does not say "passed": a wrong answer, a crash, or an answer not attempted yet.
A "predict, then run" measurement comes along when it needs nothing of the chapter but
imports; otherwise the question says that it is in the chapter.

Of the rest of the chapter, the assignment takes the setup cell and only the statements that
its cells use (found by name, transitively: mostly imports), and everything the chapter
imports from its exercise module (the buggy functions the exercises name, the checkers).

Verifying (the default, and ``make grader``) grades, with otter's own runner and no
container, the reference notebook (every question must pass) and the student notebook
(every question must fail); tests/test_grader.py does the same for some chapters.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import copy
import importlib
import json
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from tests.test_exercise_labels import chapters_with_exercises, exercise_blocks  # noqa: E402
from tests.test_solutions import bound_names  # noqa: E402
from tools.book import registry_text, setup_cell_source  # noqa: E402
from tools.notebook_edition import PREDICT_TAG, SOLUTION_TAG, convert  # noqa: E402

OUT = ROOT / "_build" / "grader"
# Names a cell may use without defining them: Python's and IPython's.
GIVEN = set(dir(builtins)) | {"display", "get_ipython", "__name__"}
SOLUTION_TITLE = "# @title Solution"


# ----------------------------------------------------------------------------- code analysis


def _parse(source: str) -> ast.Module:
    """The cell's AST, IPython magics (``%pip``, ``!ls``) blanked, as bound_names does."""
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n")]
    return ast.parse("\n".join(lines))


def free_names(source: str) -> set[str]:
    """Names the code reads and does not define itself (nor Python): what it needs from outside.

    A name the code both reads and binds counts as its own (a loop variable, a local), which is
    right for every cell the exercises use; the generated assignments are executed by
    ``verify`` and by tests/test_grader.py, so a statement missed here shows as a failure.
    """
    loaded, bound = set(), set()
    for node in ast.walk(_parse(source)):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound - GIVEN


def statements(source: str) -> list[tuple[ast.stmt, str]]:
    """Each top-level statement of a cell with its source: its decorators, and the comment
    lines right above it."""
    lines = source.split("\n")
    out = []
    for node in _parse(source).body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        while first > 1 and lines[first - 2].lstrip().startswith("#"):
            first -= 1
        out.append((node, "\n".join(lines[first - 1 : node.end_lineno])))
    return out


def without(source: str, drop) -> str:
    """The cell without the top-level statements for which ``drop(node, text)`` holds (their
    lines, and the comment lines right above them), at most two blank lines in a row."""
    lines = source.split("\n")
    gone = set()
    for node, text in statements(source):
        if drop(node, text):
            last = node.end_lineno
            gone.update(range(last - text.count("\n"), last + 1))
    kept = "\n".join(line for n, line in enumerate(lines, 1) if n not in gone)
    return re.sub(r"\n{4,}", "\n\n\n", kept).strip("\n")


def check_call(node: ast.stmt, module) -> tuple[str, list[str]] | None:
    """``(checker, [argument names])`` if the statement is a bare call of one of the chapter's
    checkers (``check_five_steps(my_attention)``), else None."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return None
    func = node.value.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        name = func.attr  # exercises.check_five_steps(...), the module imported as one name
    elif isinstance(func, ast.Name):
        name = func.id
    else:
        return None
    if not hasattr(getattr(module, name, None), "number"):
        return None
    args = node.value.args
    if node.value.keywords or not all(isinstance(a, ast.Name) for a in args):
        raise ValueError(f"{name}: a checker call takes names only, got {ast.unparse(node)}")
    return name, [a.id for a in args]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _tags(cell: dict) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


# ----------------------------------------------------------------------------- the chapter


class Chapter:
    """What the assignment may take from a chapter outside its exercises: its statements."""

    def __init__(self, number: int, path: Path):
        self.number, self.path = number, path
        self.module_name = f"selfattn.exercises.ch{number:02d}"
        self.nb = json.loads(path.read_text(encoding="utf-8"))
        self.labels, self.blocks = exercise_blocks(path)
        in_exercises = {c["id"] for cells in self.blocks.values() for c in cells}
        codes = [c for c in self.nb["cells"] if c["cell_type"] == "code"]
        # (position, source, binds, needs, import module) for every statement of the chapter
        # outside its exercises and solutions, the setup cell (taken whole) left out.
        self.items: list[tuple[int, str, set[str], set[str], str | None]] = []
        self.position = {}  # cell id -> position of its first statement
        for cell in codes[1:]:
            self.position[cell["id"]] = len(self.items)
            if cell["id"] in in_exercises or SOLUTION_TAG in _tags(cell):
                continue
            for node, text in statements(_source(cell)):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    for alias in node.names:  # one item per imported name
                        single = copy.copy(node)
                        single.names = [alias]
                        binds = {(alias.asname or alias.name).split(".")[0]}
                        module = getattr(node, "module", None) or alias.name
                        if f"{module}.{alias.name}" == self.module_name:
                            module = self.module_name  # the exercise module as one name
                        self.items.append(
                            (len(self.items), ast.unparse(single), binds, set(), module)
                        )
                else:
                    self.items.append(
                        (len(self.items), text, bound_names(text), free_names(text), None)
                    )

    def exercise_imports(self) -> list[int]:
        """The chapter's import of its exercise module, or of every name it imports from it
        (buggy functions to fix, the data of a prediction, the checkers)."""
        return [i for i, _, _, _, module in self.items if module == self.module_name]

    def resolve(self, names: set[str], before: int) -> tuple[set[int], set[str]]:
        """The statements that define ``names`` for a cell at position ``before``, and those
        they need in turn: (their positions, the names nothing before defines)."""
        chosen, missing, todo = set(), set(), [(n, before) for n in names]
        while todo:
            name, at = todo.pop()
            found = [i for i, _, binds, _, _ in self.items[:at] if name in binds]
            if not found:
                missing.add(name)
                continue
            i = found[-1]
            if i not in chosen:
                chosen.add(i)
                todo += [(n, i) for n in self.items[i][3]]
        return chosen, missing

    def statement_cells(self, label: str) -> list[dict]:
        """The markdown cells of an exercise: from its ``{exercise-start}`` to its
        ``{exercise-end}``, solutions excluded."""
        cells, inside = [], False
        for cell in self.nb["cells"]:
            text = _source(cell)
            if cell["cell_type"] == "markdown" and re.search(
                rf":label:\s*{re.escape(label)}\s", text
            ):
                inside = True
            if inside and cell["cell_type"] == "markdown" and SOLUTION_TAG not in _tags(cell):
                cells.append(cell)
            if inside and "{exercise-end}" in text:
                break
        return cells

    def imports_only(self, positions: set[int]) -> bool:
        return all(self.items[i][4] is not None for i in positions)

    def code(self, positions: set[int]) -> str:
        """The chosen statements as one cell: imports first (grouped by module), then the rest
        in the chapter's order."""
        plain, froms, rest = [], {}, []
        for i in sorted(positions):
            _, text, binds, _, module = self.items[i]
            node = ast.parse(text).body[0]
            if isinstance(node, ast.ImportFrom):
                froms.setdefault(node.module, []).append(
                    ast.unparse(node.names[0]) if node.names[0].asname else node.names[0].name
                )
            elif module is not None:
                plain.append(text)
            else:
                rest.append(text)
        lines = sorted(set(plain))
        for module, names in froms.items():
            one = f"from {module} import {', '.join(names)}"
            if len(one) <= 79:
                lines.append(one)
            else:
                lines.append(
                    f"from {module} import (\n" + "".join(f"    {n},\n" for n in names) + ")"
                )
        return "\n".join(lines) + ("\n\n\n" + "\n\n\n".join(rest) if rest else "")


# ----------------------------------------------------------------------------- the master notebook


def _raw(text: str) -> dict:
    return nbformat.v4.new_raw_cell(text)


def _code(text: str) -> dict:
    return nbformat.v4.new_code_cell(text.strip("\n"))


def _md(text: str) -> dict:
    return nbformat.v4.new_markdown_cell(text)


def _prompt_block(solution: str, prompt: str) -> str:
    """One code cell in otter's syntax: the solution, and the prompt that replaces it in the
    student's notebook (a string in the master, kept apart from the prompt's own quotes)."""
    quote = "'''" if '"""' in prompt else '"""'
    if quote in prompt:
        raise ValueError(f"a prompt holds both kinds of triple quotes: {prompt!r:.80}")
    return (
        f"# BEGIN SOLUTION NO PROMPT\n{solution.strip()}\n# END SOLUTION\n"
        f"r{quote} # BEGIN PROMPT\n{prompt.strip()}\n{quote}  # END PROMPT"
    )


def _test(name: str, module: str, checker: str, args: list[str]) -> str:
    """An exception-based otter test: it passes exactly when the book's checker says passed."""
    params = ", ".join(args)
    return (
        '""" # BEGIN TEST CONFIG\npoints: 1\n""" # END TEST CONFIG\n'
        f"def test_{name}({params}):\n"
        f"    from {module} import {checker}\n\n"
        f"    result = {checker}({params})\n"
        "    assert result.passed, result.message\n\n\n"
        f"test_{name}({params})"
    )


def question_cells(chapter: Chapter, position: int, label: str, markdown: dict, module):
    """The master notebook's cells of one exercise, and the names its cells need from the
    chapter (with the position of the exercise's first cell)."""
    number = f"{chapter.number}.{position}"
    name = f"ex{chapter.number}_{position}"
    cells = chapter.blocks.get(label, [])
    exercise = [c for c in cells if SOLUTION_TAG not in _tags(c)]
    solution = [c for c in cells if SOLUTION_TAG in _tags(c)]
    # The checker calls: in the exercise's cells (the reader's) and in its solution.
    calls, solved = [], {}
    for cell in exercise:
        calls += [c for node, _ in statements(_source(cell)) if (c := check_call(node, module))]
    for cell in solution:
        for node, _ in statements(_source(cell)):
            if found := check_call(node, module):
                solved[found[0]] = found[1]
    if not calls:
        raise ValueError(f"{label}: no cell of the exercise calls a checker of {module.__name__}")
    answers = {arg for _, args in calls for arg in args}

    def is_check(node, _text):
        return check_call(node, module) is not None

    context, prompt, measurements, left_out = [], [], [], False
    for cell in exercise:
        source = _source(cell)
        if PREDICT_TAG in _tags(cell):
            measurements.append(without(source, is_check))
            continue
        mine = without(source, lambda n, t: is_check(n, t) or not bound_names(t) & answers)
        rest = without(source, lambda n, t: is_check(n, t) or bool(bound_names(t) & answers))
        prompt += [mine] if mine else []
        context += [rest] if rest else []
    # The reference solution, its answer bound to the reader's name for the checker.
    body = [without(_source(c).removeprefix(SOLUTION_TITLE), is_check) for c in solution]
    for checker_name, args in calls:
        for mine, theirs in zip(args, solved.get(checker_name, args)):
            if mine != theirs:
                body.append(f"{mine} = {theirs}")
    shown = "\n\n".join(context + prompt)  # what the student's notebook holds
    own = bound_names(shown)
    needs = free_names(shown) | (free_names("\n\n".join(body)) - own)
    first = chapter.position[cells[0]["id"]]
    # A measurement comes along only when it needs nothing of the chapter but imports.
    kept_measurements = []
    for text in measurements:
        extra = free_names(text) - own
        positions, missing = chapter.resolve(extra, first)
        if text.strip() and not missing and chapter.imports_only(positions):
            kept_measurements.append(text)
            needs |= extra
        elif text.strip():
            left_out = True

    statement = [markdown[c["id"]] for c in chapter.statement_cells(label) if c["id"] in markdown]
    if left_out:
        statement.append(
            "*The measurement that follows this exercise is in the chapter itself: run it "
            "there once you have answered.*"
        )
    out = [
        _raw(f"# BEGIN QUESTION\nname: {name}\npoints: {len(calls)}"),
        _md("\n\n".join(statement)),
    ]
    if context:
        out.append(_code("\n\n\n".join(context)))
    out += [
        _raw("# BEGIN SOLUTION"),
        _code(_prompt_block("\n\n\n".join(body), "\n\n\n".join(prompt))),
        _raw("# END SOLUTION"),
    ]
    out += [_code(text) for text in kept_measurements]
    out.append(_raw("# BEGIN TESTS"))
    out += [
        _code(_test(f"{name}_{k}" if len(calls) > 1 else name, module.__name__, checker, args))
        for k, (checker, args) in enumerate(calls, start=1)
    ]
    out += [_raw("# END TESTS"), _raw("# END QUESTION")]
    return out, needs, first, number


def otter_version() -> str:
    from importlib.metadata import version

    return version("otter-grader")


def pip_target() -> str:
    """What the setup cell installs on Colab: the autograder's requirement too."""
    found = re.search(r"%pip install -q (\S+)", setup_cell_source())
    if not found:
        raise ValueError(
            "the setup cell installs nothing: cannot name the autograder's requirement"
        )
    return found.group(1)


def master_notebook(number: int, path: Path) -> dict:
    """The otter master notebook of one chapter's exercises."""
    chapter = Chapter(number, path)
    module = importlib.import_module(chapter.module_name)
    markdown = {
        c["id"]: _source(c)
        for c in convert(chapter.nb, solutions=False, chapter=number)["cells"]
        if c["cell_type"] == "markdown"
    }
    title = json.loads(registry_text())[f"ch{number:02d}"]
    config = {
        "name": f"ch{number:02d}",
        "requirements": [pip_target()],
        "init_cell": True,
        "check_all_cell": True,
        "export_cell": False,
        "run_tests": False,  # tools/grader.py verifies the reference and the stubs itself
        "solutions_pdf": False,
        "template_pdf": False,
        "tests": {"files": False, "ok_format": False},
        "generate": {"pdf": False, "show_stdout": True},
    }
    questions, positions = [], set(chapter.exercise_imports())
    for position, label in enumerate(chapter.labels, start=1):
        cells, needs, first, _ = question_cells(chapter, position, label, markdown, module)
        chosen, missing = chapter.resolve(needs, first)
        if missing:
            raise ValueError(f"{label}: nothing in the chapter defines {sorted(missing)}")
        positions |= chosen
        questions += cells
    intro = (
        f"# Chapter {title}: exercises\n\n"
        f"The exercises of chapter {number} of *Self-Attention, Executed*, for grading. Run "
        "the first cells, then answer each question in its cell; the cell after it runs the "
        "book's checker on your answer (`grader.check`). Every exercise is worth one point per "
        "check, and passes exactly when the checker says *passed*. The first cell needs "
        f"otter-grader (on Colab: `%pip install otter-grader=={otter_version()}` first)."
    )
    setup_and_uses = [_code(setup_cell_source())]
    if positions:
        setup_and_uses.append(_code(chapter.code(positions)))
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _raw("# ASSIGNMENT CONFIG\n" + yaml.safe_dump(config, sort_keys=False)),
        _md(intro),
        *setup_and_uses,
        *questions,
    ]
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    return nb


# ----------------------------------------------------------------------------- assign, verify


def assign(number: int, path: Path, out: Path = OUT) -> Path:
    """Write the master notebook of chapter ``number`` and run otter assign on it; returns
    the assignment's folder (``master.ipynb``, ``dist/autograder``, ``dist/student``)."""
    from otter.assign import main as otter_assign

    folder = out / f"ch{number:02d}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    master = folder / f"ch{number:02d}.ipynb"
    nbformat.write(master_notebook(number, path), master)
    otter_assign(str(master), str(folder / "dist"), no_pdfs=True, no_run_tests=True)
    return folder


def outputs(folder: Path) -> tuple[Path, Path, Path]:
    """(the autograder zip, the reference notebook, the student notebook) of an assignment."""
    name = folder.name
    zips = sorted((folder / "dist" / "autograder").glob(f"{name}-autograder_*.zip"))
    if len(zips) != 1:
        raise FileNotFoundError(f"expected one autograder zip in {folder}, found {zips}")
    return (
        zips[0],
        folder / "dist" / "autograder" / f"{name}.ipynb",
        folder / "dist" / "student" / f"{name}.ipynb",
    )


def grade(notebook: Path, autograder: Path) -> dict[str, float]:
    """Each question's score when otter grades ``notebook`` (no container)."""
    from otter.api import grade_submission

    results = grade_submission(str(notebook), str(autograder), quiet=True)
    return {q: results.get_score(q) for q in results.results}


def verify(folder: Path) -> list[str]:
    """Problems: a reference question that does not pass, a student one that does not fail."""
    autograder, reference, student = outputs(folder)
    master = json.loads((folder / f"{folder.name}.ipynb").read_text(encoding="utf-8"))
    questions = set(re.findall(r"^# BEGIN QUESTION\nname: (\S+)", "\n\n".join(
        "".join(c["source"]) for c in master["cells"] if c["cell_type"] == "raw"
    ), flags=re.M))  # fmt: skip
    problems = []
    for notebook, want in ((reference, "pass"), (student, "fail")):
        scores = grade(notebook, autograder)
        if set(scores) != questions:
            problems.append(f"{notebook}: graded {sorted(scores)}, expected {sorted(questions)}")
        for question, score in sorted(scores.items()):
            if (score > 0) != (want == "pass"):
                problems.append(f"{notebook.name} ({notebook.parent.name}): {question} "
                                f"scored {score}, expected to {want}")  # fmt: skip
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chapters", type=int, nargs="*", help="chapter numbers (default all)")
    parser.add_argument("--no-verify", action="store_true", help="write the assignments only")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    chapters = [
        (n, p) for n, p in chapters_with_exercises() if not args.chapters or n in args.chapters
    ]
    failed = []
    for number, path in chapters:
        start = time.perf_counter()
        try:
            folder = assign(number, path, args.out)
        except ValueError as err:  # the chapter and its exercise module disagree
            failed.append(f"ch{number:02d}: {err}")
            print(f"ch{number:02d}: FAILED: {err}", flush=True)
            continue
        autograder, _, student = outputs(folder)
        shown = [
            p.relative_to(ROOT) if p.is_relative_to(ROOT) else p for p in (autograder, student)
        ]
        line = f"ch{number:02d}: {shown[0]}, {shown[1]}"
        if not args.no_verify:
            problems = verify(folder)
            failed += problems
            line += "; verified" if not problems else "; FAILED: " + "; ".join(problems)
        print(f"{line} ({time.perf_counter() - start:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
