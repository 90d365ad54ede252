"""What chapter 11's recorded studies share (``tools/ch11_retrieval.py``,
``tools/ch11_sinks_gates.py``): their command line, with ``--workers``, and their seeds run
in worker processes."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tools._precompute import parser

#: The training both studies use: 500 AdamW steps on batches of 64, learning rate 3e-3.
TRAINING = dict(steps=500, batch=64, lr=3e-3)


def seeds_in_processes(
    doc: str,
    out: Path,
    seed_runs: Callable[[int], object],
    seeds: Sequence[int],
    argv: list[str] | None = None,
) -> tuple[argparse.Namespace, list]:
    """Parse a study's command line (``--out``, ``--workers``: processes, one per seed) and run
    ``seed_runs`` on each of ``seeds``; returns the arguments and the results, in seed order."""
    p = parser(doc, out)
    p.add_argument("--workers", type=int, default=1, help="processes, one per seed")
    args = p.parse_args(argv)
    with ProcessPoolExecutor(args.workers) as pool:
        return args, list(pool.map(seed_runs, seeds))
