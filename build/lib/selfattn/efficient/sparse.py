"""Sparse attention: a sliding window computed band-only, and the Sparse Transformer's masks (chapter 8).

:func:`sliding_window_attention` never builds the n x n score matrix: it cuts the
queries into blocks and gives each block only the keys its window can reach, so
time and memory grow as ``n * window``, not ``n^2`` (Beltagy et al. 2020's
Longformer, and the sliding window of Mistral-style decoders). A window of ``w``
means what :func:`selfattn.masks.sliding_window_mask` means: ``w`` keys, the query's
own position included (``i - w < j <= i``, or ``|i - j| < w`` when not causal). The
masks below (``strided_mask``, ``block_sparse_mask``) are dense booleans, for
pictures and for the oracle the tests compare against.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .._checks import check_qkv

__all__ = [
    "sliding_window_attention",
    "strided_mask",
    "block_sparse_mask",
    "receptive_field",
]


# Score entries computed at once (16 MiB of float32): bounds the working memory of a sliding window.
_GROUP_ELEMENTS = 1 << 22


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def strided_mask(n: int, stride: int, *, causal: bool = True, device=None) -> torch.Tensor:
    """The Sparse Transformer's strided pattern (Child et al. 2019): the union of its two heads.

    Query ``i`` may attend to key ``j`` when ``j`` is among the previous ``stride`` positions
    (``i - j < stride``, the local head) or ``(i - j) % stride == 0`` (the strided head, every
    ``stride``-th position). With ``stride ~ sqrt(n)`` each row has about ``2 sqrt(n)`` entries.

    Returns:
        Bool ``(n, n)``; with ``causal`` only ``j <= i``.
    """
    _check_int(n, "n", 1)
    _check_int(stride, "stride", 1)
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
        layout: bool ``(ceil(n / block), ceil(n / block))``: which (query block, key block) pairs are computed.

    Returns:
        Bool ``(n, n)``: ``mask[i, j] = layout[i // block, j // block]``.
    """
    _check_int(n, "n", 1)
    _check_int(block, "block", 1)
    nb = math.ceil(n / block)
    if not isinstance(layout, torch.Tensor) or layout.dtype != torch.bool:
        raise TypeError(
            f"layout must be a bool tensor, got {type(layout).__name__} {getattr(layout, 'dtype', '')}"
        )
    if tuple(layout.shape) != (nb, nb):
        raise ValueError(
            f"layout must have shape ({nb}, {nb}) for n={n}, block={block}, got {tuple(layout.shape)}"
        )
    idx = torch.arange(n, device=layout.device) // block
    return layout[idx[:, None], idx[None, :]]


def receptive_field(mask: torch.Tensor, layers: int) -> torch.Tensor:
    """Which inputs can reach which outputs through ``layers`` stacked attention layers with ``mask``.

    Composition of reachability: ``R_1 = mask``, ``R_{L+1} = R_L @ mask`` (boolean). With a
    causal sliding window of ``w`` keys the reach grows by ``w - 1`` positions per layer
    (``L (w - 1) + 1`` inputs after L layers).

    Returns:
        Bool ``(n, n)``: ``[i, j]`` is True when input ``j`` influences output ``i`` after ``layers`` layers.
    """
    _check_int(layers, "layers", 1)
    if mask.dtype != torch.bool or mask.dim() != 2 or mask.shape[0] != mask.shape[1]:
        raise ValueError(
            f"mask must be a square bool (n, n) tensor, got {mask.dtype} {tuple(mask.shape)}"
        )
    m = mask.float()
    reach = m
    for _ in range(layers - 1):
        reach = ((reach @ m) > 0).float()
    return reach > 0


def sliding_window_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    *,
    causal: bool = True,
    scale: float | None = None,
    block_size: int | None = None,
) -> torch.Tensor:
    r"""Self-attention restricted to a band, computing only the band: O(n * window) time and memory.

    Query ``i`` attends to keys ``j`` with ``i - window < j <= i`` (``causal``) or
    ``|i - j| < window`` (not causal), exactly as dense attention with
    :func:`selfattn.masks.sliding_window_mask` would, but without building the n x n matrix.

    How: queries are cut into blocks of ``block_size`` ``B``; block ``b`` (queries ``[s, s + B)``)
    can only reach keys ``[s - window + 1, s + B)`` (or up to ``s + B + window - 1``), so
    each block computes a ``B x (B + window - 1)`` tile against a strided *view* of the
    padded keys, masks the out-of-band corners of the tile, and applies the softmax.
    Work: ``n / B`` tiles of ``B (B + window)``, i.e. about ``n (B + window)``: linear in n.

    Args:
        q, k, v: ``(..., n, d_k)``, ``(..., n, d_k)``, ``(..., n, d_v)`` (self-attention: one length n).
        window: keys each query sees looking back, itself included (>= 1); not causal: the
            same reach forward too.
        causal: only look back.
        scale: defaults to ``1 / sqrt(d_k)``.
        block_size: queries per tile; default ``max(window, 16)`` (any n works, not only multiples).

    Returns:
        ``(..., n, d_v)``.

    Raises:
        TypeError: bad tensors, or ``window`` / ``block_size`` not an int.
        ValueError: ``window`` below 1, or q and k of different lengths.
    """
    batch = check_qkv(q, k, v)
    _check_int(window, "window", 1)
    n, d_k, d_v = q.shape[-2], q.shape[-1], v.shape[-1]
    if k.shape[-2] != n:
        raise ValueError(
            f"sliding_window_attention is self-attention: q and k need the same length n, got q {tuple(q.shape)} "
            f"and k {tuple(k.shape)}"
        )
    block = max(window, 16) if block_size is None else _check_int(block_size, "block_size", 1)
    if scale is None:
        scale = 1.0 / math.sqrt(d_k)
    nb = -(-n // block)
    pad_end = nb * block - n
    back = window - 1  # how many positions before the query it sees
    right = 0 if causal else back
    span = block + back + right  # keys one query block can reach

    qf = q.expand(*batch, n, d_k).reshape(-1, n, d_k)
    # Pad keys/values with `back` rows in front (and behind): every block's reach is then a window
    # [b * block, b * block + span) of the padded sequence, and unfold gives all of them as a view.
    kp = F.pad(k.expand(*batch, n, d_k).reshape(-1, n, d_k), (0, 0, back, pad_end + right))
    vp = F.pad(v.expand(*batch, n, d_v).reshape(-1, n, d_v), (0, 0, back, pad_end + right))
    qb = F.pad(qf, (0, 0, 0, pad_end)).reshape(-1, nb, block, d_k)  # (B, nb, block, d_k)
    kw = kp.unfold(1, span, block).transpose(-1, -2)  # (B, nb, span, d_k) view, no copy
    vw = vp.unfold(1, span, block).transpose(-1, -2)  # (B, nb, span, d_v)

    # In tile coordinates query r of block b is position b*block + r, key c is b*block + c - back.
    r = torch.arange(block, device=q.device)[:, None]
    c = torch.arange(span, device=q.device)[None, :]
    rel = (c - back) - r  # key position minus query position
    allowed = (rel >= -back) & (rel <= right)  # (block, span), the same for every block
    # Keys that are padding: the first `back` padded rows and anything past n.
    key_pos = torch.arange(nb, device=q.device)[:, None] * block + c - back  # (nb, span)
    real_key = (key_pos >= 0) & (key_pos < n)
    forbid = ~(allowed[None, :, :] & real_key[:, None, :])  # (nb, block, span)

    out = torch.empty(qb.shape[0], nb, block, d_v, dtype=q.dtype, device=q.device)
    # Blocks are processed a group at a time, so the working memory (score tiles and the copies
    # matmul makes of the strided key windows) stays bounded whatever n is; only the output grows.
    group = max(1, _GROUP_ELEMENTS // (qb.shape[0] * block * span))
    for g0 in range(0, nb, group):
        g1 = min(g0 + group, nb)
        scores = torch.matmul(
            qb[:, g0:g1] * scale, kw[:, g0:g1].transpose(-1, -2)
        )  # (B, G, block, span)
        scores.masked_fill_(forbid[g0:g1], float("-inf"))
        # Softmax in place. Each real query sees at least itself, so no real row is all -inf;
        # padded query rows may be (window = 1): their NaN stays in rows cut off below.
        scores.sub_(scores.amax(dim=-1, keepdim=True)).exp_()
        scores.div_(scores.sum(dim=-1, keepdim=True))
        torch.matmul(scores, vw[:, g0:g1], out=out[:, g0:g1])
    return out.reshape(-1, nb * block, d_v)[:, :n].reshape(*batch, n, d_v)
