"""Chapter 1's long-range task over several seeds (too slow to run live).

The chapter trains its three configurations once, live, on seed 0 (an LSTM and an attention
model on distances 1-100, the same LSTM on distances 1-30; 1,200 steps of Adam on batches of
32) and shows beside that run the table this script records: the same three trainings for
each seed, their accuracy on 200 fresh sequences at each test distance, the LSTMs' most
persistent forget gate, and where the attention model's '?' looks. The recipe is the
chapter's own (section 1.3), written out here as there; on the machine that records the book,
seed 0 of the table is the chapter's live run. On another CPU a float32 training run can end
elsewhere, so the chapter compares its live run with the table only over what is robust.

    .venv/bin/python tools/ch01_long_range_seeds.py             # seeds 0-4, ~3 min CPU
    .venv/bin/python tools/ch01_long_range_seeds.py --seeds 0 1 --out /tmp/x.json

The chapter also quotes the same study on the book's second floating-point path (another
CPU's rounding, as ``tools/reader_run.py --paths second`` runs the chapters):

    ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE .venv/bin/python \
        tools/ch01_long_range_seeds.py --out chapters/results/ch01_long_range_seeds_second.json
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from selfattn import train_loop
from selfattn.data import LongRangeTask
from selfattn.models import AttentionClassifier, RecurrentClassifier
from selfattn.widgets.ch01 import lstm_forget_gates

from tools._precompute import RESULTS, seed_study_main

OUT = RESULTS / "ch01_long_range_seeds.json"
STEPS, BATCH = 1200, 32
DISTANCES = [1, 2, 5, 10, 20, 50, 100, 200, 400, 800]
CONFIGS = {
    "lstm": ("LSTM", (1, 100)),
    "attn": ("attention", (1, 100)),
    "lstm_short": ("LSTM", (1, 30)),
}
task = LongRangeTask(8)


def loss_fn(model, batch):
    ids, target = batch
    return F.cross_entropy(model(ids), target)


def train(kind, distances, seed):
    """The chapter's ``train``: the same initial weights and batches for a seed."""
    torch.manual_seed(seed)
    vocab, classes = len(task.vocab), task.num_classes
    if kind == "LSTM":
        model = RecurrentClassifier(vocab, classes, d_embed=16, d_hidden=32)
    else:
        model = AttentionClassifier(vocab, classes, d_model=32, num_layers=1)
    sampler = task.sampler(distances, BATCH, seed=seed + 1)
    lr = 1e-2 if kind == "LSTM" else 3e-3
    losses = train_loop(model, sampler, loss_fn, steps=STEPS, lr=lr)
    return model, losses


@torch.no_grad()
def accuracy(model, distance, n=200, chunk=50):
    """The chapter's ``accuracy``: 200 fresh sequences, the same ones for every model."""
    ids, target = task.batch(distance, n, seed=10_000 + distance)
    predictions = torch.cat([model(ids[i : i + chunk]).argmax(-1) for i in range(0, n, chunk)])
    return (predictions == target).float().mean().item()


@torch.no_grad()
def forget_stats(model):
    """The largest mean forget gate after the key, and that unit's product over 100 steps."""
    ids, _ = task.batch(100, 200, seed=7)
    f = lstm_forget_gates(model.rnn, model.embed(ids))[:, 1:]
    mean_gate = f.mean(dim=(0, 1))
    unit = int(mean_gate.argmax())
    return mean_gate[unit].item(), f[:, :, unit].mean(dim=0).prod().item()


@torch.no_grad()
def attention_stats(model):
    """Where '?' looks: its weight on the key at distance 50, and at 800 the margins."""
    ids, _ = task.batch(50, 200, seed=8)
    _, weights = model(ids, return_weights=True)
    key_50 = weights[0][:, 0, -1][:, 0].mean().item()
    ids, _ = task.batch(800, 200, seed=10_800)
    _, weights = model(ids, return_weights=True)
    log_w = weights[0][:, 0, -1].log()
    rel = log_w[:, 1:-1] - log_w[:, :1]
    mean_margin = -rel.mean().item()
    strongest = rel.argmax(dim=-1) + 1
    same = ids[:, 1:-1] == ids[:, :1]
    draw = torch.Generator().manual_seed(0)
    untrained = 100 + torch.randperm(700, generator=draw)
    return {
        "weight_on_key_50": key_50,
        "margin_800": mean_margin,
        "dilution_only_800": 1 / (1 + 800 * math.exp(-mean_margin)),
        "weight_on_key_800": log_w[:, 0].exp().mean().item(),
        "strongest_beyond": (strongest > 100).float().mean().item(),
        "margin_same_symbol": -rel[same].mean().item(),
        "margin_other_symbol": -rel[~same].mean().item(),
        "best_trained": rel[:, :100].max(dim=-1).values.mean().item(),
        "best_untrained": rel[:, untrained[:100]].max(dim=-1).values.mean().item(),
    }


def run(seed: int) -> dict:
    """The three configurations trained on ``seed``: ``{config: figures}``."""
    out = {}
    for key, (kind, span) in CONFIGS.items():
        model, losses = train(kind, span, seed)
        model.eval()
        figures = {
            "loss_last_100": sum(losses[-100:]) / 100,
            "acc": {str(s): accuracy(model, s) for s in DISTANCES},
        }
        if kind == "LSTM":
            top, product = forget_stats(model)
            figures |= {"forget_top": top, "forget_product_100": product}
        else:
            figures |= attention_stats(model)
        out[key] = figures
    return out


def _rounded(value):
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return float(f"{value:.4g}")


def study(seeds: list[int]) -> dict:
    return {
        "steps": STEPS,
        "batch": BATCH,
        "distances": DISTANCES,
        "seeds": {str(seed): _rounded(run(seed)) for seed in seeds},
    }


def main(argv: list[str] | None = None) -> None:
    seed_study_main(__doc__, study, OUT, argv)


if __name__ == "__main__":
    main()
