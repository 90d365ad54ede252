"""Run each chapter as a reader who skips every Deeper part: the main path must run on its own.

    python tools/main_path_run.py                        # every chapter in _toc.yml
    python tools/main_path_run.py chapters/03_*.ipynb    # just these
    python tools/main_path_run.py --workers 1 --keep     # one kernel at a time, keep the copies
    python tools/main_path_run.py --with-deeper          # the control: the whole chapters

A Deeper part is a collapsed admonition titled "Deeper: ..." whose code cells are tagged
``deeper`` (tests/test_main_path.py). A reader may skip all of them, so no main-path cell may
need anything a Deeper cell defines (docs/design.md, "The main path must read and run on its
own"). For each chapter this script

1. copies the notebook, with every ``deeper`` code cell removed, alone into an empty temporary
   folder (as tools/reader_run.py copies it), with reader_run's stub guard appended
   (:func:`reader_run.stub_guard_cell`, computed on the copy: "Run all" leaves the reader's
   exercise stubs untouched) and one last cell that lists the claims that failed;
2. runs it top to bottom in a fresh kernel (nbclient) in the reader's mode: ``SELFATTN_RECORD``
   and ``SELFATTN_RECORD_TO`` unset, so claims print a note instead of raising and nothing is
   written into the repository (the kernel's working folder is the copy's);
3. fails if any remaining cell raises, or if any claim fails: a sentence of the main path that
   the reader's own run no longer supports once the Deeper parts are gone is a broken main path
   too.

Outputs are not compared with the committed ones (strict nbval, tools/reader_run.py, does that
for the whole chapter): without the Deeper cells, a later cell may draw other random numbers.
Exercise stubs raise on purpose only inside their checker, which catches it and prints "not
attempted yet", as in every run of the book; a cell tagged ``raises-exception`` (nbval's and
nbclient's convention) may raise, as it may under nbval. Runs with the checkout's environment
(its editable ``selfattn``); whether a chapter runs from the installed wheel alone is
tools/reader_run.py's business. Prints each chapter's time; ``make test-main-path`` runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from tools.book import toc_chapters  # noqa: E402
from tools.reader_run import stub_guard_cell  # noqa: E402

#: The last line of the appended cell: the claims that failed in this kernel, as JSON.
CLAIMS_MARK = "main_path_run failed claims: "

CLAIMS_CELL = (
    "# Added by tools/main_path_run.py: the claims that failed in this run.\n"
    "import json as _json\n"
    "import selfattn as _selfattn\n"
    f"print({CLAIMS_MARK!r} + _json.dumps(_selfattn.failed_claims()))\n"
)


def is_deeper(cell: dict) -> bool:
    return cell["cell_type"] == "code" and "deeper" in cell["metadata"].get("tags", [])


def main_path(nb: dict, *, keep_deeper: bool = False) -> dict:
    """``nb`` without its Deeper code cells (with them: ``keep_deeper``, the control run), with
    the stub guard and the claims cell appended."""
    nb = dict(nb)
    nb["cells"] = [c for c in nb["cells"] if keep_deeper or not is_deeper(c)]
    guard = stub_guard_cell(nb)
    added = [guard] if guard is not None else []
    added.append(
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "main-path-run-claims",
            "metadata": {},
            "outputs": [],
            "source": CLAIMS_CELL,
        }
    )
    nb["cells"] = nb["cells"] + added
    return nb


def recorded_seconds(path: Path) -> float:
    """How long the chapter's main path took when it was last executed (the cells' own
    timestamps, which tools/execute.py keeps): the order in which two workers finish soonest."""
    from datetime import datetime

    total = 0.0
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        times = cell.get("metadata", {}).get("execution", {})
        start, end = times.get("iopub.execute_input"), times.get("shell.execute_reply")
        if is_deeper(cell) or not (start and end):
            continue
        total += (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    return total


def reader_env() -> dict[str, str]:
    """The reader's mode: not recording, no results folder of their own, no progress bars."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env = {k: v for k, v in env.items() if not k.startswith("SELFATTN_RECORD")}
    return env | {"SELFATTN_PROGRESS": "0"}


def _error_text(cell) -> str:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return f"{out.get('ename')}: {out.get('evalue')}"
    return "an error"


def run_chapter(path: str, work: str, keep_deeper: bool = False) -> dict:
    """Run one chapter's main path in a fresh kernel; returns what happened (picklable).
    ``keep_deeper``: the whole chapter in the same mode, the control that tells a fault of the
    main path from one of the chapter."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    source = Path(path)
    folder = Path(work) / source.stem
    folder.mkdir(parents=True)
    original = json.loads(source.read_text(encoding="utf-8"))
    removed = 0 if keep_deeper else sum(is_deeper(c) for c in original["cells"])
    # Each kept cell's index in the chapter, for the report (the added cells have none).
    index = [i for i, c in enumerate(original["cells"]) if keep_deeper or not is_deeper(c)]
    nb_dict = main_path(original, keep_deeper=keep_deeper)
    copy = folder / source.name
    copy.write_text(json.dumps(nb_dict, indent=1, ensure_ascii=False), encoding="utf-8")
    nb = nbformat.read(copy, as_version=4)
    client = NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
    )
    start = time.perf_counter()
    error = None
    # The kernel inherits this process's environment: the reader's, while it starts and runs.
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(reader_env())
    try:
        client.execute()
    except CellExecutionError:
        failed = [
            (i, c) for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and any(o.output_type == "error" for o in c.outputs)
            and "raises-exception" not in c.metadata.get("tags", [])
        ]  # fmt: skip
        if failed:
            i, cell = failed[0]
            first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
            where = f"cell {index[i]}" if i < len(index) else "the added cell"
            error = f"{where} ({first[:60]!r}) raised {_error_text(cell)}"
        else:
            error = "a cell raised"
    finally:
        os.environ.clear()
        os.environ.update(saved)
    seconds = time.perf_counter() - start
    claims = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            for line in out.get("text", "").splitlines():
                if line.startswith(CLAIMS_MARK):
                    claims = json.loads(line[len(CLAIMS_MARK) :])
    nbformat.write(nb, copy)
    return {
        "path": path,
        "removed": removed,
        "seconds": seconds,
        "error": error,
        "claims": claims,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--workers", type=int, default=2, help="kernels at once (default 2)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the executed copies, print where"
    )
    parser.add_argument(
        "--with-deeper",
        action="store_true",
        help="the control: run the whole chapters the same way (a fault that remains is the "
        "chapter's, not the main path's)",
    )
    args = parser.parse_args(argv)
    chapters = [p.resolve() for p in args.notebooks] or toc_chapters()
    # The longest main paths first (as last recorded), so that two workers finish together.
    order = sorted(chapters, key=lambda p: -recorded_seconds(p))
    work = Path(tempfile.mkdtemp(prefix="selfattn-main-path-"))
    start = time.perf_counter()
    what = "whole chapters (the control)" if args.with_deeper else "Deeper cells removed"
    print(f"main path run: {len(chapters)} chapter(s), {what}, reader's mode")
    try:
        results = {}
        with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
            futures = {
                pool.submit(run_chapter, str(p), str(work), args.with_deeper): p for p in order
            }
            for future in as_completed(futures):
                path = futures[future]
                r = future.result()
                results[path] = r
                verdict = "ok" if not (r["error"] or r["claims"]) else "FAILED"
                print(
                    f"  {path.stem:36} {r['removed']:2d} Deeper cells removed "
                    f"{r['seconds']:5.0f}s  {verdict}",
                    flush=True,
                )
                if r["error"]:
                    print(f"      {r['error']}", flush=True)
                for sentence in r["claims"]:
                    print(f"      claim failed: {sentence!r}", flush=True)
        failed = [p.stem for p in chapters if results[p]["error"] or results[p]["claims"]]
        total = time.perf_counter() - start
        print(
            f"main path run: {len(chapters) - len(failed)}/{len(chapters)} passed in {total:.0f}s"
        )
        if failed:
            how = "as whole chapters" if args.with_deeper else "without their Deeper parts"
            print(f"main path run: FAILED {how}: " + ", ".join(failed))
        return 1 if failed else 0
    finally:
        if args.keep:
            print(f"main_path_run: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
