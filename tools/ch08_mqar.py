"""Precompute chapter 8's associative-recall study: chapters/results/ch08_mqar.json.

Four mixers (softmax, linear, gated linear, sliding-window attention), one layer of width 32,
trained on multi-query associative recall at 8, 16, 32 and 64 pairs (sequences of 16 to 128
tokens), 3 seeds each, the same steps, batch, learning rate and parameter count; the linear
state (32 x 32 + 32 numbers) and the window's cache (2 x 16 x 32) hold about the same
numbers. About 6 minutes of one CPU core on an idle machine:

    .venv/bin/python tools/ch08_mqar.py
"""

from __future__ import annotations

import platform
import sys
import time

import torch

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from selfattn.data.mqar import MIXERS, train_mqar

from tools._precompute import RESULTS, parser, write_json

OUT = RESULTS / "ch08_mqar.json"
CONFIG = dict(steps=600, batch=32, lr=1e-2, d_model=32, window=16, eval_batch=512)
PAIRS = (8, 16, 32, 64)
SEEDS = (0, 1, 2)


def main(argv: list[str] | None = None) -> None:
    out = parser(__doc__, OUT).parse_args(argv).out
    torch.set_num_threads(1)
    runs = []
    start = time.time()
    for p in PAIRS:
        for mixer in MIXERS:
            for seed in SEEDS:
                r = train_mqar(mixer, p, seed=seed, **CONFIG)
                runs.append(r)
                print(
                    f"{mixer:>15} p={p:>3} seed {seed}: recall {r['recall']:.3f} "
                    f"({r['seconds']:.1f} s CPU, {time.time() - start:.0f} s)",
                    flush=True,
                )
    machine = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "platform": platform.platform(),
    }
    config = {**CONFIG, "pairs": list(PAIRS), "seeds": list(SEEDS)}
    write_json(out, {"config": config, "machine": machine, "runs": runs})
    print("wrote", out)


if __name__ == "__main__":
    main()
