r"""Gated DeltaNet as a layer, laid out as ``transformers``' ``Qwen3NextGatedDeltaNet``.

One layer (Yang, Kautz and Hatamizadeh 2025; Qwen3-Next's linear-attention layers):

1. ``in_proj_qkvz`` projects ``x`` to queries, keys, values and an output gate ``z``;
   ``in_proj_ba`` to two numbers per value head, ``b`` and ``a``. Both are laid out per key
   head (``[q | k | v | z]`` for each key head, then the next), as Qwen3-Next's weights are.
2. A short causal depthwise convolution (``conv1d``, kernel 4) over ``q, k, v``, then SiLU.
3. ``q`` and ``k`` L2-normalised per head; ``beta = sigmoid(b)`` the write strength;
   ``g = -exp(A_log) softplus(a + dt_bias)`` the log-decay (Mamba-2's discretisation).
4. The gated delta rule (:func:`selfattn.efficient.delta_rule.gated_delta_rule`), chunked or
   recurrent.
5. A gated RMSNorm per head (``norm``: ``RMSNorm(o) * weight * silu(z)``), then ``out_proj``.

The parameter names and shapes are those of ``Qwen3NextGatedDeltaNet`` (``in_proj_qkvz``,
``in_proj_ba``, ``conv1d``, ``dt_bias``, ``A_log``, ``norm.weight``, ``out_proj``), so its
``state_dict`` loads here as it is (``tests/test_delta_net.py`` checks the outputs agree).

Decoding: the whole memory of the past is :class:`GatedDeltaNetState`, the last
``kernel - 1`` convolution inputs and the ``(H_v, d_k, d_v)`` delta-rule state; its size
does not grow with the sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import require_bool, require_float, require_int, require_number
from .efficient.delta_rule import gated_delta_rule

__all__ = ["GatedDeltaNet", "GatedDeltaNetState", "GatedRMSNorm", "l2norm"]


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(sum x^2 + eps)`` over the last dim (the form of flash-linear-attention)."""
    eps = require_number(eps, "eps", positive=True)
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


class GatedRMSNorm(nn.Module):
    """RMSNorm of ``h`` (float32), times ``weight``, times ``silu(gate)``; norm before gate."""

    def __init__(self, size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = require_number(eps, "eps", positive=True)

    def forward(self, h: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        dtype = h.dtype
        h = h.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        h = self.weight * h.to(dtype)
        return (h * F.silu(gate.float())).to(dtype)


@dataclass
class GatedDeltaNetState:
    """What a :class:`GatedDeltaNet` keeps between decoding calls.

    Attributes:
        conv: ``(B, conv_dim, kernel - 1)`` the last inputs of the convolution.
        recurrent: ``(B, H_v, d_k, d_v)`` the delta-rule state (float32).
        steps: tokens absorbed.
    """

    conv: torch.Tensor
    recurrent: torch.Tensor
    steps: int = 0

    def numel(self) -> int:
        """Numbers held: constant in the sequence length."""
        return self.conv.numel() + self.recurrent.numel()


class GatedDeltaNet(nn.Module):
    """Gated DeltaNet, ``(B, n, d_model) -> (B, n, d_model)``, causal.

    Args:
        d_model: width of the input and output.
        num_heads: key (and query) heads.
        head_k_dim: per-head query/key width; default ``d_model // num_heads``.
        head_v_dim: per-head value width; default ``head_k_dim``.
        num_v_heads: value heads, a multiple of ``num_heads`` (each key head serves
            ``num_v_heads // num_heads`` value heads, as Qwen3-Next); default ``num_heads``.
        conv_kernel: the short convolution's width (Qwen3-Next: 4).
        chunk_size: the delta rule's chunk (``None``: the recurrent form).
        eps: the gated RMSNorm's epsilon.

    ``dt_bias`` starts so that ``softplus(dt_bias)`` is log-uniform in ``[0.001, 0.1]`` and
    ``A = exp(A_log)`` uniform in ``[1, 16]`` (Mamba-2's initialisation), so the decay
    ``exp(g)`` starts between about 0.2 and 1.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        head_k_dim: int | None = None,
        head_v_dim: int | None = None,
        num_v_heads: int | None = None,
        conv_kernel: int = 4,
        chunk_size: int | None = 64,
        eps: float = 1e-6,
    ):
        super().__init__()
        self.d_model = require_int(d_model, "d_model", 1)
        self.num_k_heads = require_int(num_heads, "num_heads", 1)
        if head_k_dim is None and d_model % num_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}; pass head_k_dim"
            )
        dk = (
            d_model // num_heads
            if head_k_dim is None
            else require_int(head_k_dim, "head_k_dim", 1)
        )
        dv = dk if head_v_dim is None else require_int(head_v_dim, "head_v_dim", 1)
        hv = num_heads if num_v_heads is None else require_int(num_v_heads, "num_v_heads", 1)
        if hv % num_heads:
            raise ValueError(
                f"num_v_heads={hv} must be a multiple of num_heads={num_heads} (each key head "
                "serves the same number of value heads)"
            )
        self.head_k_dim, self.head_v_dim, self.num_v_heads = dk, dv, hv
        self.conv_kernel = require_int(conv_kernel, "conv_kernel", 1)
        self.chunk_size = None if chunk_size is None else require_int(chunk_size, "chunk_size", 1)
        eps = require_number(eps, "eps", positive=True)
        self.key_dim, self.value_dim = dk * num_heads, dv * hv
        self.conv_dim = 2 * self.key_dim + self.value_dim
        self.in_proj_qkvz = nn.Linear(d_model, 2 * self.key_dim + 2 * self.value_dim, bias=False)
        self.in_proj_ba = nn.Linear(d_model, 2 * hv, bias=False)
        self.conv1d = nn.Conv1d(
            self.conv_dim,
            self.conv_dim,
            conv_kernel,
            groups=self.conv_dim,
            padding=conv_kernel - 1,
            bias=False,
        )
        dt = torch.exp(torch.empty(hv).uniform_(math.log(1e-3), math.log(0.1)))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
        self.A_log = nn.Parameter(torch.log(torch.empty(hv).uniform_(1.0, 16.0)))
        self.norm = GatedRMSNorm(dv, eps)
        self.out_proj = nn.Linear(self.value_dim, d_model, bias=False)

    def _split(self, qkvz: torch.Tensor, ba: torch.Tensor):
        """Qwen3-Next's per-key-head layout -> q, k ``(B, n, H_k, d_k)``, v, z
        ``(B, n, H_v, d_v)``, b, a ``(B, n, H_v)``."""
        bsz, n, _ = qkvz.shape
        hk, r = self.num_k_heads, self.num_v_heads // self.num_k_heads
        dk, dv = self.head_k_dim, self.head_v_dim
        qkvz = qkvz.view(bsz, n, hk, 2 * dk + 2 * r * dv)
        q, k, v, z = torch.split(qkvz, [dk, dk, r * dv, r * dv], dim=-1)
        b, a = torch.split(ba.view(bsz, n, hk, 2 * r), [r, r], dim=-1)
        v, z = v.reshape(bsz, n, -1, dv), z.reshape(bsz, n, -1, dv)
        return q, k, v, z, b.reshape(bsz, n, -1), a.reshape(bsz, n, -1)

    def empty_state(self, batch: int, *, device=None) -> GatedDeltaNetState:
        """The state before the first token: zeros."""
        w = self.in_proj_qkvz.weight
        device = w.device if device is None else device
        conv = torch.zeros(
            batch, self.conv_dim, self.conv_kernel - 1, device=device, dtype=w.dtype
        )
        rec = torch.zeros(batch, self.num_v_heads, self.head_k_dim, self.head_v_dim, device=device)
        return GatedDeltaNetState(conv, rec)

    def forward(
        self,
        x: torch.Tensor,
        *,
        state: GatedDeltaNetState | None = None,
        return_state: bool = False,
    ):
        """``x`` ``(B, n, d_model)`` -> ``(B, n, d_model)``; with ``return_state`` also the
        :class:`GatedDeltaNetState` after the last token. ``state`` continues a sequence
        (decoding: feed one token, or a few, at a time)."""
        require_float(x, "x")
        return_state = require_bool(return_state, "return_state")
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must have shape (B, n, d_model={self.d_model}), got {tuple(x.shape)}"
            )
        if state is not None and not isinstance(state, GatedDeltaNetState):
            raise TypeError(f"state must be a GatedDeltaNetState or None, got {type(state)}")
        bsz, n, _ = x.shape
        if state is None:
            state = self.empty_state(bsz, device=x.device)
        q, k, v, z, b, a = self._split(self.in_proj_qkvz(x), self.in_proj_ba(x))
        mixed = torch.cat([t.reshape(bsz, n, -1) for t in (q, k, v)], -1).transpose(1, 2)
        padded = torch.cat([state.conv.to(mixed.dtype), mixed], -1)  # the past inputs first
        conv = F.silu(F.conv1d(padded, self.conv1d.weight, groups=self.conv_dim))
        new_conv = padded[..., padded.shape[-1] - (self.conv_kernel - 1) :]
        q, k, v = torch.split(
            conv.transpose(1, 2), [self.key_dim, self.key_dim, self.value_dim], -1
        )
        r = self.num_v_heads // self.num_k_heads
        q = l2norm(q.reshape(bsz, n, -1, self.head_k_dim).float())
        k = l2norm(k.reshape(bsz, n, -1, self.head_k_dim).float())
        if r > 1:
            q, k = q.repeat_interleave(r, dim=2), k.repeat_interleave(r, dim=2)
        v = v.reshape(bsz, n, -1, self.head_v_dim)
        beta = b.sigmoid()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
        out, rec = gated_delta_rule(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.float().transpose(1, 2),
            g.transpose(1, 2),
            beta.float().transpose(1, 2),
            chunk_size=self.chunk_size,
            initial_state=state.recurrent,
            output_final_state=True,
        )
        out = self.norm(out.transpose(1, 2).to(x.dtype), z)
        y = self.out_proj(out.reshape(bsz, n, self.value_dim))
        if return_state:
            return y, GatedDeltaNetState(new_conv, rec, state.steps + n)
        return y
