"""The Chinese notebook edition (tools/notebook_edition.py's ZH_EDITIONS, issue 51).

notebooks/zh/chapters/ (the Chinese site's Colab and download buttons) and student/zh/chapters/
are built from the chapters and the Chinese edition's catalogs; tests/test_notebook_edition.py's
``test_the_editions_are_current`` checks they are current. Here: they are plain Jupyter
markdown in Chinese, keep the chapter's code, their setup cell switches the checkers to Chinese,
their stored checker lines are Chinese, the student edition holds no solution, and the
Chinese site's buttons open them. One chapter's exercise cells run alone from the wheel and
print, in a fresh kernel, exactly the Chinese lines the edition stores (strict nbval).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import notebook_edition as edition  # noqa: E402
from tools.book import ROOT, toc_chapters

CHAPTERS = toc_chapters()
IDS = [p.stem for p in CHAPTERS]
MYST = re.compile(r"\{[a-z]+(?::[a-z]+)?\}`|^[ \t>]*(`{3,}|:{3,})\{|^\([\w:\-]+\)=\s*$", re.M)
CJK = re.compile(r"[\u4e00-\u9fff]")
ENGLISH_CHECKER_LINE = re.compile(
    r"Exercise \d+\.\d+ \(|: (passed|failed|not attempted yet)$"
    r"|your exercises, as checked in this kernel|^\d+ of \d+ passed$",
    re.M,
)


def _zh(folder: str, chapter: Path) -> dict:
    return json.loads((ROOT / folder / "chapters" / chapter.name).read_text(encoding="utf-8"))


def _text(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_the_chinese_editions_are_the_catalogs_folders():
    assert set(edition.ZH_EDITIONS) == {"notebooks/zh", "student/zh"}
    for folder in edition.ZH_EDITIONS:
        names = {p.name for p in (ROOT / folder / "chapters").glob("*.ipynb")}
        assert names == {p.name for p in CHAPTERS}, folder


@pytest.mark.parametrize("folder", list(edition.ZH_EDITIONS))
@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_chinese_markdown_is_plain_jupyter_and_chinese(chapter, folder):
    prose = chinese = 0
    for i, cell in enumerate(_zh(folder, chapter)["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        text = _text(cell)
        m = MYST.search(text)
        assert not m, f"{folder}/{chapter.name} cell {i}: MyST syntax {m.group(0)!r}"
        for para in re.split(r"\n\s*\n", text):
            words = re.sub(r"\$[^$]*\$|`[^`]*`|\([^)]*\)|\[[^]]*\]", "", para)
            if re.search(r"[A-Za-z]{3,} [A-Za-z]{3,} [A-Za-z]{3,}", words) or CJK.search(para):
                prose += 1
                chinese += bool(CJK.search(para))
    # The references (author, title) stay as published; nearly all the rest is Chinese.
    assert chinese >= 0.9 * prose, f"{folder}/{chapter.name}: {chinese} of {prose} in Chinese"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_code_is_the_english_editions_and_checkers_speak_chinese(chapter):
    en = [c for c in _zh("notebooks", chapter)["cells"] if c["cell_type"] == "code"]
    zh = [c for c in _zh("notebooks/zh", chapter)["cells"] if c["cell_type"] == "code"]
    assert len(en) == len(zh)
    setup = zh[0]["source"]
    assert f"\n{edition.ZH_SETUP_LINE}\n" in setup, "the setup cell: no set_language"
    for a, b in zip(en, zh):
        drop_title = re.compile(r"^# @title .*\n")
        kept = drop_title.sub("", b["source"], count=1).replace(edition.ZH_SETUP_LINE + "\n", "")
        assert kept.rstrip() == drop_title.sub("", a["source"], count=1).rstrip()
        assert len(a["outputs"]) == len(b["outputs"])
        for out in b["outputs"]:
            if out.get("output_type") == "stream":
                text = "".join(out["text"]) if isinstance(out["text"], list) else out["text"]
                assert not ENGLISH_CHECKER_LINE.search(text), f"{chapter.name}: {text[:200]!r}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_exercises_carry_their_chinese_titles(chapter):
    en = [
        t
        for c in _zh("notebooks", chapter)["cells"]
        for t in re.findall(r"^### Exercise .*$", _text(c), re.M)
    ]
    zh = [
        t
        for c in _zh("notebooks/zh", chapter)["cells"]
        for t in re.findall(r"^### 练习 \d+\.\d+：.*$", _text(c), re.M)
    ]
    assert len(zh) == len(en)
    assert all(CJK.search(t.split("：", 1)[1]) for t in zh), zh


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_the_chinese_student_edition_has_no_solution(chapter):
    for i, cell in enumerate(_zh("student/zh", chapter)["cells"]):
        assert edition.SOLUTION_TAG not in cell["metadata"].get("tags", []), (chapter, i)
        assert "#### 解答" not in _text(cell) and "显示解答" not in _text(cell), (chapter, i)
        assert "参考答案默认折叠" not in _text(cell), (chapter, i)


def test_the_chinese_site_buttons_open_the_chinese_edition(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "i18n.py"), "config", str(tmp_path / "zh.yml")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    import yaml

    cfg = yaml.safe_load((tmp_path / "zh.yml").read_text(encoding="utf-8"))
    assert cfg["repository"]["path_to_book"] == "notebooks/zh"
    assert cfg["sphinx"]["config"]["book_notebook_edition"] == "notebooks/zh"
    for chapter in CHAPTERS:
        assert (ROOT / "notebooks" / "zh" / "chapters" / chapter.name).is_file()


# ----------------------------------------------------------------------------- from the wheel

#: A short chapter whose exercise cells need only the chapter's imports.
WHEEL_CHAPTER = "04_masking.ipynb"


def _exercise_notebook(nb: dict) -> dict:
    """The setup and import cells, each exercise's stub-and-check cell, and ``progress``."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    checks = [
        c
        for c in code[2:-1]
        if re.search(r"\bcheck_\w+\(", _text(c))
        and edition.SOLUTION_TAG not in c["metadata"].get("tags", [])
        and not _text(c).startswith("# @title")
    ]
    out = dict(nb, cells=[*code[:2], *checks, code[-1]])
    return json.loads(json.dumps(out))


def test_a_chinese_notebook_runs_alone_from_the_wheel(tmp_path):
    """Strict nbval, in a fresh environment with the wheel installed: the checkers print in
    Chinese exactly the lines the Chinese edition stores."""
    try:
        from tools import reader_run
    except ImportError:  # tools/ on the path
        import reader_run

    nb = _exercise_notebook(_zh("notebooks/zh", Path(WHEEL_CHAPTER)))
    assert len(nb["cells"]) >= 5
    assert any("练习" in json.dumps(c["outputs"], ensure_ascii=False) for c in nb["cells"])
    wheel = reader_run.build_wheel(tmp_path)
    python = reader_run.build_reader_env(tmp_path, wheel)
    folder = tmp_path / "reader"
    folder.mkdir()
    (folder / WHEEL_CHAPTER).write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    shutil.copyfile(ROOT / "tests" / "nbval_figures.py", folder / "conftest.py")
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env |= {"SELFATTN_PROGRESS": "0"}
    env.pop("SELFATTN_LANGUAGE", None)  # the setup cell alone switches the language
    cmd = [python, "-m", "pytest", "-p", "no:cacheprovider", "--nbval", "--nbval-current-env"]
    cmd += ["--nbval-sanitize-with", ROOT / "tests" / "nbval_sanitize.cfg", "-q"]
    cmd += ["--rootdir", folder, folder / WHEEL_CHAPTER]
    out = subprocess.run(
        [str(c) for c in cmd], cwd=folder, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
