"""The otter-grader assignments (tools/grader.py, ``make grader``) grade as the book's checkers do.

Every chapter's master notebook holds one question per exercise, whose test imports the
chapter's own checker. Its tests fail exactly when the checker does not say "passed", and for
two chapters (``GRADED``) otter itself grades, with no container, the reference notebook
(every question passes) and the student notebook (every question fails); ``make grader``
grades every chapter that way.
"""

from __future__ import annotations

import ast
import functools
import importlib
import json

import pytest

from tools.grader import assign, chapters_with_exercises, master_notebook, outputs, verify

# Grading one chapter starts two kernels (about 15 s on two cores): two chapters that cover
# the kinds of exercise (build, find the bug with code shown, predict with its measurement,
# one with its measurement left in the chapter, answers whose solution has another name).
GRADED = (3, 5)
CHAPTERS = chapters_with_exercises()


def _cells(nb: dict, kind: str) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


@functools.cache
def master(number: int) -> dict:
    return master_notebook(number, dict(CHAPTERS)[number])


def test_every_chapter_with_exercises_gets_an_assignment():
    numbers = [n for n, _ in CHAPTERS]  # chapter 10 (the summary) has no exercises
    assert numbers[:9] == list(range(1, 10)) and numbers == sorted(numbers)
    assert 10 not in numbers


@pytest.mark.parametrize("number", [n for n, _ in CHAPTERS])
def test_one_question_per_exercise_tested_by_its_checker(number):
    nb = master(number)
    module = importlib.import_module(f"selfattn.exercises.ch{number:02d}")
    raw = _cells(nb, "raw")
    questions = [c for c in raw if c.startswith("# BEGIN QUESTION")]
    names = [c.split("name: ")[1].split("\n")[0] for c in questions]
    assert names == [f"ex{number}_{i}" for i in range(1, len(module.EXERCISES) + 1)]
    tests = [c for c in _cells(nb, "code") if "# BEGIN TEST CONFIG" in c]
    assert len(tests) >= len(names)
    for test in tests:
        imported = [
            node
            for node in ast.walk(ast.parse(test))
            if isinstance(node, ast.ImportFrom) and node.module == module.__name__
        ]
        assert len(imported) == 1, test
        checker = getattr(module, imported[0].names[0].name)
        assert checker.number.startswith(f"{number}."), test
    # no solution cell of the book reaches the student's prompt unmarked
    for cell in _cells(nb, "code"):
        if "# BEGIN SOLUTION NO PROMPT" in cell:
            assert "# END SOLUTION" in cell and "# BEGIN PROMPT" in cell


def _test_function(nb: dict, name: str):
    """The test function of question ``name``, as otter runs it (its env passed by name)."""
    sources = ["".join(c["source"]) for c in nb["cells"]]
    start = next(
        i for i, s in enumerate(sources) if s.startswith(f"# BEGIN QUESTION\nname: {name}\n")
    )
    test = next(s for s in sources[start:] if "# BEGIN TEST CONFIG" in s)
    tree = ast.parse(test)
    namespace: dict = {}
    exec(compile(ast.Module(body=tree.body[1:2], type_ignores=[]), name, "exec"), namespace)
    return namespace[f"test_{name}"]


def test_a_test_fails_exactly_when_the_checker_does_not_pass(capsys):
    """Exercise 3.2 (a stable softmax): right, wrong (overflows), crashing, not attempted."""
    import torch

    test = _test_function(master(3), "ex3_2")

    def right(x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)

    def overflows(x):
        return torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)

    def crashes(x):
        raise NotImplementedError

    test(right)
    for wrong in (overflows, crashes, None):
        with pytest.raises(AssertionError, match="Exercise 3.2"):
            test(wrong)
    capsys.readouterr()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    out = tmp_path_factory.mktemp("grader")
    paths = dict(CHAPTERS)
    return {number: assign(number, paths[number], out) for number in GRADED}


@pytest.mark.parametrize("number", GRADED)
def test_otter_passes_the_reference_and_fails_the_stubs(graded, number):
    folder = graded[number]
    autograder, reference, student = outputs(folder)
    assert autograder.stat().st_size > 0
    student_nb = json.loads(student.read_text())
    text = "\n".join(_cells(student_nb, "code"))
    assert "_solution" not in text, "a reference solution reached the student notebook"
    assert verify(folder) == []
