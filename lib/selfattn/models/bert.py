"""BERT as published: a post-LayerNorm encoder with a masked-language-model head (chapter 9).

Chapter 9's :class:`~selfattn.models.transformer.MiniBERT` is pre-LayerNorm (GPT-2's and
ViT's block). The original BERT (Devlin et al., 2019), which ``transformers``'
``BertForMaskedLM`` reproduces, normalises *after* each residual addition::

    x = LN(word + position + token_type)
    per layer:  x = LN(x + Attn(x));  x = LN(x + MLP(x))
    logits = LN(gelu(x W_t)) E^T + b            (E: the word embeddings, tied)

:class:`BertMLM` is that model, from the book's
:class:`~selfattn.multihead.MultiHeadAttention` and
:class:`~selfattn.models.transformer.MLP`; ``BertMLM.from_transformers`` copies a
``BertForMaskedLM``'s weights (``selfattn.from_transformers`` calls it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import require_int, require_number, require_token_batch
from ..multihead import MultiHeadAttention
from .transformer import MLP, copy_weights, sizes_of, stacked_linear

__all__ = ["PostNormBlock", "BertMLM"]


class PostNormBlock(nn.Module):
    """``x = LN1(x + Attn(x, mask)); x = LN2(x + MLP(x))`` (the original Transformer's order).

    Args: d_model, num_heads, hidden (the MLP's inner width), eps (the LayerNorms').
    """

    def __init__(self, d_model: int, num_heads: int, hidden: int, *, eps: float = 1e-12):
        super().__init__()
        eps = require_number(eps, "eps", positive=True)
        self.attn = MultiHeadAttention(d_model, num_heads)
        self.ln1 = nn.LayerNorm(d_model, eps=eps)
        self.mlp = MLP(d_model, hidden)
        self.ln2 = nn.LayerNorm(d_model, eps=eps)

    def forward(self, x: torch.Tensor, *, mask=None) -> torch.Tensor:
        x = self.ln1(x + self.attn(x, mask=mask))
        return self.ln2(x + self.mlp(x))


class BertMLM(nn.Module):
    """BERT with its masked-LM head: ids ``(B, n)`` -> logits ``(B, n, V)``.

    Args:
        vocab_size: ``V``. d_model, num_heads, num_layers, hidden: the encoder's size.
        max_len: positions. type_vocab_size: segment ids. eps: the LayerNorms' epsilon.

    ``forward(ids, *, attention_mask=None, token_type_ids=None)``: ``attention_mask``
    ``(B, n)`` is 1 at real tokens, 0 at padding (padded keys are never attended to);
    ``token_type_ids`` default to 0.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        d_model: int,
        num_heads: int,
        num_layers: int,
        hidden: int,
        max_len: int = 512,
        type_vocab_size: int = 2,
        eps: float = 1e-12,
    ):
        super().__init__()
        eps = require_number(eps, "eps", positive=True)
        v, d = require_int(vocab_size, "vocab_size", 1), require_int(d_model, "d_model", 1)
        self.tok = nn.Embedding(v, d)
        self.pos = nn.Embedding(require_int(max_len, "max_len", 1), d)
        self.segment = nn.Embedding(require_int(type_vocab_size, "type_vocab_size", 1), d)
        self.ln = nn.LayerNorm(d, eps=eps)
        self.blocks = nn.ModuleList(
            PostNormBlock(d, num_heads, hidden, eps=eps)
            for _ in range(require_int(num_layers, "num_layers", 1))
        )
        self.transform = nn.Linear(d, d)
        self.transform_ln = nn.LayerNorm(d, eps=eps)
        self.head = nn.Linear(d, v)
        self.act = "gelu"

    def forward(self, ids, *, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        require_token_batch(ids)
        n = ids.shape[1]
        if n > self.pos.num_embeddings:
            raise ValueError(f"ids have n={n} positions, the model {self.pos.num_embeddings}")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(ids)
        positions = torch.arange(n, device=ids.device)
        x = self.tok(ids) + self.segment(token_type_ids) + self.pos(positions)
        x = self.ln(x)
        mask = None
        if attention_mask is not None:
            if attention_mask.shape != ids.shape:
                raise ValueError(
                    f"attention_mask must have the shape of ids {tuple(ids.shape)}, "
                    f"got {tuple(attention_mask.shape)}"
                )
            mask = attention_mask.to(torch.bool).unsqueeze(1)  # (B, 1, n): keys
        for block in self.blocks:
            x = block(x, mask=mask)
        approximate = "tanh" if self.act == "gelu_tanh" else "none"
        x = self.transform_ln(F.gelu(self.transform(x), approximate=approximate))
        return self.head(x)

    @classmethod
    def from_transformers(cls, hf_model) -> BertMLM:
        """A copy of a ``transformers`` ``BertForMaskedLM``."""
        config = hf_model.config
        if config.hidden_act not in ("gelu", "gelu_new", "gelu_pytorch_tanh"):
            raise ValueError(f"the book's BERT uses GELU; this one {config.hidden_act!r}")
        model = cls(
            config.vocab_size,
            **sizes_of(config),
            hidden=config.intermediate_size,
            max_len=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size,
            eps=config.layer_norm_eps,
        )
        approximate = "none" if config.hidden_act == "gelu" else "tanh"
        model.act = "gelu" if approximate == "none" else "gelu_tanh"
        bert = hf_model.bert
        emb = bert.embeddings
        pairs = [
            (model.tok, emb.word_embeddings),
            (model.pos, emb.position_embeddings),
            (model.segment, emb.token_type_embeddings),
            (model.ln, emb.LayerNorm),
        ]
        for block, src in zip(model.blocks, bert.encoder.layer):
            a = src.attention.self
            fused = stacked_linear([a.query, a.key, a.value])
            block.mlp.approximate = approximate
            pairs += [
                (block.attn.qkv, fused),
                (block.attn.out, src.attention.output.dense),
                (block.ln1, src.attention.output.LayerNorm),
                (block.mlp.fc, src.intermediate.dense),
                (block.mlp.proj, src.output.dense),
                (block.ln2, src.output.LayerNorm),
            ]
        pred = hf_model.cls.predictions
        pairs += [
            (model.transform, pred.transform.dense),
            (model.transform_ln, pred.transform.LayerNorm),
            (model.head, pred.decoder),
        ]
        for dst, src in pairs:
            copy_weights(dst, src)
        with torch.no_grad():
            if pred.decoder.bias is None:
                model.head.bias.copy_(pred.bias)
        return model
