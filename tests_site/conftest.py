"""Browser tests of the built website: headless Chromium (Debian's package) driven by Playwright.

The site is served from a folder on 127.0.0.1 by a thread of this test session, and every
request to any other host is blocked (and recorded: a page that tries one fails its test),
so the tests also prove the site works with no internet.

    make test-site                                   # builds what is missing, then runs these
    SITE_HTML=/tmp/x/_build/html STUDENT_HTML=/tmp/y/html .venv/bin/python -m pytest tests_site

Environment: ``SITE_HTML`` (default ``_build/html``), ``STUDENT_HTML`` (default
``_build/student/html``), ``CHROMIUM`` (default ``/usr/bin/chromium``), ``SCREENSHOTS``
(default ``screenshots/``).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
from tools.book import toc_files  # noqa: E402

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
SITE_HTML = Path(os.environ.get("SITE_HTML", ROOT / "_build" / "html"))
STUDENT_HTML = Path(os.environ.get("STUDENT_HTML", ROOT / "_build" / "student" / "html"))
SCREENSHOTS = Path(os.environ.get("SCREENSHOTS", ROOT / "screenshots"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm
]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
# How long a page may take to settle (MathJax, widgets) on a busy 2-core machine.
SETTLE_MS = 60_000

# Every page of the table of contents, in book order: (toc entry, path of its html page).
PAGES = [(f, f"{f}.html") for f in toc_files()]
CHAPTERS = [(f, html) for f, html in PAGES if f.startswith("chapters/")]


def page_id(entry) -> str:
    return entry[0].split("/")[-1]


def pytest_collection_modifyitems(config, items):
    if not CHROMIUM.exists():
        skip = pytest.mark.skip(reason=f"no Chromium at {CHROMIUM}: the browser tests are skipped")
        for item in items:
            item.add_marker(skip)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output readable
        pass


def _serve(folder: Path):
    if not (folder / "index.html").exists():
        pytest.fail(
            f"no built site at {folder} (build it first: `make book` / `make book-student`)",
            pytrace=False,
        )
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


@pytest.fixture(scope="session")
def site_url():
    server, url = _serve(SITE_HTML)
    yield url
    server.shutdown()


@pytest.fixture(scope="session")
def student_url():
    server, url = _serve(STUDENT_HTML)
    yield url
    server.shutdown()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@dataclass
class PageLog:
    """What a page did that a reader would notice (or that needs the internet)."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)  # non-local requests, all aborted
    failed: list[str] = field(default_factory=list)  # local requests answered >= 400 or failed

    def problems(self) -> list[str]:
        return (
            [f"console error: {m}" for m in self.console_errors]
            + [f"uncaught exception: {m}" for m in self.page_errors]
            + [f"tried to reach the internet: {u}" for u in self.blocked]
            + [f"local request failed: {u}" for u in self.failed]
        )


DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


def _opener(browser, contexts: list, *, viewport: dict = DESKTOP, is_mobile: bool = False):
    def _open(url: str, *, wait_until: str = "load"):
        context = browser.new_context(viewport=viewport, is_mobile=is_mobile)
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url_origin(url))
        contexts.append(context)
        log = PageLog()

        def route(r):
            host = urlsplit(r.request.url).hostname
            if urlsplit(r.request.url).scheme in ("data", "blob") or host in LOCAL_HOSTS:
                r.continue_()
            else:
                log.blocked.append(r.request.url)
                r.abort("blockedbyclient")

        context.route("**/*", route)
        page = context.new_page()
        page.on(
            "console",
            lambda m: (
                m.type == "error"
                and not _is_block_echo(m.text, log)
                and log.console_errors.append(m.text)
            ),
        )
        page.on("pageerror", lambda e: log.page_errors.append(str(e)))
        page.on(
            "requestfailed",
            lambda r: _local(r.url) and log.failed.append(f"{r.url} ({r.failure})"),
        )
        page.on(
            "response",
            lambda r: (
                _local(r.url)
                and r.status >= 400
                and log.failed.append(f"{r.url} (HTTP {r.status})")
            ),
        )
        page.set_default_timeout(SETTLE_MS)
        page.goto(url, wait_until=wait_until)
        return page, log

    return _open


@pytest.fixture
def open_page(browser):
    """open_page(url) -> (page, log): a fresh tab with the internet blocked and errors recorded."""
    contexts = []
    yield _opener(browser, contexts)
    for c in contexts:
        c.close()


@pytest.fixture(scope="session")
def site_page(browser, site_url):
    """site_page(html) -> (page, log): the built page, opened once and settled, shared by the tests
    that only read it or open and close its solutions (each page is loaded once, not once
    per test)."""
    yield from shared_pages(browser, site_url)


@pytest.fixture(scope="session")
def phone_page(browser, site_url):
    """phone_page(html) -> (page, log): the built page in a 390 x 844 phone tab, opened once
    and settled, shared by the tests that measure the page at a phone's width."""
    yield from shared_pages(browser, site_url, viewport=PHONE, is_mobile=True)


@pytest.fixture(scope="session")
def zh_url(site_url):
    return site_url + "zh/"


@pytest.fixture(scope="session")
def zh_page(browser, zh_url):
    """zh_page(html) -> (page, log): the Chinese page, opened once and settled."""
    yield from shared_pages(browser, zh_url)


@pytest.fixture(scope="session")
def lang_page(site_page, zh_page):
    """lang_page(lang, html) -> (page, log): the page in ``"en"`` or ``"zh"``, the same tabs
    as site_page and zh_page (each page of each language is loaded once in the session)."""
    getters = {"en": site_page, "zh": zh_page}
    return lambda lang, html: getters[lang](html)


@pytest.fixture(scope="session")
def student_page(browser, student_url):
    """student_page(html) -> (page, log): the student edition's page, opened once and settled."""
    yield from shared_pages(browser, student_url)


def shared_pages(browser, base_url: str, **tab):
    """Generator behind the page fixtures: yields get(html) -> (page, log), each page opened
    once under ``base_url`` (in a tab made with ``tab``: viewport, is_mobile) and settled,
    and closes them all afterwards."""
    contexts, pages = [], {}
    opener = _opener(browser, contexts, **tab)

    def _get(html: str):
        if html not in pages:
            page, log = opener(base_url + html)
            settle(page)
            pages[html] = (page, log)
        return pages[html]

    yield _get
    for c in contexts:
        c.close()


def url_origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _local(url: str) -> bool:
    return urlsplit(url).hostname in LOCAL_HOSTS


def _is_block_echo(text: str, log: PageLog) -> bool:
    # Chromium echoes each aborted request as a console error; it is already in log.blocked.
    return "net::ERR_BLOCKED_BY_CLIENT" in text and bool(log.blocked)


def settle(page) -> None:
    """Wait until MathJax has typeset and saved widgets have rendered (where the page has them).

    Never fails by itself: if MathJax or the widget manager is missing (say, blocked) or
    stuck, the tests' own assertions then say what is untypeset, undrawn or blocked.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.wait_for_load_state("load")
    try:
        if page.evaluate("() => !!(window.MathJax && window.MathJax.startup)"):
            page.wait_for_function("() => window.MathJax.startup.promise !== undefined")
            page.evaluate("() => window.MathJax.startup.promise")
        has_views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
        if has_views and page.evaluate("() => typeof window.require === 'function'"):
            page.wait_for_function(WIDGETS_RENDERED_JS, timeout=SETTLE_MS)
    except PlaywrightTimeout:
        pass


# Every saved widget view is replaced by a rendered view: html-manager inserts a
# div.widget-subarea before each view <script> and draws the widget into it.
WIDGETS_RENDERED_JS = """() => {
  const views = [...document.querySelectorAll(
      'script[type="application/vnd.jupyter.widget-view+json"]')];
  return views.every(v => {
    const prev = v.previousElementSibling;
    return prev && prev.classList.contains('widget-subarea')
      && prev.querySelector('.jupyter-widgets, .widget-inline-hbox, .lm-Widget');
  });
}"""


def widget_state(notebook: Path) -> dict:
    nb = json.loads(notebook.read_text())
    return (
        nb.get("metadata", {})
        .get("widgets", {})
        .get("application/vnd.jupyter.widget-state+json", {})
    )
