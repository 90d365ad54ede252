"""Chapter 2's coreference models for seeds 1 and 2 (too slow to train live with seed 0).

The chapter trains a one-layer and a two-layer attention model on the "it" task three
times, with seeds 0, 1 and 2, and analyses all six. It trains seed 0 of each depth live and
loads the others from the weights this script records: it runs the chapter's own code (the
notebook's import cell, the cells that build the task and its split, and the definitions
of the training cell) on one CPU thread, as the chapter does, and stores each trained
model's weights (float32, base64) and its final training loss. About 20 seconds of one
CPU core:

    .venv/bin/python tools/ch02_coref_seeds.py
    .venv/bin/python tools/ch02_coref_seeds.py --seeds 1 2 3 --out /tmp/x.json
"""

from __future__ import annotations

import base64
import json
import platform
import sys
from pathlib import Path

import torch

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from tools._precompute import RESULTS, seed_study_main

NOTEBOOK = Path(__file__).resolve().parents[1] / "chapters" / "02_queries_keys_values.ipynb"
DEFAULT_OUT = RESULTS / "ch02_coref_seeds.json"


def chapter_namespace() -> dict:
    """The chapter's imports, task, split and training code, executed from the notebook."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]

    def cell(marker: str) -> str:
        return next(s for s in code if marker in s)

    ns: dict = {"__name__": "ch02_chapter"}
    parts = [
        ("imports", cell('recorder("ch02")')),
        ("task", cell("task = CorefTask()")),
        ("split", cell("train, test = task.split(")),
        # the training cell up to the loop that trains the chapter's models
        ("definitions", cell("def train_coref(").split("\nSEEDS")[0]),
    ]
    for name, source in parts:
        if name == "task":
            ns["device"] = torch.device("cpu")
        exec(compile(source, f"{NOTEBOOK.name}: {name}", "exec"), ns)
    return ns


def encode(tensor: torch.Tensor) -> dict:
    t = tensor.detach().to("cpu", torch.float32).contiguous()
    return {"shape": list(t.shape), "data": base64.b64encode(t.numpy().tobytes()).decode()}


def study(seeds: list[int]) -> dict:
    ns = chapter_namespace()
    models = {}
    for n_layers in (1, 2):
        for seed in seeds:
            model, losses = ns["train_coref"](n_layers, seed)
            state = {k: encode(v) for k, v in model.state_dict().items()}
            models[f"{n_layers}/{seed}"] = {"final_loss": losses[-1], "state": state}
            print(f"{n_layers} layer(s), seed {seed}: final loss {losses[-1]:.4f}", flush=True)
    machine = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "platform": platform.platform(),
    }
    return {"config": {"seeds": list(seeds), "steps": 600}, "machine": machine, "models": models}


def main(argv: list[str] | None = None) -> None:
    seed_study_main(__doc__, study, DEFAULT_OUT, argv, seeds=(1, 2))


if __name__ == "__main__":
    main()
