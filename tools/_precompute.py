"""What the scripts that precompute a chapter's recorded results share (``tools/chNN_*.py``).

Each of them trains or measures for minutes, too long for a chapter to run live, and writes
one JSON file under ``chapters/results/`` that the chapter reads back with
``selfattn.load_recorded``. This module gives them one command line (``--help`` describes the
script and runs nothing; ``--out`` writes elsewhere) and one way of writing the file.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

#: where the chapters' recorded results live (installed as ``selfattn.recorded``)
RESULTS = Path(__file__).resolve().parents[1] / "chapters" / "results"


def parser(doc: str, out: Path) -> argparse.ArgumentParser:
    """The command line of a precompute script: its docstring as help, and ``--out``.

    Args:
        doc: the script's ``__doc__``; the first line describes it, the rest is the epilogue.
        out: the file written by default.
    """
    summary, _, details = doc.strip().partition("\n")
    p = argparse.ArgumentParser(
        description=summary,
        epilog=details.strip() or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--out", type=Path, default=out, help="the JSON file to write (default: %(default)s)"
    )
    return p


def write_json(path: Path, data: Any, *, sort_keys: bool = False) -> None:
    """Write ``data`` to ``path`` as the results files are written: indent 1, a final newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=sort_keys) + "\n")


def seed_study_main(
    doc: str,
    study: Callable[[list[int]], dict],
    out: Path,
    argv: Sequence[str] | None = None,
    *,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
) -> None:
    """``main`` of a script that records ``study(seeds)``, a chapter's live run over more seeds.

    ``--seeds`` picks the seeds. The study runs as the chapters do (one CPU thread, no
    progress bars), so its seed 0 reproduces the chapter's live run exactly, and the result is
    written with sorted keys.
    """
    p = parser(doc, out)
    p.add_argument(
        "--seeds", type=int, nargs="+", default=list(seeds), help="default: %(default)s"
    )
    args = p.parse_args(argv)
    os.environ.setdefault("SELFATTN_PROGRESS", "0")
    torch.set_num_threads(1)
    start = time.process_time()
    result = study(args.seeds)
    write_json(args.out, result, sort_keys=True)
    print(f"wrote {args.out} ({time.process_time() - start:.0f} s CPU)")
