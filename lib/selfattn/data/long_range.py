"""A long-range dependency task: remember the first token across ``distance`` distractors (chapter
1).

Every example reads ``key d_1 d_2 ... d_distance ?`` and the answer is ``key``, the
token at position 0. The distractors are drawn from the same symbols as the key, so
a model cannot find the key by what it is, only by where it is: a recurrent model
must carry it through ``distance`` steps, an attention layer can look it up in one.
"""

from __future__ import annotations

import string

import torch

from .._checks import require_int
from .vocab import Vocab

__all__ = ["LongRangeTask"]


class LongRangeTask:
    """Generator of "what was the first token?" sequences, deterministic given a seed.

    Args:
        n_symbols: number of distinct symbols (``A``, ``B``, ...; 2 to 26). Chance accuracy
            is ``1 / n_symbols``.

    Attributes:
        symbols: the ``n_symbols`` symbol strings, class ``c`` is ``symbols[c]``.
        vocab: ``selfattn.data.Vocab`` with ``<pad>`` (id 0), the symbols, then ``?``.
        query_id: id of the closing ``?`` token.

    Example:
        >>> task = LongRangeTask(4)
        >>> ids, y = task.batch(distance=3, batch_size=1, seed=0)
        >>> task.decode(ids[0]), task.symbols[y[0]]
        (['A', 'D', 'B', 'A', '?'], 'A')
    """

    def __init__(self, n_symbols: int = 8):
        # One letter a symbol, A to Z.
        self.n_symbols = require_int(n_symbols, "n_symbols", 2, len(string.ascii_uppercase))
        self.symbols: list[str] = list(string.ascii_uppercase[: self.n_symbols])
        self.vocab = Vocab(self.symbols + ["?"])
        self.query_id: int = self.vocab.stoi["?"]

    @property
    def num_classes(self) -> int:
        """Number of answer classes (= ``n_symbols``)."""
        return self.n_symbols

    def symbol_ids(self, classes: torch.Tensor) -> torch.Tensor:
        """Class indices ``(...)`` -> vocabulary ids ``(...)`` (symbol ``c`` has id ``c + 1``)."""
        return classes + 1

    def batch(
        self,
        distance: int,
        batch_size: int,
        *,
        seed: int | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch of examples with ``distance`` distractors each.

        Args:
            distance: number of distractor tokens between the key and the ``?`` (>= 0).
            batch_size: number of examples ``B`` (>= 1).
            seed: seeds a fresh generator (same seed, same batch). Give ``seed`` or
                ``generator``, not both; with neither, torch's global generator is used.
            generator: draw from this generator (for a stream of different batches).

        Returns:
            ``(ids, targets)``: ids ``(B, distance + 2)`` long, the vocabulary ids of
            ``key, distractors..., ?``; targets ``(B,)`` long, the key's class in
            ``0..n_symbols-1``.
        """
        distance = require_int(distance, "distance", 0)
        batch_size = require_int(batch_size, "batch_size", 1)
        if seed is not None and generator is not None:
            raise ValueError("give seed or generator, not both")
        if seed is not None:
            generator = torch.Generator().manual_seed(seed)
        classes = torch.randint(self.n_symbols, (batch_size, distance + 1), generator=generator)
        ids = torch.cat(
            [self.symbol_ids(classes), torch.full((batch_size, 1), self.query_id)], dim=1
        )
        return ids, classes[:, 0].clone()

    def sampler(self, distances: tuple[int, int], batch_size: int, *, seed: int = 0):
        """A ``step -> (ids, targets)`` function for :func:`selfattn.train.train_loop`.

        Each step draws one distance uniformly from ``distances[0]..distances[1]``
        (inclusive) and a batch at that distance; the stream is fixed by ``seed``.
        """
        lo, hi = distances
        if not 0 <= lo <= hi:
            raise ValueError(f"distances must be (lo, hi) with 0 <= lo <= hi, got {distances!r}")
        generator = torch.Generator().manual_seed(seed)

        def sample(step: int) -> tuple[torch.Tensor, torch.Tensor]:
            distance = int(torch.randint(lo, hi + 1, (1,), generator=generator))
            return self.batch(distance, batch_size, generator=generator)

        return sample

    def encode(self, tokens: list[str]) -> torch.Tensor:
        """Tokens ``(n,)`` -> ids ``(n,)``."""
        return self.vocab.encode(tokens)

    def decode(self, ids) -> list[str]:
        """Ids ``(n,)`` -> tokens."""
        return self.vocab.decode(ids)
