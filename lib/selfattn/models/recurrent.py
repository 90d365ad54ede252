"""Tiny recurrent classifiers: an LSTM or a plain tanh RNN that reads a sequence and answers at its
end (chapter 1).

The contrast with :mod:`selfattn.models.tiny_attention`: everything the answer needs
must survive in one hidden state passed from step to step.
"""

from __future__ import annotations

import torch
from torch import nn

from .._checks import require_int

__all__ = ["RecurrentClassifier"]


class RecurrentClassifier(nn.Module):
    """Embedding -> one LSTM (or tanh RNN) layer -> linear read-out of the last hidden state.

    Args:
        vocab_size: number of token ids (embedding rows).
        num_classes: number of answer classes.
        d_embed: embedding width.
        d_hidden: hidden-state width.
        cell: ``"lstm"`` (default) or ``"rnn"`` (Elman, tanh).

    Shapes:
        ``forward(ids)``: ids ``(B, n)`` long -> logits ``(B, num_classes)``.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        d_embed: int = 16,
        d_hidden: int = 32,
        cell: str = "lstm",
    ):
        super().__init__()
        if cell not in ("lstm", "rnn"):
            raise ValueError(f"cell must be 'lstm' or 'rnn', got {cell!r}")
        vocab_size = require_int(vocab_size, "vocab_size", 1)
        num_classes = require_int(num_classes, "num_classes", 1)
        d_embed = require_int(d_embed, "d_embed", 1)
        d_hidden = require_int(d_hidden, "d_hidden", 1)
        self.cell = cell
        self.embed = nn.Embedding(vocab_size, d_embed)
        rnn_class = nn.LSTM if cell == "lstm" else nn.RNN
        self.rnn = rnn_class(d_embed, d_hidden, batch_first=True)
        self.head = nn.Linear(d_hidden, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, num_classes)`` from the hidden state after the last token of ids ``(B,
        n)``."""
        if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long or ids.dim() != 2:
            got = (
                f"{type(ids).__name__} {getattr(ids, 'dtype', '')} "
                f"{tuple(getattr(ids, 'shape', ()))}"
            )
            raise TypeError(f"ids must be a long tensor of shape (B, n), got {got}")
        states, _ = self.rnn(self.embed(ids))  # (B, n, d_hidden)
        return self.head(states[:, -1])
