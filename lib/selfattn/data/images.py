"""Procedural images of coloured shapes with captions, for ViT and CLIP in miniature (chapter 9).

Every image holds one shape (square, diamond, triangle or cross), in one colour (red,
green or blue), small or big, at a random place on a noisy background. The label is
the shape; the caption says all three ("a big red diamond"). Because the shape moves
around, a classifier must *find* it, which is what the class token's attention over
the patches shows; the pixel mask of the shape (returned too) lets us measure how
much of that attention lands on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import require_int, require_number, require_tensor
from ._examples import Examples
from .vocab import Vocab

__all__ = [
    "SHAPES",
    "COLORS",
    "SIZES",
    "ShapeImages",
    "make_shapes",
    "caption_vocab",
    "patchify",
    "patch_coverage",
]

#: the classes, in label order
SHAPES: tuple[str, ...] = ("square", "diamond", "triangle", "cross")
#: the colours (red, green and blue channels)
COLORS: tuple[str, ...] = ("red", "green", "blue")
#: the two sizes
SIZES: tuple[str, ...] = ("small", "big")
_RGB = torch.tensor([[0.9, 0.1, 0.1], [0.1, 0.8, 0.1], [0.15, 0.25, 0.95]])


@dataclass
class ShapeImages(Examples):
    """A batch of shape images; ``len()`` counts them, ``to(device)`` moves the tensors.

    Attributes:
        images: ``(N, 3, H, W)`` float32 RGB, shape pixels near 1 in their colour, noise elsewhere.
        shapes: ``(N,)`` long, index into :data:`SHAPES` (the classification label).
        colors: ``(N,)`` long, index into :data:`COLORS`.
        sizes: ``(N,)`` long, index into :data:`SIZES`.
        masks: ``(N, H, W)`` bool, the pixels the shape covers.
        captions: ``N`` strings such as ``"a big red diamond"``.
    """

    images: torch.Tensor
    shapes: torch.Tensor
    colors: torch.Tensor
    sizes: torch.Tensor
    masks: torch.Tensor
    captions: list[str]


def _shape_mask(shape: int, cy: float, cx: float, r: float, size: int) -> torch.Tensor:
    yy, xx = torch.meshgrid(
        torch.arange(size, dtype=torch.float32),
        torch.arange(size, dtype=torch.float32),
        indexing="ij",
    )
    dy, dx = yy - cy, xx - cx
    if shape == 0:  # square
        return (dy.abs() <= r) & (dx.abs() <= r)
    if shape == 1:  # diamond: a square turned by 45 degrees
        return dy.abs() + dx.abs() <= r + 0.5
    if shape == 2:  # triangle, apex up: half-width grows from 0 at the top to r at the bottom
        return (dy.abs() <= r) & (dx.abs() <= (dy + r) / 2 + 0.5)
    bar = max(1.0, r / 3)  # cross: two bars of half-width r/3
    return ((dx.abs() <= bar) & (dy.abs() <= r)) | ((dy.abs() <= bar) & (dx.abs() <= r))


def make_shapes(
    n: int, *, image_size: int = 24, grid: int | None = None, noise: float = 0.15, seed: int = 0
) -> ShapeImages:
    """``n`` random shape images, deterministic given ``seed``.

    Args:
        n: number of images.
        image_size: height = width in pixels (at least 16).
        grid: if given, the image is a ``grid x grid`` board of cells and each shape sits in
            one random cell (centre jittered by up to one pixel); with ``patch = image_size /
            grid``
            a ViT patch then holds most of the shape. ``None``: anywhere in the image.
        noise: standard deviation of the Gaussian background noise.
        seed: random seed.

    Returns:
        A :class:`ShapeImages`.
    """
    noise = require_number(noise, "noise", nonnegative=True)
    n = require_int(n, "n", 1)
    if image_size < 16:
        raise ValueError(f"image_size must be at least 16 pixels, got {image_size}")
    seed = require_int(seed, "seed", None)
    g = torch.Generator().manual_seed(seed)
    shapes = torch.randint(0, len(SHAPES), (n,), generator=g)
    colors = torch.randint(0, len(COLORS), (n,), generator=g)
    sizes = torch.randint(0, len(SIZES), (n,), generator=g)
    if grid is None:
        # Radii scale with the image: small ~ 1/8 of the side, big ~ 1/4.
        radii = torch.where(sizes == 0, image_size / 8.0, image_size / 4.5) + torch.rand(
            n, generator=g
        )
        margin = radii + 1
        cy = margin + torch.rand(n, generator=g) * (image_size - 1 - 2 * margin)
        cx = margin + torch.rand(n, generator=g) * (image_size - 1 - 2 * margin)
    else:
        grid = require_int(grid, "grid", 1)
        if image_size % grid or image_size // grid < 6:
            raise ValueError(
                f"grid must be an int dividing image_size={image_size} into cells of >= 6 pixels, "
                f"got {grid!r}"
            )
        cell = image_size // grid
        radii = torch.where(sizes == 0, cell * 0.3, cell * 0.44)
        row = torch.randint(0, grid, (n,), generator=g)
        col = torch.randint(0, grid, (n,), generator=g)
        jitter = torch.randint(-1, 2, (2, n), generator=g)
        cy = row * cell + (cell - 1) / 2 + jitter[0]
        cx = col * cell + (cell - 1) / 2 + jitter[1]
    masks = torch.stack(
        [
            _shape_mask(int(s), float(y), float(x), float(r), image_size)
            for s, y, x, r in zip(shapes, cy, cx, radii)
        ]
    )
    images = noise * torch.randn(n, 3, image_size, image_size, generator=g)
    images = images + masks[:, None].float() * _RGB[colors][:, :, None, None]
    captions = [
        f"a {SIZES[int(z)]} {COLORS[int(c)]} {SHAPES[int(s)]}"
        for s, c, z in zip(shapes, colors, sizes)
    ]
    return ShapeImages(images.float(), shapes, colors, sizes, masks, captions)


def caption_vocab() -> Vocab:
    """Every caption word, with ``<pad>`` as id 0."""
    return Vocab(["a", *SIZES, *COLORS, *SHAPES])


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """Cut images into non-overlapping ``patch x patch`` squares, row by row: the ViT's tokens.

    Args:
        images: ``(N, C, H, W)`` with ``H`` and ``W`` multiples of ``patch``.

    Returns:
        ``(N, (H // patch) * (W // patch), C * patch * patch)``; patch ``k`` is row ``k // (W //
        patch)``,
        column ``k % (W // patch)``.
    """
    require_tensor(images, "images")
    patch = require_int(patch, "patch", 1)
    if images.dim() != 4:
        raise ValueError(f"images must be (N, C, H, W), got shape {tuple(images.shape)}")
    N, C, H, W = images.shape
    if H % patch or W % patch:
        raise ValueError(f"image size {H}x{W} is not a multiple of patch={patch}")
    x = images.reshape(N, C, H // patch, patch, W // patch, patch)
    return x.permute(0, 2, 4, 1, 3, 5).reshape(N, (H // patch) * (W // patch), C * patch * patch)


def patch_coverage(masks: torch.Tensor, patch: int) -> torch.Tensor:
    """Fraction of each patch's pixels that the shape covers.

    Args:
        masks: ``(N, H, W)`` bool pixel masks (:attr:`ShapeImages.masks`).

    Returns:
        ``(N, num_patches)`` float in ``[0, 1]``, patches in :func:`patchify`'s order.
    """
    require_tensor(masks, "masks")
    patch = require_int(patch, "patch", 1)
    if masks.dim() != 3:
        raise ValueError(f"masks must be (N, H, W), got shape {tuple(masks.shape)}")
    return patchify(masks[:, None].float(), patch).mean(dim=-1)
