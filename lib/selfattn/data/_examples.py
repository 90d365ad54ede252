"""What the package's dataclasses of examples share: their length and ``to(device)``."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import TypeVar

import torch

_E = TypeVar("_E", bound="Examples")


class Examples:
    """Mixin for a dataclass holding one row per example in each tensor field (dim 0) and, as
    its last field, a list with one entry per example (the examples, their captions).

    ``len(batch)`` is the length of that list; ``batch.to(device)`` returns a copy with every
    tensor field moved to ``device`` and the other fields unchanged.
    """

    def __len__(self) -> int:
        return len(getattr(self, fields(self)[-1].name))

    def to(self: _E, device: torch.device | str) -> _E:
        """A copy with every tensor field moved to ``device`` (other fields shared)."""
        return replace(
            self,
            **{
                f.name: getattr(self, f.name).to(device)
                for f in fields(self)
                if isinstance(getattr(self, f.name), torch.Tensor)
            },
        )
