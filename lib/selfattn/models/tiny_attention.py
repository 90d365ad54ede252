"""Tiny attention models on :func:`selfattn.attention.scaled_dot_product_attention` (chapters 1-2).

* :class:`SelfAttention`: learned projections ``Q = X W_Q``, ``K = C W_K``, ``V = C W_V``
  with ``C = X`` (self-attention) or another sequence (cross-attention).
* :class:`AttentionClassifier`: embeddings + positions, a few attention-only
  :class:`~selfattn.models.transformer.TransformerBlock` (the attention is
  :class:`SelfAttention` with an output projection), and a linear read-out at one chosen
  position (the ``?`` of the long-range task, the ``it`` of the coreference task).

Multi-head attention proper (with its output projection and KV cache) is chapter 5's
:mod:`selfattn.multihead`; here heads are only a reshape, enough to look at them.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .._checks import (
    require_bool,
    require_int,
    require_number,
    require_tensor,
    require_token_batch,
    require_token_ids,
)
from ..attention import scaled_dot_product_attention
from ..multihead import MultiHeadAttention, heads_mask, merge_heads, split_heads
from ..positional import LearnedPositionalEmbedding, sinusoidal_encoding
from .transformer import TransformerBlock

__all__ = ["SelfAttention", "AttentionClassifier"]


class SelfAttention(nn.Module):
    """One attention layer with learned query, key and value projections.

    Args:
        d_model: width of the input vectors ``d``.
        d_k: width of queries and keys (default ``d_model``); split over ``num_heads``.
        d_v: width of values and of the output (default ``d_model``); split over ``num_heads``.
        num_heads: number of heads (``d_k`` and ``d_v`` must be divisible by it).
        bias: give the projections a bias.
        scaled: multiply the scores by ``1/sqrt(d_head)`` (the Transformer's choice);
            ``False`` multiplies by 1, i.e. forgets the scale (chapter 3's experiment).

    Shapes:
        ``forward(x, context=None)``: x ``(B, n, d_model)``; context ``(B, m, d_model)``
        (default ``x``). Returns ``(B, n, d_v)`` (``(B, n, d_model)`` after an output
        projection), plus weights ``(B, num_heads, n, m)`` with ``return_weights=True``.

    It is :class:`~selfattn.multihead.MultiHeadAttention` before two engineering steps:
    ``W_Q``, ``W_K``, ``W_V`` are kept apart (``w_q``, ``w_k``, ``w_v``, as the formula writes
    them) instead of fused into one ``qkv``, and the output projection is optional
    (:meth:`with_output` adds ``W_O``), so ``d_k`` and ``d_v`` may differ from ``d_model``.
    Everything else is shared: the heads are split and merged by
    :func:`~selfattn.multihead.split_heads` and :func:`~selfattn.multihead.merge_heads`, the
    masks read by :func:`~selfattn.multihead.heads_mask`, and the scores scaled, masked and
    normalised by :func:`~selfattn.attention.scaled_dot_product_attention`.
    :meth:`to_multihead` makes the fused layer that computes the same function (tested equal).
    """

    def __init__(
        self,
        d_model: int,
        d_k: int | None = None,
        d_v: int | None = None,
        *,
        num_heads: int = 1,
        bias: bool = False,
        scaled: bool = True,
    ):
        super().__init__()
        bias = require_bool(bias, "bias")
        self.scaled = require_bool(scaled, "scaled")
        d_model = require_int(d_model, "d_model", 1)
        d_k = d_model if d_k is None else require_int(d_k, "d_k", 1)
        d_v = d_model if d_v is None else require_int(d_v, "d_v", 1)
        num_heads = require_int(num_heads, "num_heads", 1)
        if d_k % num_heads or d_v % num_heads:
            raise ValueError(f"d_k={d_k} and d_v={d_v} must be divisible by num_heads={num_heads}")
        self.d_model, self.d_k, self.d_v, self.num_heads = d_model, d_k, d_v, num_heads
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, d_v, bias=bias)
        self.out: nn.Linear | None = None  # W_O, once with_output has given one

    def with_output(self, out: nn.Linear) -> SelfAttention:
        """Give the layer the output projection ``W_O`` (``out``, ``d_v -> d_model``), applied
        to the merged heads; returns the layer.

        ``W_O`` is passed in, as :meth:`to_multihead` takes it: the caller chooses its bias
        (:class:`AttentionClassifier` gives each layer one without).
        """
        shape = (self.d_v, self.d_model)
        if not isinstance(out, nn.Linear) or (out.in_features, out.out_features) != shape:
            raise ValueError(f"out must be an nn.Linear({self.d_v}, {self.d_model}), got {out}")
        self.out = out
        return self

    @property
    def scale(self) -> float:
        """The scores' multiplier, ``1/sqrt(d_head)`` (1 when ``scaled=False``)."""
        return 1.0 / self._score_divisor()

    def _score_divisor(self) -> float:
        # sqrt(d_head), the scores' divisor (1 when the scale is forgotten)
        return math.sqrt(self.d_k // self.num_heads) if self.scaled else 1.0

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, d_k={self.d_k}, d_v={self.d_v}, "
            f"num_heads={self.num_heads}, scaled={self.scaled}"
        )

    def to_multihead(self, out: nn.Linear | None = None) -> MultiHeadAttention:
        """The fused :class:`~selfattn.multihead.MultiHeadAttention` computing the same function.

        Its ``qkv`` stacks ``w_q``, ``w_k``, ``w_v`` (rows q, k, v) and its ``out`` is ``out``
        (the model's ``W_O``; default the layer's own, else the identity), so
        ``to_multihead(W_O)(x) == W_O(self(x))`` to float rounding.

        Raises:
            ValueError: ``d_k`` or ``d_v`` differs from ``d_model``, or ``scaled=False``
                (the fused layer always scales).
        """
        out = self.out if out is None else out
        if not (self.d_k == self.d_v == self.d_model) or not self.scaled:
            raise ValueError(
                "to_multihead needs d_k == d_v == d_model and scaled=True, got "
                f"d_k={self.d_k}, d_v={self.d_v}, d_model={self.d_model}, scaled={self.scaled}"
            )
        if out is not None and (
            not isinstance(out, nn.Linear) or out.weight.shape != (self.d_model, self.d_model)
        ):
            raise ValueError(
                f"out must be an nn.Linear({self.d_model}, {self.d_model}), got {out}"
            )
        has_bias = self.w_q.bias is not None or (out is not None and out.bias is not None)
        mha = MultiHeadAttention(self.d_model, self.num_heads, bias=has_bias)
        mha = mha.to(self.w_q.weight)
        with torch.no_grad():
            mha.qkv.weight.copy_(torch.cat([self.w_q.weight, self.w_k.weight, self.w_v.weight]))
            mha.out.weight.copy_(torch.eye(self.d_model) if out is None else out.weight)
            if has_bias:  # a missing bias is a zero one
                for target, sources in (
                    (mha.qkv.bias, (self.w_q, self.w_k, self.w_v)),
                    (mha.out.bias, (out,)),
                ):
                    target.copy_(
                        torch.cat(
                            [
                                torch.zeros(self.d_model)
                                if s is None or s.bias is None
                                else s.bias
                                for s in sources
                            ]
                        )
                    )
        return mha

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        score_bias: None = None,
        cache: None = None,
        temperature: float = 1.0,
        return_weights: bool = False,
    ):
        """Attend from ``x`` to ``context`` (itself by default).

        Args:
            x: queries come from here, ``(B, n, d_model)``.
            context: keys and values come from here, ``(B, m, d_model)``; ``None`` = ``x``.
            mask: bool (``True`` = may attend) or float (added), ``(n, m)``, ``(B, n, m)``
                (one mask per sequence, shared by the heads) or ``(B, num_heads, n, m)``.
            score_bias, cache: must be ``None``; they are taken so that the layer is called
                like :class:`~selfattn.multihead.MultiHeadAttention` (inside a
                :class:`~selfattn.models.transformer.TransformerBlock`), which has both.
            temperature: divides the scaled scores: below 1 sharpens the weights, above 1
                flattens them (the trained model uses 1).
            return_weights: also return the weights ``(B, num_heads, n, m)``.
        """
        return_weights = require_bool(return_weights, "return_weights")
        context = x if context is None else context
        for name, t in (("x", x), ("context", context)):
            if not isinstance(t, torch.Tensor) or t.dim() != 3 or t.shape[-1] != self.d_model:
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(
                    f"{name} must have shape (B, n, d_model={self.d_model}), got {shape}"
                )
        temperature = require_number(temperature, "temperature", positive=True)
        if score_bias is not None or cache is not None:
            raise ValueError(
                "SelfAttention takes no score_bias and no cache (MultiHeadAttention does); got "
                f"score_bias={type(score_bias).__name__}, cache={type(cache).__name__}"
            )
        if mask is not None:
            mask = heads_mask(mask)
        q, k, v = (
            split_heads(self.w_q(x), self.num_heads),
            split_heads(self.w_k(context), self.num_heads),
            split_heads(self.w_v(context), self.num_heads),
        )  # (B, h, n or m, d / h)
        scale = 1.0 / (self._score_divisor() * temperature)
        out, weights = scaled_dot_product_attention(
            q, k, v, mask, scale=scale, return_weights=True
        )
        out = merge_heads(out)  # heads side by side again
        if self.out is not None:
            out = self.out(out)
        return (out, weights) if return_weights else out


class AttentionClassifier(nn.Module):
    """Token and position embeddings, ``num_layers`` Transformer blocks, a read-out.

    Each block (:class:`~selfattn.models.transformer.TransformerBlock`, pre-LayerNorm) is
    ``x = x + W_O attention(LayerNorm(x))``, its attention a :class:`SelfAttention` (``W_Q``,
    ``W_K``, ``W_V`` apart, as chapter 2 writes them), followed (when ``mlp``) by
    ``x = x + MLP(LayerNorm(x))``. The class logits come from the final vector at the
    read-out position, after a LayerNorm.

    Args:
        vocab_size: number of token ids.
        num_classes: number of answer classes.
        d_model: width of every vector.
        num_layers: number of attention layers.
        num_heads: heads per layer.
        positions: ``"sinusoidal"`` (fixed, no parameters, any length), ``"learned"``
            (a table of ``max_len`` rows) or ``None`` (the model cannot tell positions apart).
        max_len: longest sequence for ``positions="learned"``.
        mlp: add a two-layer MLP (width ``2 d_model``) after each attention layer.

    Shapes:
        ``forward(ids, query_position=None)``: ids ``(B, n)`` long; query_position ``(B,)``
        long (default: the last position). Returns logits ``(B, num_classes)``, plus a list of
        ``num_layers`` weight tensors ``(B, num_heads, n, n)`` with ``return_weights=True``.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        d_model: int = 32,
        num_layers: int = 1,
        num_heads: int = 1,
        positions: str | None = "sinusoidal",
        max_len: int = 64,
        mlp: bool = False,
    ):
        super().__init__()
        mlp = require_bool(mlp, "mlp")
        if positions not in ("sinusoidal", "learned", None):
            raise ValueError(
                f"positions must be 'sinusoidal', 'learned' or None, got {positions!r}"
            )
        vocab_size = require_int(vocab_size, "vocab_size", 1)
        num_classes = require_int(num_classes, "num_classes", 1)
        num_layers = require_int(num_layers, "num_layers", 1)
        d_model = require_int(d_model, "d_model", 1)
        max_len = require_int(max_len, "max_len", 1)
        self.d_model, self.positions, self.max_len = d_model, positions, max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = LearnedPositionalEmbedding(max_len, d_model) if positions == "learned" else None
        self.blocks = nn.ModuleList(
            TransformerBlock(
                d_model,
                num_heads,
                mlp_ratio=2 if mlp else 0,
                attention=SelfAttention(d_model, num_heads=num_heads).with_output(
                    nn.Linear(d_model, d_model, bias=False)
                ),
            )
            for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        """Token plus position vectors ``(B, n, d_model)`` for ids ``(B, n)``."""
        require_token_batch(ids)
        require_token_ids(ids, "ids", self.embed.num_embeddings)
        n = ids.shape[1]
        x = self.embed(ids)
        if self.positions == "sinusoidal":
            x = x + sinusoidal_encoding(n, self.d_model).to(x.device)
        elif self.positions == "learned":
            x = self.pos(x)
        return x

    def forward(
        self,
        ids: torch.Tensor,
        query_position: torch.Tensor | None = None,
        *,
        temperature: float = 1.0,
        return_weights: bool = False,
    ):
        """Logits at ``query_position`` (default: last token); weights per layer on request.

        ``temperature`` is passed to every layer (see :meth:`SelfAttention.forward`).
        """
        return_weights = require_bool(return_weights, "return_weights")
        x = self.embed_tokens(ids)
        all_weights = []
        for block in self.blocks:
            x = block(x, temperature=temperature, return_weights=return_weights)
            if return_weights:
                x, weights = x
                all_weights.append(weights["self"])
        b, n = ids.shape
        if query_position is None:
            query_position = torch.full((b,), n - 1, dtype=torch.long, device=ids.device)
        require_tensor(query_position, "query_position")
        if query_position.shape != (b,) or ((query_position < 0) | (query_position >= n)).any():
            raise ValueError(
                f"query_position must be (B,)=({b},) indices in 0..{n - 1}, "
                f"got {query_position.tolist()}"
            )
        logits = self.head(self.final_norm(x[torch.arange(b, device=ids.device), query_position]))
        return (logits, all_weights) if return_weights else logits
