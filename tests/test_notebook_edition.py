"""The notebook edition (tools/notebook_edition.py, `make notebooks`): plain Jupyter markdown.

notebooks/chapters/ and student/chapters/ are committed, opened by the Colab buttons and
offered as the pages' downloads. They must be what the chapters generate now, hold no MyST
role or directive syntax in any markdown cell, keep every code cell and output of the chapter
(bare ``rec(...)`` bookkeeping aside), and the student edition must hold no solution. Their
prose must read right in Jupyter and Colab (issue 30, section 5): each reference labelled with
its own entry's first author and year, nothing named twice, no raw ``\\url`` or file name,
nothing about the website's output check, "collapsed" only where a cell is collapsed, every
solution's prose folded, and no word of solutions in the student edition.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tools import notebook_edition as edition  # noqa: E402
from tools.book import ROOT, toc_chapters

CHAPTERS = toc_chapters()
IDS = [p.stem for p in CHAPTERS]
MYST = re.compile(
    r"\{[a-z]+(?::[a-z]+)?\}`"  # a role: {glue:text}`key`, {cite:p}`key`
    r"|^[ \t>]*(`{3,}|:{3,})\{"  # a directive fence: ```{prf:theorem}
    r"|^\([\w:\-]+\)=\s*$",  # a MyST target: (label)=
    re.M,
)


def _nb(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _edition(folder: str, chapter: Path) -> dict:
    return _nb(ROOT / folder / "chapters" / chapter.name)


def test_the_editions_are_current():
    wrong = edition.stale()
    assert not wrong, f"out of date, run `make notebooks`: {wrong}"


@pytest.mark.parametrize("folder", list(edition.EDITIONS))
@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_markdown_is_plain_jupyter(chapter, folder):
    for i, cell in enumerate(_edition(folder, chapter)["cells"]):
        if cell["cell_type"] == "markdown":
            m = MYST.search("".join(cell["source"]))
            assert not m, f"{folder}/{chapter.name} cell {i}: MyST syntax {m.group(0)!r}"


def _without_svg(outputs: list[dict]) -> list[dict]:
    outputs = json.loads(json.dumps(outputs))
    for out in outputs:
        out.get("data", {}).pop(edition.SVG_MIME, None)
    return outputs


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_code_and_outputs_are_the_chapters(chapter):
    """Same code cells in the same order, same outputs (but a predict cell's, which the reader
    sees by running it: tests/test_predict.py); only bookkeeping lines go."""
    src = [c for c in _nb(chapter)["cells"] if c["cell_type"] == "code"]
    out = [c for c in _edition("notebooks", chapter)["cells"] if c["cell_type"] == "code"]
    assert len(src) == len(out)
    for a, b in zip(src, out):
        if edition.PREDICT_TAG in a.get("metadata", {}).get("tags", []):
            assert b["outputs"] == []
        else:  # the same, less each figure's SVG copy (the website offers that one)
            assert _without_svg(a["outputs"]) == b["outputs"]
        kept = "".join(b["source"]).replace(edition.DEEPER_COMMENT, "", 1).splitlines()
        if kept and kept[0].startswith(edition.TITLE_LINE):  # Colab's form title (form view)
            kept = kept[1:]
        original = "".join(a["source"]).splitlines()
        assert set(kept) <= set(original) | {""}, f"{chapter.name}: a code line changed"


def test_a_glued_value_and_a_citation_are_rendered():
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "source": 'rec("x", 0.12345)\ny = 1',
                "outputs": [
                    {
                        "output_type": "display_data",
                        "data": {edition.GLUE_MIME: "0.12345"},
                        "metadata": {"scrapbook": {"name": "ch99_x", "mime_prefix": ""}},
                    }
                ],
            },
            {
                "cell_type": "markdown",
                "metadata": {},
                "source": "x is {glue:text}`ch99_x:.2f` {cite:p}`ch99-vaswani2017attention`.\n"
                "```{prf:theorem} T\n:label: thm-x\nBody.\n```\nSee {prf:ref}`thm-x`.",
            },
        ]
    }
    out = edition.convert(nb)
    text = out["cells"][1]["source"]
    assert "x is 0.12 (Vaswani et al., 2017)." in text
    assert "> **Theorem (T).**" in text and "See Theorem (T)." in text
    assert out["cells"][0]["source"] == "y = 1"  # the bookkeeping call left out


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_student_edition_has_the_exercises_but_no_solution(chapter):
    full = _edition("notebooks", chapter)["cells"]
    student = _edition("student", chapter)["cells"]

    def count(cells, heading):
        return sum(
            "".join(c["source"]).count(heading) for c in cells if c["cell_type"] == "markdown"
        )

    assert count(student, "### Exercise") == count(full, "### Exercise")
    assert count(student, "#### Solution") == 0
    assert not [c for c in student if edition.SOLUTION_TAG in c["metadata"].get("tags", [])]
    solutions = [c for c in full if edition.SOLUTION_TAG in c["metadata"].get("tags", [])]
    if count(full, "### Exercise"):
        assert solutions, f"{chapter.name}: no cell tagged {edition.SOLUTION_TAG!r}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_deeper_code_is_marked_optional(chapter):
    for cell in _edition("notebooks", chapter)["cells"]:
        if edition.DEEPER_TAG in cell["metadata"].get("tags", []):
            assert "".join(cell["source"]).startswith(edition.DEEPER_COMMENT)


def _first_author_and_year(entry) -> tuple[str, str]:
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    first = edition._plain(" ".join(people[0].last_names)) if people else None
    return first, entry.fields.get("year", "n.d.")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_each_reference_label_names_its_own_entry(chapter):
    """A reference list item's bold label (author, year) belongs to the entry it labels."""
    bib = edition._bibliography().entries
    by_title = {edition._plain(e.fields.get("title", "")).lower(): e for e in bib.values()}
    for cell in _edition("notebooks", chapter)["cells"]:
        source = "".join(cell["source"])
        if "## References" not in source:
            continue
        references = source.split("## References", 1)[1]
        for label, body in re.findall(r"^- \*\*(.+?)\.\*\* (.+)$", references, re.M):
            # the entry whose title the item quotes (the longest, as "Deep learning" is inside
            # "Dive into deep learning")
            found = [(len(t), e) for t, e in by_title.items() if t and t in body.lower()]
            assert found, f"{chapter.name}: {label!r} quotes no entry's title: {body[:80]!r}"
            entry = max(found, key=lambda pair: pair[0])[1]
            first, year = _first_author_and_year(entry)
            assert year in label, f"{chapter.name}: {label!r} labels an entry of {year}"
            if first:
                assert label.startswith(first), f"{chapter.name}: {label!r} labels {first}'s"


def test_cross_references_read_as_words():
    text = edition._Converter({"cells": []}).inline(
        "see exercise {ref}`ex-a` and {doc}`09_transformers_everywhere`"
    )
    assert "exercise ex-a" in text  # an unknown label stays as it is
    assert "chapter 9, *Transformers everywhere*" in text
    conv = edition._Converter({"cells": []})
    conv.labels["ex-b"] = "Exercise (Predict)"
    assert conv.inline("exercise {ref}`ex-b`") == "Exercise (Predict)"


def _markdown_cells(folder: str, chapter: Path):
    for i, cell in enumerate(_edition(folder, chapter)["cells"]):
        if cell["cell_type"] == "markdown":
            yield i, "".join(cell["source"])


#: What the conversion must never leave in an edition's prose (issue 30, section 5): a raw TeX
#: command, a kind named twice, a chapter's file name, a citation naming its authors twice, and
#: the website's output check (nbval), which means nothing in Jupyter or Colab.
NEVER = {
    "a raw \\url": re.compile(r"\\url\b"),
    "exercise Exercise": re.compile(r"\b(exercise|theorem|lemma)\s+\1\b", re.I),
    "a chapter's file name": re.compile(
        "|".join(r"\b" + re.escape(p.stem) + r"\b" for p in CHAPTERS)
    ),
    "a citation naming its authors twice": edition.DOUBLED_CITATION,
    "the website's output check": re.compile(r"output\s+check|\bnbval\b"),
}


@pytest.mark.parametrize("folder", list(edition.EDITIONS))
@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_no_website_residue_in_the_prose(chapter, folder):
    for i, text in _markdown_cells(folder, chapter):
        for what, pattern in NEVER.items():
            m = pattern.search(text)
            assert not m, f"{folder}/{chapter.name} cell {i}: {what}: {m.group(0)!r}"


def _collapsed(cell: dict) -> bool:
    meta = cell.get("metadata", {})
    return (
        meta.get("jupyter", {}).get("source_hidden") is True
        and meta.get("cellView") == "form"
        and "".join(cell["source"]).startswith("# @title ")
    )


@pytest.mark.parametrize("folder", list(edition.EDITIONS))
@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_what_the_prose_calls_collapsed_is_collapsed(chapter, folder):
    """Deeper code is collapsed as on the website (Jupyter's source_hidden, Colab's form view),
    so "the collapsed cell below" names a collapsed cell in Jupyter and Colab too."""
    cells = _edition(folder, chapter)["cells"]
    for i, cell in enumerate(cells):
        if edition.DEEPER_TAG in cell["metadata"].get("tags", []):
            assert _collapsed(cell), f"{folder}/{chapter.name} cell {i}: Deeper, not collapsed"
    for i, text in _markdown_cells(folder, chapter):
        if re.search(r"collapsed\s+cell|cell\s+below\s+\(collapsed\)", text):
            nearby = [c for c in cells[i + 1 : i + 5] if c["cell_type"] == "code"]
            assert any(_collapsed(c) for c in nearby), (
                f"{folder}/{chapter.name} cell {i} speaks of a collapsed cell; none follows"
            )


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_solution_prose_is_folded(chapter):
    """A solution's prose is never in plain view under its heading, also where the chapter
    writes it in a cell of its own; and no fold is empty."""
    for i, text in _markdown_cells("notebooks", chapter):
        if "<details>" in text:
            for body in re.findall(r"</summary>(.*?)</details>", text, re.S):
                assert body.strip(), f"{chapter.name} cell {i}: an empty fold"
        cell = _edition("notebooks", chapter)["cells"][i]
        if edition.SOLUTION_TAG not in cell["metadata"].get("tags", []):
            continue
        outside = re.sub(r"<details>.*?</details>", "", text, flags=re.S)
        outside = outside.replace("#### Solution", "").replace(edition.SOLUTION_CODE_ONLY, "")
        assert not outside.strip(), f"{chapter.name} cell {i}: solution prose in plain view"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_the_student_edition_does_not_speak_of_its_solutions(chapter):
    """It has none: no "the solutions are collapsed", no fold to open."""
    for i, text in _markdown_cells("student", chapter):
        assert not re.search(r"solutions?\s+(is|are)\s+collapsed|Show the solution", text), (
            f"student/{chapter.name} cell {i}: speaks of solutions it does not have"
        )


def test_the_conversion_names_nothing_twice():
    conv = edition._Converter({"cells": []})
    conv.labels["ex-c"] = "Exercise 1.1 (Build: dilated convolutions)"
    # a line break between the word and the reference (the chapters wrap their prose)
    text = conv.markdown("grows by a factor $k$ per layer, exercise\n{ref}`ex-c`), and")
    assert "exercise\nExercise" not in text and "Exercise 1.1 (Build" in text
    text = conv.markdown("Child et al. {cite:p}`ch08-child2019generating` used two heads")
    assert text == "Child et al. (2019) used two heads"
    text = conv.markdown("Sparse Transformers {cite:p}`ch08-child2019generating` use two")
    assert "(Child et al., 2019)" in text  # a citation the prose does not name: kept whole


def test_the_editions_rewrite_what_the_website_says_of_itself():
    nb = {
        "cells": [
            {
                "cell_type": "markdown",
                "metadata": {},
                "source": "(Every view is drawn in advance; its cell is left out of the book's "
                "output\ncheck, since widget ids change from run to run, and the static figure "
                "below is\nchecked.) The solutions are collapsed, and\ndefine their own names, "
                "so running every cell leaves your answers in place.",
            }
        ]
    }
    full = "".join(edition.convert(nb)["cells"][0]["source"])
    assert full.startswith("(Every view is drawn in advance.) The solutions are collapsed")
    student = "".join(edition.convert(nb, solutions=False)["cells"][0]["source"])
    assert "This edition leaves the solutions out, so running every cell" in student


@pytest.mark.parametrize("folder", list(edition.EDITIONS))
@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_colab_hides_what_the_website_hides(chapter, folder):
    """Issue 45: a code cell whose input the website hides (tagged hide-input or hide-cell:
    bookkeeping, plotting, the key picture) and the setup cell (collapsed on the website by
    _ext/book_site.py) open in Colab's form view, titled with what the cell does; the other
    code cells of the main path stay open."""
    source_cells = [c for c in _nb(chapter)["cells"] if c["cell_type"] == "code"]
    by_id = {c.get("id"): c for c in source_cells}
    seen_setup = False
    for cell in _edition(folder, chapter)["cells"]:
        if cell["cell_type"] != "code":
            continue
        original = by_id[cell.get("id")]
        tags = set(original["metadata"].get("tags", []))
        source = "".join(original["source"])
        where = f"{folder}/{chapter.name} {cell.get('id')}"
        if edition.DEEPER_TAG in tags or edition.SOLUTION_TAG in tags:
            continue  # collapsed their own way (test_what_the_prose_calls_collapsed_is_...)
        hidden = bool(tags & {"hide-input", "hide-cell"})
        is_setup = source == edition.setup_cell_source()
        seen_setup = seen_setup or is_setup
        if hidden or is_setup:
            assert _collapsed(cell), f"{where}: the website hides its code; Colab shows it"
            title = "".join(cell["source"]).splitlines()[0][len(edition.TITLE_LINE) :]
            assert title.strip() and title == edition.cell_title(original), where
            assert len(edition.TITLE_LINE + title) <= 79, f"{where}: title too long"
            if is_setup:
                assert title == edition.SETUP_TITLE
        else:
            assert cell["metadata"].get("cellView") != "form", f"{where}: shown on the website"
    assert seen_setup, f"{chapter.name}: no setup cell"


def test_cell_titles_say_what_the_cell_does():
    def cell(source, tags=(), **meta):
        return {"cell_type": "code", "metadata": {"tags": list(tags), **meta}, "source": source}

    bookkeeping = cell(
        "# Bookkeeping (collapsed on the website): the figures the prose quotes (rec).\n"
        "# More words.\nrec('x', 1)",
        ["hide-input"],
    )
    assert edition.cell_title(bookkeeping) == "Bookkeeping: the figures the prose quotes"
    given = cell("x = 1", ["hide-input"], selfattn={"title": "The table of the grid"})
    assert edition.cell_title(given) == "The table of the grid"
    assert edition.cell_title(cell("plt.plot([1])", ["hide-input"])) == edition.FIGURE_TITLE
    assert edition.cell_title(cell("x = 1", ["hide-input"])) == edition.BOOKKEEPING_TITLE
    assert edition.cell_title(cell(edition.setup_cell_source())) == edition.SETUP_TITLE
    long = cell("# " + "word " * 40, ["hide-input"])
    assert len(edition.cell_title(long)) <= edition.TITLE_WIDTH
    nb = {
        "cells": [cell("# Plot the curve.\nplt.plot([1])", ["hide-input"], id="a")],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    nb["cells"][0].update(outputs=[], execution_count=None, id="a")
    out = edition.convert(nb)["cells"][0]
    assert out["source"].startswith("# @title Plot the curve\n")
    assert _collapsed(out)
    assert nb["cells"][0]["source"].startswith("# Plot")  # the chapter is unchanged


def test_readme_sends_local_readers_to_the_plain_edition():
    """Issue 45: "Run a chapter locally" opens notebooks/ (plain Jupyter markdown), not the
    MyST sources in chapters/, whose roles show raw in Jupyter."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    item = re.search(r"^- \*\*Run a chapter locally\*\*:(.*?)(?=^- \*\*)", readme, re.M | re.S)
    assert item, "README.md: no 'Run a chapter locally' item"
    assert "notebooks/chapters/" in item[1]
    assert not re.search(r"open a\s+notebook in `chapters/`", item[1])
