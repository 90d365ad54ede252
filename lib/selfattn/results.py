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
size"): the cell that measures calls it.

Two modes, one switch. Where the book is *recorded or tested* (``make execute``, ``make bench``,
``make test``, ``make gpu-check``: they set ``SELFATTN_RECORD=1``), a claim the data contradict
raises :class:`ClaimError`, and ``record`` writes ``results/<chapter>.json``. Everywhere else (a
reader's Jupyter or Colab) nothing is written into the repository or the package: recorded values
stay in memory, for the glue and for later cells of the same kernel, and a claim that fails prints
a note and the run goes on (another CPU, a GPU or another seed can end a training run elsewhere).
A reader who wants to keep their own run sets ``SELFATTN_RECORD_TO=<folder>``: ``record`` writes
there and every load reads from there first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
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
    "recording",
    "failed_claims",
    "claim_note",
    "live",
    "STUDIES",
    "SECOND_PATH",
]

#: Where :func:`record` stores each chapter's figures, relative to the notebook's folder.
RESULTS_DIR = Path("results")

#: The switch: ``"1"`` where the book is recorded or tested; unset in a reader's run.
RECORD_ENV = "SELFATTN_RECORD"
#: A folder a reader names to keep their own run's figures (outside recording mode).
RECORD_TO_ENV = "SELFATTN_RECORD_TO"

# This kernel's figures, ``{chapter: {name: value}}``: what a reader's run measured, read back
# by later cells of the same kernel before any file.
_SESSION: dict[str, dict] = {}
# The sentences that this kernel's data did not support (reader mode only).
_FAILED: list[str] = []


#: The switch for a reader who wants everything live: each recorded study is recomputed by its
#: script (from a clone of the repository) instead of read from the recorded results.
LIVE_ENV = "SELFATTN_LIVE"
#: The second floating-point path (``make test`` runs every chapter on it too, standing for
#: another reader's CPU): ATen's scalar ("default") kernels instead of this CPU's AVX2/AVX-512
#: ones, and MKL's compatible (SSE2) code path instead of the fastest one.
SECOND_PATH = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
#: The recorded studies that a chapter reads, ``{name: (module, extra environment)}``: in a
#: clone of the book's repository, ``python -m <module> --out FILE`` (a script of its
#: ``tools`` package) writes the file that ``chapters/results/<name>.json`` ships.
STUDIES = {
    "ch01_long_range_seeds": ("tools.ch01_long_range_seeds", {}),
    "ch01_long_range_seeds_second": ("tools.ch01_long_range_seeds", SECOND_PATH),
    "ch02_coref_seeds": ("tools.ch02_coref_seeds", {}),
    "ch03_scale_study": ("tools.ch03_scale_study", {}),
    "ch06_seeds": ("tools.ch06_extrapolation_seeds", {}),
    "ch06_rope_scaling": ("tools.ch06_rope_scaling", {}),
    "ch08_mqar": ("tools.ch08_mqar", {}),
    "ch08_performer": ("tools.ch08_performer", {}),
    "ch08_sinks": ("tools.ch08_sinks", {}),
    "ch09_experiments": ("tools.ch09_experiments", {}),
    "ch11_logit_growth": ("tools.ch11_logit_growth", {}),
    "ch11_retrieval": ("tools.ch11_retrieval", {}),
    "ch11_sinks_gates": ("tools.ch11_sinks_gates", {}),
    "ch12_packing": ("tools.ch12_packing", {}),
    "ch13_recall": ("tools.ch13_recall", {}),
    "ch13_sparse_recall": ("tools.ch13_sparse_recall", {}),
}


def live() -> bool:
    """Whether the reader asked for everything live (``SELFATTN_LIVE=1``)."""
    return os.environ.get(LIVE_ENV, "0") not in {"", "0"}


def _clone() -> Path | None:
    """The clone of the book's repository that this kernel works in: the working directory or
    a folder above it with the book's ``_toc.yml`` (a chapter runs in ``chapters/``).

    Found from where the reader works, not from where the library is installed: the library
    reads nothing of the repository's ``tools/``; it starts a study's command in the clone.
    """
    here = Path.cwd().resolve()
    return next((d for d in (here, *here.parents) if (d / "_toc.yml").is_file()), None)


def _recompute(name: str) -> None:
    """Run ``name``'s study now and keep its results for this kernel (``SELFATTN_LIVE``)."""
    module, extra = STUDIES[name]
    clone = _clone()
    if clone is None:
        print(
            f"SELFATTN_LIVE: recomputing {name!r} needs a clone of the book's repository (its "
            f"python -m {module}); this run reads the recorded results instead.",
            flush=True,
        )
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{name}.json"
        command = [sys.executable, "-m", module, "--out", str(out)]
        print(f"SELFATTN_LIVE: recomputing {name!r}: python -m {module} (minutes)", flush=True)
        env = {**os.environ, "SELFATTN_PROGRESS": "0", **extra}
        subprocess.run(command, cwd=clone, env=env, check=True, capture_output=True)
        _SESSION[name] = json.loads(out.read_text(encoding="utf-8"))


def recording() -> bool:
    """Whether the book is being recorded or tested (``SELFATTN_RECORD=1``).

    Then a failed :func:`claim` raises and :func:`record` writes ``results/<chapter>.json``;
    otherwise a failed claim prints a note and nothing is written (unless the reader asked
    for it with ``SELFATTN_RECORD_TO``).
    """
    return os.environ.get(RECORD_ENV, "0") not in {"", "0"}


def failed_claims() -> list[str]:
    """The sentences this kernel's run did not support so far (a reader's run only)."""
    return list(_FAILED)


class ClaimError(AssertionError):
    """A sentence of the book's prose that the data just measured contradict."""


def claim(condition, sentence: str, *, measured=None) -> None:
    """Check that the data just measured support ``sentence``.

    Use it right after the measurement that a sentence of prose judges, e.g.
    ``claim(all(fused < separate), "the fused projection is faster at every size")``.
    Where the book is recorded or tested (:func:`recording`), a contradiction raises
    :class:`ClaimError` quoting the sentence, so a re-run that no longer supports the prose
    stops. In a reader's run it prints a short note instead (the sentence, what this run
    measured, why runs differ) and the run goes on.

    Args:
        condition: anything with a truth value (a bool, a numpy or torch boolean scalar).
        sentence: the claim as the prose makes it.
        measured: optional, what this run measured, for the note (e.g. ``"loss 1.21"``).
    """
    if not isinstance(sentence, str) or not sentence.strip():
        raise TypeError(f"claim: sentence must be a non-empty str, got {sentence!r}")
    if hasattr(condition, "item") and callable(condition.item):
        condition = condition.item()
    if bool(condition):
        return
    if recording():
        detail = "" if measured is None else f" (this run: {measured})"
        raise ClaimError(f"the data contradict the prose: {sentence!r}{detail}")
    _FAILED.append(sentence)
    print(claim_note(sentence, measured), flush=True)


def claim_note(sentence: str, measured=None) -> str:
    """The note a reader's run prints where :func:`claim` finds ``sentence`` unsupported.

    Chapter 1 shows it; :func:`claim` prints it (outside recording mode) instead of raising.
    """
    lines = [
        f"Note: this run does not support the sentence {sentence!r}.",
        "The book's recorded run did, and its outputs show that run.",
    ]
    if measured is not None:
        lines.append(f"This run measured: {measured}.")
    lines += [
        "Float rounding differs between CPUs, thread counts and GPUs, and a small",
        "model trained for many steps can end elsewhere; the run goes on.",
    ]
    return "\n".join(lines)


def _to_jsonable(value):
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return value.item()
    return value


#: myst-nb's glue format: a display whose MIME types carry this prefix (frontends show
#: nothing for them) and whose metadata names the value (myst_nb.ext.glue.GLUE_PREFIX).
GLUE_PREFIX = "application/papermill.record/"


def _glue(name: str, value, display: bool) -> None:
    """myst-nb's glue; where myst-nb is missing (Colab), the same display, published here.

    The website's prose reads glued values from a chapter's saved outputs. A reader on Colab
    has no myst-nb, and without this their run would publish fewer outputs than the saved
    ones (invisible in the notebook, but strict nbval compares them): the few lines of
    myst-nb's ``glue`` are repeated here so that a chapter's outputs do not depend on it
    (tests/test_results.py checks the two publish the same display).
    """
    try:
        from myst_nb import glue
    except ImportError:
        glue = _glue_without_myst_nb
    glue(name, value, display=display)


def _glue_without_myst_nb(name: str, value, display: bool = True) -> None:
    try:
        from IPython.core.formatters import format_display_data
        from IPython.display import display as ipy_display
    except ImportError:  # plain Python: nothing to display into
        return
    bundle, metadata = format_display_data(value)
    prefix = "" if display else GLUE_PREFIX
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    ipy_display({prefix + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)


def record(
    chapter: str,
    name: str,
    value,
    *,
    display: bool = False,
    results_dir: Path | str | None = None,
):
    """Glue ``value`` under ``name``, keep it for this kernel, and save it when recording.

    Args:
        chapter: file stem such as ``"ch03"``.
        name: glue key, unique in the book (prefix it with the chapter, e.g. ``"ch03_max_diff"``).
        value: a number, string, or a JSON-serialisable object.
        display: also show the value in the cell's output.
        results_dir: folder to write to. By default ``results/`` next to the notebook when
            the book is recorded (:func:`recording`), the reader's ``SELFATTN_RECORD_TO``
            folder if set, and otherwise nowhere: the value is kept in memory only.

    Returns:
        ``value``, unchanged.
    """
    value = _to_jsonable(value)
    _glue(name, value, display)
    _SESSION.setdefault(chapter, {})[name] = value
    directory = _write_dir(results_dir)
    if directory is None:
        return value
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{chapter}.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    if data.get(name) != value:
        data[name] = value
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return value


def _write_dir(results_dir: Path | str | None) -> Path | None:
    """Where :func:`record` writes: the folder asked for, ``results/`` when recording, the
    reader's ``SELFATTN_RECORD_TO``, or nowhere."""
    if results_dir is not None:
        return Path(results_dir)
    if recording():
        return RESULTS_DIR
    mine = os.environ.get(RECORD_TO_ENV)
    return Path(mine) if mine else None


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


def _all_recorded(results_dir: Path | str | None) -> dict[str, dict]:
    """``{stem: figures}``: the package's, then the local folder's, then the reader's own
    ``SELFATTN_RECORD_TO`` folder's, then this kernel's figures, each over the one before."""
    found = {stem: json.loads(text) for stem, text in _packaged().items()}
    folders = [Path(results_dir) if results_dir is not None else RESULTS_DIR]
    if os.environ.get(RECORD_TO_ENV):
        folders.append(Path(os.environ[RECORD_TO_ENV]))
    for directory in folders:
        if directory.is_dir():
            for path in sorted(directory.glob("*.json")):
                found[path.stem] = json.loads(path.read_text(encoding="utf-8"))
    for stem, figures in _SESSION.items():
        found[stem] = {**found.get(stem, {}), **figures}
    return dict(sorted(found.items()))


def load_recorded(name: str, *, results_dir: Path | str | None = None, default=None):
    """One recorded file, e.g. ``load_recorded("bench_cpu")`` or ``load_recorded("ch03")``.

    Looks at this kernel's own figures first, then the reader's ``SELFATTN_RECORD_TO``
    folder, then ``results/`` next to the notebook, then the installed package. With
    ``SELFATTN_LIVE=1`` a recorded study (:data:`STUDIES`) is first recomputed by its script,
    which takes minutes (a clone of the repository is needed; elsewhere it says so and reads
    the recorded results).

    Args:
        name: the file's stem (no ``.json``).
        results_dir: the local folder to look in first (default ``results/``).
        default: returned when neither place has the file; if ``None``, a missing file
            raises ``FileNotFoundError`` naming both places.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"load_recorded: name must be a non-empty str, got {name!r}")
    if live() and name in STUDIES and name not in _SESSION:
        _recompute(name)
    figures = _all_recorded(results_dir).get(name)
    if figures is None:
        if default is not None:
            return default
        directory = Path(results_dir) if results_dir is not None else RESULTS_DIR
        raise FileNotFoundError(
            f"no recorded results {name!r}: neither {directory / (name + '.json')} "
            "nor the package's selfattn.recorded holds it"
        )
    return figures


def load_results(results_dir: Path | str | None = None) -> dict[str, dict]:
    """All recorded results, ``{file stem: {name: value}}`` (local ``results/`` over packaged)."""
    return _all_recorded(results_dir)


def chapter_titles(*, results_dir: Path | str | None = None) -> dict[str, str]:
    """The book's chapters in order, ``{"ch01": "1. Why self-attention", ...}``.

    The key is the name the chapter's :func:`recorder` uses. The registry is written from the
    table of contents (``make notebooks``) and ships with the package, so a chapter run alone
    (on Colab) knows the others; a local ``results/toc.json`` wins, as for every record.
    """
    return load_recorded("toc", results_dir=results_dir)
