"""Chapter 6's extrapolation experiment over several seeds (too slow to run live).

The chapter trains the six encodings once, live, on seed 0 and shows beside it the table
this script records: every encoding trained and tested on each seed with the chapter's
budget (:func:`selfattn.models.extrapolation_study`). Seed 0 of the table is the chapter's
live run, and the chapter checks that they agree.

    .venv/bin/python tools/ch06_extrapolation_seeds.py            # seeds 0-4, ~3 min CPU
    .venv/bin/python tools/ch06_extrapolation_seeds.py --seeds 0 1 2 --out /tmp/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from selfattn.models import extrapolation_study

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "chapters" / "results" / "ch06_seeds.json"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    os.environ.setdefault("SELFATTN_PROGRESS", "0")
    torch.set_num_threads(1)  # as in the chapters: the runs reproduce the live seed exactly
    start = time.process_time()
    study = extrapolation_study(args.seeds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(study, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out} ({time.process_time() - start:.0f} s CPU)")


if __name__ == "__main__":
    main()
