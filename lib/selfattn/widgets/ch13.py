"""Chapter 13's explorer: what a linear-attention state and a delta-rule state read back.

``p`` pairs ``(k_i, v_i)`` with random unit keys in ``d_k = 8`` dimensions are written one
after the other; then each key is read back, ``S^T k_i``. The bars show each pair's error
``|S^T k_i - v_i|`` (relative to ``|v_i|``). Linear attention adds every write, so every
read also returns a mix of the other values; the delta rule with ``beta = 1`` makes the
newest write exact, and at most ``d_k`` pairs can all be exact. ``beta`` scales every write
(for linear attention too, where it only scales the state).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..efficient.delta_rule import delta_rule
from ._explorer import figure_rows

__all__ = [
    "RULES",
    "EXPLORER_PAIRS",
    "EXPLORER_BETAS",
    "readback_errors",
    "plot_readback",
    "plot_explorer_grid",
    "explorer",
]

RULES: tuple[str, ...] = ("linear attention", "delta rule")
EXPLORER_PAIRS: tuple[int, ...] = (4, 8, 16)  #: pairs written
EXPLORER_BETAS: tuple[float, ...] = (0.5, 1.0)  #: the delta rule's write strength
D_K = 8


def readback_errors(rule: str, pairs: int, beta: float = 1.0, seed: int = 0) -> torch.Tensor:
    """``(pairs,)`` relative errors ``|S^T k_i - v_i| / |v_i|`` after writing every pair."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    g = torch.Generator().manual_seed(seed)
    k = torch.nn.functional.normalize(
        torch.randn(pairs, D_K, generator=g, dtype=torch.float64), dim=-1
    )
    v = torch.randn(pairs, 4, generator=g, dtype=torch.float64)
    if rule == "linear attention":
        state = beta * k.T @ v  # every write added, scaled by the same strength
    else:
        b = torch.full((1, 1, pairs), float(beta), dtype=torch.float64)
        _, state = delta_rule(
            k[None, None], k[None, None], v[None, None], b, scale=1.0, output_final_state=True
        )
        state = state[0, 0]
    return (k @ state - v).norm(dim=-1) / v.norm(dim=-1)


def plot_readback(rule: str, pairs: int = 8, beta: float = 1.0, ax=None):
    """Bars of each pair's read-back error, oldest write on the left. Returns the axes."""
    import matplotlib.pyplot as plt

    err = readback_errors(rule, pairs, beta)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 3.0))
    ax.bar(range(1, pairs + 1), err.numpy(), color="#5b8fc7")
    what = f"{rule}, beta = {beta:g}"
    ax.set_title(f"{what}: {pairs} pairs in d_k = {D_K}\nmean error {float(err.mean()):.2f}")
    ax.set_xlabel("pair i (written i-th)")
    ax.set_ylabel("|S^T k_i - v_i| / |v_i|")
    ax.set_ylim(0, 3)
    return ax


def plot_explorer_grid(rules: Sequence[str] = RULES, *, pairs: int = 8, beta: float = 1.0):
    """The explorer's view for each rule, one row each (the static figure)."""
    draw = lambda rule, row: plot_readback(rule, pairs, beta, ax=row[0])  # noqa: E731
    title = f"Reading back {pairs} pairs from the state"
    return figure_rows(rules, draw, ncols=1, row_size=(6.0, 3.0), suptitle=title)


def explorer(*, rule: str = "delta rule", pairs: int = 8, beta: float = 1.0):
    """The interactive view: rule, pairs and beta (3 x 2 x 2 = 12 precomputed views)."""
    import matplotlib.pyplot as plt

    from ._explorer import Control, grid_explorer

    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if pairs not in EXPLORER_PAIRS:
        raise ValueError(f"pairs must be one of {EXPLORER_PAIRS}, got {pairs!r}")
    if beta not in EXPLORER_BETAS:
        raise ValueError(f"beta must be one of {EXPLORER_BETAS}, got {beta!r}")

    def render(rule, pairs, beta):
        fig, ax = plt.subplots(figsize=(6.0, 3.0), layout="constrained")
        plot_readback(rule, pairs, beta, ax=ax)
        return fig

    def alt(rule, pairs, beta):
        err = readback_errors(rule, pairs, beta)
        return (
            f"Bars of the read-back error of each of {pairs} pairs for {rule}; mean "
            f"{float(err.mean()):.2f}, newest pair {float(err[-1]):.2f}"
        )

    return grid_explorer(
        [
            Control("rule", RULES, value=rule, kind="dropdown"),
            Control("pairs", EXPLORER_PAIRS, value=pairs),
            Control("beta", EXPLORER_BETAS, value=beta),
        ],
        render,
        alt=alt,
    )
