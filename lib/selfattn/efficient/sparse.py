"""Sparse attention patterns: the mask families, and attention on a block layout.

The Sparse Transformer's strided pattern (:func:`strided_mask`), Longformer's window with
global tokens (:func:`longformer_mask`), BigBird's window + global + random blocks
(:func:`bigbird_layout`, :func:`bigbird_mask`), StreamingLLM's window with attention
sinks (:func:`sink_window_mask`) and block layouts (:func:`block_sparse_mask`,
:func:`layout_from_mask`) are dense booleans (``True`` = may attend), for pictures and
for the oracle the tests compare against; :func:`receptive_field` composes a mask over
layers. :func:`block_sparse_attention` computes only the tiles a layout turns on. The
sliding window that computes only its band is :mod:`selfattn.efficient.sliding_window`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .._checks import (
    require_bool,
    require_int,
)
from ..attention import softmax
from ._tiled import check_tiled, work_dtype

__all__ = [
    "strided_mask",
    "block_sparse_mask",
    "receptive_field",
    "longformer_mask",
    "bigbird_layout",
    "bigbird_mask",
    "sink_window_mask",
    "layout_from_mask",
    "block_sparse_attention",
]


def strided_mask(n: int, stride: int, *, causal: bool = True, device=None) -> torch.Tensor:
    """The Sparse Transformer's strided pattern (Child et al. 2019): the union of its two heads.

    Query ``i`` may attend to key ``j`` when ``j`` is among the previous ``stride`` positions
    (``i - j < stride``, the local head) or ``(i - j) % stride == 0`` (the strided head, every
    ``stride``-th position). With ``stride ~ sqrt(n)`` and ``causal`` the last row has about
    ``2 sqrt(n)`` entries and the average row about ``1.5 sqrt(n)``.

    Returns:
        Bool ``(n, n)``; with ``causal`` only ``j <= i``.
    """
    causal = require_bool(causal, "causal")
    require_int(n, "n", 1)
    require_int(stride, "stride", 1)
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    diff = i - j
    if causal:
        return (diff >= 0) & ((diff < stride) | (diff % stride == 0))
    return (diff.abs() < stride) | (diff % stride == 0)


def block_sparse_mask(n: int, block: int, layout: torch.Tensor) -> torch.Tensor:
    """Expand a block layout into a token mask (the form block-sparse kernels use).

    Args:
        n: sequence length (need not be a multiple of ``block``).
        block: tokens per block.
        layout: bool ``(ceil(n / block), ceil(n / block))``: which (query block, key block)
            pairs are computed.

    Returns:
        Bool ``(n, n)``: ``mask[i, j] = layout[i // block, j // block]``.
    """
    require_int(n, "n", 1)
    require_int(block, "block", 1)
    nb = math.ceil(n / block)
    if not isinstance(layout, torch.Tensor) or layout.dtype != torch.bool:
        raise TypeError(
            f"layout must be a bool tensor, got {type(layout).__name__} "
            f"{getattr(layout, 'dtype', '')}"
        )
    if tuple(layout.shape) != (nb, nb):
        raise ValueError(
            f"layout must have shape ({nb}, {nb}) for n={n}, block={block}, "
            f"got {tuple(layout.shape)}"
        )
    idx = torch.arange(n, device=layout.device) // block
    return layout[idx[:, None], idx[None, :]]


def receptive_field(mask: torch.Tensor, layers: int) -> torch.Tensor:
    """Which inputs reach which outputs through ``layers`` stacked attention layers with ``mask``.

    Composition of reachability: ``R_1 = mask``, ``R_{L+1} = R_L @ mask`` (boolean). With a
    causal sliding window of ``w`` keys the reach grows by ``w - 1`` positions per layer
    (``L (w - 1) + 1`` inputs after L layers).

    Returns:
        Bool ``(n, n)``: ``[i, j]`` is True when input ``j`` influences output ``i`` after
        ``layers`` layers.
    """
    require_int(layers, "layers", 1)
    if mask.dtype != torch.bool or mask.dim() != 2 or mask.shape[0] != mask.shape[1]:
        raise ValueError(
            f"mask must be a square bool (n, n) tensor, got {mask.dtype} {tuple(mask.shape)}"
        )
    m = mask.float()
    reach = m
    for _ in range(layers - 1):
        reach = ((reach @ m) > 0).float()
    return reach > 0


def longformer_mask(
    n: int, window: int, global_tokens: int | list[int], *, causal: bool = False, device=None
) -> torch.Tensor:
    """Longformer's pattern (Beltagy et al. 2020): a sliding window plus global tokens.

    Query ``i`` may attend to key ``j`` when ``|i - j| < window`` (``j <= i`` too with
    ``causal``), or when ``i`` or ``j`` is a global token: global tokens see every position
    and every position sees them (within the causal triangle when ``causal``).

    Args:
        n: sequence length.
        window: keys each query sees on each side, itself included (>= 1).
        global_tokens: how many leading positions are global (an int), or their positions.

    Returns:
        Bool ``(n, n)``, True = may attend.
    """
    causal = require_bool(causal, "causal")
    require_int(n, "n", 1)
    require_int(window, "window", 1)
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    is_global = _position_flags(global_tokens, n, "global_tokens", device)
    mask = ((i - j).abs() < window) | is_global[:, None] | is_global[None, :]
    return mask & (j <= i) if causal else mask


def _position_flags(spec, n: int, name: str, device) -> torch.Tensor:
    """Bool ``(n,)`` from a count of leading positions or a list of positions."""
    flags = torch.zeros(n, dtype=torch.bool, device=device)
    if isinstance(spec, int) and not isinstance(spec, bool):
        flags[: require_int(spec, name, 0)] = True
        return flags
    if not isinstance(spec, (list, tuple)) or not all(
        isinstance(p, int) and not isinstance(p, bool) and 0 <= p < n for p in spec
    ):
        raise ValueError(
            f"{name} must be an int >= 0 or a list of positions in [0, {n}), got {spec!r}"
        )
    flags[list(spec)] = True
    return flags


def bigbird_layout(
    num_blocks: int,
    *,
    window_blocks: int = 3,
    global_blocks: int = 1,
    random_blocks: int = 1,
    generator: torch.Generator | None = None,
    device=None,
) -> torch.Tensor:
    """BigBird's block layout (Zaheer et al. 2020): window + global + random blocks.

    Query block ``a`` attends to key block ``b`` when ``|a - b| <= window_blocks // 2`` (the
    sliding blocks), when either is one of the first ``global_blocks`` (global blocks see and
    are seen by every block), or when ``b`` is one of ``random_blocks`` key blocks drawn
    uniformly for row ``a`` among those not already on (non-global rows only).

    Returns:
        Bool ``(num_blocks, num_blocks)``; expand it with :func:`block_sparse_mask`.
    """
    nb = require_int(num_blocks, "num_blocks", 1)
    half = require_int(window_blocks, "window_blocks", 1) // 2
    g = require_int(global_blocks, "global_blocks", 0)
    r = require_int(random_blocks, "random_blocks", 0)
    a = torch.arange(nb, device=device)[:, None]
    b = torch.arange(nb, device=device)[None, :]
    layout = ((a - b).abs() <= half) | (a < g) | (b < g)
    for row in range(g, nb):
        free = (~layout[row]).nonzero().flatten()
        if len(free) and r:
            pick = torch.randperm(len(free), generator=generator)[:r].to(free.device)
            layout[row, free[pick]] = True
    return layout


def bigbird_mask(n: int, block: int, **layout) -> torch.Tensor:
    """BigBird's token mask: :func:`bigbird_layout` over ``ceil(n / block)`` blocks, expanded.

    Args:
        n: sequence length. block: tokens per block.
        layout: :func:`bigbird_layout`'s keyword arguments (``window_blocks``,
            ``global_blocks``, ``random_blocks``, ``generator``, ``device``), its defaults
            unless given.

    Returns:
        Bool ``(n, n)``, True = may attend.
    """
    require_int(n, "n", 1)
    require_int(block, "block", 1)
    return block_sparse_mask(n, block, bigbird_layout(math.ceil(n / block), **layout))


def sink_window_mask(n: int, window: int, sinks: int, *, device=None) -> torch.Tensor:
    """StreamingLLM's attention (Xiao et al. 2024): a causal window that keeps the first tokens.

    Query ``i`` may attend to key ``j <= i`` when ``i - j < window`` or ``j < sinks`` (the
    "attention sinks"). ``sinks=0`` is the plain causal sliding window.

    Returns:
        Bool ``(n, n)``, True = may attend.
    """
    require_int(n, "n", 1)
    require_int(window, "window", 1)
    require_int(sinks, "sinks", 0)
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    return (j <= i) & (((i - j) < window) | (j < sinks))


def layout_from_mask(mask: torch.Tensor, block: int) -> torch.Tensor:
    """The blocks a token mask touches: ``layout[a, b]`` is True when any ``mask[i, j]`` with
    ``i // block == a`` and ``j // block == b`` is True.

    Args:
        mask: bool ``(n, m)``.
        block: tokens per block (>= 1).

    Returns:
        Bool ``(ceil(n / block), ceil(m / block))``.
    """
    require_int(block, "block", 1)
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 2:
        raise TypeError(f"mask must be a 2-D bool tensor, got {type(mask).__name__}")
    n, m = mask.shape
    nb, mb = math.ceil(n / block), math.ceil(m / block)
    padded = F.pad(mask, (0, mb * block - m, 0, nb * block - n))
    return padded.reshape(nb, block, mb, block).any(dim=3).any(dim=1)


def block_sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: torch.Tensor,
    block: int,
    *,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    r"""Attention computed only on the (query block, key block) tiles a layout turns on.

    For each query block ``a`` the key blocks ``b`` with ``layout[a, b]`` are gathered, scored
    and softmaxed together; the other tiles are never computed, so the work is
    ``block^2 d`` per tile on, not ``n m d``. With ``mask`` (a token mask such as
    :func:`longformer_mask`, whose tiles ``layout`` covers, e.g. ``layout_from_mask(mask, block)``)
    the entries of the gathered tiles outside it are set to ``-inf`` first. The result equals
    dense attention with the mask ``block_sparse_mask(...) & mask``; a query that sees no key
    gets zeros.

    Args:
        q: ``(..., n, d)``; k: ``(..., m, d)``; v: ``(..., m, d_v)``.
        layout: bool ``(ceil(n / block), ceil(m / block))``.
        block: tokens per block (>= 1).
        mask: optional bool ``(n, m)``, True = may attend.
        scale: defaults to ``1 / sqrt(d)``.

    Returns:
        ``(..., n, d_v)`` in the dtype of ``q`` (half inputs computed in float32).
    """
    a = check_tiled(q, k, v, False, "top_left", scale, block_q=1)
    batch, scale = a.batch, a.scale
    block = require_int(block, "block", 1)
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    nb, mb = math.ceil(n / block), math.ceil(m / block)
    if not isinstance(layout, torch.Tensor) or layout.dtype != torch.bool:
        raise TypeError(f"layout must be a bool tensor, got {type(layout).__name__}")
    if tuple(layout.shape) != (nb, mb):
        raise ValueError(
            f"layout must have shape ({nb}, {mb}) for n={n}, m={m}, block={block}, "
            f"got {tuple(layout.shape)}"
        )
    if mask is not None and (
        not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != (n, m)
    ):
        raise ValueError(
            f"mask must be a bool ({n}, {m}) tensor, got {tuple(getattr(mask, 'shape', ()))}"
        )
    dtype, work = q.dtype, work_dtype(q.dtype)
    q, k, v = q.to(work), k.to(work), v.to(work)
    out = q.new_zeros(*batch, n, d_v)
    key_block = torch.arange(m, device=q.device) // block
    for a in range(nb):
        cols = layout[a].nonzero().flatten()
        if len(cols) == 0:
            continue
        keys = torch.isin(key_block, cols).nonzero().flatten()  # the on tiles' keys, in order
        i0, i1 = a * block, min((a + 1) * block, n)
        s = q[..., i0:i1, :] @ k[..., keys, :].transpose(-2, -1) * scale
        if mask is not None:
            s = s.masked_fill(~mask[i0:i1][:, keys], float("-inf"))
        out[..., i0:i1, :] = softmax(s) @ v[..., keys, :]
    return out.to(dtype)
