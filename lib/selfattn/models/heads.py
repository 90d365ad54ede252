"""The smallest model on which heads divide the work (chapter 5, "what heads learn").

Token and learned position embeddings, **one** causal
:class:`~selfattn.multihead.MultiHeadAttention`
layer and a linear read-out that predicts two things at every position: the previous
token and the first token (:func:`selfattn.data.lookup.prev_first_lookup`). There is no
residual connection and no MLP, so everything the read-out knows came through attention,
and the attention pattern of each head says what that head fetched.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import require_int, require_module
from ..multihead import MultiHeadAttention
from ..positional import LearnedPositionalEmbedding

__all__ = ["LookupHeadsModel", "lookup_loss"]


class LookupHeadsModel(nn.Module):
    """Embeddings -> one causal multi-head attention layer -> two linear read-outs.

    Args:
        vocab_size: number of tokens ``V``.
        max_len: longest sequence (size of the position table).
        d_model: width ``d``.
        num_heads: heads ``h`` (``d`` must be divisible by it).

    Shapes:
        ``forward(tokens)`` with tokens ``(B, n)`` long returns ``(prev_logits, first_logits,
        weights)``: two ``(B, n, V)`` tensors and the attention weights ``(B, h, n, n)``.
    """

    def __init__(
        self, vocab_size: int = 12, max_len: int = 12, d_model: int = 32, num_heads: int = 2
    ):
        super().__init__()
        vocab_size = require_int(vocab_size, "vocab_size", 1)
        max_len = require_int(max_len, "max_len", 1)
        d_model = require_int(d_model, "d_model", 1)
        self.vocab_size = vocab_size
        self.tok = nn.Embedding(vocab_size, d_model)
        # std 1, as nn.Embedding draws the token vectors: both start at the same scale
        self.pos = LearnedPositionalEmbedding(max_len, d_model, init_std=1.0)
        self.attn = MultiHeadAttention(d_model, num_heads)
        self.readout = nn.Linear(d_model, 2 * vocab_size)

    def forward(self, tokens: torch.Tensor):
        """``tokens (B, n)`` long -> ``(prev_logits (B, n, V), first_logits (B, n, V), weights (B,
        h, n, n))``."""
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(
                f"tokens must be a (B, n) long tensor, got {tuple(tokens.shape)} {tokens.dtype}"
            )
        x = self.pos(self.tok(tokens))
        y, weights = self.attn(x, mask="causal", return_weights=True)
        logits = self.readout(y)
        return logits[..., : self.vocab_size], logits[..., self.vocab_size :], weights


def lookup_loss(model: LookupHeadsModel, batch) -> torch.Tensor:
    """Sum of the two cross-entropies (previous token, first token); position 0 is ignored.

    ``batch`` is a :class:`selfattn.data.lookup.LookupBatch`. Fits
    :func:`~selfattn.train.train_loop`'s ``loss_fn``.
    """
    require_module(model)
    if not all(hasattr(batch, f) for f in ("tokens", "prev", "first")):
        raise TypeError(
            f"batch must be a LookupBatch (tokens, prev, first), got {type(batch).__name__}"
        )
    prev_logits, first_logits, _ = model(batch.tokens)
    V = model.vocab_size
    return F.cross_entropy(prev_logits.reshape(-1, V), batch.prev.reshape(-1)) + F.cross_entropy(
        first_logits.reshape(-1, V), batch.first.reshape(-1)
    )
