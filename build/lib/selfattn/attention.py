"""Softmax and scaled dot-product attention, written out plainly (chapter 3).

This is the book's reference implementation: every faster variant in
``selfattn.efficient`` is tested against it and against torch's own
``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math

import torch

from ._checks import check_mask, check_qkv, require_float

__all__ = ["softmax", "scaled_dot_product_attention"]


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax along ``dim``.

    Subtracts each row's maximum before exponentiating, so large scores cannot
    overflow. A row whose entries are all ``-inf`` (a fully masked row) gives
    all zeros instead of the ``0/0 = NaN`` a naive softmax produces.

    Args:
        x: scores of any shape ``(...)``, floating point.
        dim: the dimension to normalise over.

    Returns:
        A tensor of the same shape and dtype as ``x`` whose slices along ``dim``
        sum to 1 (or are all 0 for fully masked slices).
    """
    require_float(x, "x")
    row_max = x.amax(dim=dim, keepdim=True)
    # An all -inf row has max -inf, and -inf - (-inf) is NaN: shift such rows by 0 instead.
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exp = torch.exp(x - row_max)
    total = exp.sum(dim=dim, keepdim=True)
    return exp / torch.where(total == 0, torch.ones_like(total), total)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    return_weights: bool = False,
):
    r"""softmax(q k^T * scale + mask) v, with the weights on request.

    Args:
        q: queries ``(..., n, d_k)``.
        k: keys ``(..., m, d_k)``.
        v: values ``(..., m, d_v)``. The batch dimensions ``...`` of q, k, v broadcast.
        mask: optional, broadcastable to ``(..., n, m)``. Bool: ``True`` = may attend
            (torch SDPA's convention). Float: added to the scores (use ``-inf`` to forbid).
            A query whose keys are all masked gets zero weights and a zero output.
        scale: multiplies the scores; defaults to ``1 / sqrt(d_k)``.
        return_weights: also return the attention weights.

    Returns:
        ``output`` of shape ``(..., n, d_v)``, or ``(output, weights)`` with
        weights of shape ``(..., n, m)`` when ``return_weights`` is true.

    Raises:
        TypeError: non-tensor, integer or mixed-dtype inputs; a mask neither bool nor float.
        ValueError: d_k or m mismatch, batch shapes or a mask that do not broadcast.
    """
    batch = check_qkv(q, k, v)
    n, m = q.shape[-2], k.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., n, m)
    if mask is not None:
        check_mask(mask, batch + (n, m))
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.to(scores.dtype)
    weights = softmax(scores, dim=-1)
    output = weights @ v  # (..., n, d_v)
    return (output, weights) if return_weights else output
