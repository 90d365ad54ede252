"""Positions beyond the training length: a retrieval model and the RoPE-scaling study (chapter 6).

:class:`RetrievalModel` reads a sequence of (key, value) pairs and answers, at each query
position, the value stored under the query's key
(:class:`~selfattn.data.order_tasks.KeyValueRetrievalTask`). Trained at length ``L`` and
tested at ``2L`` and ``4L``, the stored pair can lie farther back than any training sequence
was long. With RoPE, the model's rotary module can be swapped after training for a scaled
one (:class:`~selfattn.positional.RopeScaling`), which is how position interpolation,
NTK-aware scaling and YaRN are used on a model trained without them.
:func:`rope_scaling_study` measures all of them, and the absolute encodings, over seeds.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import require_base, require_int, require_number
from ..data.order_tasks import IGNORE_INDEX, KeyValueRetrievalTask
from ..multihead import stack_causal_mask
from ..positional import RopeScaling, RotaryEmbedding, sinusoidal_encoding
from ..train import _keeps_rng, _mode, train_loop
from .transformer import TransformerBlock

__all__ = [
    "RETRIEVAL_ENCODINGS",
    "LENGTH_METHODS",
    "RetrievalModel",
    "retrieval_accuracy",
    "rope_scaling_run",
    "rope_scaling_study",
]

#: The encodings :class:`RetrievalModel` accepts.
RETRIEVAL_ENCODINGS = ("none", "sinusoidal", "rope")

#: The rows of :func:`rope_scaling_study`: RoPE as trained, its three scalings, and the
#: models without RoPE.
LENGTH_METHODS = ("rope", "pi", "ntk", "yarn", "none", "sinusoidal")

_SCALING_METHOD = {"pi": "linear", "ntk": "ntk", "yarn": "yarn"}


class RetrievalModel(nn.Module):
    """``(keys, values)`` long ``(B, n)`` -> logits over the values ``(B, n, num_values)``.

    Each position embeds its key and its value (``num_values`` is the blank of a query) and
    adds them; then ``num_layers`` causal
    :class:`~selfattn.models.transformer.TransformerBlock` s and a linear read-out.

    Args:
        num_keys, num_values: vocabulary sizes of the task.
        encoding: one of :data:`RETRIEVAL_ENCODINGS`.
        d_model, num_heads, num_layers: sizes.
        rope_base: RoPE's base. Every layer's attention rotates with the module ``self.rope``;
            :meth:`set_rope_scaling` swaps in a scaled one.
    """

    def __init__(
        self,
        num_keys: int = 128,
        num_values: int = 16,
        *,
        encoding: str = "rope",
        d_model: int = 64,
        num_heads: int = 2,
        num_layers: int = 1,
        rope_base: float = 10000.0,
    ):
        super().__init__()
        require_base(rope_base, "rope_base")
        if encoding not in RETRIEVAL_ENCODINGS:
            raise ValueError(f"encoding must be one of {RETRIEVAL_ENCODINGS}, got {encoding!r}")
        for name, value in (("num_keys", num_keys), ("num_values", num_values)):
            require_int(value, name, 2)
        for name, value in (("d_model", d_model), ("num_heads", num_heads)):
            require_int(value, name, 1)
        require_int(num_layers, "num_layers", 1)
        if d_model % num_heads or (d_model // num_heads) % 2:
            raise ValueError(
                f"d_model={d_model} must split into num_heads={num_heads} heads of even size"
            )
        self.encoding, self.num_values, self.d_model = encoding, num_values, d_model
        self.key_embed = nn.Embedding(num_keys, d_model)
        self.value_embed = nn.Embedding(num_values + 1, d_model)  # + the query's blank
        self.rope = (
            RotaryEmbedding(d_model // num_heads, base=rope_base) if encoding == "rope" else None
        )
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, num_heads, rope=self.rope) for _ in range(num_layers)
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_values)

    def set_rope_scaling(self, scaling: RopeScaling | None) -> None:
        """Replace the rotary module by one with ``scaling`` (``None``: as trained)."""
        if self.rope is None:
            raise ValueError(f"set_rope_scaling needs encoding='rope', got {self.encoding!r}")
        self.rope = RotaryEmbedding(self.rope.d_head, base=self.rope.base, scaling=scaling)
        for block in self.blocks:
            block.attn.rope = self.rope

    def forward(self, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """``keys``, ``values`` long ``(B, n)`` -> logits ``(B, n, num_values)``."""
        for name, t in (("keys", keys), ("values", values)):
            if not isinstance(t, torch.Tensor) or t.dtype != torch.long or t.dim() != 2:
                raise TypeError(f"{name} must be a torch.long tensor (B, n), got {t!r:.60}")
        if keys.shape != values.shape:
            raise ValueError(
                f"keys and values must have the same shape, got {tuple(keys.shape)} "
                f"and {tuple(values.shape)}"
            )
        x = self.key_embed(keys) + self.value_embed(values)
        if self.encoding == "sinusoidal":
            x = x + sinusoidal_encoding(keys.shape[1], self.d_model, device=x.device)
        mask = stack_causal_mask([block.attn for block in self.blocks], x)  # once per call
        for block in self.blocks:
            x = block(x, mask=mask)
        return self.head(self.ln_f(x))


@torch.no_grad()
def retrieval_accuracy(model: RetrievalModel, keys, values, targets) -> float:
    """Share of the query positions (``targets != IGNORE_INDEX``) answered right."""
    scored = targets != IGNORE_INDEX
    with _mode(model, False):
        right = (model(keys, values).argmax(-1) == targets) & scored
    return right.sum().item() / max(1, scored.sum().item())


def _scaling(method: str, factor: float, n_train: int) -> RopeScaling | None:
    if method == "rope" or factor == 1:
        return None
    return RopeScaling(_SCALING_METHOD[method], factor, original_length=n_train)


@_keeps_rng
def rope_scaling_run(
    seed: int,
    *,
    n_train: int = 32,
    factors: tuple[int, ...] = (1, 2, 4),
    methods: tuple[str, ...] = LENGTH_METHODS,
    steps: int = 400,
    batch_size: int = 32,
    lr: float = 3e-3,
    num_test: int = 200,
    d_model: int = 64,
    num_heads: int = 2,
    num_layers: int = 1,
) -> dict:
    """One seed of the long-context study: train at ``n_train``, test at ``factor * n_train``.

    One RoPE model is trained and tested as trained (``"rope"``) and with each scaling
    (``"pi"``, ``"ntk"``, ``"yarn"``, with ``factor`` = test length / ``n_train``, no
    fine-tuning); ``"none"`` and ``"sinusoidal"`` are models of their own. ``seed`` fixes the
    weights, the training batches and the test sets; the global random stream is left as
    the caller had it.

    Returns:
        ``{method: {str(length): accuracy}}`` (accuracies rounded to 4 digits).
    """
    lr = require_number(lr, "lr", positive=True)
    seed = require_int(seed, "seed", None)
    unknown = set(methods) - set(LENGTH_METHODS)
    if unknown:
        raise ValueError(f"methods must be among {LENGTH_METHODS}, got {sorted(unknown)}")
    task = KeyValueRetrievalTask(seed=seed)
    trained: dict[str, RetrievalModel] = {}

    def loss_fn(model, batch):
        keys, values, targets = batch
        logits = model(keys, values)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)

    results: dict[str, dict[str, float]] = {}
    for method in methods:
        encoding = "rope" if method in ("rope", *_SCALING_METHOD) else method
        if encoding not in trained:
            torch.manual_seed(seed)
            model = RetrievalModel(
                task.num_keys,
                task.num_values,
                encoding=encoding,
                d_model=d_model,
                num_heads=num_heads,
                num_layers=num_layers,
            )
            train_loop(
                model,
                task.train_batches(batch_size, n_train),
                loss_fn,
                steps=steps,
                lr=lr,
                desc=encoding,
            )
            trained[encoding] = model
        model = trained[encoding]
        results[method] = {}
        for factor in factors:
            n = factor * n_train
            if encoding == "rope":
                model.set_rope_scaling(_scaling(method, factor, n_train))
            acc = retrieval_accuracy(model, *task.test_set(num_test, n))
            results[method][str(n)] = round(acc, 4)
        if encoding == "rope":
            model.set_rope_scaling(None)
    return results


def rope_scaling_study(seeds, **run_kwargs) -> dict:
    """:func:`rope_scaling_run` for each seed: the table chapter 6 records.

    Returns:
        A JSON-ready dict with ``"settings"`` (the run's keyword arguments with their
        defaults), ``"seeds"`` and ``"runs"`` (accuracy by method, then seed, then length;
        the keys are strings).
    """
    seeds = [require_int(s, "seed", None) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed, got none")
    runs: dict[str, dict[str, dict[str, float]]] = {}
    for seed in seeds:
        for method, by_length in rope_scaling_run(seed, **run_kwargs).items():
            runs.setdefault(method, {})[str(seed)] = by_length
    defaults = {
        name: p.default
        for name, p in inspect.signature(rope_scaling_run).parameters.items()
        if p.kind is p.KEYWORD_ONLY
    }
    settings = {k: list(v) if isinstance(v, tuple) else v for k, v in defaults.items()}
    settings.update({k: list(v) if isinstance(v, tuple) else v for k, v in run_kwargs.items()})
    return {"settings": settings, "seeds": seeds, "runs": runs}
