"""Code that fits the page: the website's code column shows about 79 characters whole.

Every code line of every chapter, and every line of text a reader sees in its outputs
(printed text, and the plain-text result of a cell when nothing richer is shown), is at most
79 characters wide; longer lines hide behind a horizontal scrollbar. ``make lint`` runs this
with ruff (which formats the code cells to the same width, see chapters/ruff.toml).
"""

from __future__ import annotations

import json

import pytest

from tools.book import toc_chapters

WIDTH = 79
CHAPTERS = toc_chapters()
# Output kinds a page shows instead of the plain-text fallback.
RICHER = ("image/", "text/html", "application/vnd.jupyter.widget-view+json", "text/latex")


def visible_text(output: dict) -> str:
    if output["output_type"] == "stream":
        return "".join(output["text"])
    data = output.get("data", {})
    if any(key.startswith(RICHER) for key in data):
        return ""
    return "".join(data.get("text/plain", ""))


def too_wide(nb: dict) -> list[str]:
    found = []
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    for i, cell in enumerate(code, 1):
        for line in "".join(cell["source"]).splitlines():
            if len(line) > WIDTH:
                found.append(f"code cell {i}, code ({len(line)}): {line[:60]}...")
        for output in cell.get("outputs", []):
            for line in visible_text(output).splitlines():
                if len(line) > WIDTH:
                    found.append(f"code cell {i}, output ({len(line)}): {line[:60]}...")
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_code_and_outputs_fit_the_page(path):
    lines = too_wide(json.loads(path.read_text()))
    assert not lines, f"{path.name}: {len(lines)} lines over {WIDTH} characters:\n" + "\n".join(
        lines[:40]
    )
