"""Precompute chapter 11's logit-growth study: chapters/results/ch11_logit_growth.json.

Attention-logit growth (Dehghani et al., 2023; Wortsman et al., 2023) in miniature: a two-layer
character GPT (d_model 32, 4 heads, learned positions, the corpus of chapter 8) is trained with
AdamW for a few hundred steps at rising learning rates, in three variants of its attention
layers: plain (chapter 5's layer), QK-norm (``qk_norm=True``) and Gemma 2's soft-capping of the
scores (``softcap``). Recorded per run: the largest attention logit ``|q . k| / sqrt(d_head)``
(before any cap) over both layers on a fixed batch, every few steps, and the training loss. A
run diverged when its loss is not finite or ends above the loss of guessing uniformly. A few
minutes of CPU:

    .venv/bin/python tools/ch11_logit_growth.py
"""

from __future__ import annotations

import math
from concurrent.futures import ProcessPoolExecutor

import torch

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from selfattn.data.text import char_vocab, char_windows, corpus
from selfattn.models.transformer import MiniGPT
from selfattn.multihead import MultiHeadAttention

from tools._precompute import RESULTS, parser, write_json

OUT = RESULTS / "ch11_logit_growth.json"
CONFIG = dict(
    d_model=32, num_heads=4, num_layers=2, n=32, batch=16, steps=200, every=20, softcap=20.0
)
LRS = (1e-2, 3e-2, 1e-1)
VARIANTS = ("plain", "qk_norm", "softcap")
SEEDS = (0, 1, 2)


def build(variant: str, vocab_size: int, seed: int) -> MiniGPT:
    """The chapter-8 MiniGPT with ``variant``'s attention layers (same seed, same init)."""
    c = CONFIG
    torch.manual_seed(seed)
    model = MiniGPT(
        vocab_size,
        d_model=c["d_model"],
        num_heads=c["num_heads"],
        num_layers=c["num_layers"],
        max_len=c["n"],
    )
    options = {"plain": {}, "qk_norm": {"qk_norm": True}, "softcap": {"softcap": c["softcap"]}}
    for block in model.decoder.blocks:
        old = block.attn
        new = MultiHeadAttention(c["d_model"], c["num_heads"], **options[variant])
        new.qkv.load_state_dict(old.qkv.state_dict())
        new.out.load_state_dict(old.out.state_dict())
        block.attn = new
    return model


def max_logit(model: MiniGPT, ids: torch.Tensor) -> float:
    """The largest ``|q . k| * scale`` over both layers' causal scores (before any cap)."""
    found = []

    def hook(layer, args, kwargs):
        x = args[0]
        d = layer.d_q
        qkv = layer.qkv(x)
        q = qkv[..., :d].unflatten(-1, (layer.num_heads, layer.d_head)).transpose(1, 2)
        k = qkv[..., d : d + layer.d_kv].unflatten(-1, (layer.num_heads, layer.d_head))
        k = k.transpose(1, 2)
        if layer.q_norm is not None:
            q, k = layer.q_norm(q), layer.k_norm(k)
        s = (q @ k.transpose(-2, -1)) * layer.d_head**-0.5
        n = s.shape[-1]
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        found.append(float(s.abs().masked_fill(~causal, 0).max()))

    handles = [
        b.attn.register_forward_pre_hook(hook, with_kwargs=True) for b in model.decoder.blocks
    ]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in handles:
            h.remove()
    return max(found)


def run(variant: str, lr: float, seed: int, *, steps: int | None = None) -> dict:
    """Train one model; its loss and largest logit every ``every`` steps."""
    c = CONFIG
    steps = c["steps"] if steps is None else steps
    text = corpus(4000, seed=0)
    vocab = char_vocab(text)
    data = vocab.encode(list(text))
    model = build(variant, len(vocab), seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    probe, _ = char_windows(data, c["n"], c["batch"], generator=torch.Generator().manual_seed(99))
    losses, logits = [], []
    for step in range(steps + 1):
        x, y = char_windows(data, c["n"], c["batch"], generator=g)
        loss = model.loss(x, y)
        if step % c["every"] == 0:
            losses.append(float(loss.detach()))
            logits.append(max_logit(model, probe))
        if step == steps:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    uniform = math.log(len(vocab))
    final = losses[-1]
    return {
        "variant": variant,
        "lr": lr,
        "seed": seed,
        "loss": losses,
        "max_logit": logits,
        "uniform_loss": uniform,
        "diverged": not math.isfinite(final) or final > uniform,
    }


def seed_runs(seed: int) -> list[dict]:
    """Every learning rate and variant of one seed (one worker process)."""
    torch.set_num_threads(1)
    runs = []
    for lr in LRS:
        for variant in VARIANTS:
            r = run(variant, lr, seed)
            last, top = r["loss"][-1], max(r["max_logit"])
            print(
                f"seed {seed} lr {lr:g} {variant}: loss {last:.3f}, max logit {top:.1f}",
                flush=True,
            )
            runs.append(r)
    return runs


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, OUT)
    p.add_argument("--workers", type=int, default=len(SEEDS), help="processes, one per seed")
    args = p.parse_args(argv)
    with ProcessPoolExecutor(args.workers) as pool:
        runs = [r for runs in pool.map(seed_runs, SEEDS) for r in runs]
    write_json(
        args.out,
        {
            "config": CONFIG,
            "lrs": list(LRS),
            "variants": list(VARIANTS),
            "seeds": list(SEEDS),
            "runs": runs,
        },
    )
    print("wrote", args.out)


if __name__ == "__main__":
    main()
