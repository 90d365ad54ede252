"""Precompute chapter 13's sparse recall study: chapters/results/ch13_sparse_recall.json.

Recall against the number of tokens each query attends to, for the two learned sparse layers
of chapter 13 on chapter 8's multi-query associative recall: 32 pairs (64 tokens), width 32,
one layer, ``selfattn.models.recall_stack``'s training (600 steps, batch 32, lr 1e-2).

* NSA: blocks of 8, a window of 8, 1, 2, 4 or 8 selected blocks (8, 16, 32 or 64 tokens:
  64 is every token);
* DSA: the indexer's top 1, 2 or 4 tokens (a dense warm-up, then sparse);
* full softmax attention (64 tokens), the ceiling.

Seeds 0, 1, 2. About 7 minutes of one CPU core on an idle machine; parts can run in
separate processes (``--models``, ``--tokens``, ``--seeds``) and be merged:

    .venv/bin/python tools/ch13_sparse_recall.py --models nsa --out /tmp/nsa.json
    .venv/bin/python tools/ch13_sparse_recall.py --models dsa softmax --out /tmp/dsa.json
    .venv/bin/python tools/ch13_sparse_recall.py --merge /tmp/nsa.json /tmp/dsa.json
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

from selfattn.models.recall_stack import train_recall

from tools._precompute import RESULTS, parser, write_json

OUT = RESULTS / "ch13_sparse_recall.json"
CONFIG = dict(steps=600, batch=32, lr=1e-2, d_model=32, eval_batch=512)
N_PAIRS = 32
#: the tokens each query selects, per model (softmax: every one of the 2 * 32)
TOKENS = {"nsa": (8, 16, 32, 64), "dsa": (1, 2, 4), "softmax": (64,)}
SEEDS = (0, 1, 2)


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, OUT)
    p.add_argument("--models", nargs="+", default=list(TOKENS), choices=list(TOKENS))
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.add_argument("--tokens", type=int, nargs="+", default=None, help="only these settings")
    p.add_argument("--merge", type=Path, nargs="+", default=None)
    args = p.parse_args(argv)
    machine = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "platform": platform.platform(),
    }
    if args.merge:
        runs = [r for f in args.merge for r in json.loads(f.read_text())["runs"]]
    else:
        torch.set_num_threads(1)
        runs, start = [], time.time()
        for model in args.models:
            for tokens in TOKENS[model]:
                if args.tokens is not None and tokens not in args.tokens:
                    continue
                for seed in args.seeds:
                    r = train_recall(model, N_PAIRS, seed=seed, tokens=tokens, **CONFIG)
                    r["tokens"] = tokens
                    runs.append(r)
                    print(
                        f"{model:>8} tokens {tokens:>3} seed {seed}: recall {r['recall']:.3f} "
                        f"({r['seconds']:.1f} s CPU, {time.time() - start:.0f} s)",
                        flush=True,
                    )
    runs.sort(key=lambda r: (list(TOKENS).index(r["model"]), r["tokens"], r["seed"]))
    config = {
        **CONFIG,
        "n_pairs": N_PAIRS,
        "tokens": {m: list(t) for m, t in TOKENS.items()},
        "seeds": sorted({r["seed"] for r in runs}),
        "nsa": {"block_size": 8, "window": 8},
        "dsa": {"index_heads": 4, "index_dim": 16, "dense_warmup_steps": CONFIG["steps"] // 4},
    }
    write_json(args.out, {"config": config, "machine": machine, "runs": runs})
    print("wrote", args.out)


if __name__ == "__main__":
    main()
