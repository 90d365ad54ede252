"""The book as a PDF (tools/pdf.py, ``make pdf``): printed from the built site, both languages.

Prints the site under test once per language (about a minute each) and checks what a reader
of the PDF relies on: A4 pages, as many as the content needs rather than one long page; a
bookmark for every page of the table of contents; every figure of the site embedded as an
image; MathJax typeset (no TeX source such as ``\\frac`` or ``$$`` in the text); and, in the
Chinese PDF, Chinese text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from conftest import CHROMIUM, PAGES, SITE_HTML

pypdf = pytest.importorskip("pypdf")
from tools import pdf as book_pdf  # noqa: E402

A4_POINTS = (595.0, 842.0)
#: TeX source in the text. A code cell's string writes the backslash twice ("$\\sqrt{d}$" in a
#: matplotlib label): that is code, shown as written, and is not matched.
RAW_TEX = re.compile(r"(?<!\\)\\(frac|sqrt|mathrm|mathbf|text|begin|left|right)\b|\$\$")


@dataclass
class Printed:
    """A printed PDF, read once: each page's text and the lines that start left of the margin
    (one text extraction per page serves every test; pypdf's is the slow part)."""

    language: str
    reader: object
    texts: list[str]
    cut: list[str]


@pytest.fixture(scope="module", params=["en", "zh"])
def printed(request, tmp_path_factory):
    # A process of its own: Playwright's sync API cannot start inside this session's loop.
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("pdf")
    subprocess.run(
        [sys.executable, str(book_pdf.__file__), "--site", str(SITE_HTML), "--out", str(out)]
        + ["--languages", request.param],
        check=True,
        env={**__import__("os").environ, "CHROMIUM": str(CHROMIUM)},
    )
    reader = pypdf.PdfReader(out / f"self-attention-executed-{request.param}.pdf")
    texts, cut = [], []
    for number, page in enumerate(reader.pages, 1):
        texts.append(page.extract_text(visitor_text=_margin_visitor(number, cut)) or "")
    return Printed(request.param, reader, texts, cut)


def test_pages_are_a4_and_many(printed):
    language, reader = printed.language, printed.reader
    sizes = {(float(p.mediabox.width), float(p.mediabox.height)) for p in reader.pages}
    off = [s for s in sizes if max(abs(a - b) for a, b in zip(s, A4_POINTS)) > 2]
    assert not off, f"{language}: pages not A4: {off}"
    # Each chapter is many printed pages, not one tall page.
    assert len(reader.pages) >= 5 * len(PAGES), f"{language}: {len(reader.pages)} pages"


def test_a_bookmark_per_page_of_the_book(printed):
    language, reader = printed.language, printed.reader
    assert len(reader.outline) == len(PAGES), f"{language}: {len(reader.outline)} bookmarks"


def _figures(html: str) -> int:
    """PNG figures of a page that print: not in a folded dropdown (a solution), not a button's
    icon (the launch menu, hidden in print)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    return sum(
        1
        for img in soup.select("main img")
        if img.get("src", "").endswith(".png")
        and not img.find_parent("details")
        and not img.find_parent(class_="btn")
    )


def _images(resources) -> int:
    """The image XObjects a page's resources name, forms followed (what ``page.images`` lists,
    counted without decoding a pixel)."""
    count = 0
    xobjects = resources.get("/XObject") if resources else None
    for ref in (xobjects.get_object() if xobjects else {}).values():
        obj = ref.get_object()
        if obj.get("/Subtype") == "/Image":
            count += 1
        elif obj.get("/Subtype") == "/Form":
            count += _images(obj.get("/Resources"))
    return count


def test_every_figure_is_embedded(printed):
    language, reader = printed.language, printed.reader
    figures = sum(_figures((SITE_HTML / html).read_text()) for _, html in PAGES)
    images = sum(_images(page.get("/Resources")) for page in reader.pages)
    assert figures > 20, f"the English site shows only {figures} PNG figures"
    assert images >= figures, f"{language}: {images} images in the PDF, {figures} on the site"


def test_math_is_typeset_not_tex(printed):
    language = printed.language
    leaks = []
    for number, text in enumerate(printed.texts, 1):
        for m in RAW_TEX.finditer(text):
            leaks.append(f"page {number}: ...{text[max(0, m.start() - 40) : m.end() + 20]}...")
    assert not leaks, f"{language}: untypeset TeX on {len(leaks)} places: {leaks[:5]}"


def test_the_chinese_pdf_is_chinese(printed):
    language = printed.language
    text = "".join(printed.texts[:20])
    han = len(re.findall(r"[\u4e00-\u9fff]", text))
    if language != "zh":
        pytest.skip("the English PDF quotes Chinese titles; nothing to count")
    assert han > 2000, f"only {han} Chinese characters in the first 20 pages"


#: The printed pages' left margin (tools/pdf.py prints with 14 mm), in points.
LEFT_MARGIN_PT = 14 / 25.4 * 72
#: Text placed further left than this is hidden off the page, not a line that was cut.
OFF_PAGE_PT = A4_POINTS[0] / 2
#: MathJax's stretchy delimiters are drawn in pieces (⎛ ⎜ ⎝, U+2300-U+23FF) with transforms
#: of their own, which put their text origin anywhere; they are not a line of the page.
_DELIMITER_PIECE = re.compile(r"^[\u2300-\u23ff\s]+$")


def _margin_visitor(number: int, cut: list[str]):
    """A pypdf text visitor for page ``number`` that adds to ``cut`` each line whose origin
    lies left of the left margin."""

    def visit(text, cm, tm, font, size):
        if text.strip() and not _DELIMITER_PIECE.match(text):
            x = tm[4] * cm[0] + tm[5] * cm[2] + cm[4]  # the text's origin on the page
            # Far off the page (x of -7000 pt) is text hidden on purpose, such as the
            # theme's off-screen accessibility labels at left: -9999px; a cut line
            # starts in the margin or just before the page's edge.
            if -OFF_PAGE_PT < x < LEFT_MARGIN_PT - 2:
                cut.append(f"page {number}: {text[:30]!r} at x = {x:.1f} pt")

    return visit


def test_no_line_starts_left_of_the_margin(printed):
    """Every line starts inside the page's left margin. A too-wide element once made the
    theme's centring boxes push every line of a chapter a few millimetres past the margin,
    and the printout cut the first letters off (tools/pdf.py, FIT_WIDE_MATH_JS)."""
    cut = printed.cut
    assert not cut, f"{printed.language}: {len(cut)} lines start left of the margin: {cut[:5]}"
