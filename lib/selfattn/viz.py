"""Plots shared by every chapter (the book's ``show_heatmaps``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._checks import require_bool, require_real

__all__ = ["plot_attention"]


def _to_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)


def plot_attention(
    weights,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
    *,
    colorbar: bool = True,
    annotate: bool | None = None,
):
    """Heatmap of attention weights: rows are queries, columns are keys.

    Args:
        weights: ``(n, m)`` array or tensor (a leading batch/head of size 1 is squeezed).
        x_labels: ``m`` key labels; y_labels: ``n`` query labels.
        ax: matplotlib axes to draw in (a new figure when ``None``).
        title: the plot title (defaults to "Attention weights").
        colorbar: draw a colour bar labelled "weight".
        annotate: print each weight in its cell (default: when the matrix is at most 10 x 10).

    Returns:
        The matplotlib axes.
    """
    colorbar = require_bool(colorbar, "colorbar")
    if annotate is not None:
        annotate = require_bool(annotate, "annotate")
    import matplotlib.pyplot as plt

    w = _to_numpy(require_real(weights, "weights"))
    while w.ndim > 2 and w.shape[0] == 1:
        w = w[0]
    if w.ndim != 2:
        raise ValueError(f"plot_attention needs weights of shape (n, m), got {w.shape}")
    n, m = w.shape
    for name, labels, size in (("x_labels", x_labels, m), ("y_labels", y_labels, n)):
        if labels is not None and len(labels) != size:
            raise ValueError(
                f"{name} has {len(labels)} entries, expected {size} for weights of shape {w.shape}"
            )
    if ax is None:
        _, ax = plt.subplots(figsize=(min(1.0 + 0.45 * m, 9), min(0.8 + 0.4 * n, 8)))
    image = ax.imshow(
        w,
        cmap="viridis",
        vmin=0.0,
        vmax=max(1e-12, float(np.nanmax(w))) if w.size else 1.0,
        aspect="auto",
    )
    ax.grid(False)
    ax.set_xlabel("key position" if x_labels is None else "key")
    ax.set_ylabel("query position" if y_labels is None else "query")
    ax.set_title(title or "Attention weights")
    if x_labels is not None:
        ax.set_xticks(range(m), labels=list(x_labels), rotation=45, ha="right")
    if y_labels is not None:
        ax.set_yticks(range(n), labels=list(y_labels))
    if annotate is None:
        annotate = n <= 10 and m <= 10
    if annotate:
        vmax = float(np.nanmax(w)) if w.size else 1.0
        for i in range(n):
            for j in range(m):
                ax.text(
                    j,
                    i,
                    f"{w[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="black" if w[i, j] > 0.6 * vmax else "white",
                )
    if colorbar:
        ax.figure.colorbar(image, ax=ax, label="weight")
    return ax
