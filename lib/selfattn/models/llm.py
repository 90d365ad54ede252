"""A decoder-only language model of today's shape, assembled from the book's layers (chapter 11).

:class:`DecoderLM` is what Llama, Qwen3, Gemma 2, DeepSeek-V3, gpt-oss and Qwen3-Next share::

    x = embed(ids) [* embed_scale]
    for each block:  x = x + post_mix_norm(mixer(mix_norm(x)))     # attention or another mixer
                     x = x + post_mlp_norm(mlp(mlp_norm(x)))       # gated MLP or top-k MoE
    logits = head(final_norm(x))  [-> cap * tanh(logits / cap)]

The token mixer of each block is any layer called like
:class:`~selfattn.multihead.MultiHeadAttention` (``mixer(x, mask=..., cache=...)``):
multi-head attention with the options of chapter 11 (RoPE, GQA, QK-norm, soft-capping,
sinks, a gate, a sliding window), :class:`~selfattn.latent.MultiHeadLatentAttention`, or a
recurrent layer (Gated DeltaNet). Per-layer sliding windows live in the mixers
(``MultiHeadAttention(window=...)``), so a local/global schedule is a list of layers.
The post-norms (Gemma 2's "sandwich") are ``None`` where a family has none.

The feed-forward is a :class:`GatedMLP` (SwiGLU, GeGLU: ``down(act(gate(x)) * up(x))``)
or a :class:`TopKMoE` (a router picks ``top_k`` of ``num_experts`` gated MLPs per token,
weighted by the softmax of their router logits).

Shapes: ids ``(B, n)`` -> logits ``(B, n, V)``; ``d`` = ``d_model``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import (
    require_bool,
    require_choice,
    require_int,
    require_number,
    require_token_batch,
)
from ..multihead import KVCache, stack_causal_mask
from ..train import _mode

__all__ = [
    "GatedMLP",
    "TopKMoE",
    "RecurrentMixer",
    "RecurrentCache",
    "DecoderBlock",
    "DecoderLM",
    "ACTIVATIONS",
]

#: The activations of the gated MLPs (SwiGLU's SiLU, GeGLU's GELU, exact or tanh, and
#: gpt-oss's clamped variant, see :class:`TopKMoE`).
ACTIVATIONS = ("silu", "gelu", "gelu_tanh")


def _activation(name: str, x: torch.Tensor) -> torch.Tensor:
    if name == "silu":
        return F.silu(x)
    return F.gelu(x, approximate="tanh" if name == "gelu_tanh" else "none")


class GatedMLP(nn.Module):
    """``down(act(gate(x)) * up(x))``: SwiGLU (``act="silu"``, Llama, Qwen, DeepSeek) or GeGLU
    (``act="gelu_tanh"``, Gemma).

    Args:
        d_model: width ``d``. hidden: the inner width. act: one of :data:`ACTIVATIONS`.
        bias: biases on the three projections.

    ``forward(x (..., d))`` returns ``(..., d)``.
    """

    def __init__(self, d_model: int, hidden: int, *, act: str = "silu", bias: bool = False):
        super().__init__()
        d_model, hidden = require_int(d_model, "d_model", 1), require_int(hidden, "hidden", 1)
        self.act = require_choice(act, "act", ACTIVATIONS)
        bias = require_bool(bias, "bias")
        self.gate = nn.Linear(d_model, hidden, bias=bias)
        self.up = nn.Linear(d_model, hidden, bias=bias)
        self.down = nn.Linear(hidden, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(_activation(self.act, self.gate(x)) * self.up(x))


class TopKMoE(nn.Module):
    """A small mixture of experts: each token goes to the ``top_k`` of ``num_experts`` gated
    MLPs with the largest router logits, and their outputs are summed with the softmax of
    those ``top_k`` logits as weights.

    ``router``: ``nn.Linear(d, num_experts)``. Expert ``e`` computes
    ``down_e(glu(gate_e(x), up_e(x)))``, with biases, where ``glu`` is SwiGLU
    (``act="silu"``) or gpt-oss's clamped form (``act="gpt_oss"``):
    ``g = min(gate, limit)``, ``u = clamp(up, -limit, limit)``,
    ``glu = (u + 1) * g * sigmoid(alpha * g)``.

    Args:
        d_model: ``d``. hidden: each expert's inner width. num_experts: ``E``.
        top_k: experts per token. act: ``"silu"`` or ``"gpt_oss"``.
        alpha, limit: gpt-oss's ``swiglu_alpha`` and ``swiglu_limit``.

    Attributes:
        gate_w: ``(E, d, hidden)``, the experts' gate projections (``up_w`` likewise).
        down_w: ``(E, hidden, d)``.
        gate_b: ``(E, hidden)`` (``up_b`` likewise); ``down_b``: ``(E, d)``.

    Every expert runs on every token (the model is tiny; the unused outputs get weight 0).
    ``forward(x (..., d))`` returns ``(..., d)``.
    """

    def __init__(
        self,
        d_model: int,
        hidden: int,
        num_experts: int,
        top_k: int,
        *,
        act: str = "silu",
        alpha: float = 1.702,
        limit: float = 7.0,
    ):
        super().__init__()
        d, f = require_int(d_model, "d_model", 1), require_int(hidden, "hidden", 1)
        e = require_int(num_experts, "num_experts", 1)
        self.top_k = require_int(top_k, "top_k", 1, e)
        self.act = require_choice(act, "act", ("silu", "gpt_oss"))
        self.alpha = require_number(alpha, "alpha", positive=True)
        self.limit = require_number(limit, "limit", positive=True)
        self.num_experts = e
        self.router = nn.Linear(d, e)
        scale = d**-0.5
        self.gate_w = nn.Parameter(torch.randn(e, d, f) * scale)
        self.up_w = nn.Parameter(torch.randn(e, d, f) * scale)
        self.down_w = nn.Parameter(torch.randn(e, f, d) * f**-0.5)
        self.gate_b = nn.Parameter(torch.zeros(e, f))
        self.up_b = nn.Parameter(torch.zeros(e, f))
        self.down_b = nn.Parameter(torch.zeros(e, d))

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(weights, experts)``, each ``(..., top_k)``: the chosen experts of every token and
        the softmax of their router logits."""
        top, experts = self.router(x).topk(self.top_k, dim=-1)
        return torch.softmax(top, dim=-1), experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, experts = self.route(x)  # (..., k)
        gate = torch.einsum("...d,edf->...ef", x, self.gate_w) + self.gate_b
        up = torch.einsum("...d,edf->...ef", x, self.up_w) + self.up_b
        if self.act == "gpt_oss":
            gate = gate.clamp(max=self.limit)
            up = up.clamp(-self.limit, self.limit)
            glu = (up + 1) * gate * torch.sigmoid(gate * self.alpha)
        else:
            glu = F.silu(gate) * up
        out = torch.einsum("...ef,efd->...ed", glu, self.down_w) + self.down_b  # (..., E, d)
        chosen = out.gather(-2, experts.unsqueeze(-1).expand(*experts.shape, out.shape[-1]))
        return (weights.unsqueeze(-1) * chosen).sum(-2)


class RecurrentCache:
    """The state a :class:`RecurrentMixer` carries between decoding calls.

    ``state`` is the layer's own state object (``None`` before the first call); ``len(cache)``
    is the number of positions absorbed, so that a model reads its cache length the same way
    for attention and for recurrent layers.
    """

    def __init__(self) -> None:
        self.state = None
        self.steps = 0

    def __len__(self) -> int:
        return self.steps

    def reset(self) -> None:
        self.state, self.steps = None, 0


class RecurrentMixer(nn.Module):
    """A recurrent layer (``layer(x, state=..., return_state=True)``, such as
    :class:`~selfattn.delta_net.GatedDeltaNet`) as a token mixer of a :class:`DecoderBlock`.

    ``forward(x, mask=None, cache=None)``: the layer is causal by construction, so ``"causal"``
    needs nothing; a bool mask ``(B, 1, n, m)`` (a padding mask folded into the causal one, as
    :class:`DecoderLM` builds it) zeroes the inputs of padded positions, as ``transformers``'
    Qwen3-Next does. ``cache``: a :class:`RecurrentCache`, whose state is carried on.
    """

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer

    def new_cache(self) -> RecurrentCache:
        return RecurrentCache()

    def forward(self, x: torch.Tensor, *, mask=None, cache: RecurrentCache | None = None):
        if isinstance(mask, torch.Tensor):
            if mask.dtype != torch.bool or mask.dim() != 4:
                raise ValueError(
                    "a recurrent mixer takes 'causal', None or the bool (B, 1, n, m) mask "
                    f"of DecoderLM, got {mask.dtype} of shape {tuple(mask.shape)}"
                )
            n = x.shape[1]
            real = torch.diagonal(mask[:, 0, :, mask.shape[-1] - n :], dim1=-2, dim2=-1)
            if x.shape[0] > 1 and n > 1:  # transformers' rule (apply_mask_to_padding_states)
                x = x * real[..., None].to(x.dtype)
        if cache is None:
            return self.layer(x)
        if not isinstance(cache, RecurrentCache):
            raise TypeError(f"cache must be a RecurrentCache, got {type(cache).__name__}")
        y, cache.state = self.layer(x, state=cache.state, return_state=True)
        cache.steps += x.shape[1]
        return y


class DecoderBlock(nn.Module):
    """One block: ``x = x + post_mix_norm(mixer(mix_norm(x)))``, then
    ``x = x + post_mlp_norm(mlp(mlp_norm(x)))``.

    Args:
        mixer: the token mixer (attention or a recurrent layer), called
            ``mixer(x, mask=mask, cache=cache)``.
        mlp: the feed-forward (:class:`GatedMLP`, :class:`TopKMoE`).
        mix_norm, mlp_norm: the pre-norms.
        post_mix_norm, post_mlp_norm: Gemma 2's post-norms, or ``None``.
    """

    def __init__(self, mixer, mlp, mix_norm, mlp_norm, post_mix_norm=None, post_mlp_norm=None):
        super().__init__()
        self.mixer, self.mlp = mixer, mlp
        self.mix_norm, self.mlp_norm = mix_norm, mlp_norm
        self.post_mix_norm, self.post_mlp_norm = post_mix_norm, post_mlp_norm

    def new_cache(self):
        """An empty cache for the mixer: its own kind, else a
        :class:`~selfattn.multihead.KVCache`."""
        make = getattr(self.mixer, "new_cache", None)
        return make() if callable(make) else KVCache()

    def forward(self, x: torch.Tensor, *, mask=None, cache=None) -> torch.Tensor:
        h = self.mixer(self.mix_norm(x), mask=mask, cache=cache)
        if self.post_mix_norm is not None:
            h = self.post_mix_norm(h)
        x = x + h
        h = self.mlp(self.mlp_norm(x))
        if self.post_mlp_norm is not None:
            h = self.post_mlp_norm(h)
        return x + h


class DecoderLM(nn.Module):
    """A decoder-only language model: embedding, :class:`DecoderBlock` s, final norm, head.

    Args:
        embed: ``nn.Embedding(V, d)``.
        blocks: the :class:`DecoderBlock` s, in order.
        final_norm: the norm before the head.
        head: ``nn.Linear(d, V)`` (tied to ``embed`` or not).
        embed_scale: multiplies the embeddings (Gemma: ``sqrt(d)``), or ``None``.
        final_softcap: ``logits -> cap * tanh(logits / cap)`` (Gemma 2), or ``None``.

    ``forward(ids (B, n), *, attention_mask=None, caches=None)`` returns logits ``(B, n, V)``;
    ``attention_mask`` ``(B, m)`` is 1 at real tokens and 0 at padding (every key position,
    cached ones included), as in ``transformers``; ``caches`` from :meth:`new_caches` holds the
    mixers' state across calls (the new ``ids`` follow the cached positions).
    """

    def __init__(
        self,
        embed: nn.Embedding,
        blocks,
        final_norm: nn.Module,
        head: nn.Linear,
        *,
        embed_scale: float | None = None,
        final_softcap: float | None = None,
    ):
        super().__init__()
        self.embed = embed
        self.blocks = nn.ModuleList(blocks)
        self.final_norm = final_norm
        self.head = head
        self.embed_scale = require_number(
            embed_scale, "embed_scale", positive=True, allow_none=True
        )
        self.final_softcap = require_number(
            final_softcap, "final_softcap", positive=True, allow_none=True
        )

    def new_caches(self) -> list:
        """Empty caches, one per block (a :class:`~selfattn.multihead.KVCache` for attention)."""
        return [block.new_cache() for block in self.blocks]

    def forward(
        self, ids: torch.Tensor, *, attention_mask: torch.Tensor | None = None, caches=None
    ) -> torch.Tensor:
        require_token_batch(ids)
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError(
                f"caches must hold one entry per block ({len(self.blocks)}), got {len(caches)}"
            )
        x = self.embed(ids)
        if self.embed_scale is not None:
            x = x * torch.tensor(self.embed_scale, dtype=x.dtype)
        mask = self._mask(ids, attention_mask, caches)
        if isinstance(mask, str):  # "causal": built once for all the blocks
            mask = stack_causal_mask([block.mixer for block in self.blocks], x, caches)
        for i, block in enumerate(self.blocks):
            x = block(x, mask=mask, cache=None if caches is None else caches[i])
        logits = self.head(self.final_norm(x))
        if self.final_softcap is not None:
            logits = self.final_softcap * torch.tanh(logits / self.final_softcap)
        return logits

    @staticmethod
    def _mask(ids, attention_mask, caches):
        """``"causal"``, or the causal mask and the padding as one bool ``(B, 1, n, m)``."""
        if attention_mask is None:
            return "causal"
        n = ids.shape[1]
        past = 0 if caches is None else len(caches[0])
        m = past + n
        if attention_mask.shape != (ids.shape[0], m):
            raise ValueError(
                f"attention_mask must have shape (B, m) = ({ids.shape[0]}, {m}) (cached and "
                f"new positions), got {tuple(attention_mask.shape)}"
            )
        keys = attention_mask.to(torch.bool, copy=False)[:, None, None, :]  # (B, 1, 1, m)
        p = torch.arange(past, m, device=ids.device)[:, None]
        causal = torch.arange(m, device=ids.device)[None, :] <= p  # (n, m)
        return keys & causal

    @torch.no_grad()
    def generate(
        self,
        ids: torch.Tensor,
        max_new_tokens: int,
        *,
        use_cache: bool = True,
        return_logits: bool = False,
    ):
        """Greedy decoding: continue ``ids`` ``(B, p)`` by ``max_new_tokens`` tokens.

        With ``use_cache`` the prompt runs once (prefill) and each step feeds only the newest
        token against the caches; without it every step re-runs the whole sequence. Both give
        the same logits (to float rounding).

        Returns ``(B, p + max_new_tokens)`` ids, and the logits of every step ``(B, T, V)``
        with ``return_logits``.
        """
        require_token_batch(ids)
        max_new_tokens = require_int(max_new_tokens, "max_new_tokens", 1)
        use_cache = require_bool(use_cache, "use_cache")
        return_logits = require_bool(return_logits, "return_logits")
        with _mode(self, False):
            caches = self.new_caches() if use_cache else None
            seq, new, steps = ids, ids, []
            for _ in range(max_new_tokens):
                logits = self(new, caches=caches)[:, -1] if use_cache else self(seq)[:, -1]
                steps.append(logits)
                nxt = logits.argmax(dim=-1, keepdim=True)
                seq = torch.cat([seq, nxt], dim=1)
                new = nxt
        return (seq, torch.stack(steps, dim=1)) if return_logits else seq
