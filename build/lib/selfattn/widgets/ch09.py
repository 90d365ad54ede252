"""Chapter 9's explorer: where a Transformer looks in an image.

Two kinds of attention over image patches, both precomputed so the explorer redraws
instantly: the ViT class token's attention (per layer) and the caption words'
cross-attention in the miniature CLIP. Each is drawn as a heat map laid over the image,
one cell per patch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["patch_grid", "overlay_attention", "plot_overlays", "explorer"]


def _np(x) -> np.ndarray:
    return (
        x.detach().cpu().double().numpy()
        if isinstance(x, torch.Tensor)
        else np.asarray(x, dtype=float)
    )


def patch_grid(weights) -> np.ndarray:
    """Weights over ``P`` patches ``(P,)`` -> the ``(g, g)`` grid they come from (row by row)."""
    w = _np(weights)
    if w.ndim != 1:
        raise ValueError(f"weights must be one row over the patches (P,), got shape {w.shape}")
    g = int(round(np.sqrt(w.size)))
    if g * g != w.size:
        raise ValueError(f"{w.size} patches do not form a square grid")
    return w.reshape(g, g)


def _to_rgb(image) -> np.ndarray:
    x = _np(image)
    if x.ndim != 3 or x.shape[0] not in (1, 3):
        raise ValueError(f"image must be (C, H, W) with C = 1 or 3, got shape {x.shape}")
    x = np.transpose(x, (1, 2, 0))
    return np.clip(x if x.shape[2] == 3 else np.repeat(x, 3, axis=2), 0.0, 1.0)


def overlay_attention(
    image, weights, ax=None, title: str | None = None, *, vmax: float | None = None
):
    """Draw ``image (C, H, W)`` with the patch weights ``(P,)`` over it as a translucent heat map.

    Every patch cell is coloured by its weight (0 to ``vmax``, default the largest weight) and
    labelled with it when the grid is at most 6 x 6.

    Returns:
        The matplotlib axes.
    """
    import matplotlib.pyplot as plt

    rgb = _to_rgb(image)
    grid = patch_grid(weights)
    H, W = rgb.shape[:2]
    g = grid.shape[0]
    if ax is None:
        _, ax = plt.subplots(figsize=(3.2, 3.2))
    ax.imshow(rgb, extent=(0, W, H, 0))
    top = float(grid.max()) if vmax is None else vmax
    ax.imshow(
        grid,
        cmap="magma",
        alpha=0.55,
        vmin=0.0,
        vmax=max(top, 1e-12),
        extent=(0, W, H, 0),
        interpolation="nearest",
    )
    if g <= 6:
        for i in range(g):
            for j in range(g):
                ax.text(
                    (j + 0.5) * W / g,
                    (i + 0.5) * H / g,
                    f"{grid[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white",
                )
    ax.set_xticks(np.arange(0, W + 1, W // g))
    ax.set_yticks(np.arange(0, H + 1, H // g))
    ax.grid(True, color="white", alpha=0.4, linewidth=0.6)
    ax.set_xlabel("x (pixels)")
    ax.set_ylabel("y (pixels)")
    ax.set_title(title or "attention over patches")
    return ax


def plot_overlays(
    images, weights, titles: Sequence[str], *, suptitle: str, ncols: int | None = None
):
    """One :func:`overlay_attention` panel per image (the static figure).

    Args:
        images: ``(N, C, H, W)``; weights: ``(N, P)``; titles: ``N`` panel titles.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    images, weights = _np(images), _np(weights)
    if images.shape[0] != weights.shape[0] or len(titles) != images.shape[0]:
        raise ValueError(
            f"got {images.shape[0]} images, {weights.shape[0]} weight rows "
            f"and {len(titles)} titles"
        )
    n = images.shape[0]
    ncols = ncols or n
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.0 * ncols, 3.2 * nrows), squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k < n:
            overlay_attention(images[k], weights[k], ax=ax, title=titles[k])
        else:
            ax.axis("off")
    fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


def explorer(images, views: dict, captions: Sequence[str], *, index: int = 0, n_images: int = 8):
    """Pick an image and a view (a ViT layer's class token, or a CLIP caption word): its attention.

    Every view is drawn in advance for the first ``n_images`` images, so the controls also
    work on the static website.

    Args:
        images: ``(N, C, H, W)`` test images.
        views: ``{name: (N, P) weights}``, e.g.
            ``{"ViT layer 1, class token": ..., "CLIP word 'red'": ...}``.
        captions: ``N`` strings shown in the title (true label or caption).
        index: the image shown first.
        n_images: how many of the images the explorer offers (the first ones).

    Returns:
        An ``ipywidgets.VBox``.
    """
    import matplotlib.pyplot as plt

    from ._explorer import Control, grid_explorer

    images = _np(images)
    views = {name: _np(w) for name, w in views.items()}
    n = images.shape[0]
    if not views:
        raise ValueError("views must name at least one set of weights, got none")
    for name, w in views.items():
        if w.shape[0] != n:
            raise ValueError(f"view {name!r} has {w.shape[0]} rows, expected one per image ({n})")
    if len(captions) != n:
        raise ValueError(f"got {len(captions)} captions, expected one per image ({n})")
    shown = min(n, n_images)
    if not 0 <= index < shown:
        raise ValueError(f"index must be in 0..{shown - 1}, got {index}")

    def render(image: int, view: str):
        fig, ax = plt.subplots(figsize=(3.6, 3.6))
        overlay_attention(
            images[image], views[view][image], ax=ax, title=f"{captions[image]}\n{view}"
        )
        fig.tight_layout()
        return fig

    def alt(image: int, view: str) -> str:
        grid = patch_grid(views[view][image])
        i, j = np.unravel_index(int(grid.argmax()), grid.shape)
        return (
            f"Image {image} ({captions[image]}) with the attention of {view} laid over its "
            f"{grid.shape[0]} x {grid.shape[1]} patches; the largest weight, {grid[i, j]:.2f}, "
            f"is on the patch in row {i + 1}, column {j + 1}"
        )

    return grid_explorer(
        [
            Control("image", list(range(shown)), value=index),
            Control("view", list(views), kind="dropdown"),
        ],
        render,
        alt=alt,
        colors=128,
    )
