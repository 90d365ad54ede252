"""The Chinese edition only (tools/i18n.py config adds this extension to its configuration).

Two kinds of text never reach Sphinx's gettext: a figure's alt text (cell metadata,
``metadata.mystnb.image.alt``) and an exercise's title (the argument of
``{exercise-start}``, which sphinx-exercise puts into the page without a translatable
source). ``tools/i18n.py update`` adds both to their chapter's catalog (contexts ``alt`` and
``exercise``); ``tools/i18n.py config`` writes the translated ones to a JSON file
(``book_zh_extra_messages``); here every image takes its Chinese alt text, so that a screen
reader reads Chinese, and every exercise its Chinese title. A text without a translation is
a warning (an error in ``make book-zh``, which builds with ``-W``).

The checkers' lines in the stored outputs ("⏳ Exercise 3.1 (...): not attempted yet",
``progress``) are swapped for the lines a Chinese reader's kernel prints
(``selfattn.set_language("zh")``), from the library's own catalog (:mod:`selfattn.i18n`).
"""

from __future__ import annotations

import json
from pathlib import Path

from docutils import nodes
from sphinx.util import logging

logger = logging.getLogger(__name__)


def _extras(app) -> dict[str, dict[str, str]]:
    if not hasattr(app, "_book_zh_extras"):
        path = Path(app.config.book_zh_extra_messages)
        extras = json.loads(path.read_text(encoding="utf-8"))
        app._book_zh_extras = {
            context: {_key(en): zh for en, zh in texts.items()}
            for context, texts in extras.items()
        }
    return app._book_zh_extras


# Sphinx's smartquotes turn ' into ’ in a title; the catalog holds the source's quotes.
_QUOTES = str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"'})


def _key(text: str) -> str:
    return text.strip().translate(_QUOTES)


def _has_english(text: str) -> bool:
    return any(ch.isascii() and ch.isalpha() for ch in text)


def translate_extras(app, doctree) -> None:
    if not app.config.book_zh_extra_messages:
        return
    extras = _extras(app)
    for image in doctree.findall(nodes.image):
        alt = _key(image.get("alt") or "")
        if alt and alt in extras["alt"]:
            image["alt"] = extras["alt"][alt]
        elif alt and _has_english(alt):
            logger.warning(
                f"figure alt text not translated (tools/i18n.py update, then translate it): "
                f"{alt[:70]!r}",
                location=image,
            )
    try:
        from sphinx_exercise.nodes import exercise_subtitle
    except ImportError:  # pragma: no cover - sphinx-exercise is a requirement of the book
        return
    titles = extras["exercise"]
    for subtitle in doctree.findall(exercise_subtitle):
        title = _key(subtitle.astext())
        if title in titles:
            subtitle.children = []
            subtitle += nodes.Text(titles[title])
        elif _has_english(title):
            logger.warning(
                f"exercise title not translated (tools/i18n.py update, then translate it): "
                f"{title!r}",
                location=subtitle,
            )
    # A solution's title ("Solution to Exercise 1.2 (...)") is built from the copy of the
    # exercise that sphinx-exercise keeps in its registry: translate that copy too.
    registry = getattr(app.env, "sphinx_exercise_registry", {})
    for entry in registry.values():
        if entry.get("docname") != app.env.docname or entry.get("node") is None:
            continue
        for subtitle in entry["node"].findall(exercise_subtitle):
            title = _key(subtitle.astext())
            if title in titles:
                subtitle.children = []
                subtitle += nodes.Text(titles[title])


# ----------------------------------------------------------------------------- checker lines


def library_language():
    """The library's :mod:`selfattn.i18n`, loaded from the source tree as a module of its own
    (it imports nothing of the package) and set to Chinese: its catalog turns the checkers'
    stored English lines into the lines a Chinese reader's kernel prints."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "lib" / "selfattn" / "i18n.py"
    spec = importlib.util.spec_from_file_location("_book_zh_selfattn_i18n", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.set_language("zh")
    return module


_LANGUAGE = None


def translate_output_text(text: str) -> str:
    """``text``, a cell's stored output, with every checker line in Chinese (the same catalog
    as ``selfattn.set_language("zh")``; other lines unchanged)."""
    global _LANGUAGE
    if _LANGUAGE is None:
        _LANGUAGE = library_language()
    return _LANGUAGE.translate_output(text)


def translate_outputs(app, doctree) -> None:
    """Each code cell's stored text output (a literal block of class ``output``): the
    checkers' lines ("✅ Exercise 3.1 (...): passed", ``progress``) in Chinese."""
    if not app.config.book_zh_extra_messages:
        return
    for block in doctree.findall(nodes.literal_block):
        if "output" not in block.get("classes", []):
            continue
        text = block.astext()
        new = translate_output_text(text)
        if new != text:
            block.children = [nodes.Text(new)]
            block.rawsource = new


def setup(app):
    app.add_config_value("book_zh_extra_messages", "", "env")
    # When a page is read: sphinx-exercise's post-transforms later copy an exercise's title
    # into its own title and into its solution's.
    app.connect("doctree-read", translate_extras)
    app.connect("doctree-read", translate_outputs)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
