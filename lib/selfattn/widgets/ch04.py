"""Chapter 4's explorer: a mask and the attention weights it produces, side by side.

One random set of queries and keys is drawn per (n, seed); the mask type, the padded
length and the window then change only the mask, so the reader sees which weights a
mask removes and how the remaining ones renormalise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from ..attention import scaled_dot_product_attention
from ..masks import causal_mask, padding_mask, sliding_window_mask
from ._explorer import figure_rows

__all__ = [
    "MASK_KINDS",
    "EXPLORER_NS",
    "EXPLORER_LENGTHS",
    "EXPLORER_WINDOWS",
    "MaskView",
    "mask_for",
    "mask_view",
    "plot_mask_view",
    "plot_explorer_grid",
    "explorer",
]

MASK_KINDS: tuple[str, ...] = ("none", "causal", "padding", "padding + causal", "sliding window")
EXPLORER_NS: tuple[int, ...] = (4, 8, 16)  #: the explorer's sequence lengths
EXPLORER_LENGTHS: tuple[int, ...] = (2, 5, 8)  #: its real lengths (padding kinds)
EXPLORER_WINDOWS: tuple[int, ...] = (1, 3, 5)  #: its window sizes (sliding window)


class MaskView(NamedTuple):
    """A mask and the weights of one head under it."""

    mask: torch.Tensor  #: ``(n, n)`` bool, True = may attend
    weights: (
        torch.Tensor
    )  #: ``(n, n)`` attention weights (rows of masked-out queries are whatever the mask leaves)


def mask_for(kind: str, n: int, *, length: int | None = None, window: int = 3) -> torch.Tensor:
    """The ``(n, n)`` bool mask of one sequence for ``kind`` (one of ``MASK_KINDS``).

    ``length`` is the real length for the padding kinds (positions ``>= length`` are padding;
    default ``n``); ``window`` the sliding window's size.
    """
    if kind not in MASK_KINDS:
        raise ValueError(f"kind must be one of {MASK_KINDS}, got {kind!r}")
    length = n if length is None else length
    if kind == "none":
        return torch.ones(n, n, dtype=torch.bool)
    if kind == "causal":
        return causal_mask(n)
    if kind == "sliding window":
        return sliding_window_mask(n, window)
    pad = padding_mask([length], n)[0].expand(n, n)  # (n, n): every query, the same real keys
    return pad & causal_mask(n) if kind == "padding + causal" else pad


def mask_view(
    kind: str, n: int = 8, *, length: int | None = None, window: int = 3, seed: int = 0
) -> MaskView:
    """The mask for ``kind`` and single-head weights ``softmax(q k^T / sqrt(d) + mask)``.

    The queries and keys are random, ``(n, 8)``, drawn from ``seed``.
    """
    mask = mask_for(kind, n, length=length, window=window)
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(n, 8, generator=g), torch.randn(n, 8, generator=g)
    _, w = scaled_dot_product_attention(q, k, k, mask, return_weights=True)
    return MaskView(mask, w)


def _title(kind: str, n: int, length: int | None, window: int) -> str:
    if "padding" in kind:
        return f"{kind} (n={n}, length {n if length is None else length})"
    if kind == "sliding window":
        return f"sliding window (n={n}, window {window})"
    return f"{kind} (n={n})"


def plot_mask_view(
    kind: str, n: int = 8, *, length: int | None = None, window: int = 3, seed: int = 0, axes=None
):
    """Two heatmaps: the mask (white = may attend) and the weights it gives.

    Returns:
        The two matplotlib axes.
    """
    import matplotlib.pyplot as plt

    view = mask_view(kind, n, length=length, window=window, seed=seed)
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(8.0, 3.6))
    ax_m, ax_w = axes
    ax_m.imshow(view.mask.numpy(), cmap="gray", vmin=0, vmax=1)
    ax_m.set_title(f"mask: {_title(kind, n, length, window)}\nwhite = may attend")
    image = ax_w.imshow(view.weights.numpy(), cmap="viridis", vmin=0, vmax=1)
    ax_w.set_title("attention weights under it")
    ax_w.figure.colorbar(image, ax=ax_w, label="weight")
    for ax in axes:
        ax.grid(False)
        ax.set_xlabel("key position j")
        ax.set_ylabel("query position i")
    return axes


def plot_explorer_grid(
    kinds: Sequence[str] = ("causal", "padding + causal", "sliding window"),
    *,
    n: int = 8,
    length: int = 5,
    window: int = 3,
    seed: int = 0,
):
    """The explorer's view for a few mask kinds, one row each (the static figure).

    Returns:
        The matplotlib figure.
    """
    title = "Masks (left) and the attention weights they leave (right)"
    draw = lambda kind, row: plot_mask_view(
        kind, n, length=length, window=window, seed=seed, axes=row
    )
    return figure_rows(kinds, draw, ncols=2, row_size=(8.0, 3.4), suptitle=title)


def explorer(*, kind: str = "causal", n: int = 8, length: int = 5, window: int = 3, seed: int = 0):
    """The interactive view: mask type, length n (4, 8 or 16), real length (padding) and window.

    Every view is drawn in advance over ``MASK_KINDS`` x ``EXPLORER_NS`` x ``EXPLORER_LENGTHS``
    x ``EXPLORER_WINDOWS`` (5 x 3 x 3 x 3 = 135 views), so the controls also work on the
    static website. A real length above ``n`` is drawn as ``n`` (no padding), and its view
    says so; the real length matters only to the padding kinds, the window only to the
    sliding window, and each view's alt text says which values it uses.

    Returns:
        An ``ipywidgets.VBox``.
    """
    import matplotlib.pyplot as plt

    from ._explorer import Control, grid_explorer

    if kind not in MASK_KINDS:
        raise ValueError(f"kind must be one of {MASK_KINDS}, got {kind!r}")
    for name, value, grid in (
        ("n", n, EXPLORER_NS),
        ("length", length, EXPLORER_LENGTHS),
        ("window", window, EXPLORER_WINDOWS),
    ):
        if value not in grid:
            raise ValueError(f"{name} must be one of {grid} (the explorer's grid), got {value!r}")

    def render(mask: str, n: int, real_length: int, window: int):
        fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.6))
        plot_mask_view(mask, n, length=min(real_length, n), window=window, seed=seed, axes=axes)
        fig.tight_layout()
        return fig

    def alt(mask: str, n: int, real_length: int, window: int) -> str:
        used = _title(mask, n, min(real_length, n), window)
        return (
            "Two heatmaps: the mask (white = may attend) and the attention weights it "
            f"leaves, for the mask {used}"
        )

    return grid_explorer(
        [
            Control("mask", MASK_KINDS, value=kind, kind="dropdown"),
            Control("n", EXPLORER_NS, value=n),
            Control("real length", EXPLORER_LENGTHS, value=length),
            Control("window", EXPLORER_WINDOWS, value=window),
        ],
        render,
        alt=alt,
        view_key=lambda mask, n, real_length, window: (
            mask,
            n,
            min(real_length, n) if "padding" in mask else None,
            window if mask == "sliding window" else None,
        ),
    )
