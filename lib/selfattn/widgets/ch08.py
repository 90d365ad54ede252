"""Chapter 8's explorer: a sparse attention pattern and what it can reach after L stacked layers.

Left, the mask of one layer (which keys each query may read); right, the receptive
field after ``layers`` layers (which inputs can influence each output), computed by
composing the mask with itself. A sliding window of ``w`` keys reaches ``w - 1``
positions further back per layer; the Sparse Transformer's strided pattern reaches
everything in two layers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..efficient.sparse import block_sparse_mask, receptive_field, strided_mask
from ..masks import sliding_window_mask
from ._explorer import figure_rows

__all__ = [
    "PATTERNS",
    "EXPLORER_NS",
    "EXPLORER_SIZES",
    "EXPLORER_LAYERS",
    "pattern_mask",
    "plot_pattern",
    "plot_explorer_grid",
    "explorer",
]

PATTERNS: tuple[str, ...] = ("sliding window", "strided", "block local + global")
EXPLORER_NS: tuple[int, ...] = (16, 32, 64)  #: the explorer's sequence lengths
EXPLORER_SIZES: tuple[int, ...] = (2, 4, 8)  #: its window / stride / block sizes
EXPLORER_LAYERS: tuple[int, ...] = (1, 2, 4)  #: its numbers of stacked layers


def pattern_mask(pattern: str, n: int, size: int) -> torch.Tensor:
    """The causal ``(n, n)`` bool mask of ``pattern`` with window / stride / block ``size``.

    ``"block local + global"``: each query block reads its own block and the one before
    (local) and block 0 (a global block), a typical block-sparse layout.
    """
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    if pattern == "sliding window":
        return sliding_window_mask(n, size)
    if pattern == "strided":
        return strided_mask(n, size)
    nb = math.ceil(n / size)
    i = torch.arange(nb)[:, None]
    j = torch.arange(nb)[None, :]
    layout = ((i - j >= 0) & (i - j <= 1)) | (j == 0)
    return block_sparse_mask(n, size, layout) & torch.ones(n, n, dtype=torch.bool).tril()


def plot_pattern(pattern: str, n: int = 32, size: int = 4, layers: int = 2, axes=None):
    """Two heatmaps: one layer's mask and the receptive field after ``layers`` layers.

    Returns:
        The two matplotlib axes.
    """
    import matplotlib.pyplot as plt

    mask = pattern_mask(pattern, n, size)
    reach = receptive_field(mask, layers)
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(8.0, 3.8))
    ax_m, ax_r = axes
    ax_m.imshow(mask.numpy(), cmap="gray", vmin=0, vmax=1)
    ax_m.set_title(
        f"{pattern} (size {size}): one layer\n{int(mask.sum())} of {n * (n + 1) // 2} causal pairs"
    )
    ax_r.imshow(reach.numpy(), cmap="magma", vmin=0, vmax=1)
    ax_r.set_title(
        f"reach after {layers} layer(s): last output sees\n{int(reach[-1].sum())} of {n} inputs"
    )
    for ax in axes:
        ax.grid(False)
        ax.set_xlabel("key / input position j")
        ax.set_ylabel("query / output position i")
    return axes


def plot_explorer_grid(
    patterns: Sequence[str] = PATTERNS, *, n: int = 32, size: int = 4, layers: int = 2
):
    """The explorer's view for each pattern, one row each (the static figure).

    Returns:
        The matplotlib figure.
    """
    title = f"Sparse patterns (n = {n}, size {size}): mask and reach after {layers} layers"
    draw = lambda pattern, row: plot_pattern(pattern, n, size, layers, axes=row)
    return figure_rows(patterns, draw, ncols=2, row_size=(8.0, 3.7), suptitle=title)


def explorer(*, pattern: str = "sliding window", n: int = 32, size: int = 4, layers: int = 1):
    """The interactive view: pattern, n, window / stride / block size and layers.

    Every view is drawn in advance over ``PATTERNS`` x ``EXPLORER_NS`` x ``EXPLORER_SIZES``
    x ``EXPLORER_LAYERS`` (3 x 3 x 3 x 3 = 81 views), so the controls also work on the
    static website.

    Returns:
        An ``ipywidgets.VBox``.
    """
    import matplotlib.pyplot as plt

    from ._explorer import Control, grid_explorer

    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    for name, value, grid in (
        ("n", n, EXPLORER_NS),
        ("size", size, EXPLORER_SIZES),
        ("layers", layers, EXPLORER_LAYERS),
    ):
        if value not in grid:
            raise ValueError(f"{name} must be one of {grid} (the explorer's grid), got {value!r}")

    def render(pattern: str, n: int, size: int, layers: int):
        fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.8))
        plot_pattern(pattern, n, size, layers, axes=axes)
        # The margins tight_layout finds for these panels (the same for every view), fixed:
        # measuring every tick label of the 81 views again costs a third of their time.
        fig.subplots_adjust(left=0.078, right=0.981, bottom=0.14, top=0.861, wspace=0.19)
        return fig

    def alt(pattern: str, n: int, size: int, layers: int) -> str:
        mask = pattern_mask(pattern, n, size)
        reach = receptive_field(mask, layers)
        return (
            f"Two heatmaps: the {pattern} mask of one layer ({int(mask.sum())} of "
            f"{n * (n + 1) // 2} causal pairs) and the reach after {layers} layer(s): "
            f"the last output sees {int(reach[-1].sum())} of {n} inputs"
        )

    return grid_explorer(
        [
            Control("pattern", PATTERNS, value=pattern, kind="dropdown"),
            Control("n", EXPLORER_NS, value=n),
            Control("size", EXPLORER_SIZES, value=size),
            Control("layers", EXPLORER_LAYERS, value=layers),
        ],
        render,
        alt=alt,
    )
