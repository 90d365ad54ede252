"""The main-path run (tools/main_path_run.py, ``make test-main-path``) catches what it must.

It runs each chapter with its Deeper cells removed; these tests give it small notebooks with
a known fault: a main-path cell that needs a Deeper cell's name, a claim that the main path
alone no longer supports, a cell that raises on purpose (tagged ``raises-exception``), and a
notebook whose exercise stub "Run all" leaves untouched.
"""

from __future__ import annotations

import ast
import builtins
import json

import nbformat
import pytest

from tools import main_path_run  # noqa: E402
from tools.book import toc_chapters


def _code(source: str, *tags: str) -> dict:
    cell = nbformat.v4.new_code_cell(source)
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def _markdown(source: str) -> dict:
    return nbformat.v4.new_markdown_cell(source)


def _notebook(tmp_path, name: str, cells: list[dict]):
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = tmp_path / "chapters" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def _run(tmp_path, path):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return main_path_run.run_chapter(str(path), str(work))


def test_the_deeper_cells_go_and_the_checks_come():
    nb = {
        "cells": [
            _code("x = 1"),
            _code("y = 2", "deeper", "hide-cell"),
            _markdown("```{exercise-start} E\n```"),
            _code("def f(a):\n    raise NotImplementedError"),
            _markdown("```{exercise-end}\n```"),
        ]
    }
    out = main_path_run.main_path(nb)
    sources = ["".join(c["source"]) for c in out["cells"]]
    assert "y = 2" not in sources and "x = 1" in sources
    assert len(nb["cells"]) == 5  # the chapter itself is unchanged
    assert "reader_run" in sources[-2]  # reader_run's stub guard
    assert sources[-1] == main_path_run.CLAIMS_CELL


def test_a_main_path_cell_that_needs_a_deeper_name_fails(tmp_path):
    path = _notebook(
        tmp_path,
        "99_deeper_name.ipynb",
        [_code("import math"), _code("def helper():\n    return 1", "deeper"), _code("helper()")],
    )
    result = _run(tmp_path, path)
    assert result["removed"] == 1
    assert result["error"] and "NameError" in result["error"] and "cell 2" in result["error"]


def test_a_main_path_that_runs_alone_passes_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SELFATTN_RECORD", "1")  # the run drops it: the reader's mode
    path = _notebook(
        tmp_path,
        "99_fine.ipynb",
        [
            _code("import os\nimport selfattn\nassert not selfattn.recording()"),
            _code("z = 3", "deeper"),
            _code("rec = selfattn.recorder('ch99')\nrec('answer', 42)"),
            _code("raise ValueError('on purpose')", "raises-exception"),
            _code("print(os.getcwd())"),
        ],
    )
    result = _run(tmp_path, path)
    assert result["error"] is None, result["error"]
    assert result["claims"] == []
    assert not (path.parent / "results").exists()  # nothing next to the chapter
    assert not list((tmp_path / "work").rglob("*.json"))  # nor next to the copy


def test_a_claim_the_main_path_no_longer_supports_fails(tmp_path):
    path = _notebook(
        tmp_path,
        "99_claim.ipynb",
        [
            _code("import selfattn\nvalue = 1"),
            _code("value = 2", "deeper"),
            _code("selfattn.claim(value == 2, 'the value is two')"),
        ],
    )
    result = _run(tmp_path, path)
    assert result["error"] is None
    assert result["claims"] == ["the value is two"]


def test_an_exercise_stub_overwritten_by_run_all_fails(tmp_path):
    path = _notebook(
        tmp_path,
        "99_stub.ipynb",
        [
            _markdown("```{exercise-start} E\n```"),
            _code("def answer():\n    raise NotImplementedError"),
            _markdown("```{exercise-end}\n```"),
            _code("def answer():\n    return 42"),  # a solution that reuses the reader's name
        ],
    )
    result = _run(tmp_path, path)
    assert result["error"] and "AssertionError" in result["error"]


def test_every_chapter_has_code_on_its_main_path():
    """The run is not vacuous: no chapter is all Deeper."""
    for path in toc_chapters():
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        kept = [c for c in cells if c["cell_type"] == "code" and not main_path_run.is_deeper(c)]
        assert kept, path.name


def _bound(tree) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def _cell_tree(cell: dict):
    lines = "".join(cell["source"]).splitlines()
    return ast.parse("\n".join(x for x in lines if not x.lstrip().startswith(("%", "!"))))


@pytest.mark.parametrize("path", toc_chapters(), ids=[p.stem for p in toc_chapters()])
def test_no_main_path_cell_reads_a_name_only_a_deeper_cell_defines(path):
    """The static half of the main-path run, in seconds: a name a main-path cell reads is bound
    by an earlier main-path cell (or the cell itself, or is a builtin), never only by a Deeper
    cell. (The run itself, `make test-main-path`, also catches what this cannot see.)"""
    main = set(dir(builtins)) | {"display", "get_ipython"}
    deeper: dict[str, int] = {}
    for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        if cell["cell_type"] != "code":
            continue
        tree = _cell_tree(cell)
        if main_path_run.is_deeper(cell):
            for name in _bound(tree):
                deeper.setdefault(name, i)
            continue
        read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        missing = sorted(n for n in read - main - _bound(tree) if n in deeper)
        assert not missing, (
            f"{path.name} cell {i} reads {missing}, defined only in the Deeper cell(s) "
            f"{sorted({deeper[n] for n in missing})}"
        )
        main |= _bound(tree)
