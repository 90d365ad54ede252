"""Small fixes to the HTML that Jupyter Book 1 writes, and the student edition.

Found by the browser tests in tests_site/:

* sphinx-thebe registers its inline configuration script (``const THEBE_JS_URL = ...``)
  once per ``env-before-read-docs`` event, and Jupyter Book fires that event more than
  once, so every page declared the constant twice and the second declaration threw
  "Identifier 'THEBE_JS_URL' has already been declared" in the reader's console
  (sphinx-togglebutton's inline script is doubled the same way, harmlessly). Here each
  page keeps one copy of every script (same file, or same inline body).

* sphinx-mathjax-offline copies MathJax's whole distribution (24 MB: ten combined bundles,
  tex-svg-full.js, mml-chtml.js, ...) although the pages load only ``mathjax_path``
  (tex-chtml.js), which fetches what else it needs from the component folders (fonts,
  TeX extensions, the menu's accessibility tools). The other combined bundles, never
  linked by any page, are removed after the copy: the site shrinks from 63 MB to about
  48 MB (issue: the English site under 60 MB; tests_site/test_pages.py::test_site_size).

Exercises are numbered ``chapter.position`` ("Exercise 3.2"), as the checkers and the notebook
editions number them: Sphinx numbers them across the book when the table of contents has no
section numbers ("Exercise 11"), so after it assigns figure numbers this renumbers each
chapter's exercises (``env.toc_fignumbers``, which sphinx-exercise reads for titles and
references).

A "predict, then run" cell (tagged ``predict``) has its output collapsed until the reader opens
it ("Show the answer (predict first)"), as myst-nb's ``hide-output`` tag does; the notebook
editions drop that output (tools/notebook_edition.py).

The setup cell (the same in every chapter, ``tools/book.py setup-cell``) has its input
collapsed under a one-line summary of what it does (issue 45: the first code a reader sees is
the chapter's own), found by its source, so every chapter gets it without a tag; the notebook
editions open it in Colab's form view under the same words (tools/notebook_edition.py).

The theme's "Open issue" button (``use_issues_button``) opens a blank issue titled with the
page's file name; here it opens the erratum form (``.github/ISSUE_TEMPLATE/erratum.yml``) with
the page filled in.

The student edition (``book_student_edition = True``, set by tools/student_edition.py for
``make book-student``) removes every exercise's solution:

* from the pages: sphinx-exercise's own ``hide_solutions`` cannot be used, because with it
  ``{solution-start}`` returns nothing, so the gated solution's code cells stay on the
  page and the orphaned ``{solution-end}`` node crashes the HTML writer
  (sphinx-exercise 1.2.1). Instead, after sphinx-exercise has merged each gated solution
  into one node, this removes every solution node;
* from the downloadable notebooks (``_sources/**/*.ipynb``): every page offers the
  plain-Jupyter notebook edition instead of its MyST source (``notebooks/``; for the student
  edition ``student/``, whose notebooks lack the cells tagged ``solution``).
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import quote, urlencode

from docutils import nodes
from sphinx.transforms import SphinxTransform
from sphinx.transforms.post_transforms import SphinxPostTransform


def _script_key(js) -> tuple:
    # An inline script is registered once with filename None (on the builder) and once
    # with filename "" (replayed from the registry), so Sphinx's own de-duplication misses it.
    filename = getattr(js, "filename", js) or ""
    attributes = getattr(js, "attributes", {}) or {}
    return (str(filename), tuple(sorted((k, str(v)) for k, v in attributes.items())))


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        key = _script_key(js)
        if key not in seen:
            seen.add(key)
            unique.append(js)
    scripts[:] = unique


class RemoveSolutions(SphinxTransform):
    """Student edition: drop every solution (plain or gated) from the document."""

    default_priority = 20  # after sphinx-exercise's MergeGatedSolutions (priority 10)

    def apply(self) -> None:
        if not self.config.book_student_edition:
            return
        from sphinx_exercise.nodes import solution_end_node, solution_node, solution_start_node

        kinds = (solution_node, solution_start_node, solution_end_node)
        for node in list(self.document.findall(lambda n: isinstance(n, kinds))):
            node.parent.remove(node)


def offer_notebook_edition(app, exception) -> None:
    """The page's ``.ipynb`` download is the plain-Jupyter notebook edition, not the MyST source.

    tools/notebook_edition.py writes it (``notebooks/`` for the book, ``student/`` without the
    solution cells for the student edition); the Colab button opens the same files from the
    repository (``path_to_book`` in the configuration).
    """
    if exception is not None or app.builder.format != "html":
        return
    edition = Path(app.srcdir, app.config.book_notebook_edition)
    for path in Path(app.outdir, "_sources").rglob("*.ipynb"):
        plain = edition / path.relative_to(Path(app.outdir, "_sources"))
        if plain.is_file():
            path.write_bytes(plain.read_bytes())
        elif app.config.book_student_edition:  # never offer a notebook with its solutions
            path.unlink()


#: The site's editions by language: where each lives relative to the English root.
EDITION_ROOTS = {"en": "", "zh_CN": "zh/"}
_SWITCH_LABEL = {"en": ("English", "en"), "zh_CN": ("中文", "zh-CN")}


def language_href(pagename: str, here: str, there: str) -> str:
    """Relative link from ``pagename`` in the ``here`` edition to the same page in ``there``."""
    depth = pagename.count("/") + EDITION_ROOTS[here].count("/")
    return "../" * depth + EDITION_ROOTS[there] + pagename + ".html"


def language_switch(app, pagename, templatename, context, doctree) -> None:
    """A link at the top of every page to the same page in the other language's edition."""
    if not app.config.book_language_switch or app.builder.format != "html":
        return
    if "body" not in context:  # search and index pages have their own templates
        return
    here = app.config.book_edition_language
    links = []
    for there in EDITION_ROOTS:
        if there != here:
            label, code = _SWITCH_LABEL[there]
            href = language_href(pagename, here, there)
            links.append(f'<a href="{href}" hreflang="{code}" lang="{code}">{label}</a>')
    context["body"] = (
        '<nav class="language-switch" aria-label="Language / 语言">'
        + " ".join(links)
        + "</nav>\n"
        + context["body"]
    )


#: The issue form that the theme's "Open issue" button opens (.github/ISSUE_TEMPLATE/).
ERRATUM_FORM = "erratum.yml"


def erratum_url(repo_url: str, title: str, page: str) -> str:
    """A new issue on the erratum form, its title and "Chapter or page" field filled in
    (GitHub fills an issue form's fields from query parameters named by their ids)."""
    query = urlencode(
        {"template": ERRATUM_FORM, "title": f"Erratum: {title}", "chapter": f"{title} ({page})"},
        quote_via=quote,
    )
    return f"{repo_url.rstrip('/')}/issues/new?{query}"


def erratum_issue_link(app, pagename, templatename, context, doctree) -> None:
    """The theme's "Open issue" button (``use_issues_button``) opens the erratum form for this
    page, instead of a blank issue titled with the page's file name."""
    if app.builder.format != "html":
        return
    title = re.sub(r"<[^>]+>", "", str(context.get("title") or pagename)).strip()
    edition = EDITION_ROOTS.get(app.config.book_edition_language, "")
    page = f"{edition}{pagename}.html"
    if app.config.book_student_edition:
        page = f"student edition, {page}"
    buttons = list(context.get("header_buttons") or [])
    for group in list(buttons):
        buttons += group.get("buttons", []) if isinstance(group, dict) else []
    for button in buttons:
        if isinstance(button, dict) and button.get("label") == "source-issues-button":
            repo_url = button["url"].split("/issues/new", 1)[0]
            button["url"] = erratum_url(repo_url, html.unescape(title), page)


# MathJax's combined bundles: each one alone typesets a page, so only the configured one is used.
_MATHJAX_BUNDLE = re.compile(r"^(tex-|mml-).*\.js$|^(node-main|latest)\.js$")


def prune_mathjax(app, exception) -> None:
    """Remove the MathJax bundles the pages never load (after sphinx-mathjax-offline's copy)."""
    if exception is not None or app.builder.format != "html":
        return
    folder = Path(app.outdir, "_static", "mathjax")
    used = Path(str(app.config.mathjax_path)).name
    if not (folder / used).exists():
        return  # MathJax from elsewhere (a CDN): nothing of ours to prune
    for path in folder.glob("*.js"):
        if path.name != used and _MATHJAX_BUNDLE.match(path.name):
            path.unlink()


_CHAPTER_DOC = re.compile(r"(?:^|/)(\d+)_[^/]*$")


def number_exercises_by_chapter(app, env) -> list[str]:
    """Exercise numbers ``(chapter, position)`` instead of one count across the book."""
    for docname, kinds in env.toc_fignumbers.items():
        found = _CHAPTER_DOC.search(docname)
        if not found or not kinds.get("exercise"):
            continue
        numbers = kinds["exercise"]
        order = sorted(numbers, key=lambda ident: numbers[ident])
        chapter = int(found[1])
        kinds["exercise"] = {ident: (chapter, i) for i, ident in enumerate(order, 1)}
    return []


PREDICT_PROMPTS = {
    "en": ("Show the answer (predict first)", "Hide the answer"),
    "zh": ("显示答案（请先预测）", "隐藏答案"),
}


class CollapsePredictions(SphinxPostTransform):
    """Collapse the output of every cell tagged ``predict`` (before myst-nb wraps it)."""

    default_priority = 198  # myst-nb's HideInputCells is 199
    formats = ("html",)

    def run(self, **kwargs) -> None:
        lang = "zh" if str(self.config.language or "").startswith("zh") else "en"
        show, hide = PREDICT_PROMPTS[lang]
        for node in self.document.findall(nodes.container):
            if node.get("nb_element") != "cell_code" or "tag_predict" not in node["classes"]:
                continue
            mode = node.get("hide_mode")
            if mode in (None, "input"):
                node["hide_mode"] = "input+output" if mode == "input" else "output"
            node["prompt_show"], node["prompt_hide"] = show, hide


#: The setup cell's one-line summary (shown) and the line that folds it again, by language.
SETUP_PROMPTS = {
    "en": (
        "Setup: installs the library on Colab, seeds, picks the device (show the code)",
        "Hide the setup code",
    ),
    "zh": ("准备：在 Colab 上安装本书的库，设定随机种子，选择设备（显示代码）", "隐藏准备代码"),
}
#: The class the setup cell's container gets (the browser test finds it by it).
SETUP_CLASS = "setup-cell"


def _setup_source() -> str:
    # tools/book.py by its path (stdlib and yaml only): no sys.path edit, whatever the cwd.
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "tools" / "book.py"
    spec = importlib.util.spec_from_file_location("_book_tools", path)
    book = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(book)
    return book.setup_cell_source()


def _cell_source(node) -> str | None:
    """The code of a myst-nb code cell container (its first child's literal block)."""
    if not node.children or node.children[0].get("nb_element") != "cell_code_source":
        return None
    blocks = list(node.children[0].findall(nodes.literal_block))
    return blocks[0].astext() if blocks else None


class CollapseSetupCell(SphinxPostTransform):
    """Collapse the input of the canonical setup cell under a one-line summary."""

    default_priority = 198  # before myst-nb's HideInputCells (199), which draws the toggle
    formats = ("html",)

    def run(self, **kwargs) -> None:
        lang = "zh" if str(self.config.language or "").startswith("zh") else "en"
        show, hide = SETUP_PROMPTS[lang]
        canonical = _setup_source().strip()
        for node in self.document.findall(nodes.container):
            if node.get("nb_element") != "cell_code":
                continue
            source = _cell_source(node)
            if source is None or source.strip() != canonical:
                continue
            mode = node.get("hide_mode")
            if mode in (None, "output"):
                node["hide_mode"] = "input+output" if mode == "output" else "input"
            node["prompt_show"], node["prompt_hide"] = show, hide
            node["classes"].append(SETUP_CLASS)


def setup(app):
    # After Sphinx assigns the figure numbers (its own handler has the default priority).
    app.connect("env-get-updated", number_exercises_by_chapter, priority=900)
    app.add_post_transform(CollapsePredictions)
    app.add_post_transform(CollapseSetupCell)
    app.add_config_value("book_student_edition", False, "env")
    app.add_config_value("book_notebook_edition", "notebooks", "env")
    app.add_config_value("book_edition_language", "en", "env")
    app.add_config_value("book_language_switch", True, "env")
    app.connect("html-page-context", language_switch)
    # After sphinx-book-theme's own buttons (priority 501).
    app.connect("html-page-context", erratum_issue_link, priority=600)
    # Late, so that scripts other extensions add to the page context are included.
    app.connect("html-page-context", dedupe_scripts, priority=900)
    app.add_transform(RemoveSolutions)
    app.connect("build-finished", offer_notebook_edition)
    # Later than sphinx-mathjax-offline's own build-finished copy (default priority 500).
    app.connect("build-finished", prune_mathjax, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
