"""Attention in NumPy, one step at a time, as the source articles derive it (chapter 3).

No torch here: this is the formula with nothing hidden, so the chapter can
print the shape of every intermediate and the tests can compare it with the
torch implementation.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._checks import require_dim_arg, require_real

__all__ = ["AttentionSteps", "attention_steps", "softmax_np"]


class AttentionSteps(NamedTuple):
    """Every intermediate of single-head self-attention on ``X (n, d)``."""

    Q: np.ndarray  #: step 1, queries ``X W_q`` (n, d_k)
    K: np.ndarray  #: step 1, keys ``X W_k`` (n, d_k)
    V: np.ndarray  #: step 1, values ``X W_v`` (n, d_v)
    scores: np.ndarray  #: step 2, ``Q K^T`` (n, n)
    scaled_scores: np.ndarray  #: step 3, ``Q K^T / sqrt(d_k)`` (n, n), mask applied
    weights: np.ndarray  #: step 4, row-wise softmax (n, n)
    output: np.ndarray  #: step 5, ``weights V`` (n, d_v)


def softmax_np(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Stable softmax; a row of all ``-inf`` gives zeros."""
    require_dim_arg(axis, "axis")
    x = np.asarray(require_real(x, "x"))
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise TypeError(f"x must be a numeric array, got dtype {x.dtype}")
    row_max = np.max(x, axis=axis, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    exp = np.exp(x - row_max)
    total = exp.sum(axis=axis, keepdims=True)
    return exp / np.where(total == 0, 1.0, total)


def attention_steps(X, W_q, W_k, W_v, mask=None) -> AttentionSteps:
    """The five steps of scaled dot-product self-attention.

    Args:
        X: inputs ``(n, d)``.
        W_q, W_k: projections ``(d, d_k)``; W_v: ``(d, d_v)``.
        mask: optional bool ``(n, n)``, ``True`` = may attend.

    Returns:
        :class:`AttentionSteps` with Q, K, V, scores, scaled_scores, weights, output.
    """
    X, W_q, W_k, W_v = _require_steps_inputs(X, W_q, W_k, W_v)
    Q, K, V = X @ W_q, X @ W_k, X @ W_v  # step 1: (n, d) -> (n, d_k), (n, d_k), (n, d_v)
    scores = Q @ K.T  # step 2: (n, n), how well each query matches each key
    scaled = scores / np.sqrt(Q.shape[1])  # step 3: keep the variance at 1 whatever d_k
    if mask is not None:
        scaled = np.where(_require_steps_mask(mask, scaled.shape), scaled, -np.inf)
    weights = softmax_np(scaled, axis=-1)  # step 4: each row sums to 1
    output = weights @ V  # step 5: (n, d_v), a weighted average of the values
    return AttentionSteps(Q, K, V, scores, scaled, weights, output)


def _require_steps_inputs(X, W_q, W_k, W_v) -> list[np.ndarray]:
    """:func:`attention_steps`' inputs as float64 arrays: ``X (n, d)``, ``W_q, W_k (d, d_k)``,
    ``W_v (d, d_v)``."""
    arrays = []
    for name, a in (("X", X), ("W_q", W_q), ("W_k", W_k), ("W_v", W_v)):
        require_real(a, name)
        try:
            arrays.append(np.asarray(a, dtype=np.float64))
        except (TypeError, ValueError):
            raise TypeError(
                f"{name} must be a numeric array, got {type(a).__name__} {a!r:.60}"
            ) from None
    X, W_q, W_k, W_v = arrays
    if X.ndim != 2:
        raise ValueError(f"X must have shape (n, d), got {X.shape}")
    d = X.shape[1]
    for name, W in (("W_q", W_q), ("W_k", W_k), ("W_v", W_v)):
        if W.ndim != 2 or W.shape[0] != d:
            raise ValueError(f"{name} must have shape (d={d}, ·), got {W.shape}")
    if W_q.shape[1] != W_k.shape[1]:
        raise ValueError(f"W_q and W_k must give the same d_k, got {W_q.shape} and {W_k.shape}")
    return [X, W_q, W_k, W_v]


def _require_steps_mask(mask, shape: tuple[int, ...]) -> np.ndarray:
    """:func:`attention_steps`' mask: a bool array of the scores' ``shape`` (n, n)."""
    mask = np.asarray(mask)
    if mask.dtype != bool or mask.shape != shape:
        raise ValueError(
            f"mask must be a bool array of shape {shape}, got {mask.dtype} {mask.shape}"
        )
    return mask
