"""Chapter 6's explorer: sinusoidal encodings and how a score varies with distance.

For ``n`` positions, ``d`` dimensions and a ``base``, the left panel is the sinusoidal
encoding ``PE`` ``(n, d)`` as a heatmap; the right panel plots, against the distance
``k``, three curves of the same family:

* ``PE[p] . PE[p + k] / (d/2)``, the dot product of two sinusoidal encodings ``k`` apart,
  which is ``mean_i cos(k omega_i)`` whatever ``p`` is;
* RoPE's ``<R_p q, R_{p+k} q> / |q|^2`` for a query equal to its key with equal weight
  on every pair (``q`` all ones): the very same curve;
* RoPE's ``<R_p q, R_{p+k} k> / (|q| |k|)`` for one random ``q``, ``k`` (fixed seed): the
  relative-position property holds, but the curve is not a smooth decay.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .._checks import require_even, require_int
from ..positional import apply_rope, sinusoidal_encoding
from ._explorer import figure_rows

__all__ = [
    "BASES",
    "distance_curves",
    "plot_encodings",
    "plot_encodings_grid",
    "explorer",
    "plot_live_vs_recorded",
]

#: The bases the explorer's slider offers (10000 is the paper's).
BASES: tuple[float, ...] = (10.0, 100.0, 1000.0, 10000.0, 100000.0)
EXPLORER_NS: tuple[int, ...] = (16, 64, 256)  #: the explorer's numbers of positions
EXPLORER_DS: tuple[int, ...] = (16, 64, 128)  #: the explorer's dimensions


def _check(n: int, d: int, base: float) -> None:
    require_int(n, "n", 2, 512)
    require_int(d, "d", 2, 512)
    require_even(d, "d")
    if not base > 1:
        raise ValueError(f"base must be > 1, got {base!r}")


def distance_curves(
    n: int, d: int, base: float = 10000.0, *, seed: int = 0
) -> dict[str, np.ndarray]:
    """The three curves of the right panel, each ``(n,)`` for distances ``k = 0 .. n-1``.

    Keys: ``"sinusoidal PE . PE"``, ``"RoPE, q = k = ones"``, ``"RoPE, random q, k"``.
    """
    _check(n, d, base)
    pe = sinusoidal_encoding(n, d, base=base, dtype=torch.float64)
    dots = (pe[0] * pe).sum(-1) / (d / 2)  # position 0 against k; any start gives the same curve
    k_pos = torch.arange(n)
    ones = torch.ones(1, d, dtype=torch.float64)
    rope_ones = (
        apply_rope(ones, [0], base=base) * apply_rope(ones.expand(n, d), k_pos, base=base)
    ).sum(-1) / d
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 1, d, generator=g, dtype=torch.float64)
    rope_rand = (apply_rope(q, [0], base=base) * apply_rope(k.expand(n, d), k_pos, base=base)).sum(
        -1
    )
    rope_rand = rope_rand / (q.norm() * k.norm())
    return {
        "sinusoidal PE . PE": dots.numpy(),
        "RoPE, q = k = ones": rope_ones.numpy(),
        "RoPE, random q, k": rope_rand.numpy(),
    }


def plot_encodings(n: int = 64, d: int = 64, base: float = 10000.0, *, axes=None):
    """Heatmap of ``PE`` ``(n, d)`` and the distance curves of :func:`distance_curves`.

    Returns:
        The two matplotlib axes.
    """
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    ax_pe, ax_dist = axes
    pe = sinusoidal_encoding(n, d, base=base).numpy()
    image = ax_pe.imshow(
        pe, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest"
    )
    ax_pe.grid(False)
    ax_pe.set_xlabel("dimension (even: sin, odd: cos)")
    ax_pe.set_ylabel("position")
    ax_pe.set_title(f"Sinusoidal PE, n = {n}, d = {d}, base = {base:g}")
    ax_pe.figure.colorbar(image, ax=ax_pe, label="value")
    styles = {
        "sinusoidal PE . PE": ("tab:blue", "-"),
        "RoPE, q = k = ones": ("tab:orange", "--"),
        "RoPE, random q, k": ("tab:green", "-"),
    }
    for name, curve in distance_curves(n, d, base).items():
        color, ls = styles[name]
        ax_dist.plot(np.arange(n), curve, color=color, linestyle=ls, label=name, lw=1.5)
    ax_dist.axhline(0, color="gray", lw=0.8)
    ax_dist.set_ylim(-1.05, 1.05)
    ax_dist.set_xlabel("distance k (positions)")
    ax_dist.set_ylabel("normalised dot product")
    ax_dist.set_title("Similarity against distance")
    ax_dist.legend(loc="upper right", fontsize=8)
    return axes


def plot_encodings_grid(
    settings: Sequence[tuple[int, int, float]] = (
        (64, 64, 10000.0),
        (64, 64, 100.0),
        (64, 16, 10000.0),
    ),
):
    """The explorer's view for a few ``(n, d, base)`` settings, one row each (the static figure).

    Returns:
        The matplotlib figure.
    """
    return figure_rows(
        settings, lambda s, row: plot_encodings(*s, axes=row), ncols=2, row_size=(10, 3.3)
    )


def explorer(*, n: int = 64, d: int = 64, base: float = 10000.0):
    """The interactive view: positions ``n``, dimensions ``d`` and the base.

    Every view is drawn in advance over ``EXPLORER_NS`` x ``EXPLORER_DS`` x ``BASES``
    (3 x 3 x 5 = 45 views), so the controls also work on the static website.

    Returns:
        An ``ipywidgets.VBox``.
    """
    import matplotlib.pyplot as plt

    from ._explorer import Control, grid_explorer

    _check(n, d, base)
    if base not in BASES:
        raise ValueError(f"base must be one of {BASES}, got {base!r}")
    if n not in EXPLORER_NS or d not in EXPLORER_DS:
        raise ValueError(
            f"n must be one of {EXPLORER_NS} and d one of {EXPLORER_DS} (the explorer's grid), "
            f"got n={n!r}, d={d!r}"
        )

    def render(positions: int, dims: int, base: float):
        fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.4))
        plot_encodings(positions, dims, base, axes=axes)
        # Fixed margins instead of tight_layout: the same layout for all 45 views, drawn in
        # a third less time.
        fig.subplots_adjust(left=0.07, right=0.98, bottom=0.15, top=0.91, wspace=0.3)
        return fig

    def alt(positions: int, dims: int, base: float) -> str:
        return (
            f"Left, a heatmap of the sinusoidal encoding of {positions} positions in {dims} "
            f"dimensions with base {base:g}; right, how similar position encodings are "
            "as a function of their distance"
        )

    return grid_explorer(
        [
            Control("positions n", EXPLORER_NS, value=n),
            Control("dims d", EXPLORER_DS, value=d),
            Control("base", [(f"{b:g}", b) for b in BASES], value=base),
        ],
        render,
        alt=alt,
        colors=128,
    )


def plot_live_vs_recorded(
    recorded: dict[str, dict[str, Sequence[float]]],
    live: dict[str, dict[str, float]],
    *,
    columns: dict[str, str],
    title: str,
    ylabel: str = "accuracy",
):
    """The recorded seeds' range beside this run's seed 0, one panel per column.

    Args:
        recorded: ``{row label: {column key: values over the recorded seeds}}``; each row is
            drawn as its mean (a dot) and its lowest-to-highest range (a bar).
        live: ``{row label: {column key: value}}`` for the rows computed in this run (a
            subset of ``recorded``'s rows), drawn as a cross.
        columns: ``{column key: panel title}``.
        title: the figure's title.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    rows = list(recorded)
    fig, axes = plt.subplots(
        1, len(columns), figsize=(3.3 * len(columns), 0.45 * len(rows) + 1.4), sharey=True
    )
    axes = np.atleast_1d(axes)
    y = np.arange(len(rows))[::-1]
    for ax, (key, panel) in zip(axes, columns.items()):
        values = [np.asarray(recorded[r][key], dtype=float) for r in rows]
        means = np.array([v.mean() for v in values])
        low = means - np.array([v.min() for v in values])
        high = np.array([v.max() for v in values]) - means
        ax.errorbar(
            means,
            y,
            xerr=[low, high],
            fmt="o",
            color="tab:blue",
            capsize=3,
            label="recorded seeds: mean, range",
        )
        live_rows = [r for r in rows if r in live]
        ax.plot(
            [live[r][key] for r in live_rows],
            [y[rows.index(r)] for r in live_rows],
            "x",
            color="tab:red",
            ms=9,
            mew=2,
            label="seed 0, this run",
        )
        ax.set_xlim(-0.02, 1.02)
        ax.set_title(panel)
        ax.set_xlabel(ylabel)
    axes[0].set_yticks(y, rows)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.07, 1, 1))  # room for the legend below the panels
    return fig
