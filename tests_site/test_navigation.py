"""Previous/next links walk the book in table-of-contents order; search finds every page."""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit

import pytest
from conftest import PAGES, page_id


def _path(page, site_url) -> str:
    return urlsplit(page.url).path.removeprefix(urlsplit(site_url).path)


def test_next_and_previous_follow_the_toc(site_url, open_page):
    order = [html for _, html in PAGES]
    page, log = open_page(site_url + order[0])
    seen = [_path(page, site_url)]
    while page.locator("a.right-next").count():
        with page.expect_navigation(wait_until="load"):
            page.locator("a.right-next").click()
        seen.append(_path(page, site_url))
        assert len(seen) <= len(order), f"'next' keeps going past the last page: {seen}"
    assert seen == order, f"'next' visits {seen}, the toc says {order}"
    back = [seen[-1]]
    while page.locator("a.left-prev").count():
        with page.expect_navigation(wait_until="load"):
            page.locator("a.left-prev").click()
        back.append(_path(page, site_url))
        assert len(back) <= len(order), f"'previous' keeps going past the first page: {back}"
    assert back == order[::-1], f"'previous' visits {back}"
    assert not log.problems(), "\n  ".join(log.problems())


def _title(page) -> str:
    h1 = page.locator("article h1").first.inner_text()
    # Drop the headerlink '#' and the chapter number ("3. Scaled ..." -> "Scaled ...").
    return re.sub(r"^\s*\d+(\.\d+)*\.?\s*", "", h1.replace("#", "")).strip()


@pytest.mark.parametrize("entry", PAGES, ids=page_id)
def test_search_finds_the_page_by_its_title(entry, site_url, site_page, open_page):
    _, html = entry
    page, log = site_page(html)
    title = _title(page)
    words = [w for w in re.findall(r"[A-Za-z][A-Za-z-]{3,}", title)][:4] or [title]
    query = " ".join(words)
    page, log2 = open_page(f"{site_url}search.html?q={quote(query)}")
    page.wait_for_function(
        "() => { const s = document.querySelector('#search-results .search-summary');"
        " return s && s.textContent.trim().length > 0; }"
    )
    hits = page.evaluate(
        "() => [...document.querySelectorAll('#search-results ul.search li a')].map(a => a.href)"
    )
    targets = {urlsplit(h).path.removeprefix(urlsplit(site_url).path) for h in hits}
    assert html in targets, f"searching {query!r} did not find {html}; found {sorted(targets)}"
    assert not log.problems() and not log2.problems(), "\n  ".join(
        log.problems() + log2.problems()
    )


def test_search_box_submits_to_the_search_page(site_url, open_page):
    """The theme's search box (opened with Ctrl+K) sends the reader to search.html with results."""
    page, log = open_page(site_url + PAGES[0][1])
    page.keyboard.press("Control+k")
    box = page.locator("input[name=q]:visible").first
    box.fill("attention")
    box.press("Enter")
    page.wait_for_url(re.compile(r"search\.html\?q=attention"))
    page.wait_for_function(
        "() => { const s = document.querySelector('#search-results .search-summary');"
        " return s && s.textContent.trim().length > 0; }"
    )
    assert page.locator("#search-results ul.search li").count() > 0, (
        "searching 'attention' found nothing"
    )
    assert not log.problems(), "\n  ".join(log.problems())
