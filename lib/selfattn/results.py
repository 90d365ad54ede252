"""Measured figures that the prose quotes and that later chapters reuse.

``record`` does two things with one number: it glues it (myst-nb) so the
chapter's prose can quote it with ``{glue:text}`name```, and it stores it in
``results/<chapter>.json`` next to the notebook so the summary chapter can pull
it without retyping.
"""
from __future__ import annotations

import json
from pathlib import Path

__all__ = ["record", "load_results", "RESULTS_DIR"]

#: Where :func:`record` stores each chapter's figures, relative to the notebook's folder (chapters/).
RESULTS_DIR = Path("results")


def _to_jsonable(value):
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return value.item()
    return value


def record(chapter: str, name: str, value, *, display: bool = False, results_dir: Path | str | None = None):
    """Glue ``value`` under ``name`` and save it in ``results/<chapter>.json``.

    Args:
        chapter: file stem such as ``"ch03"``.
        name: glue key, unique in the book (prefix it with the chapter, e.g. ``"ch03_max_diff"``).
        value: a number, string, or a JSON-serialisable object.
        display: also show the value in the cell's output.

    Returns:
        ``value``, unchanged.
    """
    value = _to_jsonable(value)
    try:
        from myst_nb import glue
    except ImportError:  # on Colab myst-nb is not needed: there is no prose to glue into
        glue = None
    if glue is not None:
        glue(name, value, display=display)
    directory = Path(results_dir) if results_dir is not None else RESULTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{chapter}.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    if data.get(name) != value:
        data[name] = value
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return value


def load_results(results_dir: Path | str | None = None) -> dict[str, dict]:
    """All recorded results, ``{chapter: {name: value}}``."""
    directory = Path(results_dir) if results_dir is not None else RESULTS_DIR
    return {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}
