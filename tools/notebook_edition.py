"""The notebook edition: the chapters as plain Jupyter notebooks, for Jupyter and Colab.

    python tools/notebook_edition.py            # write notebooks/ and student/ (make notebooks)
    python tools/notebook_edition.py --check    # fail if either folder is out of date
    python tools/notebook_edition.py chapters/02_queries_keys_values.ipynb  # these chapters only

The chapters are MyST notebooks: their markdown holds roles (``{glue:text}`key```,
``{cite:p}`key```, ``{prf:ref}`label```) and directives (theorems, proofs, exercises,
solutions, admonitions, the bibliography) that Jupyter Book renders and that Jupyter and
Colab show raw. This writes, from each chapter and its executed outputs, a notebook whose
markdown is plain Jupyter markdown:

* a glued number is replaced by its value, formatted as the role asks (myst-nb's own
  formatting), read from the glue outputs stored in the same notebook;
* a citation becomes author-year text ("Child et al. (2019)" where the prose already names the
  authors), and the bibliography a reference list of the works the chapter cites (pybtex,
  from ``references.bib``), each labelled with its own entry's authors and year;
* theorems, proofs and admonitions become quotes with a bold title ("Deeper" parts say
  they are optional), exercises and solutions become headings;
* code cells are unchanged except that bare bookkeeping calls (``rec("name", value)``,
  which store a figure for the website's prose) are left out, and code cells of a Deeper
  part are collapsed as on the website (``jupyter.source_hidden``, Colab's form view, whose
  title line says the cell is optional). Solution cells stay collapsed the same way and define
  their own names, so "Run all" keeps the reader's answers; a solution's prose is folded
  (``<details>``) under its heading, also where it sits in cells of its own;
* sentences about the website's machinery (the output check that leaves the explorers out) are
  left out (:data:`EDITION_WORDING`), and the student edition, which has no solutions, does not
  say they are collapsed (:data:`STUDENT_WORDING`);
* exercises are numbered as the website and the checkers number them, ``chapter.position``
  ("Exercise 3.2: ..."), and so are references to them;
* a recorded figure keeps its PNG and drops its SVG copy (the website offers that one);
* a code cell whose input the website hides (tagged ``hide-input`` or ``hide-cell``: the
  bookkeeping, the plotting, the key picture's diagram) and the setup cell (whose input the
  website collapses too, ``_ext/book_site.py``) open in Colab's form view (``cellView: "form"``,
  Jupyter's ``source_hidden``), under a first line ``# @title <what the cell does>``
  (:func:`cell_title`: the cell's ``selfattn.title`` metadata, else its leading comment, else a
  title from its tags), so that Colab shows the title and the output, as the website does.
  A ``hide-cell`` cell (input and output behind one toggle on the website) gets the same form
  view: Colab can fold a cell's code, not its output, and that output is what the cell is for;
* a "predict, then run" cell (tagged ``predict``) loses its outputs, so its answer is not
  shown before the reader has predicted and run it (the website collapses the same output:
  the cell is also tagged ``hide-output``; tests/test_predict.py checks every edition).

Two editions: ``notebooks/chapters/`` (everything; the website's Colab button and ``.ipynb``
download) and ``student/chapters/`` (the same without solutions: nbconvert's
``TagRemovePreprocessor`` drops every cell tagged ``solution``); and the same two in Chinese,
``notebooks/zh/chapters/`` (the Chinese site's buttons) and ``student/zh/chapters/``, from the
Chinese edition's catalogs (:data:`ZH_EDITIONS`, :func:`convert_zh`). Both are committed and
kept in sync by ``tests/test_notebook_edition.py``, as is the chapter registry
``chapters/results/toc.json`` (``tools/book.py``), which ``make notebooks`` also writes.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import sys
from functools import lru_cache
from pathlib import Path

from myst_nb.core.variables import format_plain_text
from nbconvert.preprocessors import TagRemovePreprocessor
from nbformat import from_dict

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from tools.book import REGISTRY, registry_text, setup_cell_source, toc_chapters  # noqa: E402

EDITIONS = {"notebooks": True, "student": False}  # folder -> with solutions
GLUE_MIME = "application/papermill.record/text/plain"
#: A recorded figure's second format, for the website's SVG downloads (_ext/book_figures.py);
#: the notebooks keep the PNG, which Jupyter and Colab show.
SVG_MIME = "image/svg+xml"
SOLUTION_TAG = "solution"
PREDICT_TAG = "predict"
DEEPER_TAG = "deeper"
# A Deeper part's code cell is collapsed on the website (tagged hide-cell); in the editions it is
# collapsed too, as the solutions are: Jupyter's ``source_hidden`` and Colab's form view, whose
# title (this first line) says what the cell is. So "the collapsed cell below" is true there.
DEEPER_COMMENT = "# @title Deeper (optional): skip this cell on a first reading.\n"
COLLAPSED = {"jupyter": {"source_hidden": True}, "cellView": "form"}
#: Tags whose cells the website shows without their code (myst-nb): form view in the editions.
HIDDEN_INPUT_TAGS = {"hide-input", "hide-cell"}
TITLE_LINE = "# @title "
#: The setup cell's title (the website's one-line summary of it says the same, _ext/book_site.py).
SETUP_TITLE = "Setup: installs the library on Colab, seeds, picks the device"
IDEA_PICTURE_TITLE = "The chapter's key picture (a diagram from selfattn.diagrams)"
FIGURE_TITLE = "Figure: the code that draws it (reading it is optional)"
BOOKKEEPING_TITLE = "Bookkeeping: figures and checks for the text (reading is optional)"
#: A comment's asides in parentheses ("(collapsed on the website)", "(rec)") stay out of a title.
ASIDE = re.compile(r"\s*\([^()]*\)")
TITLE_WIDTH = 70  # "# @title " and the title within the chapters' 79 columns
SOLUTION_SUMMARY = "Show the solution (try the exercise first; its code cell is collapsed)"
#: A solution whose prose sits in cells of its own: the first opens folded under the heading...
SOLUTION_CODE_ONLY = "*Try the exercise first: the solution's code cell below is collapsed.*"
#: ... and prose after the solution's code is folded on its own.
SOLUTION_MORE = "Show the rest of the solution"
BOOKKEEPING = {"rec", "record"}

ROLE = re.compile(r"\{([a-z]+(?::[a-z]+)?)\}`([^`]*)`")
FENCE_OPEN = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})\{(?P<name>[^}]+)\}[ \t]*(?P<arg>.*)$"
)
PLAIN_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
TARGET = re.compile(r"^\([A-Za-z0-9_:\-]+\)=[ \t]*$")
EQ_LABEL = re.compile(r"(\$\$)[ \t]*\([A-Za-z0-9_:\-]+\)[ \t]*$")
PRF_KINDS = {
    "prf:theorem": "Theorem",
    "prf:lemma": "Lemma",
    "prf:proposition": "Proposition",
    "prf:corollary": "Corollary",
    "prf:definition": "Definition",
    "prf:example": "Example",
    "prf:remark": "Remark",
}
ADMONITIONS = {
    "note": "Note",
    "tip": "Tip",
    "hint": "Hint",
    "important": "Important",
    "warning": "Warning",
    "caution": "Caution",
    "attention": "Attention",
    "seealso": "See also",
}


def _words(text: str) -> str:
    """A regex for ``text`` across any line breaks (the chapters wrap their prose)."""
    return r"\s+".join(re.escape(w) for w in text.split())


#: Sentences about the website's machinery that mean nothing in Jupyter or Colab, and what the
#: editions say instead: the output check (strict nbval) leaves the explorers' cells out.
EDITION_WORDING = [
    (
        re.compile(
            _words("; its cell is left out of the book's output check, since widget ids change")
            + r"\s+"
            + _words("from run to run, and the static")
            + r"\s+[^.]*?\s+(?:is|are)\s+checked\."
        ),
        ".",
    ),
]
#: The student edition has no solutions: what the chapters say of them there.
STUDENT_WORDING = [
    (
        re.compile(
            _words("The solutions are collapsed")
            + r",?\s+"
            + _words("and define their own names, so")
        ),
        "This edition leaves the solutions out, so",
    ),
]


# ----------------------------------------------------------------------------- citations


@lru_cache(maxsize=1)
def _bibliography():
    from pybtex.database import parse_file

    return parse_file(str(ROOT / "references.bib"))


def _bib_key(key: str) -> str:
    """A chapter cites ``ch04-vaswani2017attention``: the entry is ``vaswani2017attention``."""
    key = key.strip()
    entries = _bibliography().entries
    if key in entries:
        return key
    stripped = re.sub(r"^ch\d\d-", "", key)
    if stripped in entries:
        return stripped
    raise KeyError(f"citation {key!r} is not in references.bib")


def _plain(text: str) -> str:
    from pybtex.richtext import Text

    return str(Text.from_latex(text)) if "{" in text or "\\" in text else text


def _authors(entry) -> str:
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_plain(" ".join(p.last_names)) for p in people]
    if not names:
        return _plain(entry.fields.get("organization", entry.fields.get("title", "Anon.")))
    if len(names) == 1:
        return names[0]
    if len(names) == 2:
        return f"{names[0]} and {names[1]}"
    return f"{names[0]} et al."


def _cite(key: str, textual: bool) -> str:
    entry = _bibliography().entries[_bib_key(key)]
    year = entry.fields.get("year", "n.d.")
    return f"{_authors(entry)} ({year})" if textual else f"{_authors(entry)}, {year}"


def _reference_list(keys: list[str]) -> str:
    """The works cited, formatted by pybtex's plain style, one list item each."""
    from pybtex.database import BibliographyData
    from pybtex.plugin import find_plugin

    if not keys:
        return ""
    bib = _bibliography()
    # by the cited name, then the key, so that two entries with one name (DeepSeek-AI, 2024)
    # come out in the same order on every run (a set has no order)
    wanted = sorted({_bib_key(k) for k in keys}, key=lambda k: (_cite(k, True).lower(), k))
    data = BibliographyData(entries={k: bib.entries[k] for k in wanted})
    style = find_plugin("pybtex.style.formatting", "plain")(label_style="alpha")
    backend = find_plugin("pybtex.backends", "markdown")()
    # pybtex sorts the entries its own way (alpha labels): pair each with its own label by key
    formatted = {f.key: f for f in style.format_entries(data.entries.values())}
    lines = []
    for key in wanted:
        body = formatted[key].text.render(backend)
        # The markdown backend escapes punctuation (\*, \_); TeX commands (\sqrt) stay, but
        # an address is a link.
        body = re.sub(r"\\(?=[^A-Za-z])", "", body).replace("\n", " ")
        body = re.sub(r"\\url\s*\{?(\S+?)\}?(?=[\s.,;]*$|[\s,;])", r"<\1>", body)
        lines.append(f"- **{_cite(key, True)}.** {body}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- markdown


def _glue_values(nb: dict) -> dict[str, str]:
    """``{key: text/plain}`` of every glue output stored in the notebook."""
    values = {}
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            scrap = out.get("metadata", {}).get("scrapbook")
            if scrap and GLUE_MIME in out.get("data", {}):
                values[scrap["name"]] = out["data"][GLUE_MIME]
    return values


def _labels(nb: dict, chapter: int | None = None) -> dict[str, str]:
    """``{label: how to name it in text}`` for the labelled directives of the notebook.

    An exercise is named by its number, ``chapter.position`` ("Exercise 3.2 (title)"), when
    the chapter's number is known.
    """
    names = {}
    exercises = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        lines = "".join(cell["source"]).splitlines()
        for i, line in enumerate(lines):
            m = FENCE_OPEN.match(line)
            if not m:
                continue
            kind = PRF_KINDS.get(m["name"], m["name"].split(":")[-1].replace("-start", ""))
            head = kind.capitalize()
            if m["name"] == "exercise-start":
                exercises += 1
                if chapter is not None:
                    head = f"Exercise {chapter}.{exercises}"
            for option in lines[i + 1 : i + 6]:
                om = re.match(r"^\s*:label:\s*(\S+)", option)
                if om:
                    title = m["arg"].strip()
                    names[om[1]] = f"{head} ({title})" if title else head
                    break
    return names


#: "Child et al. (Child et al., 2019)": the authors named in the prose, then by the citation.
DOUBLED_CITATION = re.compile(
    r"(?P<who>\b[A-Z][^\s()]*(?: et al\.| and [A-Z][^\s()]*)?)\s+\((?P=who), (?P<year>[^();]+)\)"
)
#: "exercise {ref}`label`" once the label reads "Exercise 3.1 (...)": "exercise Exercise".
DOUBLED_KIND = re.compile(r"\b(exercise|theorem|lemma)\s+(?=\1\s+(\d+\.\d+\s+)?\()", re.I)


def _once(text: str) -> str:
    """``text`` without what the conversion names twice: the authors of a citation whose
    authors the prose already names ("Child et al. (2019)"), the kind of a labelled exercise
    or theorem ("Exercise 1.1 (...)", not "exercise Exercise 1.1 (...)")."""
    text = DOUBLED_CITATION.sub(r"\g<who> (\g<year>)", text)
    return DOUBLED_KIND.sub("", text)


class _Converter:
    def __init__(self, nb: dict, chapter: int | None = None):
        self.glue = _glue_values(nb)
        self.labels = _labels(nb, chapter)
        self.chapter = chapter
        self.exercises = 0  # exercises met so far: the next one's position in the chapter
        self.cited: list[str] = []

    # roles -----------------------------------------------------------------------------
    def role(self, m: re.Match) -> str:
        name, content = m[1], m[2]
        if name.startswith("glue"):
            key, _, fmt = content.partition(":")
            if key not in self.glue:
                raise KeyError(f"glue key {key!r} has no stored value in the notebook")
            return format_plain_text(self.glue[key], fmt)
        if name in ("cite:p", "cite:t", "cite"):
            keys = [k.strip() for k in content.split(",") if k.strip()]
            self.cited.extend(keys)
            parts = [_cite(k, name == "cite:t") for k in keys]
            return "; ".join(parts) if name == "cite:t" else f"({'; '.join(parts)})"
        if name == "math":
            return f"${content}$"
        text, _, target = content.partition("<")
        if target:  # {ref}`the words <label>`
            return text.strip()
        if name == "doc":  # another chapter: its title from the registry
            number = re.search(r"(?:^|/)(\d\d)_\w+$", content.strip())
            titles = json.loads(registry_text())
            if number and f"ch{number[1]}" in titles:
                count, _, title = titles[f"ch{number[1]}"].partition(". ")
                return f"chapter {count}, *{title}*"
            return content.strip()
        if name in ("prf:ref", "ref", "numref", "eq"):
            return self.labels.get(content.strip(), content.strip())
        return content  # {term}, {abbr}, ...: the words themselves

    def inline(self, text: str) -> str:
        return _once(ROLE.sub(self.role, text))

    # directives ------------------------------------------------------------------------
    def block(self, lines: list[str]) -> list[str]:
        """Convert a list of markdown lines (directives may nest)."""
        out: list[str] = []
        i = 0
        while i < len(lines):
            line = lines[i]
            plain = PLAIN_FENCE.match(line)
            m = FENCE_OPEN.match(line)
            if plain and not m:  # a code block: copied as it is, up to its closing fence
                fence = plain[1]
                out.append(line)
                i += 1
                while i < len(lines):
                    out.append(lines[i])
                    if lines[i].strip().startswith(fence) and set(lines[i].strip()) <= {fence[0]}:
                        break
                    i += 1
                i += 1
                continue
            if not m:
                if TARGET.match(line):
                    i += 1
                    continue
                out.append(self.inline(EQ_LABEL.sub(r"\1", line)))
                i += 1
                continue
            fence = m["fence"]
            j, options = i + 1, {}
            while j < len(lines) and re.match(r"^\s*:[\w-]+:", lines[j]):
                om = re.match(r"^\s*:([\w-]+):\s*(.*)$", lines[j])
                options[om[1]] = om[2]
                j += 1
            body, depth = [], 1
            while j < len(lines):
                inner = FENCE_OPEN.match(lines[j])
                stripped = lines[j].strip()
                if inner and inner["fence"][0] == fence[0] and len(inner["fence"]) == len(fence):
                    depth += 1
                elif stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                    if len(stripped) == len(fence):
                        depth -= 1
                    if depth == 0:
                        break
                body.append(lines[j])
                j += 1
            out.extend(self.directive(m["name"], m["arg"].strip(), options, self.block(body)))
            i = j + 1
        return out

    def directive(self, name: str, arg: str, options: dict, body: list[str]) -> list[str]:
        arg = self.inline(arg)
        classes = options.get("class", "").split()
        if name in PRF_KINDS:
            title = f"{PRF_KINDS[name]} ({arg})" if arg else PRF_KINDS[name]
            return _quote([f"**{title}.**", "", *body])
        if name == "prf:proof":
            return _quote(["*Proof.*", "", *body, "", "∎"])
        if name in ("admonition", "dropdown") or name in ADMONITIONS:
            title = arg or ADMONITIONS.get(name, "Note")
            if "deeper" in classes or title.lower().startswith("deeper"):
                topic = re.sub(r"^deeper:?\s*", "", title, flags=re.I)
                title = f"Deeper (optional): {topic}" if topic else "Deeper (optional)"
            return _quote([f"**{title}**", "", *body])
        if name == "exercise-start":
            self.exercises += 1
            head = "Exercise"
            if self.chapter is not None:
                head = f"Exercise {self.chapter}.{self.exercises}"
            return [f"### {head}: {arg}" if arg else f"### {head}", "", *body]
        if name == "solution-start":  # its prose folded until opened (Jupyter, Colab)
            return [
                "#### Solution",
                "",
                f"<details><summary>{SOLUTION_SUMMARY}</summary>",
                "",
                *body,
                "",
                "</details>",
            ]
        if name in ("exercise-end", "solution-end"):
            return body
        if name == "bibliography":  # under the chapter's own "References" heading
            return [self.references_marker]
        if name == "math":
            return ["$$", *body, "$$"]
        if name in ("figure", "image"):
            return [f"![{options.get('alt', '')}]({arg})", *body]
        return [f"**{arg}**" if arg else "", *body]

    references_marker = "<!-- references -->"

    def markdown(self, source: str) -> str:
        # Lines are converted one by one: what names a thing twice across a line break, again.
        return _once("\n".join(self.block(source.splitlines())).strip("\n"))


def _quote(lines: list[str]) -> list[str]:
    return [f"> {line}" if line.strip() else ">" for line in lines]


# ----------------------------------------------------------------------------- code cells


def _without_bookkeeping(source: str) -> str:
    """The cell without its bare ``rec(...)`` / ``record(...)`` statements (they only glue)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics: leave the cell as it is
        return source
    drop: set[int] = set()
    for node in tree.body:
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id in BOOKKEEPING
        ):
            drop.update(range(node.lineno, node.end_lineno + 1))
    if not drop:
        return source
    lines = source.splitlines()
    kept = [line for n, line in enumerate(lines, 1) if n not in drop]
    text = "\n".join(kept)
    text = re.sub(r"\n{4,}", "\n\n\n", text).strip("\n")  # at most two blank lines
    return text


def _tags(cell: dict) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def _shorten(text: str, width: int = TITLE_WIDTH) -> str:
    if len(text) <= width:
        return text
    cut = text[: width - 1].rsplit(" ", 1)[0].rstrip(" ,;:(")
    return cut + "…"


def cell_title(cell: dict, source: str | None = None) -> str:
    """What a collapsed cell does, in a line (Colab shows it as the form's title).

    The cell's ``selfattn.title`` metadata if it has one; else, for the setup cell,
    :data:`SETUP_TITLE`; for the chapter's key picture (tagged ``idea-picture``),
    :data:`IDEA_PICTURE_TITLE`; else the first sentence of the cell's leading comment (less
    its asides in parentheses); else a title from what the cell does (a figure or bookkeeping).
    """
    if source is None:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    given = cell.get("metadata", {}).get("selfattn", {}).get("title")
    if given:
        return _shorten(" ".join(str(given).split()))
    if source == setup_cell_source():
        return SETUP_TITLE
    if "idea-picture" in _tags(cell):
        return IDEA_PICTURE_TITLE
    comment = []
    for line in source.splitlines():
        if not line.startswith("#") or line.startswith(TITLE_LINE):
            break
        comment.append(line.lstrip("#").strip())
    text = ASIDE.sub("", " ".join(comment)).strip()
    sentence = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].rstrip(".")
    if sentence:
        return _shorten(sentence[:1].upper() + sentence[1:])
    if re.search(r"\bplt\.|\bviz\.|\.plot\(|\bdiagrams\.", source):
        return FIGURE_TITLE
    return BOOKKEEPING_TITLE


def _form_view(cell: dict, source: str) -> bool:
    """Whether the editions open the cell in Colab's form view (the website hides its code)."""
    tags = _tags(cell)
    if DEEPER_TAG in tags or SOLUTION_TAG in tags:  # collapsed their own way
        return False
    return bool(tags & HIDDEN_INPUT_TAGS) or source == setup_cell_source()


def convert(
    nb: dict, *, solutions: bool = True, chapter: int | None = None, zh: bool = False
) -> dict:
    """The plain-Jupyter edition of one chapter notebook (a new dict; ``nb`` is unchanged).

    ``chapter`` (its number) numbers the exercises ``chapter.position``, as the website does;
    ``zh``: the notebook is already translated (:func:`convert_zh`), its glued words and
    references are named in Chinese.
    """
    nb = copy.deepcopy(nb)
    if not solutions:
        node = from_dict(nb)
        node, _ = TagRemovePreprocessor(remove_cell_tags={SOLUTION_TAG}).preprocess(node, {})
        nb = json.loads(json.dumps(node))
    conv = (_ZhConverter if zh else _Converter)(nb, chapter)
    wording = EDITION_WORDING + ([] if solutions else STUDENT_WORDING)
    cells = []
    opener = None  # the open solution's heading cell, while its prose may still join it
    in_solution = False
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            text = conv.markdown(source)
            for pattern, replacement in wording:
                text = pattern.sub(replacement, text)
            starts, ends = "{solution-start}" in source, "{solution-end}" in source
            prose = in_solution and not starts and text.strip()
            in_solution = (in_solution or starts) and not ends
            if prose:  # a solution's prose in a cell of its own: folded, never in plain view
                if opener is not None:  # right under the heading: into its folded block
                    head, _, tail = opener["source"].rpartition("</details>")
                    opener["source"] = f"{head.rstrip()}\n\n{text}\n\n</details>{tail}"
                    continue
                text = f"<details><summary>{SOLUTION_MORE}</summary>\n\n{text}\n\n</details>"
            if not text.strip():
                continue
            cell["source"] = text
            opener = cell if starts and not ends else None
        elif cell["cell_type"] == "code":
            opener = None
            text = _without_bookkeeping(source)
            if DEEPER_TAG in _tags(cell):  # collapsed, as on the website
                if not text.startswith(DEEPER_COMMENT):
                    text = DEEPER_COMMENT + text
                cell["metadata"].update(copy.deepcopy(COLLAPSED))
            elif _form_view(cell, source):  # the website hides its code: Colab's form view
                if not text.startswith(TITLE_LINE):
                    text = f"{TITLE_LINE}{cell_title(cell, source)}\n{text}"
                cell["metadata"].update(copy.deepcopy(COLLAPSED))
            cell["source"] = text
            if PREDICT_TAG in _tags(cell):  # the answer: shown when the reader runs the cell
                cell["outputs"] = []
                cell["execution_count"] = None
            for out in cell.get("outputs", []):  # each figure once, as the reader's run has it
                out.get("data", {}).pop(SVG_MIME, None)
        cells.append(cell)
    empty = f"<details><summary>{SOLUTION_SUMMARY}</summary>\n\n\n</details>"
    for cell in cells:  # a solution with no prose: no empty fold, a line on its code cell
        if cell["cell_type"] == "markdown" and empty in cell["source"]:
            cell["source"] = cell["source"].replace(empty, SOLUTION_CODE_ONLY)
    refs = _reference_list(conv.cited)
    for cell in cells:
        if cell["cell_type"] == "markdown" and conv.references_marker in cell["source"]:
            cell["source"] = cell["source"].replace(conv.references_marker, refs)
    nb["cells"] = cells
    return nb


# ----------------------------------------------------------------------------- Chinese edition

#: The Chinese notebook edition (the Chinese site's Colab and download buttons): folder -> with
#: solutions. Built from the same chapters and the Chinese edition's catalogs (tools/i18n.py):
#: the markdown from the chapter's catalog, the glued words from glue.po, the exercise titles
#: and alt texts from their contexts; the checkers speak Chinese (the setup cell's
#: ``selfattn.set_language("zh")``, and the stored outputs' checker lines translated).
ZH_EDITIONS = {"notebooks/zh": True, "student/zh": False}
ZH_SETUP_LINE = 'selfattn.set_language("zh")  # 练习检查器用中文输出'
#: The words the conversion itself writes, in Chinese.
ZH_KINDS = {
    "Theorem": "定理",
    "Lemma": "引理",
    "Proposition": "命题",
    "Corollary": "推论",
    "Definition": "定义",
    "Example": "例",
    "Remark": "注",
    "Exercise": "练习",
    "Solution": "解答",
    "Proof": "证明",
}
ZH_ADMONITIONS = {
    "Note": "注",
    "Tip": "提示",
    "Hint": "提示",
    "Important": "重要",
    "Warning": "警告",
    "Caution": "小心",
    "Attention": "注意",
    "See also": "另见",
}
ZH_TITLES = {
    SETUP_TITLE: "设置：在 Colab 上安装本书的库，设定随机种子，选择设备",
    IDEA_PICTURE_TITLE: "本章的核心图（由 selfattn.diagrams 绘制的示意图）",
    FIGURE_TITLE: "图：绘制它的代码（可以不读）",
    BOOKKEEPING_TITLE: "记录：正文用到的图和检查（可以不读）",
}
#: The student edition has no solutions: what the Chinese chapters say of them there.
ZH_STUDENT_WORDING = [
    (re.compile(r"参考答案默认折叠，并使用自己的变量名，所以"), "这个版本不含参考答案，所以")
]
ZH_DEEPER_COMMENT = "# @title 深入（可选）：第一次阅读时可以跳过这个单元格。\n"
ZH_MARKDOWN = [
    (re.compile(r"^### Exercise (\d+\.\d+): ", re.M), r"### 练习 \1："),
    (re.compile(r"^### Exercise (\d+\.\d+)$", re.M), r"### 练习 \1"),
    (re.compile(r"^#### Solution$", re.M), "#### 解答"),
    (re.compile(re.escape(SOLUTION_SUMMARY)), "显示解答（请先自己做练习；解答的代码单元已折叠）"),
    (re.compile(re.escape(SOLUTION_CODE_ONLY)), "*请先自己做练习：下面解答的代码单元已折叠。*"),
    (re.compile(re.escape(SOLUTION_MORE)), "显示解答的其余部分"),
    (re.compile(r"\*Proof\.\*"), "*证明。*"),
    (re.compile(r"Deeper \(optional\): 深入[：:]\s*"), "深入（可选）："),
    (re.compile(r"Deeper \(optional\): "), "深入（可选）："),
    (re.compile(r"Deeper \(optional\)"), "深入（可选）"),
    (
        re.compile(r"\*\*(" + "|".join(PRF_KINDS.values()) + r") \((.*?)\)\.\*\*"),
        lambda m: f"**{ZH_KINDS[m[1]]}（{m[2]}）**",
    ),
    (
        re.compile(r"\*\*(" + "|".join(PRF_KINDS.values()) + r")\.\*\*"),
        lambda m: f"**{ZH_KINDS[m[1]]}**",
    ),
    (
        re.compile(r"^(> )?\*\*(" + "|".join(ZH_ADMONITIONS) + r")\*\*$", re.M),
        lambda m: f"{m[1] or ''}**{ZH_ADMONITIONS[m[2]]}**",
    ),
]


def _library_language():
    """selfattn.i18n, loaded from the source tree on its own (no torch), speaking Chinese."""
    import importlib.util

    path = ROOT / "lib" / "selfattn" / "i18n.py"
    spec = importlib.util.spec_from_file_location("_notebook_edition_selfattn_i18n", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.set_language("zh")
    return module


@lru_cache(maxsize=64)
def _zh_catalogs(doc: str) -> tuple[dict, dict, dict]:
    """``(messages, exercise titles, alt texts)`` of ``doc``'s Chinese catalog (translated
    messages only), and the glued words ``{(key, English): Chinese}``."""
    from tools import i18n

    found: dict[str, dict] = {"": {}, i18n.EXERCISE_CONTEXT: {}, i18n.ALT_CONTEXT: {}}
    path = i18n.catalog(doc)
    if path.exists():
        for m in i18n.read(path):
            if m.id and m.string and not m.fuzzy and (m.context or "") in found:
                found[m.context or ""][" ".join(m.id.split())] = m.string
    return found[""], found[i18n.EXERCISE_CONTEXT], found[i18n.ALT_CONTEXT]


@lru_cache(maxsize=1)
def _zh_glue() -> dict[tuple[str, str], str]:
    from tools import i18n

    if not i18n.GLUE_CATALOG.exists():
        return {}
    return {
        (m.context, m.id): m.string
        for m in i18n.read(i18n.GLUE_CATALOG)
        if m.id and m.context and m.string and not m.fuzzy
    }


_LIST_ITEM = re.compile(r"^(\s*(?:[-*+]|\d+[.)])\s+)(.*)$")
_HEADING = re.compile(r"^(#{1,6}\s+)(.*)$")
_INTERRUPTS = re.compile(r"^\s*(?:[-*+]|1[.)])\s+")


def _sibling(line: str, marker: str) -> bool:
    """Whether ``line`` starts an item of the list whose item starts with ``marker``."""
    found = _LIST_ITEM.match(line)
    indent = len(marker) - len(marker.lstrip())
    return bool(found) and len(found[1]) - len(found[1].lstrip()) <= indent


_MATH_OPEN = re.compile(r"^\s*\$\$")
_STRUCTURE = re.compile(r"^\s*(?:`{3,}|:{3,}|~{3,}|\$\$|<|\([\w:\-]+\)=\s*$|:[\w-]+:)")


def _zh_text(text: str, messages: dict) -> str | None:
    key = " ".join(text.split())
    if key in messages:
        return messages[key]
    # A theorem's title: Sphinx's message is in parentheses, "(A causal mask ...)".
    titled = messages.get(f"({key})")
    if titled:
        return re.sub(r"^[（(](.*)[）)]$", r"\1", titled)
    # A proof's first paragraph: Sphinx's message starts with the proof's title.
    proof = messages.get(f"Proof. {key}")
    return re.sub(r"^证明[。.：:]\s*", "", proof) if proof else None


def translate_markdown(source: str, messages: dict, titles: dict) -> str:
    """A chapter's MyST markdown with each paragraph, heading, list item, table cell, quote
    and directive title the catalog translates in Chinese (the rest as it is: math, code,
    directives' options and fences)."""
    lines = source.split("\n")
    out: list[str] = []
    i = 0
    fence = None  # the closing fence of a code block being copied as it is
    while i < len(lines):
        line = lines[i]
        if fence is not None:
            out.append(line)
            if line.strip() == fence:
                fence = None
            i += 1
            continue
        opened = FENCE_OPEN.match(line)
        if opened:
            arg = opened["arg"].strip()
            zh = titles.get(arg) if opened["name"] == "exercise-start" else None
            zh = zh or (_zh_text(arg, messages) if arg else None)
            out.append(
                line[: len(line) - len(line.lstrip())] + line.strip()[: -len(arg)] + zh
                if zh and line.rstrip().endswith(arg)
                else line
            )
            i += 1
            continue
        plain = PLAIN_FENCE.match(line)
        if plain:  # a code block (or a directive's closing fence): as it is
            rest = line.strip()[len(plain[1]) :].strip()
            if rest:  # ```python: copied to its closing fence
                fence = plain[1]
            out.append(line)
            i += 1
            continue
        if _MATH_OPEN.match(line):
            out.append(line)
            closed = line.strip() != "$$" and line.rstrip().endswith("$$")
            i += 1
            while not closed and i < len(lines):
                out.append(lines[i])
                closed = lines[i].rstrip().endswith("$$")
                i += 1
            continue
        if not line.strip() or _STRUCTURE.match(line):
            out.append(line)
            i += 1
            continue
        if line.lstrip().startswith(">"):
            j = i
            while j < len(lines) and lines[j].lstrip().startswith(">"):
                j += 1
            inner = [re.sub(r"^\s*> ?", "", x) for x in lines[i:j]]
            body = translate_markdown("\n".join(inner), messages, titles)
            out.extend(f"> {x}" if x.strip() else ">" for x in body.split("\n"))
            i = j
            continue
        if line.lstrip().startswith("|"):
            cells = line.split("|")
            out.append(
                "|".join(
                    f" {_zh_text(c, messages)} " if c.strip() and _zh_text(c, messages) else c
                    for c in cells
                )
            )
            i += 1
            continue
        head = _HEADING.match(line)
        if head:
            zh = _zh_text(head[2], messages)
            out.append(head[1] + zh if zh else line)
            i += 1
            continue
        item = _LIST_ITEM.match(line)
        prefix = item[1] if item else line[: len(line) - len(line.lstrip())]
        body = [item[2] if item else line.strip()]
        j = i + 1
        while (
            j < len(lines)
            and lines[j].strip()
            # a bullet or "1." interrupts a paragraph (CommonMark), and a list item ends at
            # its list's next marker ("800." further in is a line of the item's text)
            and not _INTERRUPTS.match(lines[j])
            and not (item and _sibling(lines[j], item[1]))
            and not _HEADING.match(lines[j])
            and not _STRUCTURE.match(lines[j])
            and not lines[j].lstrip().startswith((">", "|"))
        ):
            body.append(lines[j].strip())
            j += 1
        zh = _zh_text(" ".join(body), messages)
        if zh is not None:
            out.append(prefix + zh)
        else:
            out.extend(lines[i:j])
        i = j
    return "\n".join(out)


def translate_chapter(nb: dict, doc: str) -> dict:
    """The chapter notebook ``nb`` with its markdown, exercise titles and alt texts in Chinese
    (a new dict), to be converted as the English is."""
    messages, titles, alts = _zh_catalogs(doc)
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            source = (
                "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            )
            cell["source"] = translate_markdown(source, messages, titles)
        image = cell.get("metadata", {}).get("mystnb", {}).get("image")
        if isinstance(image, dict) and isinstance(image.get("alt"), str):
            image["alt"] = alts.get(" ".join(image["alt"].split()), image["alt"])
    return nb


class _ZhConverter(_Converter):
    """The conversion in Chinese: glued words from glue.po, references named in Chinese."""

    def __init__(self, nb: dict, chapter: int | None = None):
        super().__init__(nb, chapter)
        kinds = re.compile(r"^(" + "|".join(ZH_KINDS) + r")\b ?")
        for label, name in self.labels.items():
            head = kinds.sub(lambda m: ZH_KINDS[m[1]] + " ", name, count=1)
            self.labels[label] = re.sub(r" \((.*)\)$", r"（\1）", head)

    def role(self, m: re.Match) -> str:
        text = super().role(m)
        if m[1].startswith("glue"):
            return _zh_glue().get((m[2].partition(":")[0], text), text)
        return text


def convert_zh(nb: dict, doc: str, *, solutions: bool = True, chapter: int | None = None):
    """The Chinese notebook edition of one chapter (see :data:`ZH_EDITIONS`)."""
    language = _library_language()
    out = convert(translate_chapter(nb, doc), solutions=solutions, chapter=chapter, zh=True)
    for cell in out["cells"]:
        if cell["cell_type"] == "markdown":
            text = cell["source"]
            for pattern, replacement in ZH_MARKDOWN + ([] if solutions else ZH_STUDENT_WORDING):
                text = pattern.sub(replacement, text)
            cell["source"] = text
            continue
        if cell["cell_type"] != "code":
            continue
        text = cell["source"]
        if text.startswith(DEEPER_COMMENT):
            text = ZH_DEEPER_COMMENT + text[len(DEEPER_COMMENT) :]
        for english, chinese in ZH_TITLES.items():
            if text.startswith(f"{TITLE_LINE}{english}\n"):
                text = f"{TITLE_LINE}{chinese}\n" + text[len(TITLE_LINE + english) + 1 :]
        if text.endswith(setup_cell_source()):  # the checkers speak Chinese from here on
            text = text.replace(
                "\nimport selfattn\n\n", f"\nimport selfattn\n\n{ZH_SETUP_LINE}\n", 1
            )
        cell["source"] = text
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                stream = (
                    "".join(output["text"]) if isinstance(output["text"], list) else output["text"]
                )
                output["text"] = language.translate_output(stream)
    return out


def editions(only: list[Path] | None = None) -> dict[Path, str]:
    """Every edition notebook (or those of the chapters ``only``): its path and its text."""
    out = {}
    wanted = None if only is None else {p.resolve() for p in only}
    for src in toc_chapters():
        if wanted is not None and src.resolve() not in wanted:
            continue
        nb = json.loads(src.read_text(encoding="utf-8"))
        number = re.match(r"(\d+)_", src.name)
        chapter = int(number[1]) if number else None
        for folder, solutions in EDITIONS.items():
            edition = convert(nb, solutions=solutions, chapter=chapter)
            text = json.dumps(edition, indent=1, ensure_ascii=False)
            out[ROOT / folder / "chapters" / src.name] = text + "\n"
        doc = src.resolve().relative_to(ROOT).with_suffix("").as_posix()
        for folder, solutions in ZH_EDITIONS.items():
            edition = convert_zh(nb, doc, solutions=solutions, chapter=chapter)
            text = json.dumps(edition, indent=1, ensure_ascii=False)
            out[ROOT / folder / "chapters" / src.name] = text + "\n"
    return out


def _registry_stale() -> bool:
    return not REGISTRY.exists() or REGISTRY.read_text(encoding="utf-8") != registry_text()


def write(only: list[Path] | None = None) -> None:
    if _registry_stale():
        REGISTRY.write_text(registry_text(), encoding="utf-8")
        print(f"wrote the chapter registry {REGISTRY.relative_to(ROOT)}")
    expected = editions(only)
    for folder in {**EDITIONS, **ZH_EDITIONS}:
        target = ROOT / folder / "chapters"
        target.mkdir(parents=True, exist_ok=True)
        if only is not None:
            continue  # some chapters only: the others' files are left as they are
        for stale in set(target.glob("*.ipynb")) - set(expected):
            stale.unlink()
    written = 0
    for path, text in expected.items():
        # Unchanged files are left alone: a build reading them meanwhile (make -j) never
        # sees one half-written.
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written += 1
    folders = ", ".join(f + "/chapters/" for f in {**EDITIONS, **ZH_EDITIONS})
    print(f"wrote {written} of {len(expected)} notebooks to {folders}")


def stale() -> list[str]:
    """Edition files that differ from what the chapters generate (or should not exist)."""
    expected = editions()
    wrong = [
        str(p.relative_to(ROOT))
        for p, t in expected.items()
        if not p.exists() or p.read_text(encoding="utf-8") != t
    ]
    for folder in {**EDITIONS, **ZH_EDITIONS}:
        present = set((ROOT / folder / "chapters").glob("*.ipynb"))
        wrong += [str(p.relative_to(ROOT)) for p in sorted(present - set(expected))]
    if _registry_stale():
        wrong.append(str(REGISTRY.relative_to(ROOT)))
    return wrong


def main(argv: list[str]) -> None:
    if argv == ["--check"]:
        wrong = stale()
        if wrong:
            sys.exit(f"out of date (run make notebooks): {wrong}")
        return
    if argv and (argv[0].startswith("-") or not all(Path(a).is_file() for a in argv)):
        sys.exit("usage: python tools/notebook_edition.py [--check | CHAPTER.ipynb ...]")
    write([Path(a) for a in argv] if argv else None)


if __name__ == "__main__":
    main(sys.argv[1:])
