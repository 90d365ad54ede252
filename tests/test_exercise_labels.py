"""A checker prints the number the book gives its exercise, derived from the chapter's labels.

Sphinx numbers a chapter's exercises ``<chapter>.<position>`` in the order of their
``{exercise-start}`` directives. Each ``selfattn.exercises.chNN`` lists the directives' labels
(``ex-chNN-<label>``) once, in that order, as ``EXERCISES``, and declares each checker by
label; these tests hold that list to the notebook and each checker's printed number to the
exercise whose cells call it.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import types
from pathlib import Path

import pytest
from selfattn.exercises import checker
from selfattn.exercises._core import exercise_number

from tools.book import toc_chapters

# One directive and its option lines (":label: ex-ch03-softmax") or argument (the solution's).
DIRECTIVE = re.compile(
    r"\{(exercise-start|exercise-end|solution-start|solution-end)\}([^\n]*)((?:\n:[^\n]*)*)"
)
LABEL = re.compile(r"^:label:\s*(\S+)", re.M)
CALL = re.compile(r"\b(check_\w+)\(")
PRINTED = re.compile(r"Exercise (\d+\.\d+) \(")


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def exercise_blocks(path: Path) -> tuple[list[str], dict[str, list[dict]]]:
    """(the labels of the exercise directives in order, each label's code cells).

    A label's code cells are those between its ``{exercise-start}`` and ``{exercise-end}``
    (the reader's stub) and between its ``{solution-start}`` and ``{solution-end}``.
    """
    nb = json.loads(path.read_text(encoding="utf-8"))
    labels: list[str] = []
    cells: dict[str, list[dict]] = {}
    current = None
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for kind, argument, options in DIRECTIVE.findall(_source(cell)):
                if kind == "exercise-start":
                    found = LABEL.search(options)
                    assert found, f"{path.name}: an exercise without a :label:"
                    current = found.group(1)
                    labels.append(current)
                elif kind == "solution-start":
                    current = argument.strip()
                else:
                    current = None
        elif cell["cell_type"] == "code" and current is not None:
            cells.setdefault(current, []).append(cell)
    return labels, cells


def chapters_with_exercises() -> list[tuple[int, Path]]:
    """(the chapter's number in the book, its notebook) for each toc chapter with exercises."""
    found = []
    for number, path in enumerate(toc_chapters(), start=1):
        if exercise_blocks(path)[0]:
            found.append((number, path))
    return found


CHAPTERS = chapters_with_exercises()


def test_some_chapters_have_exercises():
    assert len(CHAPTERS) >= 9


@pytest.mark.parametrize("number, path", CHAPTERS, ids=[p.stem for _, p in CHAPTERS])
def test_exercises_list_the_notebook_labels_in_order(number, path):
    assert path.name.startswith(f"{number:02d}_"), "the file's number is not its place in _toc"
    module = importlib.import_module(f"selfattn.exercises.ch{number:02d}")
    labels, _ = exercise_blocks(path)
    prefix = f"ex-ch{number:02d}-"
    assert all(label.startswith(prefix) for label in labels), labels
    assert module.EXERCISES == tuple(label[len(prefix) :] for label in labels)
    assert "EXERCISES" in module.__all__
    extra = getattr(module, "EXTRA_EXERCISES", ())
    assert not set(extra) & set(module.EXERCISES)


@pytest.mark.parametrize("number, path", CHAPTERS, ids=[p.stem for _, p in CHAPTERS])
def test_each_exercise_prints_the_number_sphinx_gives_it(number, path, capsys):
    module = importlib.import_module(f"selfattn.exercises.ch{number:02d}")
    labels, cells = exercise_blocks(path)
    for position, label in enumerate(labels, start=1):
        expected = f"{number}.{position}"
        sources = [_source(cell) for cell in cells.get(label, [])]
        called = {name for source in sources for name in CALL.findall(source)}
        ours = [name for name in sorted(called) if hasattr(getattr(module, name, None), "number")]
        assert ours, f"{label}: no cell of the exercise calls a checker of {module.__name__}"
        for name in ours:
            check = getattr(module, name)
            assert check.number == expected, f"{label}: {name} prints {check.number}"
            assert check.exercise == label.split("-", 2)[2]
            assert check(None).exercise.startswith(f"Exercise {expected} (")
        # the outputs saved in the notebook (nbval compares them) say the same number
        for cell in cells.get(label, []):
            for output in cell.get("outputs", []):
                text = "".join(output.get("text", ""))
                assert set(PRINTED.findall(text)) <= {expected}, (label, text)
    capsys.readouterr()


@pytest.mark.parametrize("number, path", CHAPTERS, ids=[p.stem for _, p in CHAPTERS])
def test_every_checker_is_numbered_from_the_labels(number, path):
    module = importlib.import_module(f"selfattn.exercises.ch{number:02d}")
    order = (*module.EXERCISES, *getattr(module, "EXTRA_EXERCISES", ()))
    checkers = [
        obj for name in module.__all__ if hasattr(obj := getattr(module, name), "exercise")
    ]
    assert checkers
    for check in checkers:
        assert check.exercise in order, check.__name__
        assert check.number == f"{number}.{order.index(check.exercise) + 1}"


@pytest.fixture
def chapter_module(monkeypatch):
    """A stand-in chapter module, ``selfattn.exercises.ch42``, with two exercises."""
    module = types.ModuleType("selfattn.exercises.ch42")
    module.EXERCISES = ("first", "second")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def _declared_in(module_name: str):
    def check(answer):
        pass

    check.__module__ = module_name
    return check


def test_a_label_becomes_chapter_dot_position(chapter_module, capsys):
    check = checker("second", "the second one")(_declared_in(chapter_module.__name__))
    assert check.number == "42.2" and check.exercise == "second"
    assert check(None).message == "⏳ Exercise 42.2 (the second one): not attempted yet"
    chapter_module.EXTRA_EXERCISES = ("bonus",)
    assert exercise_number(chapter_module.__name__, "bonus") == "42.3"
    capsys.readouterr()


def test_an_unknown_label_fails_at_import(chapter_module):
    with pytest.raises(ValueError, match="unknown exercise label 'thrid'"):
        checker("thrid", "a typo")(_declared_in(chapter_module.__name__))
    with pytest.raises(ValueError, match="unknown exercise label '42.1'"):
        checker("42.1", "a typed number")(_declared_in(chapter_module.__name__))


def test_a_chapter_module_without_exercises_fails(monkeypatch):
    monkeypatch.setitem(sys.modules, "selfattn.exercises.ch43", types.ModuleType("ch43"))
    with pytest.raises(ValueError, match="declares no EXERCISES"):
        checker("first", "too early")(_declared_in("selfattn.exercises.ch43"))


def test_outside_a_chapter_a_checker_takes_its_number():
    assert checker("0.1", "a test's")(_declared_in(__name__)).number == "0.1"
    with pytest.raises(ValueError, match="declared by its number"):
        checker("softmax", "a label outside a chapter")(_declared_in(__name__))
