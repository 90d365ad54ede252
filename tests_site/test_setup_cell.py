"""The setup cell is collapsed on the website (issue 45), in both languages.

Every chapter opens with the same 25-line setup cell (``tools/book.py setup-cell``). On the
website its code is folded under a one-line summary of what it does (``_ext/book_site.py``,
``CollapseSetupCell``), so the first code a reader sees is the chapter's own; the summary
opens it, and closes it again. The notebook editions open the same cell in Colab's form view
(``tests/test_notebook_edition.py``).
"""

from __future__ import annotations

import pytest
from book_site import SETUP_CLASS, SETUP_PROMPTS  # noqa: E402
from conftest import CHAPTERS, page_id

LANGS = {"en": "", "zh": "zh/"}


@pytest.mark.parametrize("lang", list(LANGS))
@pytest.mark.parametrize("entry", CHAPTERS, ids=page_id)
def test_setup_cell_is_collapsed_with_a_summary(entry, lang, lang_page):
    page, log = lang_page(lang, entry[1])
    cells = page.locator("div.cell")
    assert cells.count() >= 2, f"{entry[1]}: code cells on the page"
    setup = page.locator(f"div.cell.{SETUP_CLASS}")
    assert setup.count() == 1, f"{entry[1]} ({lang}): one collapsed setup cell"
    # It is the page's first code cell, and its code is not shown.
    assert "setup-cell" in (cells.first.get_attribute("class") or "").split()
    code = setup.locator(".cell_input")
    assert code.count() == 1
    assert not code.is_visible(), f"{entry[1]} ({lang}): the setup code is shown"
    # The one-line summary says what the cell does, in the page's language.
    show, hide = SETUP_PROMPTS[lang]
    summary = setup.locator("details.hide > summary")
    assert summary.count() == 1
    assert summary.first.inner_text().strip() == show
    # The first code the reader sees is the chapter's own, not the setup cell's.
    visible = page.locator("div.cell div.cell_input").filter(visible=True)
    if visible.count():
        assert "selfattn.setup(seed=0)" not in visible.first.inner_text()
    # The summary opens the code and folds it again.
    summary.first.click()
    assert code.is_visible(), f"{entry[1]} ({lang}): the summary does not open the code"
    assert "selfattn.setup(seed=0)" in code.inner_text()
    assert hide in summary.first.inner_text()
    summary.first.click()  # closed again, for the other tests sharing the page
    assert not code.is_visible()
    assert not log.problems(), log.problems()
