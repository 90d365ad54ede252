"""Chapter 6's long-context study over several seeds (too slow to run live in full).

A retrieval model is trained at length L = 32 with RoPE, with sinusoidal positions and
with none, and tested at L, 2L and 4L; the RoPE model is also tested with position
interpolation, NTK-aware scaling and YaRN swapped in at the test length
(:func:`selfattn.models.long_context.rope_scaling_study`). The chapter trains seed 0 live
and checks it against this table.

    .venv/bin/python tools/ch06_rope_scaling.py            # seeds 0-4, ~2 min CPU
    .venv/bin/python tools/ch06_rope_scaling.py --seeds 0 1 2 --out /tmp/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from selfattn.models.long_context import rope_scaling_study

DEFAULT_OUT = (
    Path(__file__).resolve().parents[1] / "chapters" / "results" / "ch06_rope_scaling.json"
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    os.environ.setdefault("SELFATTN_PROGRESS", "0")
    torch.set_num_threads(1)  # as in the chapters: seed 0 reproduces the live run exactly
    start = time.process_time()
    study = rope_scaling_study(args.seeds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(study, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out} ({time.process_time() - start:.0f} s CPU)")


if __name__ == "__main__":
    main()
