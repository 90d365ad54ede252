"""Two lookups at once: "what was the previous token, and what was the first one?" (chapter 5).

At every position ``i >= 1`` of a random token sequence the model must name the token at
``i - 1`` and the token at position 0. One attention head can attend sharply to only one of
the two places, so this is the smallest task on which several heads help, and on which
each head's job can be read off its attention pattern. Deterministic given a
``torch.Generator``; nothing is downloaded.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .order_tasks import IGNORE_INDEX

__all__ = ["LookupBatch", "prev_first_lookup"]


class LookupBatch(NamedTuple):
    """A batch of the previous-token / first-token lookup task."""

    tokens: torch.Tensor  #: ``(B, n)`` long, uniform in ``0 .. vocab_size - 1``
    prev: torch.Tensor  #: ``(B, n)`` long, ``tokens[:, i - 1]``; ``IGNORE_INDEX`` at ``i = 0``
    first: torch.Tensor  #: ``(B, n)`` long, ``tokens[:, 0]``; ``IGNORE_INDEX`` at ``i = 0``


def prev_first_lookup(
    batch: int, n: int = 12, vocab_size: int = 12, *, generator: torch.Generator | None = None
) -> LookupBatch:
    """Draw ``batch`` sequences of ``n`` random tokens with both lookup targets.

    Args:
        batch: number of sequences ``B`` (>= 1).
        n: sequence length (>= 2, so that some position has a previous token).
        vocab_size: number of distinct tokens (>= 2).
        generator: a seeded ``torch.Generator`` for reproducible draws.

    Returns:
        :class:`LookupBatch`; position 0 has no target (``IGNORE_INDEX``, which
        ``F.cross_entropy`` skips by default).
    """
    if batch < 1 or n < 2 or vocab_size < 2:
        raise ValueError(
            "need batch >= 1, n >= 2 and vocab_size >= 2, "
            f"got batch={batch}, n={n}, vocab_size={vocab_size}"
        )
    tokens = torch.randint(0, vocab_size, (batch, n), generator=generator)
    ignore = torch.full((batch, 1), IGNORE_INDEX, dtype=torch.long)
    prev = torch.cat([ignore, tokens[:, :-1]], dim=1)
    first = torch.cat([ignore, tokens[:, :1].expand(batch, n - 1)], dim=1)
    return LookupBatch(tokens, prev, first)
