"""Chapter 12's explorer: a mask, the tiles its BlockMask computes, and what that saves.

Left, the token mask of a pattern (which keys each query may read); right, its
``block x block`` tiles: full (every pair visible), partial (computed, then masked) and
skipped (no visible pair). The title gives the fraction of tiles computed, the fraction of
the work a compiled FlexAttention kernel does against dense attention. Drawn from the dense
masks (no FlexAttention needed): :func:`tile_kinds` classifies the tiles as torch's
``create_block_mask`` does.
"""

from __future__ import annotations

import math

import torch

from ..efficient.sparse import bigbird_layout, block_sparse_mask
from ..masks import causal_mask, sliding_window_mask
from ._explorer import figure_rows

__all__ = [
    "PATTERNS",
    "EXPLORER_BLOCKS",
    "EXPLORER_N",
    "pattern_mask",
    "tile_kinds",
    "plot_tiles",
    "plot_explorer_grid",
    "explorer",
]

PATTERNS: tuple[str, ...] = ("causal", "sliding window", "BigBird", "documents")
EXPLORER_BLOCKS: tuple[int, ...] = (4, 8, 16)  #: the explorer's tile sizes
EXPLORER_N = 64  #: the explorer's sequence length


def pattern_mask(pattern: str, n: int = EXPLORER_N) -> torch.Tensor:
    """The ``(n, n)`` bool mask of ``pattern``: causal; a causal window of ``n // 8``;
    BigBird's blocks of ``n // 8`` (3 window, 1 global, 1 random, seed 0); four packed
    documents of ``n // 8``, ``3n // 8``, ``n // 4`` and ``n // 4`` tokens, causal inside."""
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    if pattern == "causal":
        return causal_mask(n)
    if pattern == "sliding window":
        return sliding_window_mask(n, max(n // 8, 1))
    if pattern == "BigBird":
        block = max(n // 8, 1)
        g = torch.Generator().manual_seed(0)
        return block_sparse_mask(n, block, bigbird_layout(math.ceil(n / block), generator=g))
    sizes = [n // 8, 3 * n // 8, n // 4, n - n // 8 - 3 * n // 8 - n // 4]
    doc = torch.repeat_interleave(torch.arange(4), torch.tensor(sizes))
    return (doc[:, None] == doc[None, :]) & causal_mask(n)


def tile_kinds(mask: torch.Tensor, block: int) -> torch.Tensor:
    """Each ``block x block`` tile of a bool ``(n, m)`` mask: 2 full, 1 partial, 0 skipped.

    A tile past the end (``n`` not a multiple of ``block``) counts only its real entries.
    """
    n, m = mask.shape
    nb, mb = math.ceil(n / block), math.ceil(m / block)
    kinds = torch.zeros(nb, mb, dtype=torch.long)
    for a in range(nb):
        for b in range(mb):
            tile = mask[a * block : (a + 1) * block, b * block : (b + 1) * block]
            kinds[a, b] = 2 if bool(tile.all()) else int(bool(tile.any()))
    return kinds


def plot_tiles(pattern: str, block: int, n: int = EXPLORER_N, axes=None):
    """Two panels: ``pattern``'s mask and its tiles of ``block`` (full, partial, skipped).

    Returns:
        The two matplotlib axes.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    mask = pattern_mask(pattern, n)
    kinds = tile_kinds(mask, block)
    computed = float((kinds > 0).float().mean())
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(8.0, 3.8))
    ax_m, ax_t = axes
    ax_m.imshow(mask.numpy(), cmap="Blues", vmin=0, vmax=1.3)
    ax_m.set_title(f"{pattern}: {float(mask.float().mean()):.0%} of pairs visible")
    cmap = ListedColormap(["#e4e4e4", "#a9c6e8", "#2f6aa8"])
    ax_t.imshow(kinds.numpy(), cmap=cmap, vmin=0, vmax=2)
    ax_t.set_title(f"tiles of {block}: {computed:.0%} computed\n(dark full, light partial)")
    ax_m.set_xlabel("key position j")
    ax_t.set_xlabel("key tile")
    ax_m.set_ylabel("query position i")
    ax_t.set_ylabel("query tile")
    for ax in axes:
        ax.grid(False)
    return axes


def plot_explorer_grid(patterns=PATTERNS, *, block: int = 8, n: int = EXPLORER_N):
    """The explorer's view for each pattern, one row each (the static figure).

    Returns:
        The matplotlib figure.
    """
    draw = lambda pattern, row: plot_tiles(pattern, block, n, axes=row)  # noqa: E731
    title = f"Masks (n = {n}) and the tiles of {block} a BlockMask computes"
    return figure_rows(patterns, draw, ncols=2, row_size=(8.0, 3.7), suptitle=title)


def explorer(*, pattern: str = "sliding window", block: int = 8):
    """The interactive view: pattern and tile size (4 x 3 = 12 views drawn in advance).

    Returns:
        An ``ipywidgets.VBox``.
    """
    import matplotlib.pyplot as plt

    from ._explorer import Control, grid_explorer

    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    if block not in EXPLORER_BLOCKS:
        raise ValueError(f"block must be one of {EXPLORER_BLOCKS} (the grid), got {block!r}")

    def render(pattern: str, block: int):
        fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.8))
        plot_tiles(pattern, block, axes=axes)
        fig.tight_layout()
        return fig

    def alt(pattern: str, block: int) -> str:
        mask = pattern_mask(pattern)
        kinds = tile_kinds(mask, block)
        full, partial, skipped = (int((kinds == k).sum()) for k in (2, 1, 0))
        return (
            f"Two panels: the {pattern} mask on {EXPLORER_N} positions "
            f"({int(mask.sum())} of {EXPLORER_N * EXPLORER_N} pairs visible) and its tiles of "
            f"{block}: {full} full, {partial} partial and {skipped} skipped"
        )

    return grid_explorer(
        [
            Control("pattern", PATTERNS, value=pattern, kind="dropdown"),
            Control("block", EXPLORER_BLOCKS, value=block),
        ],
        render,
        alt=alt,
    )
