"""Every figure on the built pages offers itself as SVG, for lecture slides (issue 34).

The recorded notebooks hold each figure as PNG and SVG (tests/test_figure_svg.py); the pages
show the PNG and, right under it, link the SVG (_ext/book_figures.py). Checked on the built
HTML of the English, Chinese and student sites: each figure of a chapter's outputs has its
link, each link has its figure right above it, the file is there and is an SVG drawing of the
same shape as the PNG (so the link is that figure's, not a neighbour's), named after its
chapter, and the link is not printed.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from urllib.parse import unquote

import pytest
from bs4 import BeautifulSoup
from conftest import CHAPTERS, ROOT, SITE_HTML, STUDENT_HTML, page_id

SITES = {"en": SITE_HTML, "zh": SITE_HTML / "zh", "student": STUDENT_HTML}
LINK_WORDS = {"en": "as SVG", "zh": "SVG 矢量图", "student": "as SVG"}


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", header[16:24])


def _svg_size(text: str) -> tuple[float, float]:
    match = re.search(r'<svg[^>]*\swidth="([\d.]+)pt"[^>]*\sheight="([\d.]+)pt"', text)
    assert match, "an SVG without its size in points"
    return float(match[1]), float(match[2])


def _figures(soup) -> list:
    """The static figures of the chapter's outputs (explorers' views are widgets, not figures)."""
    return [
        img
        for img in soup.select("div.cell_output img")
        if not img.find_parent(class_=re.compile("widget")) and img.get("src", "").endswith(".png")
    ]


@pytest.mark.parametrize("site", list(SITES))
@pytest.mark.parametrize("entry", CHAPTERS, ids=page_id)
def test_every_figure_offers_its_svg(site, entry):
    root = SITES[site]
    page = root / entry[1]
    if not page.exists():
        pytest.skip(f"no {site} site built at {root}")
    soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    figures = _figures(soup)
    links = soup.select("p.figure-svg a.download")
    if entry[0].startswith("chapters/0"):  # chapters 1-9 all draw figures
        assert figures, f"{site} {entry[0]}: no figure found"
    assert len(links) == len(figures), (
        f"{site} {entry[0]}: {len(figures)} figures, {len(links)} SVG links"
    )
    stem = Path(entry[0]).name
    for number, (img, link) in enumerate(zip(figures, links), start=1):
        # the link sits right under its figure, in the same output
        offer = img.find_next("p", class_="figure-svg")
        assert offer is link.find_parent("p"), f"{site} {entry[0]}: figure {number}'s link"
        assert LINK_WORDS[site] in link.get_text(), link.get_text()
        href = unquote(link["href"])
        assert href.endswith(f"{stem}-figure-{number}.svg"), href
        svg_file = (page.parent / href).resolve()
        text = svg_file.read_text(encoding="utf-8")
        assert text.lstrip().startswith("<?xml") and "</svg>" in text, svg_file
        # The same figure as the PNG above it: the same aspect ratio (both are the figure's
        # tight bounding box, the PNG in pixels, the SVG in points).
        width, height = _png_size((page.parent / unquote(img["src"])).resolve())
        svg_w, svg_h = _svg_size(text)
        assert abs(width / height - svg_w / svg_h) < 0.03 * width / height, (
            f"{site} {entry[0]} figure {number}: PNG {width}x{height}, SVG {svg_w}x{svg_h}"
        )


def test_the_svg_links_are_not_printed():
    """The PDF (tools/pdf.py prints the pages) has no use for a download link."""
    css = (ROOT / "_assets" / "book.css").read_text(encoding="utf-8")
    assert re.search(r"@media print\s*\{\s*p\.figure-svg\s*\{\s*display:\s*none", css)
