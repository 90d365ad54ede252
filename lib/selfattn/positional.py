"""Positional encodings: telling order-blind attention where each token sits (chapter 6).

Attention without positions is permutation-equivariant (shuffle the tokens and the
outputs shuffle the same way), so order has to be injected. Three families:

* **absolute, added to the input**: :func:`sinusoidal_encoding` (Vaswani et al., 2017)
  and :class:`LearnedPositionalEmbedding` (a trained table, as in BERT and GPT-2);
* **relative, added to the scores**: :class:`RelativePositionBias` (T5's learned
  bucketed bias, Raffel et al., 2020) and :func:`alibi_bias` (ALiBi's fixed linear
  penalty, Press et al., 2022);
* **relative, by rotating queries and keys**: :func:`apply_rope` and
  :class:`RotaryEmbedding` (RoPE, Su et al., 2021), with :func:`apply_rope_complex`
  as the same map written with complex numbers, the rotate-half layout of GPT-NeoX and
  LLaMA (``layout="half"``), partial rotary (``rotary_dim``), and the RoPE scalings for
  contexts longer than the training length (:class:`RopeScaling`: position
  interpolation, NTK-aware scaling, YaRN).

Conventions: positions index dimension ``-2`` of a ``(..., n, d)`` tensor; biases have
shape ``(h, n, m)`` and are *added* to the scores (a float mask for
:func:`~selfattn.attention.scaled_dot_product_attention`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ._checks import (
    require_base,
    require_bool,
    require_choice,
    require_even,
    require_float,
    require_int,
    require_number,
    require_tensor,
)
from .masks import causal_mask

__all__ = [
    "sinusoidal_encoding",
    "sinusoidal_shift_matrix",
    "LearnedPositionalEmbedding",
    "alibi_slopes",
    "alibi_bias",
    "relative_position_bucket",
    "RelativePositionBias",
    "rope_frequencies",
    "apply_rope",
    "apply_rope_complex",
    "ROPE_LAYOUTS",
    "ROPE_SCALINGS",
    "rotate_half_permutation",
    "RopeScaling",
    "scaled_rope_frequencies",
    "RotaryEmbedding",
]


# ---- sinusoidal (absolute, fixed) ------------------------------------------------------


def _frequencies(d: int, base: float, dtype=torch.float64, device=None) -> torch.Tensor:
    """omega_i = base^(-2i/d) for i = 0 .. d/2 - 1: shape ``(d/2,)``."""
    return base ** (-torch.arange(0, d, 2, dtype=dtype, device=device) / d)


def sinusoidal_encoding(
    n: int,
    d: int,
    *,
    base: float = 10000.0,
    offset: int = 0,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> torch.Tensor:
    r"""The fixed sinusoidal encoding of Vaswani et al. (2017).

    ``PE[pos, 2i] = sin(pos * omega_i)`` and ``PE[pos, 2i+1] = cos(pos * omega_i)`` with
    ``omega_i = base^(-2i/d)``: pair ``i`` is a point turning on the unit circle at
    frequency ``omega_i``, from one turn per ``2 pi`` positions (``i = 0``) down to one
    per ``2 pi * base^((d - 2) / d)`` positions (the last pair, ``i = d/2 - 1``).

    Args:
        n: number of positions (``>= 1``).
        d: model dimension (even, ``>= 2``).
        base: the wavelength scale (10000 in the paper).
        offset: the first position (the rows are positions ``offset .. offset + n - 1``).
        dtype, device: of the result (computed in float64, then cast).

    Returns:
        ``(n, d)`` tensor, added to the token embeddings ``(..., n, d)``.

    Raises:
        TypeError: non-integer ``n`` or ``offset``.
        ValueError: ``n < 1``, odd ``d``, ``base <= 1`` or a negative ``offset``.
    """
    require_int(n, "n", 1)
    require_even(d)
    base = require_base(base)
    require_int(offset, "offset", 0)
    pos = torch.arange(offset, offset + n, dtype=torch.float64, device=device)[:, None]  # (n, 1)
    angles = pos * _frequencies(d, base, device=device)[None, :]  # (n, d/2)
    pe = torch.empty(n, d, dtype=torch.float64, device=device)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.to(dtype)


def sinusoidal_shift_matrix(
    k: int, d: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    r"""The fixed linear map ``M_k`` with ``PE[pos + k] = M_k @ PE[pos]`` for every ``pos``.

    It is block-diagonal: on pair ``i``, which holds ``(sin, cos)`` of ``pos * omega_i``,
    it is the ``2 x 2`` rotation ``[[cos k w, sin k w], [-sin k w, cos k w]]`` with
    ``w = omega_i`` (the angle-addition formulas). It depends on ``k`` but not on ``pos``.

    Args:
        k: the shift (any integer, negative shifts go back).
        d: model dimension (even).
        base: as in :func:`sinusoidal_encoding`.

    Returns:
        ``(d, d)`` tensor. For row vectors: ``PE[pos + k] = PE[pos] @ M_k.T``.
    """
    k = require_int(k, "k", minimum=None)  # any shift, negative ones too
    require_even(d)
    base = require_base(base)
    angle = k * _frequencies(d, base)  # (d/2,)
    c, s = torch.cos(angle), torch.sin(angle)
    m = torch.zeros(d, d, dtype=torch.float64)
    idx = torch.arange(0, d, 2)
    m[idx, idx], m[idx, idx + 1] = c, s
    m[idx + 1, idx], m[idx + 1, idx + 1] = -s, c
    return m.to(dtype)


# ---- learned absolute ------------------------------------------------------------------


class LearnedPositionalEmbedding(nn.Module):
    """A trained table of ``max_len`` position vectors, added to the token embeddings.

    Positions at or beyond ``max_len`` have no vector at all, and rows that no training
    sequence reached keep their random initial values: the model knows nothing about
    them (chapter 6 measures what that does to accuracy).

    Args:
        max_len: number of rows (the longest sequence the model can take).
        d: model dimension.
        init_std: standard deviation of the initial rows, finite and >= 0 (GPT-2 uses 0.02).
    """

    def __init__(self, max_len: int, d: int, *, init_std: float = 0.02):
        super().__init__()
        self.max_len = require_int(max_len, "max_len", 1)
        self.d = require_int(d, "d", 1)
        self.init_std = require_number(init_std, "init_std", nonnegative=True)
        self.weight = nn.Parameter(torch.randn(max_len, d) * init_std)

    def forward(self, x: torch.Tensor, *, offset: int = 0) -> torch.Tensor:
        """``x + table[offset : offset + n]`` for ``x`` of shape ``(..., n, d)``; same shape."""
        require_float(x, "x")
        offset = require_int(offset, "offset", 0)
        if x.dim() < 2 or x.shape[-1] != self.d:
            raise ValueError(f"x must have shape (..., n, d={self.d}), got {tuple(x.shape)}")
        n = x.shape[-2]
        if offset < 0 or offset + n > self.max_len:
            raise ValueError(
                f"positions {offset}..{offset + n - 1} do not fit the table of "
                f"max_len={self.max_len} (a learned embedding has no vector beyond its last row)"
            )
        return x + self.weight[offset : offset + n].to(x.dtype)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d={self.d}"


# ---- ALiBi -----------------------------------------------------------------------------


def alibi_slopes(num_heads: int) -> torch.Tensor:
    r"""ALiBi's per-head slopes (Press et al., 2022).

    For ``h`` a power of two, the geometric sequence starting at ``2^(-8/h)`` with ratio
    ``2^(-8/h)``: ``2^(-8/h), 2^(-16/h), ..., 2^(-8)``. Otherwise, as in the paper's code:
    the slopes for the largest power of two ``p < h``, followed by every other slope of
    the ``2p``-head sequence (``2^(-4/p), 2^(-12/p), ...``) until there are ``h`` of them.

    Args:
        num_heads: ``h >= 1``.

    Returns:
        float32 tensor ``(h,)``, each slope in ``(0, 1)``.
    """
    require_int(num_heads, "num_heads", 1)

    def power_of_two(h: int) -> list[float]:
        start = 2.0 ** (-8.0 / h)
        return [start ** (i + 1) for i in range(h)]

    p = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(p)
    if p < num_heads:
        slopes += power_of_two(2 * p)[0::2][: num_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(
    num_heads: int, n: int, m: int | None = None, *, causal: bool = False, device=None
) -> torch.Tensor:
    r"""ALiBi's bias ``-slope_h * |i - j|``, added to the attention scores.

    The paper uses it with a causal mask, where ``|i - j| = i - j``. Queries are the last
    ``n`` of ``m`` positions (query ``i`` sits at position ``i + m - n``), the alignment for
    decoding against a cache; with ``n == m`` query ``i`` is at position ``i``.

    Args:
        num_heads: ``h``; the slopes are :func:`alibi_slopes` ``(h)``.
        n: number of queries; m: number of keys (defaults to ``n``, must be ``>= n``).
        causal: put ``-inf`` on keys after the query (then it is a complete float mask).

    Returns:
        float32 tensor ``(h, n, m)``, a float mask for
        :func:`~selfattn.attention.scaled_dot_product_attention` with scores ``(B, h, n, m)``.
    """
    causal = require_bool(causal, "causal")
    require_int(num_heads, "num_heads", 1)
    require_int(n, "n", 1)
    m = n if m is None else m
    require_int(m, "m", 1)
    if m < n:
        raise ValueError(
            f"alibi_bias needs m >= n (queries are the last n of m positions), got n={n}, m={m}"
        )
    q_pos = torch.arange(m - n, m, device=device)[:, None]
    k_pos = torch.arange(m, device=device)[None, :]
    distance = (q_pos - k_pos).abs().float()  # (n, m)
    bias = -alibi_slopes(num_heads).to(device)[:, None, None] * distance  # (h, n, m)
    if causal:  # the queries are the last n of the m positions: bottom-right alignment
        visible = causal_mask(n, m, alignment="bottom_right", device=device)
        bias = bias.masked_fill(~visible, float("-inf"))
    return bias


# ---- T5 relative bias ------------------------------------------------------------------


def relative_position_bucket(
    relative_position: torch.Tensor,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    r"""T5's bucket of each relative position ``key - query`` (Raffel et al., 2020).

    Half the buckets (``max_exact``) hold one distance each (0, 1, 2, ...); the rest
    cover distances up to ``max_distance`` on a log scale; farther ones share the last
    bucket. With ``bidirectional``, keys after the query use a second, separate half.

    Args:
        relative_position: integer tensor of any shape, ``key_pos - query_pos``.
        bidirectional: distinguish left from right (encoder) or not (decoder, where
            keys after the query are masked anyway and fall into bucket 0).
        num_buckets: total number of buckets; max_distance: where the log range ends.

    Returns:
        ``torch.long`` tensor of bucket ids in ``0 .. num_buckets - 1``, same shape.
    """
    bidirectional = require_bool(bidirectional, "bidirectional")
    require_tensor(relative_position, "relative_position")
    if relative_position.is_floating_point() or relative_position.dtype == torch.bool:
        raise TypeError(
            f"relative_position must be an integer tensor, got dtype {relative_position.dtype}"
        )
    require_int(num_buckets, "num_buckets", 4 if bidirectional else 2)
    require_int(max_distance, "max_distance", 1)
    # Every distance from max_distance on shares the last bucket: clamping first changes no
    # bucket and keeps abs() and negation inside int64 (abs(-2**63) overflows to itself).
    rel = relative_position.long().clamp(-max_distance, max_distance)
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).long() * num_buckets
        rel = rel.abs()
    else:
        rel = -torch.clamp(rel, max=0)
    max_exact = num_buckets // 2
    if max_distance <= max_exact:
        raise ValueError(
            "max_distance must exceed num_buckets // 4 (bidirectional) or // 2, "
            f"got {max_distance}"
        )
    is_small = rel < max_exact
    # log-spaced buckets between max_exact and max_distance; clamp(min=1) only avoids
    # log(0) where the value is unused
    large = (
        max_exact
        + (
            torch.log(rel.clamp(min=1).float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).long()
    )
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(is_small, rel, large)


class RelativePositionBias(nn.Module):
    """A learned scalar per (head, bucket of ``key - query``), added to the scores (T5).

    Args:
        num_heads: ``h``.
        num_buckets, max_distance, bidirectional: see :func:`relative_position_bucket`.

    Call it with ``(n, m)`` to get the ``(h, n, m)`` bias (queries are the last ``n`` of
    ``m`` positions, as in :func:`alibi_bias`).
    """

    def __init__(
        self,
        num_heads: int,
        *,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
    ):
        super().__init__()
        bidirectional = require_bool(bidirectional, "bidirectional")
        self.num_heads = require_int(num_heads, "num_heads", 1)
        self.num_buckets, self.max_distance, self.bidirectional = (
            num_buckets,
            max_distance,
            bidirectional,
        )
        relative_position_bucket(
            torch.zeros(1, dtype=torch.long),
            bidirectional=bidirectional,
            num_buckets=num_buckets,
            max_distance=max_distance,
        )  # validate the settings now
        self.bias = nn.Embedding(num_buckets, num_heads)
        nn.init.zeros_(self.bias.weight)  # start with no positional preference

    def forward(self, n: int, m: int | None = None) -> torch.Tensor:
        """The bias ``(h, n, m)`` for ``n`` queries and ``m`` keys (default ``m = n``)."""
        require_int(n, "n", 1)
        m = n if m is None else m
        require_int(m, "m", n)
        device = self.bias.weight.device
        q_pos = torch.arange(m - n, m, device=device)[:, None]
        k_pos = torch.arange(m, device=device)[None, :]
        buckets = relative_position_bucket(
            k_pos - q_pos,
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )
        return self.bias(buckets).permute(2, 0, 1)  # (n, m, h) -> (h, n, m)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, num_buckets={self.num_buckets}, "
            f"max_distance={self.max_distance}, bidirectional={self.bidirectional}"
        )


# ---- RoPE ------------------------------------------------------------------------------


def rope_frequencies(d: int, *, base: float = 10000.0, device=None) -> torch.Tensor:
    """RoPE's rotation speeds ``theta_i = base^(-2i/d)``, ``i = 0 .. d/2 - 1``.

    Returns a float32 tensor ``(d/2,)``.
    """
    require_even(d)
    return _frequencies(d, require_base(base), device=device).float()


def _check_positions(positions, x: torch.Tensor) -> torch.Tensor:
    """The positions of ``x``'s ``n`` rows, checked: a tensor ``(n,)`` or ``(..., n)``."""
    n = x.shape[-2]
    if isinstance(positions, int) and not isinstance(positions, bool):
        raise TypeError(
            f"positions must be a tensor of shape (n,) or (..., n), got the int {positions}; "
            f"use torch.arange({positions})"
        )
    if positions is None:
        raise TypeError("positions must be a tensor of shape (n,) or (..., n), got None")
    try:
        positions = torch.as_tensor(positions, device=x.device)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            "positions must be a tensor of shape (n,) or (..., n), "
            f"got {type(positions).__name__} {positions!r}"
        ) from None
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"positions must be integer or float, got dtype {positions.dtype}")
    if positions.dim() < 1 or positions.shape[-1] != n:
        raise ValueError(
            f"positions must have shape (n,) or (..., n) with n={n} (x's dim -2), "
            f"got {tuple(positions.shape)}"
        )
    # The positions' batch dimensions may broadcast against x's, never enlarge them: a
    # (2, n) position table for one (n, d) sequence would silently make two sequences.
    batch = tuple(x.shape[:-2])
    try:
        fits = tuple(torch.broadcast_shapes(positions.shape[:-1], batch)) == batch
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"positions of shape {tuple(positions.shape)} do not broadcast to x's batch "
            f"dimensions {batch} (x has shape {tuple(x.shape)}; positions must be (..., n))"
        )
    if positions.is_floating_point() and not torch.isfinite(positions).all():
        raise ValueError("positions must be finite, got inf or NaN")
    return positions.double()


#: The pairings :func:`apply_rope` knows: adjacent pairs ``(x[2i], x[2i+1])`` (the paper,
#: Meta's LLaMA code) or halves ``(x[i], x[i + d/2])`` (GPT-NeoX, Hugging Face's LLaMA).
ROPE_LAYOUTS = ("interleaved", "half")


def rotate_half_permutation(d: int) -> torch.Tensor:
    """The permutation that turns the interleaved layout into the rotate-half one.

    ``perm = [0, 2, 4, ..., d-2, 1, 3, ..., d-1]``: ``x[..., perm]`` puts the first member of
    every adjacent pair in the first half and the second member in the second half, so
    ``apply_rope(x, p)[..., perm] == apply_rope(x[..., perm], p, layout="half")``.

    Returns a ``torch.long`` tensor ``(d,)``.
    """
    require_even(d)
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def apply_rope(
    x: torch.Tensor,
    positions,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    rotary_dim: int | None = None,
    frequencies: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Rotary position embedding (Su et al., 2021), real rotation form.

    Pair ``i`` of the vector at position ``p`` is rotated by the angle ``p * theta_i`` with
    ``theta_i = base^(-2i/d)``. With ``layout="interleaved"`` (the paper's) the pairs are
    adjacent dimensions ``(x[2i], x[2i+1])``::

        out[2i]   = x[2i] cos(p theta_i) - x[2i+1] sin(p theta_i)
        out[2i+1] = x[2i] sin(p theta_i) + x[2i+1] cos(p theta_i)

    With ``layout="half"`` (GPT-NeoX, Hugging Face's LLaMA: "rotate half") pair ``i`` is
    ``(x[i], x[i + d/2])``: the same map after the permutation
    :func:`rotate_half_permutation`. Applied to queries and keys (never values), it makes
    ``<R_m q, R_n k>`` a function of ``m - n`` only, and it preserves norms.

    Args:
        x: ``(..., n, d)`` floating point.
        positions: ``(n,)`` or broadcastable ``(..., n)`` integer or float positions.
        base: the wavelength scale.
        layout: one of :data:`ROPE_LAYOUTS`.
        rotary_dim: partial rotary (GPT-NeoX, GPT-J): rotate only the first ``rotary_dim``
            dimensions (even), with frequencies ``base^(-2i/rotary_dim)``, and pass the rest
            through unchanged. ``None``: all ``d``.
        frequencies: ``(rotary_dim/2,)`` rotation speeds to use instead of ``base`` (e.g.
            :func:`scaled_rope_frequencies`).

    Returns:
        Tensor of the same shape and dtype as ``x`` (angles computed in float64).
    """
    require_float(x, "x")
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., n, d), got {tuple(x.shape)}")
    require_choice(layout, "layout", ROPE_LAYOUTS)
    d = x.shape[-1]
    if rotary_dim is None:
        r = require_even(d, "x's last dimension d")
    else:
        r = require_even(rotary_dim, "rotary_dim")
        if r > d:
            raise ValueError(f"rotary_dim must be at most x's last dimension {d}, got {r}")
    pos = _check_positions(positions, x)
    if frequencies is None:
        theta = _frequencies(r, require_base(base), device=x.device)
    else:
        require_tensor(frequencies, "frequencies")
        if tuple(frequencies.shape) != (r // 2,):
            raise ValueError(
                f"frequencies must have shape ({r // 2},) (one per rotated pair), "
                f"got {tuple(frequencies.shape)}"
            )
        theta = frequencies.to(device=x.device, dtype=torch.float64)
    angles = pos[..., :, None] * theta  # (..., n, r/2)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    rot, rest = x[..., :r], x[..., r:]
    if layout == "interleaved":
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    else:
        x1, x2 = rot[..., : r // 2], rot[..., r // 2 :]
        out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return torch.cat((out, rest), dim=-1) if r < d else out


def apply_rope_complex(x: torch.Tensor, positions, *, base: float = 10000.0) -> torch.Tensor:
    r"""RoPE written with complex numbers: ``z_i = x[2i] + j x[2i+1]`` times ``e^{j p theta_i}``.

    The same map as :func:`apply_rope` (a multiplication by a unit complex number *is* a
    2-D rotation); shown in chapter 6 and checked against it. Shapes as in :func:`apply_rope`.
    """
    require_float(x, "x")
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., n, d), got {tuple(x.shape)}")
    d = require_even(x.shape[-1], "x's last dimension d")
    pos = _check_positions(positions, x)
    angles = pos[..., :, None] * _frequencies(d, require_base(base), device=x.device)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    rotated = z * torch.polar(torch.ones_like(angles), angles)
    return torch.view_as_real(rotated).flatten(-2).to(x.dtype)


#: The RoPE scalings :class:`RopeScaling` knows.
ROPE_SCALINGS = ("linear", "ntk", "yarn")


@dataclass(frozen=True)
class RopeScaling:
    r"""How to stretch RoPE to a context ``factor`` times the training length.

    ``method`` is one of

    * ``"linear"``: position interpolation (Chen et al., 2023): every position is divided by
      ``s = factor``, i.e. ``theta_i -> theta_i / s``, so the longest new offset turns every
      pair no further than the longest offset seen in training;
    * ``"ntk"``: NTK-aware scaling (bloc97, 2023): the base is raised,
      ``base -> base * s^(d / (d - 2))``, which leaves the fastest pair unchanged and divides
      the slowest one's speed by exactly ``s``;
    * ``"yarn"``: YaRN's "NTK-by-parts" (Peng et al., 2023): with ``r_i = L theta_i / (2 pi)``
      the number of turns pair ``i`` makes over the training length ``L``, pairs with
      ``r_i < beta_slow`` are interpolated (``theta_i / s``), pairs with ``r_i > beta_fast``
      are kept, and those between are blended linearly,
      ``theta_i' = (1 - gamma_i) theta_i / s + gamma_i theta_i`` with
      ``gamma_i = (r_i - beta_slow) / (beta_fast - beta_slow)`` clipped to ``[0, 1]``; and
      queries and keys are both multiplied by ``0.1 ln s + 1`` (the paper's
      ``sqrt(1/t)``), which sharpens the softmax at the longer length.

    Args:
        method: one of :data:`ROPE_SCALINGS`.
        factor: ``s >= 1``, the new context over the training length.
        original_length: ``L``, the training length (needed by ``"yarn"``).
        beta_fast, beta_slow: YaRN's ``beta`` and ``alpha`` (32 and 1 in the paper, for LLaMA).
    """

    method: str
    factor: float
    original_length: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0

    def __post_init__(self):
        if self.method not in ROPE_SCALINGS:
            raise ValueError(f"method must be one of {ROPE_SCALINGS}, got {self.method!r}")
        factor = self.factor
        if isinstance(factor, bool) or not isinstance(factor, (int, float)):
            raise TypeError(f"factor must be a number >= 1, got {type(factor).__name__}")
        if not (math.isfinite(factor) and factor >= 1):
            raise ValueError(f"factor must be a finite number >= 1, got {factor!r}")
        if self.method == "yarn":
            if self.original_length is None:
                raise ValueError("yarn needs original_length (the training length L), got None")
            require_int(self.original_length, "original_length", 1)
            require_number(self.beta_fast, "beta_fast", positive=True)
            require_number(self.beta_slow, "beta_slow", nonnegative=True)
            if not 0 <= self.beta_slow < self.beta_fast:
                raise ValueError(
                    "yarn needs 0 <= beta_slow < beta_fast, "
                    f"got beta_slow={self.beta_slow}, beta_fast={self.beta_fast}"
                )

    @property
    def attention_factor(self) -> float:
        """The factor queries and keys are multiplied by, ``0.1 ln s + 1`` for YaRN, else 1."""
        return 0.1 * math.log(self.factor) + 1.0 if self.method == "yarn" else 1.0


def scaled_rope_frequencies(
    d: int, scaling: RopeScaling | None, *, base: float = 10000.0
) -> torch.Tensor:
    """RoPE's rotation speeds ``(d/2,)`` float64, after ``scaling`` (``None``: unscaled).

    The formulas are those of :class:`RopeScaling`; ``d`` is the number of rotated dimensions.
    """
    require_even(d)
    base = require_base(base)
    if scaling is None:
        return _frequencies(d, base)
    if not isinstance(scaling, RopeScaling):
        raise TypeError(f"scaling must be a RopeScaling or None, got {type(scaling).__name__}")
    s = float(scaling.factor)
    if scaling.method == "linear":
        return _frequencies(d, base) / s
    if scaling.method == "ntk":
        if d == 2:  # one pair: it is the fastest one, which NTK scaling keeps
            return _frequencies(d, base)
        return _frequencies(d, base * s ** (d / (d - 2)))
    theta = _frequencies(d, base)
    turns = scaling.original_length * theta / (2 * math.pi)  # r_i
    gamma = ((turns - scaling.beta_slow) / (scaling.beta_fast - scaling.beta_slow)).clamp(0, 1)
    return (1 - gamma) * theta / s + gamma * theta


class RotaryEmbedding(nn.Module):
    """RoPE as a module: rotates queries and keys ``(..., n, d_head)`` by their positions.

    Args:
        d_head: the per-head dimension.
        base: the wavelength scale.
        scaling: a :class:`RopeScaling` for contexts longer than the training length, or
            ``None``.
        layout: one of :data:`ROPE_LAYOUTS` (see :func:`apply_rope`).
        rotary_fraction: rotate only the first ``rotary_fraction * d_head`` dimensions
            (partial rotary; GPT-NeoX uses 0.25); that count must be even and >= 2.

    ``forward(q, k, q_positions=None, k_positions=None)`` returns the rotated ``(q, k)``.
    Positions default to ``0 .. n-1`` for keys and to the last ``n_q`` of them for
    queries (decoding against a cache). No parameters: RoPE is fixed.
    """

    def __init__(
        self,
        d_head: int,
        *,
        base: float = 10000.0,
        scaling: RopeScaling | None = None,
        layout: str = "interleaved",
        rotary_fraction: float = 1.0,
    ):
        super().__init__()
        self.d_head = require_int(d_head, "d_head", 2)
        self.base = require_base(base)
        self.layout = require_choice(layout, "layout", ROPE_LAYOUTS)
        if isinstance(rotary_fraction, bool) or not isinstance(rotary_fraction, (int, float)):
            raise TypeError(
                f"rotary_fraction must be a number in (0, 1], got {type(rotary_fraction).__name__}"
            )
        if not 0 < rotary_fraction <= 1:
            raise ValueError(f"rotary_fraction must be in (0, 1], got {rotary_fraction!r}")
        self.rotary_fraction = float(rotary_fraction)
        self.rotary_dim = require_even(int(d_head * rotary_fraction), "rotary_fraction * d_head")
        if scaling is not None and not isinstance(scaling, RopeScaling):
            raise TypeError(f"scaling must be a RopeScaling or None, got {type(scaling).__name__}")
        self.scaling = scaling

    def frequencies(self) -> torch.Tensor:
        """The rotation speeds in use, ``(rotary_dim/2,)`` float64 (after the scaling)."""
        return scaled_rope_frequencies(self.rotary_dim, self.scaling, base=self.base)

    def forward(self, q: torch.Tensor, k: torch.Tensor, q_positions=None, k_positions=None):
        """Rotate ``q`` ``(..., n_q, d_head)`` and ``k`` ``(..., n_k, d_head)``.

        Returns ``(q, k)`` rotated, of the same shapes (with YaRN, also multiplied by its
        attention factor).
        """
        for name, t in (("q", q), ("k", k)):
            require_float(t, name)
            if t.dim() < 2 or t.shape[-1] != self.d_head:
                raise ValueError(
                    f"{name} must have shape (..., n, d_head={self.d_head}), got {tuple(t.shape)}"
                )
        n_q, n_k = q.shape[-2], k.shape[-2]
        if k_positions is None:
            k_positions = torch.arange(n_k, device=k.device)
        if q_positions is None:
            if n_q > n_k:
                raise ValueError(
                    f"with default positions q may not be longer than k, got n_q={n_q}, n_k={n_k}"
                )
            q_positions = torch.arange(n_k - n_q, n_k, device=q.device)
        kwargs = dict(
            layout=self.layout, rotary_dim=self.rotary_dim, frequencies=self.frequencies()
        )
        q, k = apply_rope(q, q_positions, **kwargs), apply_rope(k, k_positions, **kwargs)
        if self.scaling is not None and self.scaling.attention_factor != 1.0:
            q, k = q * self.scaling.attention_factor, k * self.scaling.attention_factor
        return q, k

    def extra_repr(self) -> str:
        extra = "" if self.scaling is None else f", scaling={self.scaling}"
        if self.layout != "interleaved":
            extra += f", layout={self.layout!r}"
        if self.rotary_dim != self.d_head:
            extra += f", rotary_dim={self.rotary_dim}"
        return f"d_head={self.d_head}, base={self.base:g}{extra}"
