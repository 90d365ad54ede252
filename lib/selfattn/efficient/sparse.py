"""Sparse attention: a band-only sliding window and the Sparse Transformer's masks.

:func:`sliding_window_attention` never builds the n x n score matrix: it cuts the
queries into blocks and gives each block only the keys its window can reach, so
time and memory grow as ``n * window``, not ``n^2`` (Beltagy et al. 2020's
Longformer, and the sliding window of Mistral-style decoders). A window of ``w``
means what :func:`selfattn.masks.sliding_window_mask` means: ``w`` keys, the query's
own position included (``i - w < j <= i``, or ``|i - j| < w`` when not causal). The
masks below (``strided_mask``, ``block_sparse_mask``) are dense booleans, for
pictures and for the oracle the tests compare against.

With ``n`` queries and ``m`` keys the band follows a diagonal anchored by ``alignment``
(see :mod:`selfattn.efficient.flash`): ``"top_left"`` puts key ``i`` on query ``i``'s
diagonal, ``"bottom_right"`` key ``i + m - n`` (a window over the end of a cache). A
query whose band holds no key gets zeros. :func:`sliding_window_attention_reference` is
the short blocked version that the fast one is tested against.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .._checks import require_bool, require_int
from ..attention import softmax
from .flash import (
    _check_attention_args,
    _RecomputingAttention,
    _work_dtype,
)

__all__ = [
    "sliding_window_attention",
    "sliding_window_attention_reference",
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


# Score entries computed at once (16 MiB of float32): bounds a sliding window's working memory.
_GROUP_ELEMENTS = 1 << 22


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


def _band_limits(window: int, causal: bool) -> tuple[int, int]:
    """Key j is in query i's band when lo <= j - (i + offset) <= hi."""
    return -(window - 1), (0 if causal else window - 1)


def _check_window_args(q, k, v, window, alignment, scale):
    batch, offset, scale = _check_attention_args(q, k, v, alignment, scale)
    return batch, offset, scale, require_int(window, "window", 1)


def sliding_window_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    *,
    causal: bool = True,
    alignment: str = "top_left",
    scale: float | None = None,
    block_size: int = 64,
) -> torch.Tensor:
    r"""Sliding-window attention, blocked and plain: what :func:`sliding_window_attention` does.

    For each block of queries ``[i0, i1)``, take the keys its band can reach, score them,
    hide the ones outside each query's band and apply the softmax::

        keys   = [i0 + offset - (window - 1), i1 - 1 + offset + right]  (clipped to [0, m))
        S      = Q_block K_keys^T * scale,   S[i, j] = -inf outside the band
        O_block = softmax(S) V_keys

    Args: as :func:`sliding_window_attention` (``block_size`` >= 1, default 64).

    Returns:
        ``(..., n, d_v)`` in the dtype of ``q`` (half inputs computed in float32).
    """
    causal = require_bool(causal, "causal")
    batch, offset, scale, window = _check_window_args(q, k, v, window, alignment, scale)
    block = require_int(block_size, "block_size", 1)
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    lo, hi = _band_limits(window, causal)
    dtype, work = q.dtype, _work_dtype(q.dtype)
    q, k, v = q.to(work), k.to(work), v.to(work)
    out = q.new_zeros(*batch, n, d_v)
    for i0 in range(0, n, block):
        i1 = min(i0 + block, n)
        j0, j1 = max(0, i0 + offset + lo), min(m, i1 - 1 + offset + hi + 1)
        if j0 >= j1:  # the band of every query in the block is outside the keys
            continue
        s = q[..., i0:i1, :] @ k[..., j0:j1, :].transpose(-2, -1) * scale
        i = torch.arange(i0, i1, device=q.device)[:, None]
        j = torch.arange(j0, j1, device=q.device)[None, :]
        rel = j - i - offset
        s = s.masked_fill((rel < lo) | (rel > hi), float("-inf"))
        out[..., i0:i1, :] = softmax(s) @ v[..., j0:j1, :]  # softmax: zeros for an empty row
    return out.to(dtype)


def _window_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    batch: tuple[int, ...],
    *,
    window: int,
    causal: bool,
    offset: int,
    scale: float,
    block: int,
    want_lse: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The band-only forward: ``(out (B, n, d_v), lse (B, n) or None)`` in the work dtype."""
    n, m, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    work = _work_dtype(q.dtype)
    nb = -(-n // block)
    pad_end = nb * block - n
    back = window - 1  # how many positions before the diagonal it sees
    right = 0 if causal else back
    span = block + back + right  # keys one query block can reach

    bh = math.prod(batch)
    qf = q.to(work).expand(*batch, n, d_k).reshape(bh, n, d_k)
    if bh * n * d_v == 0 or m == 0:  # nothing to compute, or no keys: zeros
        out = torch.zeros(bh, n, d_v, dtype=work, device=q.device)
        lse = torch.full((bh, n), float("-inf"), dtype=work, device=q.device)
        return out, (lse if want_lse else None)
    # Padded key row t holds key t + start (zeros outside [0, m)): every block's reach is then a
    # window [b * block, b * block + span) of the padded sequence, and unfold gives all of them
    # as a view.
    start, length = offset - back, nb * block + span - block
    front = min(length, max(0, -start))
    first, stop = max(0, start), min(m, start + length)
    seg = max(0, stop - first)

    def padded(t, d):
        t = t.to(work).expand(*batch, m, d).reshape(bh, m, d)[:, first : first + seg]
        return F.pad(t, (0, 0, front, length - front - seg))

    kp, vp = padded(k, d_k), padded(v, d_v)
    qb = F.pad(qf, (0, 0, 0, pad_end)).reshape(bh, nb, block, d_k)  # (B, nb, block, d_k)
    kw = kp.unfold(1, span, block).transpose(-1, -2)  # (B, nb, span, d_k) view, no copy
    vw = vp.unfold(1, span, block).transpose(-1, -2)  # (B, nb, span, d_v)

    # In tile coordinates query r of block b is position b*block + r, key c is b*block + c + start.
    r = torch.arange(block, device=q.device)[:, None]
    c = torch.arange(span, device=q.device)[None, :]
    rel = (c - back) - r  # key position minus the query's diagonal
    allowed = (rel >= -back) & (rel <= right)  # (block, span), the same for every block
    # Keys that are padding: before key 0 or past key m - 1.
    key_pos = torch.arange(nb, device=q.device)[:, None] * block + c + start  # (nb, span)
    real_key = (key_pos >= 0) & (key_pos < m)
    forbid = ~(allowed[None, :, :] & real_key[:, None, :])  # (nb, block, span)

    out = torch.empty(bh, nb, block, d_v, dtype=work, device=q.device)
    lse = torch.empty(bh, nb, block, dtype=work, device=q.device) if want_lse else None
    # Blocks are processed a group at a time, so the working memory (score tiles and the copies
    # matmul makes of the strided key windows) stays bounded whatever n is; only the output grows.
    group = max(1, _GROUP_ELEMENTS // (bh * block * span))
    for g0 in range(0, nb, group):
        g1 = min(g0 + group, nb)
        scores = torch.matmul(
            qb[:, g0:g1] * scale, kw[:, g0:g1].transpose(-1, -2)
        )  # (B, G, block, span)
        scores.masked_fill_(forbid[g0:g1], float("-inf"))
        # Softmax in place. A row with no key in its band (or a padded query row) has max -inf:
        # shift it by 0 instead, and divide its zero sum by 1, so it gives zeros, not NaN.
        row_max = scores.amax(dim=-1, keepdim=True)
        row_max.masked_fill_(row_max == float("-inf"), 0.0)
        scores.sub_(row_max).exp_()
        row_sum = scores.sum(dim=-1, keepdim=True)
        if want_lse:
            lse[:, g0:g1] = (row_max + row_sum.log()).squeeze(-1)
        row_sum.masked_fill_(row_sum == 0, 1.0)
        scores.div_(row_sum)
        torch.matmul(scores, vw[:, g0:g1], out=out[:, g0:g1])
    out = out.reshape(bh, nb * block, d_v)[:, :n]
    return out, (lse.reshape(bh, nb * block)[:, :n] if want_lse else None)


class _SlidingWindow(_RecomputingAttention):
    """Forward: band only, saving O and the row log-sum-exp. Backward: FA-2's, on the band."""

    kernel = staticmethod(_window_forward)

    @staticmethod
    def band(options: dict) -> dict:
        lo, hi = _band_limits(options["window"], options["causal"])
        block, scale, offset = options["block"], options["scale"], options["offset"]
        return dict(scale=scale, offset=offset, lo=lo, hi=hi, block_q=block, block_k=block)


def sliding_window_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    *,
    causal: bool = True,
    scale: float | None = None,
    block_size: int | None = None,
    alignment: str = "top_left",
) -> torch.Tensor:
    r"""Attention restricted to a band, computing only the band: O(n * window) time and memory.

    Query ``i`` attends to keys ``j`` with ``i - window < j <= i`` (``causal``) or
    ``|i - j| < window`` (not causal), exactly as dense attention with
    :func:`selfattn.masks.sliding_window_mask` would, but without building the n x m matrix.
    With ``m != n`` keys, ``i`` is replaced by the query's diagonal ``i + offset``
    (``offset = 0`` top-left, ``m - n`` bottom-right).

    How: queries are cut into blocks of ``block_size`` ``B``; block ``b`` (queries ``[s, s + B)``)
    can only reach keys ``[s - window + 1, s + B)`` (or up to ``s + B + window - 1``), so
    each block computes a ``B x (B + window - 1)`` tile against a strided *view* of the
    padded keys, masks the out-of-band corners of the tile, and applies the softmax.
    Work: ``n / B`` tiles of ``B (B + window)``, i.e. about ``n (B + window)``: linear in n.
    Differentiable: when an input requires grad the forward saves the output and the row
    log-sum-exp, and the backward recomputes the band tile by tile (FlashAttention-2's
    Algorithm 2), O(n d) extra memory.

    Args:
        q, k, v: ``(..., n, d_k)``, ``(..., m, d_k)``, ``(..., m, d_v)``; batch dims broadcast.
        window: keys each query sees looking back, itself included (>= 1); not causal: the
            same reach forward too. A window beyond ``max(n, m)`` changes nothing.
        causal: only look back.
        scale: defaults to ``1 / sqrt(d_k)``.
        block_size: queries per tile; default ``max(window, 16)`` (any n works, not only
            multiples).
        alignment: ``"top_left"`` or ``"bottom_right"``: where the band's diagonal sits when
            ``n != m`` (see :func:`selfattn.efficient.flash.flash_attention`).

    Returns:
        ``(..., n, d_v)`` in the dtype of ``q``; float16 / bfloat16 inputs are computed in
        float32 (scores, softmax and sums). A query whose band holds no key gets zeros.

    Raises:
        TypeError: bad tensors, or ``window`` / ``block_size`` not an int.
        ValueError: ``window`` or ``block_size`` below 1, shapes that do not fit, tensors on
            different devices, an unknown alignment.
    """
    causal = require_bool(causal, "causal")
    batch, offset, scale, window = _check_window_args(q, k, v, window, alignment, scale)
    if block_size is not None:
        block_size = require_int(block_size, "block_size", 1)
    n, m = q.shape[-2], k.shape[-2]
    block = max(window, 16) if block_size is None else block_size
    if block * (block + 2 * (window - 1)) > _GROUP_ELEMENTS:
        # A window wider than max(n, m) sees what max(n, m) sees, and a block longer than n is one
        # block: clip both before a single tile outgrows the working-memory bound (window=10**5
        # with n=5 would ask for 10**10 scores). Smaller calls keep their tile layout as given.
        window = min(window, max(n, m, 1))
        block = min(max(window, 16) if block_size is None else block_size, max(n, 1))
    causal = bool(causal)
    return _SlidingWindow.run(
        q, k, v, batch, window=window, causal=causal, offset=offset, scale=scale, block=block
    )


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
    is_global = _positions(global_tokens, n, "global_tokens", device)
    mask = ((i - j).abs() < window) | is_global[:, None] | is_global[None, :]
    return mask & (j <= i) if causal else mask


def _positions(spec, n: int, name: str, device) -> torch.Tensor:
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
    batch, _, scale = _check_attention_args(q, k, v, "top_left", scale)
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
    dtype, work = q.dtype, _work_dtype(q.dtype)
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
