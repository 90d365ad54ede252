"""Multi-query associative recall (MQAR, Arora et al. 2023): what each attention can remember.

A sequence holds ``p`` (key, value) pairs, then ``p`` queries, each one of the stored keys in
a random order; at every query the model must output the value stored under that key. Each
pair is one token (its key's and its value's embeddings added), and each query a token with
the key and a "no value yet" marker, so one causal attention layer suffices: the query
matches its key among the earlier tokens and reads the value. Recall then measures how much
of the context the attention can hold: softmax attention keeps every token (its KV cache
grows with n); linear attention squeezes them into a ``d x d`` state; a sliding window keeps
the last ``w`` tokens.

:func:`mqar_batch` draws problems; :class:`RecallMixerModel` is the one-layer model with a
choice of mixer (``"softmax"``, ``"linear"``, ``"gated_linear"``, ``"sliding_window"``);
:func:`train_mqar` trains one and returns its recall on held-out problems;
:func:`window_recall` is the most a sliding window can recall.
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import require_int, require_number
from ..attention import scaled_dot_product_attention
from ..efficient.linear import decayed_linear_attention, linear_attention
from ..efficient.sliding_window import sliding_window_attention
from ..train import _keeps_rng

__all__ = [
    "MQARBatch",
    "mqar_batch",
    "MIXERS",
    "RecallMixerModel",
    "train_mqar",
    "window_recall",
]

#: The attention variants :class:`RecallMixerModel` can use.
MIXERS = ("softmax", "linear", "gated_linear", "sliding_window")


class MQARBatch(NamedTuple):
    """A batch of MQAR problems, ``n = 2 p`` tokens each."""

    keys: torch.Tensor  #: ``(B, n)`` long: the pair's key, or the queried key
    values: (
        torch.Tensor
    )  #: ``(B, n)`` long: the pair's value, or ``n_values`` (no value) at queries
    targets: torch.Tensor  #: ``(B, n)`` long: the value to recall at queries, -100 at pairs


def mqar_batch(
    batch: int,
    n_pairs: int,
    *,
    n_keys: int = 128,
    n_values: int = 64,
    generator: torch.Generator | None = None,
) -> MQARBatch:
    """Draw ``batch`` problems of ``n_pairs`` distinct keys, each queried once after the pairs.

    Returns:
        :class:`MQARBatch`; positions ``0 .. p-1`` are pairs, ``p .. 2p-1`` queries.
    """
    batch = require_int(batch, "batch", 1)
    p = require_int(n_pairs, "n_pairs", 1)
    n_keys = require_int(n_keys, "n_keys", 1)
    n_values = require_int(n_values, "n_values", 1)
    if p > n_keys:
        raise ValueError(f"n_pairs={p} distinct keys cannot be drawn from n_keys={n_keys}")
    keys = torch.rand(batch, n_keys, generator=generator).argsort(dim=1)[:, :p]
    values = torch.randint(n_values, (batch, p), generator=generator)
    order = torch.rand(batch, p, generator=generator).argsort(dim=1)
    asked, answers = keys.gather(1, order), values.gather(1, order)
    blank = torch.full_like(values, n_values)
    ignore = torch.full_like(values, -100)
    return MQARBatch(
        torch.cat([keys, asked], 1), torch.cat([values, blank], 1), torch.cat([ignore, answers], 1)
    )


class RecallMixerModel(nn.Module):
    """Embed, one causal attention layer (the mixer), an MLP, read out the value.

    Args:
        mixer: one of :data:`MIXERS`.
        d_model: width (one head of this width).
        n_keys, n_values: vocabulary sizes of :func:`mqar_batch`.
        window: the sliding window's keys (``"sliding_window"`` only).

    Softmax attention scales scores by ``1 / sqrt(d)``; linear attention uses
    ``phi = elu + 1``; gated linear attention adds a data-dependent gate per token,
    ``gamma_t = sigmoid(w . x_t + b)`` (one scalar per step, as Mamba-2), started near 1.
    """

    def __init__(
        self,
        mixer: str,
        *,
        d_model: int = 64,
        n_keys: int = 128,
        n_values: int = 64,
        window: int = 32,
    ):
        super().__init__()
        if mixer not in MIXERS:
            raise ValueError(f"mixer must be one of {MIXERS}, got {mixer!r}")
        self.mixer, self.window = mixer, require_int(window, "window", 1)
        d = require_int(d_model, "d_model", 1)
        self.key_embed = nn.Embedding(n_keys, d)
        self.value_embed = nn.Embedding(n_values + 1, d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.gate = nn.Linear(d, 1)
        nn.init.zeros_(self.gate.weight)
        nn.init.constant_(self.gate.bias, 4.0)  # sigmoid(4) ~ 0.98: start close to no decay
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, n_values)

    def state_numbers(self, n: int) -> int:
        """Numbers the mixer must keep to decode token ``n + 1`` (its memory of the past)."""
        d = self.out.in_features
        if self.mixer == "softmax":
            return 2 * n * d  # every key and value
        if self.mixer == "sliding_window":
            return 2 * min(n, self.window) * d
        return d * d + d  # S and z

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        """The mixer on ``x`` ``(B, n, d)``: causal, one head."""
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if self.mixer == "softmax":
            return scaled_dot_product_attention(q, k, v, "causal", kernel="torch")
        if self.mixer == "sliding_window":
            return sliding_window_attention(q, k, v, self.window)
        scale = q.shape[-1] ** -0.25  # as softmax's 1/sqrt(d), split between q and k
        if self.mixer == "linear":
            return linear_attention(q * scale, k * scale, v, causal=True, chunk_size=q.shape[-2])
        gamma = torch.sigmoid(self.gate(x)).clamp_min(1e-4)  # (B, n, 1)
        return decayed_linear_attention(q * scale, k * scale, v, gamma)

    def forward(self, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """keys, values ``(B, n)`` -> value logits ``(B, n, n_values)``."""
        x = self.key_embed(keys) + self.value_embed(values)
        x = x + self.out(self.attend(self.norm1(x)))
        x = x + self.mlp(self.norm2(x))
        return self.head(x)


@_keeps_rng
def train_mqar(
    mixer: str,
    n_pairs: int,
    *,
    seed: int = 0,
    steps: int = 600,
    batch: int = 64,
    lr: float = 3e-3,
    d_model: int = 64,
    window: int = 32,
    n_keys: int = 128,
    n_values: int = 64,
    eval_batch: int = 512,
) -> dict:
    """Train a :class:`RecallMixerModel` on fresh MQAR batches; measure held-out recall.

    Returns:
        ``{"mixer", "n_pairs", "n", "seed", "recall", "final_loss", "state_numbers",
        "parameters", "seconds"}``; ``recall`` is the fraction of queries answered right on
        ``eval_batch`` problems drawn with a separate generator (chance: ``1 / n_values``).
    """
    lr = require_number(lr, "lr", positive=True)
    torch.manual_seed(seed)
    model = RecallMixerModel(
        mixer, d_model=d_model, n_keys=n_keys, n_values=n_values, window=window
    )
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    g = torch.Generator().manual_seed(10_000 + seed)
    start, loss = time.process_time(), torch.tensor(math.nan)
    for _ in range(steps):
        b = mqar_batch(batch, n_pairs, n_keys=n_keys, n_values=n_values, generator=g)
        logits = model(b.keys, b.values)
        loss = F.cross_entropy(logits.reshape(-1, n_values), b.targets.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    return {
        "mixer": mixer,
        "n_pairs": n_pairs,
        "n": 2 * n_pairs,
        "seed": seed,
        "recall": held_out_recall(model, n_pairs, seed, n_keys, n_values, eval_batch),
        "final_loss": float(loss.detach()),
        "state_numbers": model.state_numbers(2 * n_pairs),
        "parameters": sum(p.numel() for p in model.parameters()),
        "seconds": time.process_time() - start,
    }


def held_out_recall(
    model: nn.Module, n_pairs: int, seed: int, n_keys: int, n_values: int, eval_batch: int
) -> float:
    """The fraction of queries ``model`` answers right on ``eval_batch`` MQAR problems drawn
    with their own generator (seed ``20_000 + seed``, apart from the training batches')."""
    test = mqar_batch(
        eval_batch,
        n_pairs,
        n_keys=n_keys,
        n_values=n_values,
        generator=torch.Generator().manual_seed(20_000 + seed),
    )
    with torch.no_grad():
        pred = model(test.keys, test.values).argmax(-1)
    asked = test.targets != -100
    return float((pred[asked] == test.targets[asked]).float().mean())


def window_recall(n_pairs: int, window: int = 16, n_values: int = 64) -> float:
    """The best recall a causal sliding window of ``window`` keys can reach on MQAR.

    Query ``m`` (``0 <= m < p``) sits at position ``p + m`` and sees the ``window`` tokens
    ending with itself (``i - window < j <= i``), so the pairs among them are the last
    ``min(p, max(0, window - 1 - m))``: never more than the ``p`` there are. Its pair, one of
    the ``p`` in a random order, is inside with that share; outside, the best guess is
    chance, ``1 / n_values``.

    Returns:
        ``seen + (1 - seen) / n_values``, with ``seen`` the share of queries whose pair is
        inside the window; at most 1 (exactly 1 when ``p <= window // 2``, the whole
        problem in view).
    """
    p = require_int(n_pairs, "n_pairs", 1)
    w = require_int(window, "window", 1)
    n_values = require_int(n_values, "n_values", 1)
    seen = sum(min(p, max(0, w - 1 - m)) for m in range(p)) / p**2
    return seen + (1 - seen) / n_values
