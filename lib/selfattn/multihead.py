"""Multi-head attention with a fused QKV projection, cross-attention and a KV cache (chapter 5).

The pieces, and how they fit:

* :class:`MultiHeadAttention` projects the inputs to queries, keys and values with
  **one** ``nn.Linear(d_model, 3 * d_model)`` (``qkv``; rows ordered q, k, v, the
  layout of ``nn.MultiheadAttention.in_proj_weight``), splits ``d_model`` into
  ``num_heads`` heads of ``d_head = d_model // num_heads``, runs scaled dot-product
  attention in every head at once (heads are a batch dimension ``(B, h, n, d_head)``),
  concatenates the heads and applies the output projection ``out``.
* Passing ``context`` makes it **cross-attention**: queries come from ``x``, keys and
  values from ``context``, through the q-rows and the k/v-rows of the same ``qkv``.
* :class:`KVCache` keeps the keys and values of past positions so that decoding a new
  token costs one projection of that token, not of the whole sequence.
* ``num_kv_heads`` makes it **grouped-query attention** (GQA, Ainslie et al., 2023):
  only ``num_kv_heads`` key/value heads, each shared by a group of
  ``num_heads // num_kv_heads`` consecutive query heads (query head ``i`` reads key/value
  head ``i // group``, torch SDPA's ``enable_gqa`` layout); ``num_kv_heads = 1`` is
  multi-query attention (MQA, Shazeer, 2019). ``qkv`` then has
  ``d_model + 2 * num_kv_heads * d_head`` output rows and the cache holds only the
  ``num_kv_heads`` heads; :meth:`MultiHeadAttention.grouped` converts a trained layer.
  The key/value heads are never copied to their query heads: the ``group`` query heads
  that share key/value head ``j`` become ``group * n`` query rows of head ``j``, so the
  scores ``(B, h_kv, group * n, m)`` are computed against the ``h_kv`` stored heads (the
  same numbers as repeating K/V, to float rounding, without a tensor of the repeated
  size; decoding against a long cache reads it once per key/value head, not once per
  query head).
* **One attention path.** The scores are scaled, masked and normalised by
  :func:`selfattn.attention.scaled_dot_product_attention`, with the layer's ``kernel``:
  ``"reference"`` (the default), ``"flash"`` (tiled, for ``mask=None`` or ``"causal"``,
  the causal diagonal aligned bottom-right) or ``"torch"`` (torch's fused kernel, no
  weights). Positional information enters through two
  hooks: a rotary module (``rope=``) turns queries and keys, a score bias
  (``score_bias=``, ALiBi or T5's relative bias) is added to the scores.

**Masks for heads.**
Scores have shape ``(B, h, n, m)``: batch, head, query, key. A mask is bool
(``True`` = may attend, torch SDPA's convention; ``nn.MultiheadAttention`` uses the
opposite) or float (added to the scores), and is read by its number of dimensions:

* 2-D ``(n, m)``: the same mask for every sequence and head (a causal mask);
* 3-D ``(B, n, m)`` or ``(B, 1, m)``: one mask per sequence, shared by the heads
  (``selfattn.padding_mask`` returns ``(B, 1, m)``); a head axis is inserted at dim 1;
* 4-D ``(B or 1, h or 1, n or 1, m)``: used as given.

Anything else, or a shape that does not broadcast to ``(B, h, n, m)``, raises ``ValueError``
(a 3-D mask is never silently broadcast against the head axis). The string ``"causal"``
builds a causal mask aligned **bottom-right**: query ``i`` of the ``n`` new queries sees
keys ``0 .. i + m - n``, which is ordinary causal masking without a cache and the right
alignment with one. A query whose keys are all masked gets zero weights (its head output
is zero, the layer returns the ``out`` bias), never NaN.

**Decoding with the cache.**
One :class:`KVCache` per layer. Each call appends the new positions' keys and values
(shape ``(B, h, n_new, d_head)``) along the sequence axis and attends over all cached
positions, so the keys seen by the ``n`` new queries number ``m = len(cache)`` after the
append. Feed the prompt once with ``mask="causal"`` (prefill), then one token at a time
(``n = 1`` sees every cached key, so no mask is needed; ``"causal"`` is also correct).
``"causal"`` is always aligned bottom-right (``causal_mask(n, m, alignment="bottom_right")``,
torch's ``causal_lower_right``; ``alignment="bottom_right"`` with the flash kernel):
the top-left alignment of SDPA's ``is_causal`` would let new query ``i`` see only keys
``0 .. i``, the first positions of the prompt::

    cache = KVCache()
    y = mha(prompt, mask="causal", cache=cache)     # (B, p, d), cache holds p positions
    y_t = mha(x_t, mask="causal", cache=cache)      # x_t (B, 1, d), cache holds p + 1

An explicit mask passed with a cache must cover every key, old and new: shape
``(..., n, len(cache) + n)``, aligned bottom-right (the new queries are the last rows of
the full causal mask: ``causal_mask(n, m, alignment="bottom_right")``). For cross-attention
the cache stores the context's keys and values on the first call and reuses them after.

**Elsewhere.** Chapter 5's decoding model
(:func:`~selfattn.models.attention_decoder.attention_stack`,
:func:`~selfattn.models.attention_decoder.generate`) lives in
:mod:`selfattn.models.attention_decoder`, the
layer's cost formulas (:func:`~selfattn.costs.mha_param_count`,
:func:`~selfattn.costs.mha_flops`, :func:`~selfattn.costs.kv_cache_bytes`) in
:mod:`selfattn.costs`; ``selfattn`` exports both.
"""

from __future__ import annotations

import copy
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    is_half,
    require_bool,
    require_choice,
    require_dropout,
    require_float,
    require_int,
    require_mask,
    require_module,
    require_number,
    require_same_device,
    require_tensor,
)
from .attention import (
    KERNELS,
    attend,
    attention_args,
    require_kernel_args,
    resolve_mask_arg,
    softmax,
)
from .masks import apply_mask, causal_mask
from .norms import RMSNorm

__all__ = [
    "MultiHeadAttention",
    "KVCache",
    "split_heads",
    "merge_heads",
    "heads_mask",
    "stack_causal_mask",
]


def require_layer_inputs(x, context, d_model: int, weight: torch.Tensor):
    """An attention layer's inputs, batched: ``(x, context, unbatched)``.

    ``x`` is ``(B, n, d_model)`` or unbatched ``(n, d_model)`` (then ``context``, if given, is
    ``(m, d_model)``); both are floating point, in the dtype of the layer's ``weight`` and on
    its device.
    """
    require_float(x, "x")
    if context is not None:
        require_float(context, "context")
    require_same_device(x=x, context=context, weights=weight)
    unbatched = x.dim() == 2
    if unbatched:
        x = x.unsqueeze(0)
        if context is not None:
            if context.dim() != 2:
                raise ValueError(
                    f"x is unbatched (n, d_model), so context must be (m, d_model), "
                    f"got {tuple(context.shape)}"
                )
            context = context.unsqueeze(0)
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(
            f"x must have shape (B, n, d_model={d_model}) or (n, d_model), got {tuple(x.shape)}"
        )
    if x.dtype != weight.dtype:
        raise TypeError(
            f"x has dtype {x.dtype} but the weights are {weight.dtype}; convert one of them"
        )
    if context is not None:
        batch = x.shape[0]
        if context.dim() != 3 or context.shape[-1] != d_model or context.shape[0] != batch:
            raise ValueError(
                f"context must have shape (B={batch}, m, d_model={d_model}), "
                f"got {tuple(context.shape)}"
            )
        if context.dtype != x.dtype:
            raise TypeError(f"context has dtype {context.dtype} but x has {x.dtype}")
    return x, context, unbatched


def covering_mask(mask, batch: int, heads: int, n: int, m: int, device) -> torch.Tensor:
    """A layer's mask tensor laid out for the scores ``(B, h, n, m)`` (:func:`heads_mask`),
    checked to cover the ``m`` keys, cached ones included."""
    mask = heads_mask(mask)
    if mask.shape[-1] != m:
        # Broadcasting over keys is always a mistake (a mask that forgot the cached keys).
        raise ValueError(
            f"mask's last dimension must be the number of keys m={m} (cached + new), "
            f"got shape {tuple(mask.shape)}"
        )
    require_mask(mask, (batch, heads, n, m), device)
    return mask


def self_attention_inputs(x, mask, cache, d_model: int, weight: torch.Tensor, heads: int):
    """The preamble of a self-attention layer with a cache: ``(x, unbatched, start, mask)``.

    ``x`` batched (:func:`require_layer_inputs`), ``start`` the number of cached positions
    (the new ones are ``start .. start + n - 1``), and ``mask`` as a tensor for the scores
    ``(B, h, n, m)`` with ``m = start + n`` (``"causal"`` aligned bottom-right), or ``None``.
    """
    x, _, unbatched = require_layer_inputs(x, None, d_model, weight)
    batch, n = x.shape[0], x.shape[1]
    start = 0 if cache is None else len(cache)
    mask, causal = resolve_mask_arg(mask)
    if causal:
        mask = causal_mask(n, start + n, alignment="bottom_right", device=x.device)
    elif mask is not None:
        mask = covering_mask(mask, batch, heads, n, start + n, x.device)
    return x, unbatched, start, mask


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(B, n, d_model)`` -> ``(B, h, n, d_head)``: split the features into heads, heads first.

    Raises:
        TypeError: ``x`` not a tensor, ``num_heads`` not an int.
        ValueError: ``x`` with fewer than 2 dims, ``num_heads < 1``, ``d_model`` not
            divisible by ``num_heads``.
    """
    require_tensor(x, "x")
    num_heads = require_int(num_heads, "num_heads", 1)
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., n, d_model), got {tuple(x.shape)}")
    *batch, n, d = x.shape
    if d % num_heads:
        raise ValueError(
            f"d_model={d} (last dim of {tuple(x.shape)}) is not divisible by num_heads={num_heads}"
        )
    return _split(x, num_heads)


def _split(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """:func:`split_heads` on a layer's own projection (trusting: no checks)."""
    *batch, n, d = x.shape
    return x.reshape(*batch, n, num_heads, d // num_heads).transpose(-3, -2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(B, h, n, d_head)`` -> ``(B, n, h * d_head)``: the inverse of :func:`split_heads`.

    Concatenates the heads. Raises ``ValueError`` for fewer than 3 dims.
    """
    require_tensor(x, "x")
    if x.dim() < 3:
        raise ValueError(f"x must have shape (..., h, n, d_head), got {tuple(x.shape)}")
    return _merge(x)


def _merge(x: torch.Tensor) -> torch.Tensor:
    """:func:`merge_heads` on a layer's own heads (trusting: no checks)."""
    *batch, h, n, dh = x.shape
    return x.transpose(-3, -2).reshape(*batch, n, h * dh)


def heads_mask(mask: torch.Tensor) -> torch.Tensor:
    """A mask laid out for scores ``(B, h, n, m)``, read by its number of dimensions.

    ``(n, m)`` and ``(B, h, n, m)`` are returned as they are; a 3-D ``(B, n, m)`` (one mask per
    sequence, e.g. :func:`~selfattn.masks.padding_mask`'s ``(B, 1, m)``) gets a head axis at dim 1,
    ``(B, 1, n, m)``, so that broadcasting never reads the batch axis as the head axis.

    Raises:
        TypeError: ``mask`` not a tensor.
        ValueError: a mask with other than 2, 3 or 4 dimensions.
    """
    require_tensor(mask, "mask")
    if mask.dim() == 3:
        return mask.unsqueeze(1)
    if mask.dim() not in (2, 4):
        raise ValueError(
            "mask must be 2-D (n, m), 3-D (B, n, m) or 4-D (B, h, n, m), "
            f"got shape {tuple(mask.shape)}"
        )
    return mask


class KVCache:
    """The keys and values of the positions a layer has already seen (one cache per layer).

    Attributes:
        k: cached keys ``(B, h, t, d_head)`` after the first append, else ``None``
            (``h`` is the layer's number of key/value heads, ``num_kv_heads`` with GQA).
        v: cached values ``(B, h, t, d_head)``, like ``k``.
        cross: ``True`` when a cross-attention layer filled it (its keys/values are the
            context's and are reused, not appended to, on later calls).

    A cache belongs to the first :class:`MultiHeadAttention` that uses it, and remembers
    whether that was self- or cross-attention and, for cross-attention, the context. A use
    that does not match (another layer, another model's layer, a different context, a
    self-attention cache given a context) is a ValueError that says what to do: a fresh
    ``KVCache()`` per layer, or :meth:`reset` to start over.

    ``len(cache)`` is ``t``, the number of cached positions; :attr:`nbytes` is the memory
    the cached tensors hold, ``2 * B * h * t * d_head * element_size`` (per layer).
    Appending concatenates along the sequence axis (simple, and what a dynamic-length
    cache does); a production cache would preallocate ``max_len`` positions instead.
    """

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.cross = False  # set when a cross-attention layer filled it from its context
        self._owner: weakref.ref | None = None  # the layer that uses it
        self._context: torch.Tensor | None = None  # cross-attention: the context it holds

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def __repr__(self) -> str:
        shape = None if self.k is None else tuple(self.k.shape)
        return f"KVCache(positions={len(self)}, k/v shape={shape})"

    @property
    def nbytes(self) -> int:
        """Bytes held by ``k`` and ``v`` together (0 when empty)."""
        if self.k is None:
            return 0
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()

    def reset(self) -> None:
        """Forget every cached position."""
        self.k = self.v = None
        self.cross = False
        self._owner = self._context = None

    def _claim(self, layer: nn.Module, context: torch.Tensor | None) -> None:
        """Refuse a use by another layer, or with a context this cache does not hold."""
        owner = None if self._owner is None else self._owner()
        if len(self) and owner is not None and owner is not layer:
            raise ValueError(
                "this KVCache holds the keys and values of another attention layer (each layer "
                "of each model needs its own cache): give this layer a fresh KVCache(), or call "
                "cache.reset() to start over"
            )
        if len(self) and self.cross and context is not None:
            held = self._context
            if (
                held is not None
                and context is not held
                and not (context.shape == held.shape and torch.equal(context, held))
            ):
                raise ValueError(
                    f"this cross-attention cache holds the keys and values of another context "
                    f"(m={len(self)} positions); pass context=None to reuse them, or call "
                    "cache.reset() (or use a fresh KVCache) for a new context"
                )
        self._owner = weakref.ref(layer)

    def _check_use(self, layer: nn.Module, context: torch.Tensor | None, x: torch.Tensor) -> bool:
        """Refuse a use this cache cannot serve (``x`` batched); return whether it already
        holds a cross-attention context's keys and values, to be reused."""
        if context is not None and len(self) and not self.cross:
            raise ValueError(
                "this cache holds a self-attention layer's keys; a cross-attention call "
                "needs its own KVCache"
            )
        self._claim(layer, context)
        reuse = self.cross and len(self) > 0
        if self.cross and not reuse and context is None:
            raise ValueError(
                "cross-attention needs context on the first call (the cache is empty)"
            )
        if len(self):
            if self.k.shape[0] != x.shape[0]:
                raise ValueError(
                    f"the cache holds batch size {self.k.shape[0]}, x has {x.shape[0]}"
                )
            if self.k.device != x.device or self.k.dtype != x.dtype:
                raise ValueError(
                    f"the cache holds {self.k.dtype} on {self.k.device}, "
                    f"x is {x.dtype} on {x.device}"
                )
        return reuse

    def _filled(self, cross: bool, context: torch.Tensor | None) -> None:
        self.cross = cross
        if cross and context is not None:
            self._context = context.detach()

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add new positions and return all cached keys and values.

        Args:
            k: new keys ``(B, h, n_new, d_head)``.
            v: new values ``(B, h, n_new, d_head)``.

        Returns:
            ``(k_all, v_all)``, each ``(B, h, t + n_new, d_head)``.

        Raises:
            ValueError: shapes that disagree with each other or with what is cached.
        """
        require_float(k, "k")
        require_float(v, "v")
        if k.dtype != v.dtype:
            raise TypeError(
                f"KVCache.append needs k and v of one dtype, got k {k.dtype} and v {v.dtype}"
            )
        if k.shape != v.shape or k.dim() != 4:
            raise ValueError(
                "KVCache.append needs k and v of one shape (B, h, n_new, d_head), "
                f"got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        require_same_device(k=k, v=v)
        if self.k is not None and self.k.device != k.device:
            raise ValueError(f"the cache is on {self.k.device}, cannot append k on {k.device}")
        if self.k is not None and (
            self.k.shape[:2] != k.shape[:2]
            or self.k.shape[-1] != k.shape[-1]
            or self.k.dtype != k.dtype
        ):
            raise ValueError(
                f"the cache holds k of shape {tuple(self.k.shape)} {self.k.dtype} "
                f"(B, h, t, d_head); cannot append {tuple(k.shape)} {k.dtype}"
            )
        return self._extend(k, v)

    def _extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`append` without its checks, for the layer that built ``k`` and ``v`` (and
        claimed the cache): ``(k_all, v_all)``."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v


def _stack_group(t: torch.Tensor, group: int, n: int) -> torch.Tensor:
    """``(..., H, r, c)`` -> ``(..., H // group, group * n, c)``: a group's heads as rows.

    ``H`` is the number of query heads ``h`` (or 1 for a tensor shared by all heads),
    ``r`` is ``n`` (or 1 for one row shared by all queries); a 2-D ``(r, c)`` mask counts
    as ``H = 1``. Row ``j * n + i`` of the result is query ``i`` of head ``j`` of the
    group, so the query heads ``g * group .. g * group + group - 1`` that share key/value
    head ``g`` (torch SDPA's ``enable_gqa`` layout) all become rows of head ``g``.
    """
    if group == 1:
        return t
    if t.dim() == 2:
        t = t.unsqueeze(0)
    *batch, heads, rows, c = t.shape
    if heads == 1 and rows == 1:
        return t  # the same for every query of every head: it broadcasts as it is
    t = t.expand(*batch, heads, n, c)
    if heads == 1:
        t = t.unsqueeze(-3).expand(*batch, 1, group, n, c)
    # sizes spelled out: with n = 0 a -1 would be ambiguous
    return t.reshape(*batch, max(heads // group, 1), group * n, c)


def _window_mask(n: int, m: int, window: int, device) -> torch.Tensor:
    """``(n, m)`` bool: the ``n`` queries are the last of ``m`` positions; query position ``p``
    sees keys ``p - window < j <= p``."""
    p = torch.arange(m - n, m, device=device)[:, None]
    j = torch.arange(m, device=device)[None, :]
    return (j <= p) & (j > p - window)


def _and_masks(mask: torch.Tensor | None, allowed: torch.Tensor) -> torch.Tensor:
    """``mask`` (bool, float or ``None``) further restricted to where ``allowed`` is True."""
    if mask is None:
        return allowed
    if mask.dtype == torch.bool:
        return mask & allowed
    return torch.where(allowed, mask, torch.full((), float("-inf"), dtype=mask.dtype))


class MultiHeadAttention(nn.Module):
    """Multi-head (self- or cross-) attention with one fused QKV projection.

    Args:
        d_model: model width ``d``; must be divisible by ``num_heads``.
        num_heads: number of heads ``h``; each works in ``d_head = d_model // num_heads`` dims.
        num_kv_heads: number of key/value heads ``h_kv`` (divides ``h``); ``None`` means
            ``h`` (multi-head attention), 1 is multi-query attention, in between GQA.
        bias: whether ``qkv`` and ``out`` have biases.
        dropout: dropout probability on the attention weights (training mode only).
        kernel: ``"reference"`` (default): :func:`selfattn.attention.scaled_dot_product_attention`,
            any mask, weights on request. ``"flash"``:
            :func:`selfattn.efficient.flash.flash_attention` with ``alignment="bottom_right"``,
            the n x m scores never stored; it takes ``mask=None`` or ``"causal"`` only,
            no ``return_weights`` and no dropout in training. ``"torch"``: torch's fused
            ``scaled_dot_product_attention``, any mask, no ``return_weights``. Settable later
            (``layer.kernel = "flash"``); all give the same result (to float rounding).
        rope: a rotary module (:class:`selfattn.positional.RotaryEmbedding` of ``d_head``)
            that rotates every head's queries and new keys by their positions before the
            scores; with a cache, the new positions start at ``len(cache)`` (the cached keys
            were rotated when they were added). Self-attention only.
        d_head: per-head width when it is not ``d_model // num_heads`` (Qwen3, Gemma); the
            query width is then ``d_q = num_heads * d_head``: ``qkv`` maps ``d_model`` to
            ``d_q + 2 * num_kv_heads * d_head`` and ``out`` maps ``d_q`` to ``d_model``
            (``d_model`` need not divide by ``num_heads``).
        scale: the score scale, ``1 / sqrt(d_head)`` by default (Gemma 2:
            ``query_pre_attn_scalar ** -0.5``); ``temperature`` still divides it.
        qk_norm: QK-norm (Qwen3, Gemma 3): an :class:`~selfattn.norms.RMSNorm` over
            ``d_head`` (weight of size ``d_head``, shared by the heads) on every head's
            queries (``q_norm``) and keys (``k_norm``), before RoPE.
        norm_eps: the epsilon of those norms.
        softcap: soft-capping of the scores (Gemma 2): ``s -> softcap * tanh(s / softcap)``
            after the scale, before the mask. Formula path only (``kernel="reference"``).
        sinks: learned sink logits (gpt-oss): one logit per query head, ``sink_logits``
            ``(h,)``, joins every row's softmax, takes weight and carries no value:
            ``a_j = exp(s_j) / (exp(sink) + sum_j' exp(s_j'))``, so a row's weights sum to
            less than 1. Formula path only (``kernel="reference"``).
        gate: the output gate of Gated Attention (Qwen3-Next): a projection ``gate``
            (``d_model -> d_q``, with ``bias``) of ``x``, and
            ``y = out(heads * sigmoid(gate(x)))`` element by element.
        window: a causal sliding window kept by the layer (Mistral, Gemma 2's and gpt-oss's
            local layers): the query at position ``p`` sees only keys ``p - window < j <= p``
            (the last ``window`` positions, itself included, aligned bottom-right as the
            causal mask, so with a cache too); combined with any ``mask`` passed (a padding
            mask). Self-attention only; not with ``kernel="flash"``.

    ``d_head`` to ``window`` are the options of today's LLMs (chapter 11): each is off by
    default, and with all of them off the layer is chapter 5's, output for output.

    Attributes:
        qkv: ``nn.Linear(d_model, 3 * d_model)``; weight rows ``[0:d]`` make queries,
            ``[d:2d]`` keys, ``[2d:3d]`` values (the layout of
            ``nn.MultiheadAttention.in_proj_weight``). With ``num_kv_heads`` it has
            ``d + 2 d_kv`` rows, ``d_kv = num_kv_heads * d_head``: queries, keys, values.
        out: ``nn.Linear(d_model, d_model)`` (``nn.Linear(d_q, d_model)`` with ``d_head``),
            the output projection ``W_O``.
        rope: the rotary module, or ``None``.
        q_norm: the QK-norm :class:`~selfattn.norms.RMSNorm` of the queries, or ``None``.
        k_norm: that of the keys, or ``None``.
        sink_logits: ``(h,)`` learned sink logits, or ``None``.
        gate: the output gate's ``nn.Linear(d_model, d_q)``, or ``None``.

    See the module docstring for how masks are shaped for heads and how the cache is used.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        kernel: str = "reference",
        rope: nn.Module | None = None,
        d_head: int | None = None,
        scale: float | None = None,
        qk_norm: bool = False,
        norm_eps: float = 1e-6,
        softcap: float | None = None,
        sinks: bool = False,
        gate: bool = False,
        window: int | None = None,
    ):
        super().__init__()
        kernel = require_choice(kernel, "kernel", KERNELS)
        d_model = require_int(d_model, "d_model", 1)
        num_heads = require_int(num_heads, "num_heads", 1)
        bias = require_bool(bias, "bias")
        if d_head is None and d_model % num_heads:
            raise ValueError(f"d_model={d_model} must be divisible by num_heads={num_heads}")
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        num_kv_heads = require_int(num_kv_heads, "num_kv_heads", 1)
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads} "
                "(each key/value head serves a group of query heads)"
            )
        dropout = require_dropout(dropout)
        d_head = d_model // num_heads if d_head is None else require_int(d_head, "d_head", 1)
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_head
        self.num_kv_heads = num_kv_heads
        self.d_q = num_heads * d_head  # width of the queries (d_model unless d_head is given)
        self.d_kv = num_kv_heads * self.d_head  # width of the keys (and of the values)
        self.dropout = dropout
        self.kernel = kernel
        self.scale = require_number(scale, "scale", positive=True, allow_none=True)
        self.softcap = require_number(softcap, "softcap", positive=True, allow_none=True)
        self.window = None if window is None else require_int(window, "window", 1)
        self.qkv = nn.Linear(d_model, self.d_q + 2 * self.d_kv, bias=bias)
        self.out = nn.Linear(self.d_q, d_model, bias=bias)
        norm_eps = require_number(norm_eps, "norm_eps", positive=True)
        if require_bool(qk_norm, "qk_norm"):
            self.q_norm = RMSNorm(d_head, eps=norm_eps)
            self.k_norm = RMSNorm(d_head, eps=norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.sink_logits = (
            nn.Parameter(torch.zeros(num_heads)) if require_bool(sinks, "sinks") else None
        )
        self.gate = nn.Linear(d_model, self.d_q, bias=bias) if require_bool(gate, "gate") else None
        if rope is not None:
            require_module(rope, "rope")
            if getattr(rope, "d_head", self.d_head) != self.d_head:
                raise ValueError(
                    f"rope must rotate heads of d_head={self.d_head}, got one built for "
                    f"d_head={rope.d_head}"
                )
        self.rope = rope

    def extra_repr(self) -> str:
        kv = "" if self.num_kv_heads == self.num_heads else f"num_kv_heads={self.num_kv_heads}, "
        kernel = "" if self.kernel == "reference" else f", kernel={self.kernel!r}"
        for name in ("scale", "softcap", "window"):
            if getattr(self, name) is not None:
                kernel += f", {name}={getattr(self, name):g}"
        for name, on in (
            ("qk_norm", self.q_norm),
            ("sinks", self.sink_logits),
            ("gate", self.gate),
        ):
            if on is not None:
                kernel += f", {name}=True"
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, {kv}d_head={self.d_head}, "
            f"dropout={self.dropout}{kernel}"
        )

    def _options(self) -> dict:
        """The keyword options of chapter 11 that this layer was built with."""
        return dict(
            d_head=self.d_head,
            scale=self.scale,
            qk_norm=self.q_norm is not None,
            norm_eps=1e-6 if self.q_norm is None else self.q_norm.eps,
            softcap=self.softcap,
            sinks=self.sink_logits is not None,
            gate=self.gate is not None,
            window=self.window,
        )

    def _plain(self) -> bool:
        """Whether none of chapter 11's options is on (``d_head`` the default one)."""
        o = self._options()
        return (
            self.d_q == self.d_model
            and o["scale"] is None
            and o["softcap"] is None
            and o["window"] is None
            and not (o["qk_norm"] or o["sinks"] or o["gate"])
        )

    # -- interop with torch ------------------------------------------------------
    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """A copy of ``nn.MultiheadAttention``'s weights.

        It must use one ``in_proj_weight``, i.e. kdim = vdim = d.
        """
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"expected an nn.MultiheadAttention, got {type(mha).__name__}")
        if mha.in_proj_weight is None or mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError(
                "only nn.MultiheadAttention with a packed in_proj_weight, no bias_k/bias_v "
                "and no add_zero_attn"
            )
        bias = mha.in_proj_bias is not None
        new = cls(mha.embed_dim, mha.num_heads, bias=bias, dropout=mha.dropout)
        with torch.no_grad():
            new.qkv.weight.copy_(mha.in_proj_weight)
            new.out.weight.copy_(mha.out_proj.weight)
            if bias:
                new.qkv.bias.copy_(mha.in_proj_bias)
                new.out.bias.copy_(mha.out_proj.bias)
        return new.to(mha.in_proj_weight.device, mha.in_proj_weight.dtype)

    def to_torch(self) -> nn.MultiheadAttention:
        """An ``nn.MultiheadAttention(batch_first=True)`` holding the same weights."""
        if not self._plain():
            raise ValueError(
                "nn.MultiheadAttention has none of the options d_head, scale, qk_norm, softcap, "
                f"sinks, gate, window; this layer has {self.extra_repr()}"
            )
        if self.num_kv_heads != self.num_heads:
            raise ValueError(
                "nn.MultiheadAttention has no grouped-query form: this layer has "
                f"num_kv_heads={self.num_kv_heads} < num_heads={self.num_heads}"
            )
        bias = self.qkv.bias is not None
        mha = nn.MultiheadAttention(
            self.d_model, self.num_heads, dropout=self.dropout, bias=bias, batch_first=True
        )
        mha = mha.to(self.qkv.weight.device, self.qkv.weight.dtype)
        with torch.no_grad():
            mha.in_proj_weight.copy_(self.qkv.weight)
            mha.out_proj.weight.copy_(self.out.weight)
            if bias:
                mha.in_proj_bias.copy_(self.qkv.bias)
                mha.out_proj.bias.copy_(self.out.bias)
        return mha

    def grouped(self, num_kv_heads: int) -> MultiHeadAttention:
        """A grouped-query copy of this layer with ``num_kv_heads`` key/value heads.

        Each new key (value) head is the **mean** of the key (value) projections of the
        query heads in its group (Ainslie et al., 2023, who then train a little more);
        queries, the output projection and the rotary module (``rope``) are copied.
        ``grouped(num_heads)`` is an exact copy. The layer must itself have one key/value
        head per query head.
        """
        if self.num_kv_heads != self.num_heads:
            raise ValueError(
                f"grouped() converts a multi-head layer; this one already has "
                f"num_kv_heads={self.num_kv_heads}"
            )
        bias = self.qkv.bias is not None
        new = MultiHeadAttention(
            self.d_model,
            self.num_heads,
            num_kv_heads=num_kv_heads,
            bias=bias,
            dropout=self.dropout,
            kernel=self.kernel,
            rope=copy.deepcopy(self.rope),  # None, or the same rotation as this layer's
            **self._options(),
        ).to(self.qkv.weight.device, self.qkv.weight.dtype)
        d, g = self.d_q, self.num_heads // new.num_kv_heads

        def pool(t: torch.Tensor) -> torch.Tensor:
            # rows (h * d_head, ...) -> (h_kv, g, d_head, ...): average the g heads of a group
            return t.reshape(new.num_kv_heads, g, self.d_head, *t.shape[1:]).mean(1).flatten(0, 1)

        with torch.no_grad():
            w = self.qkv.weight
            new.qkv.weight.copy_(torch.cat([w[:d], pool(w[d : 2 * d]), pool(w[2 * d :])]))
            new.out.weight.copy_(self.out.weight)
            if bias:
                b = self.qkv.bias
                new.qkv.bias.copy_(torch.cat([b[:d], pool(b[d : 2 * d]), pool(b[2 * d :])]))
                new.out.bias.copy_(self.out.bias)
            for name in ("q_norm", "k_norm", "gate"):
                if getattr(self, name) is not None:
                    getattr(new, name).load_state_dict(getattr(self, name).state_dict())
            if self.sink_logits is not None:
                new.sink_logits.copy_(self.sink_logits)
        return new.train(self.training)

    # -- forward -----------------------------------------------------------------
    def forward(
        self,
        x: torch.Tensor,
        *,
        context: torch.Tensor | None = None,
        mask: torch.Tensor | str | None = None,
        score_bias: torch.Tensor | Callable[[int, int], torch.Tensor] | None = None,
        cache: KVCache | None = None,
        temperature: float = 1.0,
        return_weights: bool = False,
    ):
        """``y = Concat(head_1, ..., head_h) W^O``, ``head_i = Attention(Q_i, K_i, V_i)``,
        ``Q = x W^Q``, ``K = c W^K``, ``V = c W^V`` (``c``: ``context``, else ``x``).

        Args:
            x: queries' inputs ``(B, n, d_model)`` (or unbatched ``(n, d_model)``).
            context: keys' and values' inputs ``(B, m, d_model)`` for cross-attention;
                ``None`` for self-attention (then ``m = n``, plus cached positions).
            mask: ``None``, ``"causal"``, or a bool/float tensor read as ``(n, m)``,
                ``(B, n, m)`` or ``(B, h, n, m)``; see the module docstring.
            score_bias: a float bias added to the scaled scores before the softmax (ALiBi,
                T5's relative bias): a tensor ``(n, m)``, ``(h, n, m)`` or ``(B, h, n, m)``
                (the head axis is dim -3), or a callable ``(n, m) -> tensor`` such as
                :class:`selfattn.positional.RelativePositionBias` or
                ``functools.partial(alibi_bias, h)``, whose queries are the last ``n`` of
                the ``m`` positions (decoding against a cache). A bool ``mask`` sets the
                bias to ``-inf`` where it is False; a float mask is added to it.
            cache: a :class:`KVCache`; self-attention appends the new keys/values to it
                and attends over everything cached; cross-attention fills it from
                ``context`` once and reuses it (``context`` may then be ``None``).
            temperature: divides the scaled scores (chapter 2): below 1 sharpens the weights,
                above 1 flattens them; 1 (the default) is the trained layer.
            return_weights: also return the per-head weights.

        Returns:
            ``y`` of shape ``(B, n, d_model)``, or ``(y, weights)`` with weights
            ``(B, h, n, m)`` (before dropout; not averaged over heads, unlike
            ``nn.MultiheadAttention``'s default).

        Raises:
            TypeError: non-tensor or non-float inputs, dtypes that differ from the weights'.
            ValueError: a last dimension other than ``d_model``, mismatched batches,
                a mask that does not broadcast to ``(B, h, n, m)``.
        """

        a = self._resolve(x, context, mask, score_bias, cache, temperature, return_weights)
        q, k, v = self._project(a.x, a.context, need_kv=not a.reuse_cache)  # c = context or x
        q = _split(q, self.num_heads)  # (B, h, n, d_head)
        k, v = self._keys_values(k, v, a)  # (B, h_kv, m_new, d_head), None with a full cache
        if self.q_norm is not None:  # QK-norm, before RoPE
            q = self.q_norm(q)
            k = None if k is None else self.k_norm(k)
        if self.rope is not None:
            q, k = self._rotate(q, k, a)  # positions after the cached ones
        if a.cache is not None:
            k, v = self._cached(k, v, a)  # (B, h_kv, m, d_head): old positions, then new
        q, k, v, mask, causal = self._group_query_heads(q, k, v, a)  # GQA: heads as rows
        if self.softcap is None and self.sink_logits is None:
            heads = attend(  # arguments built and checked here: the trusting path
                attention_args(
                    q,
                    k,
                    v,
                    mask,
                    causal=causal,
                    scale=a.scale,
                    kernel=self.kernel,
                    return_weights=a.return_weights,
                    dropout=a.dropout,
                )
            )  # (B, h_kv, group * n, d_head), and (B, h_kv, group * n, m) weights on request
        else:
            heads = self._capped_sunk_attention(q, k, v, mask, a)
        heads, weights = heads if a.return_weights else (heads, None)
        heads = _merge(heads.reshape(a.batch, self.num_heads, a.n, self.d_head))
        if self.gate is not None:  # Gated Attention: every output feature gated by x
            heads = heads * torch.sigmoid(self.gate(a.x))
        y = self.out(heads)
        return a.finish(y, weights)

    # -- the steps of forward ----------------------------------------------------
    def _resolve(self, x, context, mask, score_bias, cache, temperature, return_weights):
        """Every check of a call, before anything is computed (a refused call leaves the
        cache untouched); returns the call's resolved arguments."""
        return_weights = require_bool(return_weights, "return_weights")
        temperature = require_number(temperature, "temperature", positive=True)
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a selfattn.KVCache, got {type(cache).__name__}")
        x, context, unbatched = require_layer_inputs(x, context, self.d_model, self.qkv.weight)
        reuse_cache = False if cache is None else cache._check_use(self, context, x)
        cross = context is not None or (cache is not None and cache.cross)
        dropout = self.dropout if self.training else 0.0
        mask, causal = resolve_mask_arg(mask)
        require_kernel_args(
            self.kernel,  # it may have been set after __init__
            KERNELS,
            mask=mask,
            causal=causal,
            return_weights=return_weights,
            dropout=dropout,
            score_bias=score_bias,
        )
        if self.rope is not None and cross:
            raise ValueError("rope rotates self-attention's queries and keys; this call is cross")
        self._check_options(cross)
        if causal and cross:
            raise ValueError(
                "mask='causal' is for self-attention; cross-attention has no order "
                "between x and context"
            )
        batch, n = x.shape[0], x.shape[1]
        if reuse_cache:
            m = len(cache)
        else:
            m = (context.shape[1] if cross else n) + (0 if cache is None else len(cache))
        if causal and self.kernel != "flash":
            mask = causal_mask(n, m, alignment="bottom_right", device=x.device)
        if mask is not None:
            mask = covering_mask(mask, batch, self.num_heads, n, m, x.device)
        if self.window is not None:
            mask = _and_masks(mask, _window_mask(n, m, self.window, x.device))
        if score_bias is not None:
            mask = self._with_bias(score_bias, mask, batch, n, m, x)
        if self.scale is None:
            scale = 1.0 / (math.sqrt(self.d_head) * temperature)
        else:
            scale = self.scale / temperature
        return _Call(
            x=x,
            context=context,
            cache=cache,
            cross=cross,
            reuse_cache=reuse_cache,
            batch=batch,
            heads=self.num_heads,
            n=n,
            m=m,
            mask=mask,
            causal=causal,
            scale=scale,
            dropout=dropout,
            return_weights=return_weights,
            unbatched=unbatched,
        )

    def _project(self, x: torch.Tensor, context: torch.Tensor | None, need_kv: bool):
        d, d_kv = self.d_q, self.d_kv
        if context is None:
            # Self-attention: one matmul makes q, k and v together (the fused-QKV tip).
            q, k, v = self.qkv(x).split([d, d_kv, d_kv], dim=-1)
            return q, k, v
        w, b = self.qkv.weight, self.qkv.bias
        q = F.linear(x, w[:d], None if b is None else b[:d])
        if not need_kv:
            return q, None, None
        k, v = F.linear(context, w[d:], None if b is None else b[d:]).split(d_kv, dim=-1)
        return q, k, v

    def _keys_values(self, k, v, a: _Call):
        """The new keys and values as heads ``(B, h_kv, m_new, d_head)`` (``None`` when a
        cross-attention cache already holds the context's)."""
        if a.reuse_cache:
            return None, None
        return _split(k, self.num_kv_heads), _split(v, self.num_kv_heads)

    def _rotate(self, q, k, a: _Call):
        """Rotary embedding of the queries and new keys; the new positions follow the cached."""
        start = 0 if a.cache is None else len(a.cache)
        positions = torch.arange(start, start + a.n, device=q.device)
        return self.rope(q, k, q_positions=positions, k_positions=positions)

    def _cached(self, k, v, a: _Call):
        """Append the new keys and values to the cache; return all of them."""
        if a.reuse_cache:
            return a.cache.k, a.cache.v  # the context's keys/values, computed on the first call
        k, v = a.cache._extend(k, v)  # the layer's own keys and values: no checks
        a.cache._filled(a.cross, a.context)
        return k, v

    def _group_query_heads(self, q, k, v, a: _Call):
        """Grouped-query attention without repeating K/V: ``(q, k, v, mask)`` as the attention
        function receives them, and whether the kernel applies the causal mask itself.

        The ``group`` query heads that share key/value head ``j`` become extra query rows of
        head ``j``, ``(B, h_kv, group * n, d_head)``, so every product runs against the
        ``h_kv`` stored heads (MHA: ``group = 1``, nothing moves). The flash kernel's causal
        diagonal is each head's own, so there the group is an axis of its own instead:
        ``(B, h_kv, group, n, d_head)`` against K/V ``(B, h_kv, 1, m, d_head)``.
        """
        group = self.num_heads // self.num_kv_heads
        if self.kernel == "flash" and a.causal and a.n > 1:
            q = q.reshape(a.batch, self.num_kv_heads, group, a.n, self.d_head)
            return q, k.unsqueeze(2), v.unsqueeze(2), None, True
        # One new query sees every key (bottom-right), so it needs no causal diagonal.
        mask = None if a.mask is None else _stack_group(a.mask, group, a.n)
        return _stack_group(q, group, a.n), k, v, mask, False

    def _check_options(self, cross: bool) -> None:
        """Refuse a call that chapter 11's options cannot serve."""
        formula = [
            name
            for name, on in (("softcap", self.softcap), ("sinks", self.sink_logits))
            if on is not None
        ]
        if formula and self.kernel != "reference":
            raise ValueError(
                f"{' and '.join(formula)} need the formula path (kernel='reference'): the "
                "fused kernels cannot change the scores or the softmax; got "
                f"kernel={self.kernel!r}"
            )
        if self.window is not None:
            if self.kernel == "flash":
                raise ValueError(
                    "window needs a mask, and kernel='flash' takes none: use "
                    "kernel='reference' or 'torch'"
                )
            if cross:
                raise ValueError(
                    "window is a sliding window over self-attention's positions; this call "
                    "is cross-attention"
                )

    def _capped_sunk_attention(self, q, k, v, mask, a: _Call):
        """The formula path with soft-capping and/or sink logits (``kernel="reference"``).

        ``q`` ``(B, h_kv, group * n, d_head)`` (a group's query heads as rows), ``k``, ``v``
        ``(B, h_kv, m, d_head)``: ``softmax([cap(q k^T * scale) + mask, sink]) v`` without the
        sink's column. Half inputs are computed in float32, as the reference does.
        """
        dtype = q.dtype
        if is_half(q):
            q, k, v = q.float(), k.float(), v.float()
        scores = q @ k.transpose(-2, -1) * a.scale  # (B, h_kv, group * n, m)
        if self.softcap is not None:
            scores = self.softcap * torch.tanh(scores / self.softcap)
        scores = apply_mask(scores, mask)
        if self.sink_logits is not None:
            group = self.num_heads // self.num_kv_heads
            sink = self.sink_logits.to(scores.dtype).reshape(self.num_kv_heads, group, 1, 1)
            sink = sink.expand(self.num_kv_heads, group, a.n, 1).reshape(
                self.num_kv_heads, group * a.n, 1
            )
            scores = torch.cat([scores, sink.expand(*scores.shape[:-1], 1)], dim=-1)
            weights = softmax(scores, dim=-1)[..., :-1]  # the sink's weight carries no value
        else:
            weights = softmax(scores, dim=-1)
        out = (F.dropout(weights, a.dropout) @ v).to(dtype)
        if a.return_weights:
            return out, weights.to(dtype)
        return out

    def _with_bias(self, score_bias, mask, batch: int, n: int, m: int, x) -> torch.Tensor:
        """The score bias as a float mask ``(..., n, m)``, with ``mask`` folded in."""
        if callable(score_bias) and not isinstance(score_bias, torch.Tensor):
            score_bias = score_bias(n, m)
        require_float(score_bias, "score_bias")
        if score_bias.dim() not in (2, 3, 4) or score_bias.shape[-1] != m:
            raise ValueError(
                f"score_bias must have shape (n, m), (h, n, m) or (B, h, n, m) with m={m} keys, "
                f"got {tuple(score_bias.shape)}"
            )
        require_mask(score_bias, (batch, self.num_heads, n, m), x.device)
        return apply_mask(score_bias, mask)


def stack_causal_mask(layers, x, caches=None):
    """``mask="causal"`` for a stack of attention layers, built once per call, not once per
    layer (as Llama builds its causal mask once for all its layers).

    The bottom-right causal mask ``(n, start + n)``, ``start`` the positions each layer's
    cache holds, when every layer is a self-attention :class:`MultiHeadAttention` whose
    kernel takes a mask tensor: each layer then uses it as it would have built it. Otherwise
    the string ``"causal"`` (a kernel that applies the mask itself, another kind of layer,
    caches of different lengths, or an input the layers will refuse with their own message).

    Args:
        layers: the stack's attention layers, in order.
        x: the stack's input ``(B, n, d_model)`` (or unbatched ``(n, d_model)``).
        caches: ``None``, or each layer's cache (``None`` for a layer without one).
    """
    layers = list(layers)
    caches = [None] * len(layers) if caches is None else list(caches)
    if not layers or len(caches) != len(layers):
        return "causal"
    if not isinstance(x, torch.Tensor) or x.dim() not in (2, 3):
        return "causal"
    for layer, cache in zip(layers, caches):
        if not isinstance(layer, MultiHeadAttention) or not getattr(
            KERNELS.get(layer.kernel), "masks", False
        ):
            return "causal"
        if cache is not None and (not isinstance(cache, KVCache) or cache.cross):
            return "causal"
    starts = {0 if cache is None else len(cache) for cache in caches}
    if len(starts) != 1:
        return "causal"
    n, start = x.shape[-2], starts.pop()
    return causal_mask(n, start + n, alignment="bottom_right", device=x.device)


@dataclass(frozen=True)
class _Call:
    """One call of :meth:`MultiHeadAttention.forward`, its arguments checked and resolved."""

    x: torch.Tensor  # (B, n, d_model), batched
    context: torch.Tensor | None  # (B, m, d_model) for cross-attention
    cache: KVCache | None
    cross: bool  # cross-attention (a context, or a cache filled from one)
    reuse_cache: bool  # the cache holds the context's keys and values already
    batch: int
    heads: int  # query heads h
    n: int  # queries
    m: int  # keys, cached ones included
    mask: torch.Tensor | None  # laid out for (B, h, n, m), score bias folded in
    causal: bool
    scale: float  # 1 / (sqrt(d_head) * temperature)
    dropout: float  # 0 outside training
    return_weights: bool
    unbatched: bool

    def finish(self, y: torch.Tensor, weights: torch.Tensor | None):
        """``y`` (and the weights as ``(B, h, n, m)``) in the shape of the call's input."""
        if self.unbatched:
            y = y.squeeze(0)
        if weights is None:
            return y
        weights = weights.reshape(self.batch, self.heads, self.n, self.m)
        return y, weights.squeeze(0) if self.unbatched else weights
