"""Measured figures that the prose quotes and that later chapters reuse.

``record`` does two things with one number: it glues it (myst-nb) so the
chapter's prose can quote it with ``{glue:text}`name```, and it stores it in
``results/<chapter>.json`` next to the notebook so the summary chapter can pull
it without retyping.

Where recorded figures live. The repository keeps them in ``chapters/results/``;
the same folder ships inside the installed package as ``selfattn.recorded``
(package data, see ``pyproject.toml``), so that a chapter run alone (on Colab,
from a pip-installed wheel, in an empty folder) still finds the book's recorded
figures and benchmark tables. Reading looks first in ``results/`` next to the
running notebook (the reader's own fresh run wins), then in the package.

``claim`` guards a sentence of prose that judges a measurement ("faster at every
size"): the cell that measures calls it, and a re-run whose data contradict the
sentence stops with the sentence in the error.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

__all__ = [
    "record",
    "recorder",
    "Recorder",
    "load_results",
    "load_recorded",
    "chapter_titles",
    "claim",
    "ClaimError",
    "RESULTS_DIR",
]

#: Where :func:`record` stores each chapter's figures, relative to the notebook's folder.
RESULTS_DIR = Path("results")


class ClaimError(AssertionError):
    """A sentence of the book's prose that the data just measured contradict."""


def claim(condition, sentence: str) -> None:
    """Raise :class:`ClaimError` quoting ``sentence`` unless ``condition`` holds.

    Use it right after the measurement that a sentence of prose judges, e.g.
    ``claim(all(fused < separate), "the fused projection is faster at every size")``,
    so that ``make execute`` stops when a re-run no longer supports the sentence.

    Args:
        condition: anything with a truth value (a bool, a numpy or torch boolean scalar).
        sentence: the claim as the prose makes it.
    """
    if not isinstance(sentence, str) or not sentence.strip():
        raise TypeError(f"claim: sentence must be a non-empty str, got {sentence!r}")
    if hasattr(condition, "item") and callable(condition.item):
        condition = condition.item()
    if not bool(condition):
        raise ClaimError(f"the data contradict the prose: {sentence!r}")


def _to_jsonable(value):
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return value.item()
    return value


def _glue(name: str, value, display: bool) -> None:
    """myst-nb's glue, or nothing where myst-nb is missing (on Colab: no prose to glue into)."""
    try:
        from myst_nb import glue
    except ImportError:
        return
    glue(name, value, display=display)


def record(
    chapter: str,
    name: str,
    value,
    *,
    display: bool = False,
    results_dir: Path | str | None = None,
):
    """Glue ``value`` under ``name`` and save it in ``results/<chapter>.json``.

    Args:
        chapter: file stem such as ``"ch03"``.
        name: glue key, unique in the book (prefix it with the chapter, e.g. ``"ch03_max_diff"``).
        value: a number, string, or a JSON-serialisable object.
        display: also show the value in the cell's output.
        results_dir: folder to write to (default ``results/`` next to the notebook).

    Returns:
        ``value``, unchanged.
    """
    value = _to_jsonable(value)
    _glue(name, value, display)
    directory = Path(results_dir) if results_dir is not None else RESULTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{chapter}.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    if data.get(name) != value:
        data[name] = value
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return value


class Recorder:
    """:func:`record` bound to one chapter: ``rec = recorder("ch07"); rec("speedup", x)``.

    The chapter's identity is written once, here; every figure it records is glued and
    stored under ``<chapter>_<name>`` in ``results/<chapter>.json``, so the prose quotes
    ``{glue:text}`ch07_speedup```, and no call repeats the prefix. A figure that differs from
    run to run (a live timing) is glued only: ``rec.glue("live_ms", t)``.

    Args:
        chapter: the chapter's file stem, such as ``"ch07"``.
        results_dir: folder to write to (default ``results/`` next to the notebook).
    """

    def __init__(self, chapter: str, *, results_dir: Path | str | None = None):
        if not isinstance(chapter, str) or not chapter.isidentifier():
            raise ValueError(
                f"recorder: chapter must be a file stem such as 'ch07', got {chapter!r}"
            )
        self.chapter = chapter
        self.results_dir = results_dir

    def key(self, name: str) -> str:
        """The glue key of ``name``: ``<chapter>_<name>``."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"recorder: name must be a non-empty str, got {name!r}")
        prefix = f"{self.chapter}_"
        if name.startswith(prefix):
            raise ValueError(
                f"recorder({self.chapter!r}) adds the prefix itself: pass "
                f"{name[len(prefix) :]!r}, not {name!r}"
            )
        return prefix + name

    def __call__(self, name: str, value, *, display: bool = False):
        """Glue and store ``value`` under ``<chapter>_<name>``; returns ``value``."""
        return record(
            self.chapter, self.key(name), value, display=display, results_dir=self.results_dir
        )

    def glue(self, name: str, value, *, display: bool = False):
        """Glue ``value`` under ``<chapter>_<name>`` without storing it; returns ``value``.

        For figures the prose quotes but ``results/`` must not hold because they differ from
        run to run (live timings). Where myst-nb is missing (Colab) it only returns ``value``.
        """
        _glue(self.key(name), _to_jsonable(value), display)
        return value

    def __repr__(self) -> str:
        return f"recorder({self.chapter!r})"


def recorder(chapter: str, *, results_dir: Path | str | None = None) -> Recorder:
    """A :class:`Recorder` for one chapter.

    Args:
        chapter: the chapter's file stem, such as ``"ch07"``.
        results_dir: folder to write to (default ``results/`` next to the notebook).
    """
    return Recorder(chapter, results_dir=results_dir)


def _packaged() -> dict[str, str]:
    """``{stem: json text}`` of the results shipped in the package (``selfattn.recorded``)."""
    try:
        folder = resources.files("selfattn.recorded")
    except ModuleNotFoundError:  # a source tree used without installing: nothing packaged
        return {}
    return {
        entry.name[: -len(".json")]: entry.read_text(encoding="utf-8")
        for entry in folder.iterdir()
        if entry.name.endswith(".json")
    }


def _all_recorded(results_dir: Path | str | None) -> dict[str, str]:
    found = _packaged()
    directory = Path(results_dir) if results_dir is not None else RESULTS_DIR
    if directory.is_dir():
        for path in sorted(directory.glob("*.json")):
            found[path.stem] = path.read_text(encoding="utf-8")
    return dict(sorted(found.items()))


def load_recorded(name: str, *, results_dir: Path | str | None = None, default=None):
    """One recorded file, e.g. ``load_recorded("bench_cpu")`` or ``load_recorded("ch03")``.

    Looks in ``results/`` next to the notebook first, then in the installed package.

    Args:
        name: the file's stem (no ``.json``).
        results_dir: the local folder to look in first (default ``results/``).
        default: returned when neither place has the file; if ``None``, a missing file
            raises ``FileNotFoundError`` naming both places.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"load_recorded: name must be a non-empty str, got {name!r}")
    text = _all_recorded(results_dir).get(name)
    if text is None:
        if default is not None:
            return default
        directory = Path(results_dir) if results_dir is not None else RESULTS_DIR
        raise FileNotFoundError(
            f"no recorded results {name!r}: neither {directory / (name + '.json')} "
            "nor the package's selfattn.recorded holds it"
        )
    return json.loads(text)


def load_results(results_dir: Path | str | None = None) -> dict[str, dict]:
    """All recorded results, ``{file stem: {name: value}}`` (local ``results/`` over packaged)."""
    return {stem: json.loads(text) for stem, text in _all_recorded(results_dir).items()}


def chapter_titles(*, results_dir: Path | str | None = None) -> dict[str, str]:
    """The book's chapters in order, ``{"ch01": "1. Why self-attention", ...}``.

    The key is the name the chapter's :func:`recorder` uses. The registry is written from the
    table of contents (``make notebooks``) and ships with the package, so a chapter run alone
    (on Colab) knows the others; a local ``results/toc.json`` wins, as for every record.
    """
    return load_recorded("toc", results_dir=results_dir)
