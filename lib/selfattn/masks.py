"""Boolean attention masks: ``True`` means "may attend" (torch SDPA's convention).

Chapter 4 builds each of them; :func:`to_ignore_mask` and :func:`to_additive_mask`
translate them into the other conventions readers meet, and :func:`dependency_matrix`
checks what a masked layer can see, from its Jacobian.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._checks import (
    ALIGNMENTS,
    require_bool,
    require_bool_mask,
    require_choice,
    require_int,
    require_number,
    require_tensor,
)

__all__ = [
    "causal_mask",
    "padding_mask",
    "sliding_window_mask",
    "to_ignore_mask",
    "to_additive_mask",
    "dependency_matrix",
    "causal_diagonal",
    "apply_mask",
]


def causal_mask(
    n: int, m: int | None = None, *, alignment: str = "bottom_right", device=None
) -> torch.Tensor:
    """Mask letting query ``i`` attend to keys ``j <= i`` (plus an offset when n != m).

    Args:
        n: number of queries.
        m: number of keys (defaults to ``n``).
        alignment: ``"bottom_right"`` (the default, as ``mask="causal"`` and every
            ``causal=True`` of the library: the last query sees every key, query i sees
            keys 0..i + m - n, the alignment for decoding new tokens against a cache) or
            ``"top_left"`` (query i sees keys 0..i, as ``is_causal=True`` in torch SDPA).
            For ``n = m`` both give the same mask.
        device: where to create the mask.

    Returns:
        Bool tensor ``(n, m)``.
    """
    n = require_int(n, "n", 1)
    m = n if m is None else require_int(m, "m", 1)
    diagonal = causal_diagonal(n, m, alignment)
    return torch.ones(n, m, dtype=torch.bool, device=device).tril(diagonal=diagonal)


def causal_diagonal(n: int, m: int, alignment: str = "bottom_right") -> int:
    """The causal mask's diagonal: key ``j`` is visible to query ``i`` iff ``j <= i + diag``.

    ``"bottom_right"`` (the library's default; ``torch.nn.attention.bias.causal_lower_right``,
    flash-attn >= 2.1): ``diag = m - n``, the last query sees every key, as when ``n`` new
    queries are decoded against a cache of ``m`` keys. With ``n > m`` the first ``n - m``
    queries see no key. ``"top_left"`` (SDPA's ``is_causal``): ``diag = 0``, query 0 sees key 0.
    :func:`causal_mask` and the tiled kernels (:mod:`selfattn.efficient`) all read it here.
    """
    return 0 if require_choice(alignment, "alignment", ALIGNMENTS) == "top_left" else m - n


def apply_mask(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``scores`` with ``mask`` applied: ``-inf`` where a bool mask is False, a float mask added.

    ``None`` leaves the scores as they are. A forbidden score becomes ``-inf`` whatever it
    was (an infinite or NaN score at a padded key included), so its weight is exactly 0.
    """
    if mask is None:
        return scores
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, float("-inf"))
    return scores + mask.to(scores.dtype)


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
    max_len = require_int(max_len, "max_len", 0)
    try:
        lengths = torch.as_tensor(lengths, device=device)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"lengths must be a 1-D integer sequence (B,), got {type(lengths).__name__} "
            f"{lengths!r}"
        ) from None
    if lengths.dim() == 1 and lengths.numel() == 0:
        lengths = lengths.long()  # an empty batch: torch reads [] as float
    if lengths.dim() != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(
            f"lengths must be a 1-D integer sequence (B,), got shape {tuple(lengths.shape)} "
            f"dtype {lengths.dtype}"
        )
    if (lengths < 0).any() or (lengths > max_len).any():
        raise ValueError(f"every length must lie in 0..max_len={max_len}, got {lengths.tolist()}")
    positions = torch.arange(max_len, device=lengths.device)
    return (positions[None, :] < lengths[:, None]).unsqueeze(1)


def sliding_window_mask(n: int, window: int, *, causal: bool = True, device=None) -> torch.Tensor:
    """Local attention: each query sees only the ``window`` nearest positions (chapter 8).

    Args:
        n: sequence length (queries = keys = ``n``).
        window: how many positions a query sees looking back, itself included:
            ``causal=True`` allows keys ``i - window + 1 .. i``; ``causal=False``
            allows ``|i - j| < window`` (the same reach in both directions).
        causal: forbid the future as well.
        device: where to create the mask.

    Returns:
        Bool tensor ``(n, n)``, ``True`` = may attend. With ``window >= n`` (causal) it
        equals :func:`causal_mask`; every row keeps its diagonal, so no row is empty.

    Raises:
        ValueError: ``n < 1`` or ``window < 1``.
    """
    n = require_int(n, "n", 1)
    window = require_int(window, "window", 1)
    causal = require_bool(causal, "causal")
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    near = (i - j).abs() < window
    return near & (j <= i) if causal else near


def to_ignore_mask(mask: torch.Tensor) -> torch.Tensor:
    """Flip a "may attend" mask into ``nn.MultiheadAttention``'s convention (``True`` = ignore).

    ``nn.MultiheadAttention``'s ``attn_mask`` ``(n, m)`` and ``key_padding_mask`` ``(B, m)``
    both read ``True`` as "do not attend", the opposite of torch SDPA and of this book.
    Passing one convention where the other is expected is a silent bug: the model attends
    to exactly the positions it should not (chapter 4 reproduces it).

    Args:
        mask: bool, any shape, ``True`` = may attend.

    Returns:
        ``~mask`` (same shape), ``True`` = ignore.
    """
    return ~require_bool_mask(mask)


def to_additive_mask(
    mask: torch.Tensor, dtype: torch.dtype = torch.float32, *, fill: float | None = None
) -> torch.Tensor:
    """A bool mask as a float mask to add to the scores: 0 where allowed, ``fill`` where not.

    Args:
        mask: bool, any shape, ``True`` = may attend.
        dtype: the scores' dtype.
        fill: the value for forbidden positions, ``-inf`` or a finite number ``<= 0`` (NaN
            and positive values are refused); defaults to ``-inf``, which this library's
            softmax and torch SDPA both turn into a weight of exactly 0 (fully masked rows
            included). A large finite fill such as ``-1e9`` overflows to ``-inf`` in float16
            and gives a fully masked row *uniform* weights instead of zeros.

    Returns:
        Float tensor of ``mask``'s shape and ``dtype``.
    """
    require_bool_mask(mask)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point dtype, got {dtype}")
    fill = require_number(fill, "fill", finite=False, allow_none=True)
    fill = float("-inf") if fill is None else fill
    if fill > 0:  # +inf included: a forbidden key would win the softmax, or give NaN
        raise ValueError(f"fill must be -inf or a finite number <= 0, got {fill}")
    # Fill in float32 and round once to ``dtype``: that is what happens to a mask built in
    # float32 and added to half-precision scores (``masked_fill`` on a float16 tensor would
    # refuse -1e9 with "value cannot be converted ... without overflow" instead).
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_fill(~mask, fill)
    return out.to(dtype)


def dependency_matrix(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """How much output ``i`` depends on input ``j``: the norm of each Jacobian block.

    Args:
        fn: maps ``(n, d)`` to ``(n', d')`` (a layer applied to one sequence).
        x: the input ``(n, d)`` at which to differentiate.

    Returns:
        ``(n', n)`` tensor in the dtype of ``x``, entry ``[i, j] = || d fn(x)[i] / d x[j] ||_F``.
        A causal layer gives exact zeros above the diagonal: output ``i`` does not move
        when a later input ``j > i`` changes. The squares are summed in float64: squaring
        a float32 gradient below about ``1e-23`` would give a false 0.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    require_tensor(x, "x")
    if x.dim() != 2 or not x.is_floating_point():
        raise ValueError(
            f"x must be a floating-point tensor of shape (n, d), got {tuple(x.shape)} {x.dtype}"
        )
    jac = torch.autograd.functional.jacobian(fn, x)  # (n', d', n, d)
    if jac.dim() != 4:
        raise ValueError(
            f"fn must map (n, d) to (n', d'), its Jacobian has shape {tuple(jac.shape)}"
        )
    return jac.to(torch.float64).pow(2).sum(dim=(1, 3)).sqrt().to(x.dtype)
