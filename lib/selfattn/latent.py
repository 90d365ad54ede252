"""Multi-head latent attention (MLA, DeepSeek-V2 and V3), its latent cache and weight absorption
(chapter 11).

Keys and values come from one shared low-rank **latent** ``c = RMSNorm(x W^{DKV})`` of width
``kv_rank`` per token, and only that latent is cached, with one small rotated key per token
shared by every head. The layout is DeepSeek-V3's (``transformers``' ``DeepseekV3Attention``),
with the book's names beside the model's:

====================  ===============================  =========================================
book                  DeepSeek-V3 / ``transformers``    shape
====================  ===============================  =========================================
``q_a``               ``q_a_proj`` (``q_lora_rank``)    ``d_model -> q_rank``
``q_norm``            ``q_a_layernorm``                 RMSNorm over ``q_rank``
``q_b``               ``q_b_proj``                      ``q_rank -> h * (d_nope + rope_dim)``
``q_proj``            ``q_proj`` (``q_rank=None``)      ``d_model -> h * (d_nope + rope_dim)``
``kv_a``              ``kv_a_proj_with_mqa``            ``d_model -> kv_rank + rope_dim``
``kv_norm``           ``kv_a_layernorm``                RMSNorm over ``kv_rank``
``kv_b``              ``kv_b_proj``                     ``kv_rank -> h * (d_nope + d_v)``
``out``               ``o_proj``                        ``h * d_v -> d_model``
``d_nope``            ``qk_nope_head_dim``
``rope_dim``          ``qk_rope_head_dim``
``d_v``               ``v_head_dim``
====================  ===============================  =========================================

Per head ``i`` the query is ``[q_i^C ; R q_i^R]`` (``d_nope`` content dimensions, then
``rope_dim`` rotated ones), the key ``[c W^{UK}_i ; R k^R]`` (``k^R = x W^{KR}`` the last
``rope_dim`` outputs of ``kv_a``, one for all heads) and the value ``c W^{UV}_i``; the scores
are scaled by ``scale`` (default ``(d_nope + rope_dim)^{-1/2}``).

**Why RoPE needs its own branch.** RoPE multiplies the key by a position-dependent rotation
``R_p``. If it were applied to the up-projected key ``R_p c W^{UK}``, the product
``q^T R_p c W^{UK}`` could not be rewritten as ``(W^{UK} q)^T c``: the rotation sits between
the query and the latent and changes with the position, so the key up-projection could not be
folded into the query. DeepSeek therefore rotates only a separate, narrow key ``k^R``, cached
beside the latent.

**Weight absorption** (``absorb=True``). Because ``q_i^T (W^{UK}_i c)`` equals
``(W^{UK,T}_i q_i)^T c``, the key up-projection can be folded into the query and the value
up-projection moved after the weighted sum: ``sum_j a_j (W^{UV}_i c_j) = W^{UV}_i sum_j a_j c_j``.
Attention then runs directly on the cached latents: every head reads the same keys
``[c ; k^R]`` (width ``kv_rank + rope_dim``) and values ``c`` (width ``kv_rank``), a
multi-query attention, and no position's latent is ever up-projected. The function is the
same (``tests/test_latent.py``); a decode step costs ``O(t h (2 kv_rank + rope_dim))`` instead
of ``O(t kv_rank h (d_nope + d_v))`` for up-projecting ``t`` cached latents.

**Cache.** :class:`LatentCache` holds ``latent`` ``(B, t, kv_rank)`` (after the RMSNorm) and
``k_rope`` ``(B, t, rope_dim)`` (after the rotation): ``nbytes`` is
``B * t * (kv_rank + rope_dim) * element_size``, against ``2 * B * t * h * d_head * element_size``
for multi-head attention.

Masks work as in :class:`~selfattn.multihead.MultiHeadAttention`: ``None``, ``"causal"``
(aligned bottom-right, right with a cache) or a bool/float tensor read as ``(n, m)``,
``(B, n, m)`` or ``(B, h, n, m)``.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn

from ._checks import (
    require_base,
    require_bool,
    require_choice,
    require_even,
    require_int,
    require_number,
)
from .attention import attend, attention_args
from .multihead import merge_heads, self_attention_inputs
from .norms import RMSNorm
from .positional import ROPE_LAYOUTS, RotaryEmbedding

__all__ = ["MultiHeadLatentAttention", "LatentCache", "mla_cache_bytes_per_token"]

#: The kernels the layer can run its attention with (``"flash"`` takes no explicit mask, and
#: the absorbed path stacks the heads as rows, which needs one).
LATENT_KERNELS = ("reference", "torch")


def mla_cache_bytes_per_token(kv_rank: int, rope_dim: int, bytes_per_element: int = 2) -> int:
    """Bytes one token adds to one MLA layer's cache: ``(kv_rank + rope_dim) * bytes``.

    DeepSeek-V3 (``kv_lora_rank=512``, ``qk_rope_head_dim=64``, bf16): 1152 bytes per token and
    layer, against ``128 * (192 + 128) * 2 = 81920`` for its 128 heads (keys of width 192,
    values of width 128) in plain multi-head attention.
    """
    kv_rank = require_int(kv_rank, "kv_rank", 1)
    rope_dim = require_int(rope_dim, "rope_dim", 0)
    bytes_per_element = require_int(bytes_per_element, "bytes_per_element", 1)
    return (kv_rank + rope_dim) * bytes_per_element


class LatentCache:
    """The cache of one :class:`MultiHeadLatentAttention` layer: latents and rotated keys.

    Attributes:
        latent: ``(B, t, kv_rank)`` normalised latents, ``None`` while empty.
        k_rope: ``(B, t, rope_dim)`` rotated keys shared by the heads, ``None`` while empty.

    ``len(cache)`` is ``t``; :attr:`nbytes` is ``B * t * (kv_rank + rope_dim) * element_size``.
    """

    def __init__(self) -> None:
        self.latent: torch.Tensor | None = None
        self.k_rope: torch.Tensor | None = None
        self._owner = None

    def __len__(self) -> int:
        return 0 if self.latent is None else self.latent.shape[-2]

    def __repr__(self) -> str:
        shape = None if self.latent is None else tuple(self.latent.shape)
        return f"LatentCache(positions={len(self)}, latent shape={shape})"

    @property
    def nbytes(self) -> int:
        """Bytes held by ``latent`` and ``k_rope`` together (0 when empty)."""
        if self.latent is None:
            return 0
        return sum(t.numel() * t.element_size() for t in (self.latent, self.k_rope))

    def reset(self) -> None:
        """Forget every cached position."""
        self.latent = self.k_rope = None
        self._owner = None

    def _check(self, layer: nn.Module, x: torch.Tensor) -> None:
        if len(self) and self._owner is not None and self._owner() is not layer:
            raise ValueError(
                "this LatentCache holds another layer's latents: give each layer its own "
                "layer.new_cache(), or call cache.reset()"
            )
        if len(self) and (
            self.latent.shape[0] != x.shape[0]
            or self.latent.dtype != x.dtype
            or self.latent.device != x.device
        ):
            raise ValueError(
                f"the cache holds batch {self.latent.shape[0]} {self.latent.dtype} on "
                f"{self.latent.device}; x is batch {x.shape[0]} {x.dtype} on {x.device}"
            )

    def append(self, latent: torch.Tensor, k_rope: torch.Tensor):
        """Add ``latent`` ``(B, n, kv_rank)`` and ``k_rope`` ``(B, n, rope_dim)``; return all
        cached ``(latent, k_rope)``, ``(B, t + n, .)``."""
        if self.latent is None:
            self.latent, self.k_rope = latent, k_rope
        else:
            self.latent = torch.cat([self.latent, latent], dim=-2)
            self.k_rope = torch.cat([self.k_rope, k_rope], dim=-2)
        return self.latent, self.k_rope


class MultiHeadLatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2/V3): keys and values from a cached latent.

    Args:
        d_model: model width ``d``.
        num_heads: heads ``h``.
        kv_rank: width of the key/value latent (``kv_lora_rank``; DeepSeek-V3: 512).
        rope_dim: width of the rotated, decoupled part of queries and keys
            (``qk_rope_head_dim``; 64), even.
        q_rank: width of the query latent (``q_lora_rank``; 1536), or ``None`` for a full-rank
            query projection ``q_proj`` (DeepSeek-V2-Lite).
        d_nope: content (not rotated) width of each head's query and key
            (``qk_nope_head_dim``; default ``d_model // num_heads``).
        d_v: width of each head's value (``v_head_dim``; default ``d_nope``).
        scale: the score scale; default ``(d_nope + rope_dim) ** -0.5`` (a YaRN-scaled model
            multiplies it by its ``mscale`` squared).
        rope_base: RoPE's base (``rope_theta``).
        rope_layout: ``"interleaved"`` (DeepSeek's ``rope_interleave=True``: adjacent pairs) or
            ``"half"``; either gives the same scores as ``transformers`` (which returns the
            interleaved pairs de-interleaved, in the same order for queries and keys).
        bias: biases on ``q_a`` (or ``q_proj``), ``kv_a`` and ``out``, as ``attention_bias``
            (DeepSeek-V3: ``False``).
        norm_eps: the RMSNorms' epsilon (``rms_norm_eps``).
        kernel: ``"reference"`` or ``"torch"`` (``LATENT_KERNELS``).

    Call ``layer(x, mask=None, cache=None, absorb=False)`` with ``x`` ``(B, n, d_model)``
    (or ``(n, d_model)``); returns ``(B, n, d_model)``. See the module docstring for the
    formulas and the absorbed path.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        kv_rank: int,
        rope_dim: int,
        q_rank: int | None = None,
        *,
        d_nope: int | None = None,
        d_v: int | None = None,
        scale: float | None = None,
        rope_base: float = 10000.0,
        rope_layout: str = "interleaved",
        bias: bool = False,
        norm_eps: float = 1e-6,
        kernel: str = "reference",
    ):
        super().__init__()
        self.d_model = require_int(d_model, "d_model", 1)
        self.num_heads = require_int(num_heads, "num_heads", 1)
        self.kv_rank = require_int(kv_rank, "kv_rank", 1)
        self.rope_dim = require_even(rope_dim, "rope_dim")
        self.q_rank = None if q_rank is None else require_int(q_rank, "q_rank", 1)
        if d_nope is None:
            if d_model % num_heads:
                raise ValueError(
                    f"d_model={d_model} is not divisible by num_heads={num_heads}: pass d_nope"
                )
            d_nope = d_model // num_heads
        self.d_nope = require_int(d_nope, "d_nope", 1)
        self.d_v = self.d_nope if d_v is None else require_int(d_v, "d_v", 1)
        self.d_qk = self.d_nope + self.rope_dim
        if scale is None:
            scale = self.d_qk**-0.5
        self.scale = require_number(scale, "scale", positive=True)
        bias = require_bool(bias, "bias")
        norm_eps = require_number(norm_eps, "norm_eps", positive=True)
        self.kernel = require_choice(kernel, "kernel", LATENT_KERNELS)
        rope_base = require_base(rope_base, "rope_base")
        require_choice(rope_layout, "rope_layout", ROPE_LAYOUTS)
        h = self.num_heads
        if self.q_rank is None:
            self.q_proj = nn.Linear(d_model, h * self.d_qk, bias=bias)
        else:
            self.q_a = nn.Linear(d_model, self.q_rank, bias=bias)
            self.q_norm = RMSNorm(self.q_rank, eps=norm_eps)
            self.q_b = nn.Linear(self.q_rank, h * self.d_qk, bias=False)
        self.kv_a = nn.Linear(d_model, self.kv_rank + self.rope_dim, bias=bias)
        self.kv_norm = RMSNorm(self.kv_rank, eps=norm_eps)
        self.kv_b = nn.Linear(self.kv_rank, h * (self.d_nope + self.d_v), bias=False)
        self.out = nn.Linear(h * self.d_v, d_model, bias=bias)
        self.rope = RotaryEmbedding(self.rope_dim, base=rope_base, layout=rope_layout)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, kv_rank={self.kv_rank}, "
            f"rope_dim={self.rope_dim}, q_rank={self.q_rank}, d_nope={self.d_nope}, "
            f"d_v={self.d_v}"
        )

    def new_cache(self) -> LatentCache:
        """An empty :class:`LatentCache` for this layer."""
        return LatentCache()

    def up_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W_UK, W_UV)``: the key and value up-projections per head, ``(h, d_nope, kv_rank)``
        and ``(h, d_v, kv_rank)`` (views of ``kv_b.weight``; ``k_i = W_UK[i] @ c``)."""
        w = self.kv_b.weight.view(self.num_heads, self.d_nope + self.d_v, self.kv_rank)
        return w[:, : self.d_nope], w[:, self.d_nope :]

    # -- forward ------------------------------------------------------------------
    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | str | None = None,
        cache: LatentCache | None = None,
        absorb: bool = False,
    ) -> torch.Tensor:
        """Attention of ``x`` ``(B, n, d_model)`` over itself and the cached positions.

        Args:
            x: ``(B, n, d_model)`` or unbatched ``(n, d_model)``.
            mask: ``None``, ``"causal"`` (bottom-right) or a bool/float tensor read as
                ``(n, m)``, ``(B, n, m)`` or ``(B, h, n, m)`` with ``m = len(cache) + n``.
            cache: a :class:`LatentCache` (``layer.new_cache()``): the new latents and rotated
                keys are appended, and attention runs over every cached position.
            absorb: take the absorbed path (queries in latent space, values up-projected after
                the weighted sum); the same function, fewer operations when decoding.

        Returns:
            ``(B, n, d_model)`` (``(n, d_model)`` for an unbatched ``x``).

        Raises:
            TypeError: a non-float ``x``, a dtype other than the weights', a cache that is not
                a :class:`LatentCache`, a non-bool ``absorb``.
            ValueError: a last dimension other than ``d_model``, a mask that does not cover
                the ``m`` keys, a cache of another layer, batch or dtype.
        """
        absorb = require_bool(absorb, "absorb")
        if cache is not None and not isinstance(cache, LatentCache):
            raise TypeError(
                f"cache must be a LatentCache (layer.new_cache()), got {type(cache).__name__}"
            )
        x, unbatched, start, mask = self_attention_inputs(
            x, mask, cache, self.d_model, self.kv_a.weight, self.num_heads
        )
        if cache is not None:
            cache._check(self, x)
        m = start + x.shape[1]
        q_nope, q_rope = self._queries(x)  # (B, h, n, d_nope), (B, h, n, rope_dim)
        latent, k_rope = self.kv_a(x).split([self.kv_rank, self.rope_dim], dim=-1)
        latent = self.kv_norm(latent)  # (B, n, kv_rank)
        positions = torch.arange(start, m, device=x.device)
        q_rope, k_rope = self.rope(q_rope, k_rope, q_positions=positions, k_positions=positions)
        if cache is not None:
            latent, k_rope = cache.append(latent, k_rope)  # (B, m, .): old, then new
            cache._owner = weakref.ref(self)
        if absorb:
            heads = self._absorbed(q_nope, q_rope, latent, k_rope, mask)
        else:
            heads = self._up_projected(q_nope, q_rope, latent, k_rope, mask)
        y = self.out(merge_heads(heads))  # (B, n, d_model)
        return y.squeeze(0) if unbatched else y

    def _queries(self, x: torch.Tensor):
        if self.q_rank is None:
            q = self.q_proj(x)
        else:
            q = self.q_b(self.q_norm(self.q_a(x)))
        q = q.view(*x.shape[:-1], self.num_heads, self.d_qk).transpose(-3, -2)
        return q.split([self.d_nope, self.rope_dim], dim=-1)

    def _up_projected(self, q_nope, q_rope, latent, k_rope, mask):
        """Every cached latent up-projected to per-head keys and values, then attention."""
        batch, m = latent.shape[0], latent.shape[1]
        kv = self.kv_b(latent).view(batch, m, self.num_heads, self.d_nope + self.d_v)
        k_nope, v = kv.transpose(1, 2).split([self.d_nope, self.d_v], dim=-1)
        k_rope = k_rope.unsqueeze(1).expand(-1, self.num_heads, -1, -1)
        q = torch.cat([q_nope, q_rope], dim=-1)  # (B, h, n, d_nope + rope_dim)
        k = torch.cat([k_nope, k_rope], dim=-1)  # (B, h, m, d_nope + rope_dim)
        # the mask was checked and built at the door (self_attention_inputs): the trusting path
        return attend(attention_args(q, k, v, mask, scale=self.scale, kernel=self.kernel))

    def _absorbed(self, q_nope, q_rope, latent, k_rope, mask):
        """W_UK folded into the query, W_UV applied after the weighted sum of latents.

        The ``h`` heads share one key ``[c ; k^R]`` and one value ``c`` (multi-query), so the
        ``h * n`` query rows attend as the rows of a single head."""
        w_uk, w_uv = self.up_weights()  # (h, d_nope, r_kv), (h, d_v, r_kv)
        batch, h, n = q_nope.shape[0], self.num_heads, q_nope.shape[2]
        q_latent = torch.matmul(q_nope, w_uk)  # (B, h, n, kv_rank): q_i^T W_UK_i
        q = torch.cat([q_latent, q_rope], dim=-1).reshape(batch, 1, h * n, -1)
        k = torch.cat([latent, k_rope], dim=-1).unsqueeze(1)  # (B, 1, m, kv_rank + rope_dim)
        v = latent.unsqueeze(1)  # (B, 1, m, kv_rank)
        if mask is not None:
            m = k.shape[-2]
            mask = mask.expand(batch, h, n, m).reshape(batch, 1, h * n, m)
        o = attend(attention_args(q, k, v, mask, scale=self.scale, kernel=self.kernel))
        o = o.reshape(batch, h, n, self.kv_rank)  # sum_j a_ij c_j per head
        return torch.matmul(o, w_uv.transpose(-1, -2))  # (B, h, n, d_v)
