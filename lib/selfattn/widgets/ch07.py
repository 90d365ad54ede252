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

__all__ = ["TileRun", "tile_run", "plot_tile_step", "plot_explorer_grid", "explorer"]


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
    ax_s.axhline(now["m"], color="tab:red", ls="--", label=f"running max μ = {now['m']:.2f}")
    ax_s.set_title(f"step {step}/{len(steps)}: keys {now['start']}..{now['stop'] - 1} (orange)")
    ax_s.set_xlabel("key j")
    ax_s.set_ylabel("score s_j")
    ax_s.legend(loc="lower left")

    ls = [s["l"] for s in steps[:step]]
    ax_l.bar(range(1, step + 1), ls, color="tab:green")
    ax_l.set_xlim(0.4, len(steps) + 0.6)
    ax_l.set_title(f"running sum ℓ = {now['l']:.3f}, α = {now['alpha']:.3f}")
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
    ax_o.set_title("output O / ℓ in the plane of the values")
    ax_o.set_xlabel("value component 1")
    ax_o.set_ylabel("value component 2")
    ax_o.legend(loc="best", fontsize=7)
    return axes


def plot_explorer_grid(
    steps: Sequence[int] = (1, 3, 4), *, n: int = 16, block: int = 4, seed: int = 0
):
    """The explorer's view after a few steps, one row each (the static figure).

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(steps), 3, figsize=(11.0, 3.3 * len(steps)), squeeze=False)
    for row, step in enumerate(steps):
        plot_tile_step(step, n, block, seed, axes=axes[row])
    fig.suptitle(f"Online softmax over {n} keys in blocks of {block}: μ, ℓ and O / ℓ")
    fig.tight_layout()
    return fig


def explorer(*, n: int = 16, block: int = 4, seed: int = 0):
    """The interactive view: the step, the number of keys n (4 to 32), the block size and the seed.

    Returns:
        An ``ipywidgets.VBox``.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    n_w = widgets.IntSlider(value=n, min=4, max=32, description="keys n")
    block_w = widgets.IntSlider(value=block, min=1, max=16, description="block")
    seed_w = widgets.IntSlider(value=seed, min=0, max=20, description="seed")
    step_w = widgets.IntSlider(value=1, min=1, max=-(-n // block), description="step")
    out = widgets.Output()

    def on_change(_change=None) -> None:
        step_w.max = -(-n_w.value // block_w.value)
        with out:
            out.clear_output(wait=True)
            fig, axes = plt.subplots(1, 3, figsize=(11.0, 3.4))
            plot_tile_step(
                min(step_w.value, step_w.max), n_w.value, block_w.value, seed_w.value, axes=axes
            )
            fig.tight_layout()
            display(fig)
            plt.close(fig)

    for control in (n_w, block_w, seed_w, step_w):
        control.observe(on_change, names="value")
    on_change()
    return widgets.VBox([widgets.HBox([step_w, block_w]), widgets.HBox([n_w, seed_w]), out])
