"""Chapter 3's explorer: how d_k and the 1/sqrt(d_k) scale shape one query's attention weights.

One query and ``n_keys`` keys with independent N(0, 1) components are drawn once,
at the largest ``d_k``; a smaller ``d_k`` uses the first ``d_k`` components. So
moving the slider changes only the dimension, not the random draw, and the reader
sees the scores spread as ``sqrt(d_k)`` when the scale is off.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from .._checks import require_int
from ..attention import softmax

__all__ = [
    "D_K_CHOICES",
    "DRAWS",
    "QueryWeights",
    "query_weights",
    "plot_query_weights",
    "plot_explorer_grid",
    "explorer",
]

D_K_CHOICES: tuple[int, ...] = tuple(2**i for i in range(2, 11))  # 4, 8, ..., 1024
DRAWS: tuple[int, ...] = tuple(range(5))  #: the explorer's random draws


class QueryWeights(NamedTuple):
    """One query's attention over ``n_keys`` keys."""

    scores: np.ndarray  #: ``(n_keys,)`` the (scaled or unscaled) scores
    weights: np.ndarray  #: ``(n_keys,)`` softmax of the scores
    entropy: float  #: entropy of ``weights`` in nats (``log n_keys`` when uniform, 0 when one-hot)
    max_weight: float  #: the largest weight


def _draw(
    n_keys: int, seed: int, d_max: int = D_K_CHOICES[-1]
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(d_max, generator=g), torch.randn(n_keys, d_max, generator=g)


def query_weights(
    d_k: int, scaled: bool = True, *, n_keys: int = 16, seed: int = 0
) -> QueryWeights:
    """Weights of one random query over ``n_keys`` random keys in dimension ``d_k``.

    Args:
        d_k: dimension of query and keys, 1 to 1024.
        scaled: multiply the scores by ``1/sqrt(d_k)``.
        n_keys: number of keys ``m``.
        seed: the draw (the same for every ``d_k``: smaller ``d_k`` use a prefix of the
            components).

    Returns:
        :class:`QueryWeights` with ``(n_keys,)`` scores and weights, their entropy and maximum.
    """
    d_k = require_int(d_k, "d_k", 1, D_K_CHOICES[-1])
    if n_keys < 1:
        raise ValueError(f"n_keys must be >= 1, got {n_keys}")
    q, k = _draw(n_keys, seed)
    scores = (k[:, :d_k] @ q[:d_k]).double()
    if scaled:
        scores = scores / math.sqrt(d_k)
    w = softmax(scores)
    # 0 * log 0 = 0: weights that underflowed to exactly zero contribute nothing.
    entropy = -(w * torch.log(torch.where(w > 0, w, torch.ones_like(w)))).sum().item()
    return QueryWeights(scores.numpy(), w.numpy(), float(entropy), float(w.max()))


def plot_query_weights(d_k: int, scaled: bool = True, *, n_keys: int = 16, seed: int = 0, ax=None):
    """Bar chart of one query's weights over its keys, titled with ``d_k``, the entropy and
    the largest weight.

    Returns:
        The matplotlib axes.
    """
    import matplotlib.pyplot as plt

    r = query_weights(d_k, scaled, n_keys=n_keys, seed=seed)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 3.0))
    ax.bar(np.arange(n_keys), r.weights, color="tab:blue" if scaled else "tab:red")
    ax.set_ylim(0, 1.02)
    ax.set_xticks(range(0, n_keys, max(1, n_keys // 8)))
    ax.set_xlabel("key index j")
    ax.set_ylabel("weight α_j")
    label = "scaled by 1/√d_k" if scaled else "unscaled"
    ax.set_title(
        f"d_k = {d_k}, {label}\nentropy {r.entropy:.2f} nats"
        f" (max {math.log(n_keys):.2f}), max α {r.max_weight:.2f}"
    )
    return ax


def plot_explorer_grid(d_ks: Sequence[int] = (4, 64, 1024), *, n_keys: int = 16, seed: int = 0):
    """The explorer's view for a few ``d_k``: top row scaled, bottom row unscaled (the static
    figure).

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        2, len(d_ks), figsize=(3.6 * len(d_ks), 5.6), sharey=True, squeeze=False
    )
    for col, d_k in enumerate(d_ks):
        for row, scaled in enumerate((True, False)):
            plot_query_weights(d_k, scaled, n_keys=n_keys, seed=seed, ax=axes[row, col])
            if col:
                axes[row, col].set_ylabel("")
    fig.suptitle(f"One query's attention weights over {n_keys} keys (draw {seed}), growing d_k")
    fig.tight_layout()
    return fig


def explorer(
    *,
    n_keys: int = 16,
    seed: int = 0,
    d_k: int = 64,
    scaled: bool = True,
    d_ks: tuple[int, ...] = D_K_CHOICES,
):
    """The interactive view: a ``d_k`` slider (4 to 1024), a scale on/off switch and a
    "draw" slider that picks another random query and keys (draws 0 to 4).

    Every view is drawn in advance (9 x 2 x 5 = 90 with the default ``d_ks``), so the
    controls also work on the static website.

    Args:
        d_ks: the slider's values, some of ``D_K_CHOICES`` (fewer draw faster).

    Returns:
        An ``ipywidgets.VBox`` (display it, or leave it as a cell's last expression).
    """
    import matplotlib.pyplot as plt

    from ._explorer import Control, grid_explorer

    d_ks = tuple(d_ks)
    if not d_ks or any(x not in D_K_CHOICES for x in d_ks):
        raise ValueError(f"d_ks must be some of {D_K_CHOICES}, got {d_ks!r}")
    if d_k not in d_ks:
        raise ValueError(f"d_k must be one of {d_ks}, got {d_k!r}")
    if seed not in DRAWS:
        raise ValueError(
            f"seed must be from 0 to {DRAWS[-1]} (the draw slider's range), got {seed!r}"
        )

    def render(d_k: int, scale: bool, draw: int):
        fig, ax = plt.subplots(figsize=(5.0, 3.0))
        plot_query_weights(d_k, scale, n_keys=n_keys, seed=draw, ax=ax)
        fig.tight_layout()
        return fig

    def alt(d_k: int, scale: bool, draw: int) -> str:
        r = query_weights(d_k, scale, n_keys=n_keys, seed=draw)
        return (
            f"Bar chart of one query's attention weights over {n_keys} keys; "
            f"entropy {r.entropy:.2f} nats, largest weight {r.max_weight:.2f}"
        )

    return grid_explorer(
        [
            Control("d_k", d_ks, value=d_k),
            Control(
                "scale",
                [("by 1/√d_k", True), ("unscaled", False)],
                value=scaled,
                kind="toggle",
            ),
            Control("draw", DRAWS, value=seed),
        ],
        render,
        alt=alt,
    )
