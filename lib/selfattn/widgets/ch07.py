"""Chapter 7's explorer: step through the key blocks of the online softmax; watch mu, l and O.

One query attends to ``n`` keys with 2-D values (so the output is a point in the plane).
The keys are processed ``block`` at a time, as FlashAttention's inner loop does. After
each step the view shows the scores seen so far and the running max ``mu``, the running
sum ``l`` (and the rescale factor ``alpha`` that just shrank it), and the normalised
output ``O / l``: exact softmax attention over the keys seen so far, walking towards
the final output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from ..efficient.flash import online_softmax_steps
from ._explorer import figure_rows

__all__ = [
    "EXPLORER_BLOCKS",
    "EXPLORER_SEEDS",
    "TileRun",
    "tile_run",
    "plot_tile_step",
    "plot_explorer_grid",
    "explorer",
]

EXPLORER_BLOCKS: tuple[int, ...] = (2, 4, 8)  #: the explorer's block sizes
EXPLORER_SEEDS: tuple[int, ...] = (0, 1, 2)  #: the explorer's random draws


class TileRun(NamedTuple):
    """One query's scores, its values and the online-softmax state after every block."""

    scores: torch.Tensor  #: ``(n,)`` scaled scores of the query against each key
    values: torch.Tensor  #: ``(n, 2)`` values
    steps: list  #: one dict per block (see ``online_softmax_steps``)
    exact: torch.Tensor  #: ``(2,)`` softmax attention over all keys


def tile_run(n: int = 16, block: int = 4, seed: int = 0) -> TileRun:
    """Random scores (with a late jump, so the max changes) and 2-D values, run block by block."""
    if n < 1 or block < 1:
        raise ValueError(f"tile_run needs n >= 1 and block >= 1, got n={n}, block={block}")
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(n, generator=g, dtype=torch.float64) * 1.5
    scores[(2 * n) // 3] += 3.0  # a late, large score: the running max has to move
    values = torch.randn(n, 2, generator=g, dtype=torch.float64)
    exact = torch.softmax(scores, 0) @ values
    return TileRun(scores, values, online_softmax_steps(scores, values, block), exact)


def plot_tile_step(step: int, n: int = 16, block: int = 4, seed: int = 0, axes=None):
    """Three panels after ``step`` blocks (1-based): scores and mu; l per step; O / l in the plane.

    Returns:
        The three matplotlib axes.
    """
    import matplotlib.pyplot as plt

    run = tile_run(n, block, seed)
    steps = run.steps
    if not 1 <= step <= len(steps):
        raise ValueError(f"step must be in 1..{len(steps)} for n={n}, block={block}, got {step}")
    now = steps[step - 1]
    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(11.0, 3.4))
    ax_s, ax_l, ax_o = axes
    colours = [
        "tab:blue" if j < now["start"] else "tab:orange" if j < now["stop"] else "lightgray"
        for j in range(n)
    ]
    ax_s.bar(range(n), run.scores.numpy(), color=colours)
    ax_s.axhline(now["mu"], color="tab:red", ls="--", label=f"running max μ = {now['mu']:.2f}")
    ax_s.set_title(f"step {step}/{len(steps)}: keys {now['start']}..{now['stop'] - 1} (orange)")
    ax_s.set_xlabel("key j")
    ax_s.set_ylabel("score s_j")
    ax_s.legend(loc="lower left")

    ls = [s["ell"] for s in steps[:step]]
    ax_l.bar(range(1, step + 1), ls, color="tab:green")
    ax_l.set_xlim(0.4, len(steps) + 0.6)
    ax_l.set_title(f"running sum ℓ = {now['ell']:.3f}, α = {now['alpha']:.3f}")
    ax_l.set_xlabel("step (key block)")
    ax_l.set_ylabel("ℓ = sum exp(s_j - μ)")

    v = run.values.numpy()
    ax_o.scatter(v[:, 0], v[:, 1], c="lightgray", s=18, label="values v_j")
    seen = v[: now["stop"]]
    ax_o.scatter(seen[:, 0], seen[:, 1], c="tab:blue", s=18)
    path = torch.stack([s["out"] for s in steps[:step]]).numpy()
    ax_o.plot(
        path[:, 0], path[:, 1], "-o", color="tab:orange", ms=4, label="O / ℓ after each step"
    )
    ax_o.scatter(
        [run.exact[0]],
        [run.exact[1]],
        marker="*",
        s=160,
        c="tab:red",
        label="softmax attention (all keys)",
    )
    ax_o.legend(loc="best", fontsize=7)
    ax_o.set_title("output O / ℓ in the plane of the values")
    ax_o.set_xlabel("value component 1")
    ax_o.set_ylabel("value component 2")
    return axes


def plot_explorer_grid(
    steps: Sequence[int] = (1, 3, 4), *, n: int = 16, block: int = 4, seed: int = 0
):
    """The explorer's view after a few steps, one row each (the static figure).

    Returns:
        The matplotlib figure.
    """
    title = f"Online softmax over {n} keys in blocks of {block}: μ, ℓ and O / ℓ"
    draw = lambda step, row: plot_tile_step(step, n, block, seed, axes=row)
    return figure_rows(steps, draw, ncols=3, row_size=(11.0, 3.3), suptitle=title)


def explorer(*, n: int = 16, block: int = 4, seed: int = 0):
    """The interactive view: the block size, the seed and the step, over ``n`` keys.

    Every view is drawn in advance over ``EXPLORER_BLOCKS`` x ``EXPLORER_SEEDS`` x the steps
    ``1 .. ceil(n / min(EXPLORER_BLOCKS))`` (3 x 3 x 8 = 72 views for ``n = 16``), so the
    controls also work on the static website. A step past the last one of a larger block
    shows the last step, and its view says so.

    Returns:
        An ``ipywidgets.VBox``.
    """
    import matplotlib.pyplot as plt

    from ._explorer import Control, grid_explorer

    if not 4 <= n <= 32:
        raise ValueError(f"n must be from 4 to 32, got {n!r}")
    if block not in EXPLORER_BLOCKS or seed not in EXPLORER_SEEDS:
        raise ValueError(
            f"block must be one of {EXPLORER_BLOCKS} and seed one of {EXPLORER_SEEDS} "
            f"(the explorer's grid), got block={block!r}, seed={seed!r}"
        )
    max_steps = -(-n // min(EXPLORER_BLOCKS))

    def last(block: int, step: int) -> int:
        return min(step, -(-n // block))

    def render(block: int, seed: int, step: int):
        fig, axes = plt.subplots(1, 3, figsize=(11.0, 3.4))
        plot_tile_step(last(block, step), n, block, seed, axes=axes)
        # The margins tight_layout finds for these panels, fixed: it would measure every
        # tick label of each of the dozens of views again, a third of the explorer's time.
        fig.subplots_adjust(left=0.06, right=0.986, bottom=0.172, top=0.893, wspace=0.28)
        return fig

    def alt(block: int, seed: int, step: int) -> str:
        shown = last(block, step)
        steps = -(-n // block)
        note = "" if shown == step else f" (there are only {steps} steps: the last one shown)"
        return (
            f"Online softmax over {n} keys in blocks of {block}, after step {shown} of "
            f"{steps}{note}: the scores and running max, the running sum per step, and the "
            "output walking towards softmax attention"
        )

    return grid_explorer(
        [
            Control("block", EXPLORER_BLOCKS, value=block, kind="toggle"),
            Control("seed", EXPLORER_SEEDS, value=seed, kind="toggle"),
            Control("step", list(range(1, max_steps + 1)), value=1),
        ],
        render,
        alt=alt,
        view_key=lambda block, seed, step: (block, seed, last(block, step)),
    )
