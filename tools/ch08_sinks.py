"""Precompute chapter 8's attention-sink study: chapters/results/ch08_sinks.json.

A two-layer character GPT (d_model 64, 4 heads, learned positions) is trained with full causal
attention on windows of 128 characters of the book's generated corpus, 3 seeds. It is then
evaluated, without retraining, on held-out windows with three masks: full causal attention;
a sliding window of 16 keys (the cache of a streaming decoder that evicts old tokens); and the
same window that also keeps the first 4 tokens (StreamingLLM's attention sinks). Reported: the
next-character loss (nats) at positions 32 to 127, where the window has evicted the start, and
the attention weight the full model puts on the first 4 tokens there. A few minutes of CPU:

    .venv/bin/python tools/ch08_sinks.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from selfattn.data.text import char_vocab, char_windows, corpus
from selfattn.efficient.sparse import sink_window_mask
from selfattn.models.transformer import MiniGPT

from tools._precompute import RESULTS, parser, write_json

OUT = RESULTS / "ch08_sinks.json"
CONFIG = dict(n=128, window=16, sinks=4, steps=400, batch=32, lr=3e-3, eval_windows=128, start=32)
SEEDS = (0, 1, 2)


def masked_logits(model: MiniGPT, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The model's logits with ``mask`` in place of the causal mask in every layer."""
    x = model.embed(ids)
    for block in model.decoder.blocks:
        x = block(x, mask=mask)
    return model.head(model.decoder.ln_f(x))


def run(seed: int) -> dict:
    c = CONFIG
    text = corpus(4000, seed=0)
    vocab = char_vocab(text)
    data = vocab.encode(list(text))
    split = int(0.9 * len(data))
    train, test = data[:split], data[split:]
    torch.manual_seed(seed)
    model = MiniGPT(len(vocab), d_model=64, num_heads=4, num_layers=2, max_len=c["n"])
    opt = torch.optim.AdamW(model.parameters(), lr=c["lr"])
    g = torch.Generator().manual_seed(seed)
    for _ in range(c["steps"]):
        x, y = char_windows(train, c["n"], c["batch"], generator=g)
        loss = model.loss(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    x, y = char_windows(
        test, c["n"], c["eval_windows"], generator=torch.Generator().manual_seed(99)
    )
    n, s0 = c["n"], c["start"]
    masks = {
        "full": torch.ones(n, n, dtype=torch.bool).tril(),
        "window": sink_window_mask(n, c["window"], 0),
        "window_sinks": sink_window_mask(n, c["window"], c["sinks"]),
    }
    result = {"seed": seed, "train_loss": float(loss.detach())}
    with torch.no_grad():
        for name, mask in masks.items():
            logits = masked_logits(model, x, mask)[:, s0:]
            result[name] = float(
                F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[:, s0:].reshape(-1))
            )
        _, weights = model(x, return_weights=True)
        # weight on the first `sinks` tokens, per layer, averaged over heads and positions >= s0
        result["sink_weight"] = [float(w[:, :, s0:, : c["sinks"]].sum(-1).mean()) for w in weights]
    print(result, flush=True)
    return result


def main(argv: list[str] | None = None) -> None:
    out = parser(__doc__, OUT).parse_args(argv).out
    torch.set_num_threads(1)
    runs = [run(seed) for seed in SEEDS]
    write_json(out, {"config": CONFIG, "runs": runs})
    print("wrote", out)


if __name__ == "__main__":
    main()
