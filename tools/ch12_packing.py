"""Precompute chapter 12's packing study: chapters/results/ch12_packing.json.

A two-layer character LM (d_model 64, 4 heads, learned positions taken per document) is
trained on the same 1600 generated sentences, 16 per step in the same order, twice: padded
(one sentence per row, padded to the longest) and packed (sentences end to end in rows as long
as the longest, a causal document mask, per-document positions). Both layouts give every
sentence the same attention and positions, so the losses must agree to float rounding; the
seeds show how far apart two ordinary runs end. Reported per seed and layout: the held-out
loss (200 sentences), the mean fraction of padded positions, and real tokens per second. A few
minutes of CPU:

    .venv/bin/python tools/ch12_packing.py
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from selfattn.packing import LAYOUTS, make_documents, train_lm

from tools._precompute import RESULTS, seed_study_main

OUT = RESULTS / "ch12_packing.json"
CONFIG = dict(documents=1800, train=1600, steps=100, batch_docs=16, lr=3e-3)


def study(seeds: list[int]) -> dict:
    c = CONFIG
    docs, vocab_size = make_documents(c["documents"])
    runs = []
    for seed in seeds:
        for layout in LAYOUTS:
            r = train_lm(
                layout,
                docs[: c["train"]],
                docs[c["train"] :],
                vocab_size,
                steps=c["steps"],
                batch_docs=c["batch_docs"],
                lr=c["lr"],
                seed=seed,
            )
            del r["losses"]
            runs.append({"seed": seed, **r})
    return {"config": c, "runs": runs}


if __name__ == "__main__":
    seed_study_main(__doc__, study, OUT, seeds=(0, 1, 2))
