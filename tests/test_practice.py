"""Practice without a kernel and with one (issue 32): concept checks, progress, the reader's line.

* every chapter has at least three concept checks, each question in English and Chinese, every
  wrong option with its own feedback; numeric questions list named wrong values;
* the checks' output is a pure function of the data, loads nothing from another host, and the
  chapters hold exactly the cells ``tools/apply_quizzes.py`` writes (with their outputs);
* ``progress(N)`` lists a chapter's exercises with ✅ / ❌ / ⏳ from the reader's checks (a
  solution's check does not count);
* an exception raised by the reader's code is reported with the reader's own last line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from selfattn import quizzes
from selfattn.exercises import _core, checker, progress

ROOT = Path(__file__).resolve().parent.parent
from tools import apply_quizzes  # noqa: E402

CHAPTERS = sorted(ROOT.glob("chapters/[0-9][0-9]_*.ipynb"))


def _all_questions():
    for chapter in quizzes.chapters():
        for item in quizzes.load(chapter)["checks"]:
            for q in item["questions"]:
                yield chapter, item["id"], q


def test_every_chapter_has_three_checks():
    assert quizzes.chapters()[:10] == list(range(1, 11))
    for chapter in quizzes.chapters():
        data = quizzes.load(chapter)
        assert data["chapter"] == chapter
        n = sum(len(c["questions"]) for c in data["checks"])
        assert n >= 3, f"chapter {chapter} has {n} concept-check questions, expected >= 3"
        ids = [c["id"] for c in data["checks"]]
        assert len(ids) == len(set(ids)), ids
        for c in data["checks"]:
            assert re.fullmatch(r"[a-z0-9-]+", c["id"]), c["id"]
            assert c["after"].startswith(f"{chapter}."), (chapter, c["after"])


def test_questions_are_bilingual_with_feedback_for_every_option():
    kinds = set()
    for chapter, cid, q in _all_questions():
        where = f"ch{chapter:02d}/{cid}"
        kinds.add(q["type"])
        assert set(q["question"]) == {"en", "zh"}, where
        assert re.search(r"[\u4e00-\u9fff]", q["question"]["zh"]), f"{where}: zh not Chinese"
        answers = q["answers"]
        right = [a for a in answers if a.get("correct")]
        wrong = [a for a in answers if a.get("correct") is False]
        assert len(right) == 1, f"{where}: exactly one right answer"
        assert len(wrong) >= 2, f"{where}: at least two misconceptions, got {len(wrong)}"
        for a in answers:
            fb = a.get("feedback")
            assert fb and set(fb) == {"en", "zh"} and all(v.strip() for v in fb.values()), where
            if q["type"] == "multiple_choice":
                assert set(a["answer"]) == {"en", "zh"}, where
        if q["type"] == "multiple_choice":
            texts = [a["answer"]["en"] for a in answers]
            assert len(texts) == len(set(texts)), f"{where}: repeated option"
            fbs = [a["feedback"]["en"] for a in wrong]
            assert len(fbs) == len(set(fbs)), f"{where}: each wrong option explains itself"
        else:
            assert q["type"] == "numeric", where
            assert any(a.get("type") == "default" for a in answers), where
            for a in wrong:  # a named wrong value is never the right one
                assert "value" in a and a["value"] != right[0]["value"], where
    assert kinds == {"multiple_choice", "numeric"}


def test_output_is_deterministic_and_offline():
    for chapter in quizzes.chapters():
        for item in quizzes.load(chapter)["checks"]:
            a = quizzes.output(chapter, item["id"])
            b = json.loads(json.dumps(quizzes.output(chapter, item["id"])))
            assert a == b
            page = a["data"]["text/html"]
            # Nothing that would make a browser ask another host: no URL in src/href, no CDN.
            assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", page), item["id"]
            assert "cdn." not in page and "script.src" not in page
            assert "</script>" in page and page.count("</script>") == 1
            # Both languages, each in its own container named after the check.
            for lang in quizzes.LANGUAGES:
                assert f'id="{quizzes.container_id(chapter, item["id"], lang)}"' in page
            # A front end that runs no saved script (JupyterLab) shows how to run the check.
            for text in quizzes.FALLBACK.values():
                assert text in page
            q0 = item["questions"][0]["question"]
            assert json.dumps(q0["zh"], ensure_ascii=False)[1:-1] in page


def test_script_lost_only_the_cdn():
    js = quizzes.script()
    assert "https://" not in js and "window.MathJax =" not in js
    assert js.count("/* no CDN") == 2  # jupyterquiz 2.9.6 has two CDN loads: both patched
    for name in ("function show_questions", "class MCQuestion", "class NumericQuestion"):
        assert name in js


def test_unknown_check_is_a_clear_error():
    with pytest.raises(ValueError, match="no concept check"):
        quizzes.output(3, "nope")
    with pytest.raises(ValueError, match="chapter 42"):
        quizzes.load(42)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name[:2])
def test_chapters_hold_the_tool_cells(path):
    """``tools/apply_quizzes.py --check``: the cells and their outputs are the data's."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    expected = apply_quizzes.updated(nb, path)
    mine = [c for c in nb["cells"] if apply_quizzes._ours(c)]
    theirs = [c for c in expected["cells"] if apply_quizzes._ours(c)]
    assert [c["id"] for c in mine] == [c["id"] for c in theirs], "run tools/apply_quizzes.py"
    for got, want in zip(mine, theirs):
        if got["id"] != apply_quizzes.PROGRESS_ID:
            assert got["outputs"] == want["outputs"], f"{got['id']}: stale output"
        assert got["source"] == want["source"]
    # Byte for byte (``--check``): nothing else of the notebook would change either.
    raw = path.read_text(encoding="utf-8")
    assert apply_quizzes._dump(expected) == raw, "run tools/apply_quizzes.py on it"
    chapter = apply_quizzes.chapter_number(path)
    if chapter in quizzes.chapters():
        assert len([c for c in mine if c["id"].startswith("concept-check-")]) >= 3


def test_tool_is_idempotent_and_places_cells(tmp_path):
    src = ROOT / "chapters" / "03_scaled_dot_product.ipynb"
    nb = json.loads(src.read_text(encoding="utf-8"))
    # Strip the tool's cells, then write them twice: the second pass changes nothing.
    nb["cells"] = [c for c in nb["cells"] if not apply_quizzes._ours(c)]
    copy = tmp_path / src.name
    copy.write_text(apply_quizzes._dump(nb), encoding="utf-8")
    assert apply_quizzes.rewrite(copy)
    first = copy.read_text(encoding="utf-8")
    assert not apply_quizzes.rewrite(copy)
    assert copy.read_text(encoding="utf-8") == first
    cells = json.loads(first)["cells"]
    ids = [c.get("id") for c in cells]
    # Each check sits just before the heading of the section after the one it closes.
    for item in quizzes.load(3)["checks"]:
        i = ids.index(f"concept-check-{item['id']}")
        nxt = next(c for c in cells[i:] if c["cell_type"] == "markdown")
        heading = re.search(r"^## (\S+)", "".join(nxt["source"]), re.M)[1]
        prev_heading = [
            re.findall(r"^## (\d+\.\d+)", "".join(c["source"]), re.M)
            for c in cells[:i]
            if c["cell_type"] == "markdown"
        ]
        last = [h for hs in prev_heading for h in hs][-1]
        assert last == item["after"], (item["id"], last)
        assert heading != item["after"]
    # The progress cell ends the exercises, just before the summary.
    i = ids.index("exercise-progress")
    assert "## Summary" in "".join(cells[i + 1]["source"])


# ----------------------------------------------------------------------------- progress


@pytest.fixture
def fresh_results():
    saved = {k: dict(v) for k, v in _core._RESULTS.items()}
    _core._RESULTS.clear()
    yield
    _core._RESULTS.clear()
    _core._RESULTS.update(saved)


def test_progress_lists_reader_checks(fresh_results, capsys):
    from selfattn.exercises import ch03

    out = progress(3)
    text = capsys.readouterr().out
    assert set(out.statuses.values()) == {"not attempted"}
    assert text.count("⏳") == len(ch03.EXERCISES)
    assert f"0 of {len(ch03.EXERCISES)} passed" in text

    def my_softmax(x):
        return (x - x.amax(-1, keepdim=True)).exp() / (x - x.amax(-1, keepdim=True)).exp().sum(
            -1, keepdim=True
        )

    def wrong_softmax(x):
        return x.exp()

    number = ch03.check_stable_softmax.number
    ch03.check_stable_softmax(wrong_softmax)
    out = progress(3)
    assert out.statuses[number] == "failed"
    ch03.check_stable_softmax(my_softmax)
    capsys.readouterr()
    out = progress(3)
    text = capsys.readouterr().out
    assert out.statuses[number] == "passed"
    assert f"✅ Exercise {number} (" in text
    assert f"1 of {len(ch03.EXERCISES)} passed" in text
    for line in text.splitlines():
        assert len(line) <= 79, line


def test_solution_checks_do_not_count(fresh_results, capsys):
    from selfattn.exercises import ch03

    def my_softmax_solution(x):
        return x.softmax(-1)

    assert ch03.check_stable_softmax(my_softmax_solution)
    assert progress(3).statuses[ch03.check_stable_softmax.number] == "not attempted"
    # A cell whose first line marks it as a solution does not count either.
    code = "# @title Solution\nresult = check(lambda x: x.softmax(-1))\n"
    filename = "<solution-cell>"
    import linecache

    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    scope = {"check": ch03.check_stable_softmax}
    exec(compile(code, filename, "exec"), scope)
    assert scope["result"]
    assert progress(3).statuses[ch03.check_stable_softmax.number] == "not attempted"
    capsys.readouterr()


# ----------------------------------------------------------------------------- reader's line


@checker("0.1", "double it")
def _check_double(answer):
    _core.expect_int(_core.call_answer(answer, 2), 4, case="2")


def test_error_names_the_readers_line(capsys):
    def doubled(x):
        y = x * 2
        return y / 0  # the reader's mistake

    result = _check_double(doubled)
    text = capsys.readouterr().out
    assert not result
    assert "your code raised ZeroDivisionError: division by zero" in text
    assert "in doubled: return y / 0  # the reader's mistake" in text
    assert "test_practice.py" in text  # the reader's file (a cell says "of your cell")
    assert "_core.py" not in text


def test_error_inside_torch_names_the_readers_call(capsys):
    import torch

    def bad_matmul(x):
        a = torch.ones(2, 3)
        return a @ a  # shapes do not match

    _check_double(bad_matmul)
    text = capsys.readouterr().out
    assert "your code raised RuntimeError" in text
    assert "in bad_matmul: return a @ a  # shapes do not match" in text


def test_cell_frames_are_called_cells():
    code = "def f():\n    raise ValueError('nope')\n"
    filename = "/tmp/ipykernel_123/456789.py"
    import linecache

    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    scope: dict = {}
    exec(compile(code, filename, "exec"), scope)
    try:
        scope["f"]()
    except ValueError as err:
        text = _core.describe_error(err)
    assert text.endswith("at line 2 of your cell, in f: raise ValueError('nope')"), text


# ----------------------------------------------------------------------------- one numbering


def test_notebook_editions_number_exercises_by_chapter():
    from selfattn.exercises import ch03

    from tools import notebook_edition

    nb = json.loads((ROOT / "chapters" / "03_scaled_dot_product.ipynb").read_text("utf-8"))
    out = notebook_edition.convert(nb, chapter=3)
    heads = [
        line
        for c in out["cells"]
        if c["cell_type"] == "markdown"
        for line in c["source"].splitlines()
        if line.startswith("### Exercise")
    ]
    assert [h.split(":")[0] for h in heads] == [
        f"### Exercise 3.{i}" for i in range(1, len(ch03.EXERCISES) + 1)
    ]
    # The checkers print the same numbers.
    assert ch03.check_stable_softmax.number == f"3.{ch03.EXERCISES.index('softmax') + 1}"
    labels = notebook_edition._labels(nb, 3)
    assert labels["ex-ch03-softmax"].startswith(f"Exercise {ch03.check_stable_softmax.number} (")
