"""The Chinese pages read as Chinese (issue 31): no English sentence inside Chinese prose, and
every figure described in Chinese.

Static checks of the built Chinese edition (``_build/html/zh``, from ``make book-zh``; the
browser is not needed, but they run with the other site tests, in ``make test``):

* no prose block of a Chinese page (paragraph, list item, heading, table cell, admonition
  or exercise title) holds a run of three or more English words outside code, math,
  citations, quotations (“…”, a mention of English text: a token, a caption, a title),
  a short parenthesised gloss of a term（…）, the English column of chapter 10's glossary
  and the names of :data:`ALLOWED`. A glued value with words that renders in English,
  an untranslated message and an exercise title left in English all fail here;
* every image of a Chinese page with an alt text has a Chinese one.
"""

from __future__ import annotations

import re

import pytest
from conftest import PAGES, SITE_HTML, page_id

ZH_HTML = SITE_HTML / "zh"
ENGLISH_ONLY = {"api.html"}  # the API reference, generated from docstrings, stays English
ZH_PAGES = [e for e in PAGES if e[1] not in ENGLISH_ONLY]

#: Not prose: code, outputs, math, citations and the bibliography, the language switch.
NOT_PROSE = (
    ".cell_input, .cell_output, pre, code, kbd, .math, span.bibtex-citation, .citation, "
    "div.bibliography, dl.citation, nav.language-switch, script, style, .headerlink"
)
BLOCKS = "p, li, h1, h2, h3, h4, h5, h6, td, th, dt, dd, figcaption, caption, summary"
#: Proper names of three words or more (libraries, books, the benchmark's CPU) and words
#: that stay English in Chinese technical prose.
ALLOWED = [
    "Hugging Face Transformers",
    "Hugging Face tokenizers",
    "Dive into Deep Learning",
    "Attention Is All You Need",
    r"Intel\(R\) Xeon\(R\)[\w() -]*",
    "NaN",
]
WORD = r"[A-Za-z][\w'’-]*"
RUN = re.compile(rf"{WORD}(?:[ \u00a0]+{WORD}){{2,}}")
QUOTED = re.compile(r"“[^”]*”|‘[^’]*’|\"[^\"\n]*\"|《[^》]*》|「[^」]*」")
# A parenthesised English gloss of a term, after the Chinese term: 恒定误差传送带（constant
# error carousel）. At most five words, and nothing but words.
GLOSS = re.compile(rf"[（(]\s*{WORD}(?:[ \u00a0]+{WORD}){{0,4}}\s*[)）]")
CJK = re.compile(r"[\u3400-\u9fff]")


def english_runs(text: str) -> list[str]:
    """The runs of three or more English words in ``text`` that no rule allows."""
    for name in ALLOWED:
        text = re.sub(name, " ", text)
    text = GLOSS.sub(" ", QUOTED.sub(" ", text))
    return RUN.findall(text)


def _soup(html: str):
    from bs4 import BeautifulSoup

    path = ZH_HTML / html
    if not path.exists():
        pytest.fail(f"no Chinese page {path} (build it first: `make book-zh`)", pytrace=False)
    soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    article = soup.select_one("article.bd-article") or soup.body
    return article


def _glossary_english_cells(article) -> set[int]:
    """ids of the cells of the English column of a glossary table (a header cell 中文)."""
    cells = set()
    for table in article.select("table"):
        header = [th.get_text(" ", strip=True) for th in table.select("thead th")]
        if "中文" in header and header.index("中文") > 0:
            for row in table.select("tbody tr"):
                first = row.find(["td", "th"])
                if first is not None:
                    cells.add(id(first))
                    cells.update(id(e) for e in first.find_all(True))
    return cells


def prose_problems(article) -> list[str]:
    """``"text: runs"`` for every prose block of ``article`` with English runs."""
    for node in article.select(NOT_PROSE):
        node.decompose()
    skip = _glossary_english_cells(article)
    problems = []
    for block in article.select(BLOCKS):
        if id(block) in skip:
            continue
        # A block's own text: nested blocks (a paragraph in a list item) are checked alone.
        parts = [
            s for s in block.find_all(string=True) if s.find_parent(BLOCKS.split(", ")) is block
        ]
        text = "".join(parts)
        runs = english_runs(text)
        if runs:
            problems.append(f"{' '.join(text.split())[:90]!r}: {runs}")
    return problems


@pytest.mark.parametrize("entry", ZH_PAGES, ids=page_id)
def test_chinese_prose_has_no_english_sentences(entry):
    problems = prose_problems(_soup(entry[1]))
    assert not problems, (
        f"zh/{entry[1]}: {len(problems)} prose blocks with English in them (a glued value "
        "without translation in locales/zh_CN/glue.po, an untranslated message?):\n  "
        + "\n  ".join(problems[:12])
    )


@pytest.mark.parametrize("entry", ZH_PAGES, ids=page_id)
def test_chinese_figures_are_described_in_chinese(entry):
    article = _soup(entry[1])
    english = [
        img.get("alt", "")[:80]
        for img in article.find_all("img")
        if img.get("alt", "").strip() and not CJK.search(img["alt"])
    ]
    assert not english, (
        f"zh/{entry[1]}: {len(english)} images with an English alt text (the chapter's "
        "catalog holds them with the context 'alt'; translate them): " + "; ".join(english[:4])
    )


def test_the_english_run_detector():
    from bs4 import BeautifulSoup

    assert english_runs("在这次运行中，the fused projection was faster") == [
        "the fused projection was faster"
    ]
    assert english_runs("3 次未缩放运行中有 none 降到了 0.1 以下") == []  # one word: not a run
    assert english_runs("答案是“the cat chases”，而不是 it") == []
    assert english_runs("恒定误差传送带（constant error carousel）") == []
    assert english_runs("像 Hugging Face Transformers 这样的库") == []
    assert english_runs("这正是长文说的 in the middle of it 的意思") != []
    page = BeautifulSoup(
        "<article><p>见 <code>torch nn functional</code>、<span class='math'>\\(a b c\\)</span>"
        "<span class='bibtex-citation'>Vaswani <em>et al.</em> 2017</span>。</p>"
        "<ul><li><p>GPU 结果表：not measured yet</p></li></ul>"
        "<table><thead><tr><th>英文</th><th>中文</th></tr></thead>"
        "<tbody><tr><td>scaled dot-product attention</td><td>缩放点积注意力</td></tr></tbody>"
        "</table></article>",
        "html.parser",
    ).article
    assert prose_problems(page) == ["'GPU 结果表：not measured yet': ['not measured yet']"]
