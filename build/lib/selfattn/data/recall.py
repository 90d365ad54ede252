"""Key-value recall: "here are p (key, value) pairs; which value was stored under this key?"
(chapter 3).

The smallest task that needs attention as the articles describe it: the query
must be matched against every key, and the matching key's value read out.
Deterministic given a ``torch.Generator``; nothing is downloaded.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["RecallBatch", "key_value_recall"]


class RecallBatch(NamedTuple):
    """A batch of recall problems."""

    keys: torch.Tensor  #: ``(B, p)`` long, distinct keys within each row
    values: torch.Tensor  #: ``(B, p)`` long, the value stored under each key
    query: torch.Tensor  #: ``(B,)`` long, one of the row's keys
    target: torch.Tensor  #: ``(B,)`` long, the value stored under ``query``


def key_value_recall(
    batch: int,
    n_pairs: int = 8,
    n_keys: int = 16,
    n_values: int = 16,
    *,
    generator: torch.Generator | None = None,
) -> RecallBatch:
    """Draw ``batch`` recall problems.

    Args:
        batch: number of problems ``B``.
        n_pairs: pairs per problem ``p`` (at most ``n_keys``, since keys are distinct).
        n_keys, n_values: vocabulary sizes.
        generator: a seeded ``torch.Generator`` for reproducible draws.

    Returns:
        :class:`RecallBatch` of long tensors; ``values[b, i]`` is stored under ``keys[b, i]``.
    """
    if batch < 1 or n_pairs < 1 or n_values < 1:
        raise ValueError(
            f"batch, n_pairs and n_values must be >= 1, got {batch}, {n_pairs}, {n_values}"
        )
    if n_pairs > n_keys:
        raise ValueError(f"n_pairs={n_pairs} distinct keys cannot be drawn from n_keys={n_keys}")
    # Distinct keys per row: the first n_pairs of a random permutation (argsort of uniform noise).
    keys = torch.rand(batch, n_keys, generator=generator).argsort(dim=1)[:, :n_pairs]
    values = torch.randint(n_values, (batch, n_pairs), generator=generator)
    pick = torch.randint(n_pairs, (batch,), generator=generator)
    rows = torch.arange(batch)
    return RecallBatch(keys, values, keys[rows, pick], values[rows, pick])
