"""Every figure of the recorded book also as SVG, for lecture slides (issue 34).

Where the book is recorded, ``selfattn.setup`` makes IPython's inline backend save each figure
as PNG and SVG; the website shows the PNG and links the SVG under it (_ext/book_figures.py,
checked on the built pages by tests_site/test_pages.py); the notebook editions keep the PNG
alone; strict nbval skips the SVG as it skips the PNG (tests/nbval_figures.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools import notebook_edition as edition  # noqa: E402
from tools.book import ROOT, toc_chapters

SVG, PNG = "image/svg+xml", "image/png"
CHAPTERS = toc_chapters()

SHELL_SCRIPT = """
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
import matplotlib.pyplot as plt
import selfattn
from selfattn import diagrams
selfattn.setup()
fig, ax = plt.subplots()
ax.plot([0, 1], [1, 0])
for figure in (diagrams.information_paths(), fig):
    data, _ = shell.display_formatter.format(figure)
    print(",".join(sorted(k for k in data if k.startswith("image/"))))
"""


def _formats(recording: bool) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SELFATTN_RECORD")}
    if recording:
        env["SELFATTN_RECORD"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", SHELL_SCRIPT], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def test_recording_saves_every_figure_as_png_and_svg():
    """Diagrams (shown before or without pyplot) and pyplot figures alike carry both."""
    assert _formats(recording=True) == [f"{PNG},{SVG}", f"{PNG},{SVG}"]


def test_a_readers_run_draws_no_svg():
    formats = _formats(recording=False)
    assert len(formats) <= 2 and all(SVG not in f for f in formats)


def _figures(nb: dict) -> list[dict]:
    return [
        out["data"]
        for cell in nb["cells"]
        for out in cell.get("outputs", [])
        if PNG in out.get("data", {})
    ]


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_recorded_figure_has_its_svg(path: Path):
    figures = _figures(json.loads(path.read_text(encoding="utf-8")))
    missing = [i for i, data in enumerate(figures) if SVG not in data]
    assert not missing, f"{path.name}: figures {missing} were recorded without their SVG"
    for data in figures:
        svg = "".join(data[SVG]) if isinstance(data[SVG], list) else data[SVG]
        assert "<svg" in svg and "</svg>" in svg
        # a fixed date and ids, so that a figure re-recorded unchanged stays unchanged
        assert "<dc:date>1970-01-01" in svg or "<dc:date>" not in svg


@pytest.mark.parametrize("folder", list(edition.EDITIONS))
def test_the_notebook_editions_keep_the_png_alone(folder: str):
    for path in CHAPTERS:
        nb = json.loads((ROOT / folder / "chapters" / path.name).read_text(encoding="utf-8"))
        assert all(SVG not in data for data in _figures(nb)), f"{folder}/{path.name}"


def test_nbval_skips_the_svg_copy_as_it_skips_the_png():
    """The conftest that tools/reader_run.py gives each run adds the SVG to nbval's skips."""
    import nbval_figures

    class Notebook:
        skip_compare = ("metadata", PNG)

    class Cell:
        parent = Notebook()

    cells = [Cell(), Cell()]
    nbval_figures.pytest_collection_modifyitems(None, None, cells)
    assert Notebook.skip_compare == ("metadata", PNG) and cells[0].parent.skip_compare == (
        "metadata",
        PNG,
        SVG,
    )
