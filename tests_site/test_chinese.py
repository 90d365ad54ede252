"""The Chinese edition (make book-zh, _build/html/zh), in the browser like the English one.

Every page renders offline in Chinese with a CJK font first in its font stack, its math
typeset and its images loaded; the explorers work exactly as on the English pages (the same
test, run on the Chinese page); the language switch leads from each page to the same page in
the other language and back; and the search finds each page by its Chinese title.
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit

import pytest
from conftest import CHAPTERS, PAGES, SCREENSHOTS, page_id

CJK = re.compile(r"[\u4e00-\u9fff]")
ENGLISH_ONLY = {"api.html"}  # the API reference, generated from docstrings, stays English
PROSE_JS = (
    "() => [...document.querySelectorAll('article p, article li, article h1, article h2')]"
    ".filter(e => !e.closest('.cell_input, .cell_output, pre, table, summary, .citation'))"
    ".map(e => e.innerText.trim()).filter(t => /[A-Za-z\\u4e00-\\u9fff]{2}/.test(t))"
)


@pytest.mark.parametrize("entry", PAGES, ids=page_id)
def test_chinese_page_renders_offline(entry, zh_page):
    _, html = entry
    page, log = zh_page(html)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"zh_{page_id(entry)}.png"))
    assert page.evaluate("() => document.documentElement.lang") == "zh-CN"
    fonts = page.evaluate("() => getComputedStyle(document.body).fontFamily")
    assert re.search(r"CJK|Han Sans|PingFang|YaHei|WenQuanYi", fonts.split(",")[0]), fonts
    if html not in ENGLISH_ONLY:
        # The prose (not code, outputs or tables, which stay English) is Chinese: nearly every
        # paragraph, list item and heading holds Chinese characters.
        blocks = page.evaluate(PROSE_JS)
        chinese = sum(bool(CJK.search(b)) for b in blocks) / max(1, len(blocks))
        assert chinese > 0.8, f"{html}: only {chinese:.0%} of the prose blocks are Chinese"
    broken = page.evaluate(
        "() => [...document.images].filter(i => !i.complete || i.naturalWidth === 0)"
        ".map(i => i.currentSrc || i.src)"
    )
    assert not broken, f"{html}: images that did not load: {broken}"
    untypeset = page.evaluate(
        "() => [...document.querySelectorAll('.math')]"
        ".filter(n => !n.querySelector('mjx-container')).length"
    )
    assert untypeset == 0, f"{html}: {untypeset} math elements not typeset"
    assert not log.problems(), f"{html}:\n  " + "\n  ".join(log.problems())


@pytest.mark.parametrize("entry", CHAPTERS, ids=page_id)
def test_chinese_explorers_select_their_views(zh_page, entry):
    from test_explorers import test_every_explorer_control_selects_its_view as same_test

    same_test(zh_page, entry)


def _switch(page, lang: str) -> list[str]:
    """Where the language switch's links to ``lang`` lead (absolute URLs)."""
    return page.locator(f"nav.language-switch a[hreflang={lang}]").evaluate_all(
        "links => links.map(a => a.href)"
    )


@pytest.mark.parametrize("entry", PAGES, ids=page_id)
def test_language_switch_leads_to_the_same_page(entry, site_url, zh_url, site_page, zh_page):
    # Each page's switch is a plain link: where it leads is read from the pages already open
    # (test_language_switch_is_followed_by_a_click clicks one, there and back).
    _, html = entry
    page, _ = site_page(html)
    assert _switch(page, "zh-CN") == [zh_url + html], (
        f"{html}: 中文 leads to {_switch(page, 'zh-CN')}"
    )
    page, _ = zh_page(html)
    assert _switch(page, "en") == [site_url + html], (
        f"zh/{html}: English leads to {_switch(page, 'en')}"
    )


def test_language_switch_is_followed_by_a_click(site_url, zh_url, open_page):
    html = CHAPTERS[0][1]
    page, log = open_page(site_url + html)
    with page.expect_navigation(wait_until="load"):
        page.locator("nav.language-switch a[hreflang=zh-CN]").click()
    assert page.url == zh_url + html, f"{html}: 中文 leads to {page.url}"
    with page.expect_navigation(wait_until="load"):
        page.locator("nav.language-switch a[hreflang=en]").click()
    assert page.url == site_url + html, f"zh/{html}: English leads to {page.url}"
    assert not log.problems(), "\n  ".join(log.problems())


@pytest.mark.parametrize("entry", [e for e in PAGES if e[1] not in ENGLISH_ONLY], ids=page_id)
def test_chinese_search_finds_the_page_by_its_title(entry, zh_url, zh_page, open_page):
    _, html = entry
    page, _ = zh_page(html)
    h1 = page.locator("article h1").first.inner_text().replace("#", "")
    title = re.sub(r"^\s*\d+(\.\d+)*\.?\s*", "", h1).strip()
    # A reader types words, as the index holds them: jieba's segmentation (Sphinx's own
    # for Chinese), two characters or more.
    import jieba

    words = [w for w in jieba.cut_for_search(title) if re.fullmatch(r"[\u4e00-\u9fff]{2,}", w)]
    assert words, f"zh/{html}: the title {title!r} has no Chinese word"
    query = " ".join(dict.fromkeys(words[:3]))
    page, log = open_page(f"{zh_url}search.html?q={quote(query)}")
    page.wait_for_function(
        "() => { const s = document.querySelector('#search-results .search-summary');"
        " return s && s.textContent.trim().length > 0; }"
    )
    hits = page.evaluate(
        "() => [...document.querySelectorAll('#search-results ul.search li a')].map(a => a.href)"
    )
    found = {urlsplit(h).path.removeprefix(urlsplit(zh_url).path) for h in hits}
    assert html in found, f"searching {query!r} did not find zh/{html}; found {sorted(found)}"
    assert not log.problems(), "\n  ".join(log.problems())
