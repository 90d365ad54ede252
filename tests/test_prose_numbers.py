"""Numbers in the prose come from cells: a measured figure is glued, never typed.

The test scans every chapter's markdown for decimal numbers, percentages and ratios
("0.54", "12.5%", "72x", "3.5 x") outside math, code, glue roles, citations, headings
and section references. Each one it finds must be a definition rather than a measurement
("temperature 0.8", "15% of the words"), listed in the notebook's metadata under
``selfattn.prose_numbers_allowed`` as the exact phrase that contains it; anything else is
a figure typed into the prose, which drifts the day the cell that computed it changes.
Quote it with ``{glue:text}`key:fmt``` instead (``selfattn.record`` glues it).
"""

import json
import re

import pytest

from tools.book import toc_chapters

CHAPTERS = toc_chapters()

FENCE = re.compile(r"^(`{3,}|:{3,})(.*)$")
NUMBER = re.compile(
    r"(?<![\w.\-])\d+\.\d+(?!\w|\.\d)%?"  # 0.54, 12.5%
    r"|(?<![\w.\-])\d+%"  # 15%
    r"|(?<![\w.\-])(?<![×x]\s)\d+(?:\.\d+)?\s?[×x](?!\w|\s*\d)"  # 72x, 3.5 × (not 10 x 10)
)
STRIP = [
    re.compile(r"<!--.*?-->", re.S),  # comments
    re.compile(r"\$\$.*?\$\$", re.S),  # display math
    re.compile(r"(?<!\\)\$[^$\n]+?(?<!\\)\$"),  # inline math
    re.compile(r"\{[\w:\-]+\}`[^`]*`"),  # roles: {glue:text}`...`, {cite:p}`...`, {ref}`...`
    re.compile(r"`[^`\n]*`"),  # inline code
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(
        r"(?i)(?:§\s?|sections?\s|chapters?\s|exercises?\s|figures?\s|cells?\s|steps?\s)"
        r"\d+(?:\.\d+)*(?:\s*(?:to|and|-|–)\s*\d+(?:\.\d+)*)?"
    ),
]


def prose(source: str) -> str:
    """The reader-facing prose of one markdown cell: no headings, code, math or options."""
    kept, fence = [], []  # fence: stack of (marker, is_code)
    for line in source.splitlines():
        match = FENCE.match(line.strip())
        if match:
            marker, info = match.groups()
            if fence and marker == fence[-1][0] and not info.strip():
                fence.pop()
                continue
            directive = info.strip().startswith("{")
            is_code = not directive or info.strip().startswith(("{math}", "{code", "{eval-rst}"))
            fence.append((marker, is_code))
            continue
        if any(is_code for _, is_code in fence):
            continue
        if line.lstrip().startswith("#") or re.match(r"^\s*:[\w-]+:", line):
            continue  # headings, directive options
        kept.append(line)
    text = "\n".join(kept)
    for pattern in STRIP:
        text = pattern.sub(" ", text)
    return text


def unglued_numbers(nb: dict) -> list[tuple[int, str]]:
    allowed = nb.get("metadata", {}).get("selfattn", {}).get("prose_numbers_allowed", [])
    found = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        text = prose("".join(cell["source"]))
        for phrase in allowed:
            text = text.replace(phrase, " ")
        for m in NUMBER.finditer(text):
            context = text[max(0, m.start() - 50) : m.end() + 30].replace("\n", " ")
            found.append((i, f"{m.group(0)!r} in ...{context}..."))
    return found


def test_the_scanner_finds_typed_figures_and_skips_the_rest():
    nb = {
        "metadata": {"selfattn": {"prose_numbers_allowed": ["temperature 0.8"]}},
        "cells": [
            {
                "cell_type": "markdown",
                "source": "## 3.2 Heading 1.5\nSampling at temperature 0.8 is 3.5x faster, "
                "a 10 x 10 patch, within 2.5% of $x = 0.7$ and `1.25` and {glue:text}`k:.2f`; "
                "see section 3.4 "
                "and §6.6.\n```python\nx = 0.9\n```\n```{prf:theorem} T\n:label: 1.0\n"
                "It is 0.68.\n```\n",
            }
        ],
    }
    hits = [h for _, h in unglued_numbers(nb)]
    assert [h.split(" in ")[0] for h in hits] == ["'3.5x'", "'2.5%'", "'0.68'"]


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_no_typed_figures_in_prose(path):
    hits = unglued_numbers(json.loads(path.read_text()))
    assert not hits, (
        f"{path.name}: figures typed into the prose (glue them with selfattn.record and "
        "{glue:text}, or list a definition under metadata.selfattn.prose_numbers_allowed):\n"
        + "\n".join(f"  markdown cell {i}: {h}" for i, h in hits)
    )
