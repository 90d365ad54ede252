"""Practice on the website, with no kernel and no internet (issue 32), in both languages.

* Concept checks: on every chapter page the checks render from the saved output alone, in
  the page's language (English on the English site, Chinese on the Chinese one), and one
  question per chapter answered wrongly, then rightly, shows the feedback its data file
  gives for that option (``lib/selfattn/quizzes/chNN.json``);
* predictions: the output of every cell tagged ``predict`` is collapsed, not visible, until
  the reader opens it;
* one numbering: the exercises of chapter N are titled N.1, N.2, ... as the checkers print.

Every request to another host is blocked and recorded (conftest.py): a check that needed a
CDN would fail here.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import CHAPTERS, ROOT, page_id
from selfattn import quizzes

LANGS = {"en": "", "zh": "zh/"}


def _chapter_number(entry) -> int:
    return int(re.search(r"/(\d\d)_", "/" + entry[0].split("/")[-1])[1])


def _norm(text: str) -> str:
    return " ".join(text.split())


def _notebook(entry) -> dict:
    return json.loads((ROOT / f"{entry[0]}.ipynb").read_text(encoding="utf-8"))


@pytest.mark.parametrize("lang", list(LANGS))
@pytest.mark.parametrize("entry", CHAPTERS, ids=page_id)
def test_concept_check_wrong_then_right(entry, lang, lang_page):
    chapter = _chapter_number(entry)
    page, log = lang_page(lang, entry[1])
    checks = quizzes.load(chapter)["checks"]
    # Every check of the chapter is on the page, in the page's language only.
    for item in checks:
        for code, shown in (("en", lang == "en"), ("zh", lang == "zh")):
            box = page.locator(f"#{quizzes.container_id(chapter, item['id'], code)}")
            assert box.count() == 1, f"{entry[1]}: no container for {item['id']} ({code})"
            assert box.is_visible() == shown, f"{entry[1]} ({lang}): {item['id']} {code} shown?"
            questions = box.locator(".Quiz")
            assert questions.count() == len(item["questions"]), (item["id"], code)
    # The script ran: the note for front ends that run no saved script is gone.
    assert page.locator(".jq-fallback").count() == 0
    # One question per chapter (the chapter's n-th check, n by chapter, so both kinds are
    # exercised across the book), answered wrongly and then rightly.
    item = checks[chapter % len(checks)]
    q = item["questions"][0]
    box = page.locator(f"#{quizzes.container_id(chapter, item['id'], lang)}")
    quiz = box.locator(".Quiz").first
    quiz.scroll_into_view_if_needed()
    assert _norm(q["question"][lang]) in _norm(quiz.inner_text())
    right = next(a for a in q["answers"] if a.get("correct"))
    wrong = next(a for a in q["answers"] if a.get("correct") is False)
    feedback = quiz.locator(".Feedback")
    for answer, verdict in ((wrong, "incorrect"), (right, "correct")):
        if q["type"] == "multiple_choice":
            option = quiz.locator("label.MCButton").filter(has_text=answer["answer"][lang])
            assert option.count() == 1, answer["answer"][lang]
            option.click()
        else:
            field = quiz.locator("input.Input-text")
            field.fill("")
            field.press_sequentially(str(answer["value"]))
            field.press("Enter")
        assert feedback.is_visible()
        assert _norm(feedback.inner_text()) == _norm(answer["feedback"][lang]), verdict
        assert verdict in (feedback.get_attribute("class") or "").split(), verdict
    assert not log.problems(), log.problems()


@pytest.mark.parametrize("lang", list(LANGS))
@pytest.mark.parametrize("entry", CHAPTERS, ids=page_id)
def test_predictions_are_collapsed(entry, lang, lang_page):
    nb = _notebook(entry)
    predicts = [c for c in nb["cells"] if "predict" in c["metadata"].get("tags", [])]
    page, _ = lang_page(lang, entry[1])
    cells = page.locator("div.cell.tag_predict")
    assert cells.count() == len(predicts), f"{entry[1]}: predict cells on the page"
    for i in range(cells.count()):
        cell = cells.nth(i)
        output = cell.locator(".cell_output")
        assert output.count() >= 1
        assert not output.first.is_visible(), f"{entry[1]}: predict cell {i} shows its answer"
        summary = cell.locator("details.hide > summary")
        assert summary.count() == 1
        if lang == "zh":
            assert "答案" in summary.inner_text()
        else:
            assert "answer" in summary.inner_text()
        summary.click()
        assert output.first.is_visible(), f"{entry[1]}: the answer does not open"
        summary.click()  # closed again, for the other tests sharing the page


@pytest.mark.parametrize("entry", CHAPTERS, ids=page_id)
def test_exercises_numbered_by_chapter(entry, lang_page):
    chapter = _chapter_number(entry)
    page, _ = lang_page("en", entry[1])
    titles = page.locator("div.exercise > p.admonition-title").all_inner_texts()
    if not titles:
        pytest.skip(f"{entry[1]} has no exercises")
    numbers = [re.search(r"Exercise (\d+(?:\.\d+)*)", t)[1] for t in titles]
    assert numbers == [f"{chapter}.{i}" for i in range(1, len(titles) + 1)], numbers
    zh, _ = lang_page("zh", entry[1])
    zh_titles = zh.locator("div.exercise > p.admonition-title").all_inner_texts()
    zh_numbers = [re.search(r"(\d+\.\d+)", t)[1] for t in zh_titles]
    assert zh_numbers == numbers
