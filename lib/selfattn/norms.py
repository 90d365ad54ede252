"""RMSNorm, the normalisation of today's LLMs (chapter 11, and QK-norm in ``multihead``).

``RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g`` over the last dimension (Zhang and Sennrich,
2019): LayerNorm without the mean and without the bias. Two conventions for the learned
scale ``g`` are in use, and :class:`RMSNorm` takes both:

* ``g = weight`` (LLaMA, Qwen, DeepSeek, gpt-oss), ``weight`` initialised to ones;
* ``g = 1 + weight`` (Gemma, Qwen3-Next: ``unit_offset=True``), ``weight`` initialised to
  zeros, so that a zero weight is the identity scale.

The statistics are computed in float32 for half-precision inputs (float16 would overflow in
``x^2``) and in the input's own dtype otherwise, so float64 stays float64.

This module depends on nothing else in the library: it sits with the core modules and
:mod:`selfattn.multihead` uses it for QK-norm.
"""

from __future__ import annotations

import torch
from torch import nn

from ._checks import is_half, require_bool, require_float, require_int, require_number

__all__ = ["RMSNorm", "rms_norm"]


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    *,
    eps: float = 1e-6,
    unit_offset: bool = False,
) -> torch.Tensor:
    """``x / sqrt(mean(x^2, -1) + eps) * g`` with ``g = weight`` (or ``1 + weight``).

    Args:
        x: ``(..., d)`` floating point.
        weight: ``(d,)`` or ``None`` (no scale).
        eps: added to the mean square.
        unit_offset: the scale is ``1 + weight`` (Gemma's convention).

    Returns:
        A tensor of ``x``'s shape and dtype.
    """
    eps = require_number(eps, "eps", positive=True)
    unit_offset = require_bool(unit_offset, "unit_offset")
    dtype = x.dtype
    h = x.float() if is_half(x) else x
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    if weight is None:
        return h.to(dtype)
    g = weight.to(h.dtype)
    return (h * (1.0 + g) if unit_offset else h * g).to(dtype)


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last dimension, with a learned scale.

    Args:
        d: the normalised width.
        eps: added to the mean square before the square root.
        unit_offset: ``False``: scale ``weight`` (initialised to ones); ``True``: scale
            ``1 + weight`` (initialised to zeros), Gemma's and Qwen3-Next's convention.

    Attributes:
        weight: ``(d,)``.

    ``forward(x)`` takes ``(..., d)`` and returns the same shape and dtype.
    """

    def __init__(self, d: int, *, eps: float = 1e-6, unit_offset: bool = False):
        super().__init__()
        self.d = require_int(d, "d", 1)
        self.eps = require_number(eps, "eps", positive=True)
        self.unit_offset = require_bool(unit_offset, "unit_offset")
        self.weight = nn.Parameter(torch.zeros(d) if unit_offset else torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require_float(x, "x")
        if x.dim() < 1 or x.shape[-1] != self.d:
            raise ValueError(f"x must have shape (..., d={self.d}), got {tuple(x.shape)}")
        return rms_norm(x, self.weight, eps=self.eps, unit_offset=self.unit_offset)

    def extra_repr(self) -> str:
        offset = ", unit_offset=True" if self.unit_offset else ""
        return f"{self.d}, eps={self.eps:g}{offset}"
