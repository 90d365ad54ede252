"""The student edition (`make book-student`, _build/student/html): every exercise, no solution.

A solution's code is recognised by its lines that appear in no other cell of the notebook
(the stub and the checker call are shared with the exercise, so they do not count).
"""

from __future__ import annotations

import json

import pytest
from conftest import CHAPTERS, ROOT, page_id

CODE_TEXT_JS = (
    "() => [...document.querySelectorAll('div.cell_input pre')]"
    ".map(p => p.textContent).join('\\n')"
)


def code_lines(page) -> set[str]:
    return {line.strip() for line in page.evaluate(CODE_TEXT_JS).splitlines()}


def _cells(entry: str) -> list[dict]:
    return json.loads((ROOT / f"{entry}.ipynb").read_text())["cells"]


def solution_only_lines(cells: list[dict]) -> list[str]:
    """Lines of solution code cells that no other cell of the notebook (code or prose) contains."""
    inside, solution, other = False, [], []
    for cell in cells:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            inside = ("{solution-start}" in src) or (inside and "{solution-end}" not in src)
            if not inside and "{solution-end}" not in src:
                other.append(src)  # a find-the-bug exercise quotes the function's code
            continue
        (solution if inside else other).append(src)
    elsewhere = {line.strip() for src in other for line in src.splitlines()}
    return sorted(
        {line.strip() for src in solution for line in src.splitlines()}
        - elsewhere
        - {""}
        # too generic to identify a solution
        - {"return", "pass", ")", "]", "}", "else:", "try:"}
    )


def _exercise_headings(cells) -> int:
    """Exercises in a notebook edition (tools/notebook_edition.py): one heading each."""
    return sum(
        "".join(c["source"]).count("### Exercise") for c in cells if c["cell_type"] == "markdown"
    )


def _count(cells, directive: str) -> int:
    return sum(
        "".join(c["source"]).count("{" + directive + "}")
        for c in cells
        if c["cell_type"] == "markdown"
    )


@pytest.mark.parametrize("entry", CHAPTERS, ids=page_id)
def test_student_edition_has_the_exercises_but_no_solutions(entry, site_page, student_page):
    toc_entry, html = entry
    cells = _cells(toc_entry)
    exercises, lines = _count(cells, "exercise-start"), solution_only_lines(cells)

    # The full edition shows the solutions (else this test would prove nothing).
    page, log = site_page(html)
    assert page.locator("div.solution").count() == _count(cells, "solution-start")
    missing = [line for line in lines if line not in code_lines(page)]
    assert not missing, f"{html}: solution code missing from the full edition: {missing[:5]}"

    page, log = student_page(html)
    assert page.locator("div.solution").count() == 0, (
        f"{html}: the student edition shows solutions"
    )
    assert page.locator("div.exercise").count() == exercises, (
        f"{html}: the student edition lost exercises"
    )
    code = code_lines(page)
    leaked = [line for line in lines if line in code]
    assert not leaked, f"{html}: solution code on the student page: {leaked[:5]}"
    assert "student edition" in page.title(), (
        f"{html}: title {page.title()!r} does not say 'student edition'"
    )

    # The downloadable notebook has the exercises but no solution cells either.
    href = page.evaluate(
        "a => a.href",
        page.locator('a.btn-download-source-button[href$=".ipynb"]').element_handle(),
    )
    nb = json.loads(page.request.get(href).body())
    text = "\n".join("".join(c["source"]) for c in nb["cells"])
    assert "{solution-start}" not in text and "{solution-end}" not in text
    assert "{exercise-start}" not in text, f"{html}: the download is not the plain edition"
    assert _exercise_headings(nb["cells"]) == exercises
    leaked = [line for line in lines if line in {ln.strip() for ln in text.splitlines()}]
    assert not leaked, f"{html}: solution code in the student edition's .ipynb: {leaked[:5]}"
    assert not log.problems(), f"{html}:\n  " + "\n  ".join(log.problems())


def test_student_notebooks_are_current_and_solution_free():
    """student/chapters/ (committed, for Colab) is what `make book-student` writes now."""
    from tools.student_edition import STUDENT, student_notebooks

    expected = student_notebooks()
    assert {p.name for p in expected} == {f"{e.split('/')[-1]}.ipynb" for e, _ in CHAPTERS}
    stale = [p.name for p, text in expected.items() if not p.exists() or p.read_text() != text]
    extra = {p.name for p in (STUDENT / "chapters").glob("*.ipynb")} - {p.name for p in expected}
    assert not stale and not extra, (
        f"student/chapters/ out of date ({stale}, extra {extra}): run `make book-student`"
    )
    for toc_entry, _ in CHAPTERS:
        full = _cells(toc_entry)
        nb = json.loads((STUDENT / f"{toc_entry}.ipynb").read_text())
        text = "\n".join("".join(c["source"]) for c in nb["cells"])
        assert "{solution-start}" not in text and "{solution-end}" not in text, toc_entry
        assert _exercise_headings(nb["cells"]) == _count(full, "exercise-start")
        lines = {ln.strip() for ln in text.splitlines()}
        leaked = [line for line in solution_only_lines(full) if line in lines]
        assert not leaked, f"{toc_entry}: solution code in student/: {leaked[:5]}"


@pytest.mark.parametrize("entry", CHAPTERS, ids=page_id)
def test_student_colab_link_opens_the_student_notebook(entry, student_page):
    """The student edition's Colab button names student/<chapter>.ipynb, a file in the repo."""
    from tests.test_colab import COLAB, repo_parts

    toc_entry, html = entry
    page, log = student_page(html)
    colab = page.locator('a[href^="https://colab.research.google.com/"]')
    assert colab.count() == 1, f"{html}: {colab.count()} Colab links in the student edition"
    href = colab.get_attribute("href")
    student_nb = f"student/{toc_entry}.ipynb"
    # The student edition's own configuration sets path_to_book to student/.
    org, repo, branch = repo_parts()
    expected = f"{COLAB}/github/{org}/{repo}/blob/{branch}/{student_nb}"
    assert href == expected, f"{html}: Colab link {href}, expected {expected}"
    assert (ROOT / student_nb).is_file(), f"{student_nb} is not in the repository"
    assert not log.problems(), f"{html}:\n  " + "\n  ".join(log.problems())
