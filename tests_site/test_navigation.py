"""Previous/next links walk the book in table-of-contents order; search finds every page."""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit

import pytest
from conftest import PAGES, page_id


def _path(page, site_url) -> str:
    return urlsplit(page.url).path.removeprefix(urlsplit(site_url).path)


def _links(page, css: str, site_url: str) -> list[str]:
    """The paths (below ``site_url``) that the page's links matching ``css`` lead to."""
    hrefs = page.locator(css).evaluate_all("links => links.map(a => a.href)")
    return [urlsplit(h).path.removeprefix(urlsplit(site_url).path) for h in hrefs]


def test_next_and_previous_follow_the_toc(site_url, site_page):
    # 'next' and 'previous' are plain links: the walk reads them from the pages already open
    # (test_next_and_previous_are_followed_by_a_click clicks them).
    order = [html for _, html in PAGES]
    for css, expected in (("a.right-next", order), ("a.left-prev", order[::-1])):
        seen = [expected[0]]
        while links := _links(site_page(seen[-1])[0], css, site_url):
            seen.append(links[0])
            assert len(seen) <= len(order), f"{css} keeps going past the end: {seen}"
        assert seen == expected, f"{css} visits {seen}, the toc says {expected}"


def test_next_and_previous_are_followed_by_a_click(site_url, open_page):
    order = [html for _, html in PAGES]
    page, log = open_page(site_url + order[1])
    with page.expect_navigation(wait_until="load"):
        page.locator("a.right-next").click()
    assert _path(page, site_url) == order[2]
    with page.expect_navigation(wait_until="load"):
        page.locator("a.left-prev").click()
    assert _path(page, site_url) == order[1]
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
