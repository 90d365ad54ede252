"""Notebook hygiene: what every chapter in the table of contents must satisfy.

Strict nbval (``make test-notebooks``) then checks that the outputs reproduce.
"""

import ast
import json
import re

import pytest

from tools.book import ROOT, setup_cell_source, toc_chapters, toc_files

CHAPTERS = toc_chapters()
IDS = [p.stem for p in CHAPTERS]


def load(path):
    return json.loads(path.read_text())


def code_cells(nb):
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def markdown(nb):
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


def test_every_toc_entry_exists():
    for f in toc_files():
        candidates = [ROOT / f"{f}{ext}" for ext in (".md", ".ipynb", ".rst")] + [ROOT / f]
        assert any(c.exists() for c in candidates), (
            f"_toc.yml lists {f!r}, but no such file exists"
        )


def test_chapter_names_follow_the_book_numbering():
    """_toc.yml is the chapter registry: every notebook under chapters/ is in it, and the
    chapters are numbered NN_name in book order (a chapter's recorder and glue keys, chNN,
    come from that number)."""
    listed = {p.name for p in CHAPTERS}
    for path in (ROOT / "chapters").glob("*.ipynb"):
        assert path.name in listed, f"{path.name} is not listed in _toc.yml"
    numbers = [int(re.match(r"(\d\d)_[a-z0-9_]+$", p.stem).group(1)) for p in CHAPTERS]
    assert numbers == list(range(1, len(CHAPTERS) + 1)), f"chapters out of order: {numbers}"


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_records_use_the_chapters_own_recorder(path):
    """One chapter identity: ``rec = recorder("chNN")`` with NN from the file name, and no
    ``record("chNN", ...)`` or ``glue("chNN_...")`` call repeating it."""
    cells = code_cells(load(path))
    source = "\n".join("".join(c["source"]) for c in cells)
    if "record(" not in source and "recorder(" not in source:
        pytest.skip("this chapter records nothing")
    chapter = f"ch{path.stem[:2]}"
    assert not re.search(r"\brecord\(", source), f"{path.name}: use rec = recorder(...)"
    # live figures too are glued through the recorder (rec.glue), never by a bare glue()
    assert not re.search(r"(?<!\.)\bglue\(", source), f"{path.name}: use rec.glue(...)"
    found = set(re.findall(r"\brecorder\(\s*[\"'](\w+)[\"']", source))
    assert found == {chapter}, f"{path.name}: recorder{tuple(found)}, expected {chapter!r}"


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_no_cell_ends_by_echoing_a_recorded_value(path):
    """``rec(...)`` and ``rec.glue(...)`` return their value, so a cell whose last line is one
    shows the bare number under the cell on the website: such a line is ``_ = rec(...)``."""
    for cell in code_cells(load(path)):
        # IPython magics (the setup cell's %pip) become pass: Python can parse the rest
        lines = [
            line[: len(line) - len(line.lstrip())] + "pass"
            if line.lstrip().startswith(("%", "!"))
            else line
            for line in "".join(cell["source"]).splitlines()
        ]
        body = ast.parse("\n".join(lines))
        last = body.body[-1] if body.body else None
        if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
            called = ast.unparse(last.value.func)
            assert called not in ("rec", "rec.glue"), (
                f"{path.name}: a cell ends with {called}(...), whose value is shown: "
                f"write _ = {called}(...)"
            )


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_setup_cell_is_canonical(path):
    first = code_cells(load(path))[0]
    assert "".join(first["source"]) == setup_cell_source(), (
        f"{path.name}: the first code cell must be the canonical setup cell "
        "(python tools/book.py setup-cell)"
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_executed_in_order_in_one_run(path):
    counts = [c.get("execution_count") for c in code_cells(load(path))]
    assert counts == list(range(1, len(counts) + 1)), (
        f"{path.name}: run `make execute` (counts {counts})"
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_no_error_outputs_and_no_stderr(path):
    for i, cell in enumerate(code_cells(load(path)), 1):
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error", f"{path.name}: code cell {i} holds an error"
            assert not (out["output_type"] == "stream" and out["name"] == "stderr"), (
                f"{path.name}: code cell {i} wrote to stderr: {''.join(out['text'])[:200]!r}"
            )


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_anatomy(path):
    nb = load(path)
    text = markdown(nb)
    assert nb["cells"][0]["cell_type"] == "markdown" and "".join(
        nb["cells"][0]["source"]
    ).startswith("# "), f"{path.name}: must open with a markdown title"
    if path.stem != "10_summary":
        exercises = re.findall(r"```\{exercise-start\}", text)
        solutions = re.findall(r"```\{solution-start\}", text)
        assert len(exercises) >= 4, (
            f"{path.name}: needs at least 4 exercises, has {len(exercises)}"
        )
        assert len(solutions) == len(exercises), (
            f"{path.name}: {len(exercises)} exercises but {len(solutions)} solutions"
        )
        assert text.count("```{exercise-end}") == len(exercises)
        assert text.count("```{solution-end}") == len(solutions)
        assert ":class: dropdown" in text, f"{path.name}: solutions should be dropdowns"
    assert "{cite" in text, f"{path.name}: cites nothing"


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_widgets_have_saved_state(path):
    nb = load(path)
    # the setup cell (first) names ipywidgets for Colab's widget manager: not an explorer
    sources = "\n".join("".join(c["source"]) for c in code_cells(nb)[1:])
    if "widgets" in sources or "explorer" in sources:
        state = (
            nb.get("metadata", {})
            .get("widgets", {})
            .get("application/vnd.jupyter.widget-state+json", {})
        )
        assert state.get("state"), (
            f"{path.name}: uses widgets but saved no widget state (run `make execute`)"
        )
