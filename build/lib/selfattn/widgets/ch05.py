"""Chapter 5's explorer: pick a head and a query token, see where that head looks.

The explorer takes attention weights that were already computed (``(h, n, n)`` for one
sequence, e.g. from :class:`~selfattn.models.heads.LookupHeadsModel`) and the sequence's token
labels, so it needs no model and redraws instantly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["head_token_weights", "plot_head_token", "plot_explorer_grid", "explorer"]


def _as_weights(weights) -> np.ndarray:
    w = (
        weights.detach().cpu().double().numpy()
        if isinstance(weights, torch.Tensor)
        else np.asarray(weights, dtype=float)
    )
    if w.ndim != 3 or w.shape[1] != w.shape[2]:
        raise ValueError(f"weights must have shape (h, n, n) for one sequence, got {w.shape}")
    return w


def head_token_weights(weights, head: int, query: int) -> np.ndarray:
    """Row ``query`` of head ``head``: that query's weights over the ``n`` keys, ``(n,)``."""
    w = _as_weights(weights)
    h, n, _ = w.shape
    if not 0 <= head < h or not 0 <= query < n:
        raise ValueError(
            f"head must be in 0..{h - 1} and query in 0..{n - 1}, got head={head}, query={query}"
        )
    return w[head, query]


def plot_head_token(weights, tokens: Sequence[str], head: int, query: int, ax=None):
    """Bar chart of one head's attention from one query over the keys (``position:token``).

    Returns:
        The matplotlib axes.
    """
    import matplotlib.pyplot as plt

    row = head_token_weights(weights, head, query)
    n = row.shape[0]
    if len(tokens) != n:
        raise ValueError(f"tokens has {len(tokens)} labels, expected n={n}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 2.8))
    ax.bar(np.arange(n), row, color="tab:blue")
    # Mark the query's own position (its bar is often empty, so colour alone would not show it).
    ax.axvline(query, color="tab:orange", linestyle=":", linewidth=2)
    ax.set_xticks(
        range(n),
        labels=[f"{j}:{t}" for j, t in enumerate(tokens)],
        rotation=45,
        ha="right",
        fontsize=8,
    )
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("key (position:token); dotted orange line = the query's own position")
    ax.set_ylabel("weight")
    ax.set_title(
        f"head {head}, query {query} ({tokens[query]}): largest weight on key {int(row.argmax())}"
    )
    return ax


def plot_explorer_grid(weights, tokens: Sequence[str], query: int):
    """Every head's attention for one query, one panel per head (the static figure).

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    h = _as_weights(weights).shape[0]
    fig, axes = plt.subplots(1, h, figsize=(5.2 * h, 3.2), squeeze=False)
    for head in range(h):
        plot_head_token(weights, tokens, head, query, ax=axes[0, head])
    fig.suptitle(f"Where each head looks from query position {query}")
    fig.tight_layout()
    return fig


def explorer(weights, tokens: Sequence[str], *, head: int = 0, query: int | None = None):
    """The interactive view: a head selector and a query-position slider.

    Every view (``h x n``) is drawn in advance, so the controls also work on the static
    website.

    Args:
        weights: ``(h, n, n)`` attention weights of one sequence.
        tokens: the ``n`` token labels.

    Returns:
        An ``ipywidgets.VBox``.
    """
    import matplotlib.pyplot as plt

    from ._explorer import Control, grid_explorer

    w = _as_weights(weights)
    h, n, _ = w.shape
    query = n - 1 if query is None else query
    head_token_weights(w, head, query)  # validates both
    if len(tokens) != n:
        raise ValueError(f"tokens has {len(tokens)} labels, expected n={n}")

    def render(head: int, query: int):
        fig, ax = plt.subplots(figsize=(6.0, 2.8))
        plot_head_token(w, tokens, head, query, ax=ax)
        fig.tight_layout()
        return fig

    def alt(head: int, query: int) -> str:
        row = head_token_weights(w, head, query)
        top = int(row.argmax())
        return (
            f"Bar chart of head {head}'s attention from query {query} ({tokens[query]}) "
            f"over the {n} keys; largest weight {row[top]:.2f} on key {top} ({tokens[top]})"
        )

    return grid_explorer(
        [
            Control("head", list(range(h)), value=head, kind="toggle"),
            Control("query", [(f"{j}:{t}", j) for j, t in enumerate(tokens)], value=query),
        ],
        render,
        alt=alt,
    )
