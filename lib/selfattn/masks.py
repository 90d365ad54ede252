"""Boolean attention masks: ``True`` means "may attend" (torch SDPA's convention)."""
from __future__ import annotations

import torch

__all__ = ["causal_mask", "padding_mask"]


def causal_mask(n: int, m: int | None = None, *, align: str = "top_left", device=None) -> torch.Tensor:
    """Mask letting query ``i`` attend to keys ``j <= i`` (plus an offset when n != m).

    Args:
        n: number of queries.
        m: number of keys (defaults to ``n``).
        align: ``"top_left"`` (query i sees keys 0..i, as ``is_causal=True`` in torch SDPA)
            or ``"bottom_right"`` (the last query sees every key: query i sees keys
            0..i + m - n, the alignment for decoding new tokens against a cache).
        device: where to create the mask.

    Returns:
        Bool tensor ``(n, m)``.
    """
    m = n if m is None else m
    if n < 1 or m < 1:
        raise ValueError(f"causal_mask needs n >= 1 and m >= 1, got n={n}, m={m}")
    if align == "top_left":
        offset = 0
    elif align == "bottom_right":
        offset = m - n
    else:
        raise ValueError(f"align must be 'top_left' or 'bottom_right', got {align!r}")
    return torch.ones(n, m, dtype=torch.bool, device=device).tril(diagonal=offset)


def padding_mask(lengths, max_len: int, *, device=None) -> torch.Tensor:
    """Key-padding mask for a batch of sequences padded to ``max_len``.

    Args:
        lengths: ``(B,)`` true lengths (ints, each in ``0..max_len``).
        max_len: padded length ``m``.

    Returns:
        Bool tensor ``(B, 1, max_len)``: ``True`` for real tokens. It broadcasts
        against scores ``(B, n, max_len)``; for heads ``(B, h, n, m)`` use
        ``mask.unsqueeze(1)``.
    """
    lengths = torch.as_tensor(lengths, device=device)
    if lengths.dim() != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be a 1-D integer sequence (B,), got shape {tuple(lengths.shape)} dtype {lengths.dtype}")
    if (lengths < 0).any() or (lengths > max_len).any():
        raise ValueError(f"every length must lie in 0..max_len={max_len}, got {lengths.tolist()}")
    positions = torch.arange(max_len, device=lengths.device)
    return (positions[None, :] < lengths[:, None]).unsqueeze(1)
