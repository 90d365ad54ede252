"""Precompute chapter 11's two retrieval studies: chapters/results/ch11_retrieval.json.

Both train small causal models on chapter 8's multi-query associative recall (MQAR: ``p``
(key, value) pairs, one token each, then the ``p`` keys again in a random order; at each query
the model must output the value stored under that key), with learned positions, AdamW and a
one-cycle learning rate, 3 seeds each, and measure on held-out problems.

Differential attention on distractors: one block (attention and MLP, d_model 64) with a
standard 4-head layer (``MultiHeadAttention(bias=False)``) or a differential layer of the same
four projections (``DifferentialAttention``: 2 differential heads of two maps, plus four
vectors of 16 numbers for lambda), 32 pairs among 64 keys. Recorded per head at the queries:
the weight on the pair that holds the answer, and the absolute weight on every other position
(the distractors), as shares of the row's absolute weight (a differential row can hold
negative weights and sums to ``1 - lambda``); and the recall.

Layer schedules: two blocks (d_model 64, 4 heads), both local (a sliding window of 4 keys,
``window=4``: the last query reaches 2 (4 - 1) + 1 = 7 positions back), or local then global;
16 pairs. Recorded: the recall at queries whose pair lies within the local
stack's reach and beyond it. A few minutes of CPU:

    .venv/bin/python tools/ch11_retrieval.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from selfattn.data.mqar import mqar_batch
from selfattn.differential import DifferentialAttention
from selfattn.multihead import MultiHeadAttention
from torch import nn

from tools._ch11_common import TRAINING, seeds_in_processes
from tools._precompute import RESULTS, write_json

OUT = RESULTS / "ch11_retrieval.json"
DIFF = dict(
    pairs=32,
    n_keys=64,
    n_values=32,
    d_model=64,
    num_heads=4,
    **TRAINING,
    eval_batch=128,
)
SCHEDULE = dict(
    pairs=16,
    n_keys=64,
    n_values=32,
    d_model=64,
    num_heads=4,
    window=4,
    **TRAINING,
    eval_batch=128,
)
LAYERS = ("standard", "differential")
SCHEDULES = {"local, local": (4, 4), "local, global": (4, None)}
SEEDS = (0, 1, 2)


class RecallStack(nn.Module):
    """Key, value and position embeddings added; pre-LayerNorm blocks; a value read-out."""

    def __init__(self, attns: list[nn.Module], c: dict):
        super().__init__()
        d = c["d_model"]
        self.key = nn.Embedding(c["n_keys"], d)
        self.value = nn.Embedding(c["n_values"] + 1, d)
        self.pos = nn.Embedding(2 * c["pairs"], d)
        self.attns = nn.ModuleList(attns)
        self.ln1 = nn.ModuleList(nn.LayerNorm(d) for _ in attns)
        self.ln2 = nn.ModuleList(nn.LayerNorm(d) for _ in attns)
        self.mlps = nn.ModuleList(
            nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)) for _ in attns
        )
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, c["n_values"])

    def forward(self, keys, values, *, return_weights: bool = False):
        x = self.key(keys) + self.value(values) + self.pos(torch.arange(keys.shape[1]))
        maps = []
        for attn, ln1, ln2, mlp in zip(self.attns, self.ln1, self.ln2, self.mlps):
            out = attn(ln1(x), mask="causal", return_weights=return_weights)
            if return_weights:
                out, w = out
                maps.append(w)
            x = x + out
            x = x + mlp(ln2(x))
        logits = self.head(self.ln_f(x))
        return (logits, maps) if return_weights else logits


def train(model: nn.Module, c: dict, seed: int) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=c["lr"], weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=c["lr"], total_steps=c["steps"])
    g = torch.Generator().manual_seed(seed)
    for _ in range(c["steps"]):
        b = mqar_batch(
            c["batch"], c["pairs"], n_keys=c["n_keys"], n_values=c["n_values"], generator=g
        )
        logits = model(b.keys, b.values)
        loss = F.cross_entropy(logits.reshape(-1, c["n_values"]), b.targets.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def held_out(c: dict):
    return mqar_batch(
        c["eval_batch"],
        c["pairs"],
        n_keys=c["n_keys"],
        n_values=c["n_values"],
        generator=torch.Generator().manual_seed(99),
    )


def answer_positions(b) -> torch.Tensor:
    """``(B, p)``: the position of the pair each query asks for."""
    p = b.keys.shape[1] // 2
    return (b.keys[:, p:, None] == b.keys[:, None, :p]).float().argmax(-1)


def diff_run(layer: str, seed: int) -> dict:
    c = DIFF
    torch.manual_seed(seed)
    if layer == "standard":
        attn = MultiHeadAttention(c["d_model"], c["num_heads"], bias=False)
    else:
        attn = DifferentialAttention(c["d_model"], c["num_heads"], layer_index=0)
    model = RecallStack([attn], c)
    train(model, c, seed)
    b = held_out(c)
    with torch.no_grad():
        logits, (w,) = model(b.keys, b.values, return_weights=True)
    p = c["pairs"]
    queries = slice(p, 2 * p)
    hits = logits[:, queries].argmax(-1) == b.targets[:, queries]
    w = w[:, :, queries]  # (B, heads, p, 2p)
    where = answer_positions(b)[:, None, :, None].expand(-1, w.shape[1], -1, 1)
    target = w.gather(-1, where).squeeze(-1)  # (B, heads, p)
    total = w.abs().sum(-1)
    share = (target / total).mean((0, 2))
    noise = ((total - target.abs()) / total).mean((0, 2))
    result = {
        "layer": layer,
        "seed": seed,
        "parameters": sum(t.numel() for t in attn.parameters()),
        "recall": float(hits.float().mean()),
        "target_share": share.tolist(),  # per head
        "distractor_share": noise.tolist(),
        "target_weight": target.mean((0, 2)).tolist(),
        "row_sum": w.sum(-1).mean((0, 2)).tolist(),
    }
    print(result, flush=True)
    return result


def schedule_run(name: str, seed: int) -> dict:
    c = SCHEDULE
    torch.manual_seed(seed)
    attns = [MultiHeadAttention(c["d_model"], c["num_heads"], window=w) for w in SCHEDULES[name]]
    model = RecallStack(attns, c)
    train(model, c, seed)
    b = held_out(c)
    with torch.no_grad():
        logits = model(b.keys, b.values)
    p = c["pairs"]
    hits = logits[:, p:].argmax(-1) == b.targets[:, p:]
    distance = torch.arange(p, 2 * p) - answer_positions(b)  # (B, p)
    reach = len(SCHEDULES[name]) * (c["window"] - 1)
    near = distance <= reach
    result = {
        "schedule": name,
        "seed": seed,
        "recall": float(hits.float().mean()),
        "recall_near": float(hits[near].float().mean()),
        "recall_far": float(hits[~near].float().mean()),
        "share_far": float((~near).float().mean()),
    }
    print(result, flush=True)
    return result


def seed_runs(seed: int) -> tuple[list[dict], list[dict]]:
    torch.set_num_threads(1)
    return [diff_run(x, seed) for x in LAYERS], [schedule_run(x, seed) for x in SCHEDULES]


def main(argv: list[str] | None = None) -> None:
    args, done = seeds_in_processes(__doc__, OUT, seed_runs, SEEDS, argv)
    write_json(
        args.out,
        {
            "diff_config": DIFF,
            "schedule_config": SCHEDULE,
            "layers": list(LAYERS),
            "schedules": list(SCHEDULES),
            "seeds": list(SEEDS),
            "diff_runs": [r for d, _ in done for r in d],
            "schedule_runs": [r for _, s in done for r in s],
        },
    )
    print("wrote", args.out)


if __name__ == "__main__":
    main()
