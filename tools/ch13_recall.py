"""Precompute chapter 13's recall study: chapters/results/ch13_recall.json.

Chapter 8's multi-query associative recall at 32 and 64 pairs (64 and 128 tokens), width 32,
chapter 8's steps, batch and learning rate, for six models (``STACKS`` in
``selfattn.models.recall_stack``): softmax, linear, chapter 8's gated linear, the delta
rule, the gated delta rule (each one layer, each recurrent one with a 32 x 32 state) and a
hybrid (a gated-delta layer, then one softmax layer). Seeds 0 and 1. About 6 minutes of
one CPU core on an idle machine; the seeds can run in two processes and be merged:

    .venv/bin/python tools/ch13_recall.py --seeds 0 --out /tmp/r0.json
    .venv/bin/python tools/ch13_recall.py --seeds 1 --out /tmp/r1.json
    .venv/bin/python tools/ch13_recall.py --merge /tmp/r0.json /tmp/r1.json
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import torch

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from selfattn.models.recall_stack import STACKS, train_recall

from tools._precompute import RESULTS, parser, write_json

OUT = RESULTS / "ch13_recall.json"
CONFIG = dict(steps=600, batch=32, lr=1e-2, d_model=32, eval_batch=512)
PAIRS = (32, 64)
SEEDS = (0, 1)


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, OUT)
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.add_argument("--merge", type=Path, nargs="+", default=None)
    args = p.parse_args(argv)
    machine = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "platform": platform.platform(),
    }
    if args.merge:
        parts = [json.loads(f.read_text()) for f in args.merge]
        runs = sorted(
            (r for part in parts for r in part["runs"]),
            key=lambda r: (r["n_pairs"], list(STACKS).index(r["model"]), r["seed"]),
        )
        seeds = sorted({r["seed"] for r in runs})
        config = {**CONFIG, "pairs": list(PAIRS), "seeds": seeds, "models": STACKS}
        write_json(args.out, {"config": config, "machine": machine, "runs": runs})
        print("wrote", args.out)
        return
    torch.set_num_threads(1)
    runs, start = [], time.time()
    for n_pairs in PAIRS:
        for model in STACKS:
            for seed in args.seeds:
                r = train_recall(model, n_pairs, seed=seed, **CONFIG)
                runs.append(r)
                print(
                    f"{model:>12} p={n_pairs:>3} seed {seed}: recall {r['recall']:.3f} "
                    f"({r['seconds']:.1f} s CPU, {time.time() - start:.0f} s)",
                    flush=True,
                )
    config = {**CONFIG, "pairs": list(PAIRS), "seeds": args.seeds, "models": STACKS}
    write_json(args.out, {"config": config, "machine": machine, "runs": runs})
    print("wrote", args.out)


if __name__ == "__main__":
    main()
