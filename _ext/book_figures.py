"""Every figure of the book as a vector graphic, for lecture slides (issue 34).

When the book is recorded, each figure is saved twice in the notebook, as PNG and as SVG (two
formats of the one output; ``selfattn.setup`` sets them on IPython's inline backend). The
page shows the PNG, and under it a link downloads the same figure as SVG, named after its
chapter and its place there (``03_scaled_dot_product-figure-2.svg``).

How. myst-nb parses each output into a ``mime_bundle`` with one container per format (it has
already written each format's file under ``jupyter_execute``), and picks the format to show
later, per builder. Before that, when the page's doctree is read, :func:`offer_svg` takes the
SVG out of every bundle that also has a PNG, so the page keeps the PNG whatever the builder's
priorities, and the SVG is neither copied to ``_images`` nor inlined, and puts a Sphinx
download reference to a copy of it with a readable name after the figure. Sphinx's own
download collector then copies that file into ``_downloads/`` (it runs later on the same
event), so the link works in the English, Chinese and student sites alike. The notebook
downloads carry the PNG alone (tools/notebook_edition.py): the SVG of each figure is here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from docutils import nodes
from sphinx import addnodes

SVG, PNG = "image/svg+xml", "image/png"

#: The link's words, by the edition's language.
LABELS = {"en": "Download this figure as SVG", "zh_CN": "下载此图的 SVG 矢量图"}


def _format(bundle: nodes.Element, mime_type: str) -> nodes.Element | None:
    for child in bundle.children:
        if isinstance(child, nodes.container) and child.get("mime_type") == mime_type:
            return child
    return None


def _is_bundle(node) -> bool:
    return isinstance(node, nodes.container) and node.get("nb_element") == "mime_bundle"


def offer_svg(app, doctree) -> None:
    """Keep each figure's PNG on the page and link its SVG, numbered in page order."""
    if app.builder.format != "html":  # the HTML sites and the PDF's single page
        return
    env = app.env
    label = LABELS.get(app.config.language or "en", LABELS["en"])
    number = 0
    for bundle in list(doctree.findall(_is_bundle)):
        svg, png = _format(bundle, SVG), _format(bundle, PNG)
        if svg is None or png is None:
            continue
        images = list(svg.findall(nodes.image))
        bundle.remove(svg)
        if not images or not images[0]["uri"].startswith("/"):
            continue
        number += 1
        # myst-nb names its files by content hash; the reader's copy is named by its place.
        written = Path(app.srcdir, images[0]["uri"].lstrip("/"))
        named = written.with_name(f"{Path(env.docname).name}-figure-{number}.svg")
        if not named.exists() or named.read_bytes() != written.read_bytes():
            shutil.copyfile(written, named)
        target = "/" + named.relative_to(app.srcdir).as_posix()
        link = addnodes.download_reference(
            "",
            "",
            nodes.inline(label, label),
            reftarget=target,
            refdoc=env.docname,
            refexplicit=True,
        )
        line = nodes.paragraph("", "", link, classes=["figure-svg"])
        parent = bundle.parent
        parent.insert(parent.index(bundle) + 1, line)


def setup(app):
    # Before Sphinx's image and download collectors (default priority 500) read the doctree.
    app.connect("doctree-read", offer_svg, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
