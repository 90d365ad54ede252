"""Differential attention (DIFF Transformer, Ye et al., 2024): two softmax maps subtracted
(chapter 11).

A differential head has two query/key pairs and one value of twice the head width::

    A1 = softmax(Q1 K1^T * s),   A2 = softmax(Q2 K2^T * s),   s = d_head^{-1/2}
    head = (1 - lambda_init) * RMSNorm((A1 - lambda * A2) V)        V: (m, 2 d_head)

with the scalar ``lambda`` re-parametrised as
``lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init`` (four
learned vectors of width ``d_head``, shared by the layer's heads) and
``lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1))`` for the layer at depth ``l = 1, 2, ...``
(``layer_index = l - 1``). The RMSNorm is per head, over the ``2 d_head`` features, without a
learned scale; ``(1 - lambda_init)`` restores the gradient scale of a standard layer. The
difference cancels weight that both maps give to the same keys (the paper's "attention noise").

The layout is ``transformers``' ``DiffLlamaAttention``: ``num_heads`` ordinary query heads
(``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` of a standard layer, with ``num_kv_heads``
key/value heads as in grouped-query attention), of which head ``i`` and head
``i + num_heads / 2`` are the two maps of differential head ``i``, whose value is value heads
``j`` and ``j + num_kv_heads / 2`` side by side (``j`` the key/value head of query head ``i``).
So the layer has the parameters of a standard layer of the same ``num_heads`` and ``d_head``,
plus the four lambda vectors, and ``num_heads / 2`` differential heads.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._checks import (
    is_half,
    require_bool,
    require_int,
    require_number,
)
from .attention import softmax
from .masks import apply_mask
from .multihead import KVCache, merge_heads, self_attention_inputs, split_heads
from .norms import rms_norm
from .positional import RotaryEmbedding

__all__ = ["DifferentialAttention", "lambda_init"]


def lambda_init(layer_index: int) -> float:
    """``0.8 - 0.6 exp(-0.3 * layer_index)``: the DIFF Transformer's initial lambda for the
    layer at depth ``l = layer_index + 1`` (0.2 for the first layer, towards 0.8 deep down)."""
    layer_index = require_int(layer_index, "layer_index", 0)
    return 0.8 - 0.6 * math.exp(-0.3 * layer_index)


class DifferentialAttention(nn.Module):
    """Differential attention with ``num_heads / 2`` differential heads (DiffLlama's layout).

    Args:
        d_model: model width ``d``.
        num_heads: query heads (even): ``num_heads / 2`` differential heads of two maps each.
        num_kv_heads: key/value heads (even, dividing ``num_heads``); default ``num_heads``.
        d_head: width of each query/key head (``head_dim``); default ``d_model // num_heads``.
        layer_index: ``l - 1`` for the layer at depth ``l``; sets :func:`lambda_init`.
        rope: a :class:`~selfattn.positional.RotaryEmbedding` of width ``d_head`` for the
            queries and keys (DiffLlama: ``layout="half"``), or ``None``.
        bias: biases on the four projections (``attention_bias``).
        norm_eps: the per-head RMSNorm's epsilon (``rms_norm_eps``).
        lambda_std: the standard deviation of the lambda vectors' initialisation.

    ``layer(x, mask=None, cache=None, return_weights=False)``: ``x`` ``(B, n, d_model)``;
    returns ``(B, n, d_model)``, and with ``return_weights`` also the differential maps
    ``A1 - lambda A2`` ``(B, num_heads / 2, n, m)``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        d_head: int | None = None,
        layer_index: int = 0,
        rope: RotaryEmbedding | None = None,
        bias: bool = False,
        norm_eps: float = 1e-5,
        lambda_std: float = 0.1,
    ):
        super().__init__()
        self.d_model = require_int(d_model, "d_model", 1)
        self.num_heads = require_int(num_heads, "num_heads", 2)
        if num_heads % 2:
            raise ValueError(f"num_heads must be even (two maps per head), got {num_heads}")
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        self.num_kv_heads = require_int(num_kv_heads, "num_kv_heads", 2)
        if num_kv_heads % 2 or num_heads % num_kv_heads:
            raise ValueError(
                f"num_kv_heads must be even and divide num_heads={num_heads}, got {num_kv_heads}"
            )
        if d_head is None:
            if d_model % num_heads:
                raise ValueError(
                    f"d_model={d_model} is not divisible by num_heads={num_heads}: pass d_head"
                )
            d_head = d_model // num_heads
        self.d_head = require_int(d_head, "d_head", 1)
        self.layer_index = require_int(layer_index, "layer_index", 0)
        self.lambda_init = lambda_init(self.layer_index)
        if rope is not None:
            if not isinstance(rope, RotaryEmbedding):
                raise TypeError(f"rope must be a RotaryEmbedding, got {type(rope).__name__}")
            if rope.d_head != self.d_head:
                raise ValueError(f"rope has d_head={rope.d_head}, the layer {self.d_head}")
        self.rope = rope
        bias = require_bool(bias, "bias")
        self.norm_eps = require_number(norm_eps, "norm_eps", positive=True)
        lambda_std = require_number(lambda_std, "lambda_std", nonnegative=True)
        h, hkv, dh = self.num_heads, self.num_kv_heads, self.d_head
        self.q_proj = nn.Linear(d_model, h * dh, bias=bias)
        self.k_proj = nn.Linear(d_model, hkv * dh, bias=bias)
        self.v_proj = nn.Linear(d_model, hkv * dh, bias=bias)
        self.o_proj = nn.Linear(h * dh, d_model, bias=bias)
        self.lambda_q1 = nn.Parameter(torch.randn(dh) * lambda_std)
        self.lambda_k1 = nn.Parameter(torch.randn(dh) * lambda_std)
        self.lambda_q2 = nn.Parameter(torch.randn(dh) * lambda_std)
        self.lambda_k2 = nn.Parameter(torch.randn(dh) * lambda_std)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, "
            f"num_kv_heads={self.num_kv_heads}, d_head={self.d_head}, "
            f"lambda_init={self.lambda_init:.3f}"
        )

    def lambda_full(self) -> torch.Tensor:
        """The scalar ``lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init``."""
        l1 = torch.exp(torch.sum(self.lambda_q1 * self.lambda_k1))
        l2 = torch.exp(torch.sum(self.lambda_q2 * self.lambda_k2))
        return l1 - l2 + self.lambda_init

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | str | None = None,
        cache: KVCache | None = None,
        return_weights: bool = False,
    ):
        """Differential attention of ``x`` ``(B, n, d_model)`` over itself (and the cache).

        Args:
            x: ``(B, n, d_model)`` or unbatched ``(n, d_model)``.
            mask: ``None``, ``"causal"`` (bottom-right) or a bool/float tensor read as
                ``(n, m)``, ``(B, n, m)`` or ``(B, h, n, m)`` (``h = num_heads``; both maps
                of differential head ``i`` take rows ``i`` and ``i + h / 2``).
            cache: a :class:`~selfattn.multihead.KVCache`: keys ``(B, h_kv, t, d_head)`` and
                values are appended, and attention runs over every cached position.
            return_weights: also return ``A1 - lambda A2``, ``(B, h / 2, n, m)``.

        Returns:
            ``y`` ``(B, n, d_model)``, or ``(y, weights)``.

        Raises:
            TypeError: a non-float ``x`` or one in another dtype than the weights.
            ValueError: a last dimension other than ``d_model``, a mask that does not cover
                the keys, a cache with another batch.
        """
        return_weights = require_bool(return_weights, "return_weights")
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a selfattn.KVCache, got {type(cache).__name__}")
        x, unbatched, start, mask = self_attention_inputs(
            x, mask, cache, self.d_model, self.q_proj.weight, self.num_heads
        )
        batch, n = x.shape[0], x.shape[1]
        if cache is not None and len(cache) and cache.k.shape[0] != batch:
            raise ValueError(f"the cache holds batch size {cache.k.shape[0]}, x has {batch}")
        m = start + n
        h, hkv = self.num_heads, self.num_kv_heads
        q = split_heads(self.q_proj(x), h)  # (B, h, n, d_head)
        k = split_heads(self.k_proj(x), hkv)  # (B, h_kv, n, d_head)
        v = split_heads(self.v_proj(x), hkv)
        if self.rope is not None:
            positions = torch.arange(start, m, device=x.device)
            q, k = self.rope(q, k, q_positions=positions, k_positions=positions)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, h_kv, m, d_head)
        group = h // hkv
        k = k.repeat_interleave(group, dim=1)  # query head i reads key/value head i // group
        half = hkv // 2
        v = torch.cat([v[:, :half], v[:, half:]], dim=-1)  # (B, h_kv / 2, m, 2 d_head)
        v = v.repeat(1, 2, 1, 1).repeat_interleave(group, dim=1)  # (B, h, m, 2 d_head)
        if is_half(q):  # float16 overflows at 65504: scores and softmax in float32
            q, k, v = q.float(), k.float(), v.float()
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.d_head**-0.5  # (B, h, n, m)
        if mask is not None:
            scores = apply_mask(scores, mask)
        weights = softmax(scores, dim=-1)
        lam = self.lambda_full().to(weights.dtype)
        diff = weights[:, : h // 2] - lam * weights[:, h // 2 :]  # (B, h / 2, n, m)
        heads = torch.matmul(diff, v[:, : h // 2])  # (B, h / 2, n, 2 d_head)
        heads = rms_norm(heads, eps=self.norm_eps)
        heads = ((1 - self.lambda_init) * heads).to(x.dtype)
        diff = diff.to(x.dtype)
        y = self.o_proj(merge_heads(heads))  # (B, n, h * d_head) -> (B, n, d_model)
        if unbatched:
            y, diff = y.squeeze(0), diff.squeeze(0)
        return (y, diff) if return_weights else y
