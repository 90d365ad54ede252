"""The library speaks Chinese when asked (selfattn.i18n): the checkers' lines, from its catalog.

* the catalog (``lib/selfattn/locale/zh_CN/LC_MESSAGES/selfattn.po``) holds every message the
  code asks for, translated with the same placeholders, and its exercise titles are the
  book's Chinese titles (``tools/i18n.py library --check``); the compiled ``.mo`` is current
  with the ``.po`` and is package data;
* one switch, ``selfattn.set_language`` (or ``SELFATTN_LANGUAGE``), with English the default:
  the English lines are exactly as before;
* the Chinese build's transform (``_ext/book_zh.py``) leaves no English checker line in any
  chapter's stored outputs.
"""

from __future__ import annotations

import ast
import gettext
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import selfattn
from babel.messages.pofile import read_po
from selfattn import i18n
from selfattn.exercises import checker, progress

ROOT = Path(__file__).resolve().parent.parent
PO = ROOT / "lib" / "selfattn" / "locale" / "zh_CN" / "LC_MESSAGES" / "selfattn.po"
MO = PO.with_suffix(".mo")
#: A line the checkers print in English (a stored output, a kernel's).
ENGLISH_LINE = re.compile(
    r"Exercise \d+\.\d+ \(|: (passed|failed|not attempted yet)$"
    r"|your exercises, as checked in this kernel|^\d+ of \d+ passed$",
    re.M,
)


@pytest.fixture
def chinese():
    previous = selfattn.set_language("zh")
    yield
    selfattn.set_language(previous)


def _catalog():
    with PO.open("rb") as f:
        return read_po(f)


def _code_messages() -> set[str]:
    """The message ids the library's code asks the catalog for: ``_("...")``."""
    found = set()
    for path in (ROOT / "lib" / "selfattn").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "_"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                found.add(node.args[0].value)
    return found


def test_every_message_of_the_code_is_translated_with_its_placeholders():
    cat = {m.id: m for m in _catalog() if m.id and not m.context}
    missing = sorted(_code_messages() - set(cat))
    assert not missing, f"add to {PO.relative_to(ROOT)} and translate: {missing}"
    for msgid in _code_messages():
        m = cat[msgid]
        assert m.string and not m.fuzzy, f"untranslated: {msgid!r}"
        fields = sorted(re.findall(r"\{(\w+)\}", msgid))
        assert sorted(re.findall(r"\{(\w+)\}", m.string)) == fields, (msgid, m.string)


def test_catalog_titles_and_mo_are_current():
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "i18n.py"), "library", "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_mo_holds_the_po():
    with MO.open("rb") as f:
        mo = gettext.GNUTranslations(f)._catalog
    for m in _catalog():
        if m.id and m.string and not m.fuzzy:
            key = f"{m.context}\x04{m.id}" if m.context else m.id
            assert mo.get(key) == m.string, m.id


def test_catalog_is_package_data():
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "selfattn.locale.zh_CN.LC_MESSAGES" in setup["packages"]
    assert "*.mo" in setup["package-data"]["selfattn.locale.zh_CN.LC_MESSAGES"]


def test_every_exercise_has_its_chinese_title():
    titles = {m.context: m.string for m in _catalog() if (m.context or "").startswith("exercise")}
    for path in sorted((ROOT / "lib" / "selfattn" / "exercises").glob("ch[0-9][0-9].py")):
        chapter = int(path.stem[2:])
        tree = ast.parse(path.read_text(encoding="utf-8"))
        labels = next(
            ast.literal_eval(n.value)
            for n in tree.body
            if isinstance(n, ast.Assign)
            and any(getattr(t, "id", "") == "EXERCISES" for t in n.targets)
        )
        for position in range(1, len(labels) + 1):
            name = titles.get(f"exercise {chapter}.{position}")
            assert name and re.search(r"[\u4e00-\u9fff]", name), (
                f"exercise {chapter}.{position}: no Chinese title in the library's catalog "
                "(python tools/i18n.py library)"
            )


def test_set_language_validates_and_returns_the_previous():
    with pytest.raises(ValueError, match="unknown language 'fr'"):
        selfattn.set_language("fr")
    with pytest.raises(TypeError, match="got int 3"):
        selfattn.set_language(3)
    previous = selfattn.set_language("zh_CN")
    try:
        assert i18n.get_language() == "zh_CN"
        assert selfattn.set_language("en") == "zh_CN"
    finally:
        selfattn.set_language(previous)


def test_environment_variable_chooses_when_nothing_was_set(monkeypatch):
    previous = selfattn.set_language(None)
    try:
        monkeypatch.setenv("SELFATTN_LANGUAGE", "zh")
        assert i18n.get_language() == "zh_CN"
        monkeypatch.setenv("SELFATTN_LANGUAGE", "")
        assert i18n.get_language() == "en"
    finally:
        selfattn.set_language(previous)


@checker("0.1", "double it")
def _check_double(answer):
    from selfattn.exercises import call_answer, expect_int

    expect_int(call_answer(answer, 2), 4, case="x = 2")


def test_english_is_the_default_and_unchanged(capsys):
    assert i18n.get_language() == "en"
    _check_double(None)
    _check_double(lambda x: 2 * x)
    _check_double(lambda x: x + 3)
    assert capsys.readouterr().out.splitlines() == [
        "⏳ Exercise 0.1 (double it): not attempted yet",
        "✅ Exercise 0.1 (double it): passed",
        "❌ Exercise 0.1 (double it): case x = 2: expected 4, got 5",
    ]


def test_checker_speaks_chinese(capsys, chinese):
    _check_double(None)
    _check_double(lambda x: 2 * x)
    _check_double(lambda x: x + 3)
    _check_double(lambda x: 1 / 0)
    out = capsys.readouterr().out
    assert out.splitlines()[:3] == [
        "⏳ 练习 0.1（double it）：尚未作答",
        "✅ 练习 0.1（double it）：通过",
        "❌ 练习 0.1（double it）：用例 x = 2：应为 4，得到的是 5",
    ]
    assert "你的代码抛出了 ZeroDivisionError" in out


def test_chapter_checkers_use_the_books_chinese_titles(capsys, chinese):
    from selfattn.exercises import ch03

    ch03.check_stable_softmax(None)
    progress(3)
    out = capsys.readouterr().out
    assert out.startswith("⏳ 练习 3.2（动手实现：数值稳定的 softmax）：尚未作答\n")
    assert "第 3 章" in out and "共 5 题，通过 0 题" in out
    assert not ENGLISH_LINE.search(out), out
    assert all(i18n.display_width(line) <= 79 for line in out.splitlines())


def _book_zh():
    spec = importlib.util.spec_from_file_location("_test_book_zh", ROOT / "_ext" / "book_zh.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stored_texts():
    for path in sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            for output in cell.get("outputs", []):
                text = output.get("text") or output.get("data", {}).get("text/plain", "")
                yield path.name, "".join(text) if isinstance(text, list) else text


def test_chinese_build_leaves_no_english_checker_line():
    book_zh = _book_zh()
    translated = 0
    for name, text in _stored_texts():
        new = book_zh.translate_output_text(text)
        left = ENGLISH_LINE.findall(new)
        assert not left, f"{name}: an English checker line left on the Chinese page: {new!r:.300}"
        translated += new != text
    assert translated > 20  # every chapter with exercises shows its checkers' lines
    # the English default is untouched by the build's own copy of the module
    assert i18n.get_language() == "en"


def test_the_chinese_build_swaps_a_stored_checker_output():
    """_ext/book_zh.py's doctree transform: an output block's checker lines become Chinese,
    a code block and other output lines stay as they are."""
    from types import SimpleNamespace

    from docutils import nodes

    book_zh = _book_zh()
    stored = "⏳ Exercise 3.1 (the five steps): not attempted yet\nshape (5, 6)\n"
    output = nodes.literal_block(stored, stored, classes=["output", "stream"])
    code = nodes.literal_block("print('Exercise 3.1 (x): passed')", "print(1)")
    doctree = nodes.section("", output, code)
    app = SimpleNamespace(config=SimpleNamespace(book_zh_extra_messages="extra.json"))
    book_zh.translate_outputs(app, doctree)
    assert output.astext() == "⏳ 练习 3.1（动手实现：五个步骤）：尚未作答\nshape (5, 6)\n"
    assert code.astext() == "print(1)"
