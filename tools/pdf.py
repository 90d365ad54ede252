"""The whole book as one PDF per language, printed from the built website by Chromium.

    python tools/pdf.py [--site _build/html] [--out _build/pdf]      # make pdf

No TeX is needed: the pages a reader sees are what is printed. For each language (English
at the site's root, Chinese under ``zh/``), every page of the table of contents, in book
order, is opened in headless Chromium (the browser the site tests use, ``CHROMIUM``), served
from a local thread with every other host blocked; the script waits until MathJax has
typeset and the explorers have drawn their first view (as the site tests do), prints the
page to A4 with the print stylesheet below (no navigation bars, code wrapped at the page
instead of cut), and the pages are joined into one PDF with a bookmark per chapter:
``_build/pdf/self-attention-executed-en.pdf`` and ``...-zh.pdf``.

Solutions stay folded, as on the page (the full edition; print the student site with
``--site _build/student/html`` for a course). ``tests_site/test_pdf.py`` prints both languages
and checks the result: A4 pages, every figure embedded, no untypeset TeX.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from tools.book import ROOT, toc_files  # noqa: E402

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
LANGUAGES = {"en": "", "zh": "zh/"}
#: The print stylesheet: the page's content only, code wrapped at the page's width.
PRINT_CSS = """
.bd-header, .bd-sidebar-primary, .bd-sidebar-secondary, .bd-footer, .bd-footer-article,
.header-article, .prev-next-area, .bd-header-announcement, .skip-link, .search-button,
.headerlink, #pst-back-to-top, .admonition.seealso .launch { display: none !important; }
.bd-main, .bd-content, .bd-article-container, .bd-container, .bd-page-width {
  max-width: none !important; width: auto !important; margin: 0 !important; }
/* Blocks, not the theme's centring flex boxes: content that is still too wide then runs off
   the right margin instead of pushing every line of the chapter off the left one. */
.bd-container, .bd-container__inner, .bd-page-width, .bd-main, .bd-content,
.bd-article-container { display: block !important; }
pre, .highlight pre, .output pre { white-space: pre-wrap !important;
  word-break: break-word !important; overflow: visible !important; }
img { max-width: 100% !important; page-break-inside: avoid; }
figure, .cell_output img, table { page-break-inside: avoid; }
/* A code cell's box moves to the next page with its code: the theme keeps the code block
   (div.highlight) whole, and its box would otherwise stay behind, empty, at a page's foot. */
div.cell_input { break-inside: avoid; }
h1, h2, h3 { page-break-after: avoid; }
"""
#: Display equations wider than their column (MathJax does not break lines) are scaled to fit
#: it: one wide equation would otherwise widen the whole column, and the printout would cut
#: every line of the chapter at both margins. Measured against the equation's own box (an
#: equation in an admonition or a list has less room than the page) and the viewport, which
#: pdf() sets to the printed width, less a little: the printed column came out a few pixels
#: narrower than the one measured, and an equation that just fitted pushed the page over.
FIT_WIDE_MATH_JS = """() => {
  const page = document.documentElement.clientWidth - 48;
  for (const eq of document.querySelectorAll('mjx-container[display="true"]')) {
    const math = eq.querySelector('mjx-math') || eq;
    const box = eq.parentElement, style = getComputedStyle(box);
    const inner = box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const room = Math.min(page, inner) - 24;
    const wide = math.getBoundingClientRect().width;
    if (wide > room) { eq.style.zoom = String(room / wide); }
  }
}"""
SETTLE_MS = 60_000
WIDGETS_RENDERED_JS = """() => [...document.querySelectorAll(
  'script[type="application/vnd.jupyter.widget-view+json"]')].every(v => {
    const prev = v.previousElementSibling;
    return prev && prev.classList.contains('widget-subarea')
      && prev.querySelector('.jupyter-widgets, .widget-inline-hbox, .lm-Widget'); })"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def settle(page) -> None:
    """Wait for MathJax's typesetting and the saved widgets' first view."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.wait_for_load_state("load")
    try:
        if page.evaluate("() => !!(window.MathJax && window.MathJax.startup)"):
            page.wait_for_function("() => window.MathJax.startup.promise !== undefined")
            page.evaluate("() => window.MathJax.startup.promise")
        views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
        if views and page.evaluate("() => typeof window.require === 'function'"):
            page.wait_for_function(WIDGETS_RENDERED_JS, timeout=SETTLE_MS)
    except PlaywrightTimeout:
        pass


def print_book(site: Path, language: str, out: Path, browser) -> Path:
    """Print every page of ``language`` to one PDF at ``out``; returns its path."""
    from pypdf import PdfReader, PdfWriter

    folder = site / LANGUAGES[language].rstrip("/") if LANGUAGES[language] else site
    if not (folder / "index.html").exists():
        raise SystemExit(f"pdf: no built site at {folder} (make book first)")
    server, base = serve(folder)
    blocked: list[str] = []
    writer = PdfWriter()
    parts = out.parent / f".{out.stem}-pages"
    parts.mkdir(parents=True, exist_ok=True)
    try:
        context = browser.new_context()

        def route(r):
            if urlsplit(r.request.url).hostname in {"127.0.0.1", "localhost"}:
                return r.continue_()
            blocked.append(r.request.url)
            return r.abort("blockedbyclient")

        context.route("**/*", route)
        page = context.new_page()
        for n, entry in enumerate(toc_files()):
            page.goto(base + f"{entry}.html", timeout=SETTLE_MS)
            settle(page)
            page.add_style_tag(content=PRINT_CSS)
            # Lay out at the printed width (A4 less 14 mm margins: 182 mm = 688 px) to measure
            # the equations as they will print.
            page.set_viewport_size({"width": 688, "height": 1000})
            page.emulate_media(media="print")
            page.evaluate(FIT_WIDE_MATH_JS)
            title = page.locator("main h1").first.inner_text().strip().rstrip("#").strip()
            part = parts / f"{n:02d}.pdf"
            page.pdf(
                path=str(part),
                format="A4",
                print_background=True,
                margin={"top": "16mm", "bottom": "16mm", "left": "14mm", "right": "14mm"},
            )
            first = len(writer.pages)
            writer.append(PdfReader(part))
            writer.add_outline_item(title=title, page_number=first)
        context.close()
    finally:
        server.shutdown()
    if blocked:
        raise SystemExit(f"pdf: the pages asked for other hosts: {sorted(set(blocked))[:5]}")
    writer.add_metadata({"/Title": "Self-Attention, Executed", "/Lang": language})
    with open(out, "wb") as f:
        writer.write(f)
    for part in parts.glob("*.pdf"):
        part.unlink()
    parts.rmdir()
    return out


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "pdf")
    parser.add_argument("--languages", default="en,zh")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        for language in args.languages.split(","):
            path = print_book(
                args.site, language, args.out / f"self-attention-executed-{language}.pdf", browser
            )
            from pypdf import PdfReader

            pages = len(PdfReader(path).pages)
            print(f"{path}: {pages} pages, {path.stat().st_size / 1e6:.1f} MB")
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1:])
