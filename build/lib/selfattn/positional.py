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
  as the same map written with complex numbers.

Conventions: positions index dimension ``-2`` of a ``(..., n, d)`` tensor; biases have
shape ``(h, n, m)`` and are *added* to the scores (a float mask for
:func:`~selfattn.attention.scaled_dot_product_attention`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._checks import require_float, require_int, require_tensor

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
    "RotaryEmbedding",
]


def _require_int(value, name: str, minimum: int) -> int:
    return require_int(value, name, minimum)


def _require_even(d, name: str = "d") -> int:
    _require_int(d, name, 2)
    if d % 2:
        raise ValueError(
            f"{name} must be even (dimensions come in sin/cos or rotation pairs), got {d}"
        )
    return d


def _require_base(base) -> float:
    if not isinstance(base, (int, float)) or isinstance(base, bool):
        raise TypeError(f"base must be a number > 1, got {type(base).__name__} {base!r}")
    if not (base > 1 and math.isfinite(base)):
        raise ValueError(f"base must be a number > 1 (and finite), got {base!r}")
    return float(base)


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
    _require_int(n, "n", 1)
    _require_even(d)
    base = _require_base(base)
    _require_int(offset, "offset", 0)
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
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int, got {type(k).__name__} {k!r}")
    _require_even(d)
    base = _require_base(base)
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
        init_std: standard deviation of the initial rows (GPT-2 uses 0.02).
    """

    def __init__(self, max_len: int, d: int, *, init_std: float = 0.02):
        super().__init__()
        self.max_len = _require_int(max_len, "max_len", 1)
        self.d = _require_int(d, "d", 1)
        self.weight = nn.Parameter(torch.randn(max_len, d) * init_std)

    def forward(self, x: torch.Tensor, *, offset: int = 0) -> torch.Tensor:
        """``x + table[offset : offset + n]`` for ``x`` of shape ``(..., n, d)``; same shape."""
        require_float(x, "x")
        offset = _require_int(offset, "offset", 0)
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
    _require_int(num_heads, "num_heads", 1)

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
    _require_int(num_heads, "num_heads", 1)
    _require_int(n, "n", 1)
    m = n if m is None else m
    _require_int(m, "m", 1)
    if m < n:
        raise ValueError(
            f"alibi_bias needs m >= n (queries are the last n of m positions), got n={n}, m={m}"
        )
    q_pos = torch.arange(m - n, m, device=device)[:, None]
    k_pos = torch.arange(m, device=device)[None, :]
    distance = (q_pos - k_pos).abs().float()  # (n, m)
    bias = -alibi_slopes(num_heads).to(device)[:, None, None] * distance  # (h, n, m)
    if causal:
        bias = bias.masked_fill(k_pos > q_pos, float("-inf"))
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
    require_tensor(relative_position, "relative_position")
    if relative_position.is_floating_point() or relative_position.dtype == torch.bool:
        raise TypeError(
            f"relative_position must be an integer tensor, got dtype {relative_position.dtype}"
        )
    _require_int(num_buckets, "num_buckets", 4 if bidirectional else 2)
    _require_int(max_distance, "max_distance", 1)
    rel = relative_position.long()
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
        self.num_heads = _require_int(num_heads, "num_heads", 1)
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
        _require_int(n, "n", 1)
        m = n if m is None else m
        _require_int(m, "m", n)
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
    _require_even(d)
    return _frequencies(d, _require_base(base), device=device).float()


def _positions(positions, x: torch.Tensor) -> torch.Tensor:
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


def apply_rope(x: torch.Tensor, positions, *, base: float = 10000.0) -> torch.Tensor:
    r"""Rotary position embedding (Su et al., 2021), real rotation form.

    Dimensions are taken in adjacent pairs ``(x[2i], x[2i+1])`` (the paper's layout) and
    pair ``i`` of the vector at position ``p`` is rotated by the angle ``p * theta_i`` with
    ``theta_i = base^(-2i/d)``::

        out[2i]   = x[2i] cos(p theta_i) - x[2i+1] sin(p theta_i)
        out[2i+1] = x[2i] sin(p theta_i) + x[2i+1] cos(p theta_i)

    Applied to queries and keys (never values), it makes ``<R_m q, R_n k>`` a function of
    ``m - n`` only, and it preserves norms. (GPT-NeoX and LLaMA pair ``x[i]`` with
    ``x[i + d/2]`` instead: the same rotation after a fixed permutation of dimensions.)

    Args:
        x: ``(..., n, d)`` floating point, ``d`` even.
        positions: ``(n,)`` or broadcastable ``(..., n)`` integer or float positions.
        base: the wavelength scale.

    Returns:
        Tensor of the same shape and dtype as ``x`` (angles computed in float64).
    """
    require_float(x, "x")
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., n, d), got {tuple(x.shape)}")
    d = _require_even(x.shape[-1], "x's last dimension d")
    pos = _positions(positions, x)
    angles = pos[..., :, None] * _frequencies(
        d, _require_base(base), device=x.device
    )  # (..., n, d/2)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (..., n, d/2, 2)
    return out.flatten(-2)


def apply_rope_complex(x: torch.Tensor, positions, *, base: float = 10000.0) -> torch.Tensor:
    r"""RoPE written with complex numbers: ``z_i = x[2i] + j x[2i+1]`` times ``e^{j p theta_i}``.

    The same map as :func:`apply_rope` (a multiplication by a unit complex number *is* a
    2-D rotation); shown in chapter 6 and checked against it. Shapes as in :func:`apply_rope`.
    """
    require_float(x, "x")
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., n, d), got {tuple(x.shape)}")
    d = _require_even(x.shape[-1], "x's last dimension d")
    pos = _positions(positions, x)
    angles = pos[..., :, None] * _frequencies(d, _require_base(base), device=x.device)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    rotated = z * torch.polar(torch.ones_like(angles), angles)
    return torch.view_as_real(rotated).flatten(-2).to(x.dtype)


class RotaryEmbedding(nn.Module):
    """RoPE as a module: rotates queries and keys ``(..., n, d_head)`` by their positions.

    Args:
        d_head: the per-head dimension (even).
        base: the wavelength scale.

    ``forward(q, k, q_positions=None, k_positions=None)`` returns the rotated ``(q, k)``.
    Positions default to ``0 .. n-1`` for keys and to the last ``n_q`` of them for
    queries (decoding against a cache). No parameters: RoPE is fixed.
    """

    def __init__(self, d_head: int, *, base: float = 10000.0):
        super().__init__()
        self.d_head = _require_even(d_head, "d_head")
        self.base = _require_base(base)

    def forward(self, q: torch.Tensor, k: torch.Tensor, q_positions=None, k_positions=None):
        """Rotate ``q`` ``(..., n_q, d_head)`` and ``k`` ``(..., n_k, d_head)``.

        Returns ``(q, k)`` rotated, of the same shapes.
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
        return apply_rope(q, q_positions, base=self.base), apply_rope(
            k, k_positions, base=self.base
        )

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, base={self.base:g}"
