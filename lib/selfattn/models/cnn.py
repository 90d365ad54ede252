"""A small convolutional network, the baseline for chapter 9's "ViT matches CNNs".

:class:`SmallCNN` is three convolutions with pooling and a linear head; its width is chosen
by :meth:`SmallCNN.matching` so that its parameter count matches a given model's (the
chapter's :class:`~selfattn.models.transformer.MiniViT`), so the comparison is at equal size. The
convolution builds in what the ViT must learn: neighbouring pixels belong together, and the
same detector applies everywhere in the image.
"""

from __future__ import annotations

import torch
from torch import nn

from .._checks import require_int, require_tensor

__all__ = ["SmallCNN"]


class SmallCNN(nn.Module):
    """``conv 4x4/2 -> pool -> conv 3x3 -> pool -> conv 3x3 -> global mean -> linear``.

    Channels ``w, 2w, 4w`` (ReLU after each convolution). A 40 x 40 image becomes 20 x 20,
    10 x 10, 5 x 5 maps; the global mean makes the output independent of where the shape is.

    Args:
        num_classes: labels. width: ``w``. channels: input channels ``C``.

    ``forward(images (B, C, H, W))`` returns logits ``(B, num_classes)``.
    """

    def __init__(self, num_classes: int, *, width: int = 36, channels: int = 3):
        super().__init__()
        num_classes = require_int(num_classes, "num_classes", 1)
        w = require_int(width, "width", 1)
        channels = require_int(channels, "channels", 1)
        self.channels = channels
        self.features = nn.Sequential(
            nn.Conv2d(channels, w, 4, stride=2, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(w, 2 * w, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * w, 4 * w, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(4 * w, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images ``(B, C, H, W)`` (H, W >= 8) -> logits ``(B, num_classes)``."""
        require_tensor(images, "images")
        if images.dim() != 4 or images.shape[1] != self.channels or min(images.shape[2:]) < 8:
            raise ValueError(
                f"images must have shape (B, {self.channels}, H, W) with H, W >= 8, "
                f"got {tuple(images.shape)}"
            )
        return self.head(self.features(images))

    @staticmethod
    def parameters_for(num_classes: int, width: int, channels: int = 3) -> int:
        """The parameter count of ``SmallCNN(num_classes, width=width, channels=channels)``."""
        w, c = width, channels
        return (
            (16 * c * w + w)
            + (9 * w * 2 * w + 2 * w)
            + (9 * 2 * w * 4 * w + 4 * w)
            + (4 * w * num_classes + num_classes)
        )

    @classmethod
    def matching(cls, num_classes: int, parameters: int, *, channels: int = 3) -> SmallCNN:
        """The SmallCNN whose parameter count is closest to ``parameters``."""
        parameters = require_int(parameters, "parameters", 1)
        width = min(
            range(1, 513),
            key=lambda w: abs(cls.parameters_for(num_classes, w, channels) - parameters),
        )
        return cls(num_classes, width=width, channels=channels)
