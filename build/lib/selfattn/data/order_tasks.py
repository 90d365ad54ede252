"""Tasks that need word order, for comparing positional encodings (chapter 6).

**Shifted copy**: the input is ``n`` random tokens; the target at position ``i`` is the
input token at position ``i - shift`` (nothing to predict for ``i < shift``). The answer
depends on *where* a token is, not on what it is, so an order-blind model cannot
learn it, and the rule is the same at every length, so one can ask whether a model
trained on length ``n`` still applies it at length ``2n``.

Everything is generated from a seed (a private ``torch.Generator``): the same seed
gives the same batch on every machine, and no global random state is touched.
"""

from __future__ import annotations

import torch

__all__ = ["IGNORE_INDEX", "shifted_copy_batch", "ShiftedCopyTask"]

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
    for name, value, minimum in (
        ("batch_size", batch_size, 1),
        ("n", n, 1),
        ("shift", shift, 0),
        ("vocab_size", vocab_size, 3),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        if value < minimum:
            raise ValueError(f"{name} must be >= {minimum}, got {value}")
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
