"""The Chinese site (issue 51): its checkers' lines are Chinese, and its buttons open the
Chinese notebook edition.

* no stored output of a Chinese chapter page shows an English checker line ("⏳ Exercise 3.1
  (...): not attempted yet", ``progress``'s lines): _ext/book_zh.py swaps each for the line
  ``selfattn.set_language("zh")`` prints;
* the Colab button opens ``notebooks/zh/chapters/<page>.ipynb`` and the ``.ipynb`` download
  is that file (tools/i18n.py config, _ext/book_site.py).

Read from the built HTML (``make book-zh``), without a browser.
"""

from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from conftest import CHAPTERS, ROOT, SITE_HTML, page_id

ZH_HTML = SITE_HTML / "zh"
ENGLISH_CHECKER_LINE = re.compile(
    r"Exercise \d+\.\d+ \(|: (passed|failed|not attempted yet)$"
    r"|your exercises, as checked in this kernel|^\d+ of \d+ passed$",
    re.M,
)
OUTPUT = re.compile(
    r'<div class="output[^"]*"[^>]*>\s*<div class="highlight[^"]*"><pre>(.*?)</pre>', re.S
)


def _page(html: str) -> str:
    path = ZH_HTML / html
    if not path.is_file():
        pytest.skip("no Chinese site: run `make book-zh`")
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("entry", CHAPTERS, ids=page_id)
def test_chinese_page_outputs_have_no_english_checker_line(entry):
    _, html = entry
    page = _page(html)
    for block in OUTPUT.findall(page):
        text = html_lib.unescape(re.sub(r"<[^>]+>", "", block))
        m = ENGLISH_CHECKER_LINE.search(text)
        assert not m, f"zh/{html}: an English checker line in an output: {text[:200]!r}"


@pytest.mark.parametrize("entry", CHAPTERS, ids=page_id)
def test_chinese_buttons_open_the_chinese_notebook(entry):
    toc_entry, html = entry
    page = _page(html)
    colab = re.findall(r'href="(https://colab\.research\.google\.com/[^"]+)"', page)
    assert len(set(colab)) == 1, f"zh/{html}: {colab}"
    assert colab[0].endswith(f"/notebooks/zh/{toc_entry}.ipynb"), colab[0]
    served = ZH_HTML / "_sources" / f"{toc_entry}.ipynb"
    plain = ROOT / "notebooks" / "zh" / f"{toc_entry}.ipynb"
    assert served.is_file(), f"zh/{html}: no .ipynb download"
    cells = [c["source"] for c in json.loads(served.read_text(encoding="utf-8"))["cells"]]
    assert cells == [c["source"] for c in json.loads(plain.read_text(encoding="utf-8"))["cells"]]
