"""Transformers in miniature: one block, stacked into BERT, GPT, ViT and CLIP (chapter 9).

Everything here is built from one piece, :class:`TransformerBlock` (pre-LayerNorm, as
in GPT-2 and ViT: normalise, attend, add; normalise, MLP, add), on top of
:class:`~selfattn.multihead.MultiHeadAttention`. The four models differ only in what becomes a
token and which mask the attention uses:

========  ==========================  ===============================  ======================
model     tokens                      mask                             objective
========  ==========================  ===============================  ======================
MiniBERT  words                       padding only (bidirectional)     predict masked words
MiniGPT   characters                  causal (+ KV cache to generate)  predict the next char
MiniViT   image patches, class token  none                             classify the image
MiniCLIP  patches / caption words     none / padding; cross-attention  match images, captions
========  ==========================  ===============================  ======================

Shapes: ``B`` batch, ``n`` tokens, ``d`` = ``d_model``, ``h`` heads, ``V`` vocabulary,
``P`` patches. Positions are learned embeddings (chapter 6 compares the alternatives).
Models are small on purpose: each trains on a CPU in seconds.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import (
    require_bool,
    require_bool_mask,
    require_float,
    require_int,
    require_module,
    require_number,
    require_tensor,
    require_token_batch,
    require_token_ids,
)
from ..data.images import patchify
from ..multihead import KVCache, MultiHeadAttention, stack_causal_mask
from ..positional import LearnedPositionalEmbedding
from ..train import _mode

__all__ = [
    "MLP",
    "TransformerBlock",
    "Encoder",
    "Decoder",
    "MiniBERT",
    "MiniGPT",
    "PatchEmbedding",
    "MiniViT",
    "MiniCLIP",
    "clip_loss",
    "mlm_loss",
    "count_parameters",
]


#: GPT-2's standard deviation for every weight matrix and embedding.
GPT2_STD = 0.02


def _init_weights(module: nn.Module) -> None:
    # GPT-2's initialisation: small normal weights (position tables included), zero biases,
    # so a fresh model's logits are near zero and its first loss is close to log(V).
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding, LearnedPositionalEmbedding)):
            nn.init.normal_(m.weight, mean=0.0, std=GPT2_STD)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)


def _add_branch(x, out, weights: dict, name: str, return_weights: bool) -> torch.Tensor:
    """The residual ``x + out``; with ``return_weights``, ``out`` is ``(output, weights)`` and
    its weights are kept as ``weights[name]``."""
    if return_weights:
        out, weights[name] = out
    return x + out


def copy_weights(dst: nn.Module, src: nn.Module) -> None:
    """Copy a layer's ``weight`` into ``dst``'s, and its ``bias`` where ``dst`` has one (zeros
    where ``src`` has none): a ``Linear``, a ``LayerNorm`` or an ``Embedding`` of another
    library (``from_transformers``)."""
    with torch.no_grad():
        dst.weight.copy_(src.weight)
        if getattr(dst, "bias", None) is not None:
            b = getattr(src, "bias", None)
            dst.bias.copy_(b if b is not None else torch.zeros_like(dst.bias))


def sizes_of(config) -> dict:
    """A ``transformers`` config's sizes in the book's names: ``d_model`` (``hidden_size``),
    ``num_heads``, ``num_layers``."""
    return {
        "d_model": config.hidden_size,
        "num_heads": config.num_attention_heads,
        "num_layers": config.num_hidden_layers,
    }


def copy_stacked(dst: nn.Linear, parts) -> None:
    """Copy the ``Linear`` layers ``parts`` (separate q, k, v projections) into one fused
    ``dst`` (a ``qkv``): their weights stacked by rows, their biases where ``dst`` has one
    (zeros for a part without)."""
    with torch.no_grad():
        dst.weight.copy_(torch.cat([p.weight for p in parts]))
        if dst.bias is not None:
            dst.bias.copy_(
                torch.cat(
                    [
                        p.bias if p.bias is not None else p.weight.new_zeros(p.out_features)
                        for p in parts
                    ]
                )
            )


def stacked_linear(parts, *, bias: bool = True) -> nn.Linear:
    """A new ``Linear`` holding the ``Linear`` layers ``parts`` stacked by rows
    (:func:`copy_stacked`)."""
    fused = nn.Linear(parts[0].in_features, sum(p.out_features for p in parts), bias=bias)
    copy_stacked(fused, parts)
    return fused


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    require_module(model)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class MLP(nn.Module):
    """The position-wise feed-forward network: ``Linear(d, r d) -> GELU -> Linear(r d, d)``.

    Input and output ``(..., d_model)``; every token is transformed alone.
    """

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        d_model, hidden = require_int(d_model, "d_model", 1), require_int(hidden, "hidden", 1)
        self.fc = nn.Linear(d_model, hidden)
        self.proj = nn.Linear(hidden, d_model)
        # "tanh": GPT-2's gelu_new (set by selfattn.from_transformers); "none": exact GELU
        self.approximate = "none"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., d_model)`` -> ``(..., d_model)``."""
        return self.proj(F.gelu(self.fc(x), approximate=self.approximate))


class TransformerBlock(nn.Module):
    """One pre-LayerNorm Transformer block.

    ``x = x + SelfAttn(LN(x)); [x = x + CrossAttn(LN(x), context)]; x = x + MLP(LN(x))``.
    The residual stream ``x`` itself is never normalised, which keeps gradients flowing
    through deep stacks and makes the block trainable without a learning-rate warm-up.

    Args:
        d_model: width ``d``.
        num_heads: heads of each attention.
        mlp_ratio: MLP hidden width is ``mlp_ratio * d``; 0 leaves the MLP out (an
            attention-only block, chapters 1-2).
        cross_attention: add a cross-attention sub-layer (a decoder reading an encoder).
        rope: a rotary module for the self-attention (see
            :class:`~selfattn.multihead.MultiHeadAttention`), or ``None``.
        attention: the self-attention sub-layer, in place of a new
            :class:`~selfattn.multihead.MultiHeadAttention`: a module called like it
            (``attention(x, mask=, score_bias=, cache=, temperature=, return_weights=)``
            returns ``y (B, n, d)``, or ``(y, weights)`` when ``return_weights`` is true)
            with ``num_heads`` heads, such as chapter 2's
            :class:`~selfattn.models.tiny_attention.SelfAttention` with its ``W_O``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        mlp_ratio: int = 4,
        cross_attention: bool = False,
        rope: nn.Module | None = None,
        attention: nn.Module | None = None,
    ):
        super().__init__()
        cross_attention = require_bool(cross_attention, "cross_attention")
        d_model = require_int(d_model, "d_model", 1)
        num_heads = require_int(num_heads, "num_heads", 1)
        mlp_ratio = require_int(mlp_ratio, "mlp_ratio", 0)
        self.ln1 = nn.LayerNorm(d_model)
        if attention is None:
            attention = MultiHeadAttention(d_model, num_heads, rope=rope)
        elif rope is not None:
            raise ValueError("pass rope to the attention module given, not to the block")
        else:
            require_module(attention, "attention")
            if getattr(attention, "num_heads", None) != num_heads:
                raise ValueError(
                    f"attention has {getattr(attention, 'num_heads', None)} heads, the block "
                    f"num_heads={num_heads}"
                )
        self.attn = attention
        self.cross = None
        if cross_attention:
            self.ln_cross = nn.LayerNorm(d_model)
            self.cross = MultiHeadAttention(d_model, num_heads)
        self.ln2 = self.mlp = None
        if mlp_ratio:
            self.ln2 = nn.LayerNorm(d_model)
            self.mlp = MLP(d_model, mlp_ratio * d_model)

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask=None,
        score_bias=None,
        context: torch.Tensor | None = None,
        context_mask=None,
        cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
        temperature: float = 1.0,
        return_weights: bool = False,
    ):
        """Apply the block.

        Args:
            x: ``(B, n, d)``.
            mask: self-attention mask (``None``, ``"causal"``, or bool ``(n, m)`` / ``(B, 1, m)`` /
                ``(B, n, m)``; ``True`` = may attend), passed to
                :class:`~selfattn.multihead.MultiHeadAttention`.
            score_bias: a bias added to the self-attention scores (ALiBi, T5), passed to
                :class:`~selfattn.multihead.MultiHeadAttention`.
            context: ``(B, m, d)`` for the cross-attention sub-layer (required when it exists,
                unless ``cross_cache`` already holds the context's keys and values).
            context_mask: mask for the cross-attention, e.g. ``(B, 1, m)`` padding.
            cache, cross_cache: :class:`~selfattn.multihead.KVCache` of each attention, for
                decoding.
            temperature: divides the self-attention's scaled scores (1: as trained).
            return_weights: also return the attention weights.

        Returns:
            ``(B, n, d)``, or ``(y, weights)`` where ``weights`` is a dict with ``"self"``
            ``(B, h, n, m)`` and, with cross-attention, ``"cross"`` ``(B, h, n, m_context)``.
        """
        return_weights = require_bool(return_weights, "return_weights")
        self._require_cross_args(context, context_mask, cross_cache)
        # Weights only on request: the fast kernels ("torch", "flash") return none.
        weights = {}
        out = self.attn(
            self.ln1(x),
            mask=mask,
            score_bias=score_bias,
            cache=cache,
            temperature=temperature,
            return_weights=return_weights,
        )
        x = _add_branch(x, out, weights, "self", return_weights)
        if self.cross is not None:
            if context is None and (cross_cache is None or len(cross_cache) == 0):
                raise ValueError("this block has cross-attention: pass context (B, m, d_model)")
            out = self.cross(
                self.ln_cross(x),
                context=context,
                mask=context_mask,
                cache=cross_cache,
                return_weights=return_weights,
            )
            x = _add_branch(x, out, weights, "cross", return_weights)
        if self.mlp is not None:
            x = x + self.mlp(self.ln2(x))
        return (x, weights) if return_weights else x

    def _require_cross_args(self, context, context_mask, cross_cache) -> None:
        """A block without cross-attention takes no context, context mask or cross cache."""
        given = [
            name
            for name, value in (
                ("context", context),
                ("context_mask", context_mask),
                ("cross_cache", cross_cache),
            )
            if value is not None
        ]
        if self.cross is None and given:
            raise ValueError(
                "this block has no cross-attention (built with cross_attention=False), so "
                "context, context_mask and cross_cache must be None; got " + ", ".join(given)
            )


class Encoder(nn.Module):
    """A stack of :class:`TransformerBlock` with bidirectional attention and a final LayerNorm.

    ``forward(x (B, n, d), *, mask=None, return_weights=False)`` returns ``(B, n, d)``, or
    ``(y, [weights of layer 0, 1, ...])`` with each ``(B, h, n, n)``.
    """

    def __init__(self, d_model: int, num_heads: int, num_layers: int, *, mlp_ratio: int = 4):
        super().__init__()
        num_layers = require_int(num_layers, "num_layers", 1)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, num_heads, mlp_ratio=mlp_ratio) for _ in range(num_layers)
        )
        self.ln_f = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, *, mask=None, return_weights: bool = False):
        """``x`` ``(B, n, d)`` and an optional self-attention mask -> ``(B, n, d)`` (and the
        per-layer weights)."""
        return_weights = require_bool(return_weights, "return_weights")
        weights = []
        for block in self.blocks:
            x = block(x, mask=mask, return_weights=return_weights)
            if return_weights:
                x, w = x
                weights.append(w["self"])
        x = self.ln_f(x)
        return (x, weights) if return_weights else x


class Decoder(nn.Module):
    """A stack of causal :class:`TransformerBlock` (optionally with cross-attention) and a final
    LayerNorm.

    Position ``i`` sees positions ``0..i`` only, so the whole sequence trains in one pass
    and the model can generate one token at a time. With ``caches`` (one
    :class:`~selfattn.multihead.KVCache` per layer, from :meth:`new_caches`) each call appends its
    positions' keys and values, so a generation step processes only the new token.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_layers: int,
        *,
        mlp_ratio: int = 4,
        cross_attention: bool = False,
    ):
        super().__init__()
        cross_attention = require_bool(cross_attention, "cross_attention")
        num_layers = require_int(num_layers, "num_layers", 1)
        self.blocks = nn.ModuleList(
            TransformerBlock(
                d_model, num_heads, mlp_ratio=mlp_ratio, cross_attention=cross_attention
            )
            for _ in range(num_layers)
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.cross_attention = cross_attention

    def new_caches(self) -> list[dict[str, KVCache]]:
        """Empty caches, one ``{"self": KVCache, "cross": KVCache}`` per layer."""
        return [{"self": KVCache(), "cross": KVCache()} for _ in self.blocks]

    def forward(
        self,
        x: torch.Tensor,
        *,
        context: torch.Tensor | None = None,
        context_mask=None,
        caches: list | None = None,
        return_weights: bool = False,
    ):
        """Args: ``x`` ``(B, n, d)``; ``context`` ``(B, m, d)`` when built with cross-attention;
        ``caches`` from :meth:`new_caches`. Returns ``(B, n, d)`` (or with a list of per-layer
        weight dicts)."""
        return_weights = require_bool(return_weights, "return_weights")
        if not self.cross_attention and (context is not None or context_mask is not None):
            raise ValueError(
                "this decoder has no cross-attention (built with cross_attention=False), so "
                "context and context_mask must be None"
            )
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError(
                f"caches must hold one entry per layer ({len(self.blocks)}), got {len(caches)}"
            )
        weights = []
        # "causal" is aligned bottom-right: correct both for a full sequence and for new
        # tokens appended to a cache. Built once for all the layers.
        mask = stack_causal_mask(
            [block.attn for block in self.blocks],
            x,
            None if caches is None else [_self_cache(c) for c in caches],
        )
        for i, block in enumerate(self.blocks):
            layer_caches = caches[i] if caches is not None else {"self": None, "cross": None}
            x = block(
                x,
                mask=mask,
                context=context,
                context_mask=context_mask,
                cache=layer_caches["self"],
                cross_cache=layer_caches["cross"] if self.cross_attention else None,
                return_weights=return_weights,
            )
            if return_weights:
                x, w = x
                weights.append(w)
        x = self.ln_f(x)
        return (x, weights) if return_weights else x


def _self_cache(layer_caches):
    """A layer's self-attention cache from its ``{"self": ..., "cross": ...}`` entry."""
    return layer_caches.get("self") if isinstance(layer_caches, dict) else layer_caches


class _TokenEmbedding(nn.Module):
    """Token embedding plus a learned position embedding: ids ``(B, n)`` -> ``(B, n, d)``."""

    def __init__(self, vocab_size: int, d_model: int, max_len: int):
        super().__init__()
        vocab_size = require_int(vocab_size, "vocab_size", 1)
        max_len = require_int(max_len, "max_len", 1)
        d_model = require_int(d_model, "d_model", 1)
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = LearnedPositionalEmbedding(max_len, d_model)
        self.max_len = max_len

    def forward(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        """ids ``(B, n)`` at positions ``start .. start + n - 1`` -> ``(B, n, d)``."""
        require_token_batch(ids)
        start = require_int(start, "start", 0)
        require_token_ids(ids, "ids", self.tok.num_embeddings)
        return self.pos(self.tok(ids), offset=start)


class _LanguageModel(nn.Module):
    """What MiniBERT and MiniGPT share: word and position embeddings (``embed``), a stack of
    blocks, and a linear head from the last layer back to the ``V`` words (``head``), all
    GPT-2-initialised.

    A subclass names its stack (``_stack_name``, ``_stack``: an Encoder for BERT, a Decoder
    for GPT) and its default context length.
    """

    _stack_name: str
    _stack: type[Encoder] | type[Decoder]
    _default_max_len: int

    def __init__(
        self,
        vocab_size: int,
        *,
        d_model: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        max_len: int | None = None,
    ):
        super().__init__()
        max_len = self._default_max_len if max_len is None else max_len
        self.embed = _TokenEmbedding(vocab_size, d_model, max_len)
        # self.encoder or self.decoder
        self.add_module(self._stack_name, self._stack(d_model, num_heads, num_layers))
        self.head = nn.Linear(d_model, vocab_size)
        self.max_len = max_len
        _init_weights(self)

    def _logits(self, out, return_weights: bool):
        # the stack's output ``y`` or ``(y, weights)`` -> logits (and the weights)
        if return_weights:
            return self.head(out[0]), out[1]
        return self.head(out)


class MiniBERT(_LanguageModel):
    """A bidirectional encoder trained to fill in masked words (BERT in miniature).

    Every word sees every other real word, left and right; padding positions are masked out
    of the keys, so a sentence's outputs do not depend on how much padding follows it.

    Args:
        vocab_size: ``V``. pad_id: id of the padding token (never attended to).
        d_model, num_heads, num_layers: the encoder's size (default 64, 4, 2).
        max_len: longest sequence (default 32).
    """

    _stack_name, _stack, _default_max_len = "encoder", Encoder, 32

    def __init__(self, vocab_size: int, *, pad_id: int = 0, **size):
        super().__init__(vocab_size, **size)
        self.pad_id = require_int(pad_id, "pad_id", 0)

    def padding_mask(self, ids: torch.Tensor) -> torch.Tensor:
        """``(B, 1, n)`` bool: ``True`` at real tokens (keys that may be attended to)."""
        return (ids != self.pad_id).unsqueeze(1)

    def forward(self, ids: torch.Tensor, *, return_weights: bool = False):
        """ids ``(B, n)`` -> logits ``(B, n, V)`` (and per-layer weights ``(B, h, n, n)`` on
        request)."""
        return_weights = require_bool(return_weights, "return_weights")
        out = self.encoder(
            self.embed(ids), mask=self.padding_mask(ids), return_weights=return_weights
        )
        return self._logits(out, return_weights)


def mlm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the masked positions only (``targets == -100`` elsewhere).

    Args: logits ``(B, n, V)``, targets ``(B, n)``. Returns a scalar.
    """
    require_float(logits, "logits")
    require_tensor(targets, "targets")
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100
    )


class MiniGPT(_LanguageModel):
    """A causal decoder that predicts the next token (GPT in miniature), with KV-cache generation.

    Args:
        vocab_size: ``V``. d_model, num_heads, num_layers: the decoder's size (default 64, 4,
            2). max_len: context length (default 128; positions are learned, so generation
            stops there).
    """

    _stack_name, _stack, _default_max_len = "decoder", Decoder, 128

    def forward(
        self, ids: torch.Tensor, *, caches: list | None = None, return_weights: bool = False
    ):
        """ids ``(B, n)`` -> next-token logits ``(B, n, V)``.

        With ``caches`` (from ``self.decoder.new_caches()``), ``ids`` are the tokens that follow
        the cached ones: positions start at the cache length.
        """
        return_weights = require_bool(return_weights, "return_weights")
        start = len(caches[0]["self"]) if caches is not None else 0
        out = self.decoder(
            self.embed(ids, start=start), caches=caches, return_weights=return_weights
        )
        if return_weights:
            out = out[0], [w["self"] for w in out[1]]
        return self._logits(out, return_weights)

    def loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy (nats); ids and targets ``(B, n)``."""
        logits = self(ids)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    @torch.no_grad()
    def generate(
        self,
        ids: torch.Tensor,
        max_new_tokens: int,
        *,
        use_cache: bool = True,
        temperature: float = 1.0,
        greedy: bool = False,
        generator: torch.Generator | None = None,
        return_logits: bool = False,
    ):
        """Continue ``ids`` ``(B, p)`` by ``max_new_tokens`` tokens.

        With ``use_cache`` the prompt is run once (prefill) and each later step feeds only the
        newest token through the decoder, reusing the cached keys and values; without it every
        step re-runs the whole sequence. Both compute the same logits (to float rounding).

        Args:
            temperature: divides the logits before sampling (> 0).
            greedy: take the most likely token instead of sampling.
            generator: random generator for sampling.
            return_logits: also return the logits of every generated step ``(B, T, V)``.

        Returns:
            ``(B, p + max_new_tokens)`` ids (and the logits on request).
        """
        use_cache = require_bool(use_cache, "use_cache")
        greedy = require_bool(greedy, "greedy")
        return_logits = require_bool(return_logits, "return_logits")
        require_token_batch(ids)
        max_new_tokens = require_int(max_new_tokens, "max_new_tokens", 1)
        if ids.shape[1] + max_new_tokens > self.max_len:
            raise ValueError(
                f"prompt length {ids.shape[1]} + max_new_tokens {max_new_tokens} "
                f"exceeds max_len={self.max_len}"
            )
        temperature = require_number(temperature, "temperature", positive=True)
        with _mode(self, False):  # every submodule's mode restored after
            caches = self.decoder.new_caches() if use_cache else None
            step_logits = []
            seq, new = ids, ids
            for _ in range(max_new_tokens):
                logits = (
                    self(new, caches=caches)[:, -1] if use_cache else self(seq)[:, -1]
                )  # (B, V)
                step_logits.append(logits)
                if greedy:
                    nxt = logits.argmax(dim=-1, keepdim=True)
                else:
                    probs = F.softmax(logits / temperature, dim=-1)
                    nxt = torch.multinomial(probs, 1, generator=generator)
                seq = torch.cat([seq, nxt], dim=1)
                new = nxt
        return (seq, torch.stack(step_logits, dim=1)) if return_logits else seq


class PatchEmbedding(nn.Module):
    """Images -> tokens: cut into patches, project each linearly, prepend a class token, add
    positions.

    Args:
        image_size: side ``H = W``; patch: side of a patch (divides ``image_size``);
        channels: ``C``; d_model: ``d``.

    ``forward(images (B, C, H, W))`` returns ``(B, 1 + P, d)`` with ``P = (H / patch)^2``;
    token 0 is the learned class token.
    """

    def __init__(self, image_size: int, patch: int, channels: int, d_model: int):
        super().__init__()
        image_size = require_int(image_size, "image_size", 1)
        patch = require_int(patch, "patch", 1)
        channels = require_int(channels, "channels", 1)
        d_model = require_int(d_model, "d_model", 1)
        if image_size % patch:
            raise ValueError(f"image_size={image_size} must be a multiple of patch={patch}")
        self.image_size, self.patch, self.channels = image_size, patch, channels
        self.num_patches = (image_size // patch) ** 2
        self.proj = nn.Linear(channels * patch * patch, d_model)
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model))
        # one position per token, the class token's first
        self.pos = LearnedPositionalEmbedding(1 + self.num_patches, d_model)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images ``(B, C, H, W)`` -> tokens ``(B, 1 + P, d)``, the class token first."""
        expected = (self.channels, self.image_size, self.image_size)
        if (
            not isinstance(images, torch.Tensor)
            or images.dim() != 4
            or tuple(images.shape[1:]) != expected
        ):
            got = (
                tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
            )
            raise ValueError(
                f"images must have shape (B, {expected[0]}, {expected[1]}, {expected[2]}), "
                f"got {got}"
            )
        tokens = self.proj(patchify(images, self.patch))  # (B, P, d)
        cls = self.cls.expand(images.shape[0], -1, -1)
        return self.pos(torch.cat([cls, tokens], dim=1))


class MiniViT(nn.Module):
    """A Vision Transformer in miniature: patches are tokens, the class token's output is
    classified.

    Args:
        num_classes: number of labels. image_size, patch, channels: the images.
        d_model, num_heads, num_layers: the encoder's size.
    """

    def __init__(
        self,
        num_classes: int,
        *,
        image_size: int = 24,
        patch: int = 4,
        channels: int = 3,
        d_model: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
    ):
        super().__init__()
        num_classes = require_int(num_classes, "num_classes", 1)
        self.embed = PatchEmbedding(image_size, patch, channels, d_model)
        self.encoder = Encoder(d_model, num_heads, num_layers)
        self.head = nn.Linear(d_model, num_classes)
        _init_weights(self)

    def tokens(self, images: torch.Tensor, *, return_weights: bool = False):
        """The encoder's output for every token ``(B, 1 + P, d)`` (token 0 = class token)."""
        return_weights = require_bool(return_weights, "return_weights")
        return self.encoder(self.embed(images), return_weights=return_weights)

    def forward(self, images: torch.Tensor, *, return_weights: bool = False):
        """images ``(B, C, H, W)`` -> logits ``(B, num_classes)`` (and per-layer weights ``(B, h,
        1+P, 1+P)``)."""
        return_weights = require_bool(return_weights, "return_weights")
        out = self.tokens(images, return_weights=return_weights)
        x = out[0] if return_weights else out
        logits = self.head(x[:, 0])
        return (logits, out[1]) if return_weights else logits

    @torch.no_grad()
    def class_token_attention(self, images: torch.Tensor, *, layer: int = -1) -> torch.Tensor:
        """How much the class token attends to each patch in ``layer``, averaged over heads: ``(B,
        P)``.

        The class token's weight on itself is left out, so a row sums to at most 1.
        """
        _, weights = self.tokens(images, return_weights=True)
        return weights[layer][:, :, 0, 1:].mean(dim=1)


def clip_loss(logits: torch.Tensor) -> torch.Tensor:
    """CLIP's symmetric contrastive loss: pair ``i`` of a batch must pick caption ``i`` and vice
    versa.

    ``(CE(logits, arange(B)) + CE(logits^T, arange(B))) / 2`` for a ``(B, B)`` matrix of
    image-to-text logits whose diagonal holds the true pairs.
    """
    require_float(logits, "logits")
    if logits.dim() != 2 or logits.shape[0] != logits.shape[1]:
        raise ValueError(
            f"clip_loss needs a square (B, B) logit matrix, got shape {tuple(logits.shape)}"
        )
    if logits.shape[0] == 0:  # the mean over no pairs would be 0 / 0 = NaN
        raise ValueError("clip_loss needs at least one image-text pair, got a (0, 0) logit matrix")
    labels = torch.arange(logits.shape[0], device=logits.device)
    return 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))


def _masked_mean(x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """The mean of ``x`` ``(B, L, d)`` over the positions where ``real`` ``(B, L)`` is True.

    A row with no real position (a caption of padding only) has no mean: a ValueError, not
    the NaN of 0 / 0.
    """
    require_bool_mask(real, "real")
    if real.shape != x.shape[:2]:
        raise ValueError(
            f"real must have shape (B, L) = {tuple(x.shape[:2])} like the tokens, "
            f"got {tuple(real.shape)}"
        )
    empty = ~real.any(dim=1)
    if empty.any():
        rows = empty.nonzero().flatten().tolist()
        raise ValueError(
            f"caption(s) {rows} have no real word (every position is padding), so their mean "
            "is undefined; give each caption at least one word"
        )
    w = real.unsqueeze(-1).to(x.dtype)
    return (x * w).sum(1) / w.sum(1)


def _cross_match(
    ln: nn.LayerNorm,
    cross: MultiHeadAttention,
    head: nn.Linear,
    words: torch.Tensor,
    real: torch.Tensor,
    patches: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Image-text matching: words attend over patches, residual, mean of real words, head.

    Args: the layer's ``ln``, ``cross`` and one-output ``head``; words ``(B, L, d)``, real
    ``(B, L)`` bool, patches ``(B, P, d)``.

    Returns:
        ``(logits (B,), weights (B, h, L, P))``.
    """
    fused, weights = cross(ln(words), context=patches, return_weights=True)
    fused = words + fused
    return head(_masked_mean(fused, real)).squeeze(-1), weights


class MiniCLIP(nn.Module):
    """CLIP in miniature: an image encoder and a text encoder trained to agree, plus
    cross-attention.

    * ``encode_image``: a :class:`MiniViT`-style encoder; the class token's output, projected
      to ``embed_dim`` and L2-normalised.
    * ``encode_text``: a :class:`MiniBERT`-style encoder over caption words with a padding
      mask; the mean of the real tokens' outputs, projected and normalised.
    * ``forward``: the ``(B, B)`` matrix of cosine similarities times a learned temperature,
      trained with :func:`clip_loss`.
    * ``match``: a cross-attention layer in which each caption word (query) attends over the
      image's patches (keys and values), then a small head scores whether caption and image
      match (image-text matching, as in ALBEF and BLIP); its weights show which patches
      each word looks at.

    Args:
        text_vocab_size: caption vocabulary size ``V`` (pad id ``pad_id``).
        image_size, patch, channels: the images. d_model, num_heads, num_layers: both encoders.
        embed_dim: the shared embedding space. max_text_len: longest caption.
    """

    def __init__(
        self,
        text_vocab_size: int,
        *,
        image_size: int = 24,
        patch: int = 4,
        channels: int = 3,
        d_model: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        embed_dim: int = 32,
        max_text_len: int = 16,
        pad_id: int = 0,
    ):
        super().__init__()
        embed_dim = require_int(embed_dim, "embed_dim", 1)
        pad_id = require_int(pad_id, "pad_id", 0)
        self.image_embed = PatchEmbedding(image_size, patch, channels, d_model)
        self.image_encoder = Encoder(d_model, num_heads, num_layers)
        self.text_embed = _TokenEmbedding(text_vocab_size, d_model, max_text_len)
        self.text_encoder = Encoder(d_model, num_heads, num_layers)
        self.image_proj = nn.Linear(d_model, embed_dim, bias=False)
        self.text_proj = nn.Linear(d_model, embed_dim, bias=False)
        # CLIP initialises the temperature at 1/0.07 and learns its log.
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))
        self.ln_cross = nn.LayerNorm(d_model)
        self.cross = MultiHeadAttention(d_model, num_heads)
        self.match_head = nn.Linear(d_model, 1)
        self.pad_id = pad_id
        _init_weights(self)

    def image_tokens(self, images: torch.Tensor) -> torch.Tensor:
        """The image encoder's output for every token ``(B, 1 + P, d)`` (token 0 = class token)."""
        return self.image_encoder(self.image_embed(images))

    def text_tokens(self, ids: torch.Tensor):
        """The text encoder's output ``(B, L, d)`` and the real-token mask ``(B, L)`` (False at
        padding)."""
        require_token_batch(ids)
        real = ids != self.pad_id
        if not real.any(dim=1).all():
            raise ValueError("every caption needs at least one non-padding token")
        return self.text_encoder(self.text_embed(ids), mask=real.unsqueeze(1)), real

    def embed_image(self, tokens: torch.Tensor) -> torch.Tensor:
        """Image tokens ``(B, 1 + P, d)`` -> unit vectors ``(B, embed_dim)`` (from the class
        token)."""
        return F.normalize(self.image_proj(tokens[:, 0]), dim=-1)

    def embed_text(self, tokens: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """Word tokens ``(B, L, d)`` and mask ``(B, L)`` -> unit vectors ``(B, embed_dim)`` (mean
        of real words)."""
        return F.normalize(self.text_proj(_masked_mean(tokens, real)), dim=-1)

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """images ``(B, C, H, W)`` -> unit vectors ``(B, embed_dim)``."""
        return self.embed_image(self.image_tokens(images))

    def encode_text(self, ids: torch.Tensor) -> torch.Tensor:
        """caption ids ``(B, L)`` -> unit vectors ``(B, embed_dim)``."""
        return self.embed_text(*self.text_tokens(ids))

    def similarity(self, image_emb: torch.Tensor, text_emb: torch.Tensor) -> torch.Tensor:
        """``exp(logit_scale) * image_emb @ text_emb^T``: ``(B_img, B_txt)`` logits."""
        return self.logit_scale.exp() * image_emb @ text_emb.T

    def forward(self, images: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Image-to-text logits ``(B_img, B_txt)``: ``exp(logit_scale) * cos(image_i, text_j)``."""
        return self.similarity(self.encode_image(images), self.encode_text(ids))

    def match_tokens(
        self,
        image_tokens: torch.Tensor,
        word_tokens: torch.Tensor,
        real: torch.Tensor,
        *,
        return_weights: bool = False,
    ):
        """:meth:`match` on encoder outputs (so a training step can encode once and reuse them).

        Args: image_tokens ``(B, 1 + P, d)``, word_tokens ``(B, L, d)``, real ``(B, L)``.
        """
        return_weights = require_bool(return_weights, "return_weights")
        patches = image_tokens[:, 1:]  # the patch tokens, without the class token
        logit, weights = _cross_match(
            self.ln_cross, self.cross, self.match_head, word_tokens, real, patches
        )
        return (logit, weights) if return_weights else logit

    def match(self, images: torch.Tensor, ids: torch.Tensor, *, return_weights: bool = False):
        """Image-text matching through cross-attention from caption words to image patches.

        Args: images ``(B, C, H, W)`` and caption ids ``(B, L)``, pair by pair.

        Returns:
            Match logits ``(B,)`` (> 0 means "this caption describes this image"), and with
            ``return_weights`` the cross-attention weights ``(B, h, L, P)``: word -> patch.
        """
        return_weights = require_bool(return_weights, "return_weights")
        words, real = self.text_tokens(ids)
        return self.match_tokens(
            self.image_tokens(images), words, real, return_weights=return_weights
        )
