"""The reference implementations the kernels are checked against, by ``tests/`` and by
``make gpu-check`` (``tools/gpu_check.py``): attention by its definition, in torch, on any
device and dtype (the checks call them in float64 for the oracle).

One module, so that the tests on the CPU and the GPU check hold every kernel to the same
oracle. Conventions:

- a mask is boolean, ``True`` = the query may attend to the key, shape ``(n, m)``;
- the causal diagonal's alignment: ``"bottom_right"``, the library's default (``j <= i + m -
  n``: the last query sees every key, as when new queries follow a cache) or ``"top_left"``
  (key ``j`` visible to query ``i`` when ``j <= i``, SDPA's ``is_causal``); ``"none"`` for
  no mask;
- a query row with no visible key comes out 0 (as flash-attn and torch's
  ``causal_lower_right`` give it), not NaN.

Imported as ``from tools import references`` (the tests: pytest's ``pythonpath``).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

ALIGNMENTS = ("top_left", "bottom_right")


def _offset(n: int, m: int, alignment: str) -> int:
    if alignment not in ALIGNMENTS:
        raise ValueError(f"alignment must be one of {ALIGNMENTS}, got {alignment!r}")
    return m - n if alignment == "bottom_right" else 0


def causal_mask(
    n: int, m: int, alignment: str = "bottom_right", device=None
) -> torch.Tensor | None:
    """``(n, m)``, ``True`` where key ``j <= i + offset`` (offset ``m - n`` for bottom-right);
    ``None`` for ``alignment="none"``."""
    if alignment == "none":
        return None
    i = torch.arange(n, device=device)[:, None] + _offset(n, m, alignment)
    return torch.arange(m, device=device)[None, :] <= i


def band_mask(
    n: int, m: int, window: int, causal: bool = False, alignment: str = "bottom_right", device=None
) -> torch.Tensor:
    """The sliding window written out: key ``j`` is in query ``i``'s band when
    ``-(window - 1) <= j - (i + offset) <= (0 if causal else window - 1)``."""
    rel = (
        torch.arange(m, device=device)[None, :]
        - torch.arange(n, device=device)[:, None]
        - _offset(n, m, alignment)
    )
    return (rel >= -(window - 1)) & (rel <= (0 if causal else window - 1))


def sdpa(q, k, v, mask: torch.Tensor | None = None):
    """softmax(q k^T / sqrt(d) masked) v by torch's SDPA; a row with no visible key is 0."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return torch.where(mask.any(-1, keepdim=True), out, torch.zeros_like(out))


def torch_attention(q, k, v, causal=False, alignment="bottom_right", scale=None):
    """torch's own causal attention: its ``causal_lower_right`` bias (bottom-right, the
    library's default alignment), or SDPA's ``is_causal`` (top-left)."""
    if causal and alignment == "bottom_right":
        from torch.nn.attention.bias import causal_lower_right

        with warnings.catch_warnings():  # torch warns about n > m; its result is still defined
            warnings.simplefilter("ignore")
            bias = causal_lower_right(q.shape[-2], k.shape[-2])
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def elu_plus_one(x):
    """The feature map of linear attention (Katharopoulos et al.): phi(x) = elu(x) + 1 > 0."""
    return F.elu(x) + 1


def linear_attention(q, k, v, mask: torch.Tensor | None = None, *, phi=elu_plus_one, eps=1e-6):
    """Linear attention by its definition in matrix form:
    ``out_i = sum_j a_ij v_j / (sum_j a_ij + eps)``, ``a = phi(q) phi(k)^T`` (masked)."""
    a = phi(q) @ phi(k).transpose(-2, -1)
    if mask is not None:
        a = torch.where(mask, a, torch.zeros_like(a))
    return (a @ v) / (a.sum(-1, keepdim=True) + eps)


def grads(fn, q, k, v, do):
    """``(out, dq, dk, dv)`` of ``fn(q, k, v)`` for the output gradient ``do``."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v)
    return (out.detach(), *torch.autograd.grad(out, (q, k, v), do))


def max_error(a, b) -> float:
    """``max |a - b| / max(1, max |b|)``: absolute for outputs of size about 1, relative for
    the larger gradients of long rows (0 for empty tensors)."""
    if not a.numel():
        return 0.0
    b = b.double()
    return float((a.double() - b).abs().max() / b.abs().max().clamp(min=1.0))
