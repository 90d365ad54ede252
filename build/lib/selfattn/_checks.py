"""Input validation shared by every attention function.

Bad input must fail loudly with a message naming what was given and what was
expected, never broadcast silently or return NaN (see design.md, "Bad input").
"""

from __future__ import annotations

import torch

__all__: list[str] = []


def require_tensor(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def require_float(x: torch.Tensor, name: str) -> None:
    require_tensor(x, name)
    if not x.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor (float16, bfloat16, float32 or float64), "
            f"got dtype {x.dtype}; convert it with {name}.float()"
        )


def require_ndim(x: torch.Tensor, name: str, at_least: int, shape_doc: str) -> None:
    if x.dim() < at_least:
        raise ValueError(
            f"{name} must have shape {shape_doc} (at least {at_least} dims), got {tuple(x.shape)}"
        )


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, ...]:
    """Validate q (..., n, d_k), k (..., m, d_k), v (..., m, d_v); return the broadcast batch shape."""
    for name, t, doc in (
        ("q", q, "(..., n, d_k)"),
        ("k", k, "(..., m, d_k)"),
        ("v", v, "(..., m, d_v)"),
    ):
        require_float(t, name)
        require_ndim(t, name, 2, doc)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dimension d_k, got q {tuple(q.shape)} (d_k={q.shape[-1]}) "
            f"and k {tuple(k.shape)} (d_k={k.shape[-1]})"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of keys m (dim -2), got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    try:
        return tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of q {tuple(q.shape[:-2])}, k {tuple(k.shape[:-2])} and "
            f"v {tuple(v.shape[:-2])} do not broadcast"
        ) from None


def check_mask(mask: torch.Tensor, scores_shape: tuple[int, ...]) -> None:
    """A mask must be bool (True = may attend) or float (added to the scores) and broadcast to the scores."""
    require_tensor(mask, "mask")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(
            f"mask must be bool (True = may attend) or floating point (added to the scores), got dtype {mask.dtype}"
        )
    try:
        out = tuple(torch.broadcast_shapes(mask.shape, scores_shape))
    except RuntimeError:
        out = None
    if out != tuple(scores_shape):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape {tuple(scores_shape)} "
            f"(..., n, m)"
        )
