"""A tiny Transformer whose only variable part is the positional encoding (chapter 6).

``OrderModel(vocab_size, encoding=...)`` with ``encoding`` one of:

* ``"none"``: no position information at all (beyond the causal mask);
* ``"sinusoidal"`` / ``"learned"``: an absolute vector added to each token embedding;
* ``"alibi"`` / ``"relative"``: a bias on the attention scores (ALiBi's fixed slopes,
  or T5's learned buckets);
* ``"rope"``: queries and keys rotated by their positions in every layer.

Everything else (embedding, the library's pre-LayerNorm
:class:`~selfattn.models.transformer.TransformerBlock` with its
:class:`~selfattn.multihead.MultiHeadAttention`, readout) is shared, so that a comparison
under one training budget compares the encodings and nothing else. RoPE is the attention's
``rope=`` module, ALiBi and T5 its ``score_bias``.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import (
    require_base,
    require_bool,
    require_device,
    require_int,
    require_module,
    require_number,
    require_token_batch,
    require_token_ids,
)
from ..data.order_tasks import IGNORE_INDEX, ShiftedCopyTask
from ..positional import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RotaryEmbedding,
    alibi_bias,
    sinusoidal_encoding,
)
from ..train import _keeps_rng, _mode, train_loop
from .transformer import TransformerBlock

__all__ = [
    "ENCODINGS",
    "OrderModelConfig",
    "OrderModel",
    "token_accuracy",
    "train_order_model",
    "steps_to_loss",
    "extrapolation_run",
    "extrapolation_study",
]

#: The encodings :class:`OrderModel` accepts.
ENCODINGS = ("none", "sinusoidal", "learned", "alibi", "relative", "rope")


@dataclass
class OrderModelConfig:
    """Sizes of :class:`OrderModel` (the defaults train in seconds on one CPU thread).

    ``max_len`` only bounds the learned table; the other encodings take any length.
    """

    vocab_size: int = 16
    encoding: str = "rope"
    d_model: int = 32
    num_heads: int = 4
    num_layers: int = 2
    max_len: int = 64
    causal: bool = True
    rope_base: float = 10000.0


class OrderModel(nn.Module):
    """Token ids ``(B, n)`` -> logits ``(B, n, vocab_size)``, with a chosen positional encoding.

    Args:
        vocab_size: number of token ids; encoding: one of ``ENCODINGS``.
        **kwargs: other fields of :class:`OrderModelConfig`.
    """

    def __init__(self, vocab_size: int = 16, *, encoding: str = "rope", **kwargs):
        super().__init__()
        if encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
        cfg = self.cfg = OrderModelConfig(vocab_size=vocab_size, encoding=encoding, **kwargs)
        for name in ("vocab_size", "d_model", "num_heads", "num_layers", "max_len"):
            require_int(getattr(cfg, name), name, 1)
        require_bool(cfg.causal, "causal")
        require_base(cfg.rope_base, "rope_base")
        if cfg.d_model % cfg.num_heads or (cfg.d_model // cfg.num_heads) % 2:
            raise ValueError(
                f"d_model={cfg.d_model} must split into num_heads={cfg.num_heads} "
                "heads of even size"
            )
        self.embed = nn.Embedding(vocab_size, cfg.d_model)
        self.pos = (
            LearnedPositionalEmbedding(cfg.max_len, cfg.d_model) if encoding == "learned" else None
        )
        self.rel = (
            RelativePositionBias(
                cfg.num_heads, num_buckets=32, max_distance=128, bidirectional=not cfg.causal
            )
            if encoding == "relative"
            else None
        )
        d_head = cfg.d_model // cfg.num_heads
        self.blocks = nn.ModuleList(
            TransformerBlock(
                cfg.d_model,
                cfg.num_heads,
                rope=RotaryEmbedding(d_head, base=cfg.rope_base) if encoding == "rope" else None,
            )
            for _ in range(cfg.num_layers)
        )
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, vocab_size)

    def _score_bias(self, n: int, device) -> torch.Tensor | None:
        """The bias every layer adds to its scores: ``(h, n, n)`` for ALiBi and T5, else None."""
        if self.cfg.encoding == "alibi":
            return alibi_bias(self.cfg.num_heads, n, device=device)
        if self.cfg.encoding == "relative":
            return self.rel(n)
        return None

    def forward(self, tokens: torch.Tensor, *, return_weights: bool = False):
        """``tokens`` long ``(B, n)`` -> logits ``(B, n, vocab_size)``.

        With ``return_weights``, also each layer's attention weights ``(B, h, n, n)``.
        """
        return_weights = require_bool(return_weights, "return_weights")
        require_token_batch(tokens, "tokens")
        require_token_ids(tokens, "tokens", self.cfg.vocab_size)
        n = tokens.shape[1]
        x = self.embed(tokens)
        if self.cfg.encoding == "sinusoidal":
            x = x + sinusoidal_encoding(n, self.cfg.d_model, device=x.device)
        elif self.pos is not None:
            x = self.pos(x)
        mask = "causal" if self.cfg.causal else None
        bias = self._score_bias(n, tokens.device)
        weights = []
        for block in self.blocks:
            x = block(x, mask=mask, score_bias=bias, return_weights=return_weights)
            if return_weights:
                x, w = x
                weights.append(w["self"])
        logits = self.head(self.ln_f(x))
        return (logits, weights) if return_weights else logits


@torch.no_grad()
def token_accuracy(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, per_position: bool = False
):
    """Share of scored positions (``y != IGNORE_INDEX``) where the logits' argmax equals ``y``.

    Args:
        x, y: long ``(B, n)``.
        per_position: return the accuracy at each position ``(n,)`` (NaN where nothing is scored).

    Returns:
        A float, or a float tensor ``(n,)``.
    """
    per_position = require_bool(per_position, "per_position")
    require_module(model)
    with _mode(model, False):
        pred = model(x).argmax(-1)
    scored = y != IGNORE_INDEX
    correct = (pred == y) & scored
    if per_position:
        return correct.sum(0).float() / scored.sum(0).float()
    return correct.sum().item() / max(1, scored.sum().item())


@_keeps_rng
def train_order_model(
    encoding: str,
    task,
    *,
    n_train: int,
    steps: int,
    batch_size: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
    device: torch.device | str | None = None,
    **model_kwargs,
) -> tuple[OrderModel, list[float]]:
    """Build an :class:`OrderModel` (weights seeded with ``seed``), train it at length ``n_train``.

    Args:
        encoding: one of ``ENCODINGS``.
        task: e.g. :class:`~selfattn.data.order_tasks.ShiftedCopyTask`.
        n_train: training sequence length; steps, batch_size, lr: the budget (Adam).
        device: where the model trains (``None``: the CPU). The weights are initialised and
            the batches drawn on the CPU, as without a device, then moved there.

    Returns:
        ``(model, losses)``; the model is in eval mode, on ``device``. The global random
        state is seeded with ``seed`` inside and restored on return.
    """
    lr = require_number(lr, "lr", positive=True)
    device = require_device(device)
    torch.manual_seed(seed)
    model = OrderModel(task.vocab_size, encoding=encoding, **model_kwargs).to(device)

    def loss_fn(m, batch):
        x, y = (t.to(device) for t in batch)
        return F.cross_entropy(m(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE_INDEX)

    losses = train_loop(
        model,
        task.train_batches(batch_size, n_train),
        loss_fn,
        steps=steps,
        lr=lr,
        desc=f"{encoding}",
    )
    return model.eval(), losses


def steps_to_loss(losses, threshold: float = 0.1, *, window: int = 20) -> int | None:
    """First step at which the ``window``-step moving average of ``losses`` is below ``threshold``.

    The average ending at step ``t`` covers steps ``t - window + 1 .. t`` (1-based ``t``, so the
    earliest possible answer is ``window``).

    Args:
        losses: per-step training losses, a sequence of floats of length ``steps``.
        threshold: the loss to get below; window: the moving-average length.

    Returns:
        The step (an int), or ``None`` if the average never gets below ``threshold``.
    """
    threshold = require_number(threshold, "threshold")
    window = require_int(window, "window", 1)
    losses = [float(v) for v in losses]
    running = sum(losses[:window])
    for end in range(window, len(losses) + 1):
        if end > window:
            running += losses[end - 1] - losses[end - 1 - window]
        if running / window < threshold:
            return end
    return None


def extrapolation_run(
    encoding: str,
    seed: int,
    *,
    n_train: int = 16,
    n_test: int = 32,
    steps: int = 600,
    batch_size: int = 32,
    lr: float = 3e-3,
    shift: int = 3,
    vocab_size: int = 16,
    num_test: int = 500,
    max_len: int = 64,
    device: torch.device | str | None = None,
) -> tuple[OrderModel, list[float], dict]:
    """One run of chapter 6's experiment: train on the shifted copy at ``n_train``, test longer.

    ``seed`` seeds everything that is random: the weights, the training batches and the test
    sets (``ShiftedCopyTask(seed=seed)``), so two seeds are two independent repetitions.
    ``device`` is where the model trains and is tested (``None``: the CPU); the data are drawn
    on the CPU either way, and the metrics are plain Python numbers.

    Returns:
        ``(model, losses, metrics)``, the model on ``device``, ``metrics`` a dict:
        ``acc_short`` (token accuracy on ``num_test`` sequences of length ``n_train``),
        ``acc_long`` (length ``n_test``),
        ``acc_beyond`` (positions ``n_train .. n_test - 1`` of the long ones), ``per_position``
        (list of ``n_test`` accuracies, NaN where nothing is scored) and ``steps_to_loss01``
        (:func:`steps_to_loss` at 0.1, or ``None``).
    """
    lr = require_number(lr, "lr", positive=True)
    seed = require_int(seed, "seed", None)
    if n_test <= n_train:
        raise ValueError(f"n_test must exceed n_train={n_train}, got {n_test}")
    device = require_device(device)
    task = ShiftedCopyTask(shift=shift, vocab_size=vocab_size, seed=seed)
    model, losses = train_order_model(
        encoding,
        task,
        n_train=n_train,
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        device=device,
        max_len=max_len,
    )

    def test_set(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return tuple(t.to(device) for t in task.test_set(num_test, n))

    test_short, test_long = test_set(n_train), test_set(n_test)
    per_position = token_accuracy(model, *test_long, per_position=True)
    metrics = {
        "acc_short": token_accuracy(model, *test_short),
        "acc_long": token_accuracy(model, *test_long),
        "acc_beyond": per_position[n_train:].mean().item(),
        "per_position": per_position.tolist(),
        "steps_to_loss01": steps_to_loss(losses, 0.1),
    }
    return model, losses, metrics


def extrapolation_study(
    seeds, *, encodings=ENCODINGS, device: torch.device | str | None = None, **run_kwargs
) -> dict:
    """:func:`extrapolation_run` for every encoding and seed: the multi-seed table of chapter 6.

    Args:
        seeds: the seeds (ints); encodings: a subset of ``ENCODINGS``.
        device: where the models train (``None``: the CPU); not part of ``settings``, which
            describe the experiment, not the machine.
        **run_kwargs: the budget, passed to :func:`extrapolation_run`.

    Returns:
        A JSON-ready dict with keys ``"settings"``, ``"seeds"`` and ``"runs"``; ``runs`` maps
        each encoding to ``{str(seed): metrics}`` (the metrics without ``per_position``).
    """
    device = require_device(device)
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed, got none")
    runs: dict[str, dict[str, dict]] = {}
    for encoding in encodings:
        runs[encoding] = {}
        for seed in seeds:
            _, _, metrics = extrapolation_run(encoding, seed, device=device, **run_kwargs)
            metrics.pop("per_position")
            runs[encoding][str(seed)] = {
                k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else v)
                for k, v in metrics.items()
            }
    defaults = {
        name: p.default
        for name, p in inspect.signature(extrapolation_run).parameters.items()
        if p.kind is p.KEYWORD_ONLY and name != "device"
    }
    return {"settings": {**defaults, **run_kwargs}, "seeds": seeds, "runs": runs}
