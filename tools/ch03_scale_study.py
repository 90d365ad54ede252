"""Chapter 3's forgotten-scale study: the 2 x 2 grid at three d_k over three seeds.

The grid crosses the starting scores (unsaturated, as the scaled model's, or saturated, as
the unscaled model's) with the steps on the scores (as far as the scaled model's or as the
unscaled model's): ``scaled``, ``faststep``, ``slowstep`` and ``unscaled``, the chapter's
``CONDITIONS``. Beside it, the chapter's Deeper part reads the ``control`` (unscaled, started
from the scaled model's scores, steps d_k^(1/4) times the scaled model's). Each is trained on
seeds 0, 1 and 2 at d_k = 16, 64 and 512: 45 runs of 300 steps. The chapter trains seed 0
of the scaled and the unscaled model live at d_k = 512 and reads everything else from the
file this script writes. The script runs the chapter's own code: it executes the notebook's
import cell and the cells that define ``train_recall`` and ``summarise``, on one CPU thread
with subnormal floats flushed to zero, as the chapter trains, so its seed 0 at d_k = 512 is
the chapter's live run on the machine that records it. About a minute and a half of one CPU
core (82 s where it was recorded):

    .venv/bin/python tools/ch03_scale_study.py
    .venv/bin/python tools/ch03_scale_study.py --seeds 0 1 2 3 4 --out /tmp/x.json

The runs that start saturated or take the unscaled model's steps are chaotic: on another CPU
(another rounding in the last bits) the same seed can end at a very different loss, so the
chapter's sentences count runs over seeds.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import torch

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from tools._precompute import RESULTS, seed_study_main

NOTEBOOK = Path(__file__).resolve().parents[1] / "chapters" / "03_scaled_dot_product.ipynb"
DEFAULT_OUT = RESULTS / "ch03_scale_study.json"
D_KS = (16, 64, 512)


def chapter_namespace() -> dict:
    """The chapter's imports and experiment definitions, executed from the notebook."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    imports = next(s for s in code if 'recorder("ch03")' in s)
    # The experiment's constants and helpers, then its training loop (two cells, in order).
    first = next(i for i, s in enumerate(code) if "CONDITIONS = " in s)
    last = next(i for i, s in enumerate(code) if "def train_recall(" in s)
    ns: dict = {"__name__": "ch03_chapter"}
    exec(compile(imports, f"{NOTEBOOK.name}: imports", "exec"), ns)
    ns["device"] = torch.device("cpu")
    for i in range(first, last + 1):
        exec(compile(code[i], f"{NOTEBOOK.name}: code cell {i}", "exec"), ns)
    return ns


def study(seeds: list[int]) -> dict:
    ns = chapter_namespace()
    torch.set_flush_denormal(True)  # as the chapter trains (see its Deeper part)
    test = ns["to_device"](
        ns["key_value_recall"](2000, generator=torch.Generator().manual_seed(123))
    )
    runs = {}
    # The grid's four cells and the control, at every d_k.
    cases = [(d_k, c) for d_k in D_KS for c in (*ns["CONDITIONS"], ns["CONTROL"])]
    for d_k, condition in cases:
        for seed in seeds:
            model, losses, on_right = ns["train_recall"](condition, seed, d_k=d_k)
            r = ns["summarise"](model, losses, test)
            if d_k == ns["D_K"]:  # the curves the chapter plots
                r["losses"] = [float(f"{x:.5g}") for x in losses]
                r["on_right"] = [float(f"{x:.4g}") for x in on_right]
            runs[f"{d_k}/{condition}/{seed}"] = r
            print(
                f"d_k {d_k:>3} {condition:<8} seed {seed}: final {r['final']:.4f},"
                f" below 0.1 at {r['reached']}",
                flush=True,
            )
    torch.set_flush_denormal(False)
    config = {
        "d_ks": list(D_KS),
        "seeds": list(seeds),
        "steps": ns["STEPS"],
        "batch": ns["BATCH"],
        "lr": ns["LR"],
        "d_model": ns["D_MODEL"],
        "grid": [[*cell, c] for cell, c in ns["GRID"].items()],
        "control": ns["CONTROL"],
    }
    machine = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "platform": platform.platform(),
    }
    return {"config": config, "machine": machine, "runs": runs}


def main(argv: list[str] | None = None) -> None:
    seed_study_main(__doc__, study, DEFAULT_OUT, argv, seeds=(0, 1, 2))


if __name__ == "__main__":
    main()
