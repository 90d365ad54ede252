"""Write the concept-check cells and the exercise-progress cell into the chapters.

    python tools/apply_quizzes.py              # every chapter that has checks or exercises
    python tools/apply_quizzes.py --check      # list the chapters whose cells differ
    python tools/apply_quizzes.py PATH ...     # only these notebooks (e.g. a copy)

Concept checks (``lib/selfattn/quizzes/chNN.json``, see :mod:`selfattn.quizzes`): each check
names the section it closes (``"after": "3.2"``); its cell goes just before the next cell that
starts another ``##`` section (checks closing the same section keep the data's order). The cell
is written *with* its output, which is a pure function of the data (no random ids), and an
execution count (the code cells are numbered as one run numbers them), so nothing needs to be
re-executed and strict nbval reproduces it. Tags:
``concept-check`` (ours) and ``remove-input`` (myst-nb: the website shows only the quiz,
Jupyter and Colab the call too).

The progress cell (``selfattn.exercises.progress(N)``, tag ``exercise-progress``) goes at the
end of the ``## Exercises`` section, before ``## Summary``. Its output is what a "Run all"
prints (every exercise still a stub, so each is ⏳; solutions' checks do not count), computed
here the same way from the chapter's ``EXERCISES``; ``tools/execute.py`` records the same
output from a real run, and strict nbval checks that the two agree. Run this tool again after
a chapter's exercises change.

Idempotent: a cell this tool wrote is found by its id (``concept-check-<id>``,
``exercise-progress``) and rewritten in place; a check removed from the data loses its cell;
nothing else in the notebook changes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from selfattn import quizzes  # noqa: E402

QUIZ_PREFIX = "concept-check-"
PROGRESS_ID = "exercise-progress"
PROGRESS_TAG = "exercise-progress"
SECTION = re.compile(r"^## +(\d+\.\d+)\b", re.M)
ANY_SECTION = re.compile(r"^## ", re.M)


def _dump(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def _source(cell: dict) -> str:
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def chapter_number(path: Path) -> int:
    m = re.match(r"(\d\d)_", path.name)
    if not m:
        raise SystemExit(f"{path}: not a chapter notebook (NN_name.ipynb)")
    return int(m[1])


def as_stored(output: dict) -> dict:
    """An output as nbformat writes it (and tools/execute.py): each text a list of lines."""
    out = dict(output)
    if "data" in out:
        out["data"] = {
            k: _lines(v) if isinstance(v, str) and not k.endswith("json") else v
            for k, v in out["data"].items()
        }
    if isinstance(out.get("text"), str):
        out["text"] = _lines(out["text"])
    return out


def quiz_cell(chapter: int, check_id: str) -> dict:
    source = (
        "from selfattn.quizzes import concept_check\n\n"
        f"concept_check({chapter}, {json.dumps(check_id)})"
    )
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": f"{QUIZ_PREFIX}{check_id}",
        "metadata": {"tags": [quizzes.CELL_TAG, "remove-input"]},
        "outputs": [as_stored(quizzes.output(chapter, check_id))],
        "source": _lines(source),
    }


def progress_output(chapter: int) -> list[dict]:
    """What ``progress(chapter)`` prints in a fresh kernel after "Run all" (all stubs)."""
    from selfattn.exercises import _core

    module = importlib.import_module(f"selfattn.exercises.ch{chapter:02d}")
    saved = dict(_core._RESULTS)
    _core._RESULTS.clear()
    try:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            _core.progress(chapter, module=module)
    finally:
        _core._RESULTS.clear()
        _core._RESULTS.update(saved)
    return [{"name": "stdout", "output_type": "stream", "text": _lines(buf.getvalue())}]


def progress_cell(chapter: int) -> dict:
    source = f"from selfattn.exercises import progress\n\nprogress({chapter})"
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": PROGRESS_ID,
        "metadata": {"tags": [PROGRESS_TAG]},
        "outputs": progress_output(chapter),
        "source": _lines(source),
    }


def _has_exercises(chapter: int) -> bool:
    try:
        module = importlib.import_module(f"selfattn.exercises.ch{chapter:02d}")
    except ModuleNotFoundError:
        return False
    return bool(getattr(module, "EXERCISES", ()))


def _end_of_section(cells: list[dict], number: str, path: Path) -> int:
    """Index of the first cell after section ``number``'s heading that starts another section."""
    start = None
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        text = _source(cell)
        found = [m[1] for m in SECTION.finditer(text)]
        if start is None and number in found:
            start = i
            # Another section heading after ours in the same cell: insert after this cell.
            after = text[text.index(f"## {number}") + 3 :]
            if ANY_SECTION.search(after):
                return i + 1
            continue
        if start is not None and ANY_SECTION.search(text):
            return i
    if start is None:
        raise SystemExit(f"{path}: no section '## {number}' for a concept check")
    return len(cells)


def _summary_index(cells: list[dict], path: Path) -> int:
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown" and re.search(r"^## Summary", _source(cell), re.M):
            return i
    raise SystemExit(f"{path}: no '## Summary' section to put the progress cell before")


def _ours(cell: dict) -> bool:
    cid = cell.get("id", "")
    return cid.startswith(QUIZ_PREFIX) or cid == PROGRESS_ID


def updated(nb: dict, path: Path) -> dict:
    """The notebook with its concept-check and progress cells as the data say."""
    chapter = chapter_number(path)
    previous = {c["id"]: c for c in nb["cells"] if _ours(c)}
    cells = [c for c in nb["cells"] if not _ours(c)]
    wanted: list[tuple[int, dict]] = []
    if chapter in quizzes.chapters():
        for order, item in enumerate(quizzes.load(chapter)["checks"]):
            index = _end_of_section(cells, item["after"], path)
            wanted.append((index * 1000 + order, quiz_cell(chapter, item["id"])))
    if _has_exercises(chapter):
        wanted.append((_summary_index(cells, path) * 1000 + 999, progress_cell(chapter)))
    for key, cell in sorted(wanted, key=lambda kv: kv[0], reverse=True):
        if cell["id"] in previous:  # what a run recorded (execution times) stays
            cell["metadata"] = {**previous[cell["id"]].get("metadata", {}), **cell["metadata"]}
        # Keys sorted, as nbformat (and so tools/execute.py) writes them.
        cells.insert(key // 1000, json.loads(json.dumps(cell, sort_keys=True)))
    # nbval refuses a cell with outputs and no execution count ("unrun reference cell"), and
    # tests/test_notebooks.py wants the counts of one run in order: the code cells are
    # numbered 1, 2, ... as a "Run all" numbers them (nbval does not compare counts).
    count = 0
    for cell in cells:
        if cell["cell_type"] == "code":
            count += 1
            cell["execution_count"] = count
            for out in cell.get("outputs", []):
                if out.get("output_type") == "execute_result":
                    out["execution_count"] = count
    nb = dict(nb)
    nb["cells"] = cells
    return nb


def rewrite(path: Path) -> bool:
    raw = path.read_text(encoding="utf-8")
    nb = json.loads(raw)
    if _dump(nb) != raw:
        sys.exit(f"{path}: not in nbformat's JSON layout; rewriting it would change more")
    new = _dump(updated(nb, path))
    if new == raw:
        return False
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(new)
    os.replace(tmp, path)
    return True


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: chapters/)")
    parser.add_argument("--check", action="store_true", help="only list what would change")
    args = parser.parse_args(argv)
    paths = args.paths or sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
    if args.check:
        stale = []
        for path in paths:
            raw = path.read_text(encoding="utf-8")
            if _dump(updated(json.loads(raw), path)) != raw:
                stale.append(str(path))
        if stale:
            sys.exit("concept-check or progress cells differ in:\n  " + "\n  ".join(stale))
        print(f"{len(paths)} notebooks: concept-check and progress cells are current")
        return
    changed = [path for path in paths if rewrite(path)]
    for path in changed:
        print(f"wrote the concept-check and progress cells of {path}")
    print(f"{len(changed)} of {len(paths)} notebooks changed (cells written with outputs)")


if __name__ == "__main__":
    main(sys.argv[1:])
