r"""Sparse attention whose pattern is learned from content: NSA and DeepSeek Sparse Attention.

Chapter 8's sparse patterns are fixed before the text is seen. Here each query picks what it
reads from the keys themselves.

**Native Sparse Attention** (NSA; Yuan et al. 2025). Query ``t`` combines three branches,
each softmax attention over a different set, with gates ``g_t = sigmoid(W_g x_t)`` per head:

* *compressed*: the keys and values of each complete block of ``l`` tokens squeezed into one
  (a learned linear map of the block, position embedding added): ``t`` reads the blocks
  that end at or before it;
* *selected*: the ``num_selected`` blocks with the largest compressed attention (summed over
  the heads, which share one selection, as the paper's GQA groups do), the block holding
  ``t`` always among them; ``t`` reads their tokens up to itself;
* *window*: the last ``window`` tokens.

``o_t = g_cmp o_cmp + g_slc o_slc + g_win o_win``.

**DeepSeek Sparse Attention** (DSA; DeepSeek-V3.2). A *lightning indexer* scores every
earlier token cheaply, ``I_ts = sum_h w_th relu(q^I_th . k^I_s / sqrt(d_I))`` with a few
small indexer heads; query ``t`` then attends, with ordinary softmax attention, to its
``top_k`` tokens by ``I_t`` only. The indexer's scoring is ``transformers``'
``DeepseekV32Indexer``'s (``tests/test_learned_sparse.py`` checks the selected tokens agree).

Both layers here build their patterns as dense boolean masks over ``(n, T)``: they compute
the function exactly, for reading and testing, not fast (the papers' speed comes from
kernels that gather only the selected blocks). Both decode: pass a :class:`SparseCache`
and feed tokens one (or a few) at a time; the outputs equal the full sequence's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import require_bool, require_float, require_int

__all__ = [
    "SparseCache",
    "NativeSparseAttention",
    "DeepSeekSparseAttention",
    "lightning_indexer_scores",
    "masked_softmax_attention",
]


@dataclass
class SparseCache:
    """The past keys and values of one layer (and the indexer's keys, for DSA)."""

    k: torch.Tensor | None = None  #: ``(B, H, t, d_head)``
    v: torch.Tensor | None = None  #: ``(B, H, t, d_head)``
    extra: dict = field(default_factory=dict)  #: e.g. ``"index_k"`` ``(B, t, d_I)``

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, name: str, x: torch.Tensor, dim: int) -> torch.Tensor:
        """Append ``x`` to the cached tensor ``name`` along ``dim``; return the whole."""
        old = getattr(self, name) if name in ("k", "v") else self.extra.get(name)
        new = x if old is None else torch.cat([old, x], dim)
        if name in ("k", "v"):
            setattr(self, name, new)
        else:
            self.extra[name] = new
        return new


def masked_softmax_attention(q, k, v, mask, scale):
    """``softmax(q k^T scale)`` over the keys ``mask`` allows; a row with none gives zeros."""
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask, -math.inf)
    any_key = mask.any(-1, keepdim=True)
    p = torch.softmax(scores.masked_fill(~any_key, 0.0), dim=-1) * any_key
    return p @ v, p


def _check_x(x, d_model):
    require_float(x, "x")
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"x must have shape (B, n, d_model={d_model}), got {tuple(x.shape)}")


def _check_cache(cache):
    if cache is not None and not isinstance(cache, SparseCache):
        raise TypeError(f"cache must be a SparseCache or None, got {type(cache).__name__}")


class _Heads(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.d_model = require_int(d_model, "d_model", 1)
        self.num_heads = require_int(num_heads, "num_heads", 1)
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.d_head = d_model // num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def _project(self, x, cache):
        bsz, n, _ = x.shape
        q, k, v = (
            t.view(bsz, n, self.num_heads, self.d_head).transpose(1, 2)
            for t in self.qkv(x).chunk(3, -1)
        )
        past = 0 if cache is None else len(cache)
        if cache is not None:
            k, v = cache.append("k", k, 2), cache.append("v", v, 2)
        pos_q = torch.arange(past, past + n, device=x.device)
        pos_k = torch.arange(k.shape[-2], device=x.device)
        return q, k, v, pos_q, pos_k

    def _merge(self, o):
        bsz, _, n, _ = o.shape
        return self.out_proj(o.transpose(1, 2).reshape(bsz, n, self.d_model))


class NativeSparseAttention(_Heads):
    """Native Sparse Attention, ``(B, n, d_model) -> (B, n, d_model)``, causal.

    Args:
        d_model, num_heads: width and heads.
        block_size: ``l``, the tokens of a compressed block and of a selected block (the
            paper's ``l = d = l'``, no overlap).
        num_selected: blocks each query reads in full (the current block included).
        window: the sliding window's tokens.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        block_size: int = 16,
        num_selected: int = 4,
        window: int = 32,
    ):
        super().__init__(d_model, num_heads)
        self.block_size = require_int(block_size, "block_size", 1)
        self.num_selected = require_int(num_selected, "num_selected", 1)
        self.window = require_int(window, "window", 1)
        dh, b = self.d_head, self.block_size
        self.block_pos = nn.Parameter(torch.randn(b, dh) * 0.02)  # intra-block positions
        self.compress_k = nn.Linear(b * dh, dh)
        self.compress_v = nn.Linear(b * dh, dh)
        self.gates = nn.Linear(d_model, 3 * num_heads)

    def compressed(self, k, v):
        """The complete blocks' compressed keys and values ``(B, H, T // l, d_head)``."""
        bsz, h, t, dh = k.shape
        nb, b = t // self.block_size, self.block_size
        kb = (k[:, :, : nb * b].reshape(bsz, h, nb, b, dh) + self.block_pos).flatten(-2)
        vb = (v[:, :, : nb * b].reshape(bsz, h, nb, b, dh) + self.block_pos).flatten(-2)
        return self.compress_k(kb), self.compress_v(vb)

    def forward(
        self, x: torch.Tensor, *, cache: SparseCache | None = None, return_parts: bool = False
    ):
        """``x`` ``(B, n, d_model)``; ``cache`` continues a sequence (decoding).

        With ``return_parts`` also a dict of the three branches' outputs ``(B, H, n, d)``,
        the gates ``(B, H, n, 3)`` and the masks ``(B, n, T)`` of the selected and window
        branches (for figures)."""
        _check_x(x, self.d_model)
        _check_cache(cache)
        return_parts = require_bool(return_parts, "return_parts")
        q, k, v, pos_q, pos_k = self._project(x, cache)
        scale, b = self.d_head**-0.5, self.block_size
        causal = pos_k[None, :] <= pos_q[:, None]  # (n, T)
        # Compressed branch: block i (tokens i*l .. i*l + l - 1) once it is complete.
        ck, cv = self.compressed(k, v)
        nb = ck.shape[-2]
        blocks = torch.arange(nb, device=x.device)
        done = (blocks[None, :] + 1) * b - 1 <= pos_q[:, None]  # (n, nb)
        o_cmp, p_cmp = masked_softmax_attention(q, ck, cv, done, scale)
        # Selected branch: importance = compressed attention summed over heads; the block
        # holding the query always in; blocks after it never.
        nsel = -(-k.shape[-2] // b)
        importance = p_cmp.sum(1)  # (B, n, nb)
        importance = F.pad(importance, (0, nsel - nb))
        sel_blocks = torch.arange(nsel, device=x.device)
        own = sel_blocks[None, :] == (pos_q // b)[:, None]  # (n, nsel)
        allowed = sel_blocks[None, :] <= (pos_q // b)[:, None]
        importance = importance.masked_fill(own, math.inf).masked_fill(~allowed, -math.inf)
        top = importance.topk(min(self.num_selected, nsel), dim=-1).indices
        chosen = torch.zeros_like(importance, dtype=torch.bool).scatter(-1, top, True)
        chosen = chosen & allowed  # fewer blocks exist than num_selected: no -inf picks
        slc_mask = chosen.repeat_interleave(b, dim=-1)[..., : k.shape[-2]] & causal
        o_slc, _ = masked_softmax_attention(q, k, v, slc_mask.unsqueeze(1), scale)
        # Window branch.
        win_mask = causal & (pos_k[None, :] > pos_q[:, None] - self.window)
        o_win, _ = masked_softmax_attention(q, k, v, win_mask, scale)
        bsz, n = x.shape[:2]
        g = torch.sigmoid(self.gates(x)).view(bsz, n, self.num_heads, 3).transpose(1, 2)
        o = g[..., 0:1] * o_cmp + g[..., 1:2] * o_slc + g[..., 2:3] * o_win
        y = self._merge(o)
        if return_parts:
            parts = dict(
                compressed=o_cmp,
                selected=o_slc,
                window=o_win,
                gates=g,
                selected_mask=slc_mask,
                window_mask=win_mask.expand_as(slc_mask),
            )
            return y, parts
        return y


def lightning_indexer_scores(q_index, k_index, weights, mask=None):
    """DeepSeek-V3.2's lightning indexer: ``I_ts = sum_h w_th relu(q_th . k_s / sqrt(d_I))``.

    Args:
        q_index: ``(B, n, H_I, d_I)`` the indexer's queries.
        k_index: ``(B, T, d_I)`` its keys (one head, shared).
        weights: ``(B, n, H_I)`` the per-head weights (``transformers`` scales them by
            ``H_I^-1/2`` before this call; so does :class:`DeepSeekSparseAttention`).
        mask: ``(n, T)`` or ``(B, n, T)`` bool, ``True`` = may be selected; others get ``-inf``.

    Returns:
        ``(B, n, T)`` float32 scores.
    """
    d = q_index.shape[-1]
    s = torch.relu(q_index.float() @ k_index.float().unsqueeze(1).transpose(-1, -2) * d**-0.5)
    # q_index.transpose: (B, n, H_I, d) @ (B, 1, d, T) -> (B, n, H_I, T)
    scores = (weights.float().unsqueeze(-2) @ s).squeeze(-2)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return scores


class DeepSeekSparseAttention(_Heads):
    """DeepSeek Sparse Attention, ``(B, n, d_model) -> (B, n, d_model)``, causal.

    Args:
        d_model, num_heads: width and heads of the main attention.
        top_k: tokens each query attends to (all of them while ``t < top_k``).
        index_heads, index_dim: the lightning indexer's heads and width (DeepSeek-V3.2:
            64 heads of 128 for ``top_k = 2048``).

    The indexer's projections are ``index_q`` (``wq_b`` in ``transformers``, here from ``x``,
    not from a low-rank query), ``index_k`` with ``index_k_norm`` (``wk``, ``k_norm``) and
    ``index_weights`` (``weights_proj``); no rotary part. Top-k is not differentiable: the
    indexer gets no gradient from the main loss (DeepSeek-V3.2 trains it to match the dense
    attention's distribution with a KL loss, :meth:`indexer_kl`).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        top_k: int = 32,
        index_heads: int = 4,
        index_dim: int = 32,
    ):
        super().__init__(d_model, num_heads)
        self.top_k = require_int(top_k, "top_k", 1)
        self.index_heads = require_int(index_heads, "index_heads", 1)
        self.index_dim = require_int(index_dim, "index_dim", 1)
        self.index_q = nn.Linear(d_model, index_heads * index_dim, bias=False)
        self.index_k = nn.Linear(d_model, index_dim, bias=False)
        self.index_k_norm = nn.LayerNorm(index_dim, eps=1e-6)
        self.index_weights = nn.Linear(d_model, index_heads, bias=False)

    def index_scores(self, x, cache=None):
        """The indexer's ``(B, n, T)`` scores (causal ``-inf`` above the diagonal)."""
        bsz, n, _ = x.shape
        qi = self.index_q(x).view(bsz, n, self.index_heads, self.index_dim)
        ki = self.index_k_norm(self.index_k(x))
        past = 0
        if cache is not None:
            past = cache.extra["index_k"].shape[1] if "index_k" in cache.extra else 0
            ki = cache.append("index_k", ki, 1)
        w = self.index_weights(x) * self.index_heads**-0.5
        pos_q = torch.arange(past, past + n, device=x.device)
        causal = torch.arange(ki.shape[1], device=x.device)[None, :] <= pos_q[:, None]
        return lightning_indexer_scores(qi, ki, w, causal)

    def selection(self, x, cache=None):
        """``(B, n, T)`` bool: the tokens each query attends to."""
        scores = self.index_scores(x, cache)
        # A stable sort: ties (relu gives exact zeros) go to the earlier token, the same
        # whether the row is computed in the whole sequence or while decoding.
        order = torch.sort(scores, dim=-1, descending=True, stable=True).indices
        top = order[..., : min(self.top_k, scores.shape[-1])]
        chosen = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, top, True)
        return chosen & torch.isfinite(scores)

    def forward(
        self, x: torch.Tensor, *, cache: SparseCache | None = None, return_mask: bool = False
    ):
        """``x`` ``(B, n, d_model)``; ``cache`` continues a sequence (decoding). With
        ``return_mask`` also the ``(B, n, T)`` selection."""
        _check_x(x, self.d_model)
        _check_cache(cache)
        return_mask = require_bool(return_mask, "return_mask")
        with torch.no_grad():
            mask = self.selection(x, cache)
        q, k, v, _, _ = self._project(x, cache)
        o, _ = masked_softmax_attention(q, k, v, mask.unsqueeze(1), self.d_head**-0.5)
        y = self._merge(o)
        return (y, mask) if return_mask else y

    def indexer_kl(self, x: torch.Tensor) -> torch.Tensor:
        """KL(dense attention, summed over heads and renormalised || softmax(indexer scores)),
        DeepSeek-V3.2's warm-up loss for the indexer (the main attention detached)."""
        _check_x(x, self.d_model)
        q, k, _, pos_q, pos_k = self._project(x, None)
        causal = pos_k[None, :] <= pos_q[:, None]
        with torch.no_grad():
            scores = (q @ k.transpose(-1, -2)) * self.d_head**-0.5
            p = torch.softmax(scores.masked_fill(~causal, -math.inf), -1).sum(1)
            p = p / p.sum(-1, keepdim=True)
        log_q = torch.log_softmax(self.index_scores(x), -1)
        return (p * (torch.log(p.clamp_min(1e-12)) - log_q.masked_fill(~causal, 0))).sum(-1).mean()
