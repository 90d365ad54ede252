"""The Chinese edition's explorers and diagrams (tools/i18n.py config adds this extension).

Two kinds of words live in a chapter's notebook outside its text, where Sphinx's gettext
never looks:

* **the explorers' saved widget state** (``metadata.widgets``): the controls' names and
  option labels and every pre-drawn view's alt text. ``tools/i18n.py update`` adds them to
  the chapter's catalog with the context ``widget`` (a view's alt text as one template per
  sentence, its numbers and option labels as slots: see
  :func:`selfattn.widgets._explorer.translate_state`);
* **the words drawn inside the diagrams** (``selfattn.diagrams``, the idea pictures: a code
  cell with ``metadata.selfattn.diagram``): ``update`` draws each one as the chapter calls it
  and adds every label with an English word to the catalog with the context ``diagram``.

Here, when Sphinx reads a chapter (``source-read``: the notebook's JSON before myst-nb
parses it), the widget state is translated in place, and each diagram is drawn again from
its cell's call, its labels translated (:func:`selfattn.diagrams.translate`) in a CJK font,
and saved as the cell's PNG and SVG, as the English recording saves them.

Why the diagrams are drawn at build time rather than committed as Chinese images: the
drawing is the same code and the same call as the English one (a diagram takes under a
second), so the Chinese picture can never fall behind the English one or its catalog; a
committed copy would need a test that it is current and a re-render on every change. The
build needs a CJK font: ``.ci/run`` installs fonts-wqy-zenhei and
:func:`selfattn.diagrams.cjk_font` finds it. Without one, the build warns (an error in
``make book-zh``, which builds with ``-W``) and keeps the English images.

A text with no translation is a warning too; the texts and the translations come from
``book_zh_extra_messages`` (contexts ``widget`` and ``diagram``).
"""

from __future__ import annotations

import ast
import base64
import json
import logging
from collections.abc import Callable

WIDGET_CONTEXT = "widget"
DIAGRAM_CONTEXT = "diagram"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def widget_state(nb: dict) -> dict:
    """The saved widget state of a notebook (``{}`` when it has no explorer)."""
    return nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})


def diagram_cells(nb: dict) -> list[dict]:
    """The code cells that draw a diagram of ``selfattn.diagrams`` (the idea pictures)."""
    return [
        cell
        for cell in nb.get("cells", [])
        if cell.get("cell_type") == "code"
        and cell.get("metadata", {}).get("selfattn", {}).get("diagram")
    ]


def draw_diagram(source: str):
    """The diagram a cell draws: its last line is ``diagrams.NAME(...)`` with literal
    arguments (the cell's other lines import ``diagrams``), evaluated without running code.

    Raises:
        ValueError: for a cell whose last line is not such a call.
    """
    from selfattn import diagrams

    body = ast.parse(source).body
    call = body[-1].value if body and isinstance(body[-1], ast.Expr) else None
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "diagrams"
        and call.func.attr in diagrams.__all__
    ):
        raise ValueError(f"a diagram cell ending with diagrams.NAME(...), got {source!r}")
    args = [ast.literal_eval(a) for a in call.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    return getattr(diagrams, call.func.attr)(*args, **kwargs)


def notebook_messages(nb: dict) -> list[tuple[str, str]]:
    """``(text, context)`` of a notebook's explorer texts and diagram labels to translate."""
    from selfattn import diagrams
    from selfattn.widgets._explorer import has_words, state_messages

    found = [(text, WIDGET_CONTEXT) for text in state_messages(widget_state(nb))]
    for cell in diagram_cells(nb):
        fig = draw_diagram("".join(cell["source"]))
        for label in diagrams.labels(fig):
            if has_words(_outside_math(label)):
                found.append((label, DIAGRAM_CONTEXT))
    return list(dict.fromkeys(found))


def _outside_math(text: str) -> str:
    import re

    return re.sub(r"\$[^$]*\$", " ", text)


def _figure_outputs(fig) -> dict[str, object]:
    """The PNG (base64) and SVG of a figure, saved as the inline backend saves the English
    ones (the figure's dpi, tight bounding box, the book's fixed SVG salt)."""
    import matplotlib
    from IPython.core.pylabtools import print_figure

    quiet = logging.getLogger("matplotlib.font_manager")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "weight normal not found": the CJK font has one weight
    try:
        with matplotlib.rc_context({"svg.hashsalt": "selfattn"}):
            png = print_figure(fig, "png", bbox_inches="tight")
            svg = print_figure(fig, "svg", bbox_inches="tight")
    finally:
        quiet.setLevel(level)
    return {
        "image/png": base64.b64encode(png).decode("ascii") + "\n",
        "image/svg+xml": svg.splitlines(keepends=True),
    }


def translate_notebook(
    nb: dict, translate: Callable[[str, str], str | None], *, font: str | None
) -> list[tuple[str, str]]:
    """Translate a notebook's explorers and redraw its diagrams in place.

    Args:
        nb: the notebook (as JSON).
        translate: ``translate(context, English)`` -> the translation or ``None``.
        font: the CJK font to draw with; ``None`` keeps the English diagrams.

    Returns:
        ``(context, text)`` of every text left English.
    """
    from selfattn import diagrams
    from selfattn.widgets._explorer import translate_state

    state = widget_state(nb)
    missing = [
        (WIDGET_CONTEXT, t) for t in translate_state(state, lambda t: translate(WIDGET_CONTEXT, t))
    ]
    if font is None:
        return missing
    for cell in diagram_cells(nb):
        fig = draw_diagram("".join(cell["source"]))
        left = diagrams.translate(fig, lambda t: translate(DIAGRAM_CONTEXT, t), font=font)
        missing += [(DIAGRAM_CONTEXT, t) for t in left]
        images = _figure_outputs(fig)
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            for mime, value in images.items():
                if mime in data:
                    data[mime] = value
    return missing


# ----------------------------------------------------------------------------- Sphinx
def _on_source_read(app, docname: str, source: list[str]) -> None:
    from selfattn import diagrams
    from sphinx.util import logging as sphinx_logging

    logger = sphinx_logging.getLogger(__name__)
    path = app.env.doc2path(docname)
    if not str(path).endswith(".ipynb") or not app.config.book_zh_extra_messages:
        return
    nb = json.loads(source[0])
    if not widget_state(nb) and not diagram_cells(nb):
        return
    from book_zh import _extras

    extras = _extras(app)

    def translate(context: str, text: str) -> str | None:
        return extras.get(context, {}).get(text.strip())

    font = diagrams.cjk_font()
    if font is None and diagram_cells(nb):
        logger.warning(
            f"{docname}: no CJK font for the diagrams (install fonts-wqy-zenhei, or one of "
            f"{', '.join(diagrams.CJK_FONTS)}): they stay English",
            location=docname,
        )
    missing = translate_notebook(nb, translate, font=font)
    for context, text in missing:
        logger.warning(
            f"{context} text not translated (tools/i18n.py update, then translate it): "
            f"{text[:70]!r}",
            location=docname,
        )
    source[0] = json.dumps(nb, ensure_ascii=False)


def setup(app):
    # book_zh_extra_messages is declared by book_zh, which the Chinese build loads too.
    app.setup_extension("book_zh")
    app.connect("source-read", _on_source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
