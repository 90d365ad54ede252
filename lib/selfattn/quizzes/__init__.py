"""Concept checks: short multiple-choice and numeric questions that need no kernel.

Each chapter's questions live in a data file shipped with the package,
``selfattn/quizzes/chNN.json``, in English and in Chinese. A chapter shows them with one
cell at the end of a main section::

    from selfattn.quizzes import concept_check

    concept_check(3, "scale")

The cell's output is one HTML block that carries everything it needs: the questions in both
languages, the styles, and the JavaScript of `jupyterquiz <https://pypi.org/project/
jupyterquiz/>`_ (its own files, read from the installed package, with the two places where
it would fetch MathJax from a CDN removed). So the same saved output works in Jupyter, in
Colab and on the static website with no kernel and no network. The page shows the language
that matches its ``<html lang>`` (the Chinese website shows the Chinese questions; Jupyter
and Colab show English).

The output is a pure function of the data (no random ids: the containers are named after the
chapter and the check), so ``tools/apply_quizzes.py`` writes each cell *with* its output and
strict nbval reproduces it. Answers are shuffled in the browser, not in Python.

Data format (``chNN.json``)::

    {"chapter": 3,
     "checks": [{"id": "scale", "after": "3.2",
                 "questions": [{"type": "multiple_choice",
                                "question": {"en": "...", "zh": "..."},
                                "answers": [{"answer": {"en": "...", "zh": "..."},
                                             "correct": false,
                                             "feedback": {"en": "...", "zh": "..."}}]},
                               {"type": "numeric", "question": {...},
                                "answers": [{"value": 20, "correct": true, "feedback": {...}},
                                            {"range": [0, 1], "correct": false,
                                             "feedback": {...}},
                                            {"type": "default", "feedback": {...}}]}]}]}

``after`` names the section (``"3.2"``) at whose end the check is placed.
"""

from __future__ import annotations

import html
import json
import re
from functools import cache, lru_cache
from importlib import resources

LANGUAGES = ("en", "zh")
#: ``<html lang>`` values: the website writes ``zh_CN``/``zh-CN`` for the Chinese edition.
HTML_LANG = {"en": "en", "zh": "zh-CN"}
CELL_TAG = "concept-check"
#: Shown until the check's script has run (a front end that runs no saved script).
FALLBACK = {
    "en": "Concept check: run this cell (Shift+Enter) to show its questions.",
    "zh": "概念检查：运行此单元（Shift+Enter）即可显示题目。",
}


@cache
def load(chapter: int) -> dict:
    """The concept checks of chapter ``chapter`` (its data file, parsed)."""
    name = f"ch{int(chapter):02d}.json"
    path = resources.files(__name__).joinpath(name)
    if not path.is_file():
        raise ValueError(f"chapter {chapter} has no concept checks ({name} is not shipped)")
    return json.loads(path.read_text(encoding="utf-8"))


def chapters() -> list[int]:
    """The chapters that have concept checks, in order."""
    names = [p.name for p in resources.files(__name__).iterdir()]
    return sorted(int(m[1]) for n in names if (m := re.fullmatch(r"ch(\d\d)\.json", n)))


def check(chapter: int, check_id: str) -> dict:
    """One check (a dict with ``id``, ``after``, ``questions``) of a chapter."""
    for item in load(chapter)["checks"]:
        if item["id"] == check_id:
            return item
    ids = [c["id"] for c in load(chapter)["checks"]]
    raise ValueError(f"chapter {chapter} has no concept check {check_id!r}; it has {ids}")


def questions(chapter: int, check_id: str, lang: str) -> list[dict]:
    """The check's questions in ``lang``, in jupyterquiz's own format."""
    if lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {LANGUAGES}, got {lang!r}")
    out = []
    for q in check(chapter, check_id)["questions"]:
        item = {"type": q["type"], "question": q["question"][lang]}
        if "precision" in q:
            item["precision"] = q["precision"]
        answers = []
        for a in q["answers"]:
            b = {k: v for k, v in a.items() if k not in ("answer", "feedback")}
            if "answer" in a:
                b["answer"] = a["answer"][lang]
            if "feedback" in a:
                b["feedback"] = a["feedback"][lang]
            answers.append(b)
        item["answers"] = answers
        out.append(item)
    return out


# ----------------------------------------------------------------------------- the script

#: The places where jupyterquiz 2.9.6 would load MathJax from a CDN (when a page has a MathJax
#: object without ``typeset``, as the website has while MathJax is still starting): removed,
#: so a page never asks the network for anything. Its own typesetting call stays, guarded.
_CDN_LOAD = re.compile(
    r"console\.log\('WARNING: Trying to force load MathJax 3'\);\s*"
    r"window\.MathJax = \{.*?\};\s*"
    r"\(function \(\) \{\s*var script = document\.createElement\('script'\);\s*"
    r"script\.src = 'https://[^']*';.*?\}\)\(\);",
    re.S,
)
# ``MathJax.version[0]`` throws while MathJax is loading (version undefined): guard it.
_VERSION_GUARDS = (
    (
        "if (typeof MathJax != 'undefined') {",
        "if (typeof MathJax != 'undefined' && MathJax.version) {",
    ),
    (
        "if (typeof MathJax !== 'undefined') {",
        "if (typeof MathJax !== 'undefined' && MathJax.version) {",
    ),
    ("if (typeof version == 'undefined') {", "if (typeof version == 'undefined' || !version) {"),
    # A text answer box has no label in jupyterquiz: screen readers (and axe) need one.
    ('inp.type = "text";', 'inp.type = "text"; inp.setAttribute("aria-label", "your answer");'),
)


@lru_cache(maxsize=1)
def script() -> str:
    """jupyterquiz's JavaScript (its installed files), with no request to any other host."""
    package = resources.files("jupyterquiz").joinpath("js")
    parts = []
    for f in sorted(package.iterdir(), key=lambda p: p.name):
        if f.name.endswith(".js"):
            parts.append(f.read_text(encoding="utf-8"))
    js = "\n".join(parts)
    js = _CDN_LOAD.sub("/* no CDN: MathJax is the page's own or absent */", js)
    for old, new in _VERSION_GUARDS:
        js = js.replace(old, new)
    # Comment lines and console logging are not needed by a reader: smaller outputs.
    lines = []
    for line in js.splitlines():
        s = line.strip()
        if not s or (s.startswith("//") and not s.startswith("//#")):
            continue
        lines.append(s)
    return "\n".join(lines)


@lru_cache(maxsize=1)
def styles() -> str:
    return resources.files("jupyterquiz").joinpath("styles.css").read_text(encoding="utf-8")


COLORS = {
    "--jq-multiple-choice-bg": "#345995",
    "--jq-mc-button-bg": "#fafafa",
    "--jq-mc-button-border": "#e0e0e0e0",
    "--jq-mc-button-inset-shadow": "#555555",
    "--jq-many-choice-bg": "#e26d5a",
    "--jq-numeric-bg": "#345995",
    "--jq-numeric-input-bg": "#c0c0c0",
    "--jq-numeric-input-label": "#101010",
    "--jq-numeric-input-shadow": "#999999",
    "--jq-string-bg": "#861657",
    "--jq-incorrect-color": "#c80202",
    "--jq-correct-color": "#009113",
    "--jq-text-color": "#fafafa",
    "--jq-link-color": "#9abafa",
}


def container_id(chapter: int, check_id: str, lang: str) -> str:
    """The id of a check's container: also a JavaScript name, so letters, digits and _."""
    return f"{_outer_id(chapter, check_id)}_{lang}"


def _outer_id(chapter: int, check_id: str) -> str:
    return f"jq_ch{int(chapter):02d}_{re.sub(r'[^A-Za-z0-9_]', '_', check_id)}"


def html_output(chapter: int, check_id: str) -> str:
    """The HTML (with its script) that shows the check: both languages, one visible."""
    check(chapter, check_id)  # a clear error for an unknown check
    outer = _outer_id(chapter, check_id)
    css_vars = "".join(f"{k}: {v}; " for k, v in COLORS.items())
    # The language not matching the page is hidden; Jupyter and Colab pages are English.
    css = (
        f"#{outer} .jq-lang {{ {css_vars}}}\n"
        f'html[lang^="zh"] #{outer} .jq-lang[lang="en"] {{ display: none; }}\n'
        f'html:not([lang^="zh"]) #{outer} .jq-lang[lang^="zh"] {{ display: none; }}\n' + styles()
    )
    blocks, calls = [], []
    for lang in LANGUAGES:
        div = container_id(chapter, check_id, lang)
        blocks.append(
            f'<div class="jq-lang" lang="{HTML_LANG[lang]}">'
            f'<div id="{div}" data-shufflequestions="False" data-shuffleanswers="True" '
            f'data-preserveresponses="false" data-numquestions="1000000" '
            f'data-maxwidth="600" style="border-radius: 10px; text-align: left"></div></div>'
        )
        data = json.dumps(questions(chapter, check_id, lang), ensure_ascii=False)
        # "</" cannot close the script tag early: JSON allows "<\/".
        calls.append(f"show_questions({data.replace('</', '<' + chr(92) + '/')}, {div!r});")
    # Where the saved output's script does not run (JupyterLab runs no script of an output
    # it has not produced itself), say how to show the check; the script removes this.
    fallback = "".join(
        f'<p class="jq-lang jq-fallback" lang="{HTML_LANG[lang]}">{html.escape(text)}</p>'
        for lang, text in FALLBACK.items()
    )
    body = script().replace("</", "<" + chr(92) + "/")
    js = (
        "(function () {\n"
        f"var root = document.getElementById({outer!r});\n"
        "if (!root || root.dataset.shown) { return; }\n"
        "root.dataset.shown = '1';\n"
        "root.querySelectorAll('.jq-fallback').forEach(function (e) { e.remove(); });\n"
        f"{body}\n" + "\n".join(calls) + "\n})();"
    )
    return (
        f'<div id="{outer}" class="selfattn-concept-check">'
        f"<style>\n{css}</style>\n{fallback}"
        + "".join(blocks)
        + f"<script>\n{js}\n</script></div>"
    )


def plain_output(chapter: int, check_id: str) -> str:
    """The text a front end without HTML shows: the questions, in English."""
    lines = [f"Concept check ({int(chapter)}): run this cell in Jupyter or open the website"]
    for i, q in enumerate(check(chapter, check_id)["questions"], 1):
        lines.append(f"{i}. {_strip_tags(q['question']['en'])}")
    return "\n".join(lines)


def _strip_tags(text: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", text))


def output(chapter: int, check_id: str) -> dict:
    """The notebook output of the cell (a ``display_data``): a pure function of the data."""
    return {
        "output_type": "display_data",
        "data": {
            "text/html": html_output(chapter, check_id),
            "text/plain": plain_output(chapter, check_id),
        },
        "metadata": {},
    }


def concept_check(chapter: int, check_id: str) -> None:
    """Show the concept check ``check_id`` of chapter ``chapter`` (in Jupyter, Colab, a page)."""
    from IPython.display import display

    display(output(chapter, check_id)["data"], raw=True)
