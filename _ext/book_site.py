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

The student edition (``book_student_edition = True``, set by tools/student_edition.py for
``make book-student``) removes every exercise's solution:

* from the pages: sphinx-exercise's own ``hide_solutions`` cannot be used, because with it
  ``{solution-start}`` returns nothing, so the gated solution's code cells stay on the
  page and the orphaned ``{solution-end}`` node crashes the HTML writer
  (sphinx-exercise 1.2.1). Instead, after sphinx-exercise has merged each gated solution
  into one node, this removes every solution node;
* from the downloadable notebooks (``_sources/**/*.ipynb``): the cells from
  ``{solution-start}`` to ``{solution-end}`` go, and so do those two directives.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from sphinx.transforms import SphinxTransform


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


_SOLUTION_START = re.compile(r"^(`{3,}|:{3,})\{solution-start\}.*?^\1[ \t]*$\n?", re.M | re.S)
_SOLUTION_END = re.compile(r"^(`{3,}|:{3,})\{solution-end\}.*?^\1[ \t]*$\n?", re.M | re.S)


def _strip_markdown(src: str, inside: bool) -> tuple[str, bool]:
    """Drop the solution parts of one markdown cell; ``inside``: whether a solution is open."""
    kept = []
    while True:
        if not inside:
            m = _SOLUTION_START.search(src)
            if not m:
                kept.append(src)
                return "".join(kept), False
            kept.append(src[: m.start()])
            src, inside = src[m.end() :], True
        else:
            m = _SOLUTION_END.search(src)
            if not m:
                return "".join(kept), True
            src, inside = src[m.end() :], False


def strip_solutions(nb: dict) -> dict:
    """The notebook without its solutions: every cell from {solution-start} to {solution-end}."""
    cells, inside = [], False
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] != "markdown":
            if not inside:
                cells.append(cell)
            continue
        text, inside = _strip_markdown(src, inside)
        if text.strip():
            cells.append(dict(cell, source=text.strip("\n")))
    return dict(nb, cells=cells)


def strip_downloadable_notebooks(app, exception) -> None:
    if (
        exception is not None
        or not app.config.book_student_edition
        or app.builder.format != "html"
    ):
        return
    for path in Path(app.outdir, "_sources").rglob("*.ipynb"):
        nb = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(
            json.dumps(strip_solutions(nb), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )


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


def setup(app):
    app.add_config_value("book_student_edition", False, "env")
    # Late, so that scripts other extensions add to the page context are included.
    app.connect("html-page-context", dedupe_scripts, priority=900)
    app.add_transform(RemoveSolutions)
    app.connect("build-finished", strip_downloadable_notebooks)
    # Later than sphinx-mathjax-offline's own build-finished copy (default priority 500).
    app.connect("build-finished", prune_mathjax, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
