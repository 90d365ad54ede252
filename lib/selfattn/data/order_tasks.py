"""Tasks that need word order, for comparing positional encodings (chapter 6).

**Shifted copy**: the input is ``n`` random tokens; the target at position ``i`` is the
input token at position ``i - shift`` (nothing to predict for ``i < shift``). The answer
depends on *where* a token is, not on what it is, so an order-blind model cannot
learn it, and the rule is the same at every length, so one can ask whether a model
trained on length ``n`` still applies it at length ``2n``.

**Key-value retrieval** (:class:`KeyValueRetrievalTask`): each position holds a (key, value)
pair; the last ``num_queries`` positions hold a key stored earlier and a blank value, and
the target there is the value stored under that key. Position plays no part in the answer,
so the question it asks of an encoding is the opposite one: does a content lookup learned at
one length survive the unseen positions of a longer sequence, where the stored pair can be
farther back than any training sequence was long?

Everything is generated from a seed (a private ``torch.Generator``): the same seed
gives the same batch on every machine, and no global random state is touched.
"""

from __future__ import annotations

import torch

from .._checks import require_int

__all__ = [
    "IGNORE_INDEX",
    "shifted_copy_batch",
    "ShiftedCopyTask",
    "key_value_retrieval_batch",
    "KeyValueRetrievalTask",
]

#: Target of positions with nothing to predict (``cross_entropy``'s default ``ignore_index``).
IGNORE_INDEX = -100  # target of positions with nothing to predict (torch's cross_entropy default)


def shifted_copy_batch(
    batch_size: int,
    n: int,
    *,
    shift: int,
    vocab_size: int,
    generator: torch.Generator | None = None,
    seed: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of the shifted-copy task.

    Args:
        batch_size: ``B``; n: sequence length (``> shift``).
        shift: how far back to copy from (``>= 0``).
        vocab_size: tokens are drawn uniformly from ``1 .. vocab_size - 1`` (0 is reserved for
            padding).
        generator: draws from it (advancing it); or ``seed``: a fresh generator seeded with it.

    Returns:
        ``(x, y)``: ``x`` long ``(B, n)``; ``y`` long ``(B, n)`` with ``y[:, i] = x[:, i - shift]``
        and ``IGNORE_INDEX`` for ``i < shift``.
    """
    batch_size = require_int(batch_size, "batch_size", 1)
    n = require_int(n, "n", 1)
    shift = require_int(shift, "shift", 0)
    vocab_size = require_int(vocab_size, "vocab_size", 3)
    if n <= shift:
        raise ValueError(
            f"n must exceed shift (some position must have a target), got n={n}, shift={shift}"
        )
    if generator is not None and seed is not None:
        raise ValueError("pass a generator or a seed, not both")
    if generator is None:
        generator = torch.Generator().manual_seed(0 if seed is None else seed)
    x = torch.randint(1, vocab_size, (batch_size, n), generator=generator)
    y = torch.full_like(x, IGNORE_INDEX)
    y[:, shift:] = x[:, : n - shift]
    return x, y


class ShiftedCopyTask:
    """The shifted-copy task with a fixed train stream and fixed test sets.

    Args:
        shift: copy distance; vocab_size: number of token ids (id 0 unused).
        seed: training batches come from ``Generator(seed)``; test sets from ``seed + 1 + n``.

    ``train_batches(batch_size, n)`` returns a function ``step -> (x, y)`` for
    :func:`~selfattn.train.train_loop` (batch ``step`` is the same on every run);
    ``test_set(num, n)`` a fixed ``(x, y)``.
    """

    def __init__(self, *, shift: int = 3, vocab_size: int = 16, seed: int = 0):
        shift = require_int(shift, "shift", 0)
        vocab_size = require_int(vocab_size, "vocab_size", 3)
        seed = require_int(seed, "seed", None)
        self.shift, self.vocab_size, self.seed = shift, vocab_size, seed

    def train_batches(self, batch_size: int, n: int):
        """A function ``step -> (x, y)`` giving training batch ``step`` (``B = batch_size``, length
        ``n``)."""

        def batch(step: int):
            return shifted_copy_batch(
                batch_size,
                n,
                shift=self.shift,
                vocab_size=self.vocab_size,
                seed=self.seed * 1_000_003 + step,
            )

        return batch

    def test_set(self, num: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A fixed test set ``(x, y)`` of ``num`` sequences of length ``n``, disjoint seeds from
        training."""
        return shifted_copy_batch(
            num,
            n,
            shift=self.shift,
            vocab_size=self.vocab_size,
            seed=-(self.seed * 1_000_003 + 1 + n),
        )

    def __repr__(self) -> str:
        return (
            f"ShiftedCopyTask(shift={self.shift}, vocab_size={self.vocab_size}, seed={self.seed})"
        )


def key_value_retrieval_batch(
    batch_size: int,
    n: int,
    *,
    num_keys: int = 128,
    num_values: int = 16,
    num_queries: int = 8,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One batch of the key-value retrieval task, deterministic given ``seed``.

    The first ``n - num_queries`` positions store distinct keys with random values; each of
    the last ``num_queries`` positions repeats one of the stored keys (chosen uniformly) with
    the blank value ``num_values``.

    Args:
        batch_size: ``B``; n: sequence length (``num_queries < n <= num_keys + num_queries``).
        num_keys, num_values: key and value vocabulary sizes; num_queries: queries per row.
        seed: seeds a private generator.

    Returns:
        ``(keys, values, targets)``, each long ``(B, n)``: ``values`` holds ``num_values`` at
        the query positions, ``targets`` the stored value there and ``IGNORE_INDEX`` elsewhere.
    """
    batch_size = require_int(batch_size, "batch_size", 1)
    num_keys = require_int(num_keys, "num_keys", 2)
    num_values = require_int(num_values, "num_values", 2)
    num_queries = require_int(num_queries, "num_queries", 1)
    n = require_int(n, "n", num_queries + 1)
    stored = n - num_queries
    if stored > num_keys:
        raise ValueError(
            f"n - num_queries = {stored} pairs need as many distinct keys, "
            f"but num_keys is {num_keys}"
        )
    g = torch.Generator().manual_seed(require_int(seed, "seed", None))
    keys = torch.rand(batch_size, num_keys, generator=g).argsort(-1)[:, :stored]  # distinct
    values = torch.randint(0, num_values, (batch_size, stored), generator=g)
    pick = torch.randint(0, stored, (batch_size, num_queries), generator=g)
    query_keys = keys.gather(1, pick)
    targets = torch.full((batch_size, n), IGNORE_INDEX, dtype=torch.long)
    targets[:, stored:] = values.gather(1, pick)
    blank = torch.full((batch_size, num_queries), num_values, dtype=torch.long)
    return (
        torch.cat([keys, query_keys], 1),
        torch.cat([values, blank], 1),
        targets,
    )


class KeyValueRetrievalTask:
    """The key-value retrieval task with a fixed train stream and fixed test sets.

    Args:
        num_keys, num_values, num_queries: as in :func:`key_value_retrieval_batch`.
        seed: training batch ``step`` uses seed ``seed * 1_000_003 + step``; the test set of
            length ``n`` a negative seed, disjoint from training.

    ``train_batches(batch_size, n)`` returns a function ``step -> (keys, values, targets)``
    for :func:`~selfattn.train.train_loop`; ``test_set(num, n)`` a fixed triple.
    """

    def __init__(
        self, *, num_keys: int = 128, num_values: int = 16, num_queries: int = 8, seed: int = 0
    ):
        self.num_keys = require_int(num_keys, "num_keys", 2)
        self.num_values = require_int(num_values, "num_values", 2)
        self.num_queries = require_int(num_queries, "num_queries", 1)
        self.seed = require_int(seed, "seed", None)

    def _batch(self, batch_size: int, n: int, seed: int):
        return key_value_retrieval_batch(
            batch_size,
            n,
            num_keys=self.num_keys,
            num_values=self.num_values,
            num_queries=self.num_queries,
            seed=seed,
        )

    def train_batches(self, batch_size: int, n: int):
        """A function ``step -> (keys, values, targets)``, each ``(batch_size, n)``."""

        def batch(step: int):
            return self._batch(batch_size, n, self.seed * 1_000_003 + step)

        return batch

    def test_set(self, num: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A fixed test set ``(keys, values, targets)`` of ``num`` sequences of length ``n``."""
        return self._batch(num, n, -(self.seed * 1_000_003 + 1 + n))

    def __repr__(self) -> str:
        return (
            f"KeyValueRetrievalTask(num_keys={self.num_keys}, num_values={self.num_values}, "
            f"num_queries={self.num_queries}, seed={self.seed})"
        )
