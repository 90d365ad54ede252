"""Run chapter notebooks top to bottom in a fresh kernel and save their outputs and widget state.

    python tools/execute.py                       # every chapter in _toc.yml
    python tools/execute.py chapters/03_*.ipynb   # just these

Outputs are written back into the notebooks, which are committed: the website
is built from them, and strict nbval checks that they reproduce.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from tools.book import toc_chapters  # noqa: E402


def execute(path: Path, timeout: int = 900) -> float:
    nb = nbformat.read(path, as_version=4)
    # The chapter's recorder (chNN) rewrites its results file from scratch, so a figure the
    # chapter no longer records does not linger there for chapter 10 to quote.
    stale = path.parent / "results" / f"ch{path.stem[:2]}.json"
    if path.stem[:2].isdigit() and stale.exists():
        stale.unlink()
    # Same environment as the nbval tests: no progress bars, one thread (set by selfattn.setup).
    os.environ["SELFATTN_PROGRESS"] = "0"
    # Recording the book: claims raise, and each chapter writes chapters/results/<chNN>.json.
    os.environ["SELFATTN_RECORD"] = "1"
    # Recording also saves every figure as SVG (selfattn.setup); without a fixed date,
    # matplotlib stamps each SVG with the time it was drawn and every re-record changes it.
    os.environ.setdefault("SOURCE_DATE_EPOCH", "0")
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
    )
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    nbformat.write(nb, path)
    # CPU time of the (reaped) kernel: close to the wall time on an otherwise idle machine,
    # since selfattn.setup() runs torch on one thread.
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    print(f"  kernel CPU time {cpu:.1f} s", flush=True)
    return elapsed


def main(argv: list[str]) -> None:
    paths = [Path(a) for a in argv] or toc_chapters()
    total = 0.0
    for path in paths:
        print(f"executing {path} ...", flush=True)
        seconds = execute(path)
        total += seconds
        print(f"  done in {seconds:.1f} s", flush=True)
    print(f"{len(paths)} notebook(s) in {total:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
