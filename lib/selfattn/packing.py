"""Packed sequences against padding (chapter 12): the same documents, two layouts, one model.

*Padding* puts one document per row and pads every row to the longest; *packing* lays the
documents end to end in one row and keeps them apart with a document mask
(:func:`selfattn.flex.document`) and per-document positions
(:func:`selfattn.flex.pack_documents`). Both give every document exactly the attention and
positions it would get alone, so a model computes the same outputs and the same loss either
way (to float rounding); packing only stops computing the padding.

:class:`PackedLM` is a tiny causal character model that takes explicit positions and a mask;
:func:`padded_batch` and :func:`packed_batch` lay out a list of documents;
:func:`train_lm` trains one layout and reports its loss, speed and wasted positions. Training
runs the dense mask through the reference kernel: on the CPU FlexAttention computes no
gradients (the mask is the same, :func:`selfattn.flex.dense_mask` draws it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    require_choice,
    require_int,
    require_number,
)
from .flex import pack_documents
from .models.transformer import TransformerBlock

__all__ = [
    "PackedLM",
    "Layout",
    "padded_batch",
    "packed_batch",
    "train_lm",
    "make_documents",
    "LAYOUTS",
]

#: The two layouts :func:`train_lm` compares.
LAYOUTS = ("padded", "packed")


@dataclass(frozen=True)
class Layout:
    """A batch of documents laid out for :class:`PackedLM`.

    Attributes:
        ids, positions, targets: ``(B, L)`` long; a target of ``-100`` is not scored
            (padding, and each document's last token, which has no next token).
        mask: bool ``(B, 1, L, L)``, ``True`` = may attend.
        real: the number of real (non-padding) positions.
    """

    ids: torch.Tensor
    positions: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    real: int

    @property
    def wasted(self) -> float:
        """The fraction of positions that hold padding."""
        return 1.0 - self.real / self.ids.numel()


def make_documents(count: int, *, seed: int = 0) -> tuple[list[torch.Tensor], int]:
    """``count`` documents (sentences of the book's grammar, as character ids, 23 to 64
    characters) and the vocabulary size."""
    from .data.text import char_vocab, generate_sentences

    vocab = char_vocab()
    sentences = generate_sentences(require_int(count, "count", 1), seed=seed)
    return [torch.as_tensor(vocab.encode(list(s))) for s in sentences], len(vocab)


def _targets(doc: torch.Tensor) -> torch.Tensor:
    return torch.cat([doc[1:], torch.tensor([-100])])


def padded_batch(docs: list[torch.Tensor]) -> Layout:
    """One document per row, padded (id 0, target -100) to the longest; causal + key padding."""
    longest = max(len(d) for d in docs)
    ids = torch.zeros(len(docs), longest, dtype=torch.long)
    targets = torch.full_like(ids, -100)
    for row, doc in enumerate(docs):
        ids[row, : len(doc)] = doc
        targets[row, : len(doc)] = _targets(doc)
    lengths = torch.tensor([len(d) for d in docs])
    keys = torch.arange(longest)[None, :] < lengths[:, None]  # (B, L)
    causal = torch.ones(longest, longest, dtype=torch.bool).tril()
    mask = (causal & keys[:, None, :]) | torch.eye(longest, dtype=torch.bool)  # pads see self
    positions = torch.arange(longest).expand(len(docs), longest)
    return Layout(ids, positions, targets, mask[:, None], int(lengths.sum()))


def _fill_rows(lengths: list[int], row_length: int) -> list[list[int]]:
    """First-fit decreasing: the documents' indices, grouped into rows of ``row_length``."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        slot = next((r for r, free in enumerate(room) if free >= lengths[i]), None)
        if slot is None:
            rows.append([])
            room.append(row_length)
            slot = len(rows) - 1
        rows[slot].append(i)
        room[slot] -= lengths[i]
    return rows


def packed_batch(docs: list[torch.Tensor], row_length: int | None = None) -> Layout:
    """The documents end to end in rows of ``row_length`` (default: the longest document),
    filled first-fit; a causal document mask and per-document positions. What is left of a
    row is padding, which sees only itself."""
    lengths = [len(d) for d in docs]
    row_length = max(lengths) if row_length is None else require_int(row_length, "row_length", 1)
    if max(lengths) > row_length:
        raise ValueError(f"row_length={row_length} is shorter than a document ({max(lengths)})")
    rows = _fill_rows(lengths, row_length)
    ids = torch.zeros(len(rows), row_length, dtype=torch.long)
    targets = torch.full_like(ids, -100)
    positions = torch.zeros_like(ids)
    doc_of = torch.full_like(ids, -1)
    for r, members in enumerate(rows):
        used = sum(lengths[i] for i in members)
        doc_ids, pos = pack_documents([lengths[i] for i in members])
        ids[r, :used] = torch.cat([docs[i] for i in members])
        targets[r, :used] = torch.cat([_targets(docs[i]) for i in members])
        positions[r, :used], doc_of[r, :used] = pos, doc_ids
    causal = torch.ones(row_length, row_length, dtype=torch.bool).tril()
    same = (doc_of[:, :, None] == doc_of[:, None, :]) & (doc_of[:, :, None] >= 0)
    mask = (same & causal) | torch.eye(row_length, dtype=torch.bool)  # padding sees itself
    return Layout(ids, positions, targets, mask[:, None], sum(lengths))


class PackedLM(nn.Module):
    """A tiny causal LM that takes each token's position and the mask explicitly.

    Args:
        vocab_size: ``V``. d_model, num_heads, num_layers: its size. max_len: positions.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        d_model: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        max_len: int = 128,
    ):
        super().__init__()
        self.tok = nn.Embedding(require_int(vocab_size, "vocab_size", 1), d_model)
        self.pos = nn.Embedding(require_int(max_len, "max_len", 1), d_model)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, num_heads)
            for _ in range(require_int(num_layers, "num_layers", 1))
        )
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, batch: Layout) -> torch.Tensor:
        """``batch`` (a :class:`Layout`) -> logits ``(B, L, V)``."""
        x = self.tok(batch.ids) + self.pos(batch.positions)
        for block in self.blocks:
            x = block(x, mask=batch.mask)
        return self.head(self.ln(x))

    def loss(self, batch: Layout) -> torch.Tensor:
        """Mean next-token cross-entropy (nats) over the scored tokens."""
        logits = self(batch)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.targets.reshape(-1))


def train_lm(
    layout: str,
    docs: list[torch.Tensor],
    eval_docs: list[torch.Tensor],
    vocab_size: int,
    *,
    steps: int = 100,
    batch_docs: int = 16,
    lr: float = 3e-3,
    seed: int = 0,
) -> dict:
    """Train a :class:`PackedLM` on ``docs`` in ``layout`` (``"padded"`` or ``"packed"``).

    Each step takes the next ``batch_docs`` documents (the same ones in both layouts), so the
    two runs see the same sentences in the same batches (packing orders a batch longest first).

    Returns:
        ``{"layout", "losses", "eval_loss", "seconds", "tokens_per_s", "wasted"}``: the
        per-step losses, the loss on ``eval_docs``, the training time, real tokens per
        second and the mean fraction of padded positions.
    """
    require_choice(layout, "layout", LAYOUTS)
    lr = require_number(lr, "lr", positive=True)
    make = padded_batch if layout == "padded" else packed_batch
    torch.manual_seed(seed)
    model = PackedLM(vocab_size, max_len=max(len(d) for d in docs + eval_docs))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses, wasted, tokens = [], [], 0
    start = time.perf_counter()
    for step in range(steps):
        first = (step * batch_docs) % len(docs)
        batch = make(docs[first : first + batch_docs])
        loss = model.loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        wasted.append(batch.wasted)
        tokens += batch.real
    seconds = time.perf_counter() - start
    with torch.no_grad():
        eval_loss = float(model.loss(make(eval_docs)))
    return {
        "layout": layout,
        "losses": losses,
        "eval_loss": eval_loss,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "wasted": sum(wasted) / len(wasted),
    }
