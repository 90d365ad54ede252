"""Strict nbval's one addition (tools/reader_run.py copies this file in as the run's conftest).

nbval compares every output's text and stderr but not its images (PNG and JPEG are skipped).
A recorded figure also carries an SVG copy (``selfattn.setup``; the website offers it as a
download), which nbval would compare as text: an image all the same, drawn by another
matplotlib or font on another machine, so it is skipped like the PNG beside it.
"""

SVG = "image/svg+xml"


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        notebook = item.parent  # nbval's IPyNbFile holds the skipped output keys
        skipped = getattr(notebook, "skip_compare", None)
        if skipped is not None and SVG not in skipped:
            notebook.skip_compare = (*skipped, SVG)
