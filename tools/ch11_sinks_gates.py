"""Precompute chapter 11's sink-and-gate study: chapters/results/ch11_sinks_gates.json.

Where does a trained head put the weight it does not need? The task is a small version of the
Bigram-Backcopy task of Guo et al. (2024), a setting where plain softmax heads learn an attention
sink: each sequence starts with a ``<bos>`` token and then follows a fixed random bigram chain
over 24 tokens, except after one of 3 trigger tokens, where the next token repeats the token
before the trigger. Predicting the bigram needs no attention (the current token's embedding
suffices); copying needs a head that reads the previous token, but only at triggers. At every
other position that head has nothing useful to read.

A one-layer causal transformer (d_model 32, 2 heads, learned positions, attention only: no MLP,
so whatever a head reads goes straight into the prediction) is trained with AdamW for 500 steps
in three variants of its attention layer: plain (chapter 5's layer), with gpt-oss's learned
sink logit per head (``sinks=True``) and with the sigmoid output gate of Gated Attention
(``gate=True``), 3 seeds each. Recorded on held-out sequences, at non-trigger positions 4 and
later: the weight each head puts on ``<bos>`` (the mean over positions) and what a uniform row
would give it, the weight each head keeps on the tokens (less than 1 with a sink), the norm of
the attention output against its input's, the largest activation of the residual stream; at
trigger positions: the copying accuracy. A few minutes of CPU:

    .venv/bin/python tools/ch11_sinks_gates.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from selfattn.multihead import MultiHeadAttention
from torch import nn

from tools._ch11_common import TRAINING, seeds_in_processes
from tools._precompute import RESULTS, write_json

OUT = RESULTS / "ch11_sinks_gates.json"
CONFIG = dict(
    vocab=24,
    triggers=3,
    successors=3,
    n=32,
    d_model=32,
    num_heads=2,
    **TRAINING,
    eval_batch=256,
    start=4,
    mlp=False,
)
VARIANTS = ("plain", "sinks", "gate")
SEEDS = (0, 1, 2)


def bigram_table(seed: int = 0) -> torch.Tensor:
    """The fixed chain: each token's ``successors`` next tokens, equally likely, ``(V, s)``."""
    c = CONFIG
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.stack(
        [torch.randperm(c["vocab"], generator=g)[: c["successors"]] for _ in range(c["vocab"])]
    )


def backcopy_batch(batch: int, table: torch.Tensor, g: torch.Generator):
    """``(ids, targets, is_trigger)``, each ``(batch, n)``; ``ids[:, 0]`` is ``<bos>``."""
    c = CONFIG
    n, bos = c["n"], c["vocab"]
    seq = torch.empty(batch, n + 1, dtype=torch.long)
    seq[:, 0] = bos
    seq[:, 1] = torch.randint(c["vocab"], (batch,), generator=g)
    for t in range(2, n + 1):
        prev = seq[:, t - 1]
        pick = torch.randint(c["successors"], (batch,), generator=g)
        nxt = table[prev.clamp(max=c["vocab"] - 1), pick]
        copy = prev < c["triggers"]
        seq[:, t] = torch.where(copy, seq[:, t - 2], nxt)
    ids, targets = seq[:, :-1], seq[:, 1:]
    return ids, targets, ids < c["triggers"]


class TinyLM(nn.Module):
    """Embeddings, one pre-LayerNorm block (attention and MLP), a read-out."""

    def __init__(self, variant: str):
        super().__init__()
        c = CONFIG
        d = c["d_model"]
        self.tok = nn.Embedding(c["vocab"] + 1, d)
        self.pos = nn.Embedding(c["n"], d)
        self.ln1, self.ln2, self.ln_f = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        options = {"plain": {}, "sinks": {"sinks": True}, "gate": {"gate": True}}[variant]
        self.attn = MultiHeadAttention(d, c["num_heads"], **options)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, c["vocab"] + 1)

    def forward(self, ids: torch.Tensor, *, probe: bool = False):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        out, weights = self.attn(self.ln1(x), mask="causal", return_weights=True)
        stream = x + out
        y = stream + self.mlp(self.ln2(stream)) if CONFIG["mlp"] else stream
        logits = self.head(self.ln_f(y))
        if probe:
            return logits, weights, out, x, y
        return logits


def run(variant: str, seed: int) -> dict:
    """Train one model and measure where its heads put their weight."""
    c = CONFIG
    table = bigram_table()
    torch.manual_seed(seed)
    model = TinyLM(variant)
    opt = torch.optim.AdamW(model.parameters(), lr=c["lr"])
    g = torch.Generator().manual_seed(seed)
    for _ in range(c["steps"]):
        ids, targets, _ = backcopy_batch(c["batch"], table, g)
        logits = model(ids)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    ids, targets, trig = backcopy_batch(c["eval_batch"], table, torch.Generator().manual_seed(99))
    with torch.no_grad():
        logits, w, out, x, y = model(ids, probe=True)
    s0 = c["start"]
    rest = ~trig[:, s0:]  # (B, n - s0): positions where no copy is due
    w = w[:, :, s0:]  # (B, h, n - s0, n)
    on_bos = w[..., 0]  # (B, h, n - s0)
    kept = w.sum(-1)
    sel = rest[:, None].expand_as(on_bos)
    bos = [float(on_bos[:, i][sel[:, i]].mean()) for i in range(w.shape[1])]
    kept_h = [float(kept[:, i][sel[:, i]].mean()) for i in range(w.shape[1])]
    uniform = (1.0 / (torch.arange(s0, c["n"]) + 1.0)).expand_as(rest)[rest].mean()
    ratio = (out.norm(dim=-1) / x.norm(dim=-1))[:, s0:]
    hits = logits.argmax(-1) == targets
    result = {
        "variant": variant,
        "seed": seed,
        "train_loss": float(loss.detach()),
        "bos_weight": bos,  # per head, mean over non-trigger positions >= start
        "bos_uniform": float(uniform),  # what a uniform row would give <bos>
        "kept": kept_h,
        "out_norm_ratio_rest": float(ratio[rest].mean()),
        "out_norm_ratio_trigger": float(ratio[~rest].mean()),
        "max_activation": float(y.abs().max()),
        "max_activation_bos": float(y[:, 0].abs().max()),
        "copy_accuracy": float(hits[trig].float().mean()),
        "bigram_accuracy": float(hits[:, s0:][rest].float().mean()),
    }
    print(result, flush=True)
    return result


def seed_runs(seed: int) -> list[dict]:
    torch.set_num_threads(1)
    return [run(v, seed) for v in VARIANTS]


def main(argv: list[str] | None = None) -> None:
    args, done = seeds_in_processes(__doc__, OUT, seed_runs, SEEDS, argv)
    runs = [r for runs in done for r in runs]
    write_json(
        args.out,
        {"config": CONFIG, "variants": list(VARIANTS), "seeds": list(SEEDS), "runs": runs},
    )
    print("wrote", args.out)


if __name__ == "__main__":
    main()
