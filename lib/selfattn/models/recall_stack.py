"""Chapter 13's recall study: chapter 8's MQAR model with mixers that overwrite, and a hybrid.

:class:`RecallStack` is :class:`selfattn.data.mqar.RecallMixerModel`'s model (embed the key
and the value, a pre-norm mixer block, an MLP block, read the value out) with a stack of
mixers, each one of :data:`RECALL_MIXERS`:

* ``"softmax"``, ``"linear"``, ``"gated_linear"``: chapter 8's three, computed as there;
* ``"delta"``: the delta rule, ``q`` and ``k`` L2-normalised, ``beta_t = sigmoid(w . x_t)``;
* ``"gated_delta"``: the gated delta rule, the same with a decay per step
  ``alpha_t = sigmoid(u . x_t + c)``, started near 1 as chapter 8's gated linear attention
  (the bare rule: :class:`~selfattn.delta_net.GatedDeltaNet` adds a short convolution, an
  output gate and a norm around it);

* ``"nsa"``, ``"dsa"``: learned sparse attention
  (:class:`~selfattn.learned_sparse.NativeSparseAttention` with blocks of 8 and a window of 8;
  :class:`~selfattn.learned_sparse.DeepSeekSparseAttention`), each query reading ``tokens``
  selected tokens (``tokens // 8`` blocks; the top ``tokens``). DSA's indexer is trained as
  DeepSeek-V3.2's: on its KL loss to the dense attention (input detached), with a dense
  warm-up for the first quarter of the steps;

and :data:`STACKS` names the models of the study: one layer of each, and ``"hybrid"``, a
Gated DeltaNet layer followed by one softmax layer (Qwen3-Next's pattern, three linear
layers to one of full attention, cut to one to one). With width ``d`` every recurrent
mixer keeps a ``d x d`` state (linear attention also its ``d`` normaliser).
:func:`train_recall` trains one as chapter 8's ``train_mqar`` does, same batches.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import require_int, require_number
from ..attention import scaled_dot_product_attention
from ..data.mqar import held_out_recall, mqar_batch
from ..delta_net import l2norm
from ..efficient.delta_rule import gated_delta_rule
from ..efficient.linear import decayed_linear_attention, linear_attention
from ..learned_sparse import DeepSeekSparseAttention, NativeSparseAttention
from ..train import _keeps_rng

__all__ = ["RECALL_MIXERS", "STACKS", "RecallStack", "train_recall"]

#: The mixers a :class:`RecallStack` layer can use.
RECALL_MIXERS = ("softmax", "linear", "gated_linear", "delta", "gated_delta", "nsa", "dsa")
#: NSA's block and window in a :class:`RecallStack` (its ``tokens`` counts the selected ones).
NSA_BLOCK = 8
#: The models of chapter 13's study, each name mapped to its mixers (first layer first).
STACKS = {
    "softmax": ("softmax",),
    "linear": ("linear",),
    "gated_linear": ("gated_linear",),
    "delta": ("delta",),
    "gated_delta": ("gated_delta",),
    "hybrid": ("gated_delta", "softmax"),
    "nsa": ("nsa",),
    "dsa": ("dsa",),
}


class _Mixer(nn.Module):
    def __init__(self, kind: str, d: int, chunk_size: int, tokens: int = 16):
        super().__init__()
        self.kind, self.chunk_size = kind, chunk_size
        self.aux = None  # DSA: the indexer's KL loss of the last training forward
        if kind == "nsa":
            self.sparse = NativeSparseAttention(
                d, 1, block_size=NSA_BLOCK, num_selected=max(1, tokens // NSA_BLOCK), window=8
            )
            return
        if kind == "dsa":
            self.sparse = DeepSeekSparseAttention(d, 1, top_k=tokens, index_dim=16)
            return
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.gate = nn.Linear(d, 1)
        nn.init.zeros_(self.gate.weight)
        nn.init.constant_(self.gate.bias, 4.0 if kind == "gated_linear" else 0.0)
        self.decay = nn.Linear(d, 1)  # gated_delta only: alpha_t
        nn.init.zeros_(self.decay.weight)
        nn.init.constant_(self.decay.bias, 4.0)  # sigmoid(4) ~ 0.98

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind in ("nsa", "dsa"):
            if self.kind == "dsa" and self.training:
                self.aux = self.sparse.indexer_kl(x.detach())
            return self.sparse(x)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if self.kind == "softmax":
            o = scaled_dot_product_attention(q, k, v, "causal", kernel="torch")
        elif self.kind in ("delta", "gated_delta"):
            beta = torch.sigmoid(self.gate(x)).squeeze(-1).unsqueeze(1)  # (B, 1, n)
            g = torch.zeros_like(beta)
            if self.kind == "gated_delta":
                g = F.logsigmoid(self.decay(x)).squeeze(-1).unsqueeze(1)
            q, k, v = (t.unsqueeze(1) for t in (l2norm(q), l2norm(k), v))
            o = gated_delta_rule(q, k, v, g, beta, scale=1.0, chunk_size=self.chunk_size)
            o = o.squeeze(1)
        else:
            scale = q.shape[-1] ** -0.25
            if self.kind == "linear":
                o = linear_attention(q * scale, k * scale, v, causal=True, chunk_size=q.shape[-2])
            else:
                gamma = torch.sigmoid(self.gate(x)).clamp_min(1e-4)
                o = decayed_linear_attention(q * scale, k * scale, v, gamma)
        return self.out(o)


class RecallStack(nn.Module):
    """Embed, ``len(mixers)`` blocks (pre-norm mixer, pre-norm MLP), read out the value.

    Args:
        mixers: the layers' mixers, each one of :data:`RECALL_MIXERS`.
        d_model: width (one head of this width).
        n_keys, n_values: vocabulary sizes of :func:`~selfattn.data.mqar.mqar_batch`.
        chunk_size: the delta rule's chunk.
        tokens: the tokens each query of a ``"nsa"`` or ``"dsa"`` mixer selects.
    """

    def __init__(self, mixers, *, d_model=32, n_keys=128, n_values=64, chunk_size=32, tokens=16):
        super().__init__()
        mixers = tuple(mixers)
        bad = [m for m in mixers if m not in RECALL_MIXERS]
        if bad or not mixers:
            raise ValueError(f"mixers must be some of {RECALL_MIXERS}, got {mixers!r}")
        d = require_int(d_model, "d_model", 1)
        tokens = require_int(tokens, "tokens", 1)
        self.mixers = mixers
        self.key_embed = nn.Embedding(n_keys, d)
        self.value_embed = nn.Embedding(n_values + 1, d)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "norm1": nn.LayerNorm(d),
                    "mix": _Mixer(m, d, chunk_size, tokens),
                    "norm2": nn.LayerNorm(d),
                    "mlp": nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)),
                }
            )
            for m in mixers
        )
        self.head = nn.Linear(d, n_values)

    def forward(self, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """keys, values ``(B, n)`` -> value logits ``(B, n, n_values)``."""
        x = self.key_embed(keys) + self.value_embed(values)
        for b in self.blocks:
            x = x + b["mix"](b["norm1"](x))
            x = x + b["mlp"](b["norm2"](x))
        return self.head(x)


@_keeps_rng
def train_recall(
    model: str,
    n_pairs: int,
    *,
    seed: int = 0,
    steps: int = 600,
    batch: int = 32,
    lr: float = 1e-2,
    d_model: int = 32,
    n_keys: int = 128,
    n_values: int = 64,
    eval_batch: int = 512,
    tokens: int = 16,
) -> dict:
    """Train the model ``STACKS[model]`` on fresh MQAR batches; measure held-out recall.

    The batches, schedule and evaluation are chapter 8's ``train_mqar``'s (same seeds).
    ``tokens``: what each query of an NSA or DSA layer selects (see :class:`RecallStack`).

    Returns:
        ``{"model", "n_pairs", "seed", "recall", "final_loss", "parameters", "seconds"}``
        (and ``"tokens"`` for NSA and DSA).
    """
    if model not in STACKS:
        raise ValueError(f"model must be one of {tuple(STACKS)}, got {model!r}")
    lr = require_number(lr, "lr", positive=True)
    torch.manual_seed(seed)
    net = RecallStack(
        STACKS[model], d_model=d_model, n_keys=n_keys, n_values=n_values, tokens=tokens
    )
    dsa = [b["mix"].sparse for b in net.blocks if b["mix"].kind == "dsa"]
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    g = torch.Generator().manual_seed(10_000 + seed)
    start, loss = time.process_time(), torch.tensor(math.nan)
    for step in range(steps):
        for layer in dsa:  # DeepSeek-V3.2's dense warm-up, then sparse
            layer.top_k = 2 * n_pairs if step < steps // 4 else tokens
        b = mqar_batch(batch, n_pairs, n_keys=n_keys, n_values=n_values, generator=g)
        logits = net(b.keys, b.values)
        loss = F.cross_entropy(logits.reshape(-1, n_values), b.targets.reshape(-1))
        opt.zero_grad()
        aux = sum(blk["mix"].aux for blk in net.blocks if blk["mix"].aux is not None)
        (loss + aux).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
    extra = {"tokens": tokens} if model in ("nsa", "dsa") else {}
    return {
        **extra,
        "model": model,
        "n_pairs": n_pairs,
        "seed": seed,
        "recall": held_out_recall(net, n_pairs, seed, n_keys, n_values, eval_batch),
        "final_loss": float(loss.detach()),
        "parameters": sum(p.numel() for p in net.parameters()),
        "seconds": time.process_time() - start,
    }
