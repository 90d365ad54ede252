"""One head of self-attention, and the tiny key-value recall model built on it (chapter 3).

``SingleHeadSelfAttention`` is the five steps of chapter 3 as a module: three
learned projections and :func:`selfattn.attention.scaled_dot_product_attention`, that is
:class:`~selfattn.models.tiny_attention.SelfAttention` with one head and no biases.
Its ``scaled`` switch exists for one experiment only: forgetting the
``1/sqrt(d_k)`` scale, to see what happens to training.
"""

from __future__ import annotations

import torch
from torch import nn

from .._checks import require_bool, require_float, require_int
from .tiny_attention import SelfAttention

__all__ = ["SingleHeadSelfAttention", "KeyValueRecallModel"]


class SingleHeadSelfAttention(SelfAttention):
    """``softmax(X W_q (X W_k)^T * scale) X W_v`` with learned ``W_q, W_k, W_v``.

    :class:`~selfattn.models.tiny_attention.SelfAttention` with one head and no biases (the
    scores are then exactly the chapter's bilinear form ``x_i^T W_q W_k^T x_j``), taking
    any leading batch shape and returning the weights without a head axis.

    Args:
        d_model: width ``d`` of the input tokens.
        d_k: width of queries and keys.
        d_v: width of values and of the output (defaults to ``d_model``).
        scaled: multiply the scores by ``1/sqrt(d_k)`` (the Transformer's choice).
            ``False`` multiplies by 1, i.e. forgets the scale.

    Shapes:
        ``forward(x (..., n, d_model), mask=None) -> (..., n, d_v)``; with
        ``return_weights=True`` also the weights ``(..., n, n)``.
    """

    def __init__(self, d_model: int, d_k: int, d_v: int | None = None, *, scaled: bool = True):
        # SelfAttention checks the sizes (require_int: ints >= 1)
        super().__init__(d_model, d_k, d_v, num_heads=1, bias=False, scaled=scaled)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, *, return_weights: bool = False
    ):
        """Self-attention over the tokens of ``x (..., n, d_model)``; ``mask`` as in
        :func:`selfattn.attention.scaled_dot_product_attention` (bool, True = may attend),
        ``(n, n)`` or with the leading shape of ``x``."""
        return_weights = require_bool(return_weights, "return_weights")
        require_float(x, "x")
        if x.dim() < 2 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must have shape (..., n, d_model={self.d_model}), got {tuple(x.shape)}"
            )
        *lead, n, _ = x.shape
        flat = x.reshape(-1, n, self.d_model)  # the layer takes (B, n, d)
        if mask is not None and mask.dim() > 2:
            mask = mask.reshape(-1, *mask.shape[-2:])
        out, weights = super().forward(flat, mask=mask, return_weights=True)
        out, weights = out.reshape(*lead, n, -1), weights.reshape(*lead, n, n)
        return (out, weights) if return_weights else out


class KeyValueRecallModel(nn.Module):
    """Embeddings -> one :class:`SingleHeadSelfAttention` -> a linear readout at the query token.

    Solves :func:`selfattn.data.recall.key_value_recall` ("which value was stored under this
    key?"), which needs attention in the plainest sense: the query token must find
    the pair token with the same key (query-key match) and read its value (value).
    A pair token is ``E_key[key] + E_value[value]``; the query token is
    ``E_key[key] + E_value[<query>]``, a marker embedding.

    Args:
        n_keys, n_values: vocabulary sizes of keys and values.
        d_model: embedding width; d_k: query/key width.
        scaled: see :class:`SingleHeadSelfAttention`.

    Shapes:
        ``forward(keys (B, p), values (B, p), query (B,)) -> logits (B, n_values)``.
    """

    def __init__(self, n_keys: int, n_values: int, d_model: int, d_k: int, *, scaled: bool = True):
        super().__init__()
        n_keys, n_values = require_int(n_keys, "n_keys", 1), require_int(n_values, "n_values", 1)
        d_model, d_k = require_int(d_model, "d_model", 1), require_int(d_k, "d_k", 1)
        self.key_embedding = nn.Embedding(n_keys, d_model)
        self.value_embedding = nn.Embedding(
            n_values + 1, d_model
        )  # the last id marks the query token
        self.attention = SingleHeadSelfAttention(d_model, d_k, scaled=scaled)
        self.readout = nn.Linear(d_model, n_values)
        self.n_values = n_values

    def tokens(
        self, keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor
    ) -> torch.Tensor:
        """The input sequence ``(B, p + 1, d_model)``: p pair tokens, then the query token."""
        if keys.shape != values.shape or keys.dim() != 2 or query.shape != keys.shape[:1]:
            raise ValueError(
                "expected keys (B, p), values (B, p) and query (B,), got keys "
                f"{tuple(keys.shape)}, values {tuple(values.shape)}, query {tuple(query.shape)}"
            )
        pairs = self.key_embedding(keys) + self.value_embedding(values)
        marker = torch.full_like(query, self.n_values)
        q_token = self.key_embedding(query) + self.value_embedding(marker)
        return torch.cat([pairs, q_token[:, None]], dim=1)

    def forward(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        query: torch.Tensor,
        *,
        return_weights: bool = False,
    ):
        """Logits over the values for each query; with ``return_weights`` also the query token's
        attention weights over the ``p + 1`` tokens, ``(B, p + 1)``."""
        return_weights = require_bool(return_weights, "return_weights")
        out, weights = self.attention(self.tokens(keys, values, query), return_weights=True)
        logits = self.readout(out[:, -1])  # only the query token's output is read
        return (logits, weights[:, -1]) if return_weights else logits
