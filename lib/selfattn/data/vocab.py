"""A token <-> id mapping with encode/decode, shared by every synthetic task."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence

import torch

from .._checks import require_bool

__all__ = ["Vocab"]


class Vocab:
    """Maps tokens (strings) to integer ids and back.

    Args:
        tokens: the vocabulary, in id order; duplicates are refused.
        pad: the padding token, added as id 0 when not already first.

    Example:
        >>> v = Vocab(["a", "b"]); v.encode(["b", "a"]).tolist()
        [2, 1]
    """

    def __init__(self, tokens: Iterable[str], pad: str | None = "<pad>"):
        tokens = list(tokens)
        if pad is not None and (not tokens or tokens[0] != pad):
            tokens = [pad] + tokens
        if len(set(tokens)) != len(tokens):
            dupes = sorted({t for t in tokens if tokens.count(t) > 1})
            raise ValueError(f"vocabulary has duplicate tokens: {dupes}")
        self.itos: list[str] = tokens
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(tokens)}
        self.pad = pad
        self.pad_id = 0 if pad is not None else None

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def encode(self, tokens: Sequence[str]) -> torch.Tensor:
        """Tokens ``(n,)`` -> ids, a ``torch.long`` tensor ``(n,)``."""
        if isinstance(tokens, str):
            raise TypeError(
                f"tokens must be a sequence of tokens, got the string {tokens!r}; "
                f"use [{tokens!r}] or {tokens!r}.split()"
            )
        unknown = [t for t in tokens if t not in self.stoi]
        if unknown:
            raise KeyError(f"tokens not in the vocabulary: {unknown[:5]}")
        return torch.tensor([self.stoi[t] for t in tokens], dtype=torch.long)

    def decode(self, ids, *, skip_pad: bool = True) -> list[str]:
        """Ids ``(n,)`` (tensor or sequence) -> tokens, dropping padding by default."""
        skip_pad = require_bool(skip_pad, "skip_pad")
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        bad = [
            i
            for i in ids
            if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= i < len(self)
        ]
        if bad:
            # A negative id would silently index from the end of the vocabulary.
            raise ValueError(
                f"ids must be integers in 0..{len(self) - 1} (the vocabulary's ids), got {bad[:5]}"
            )
        return [self.itos[i] for i in ids if not (skip_pad and i == self.pad_id)]

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {self.itos[:6]}{'...' if len(self) > 6 else ''})"
