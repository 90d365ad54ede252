"""Softmax and scaled dot-product attention, written out plainly (chapter 3).

This is the book's reference implementation and its one attention path: the layers and
models of the library call :func:`scaled_dot_product_attention`, the one place where scores
are scaled, masked and normalised. Its ``kernel="flash"`` runs
:func:`selfattn.efficient.flash.flash_attention` behind the same signature, and
``kernel="torch"`` torch's fused kernel (for speed where no weights are needed); every faster
variant in ``selfattn.efficient`` is tested against the reference and against torch's own
``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ._checks import (
    is_half,
    require_bool,
    require_choice,
    require_dim_arg,
    require_dropout,
    require_float,
    require_mask,
    require_qkv,
    require_scale,
)
from .masks import apply_mask, causal_mask

# attend and attention_args, the trusting path, are for the library's layers (not exported).
__all__ = ["KERNELS", "Kernel", "register_kernel", "scaled_dot_product_attention", "softmax"]


@dataclass(frozen=True)
class Kernel:
    """What one kernel of :func:`scaled_dot_product_attention` supports (the registry's record).

    Attributes:
        run: the kernel, called with the checked arguments (an ``AttentionArgs``) and
            returning the output ``(..., n, d_v)``; ``None`` for the reference formula.
        masks: any mask tensor (``False``: only ``None`` or ``"causal"``).
        return_weights: can return the ``(..., n, m)`` weights.
        dropout: can drop weights in training.
        score_bias: takes a layer's score bias (folded into a float mask).
        backward: ``"any"`` (gradients on every device) or ``"gpu"`` (none on the CPU).
        causal: where it applies ``mask="causal"`` itself, without a stored mask:
            ``"always"``, ``"square"`` (``n = m`` and a positive scale) or ``"never"``.
        upcast_half: computes half inputs in float32 here (the kernel does not).
    """

    run: Callable | None
    masks: bool = True
    return_weights: bool = False
    dropout: bool = True
    score_bias: bool = True
    backward: str = "any"
    causal: str = "never"
    upcast_half: bool = False

    def __post_init__(self) -> None:
        for flag in ("masks", "return_weights", "dropout", "score_bias", "upcast_half"):
            require_bool(getattr(self, flag), flag)


class _Registry(dict):
    """Kernel name -> :class:`Kernel`; shown as the tuple of its names in messages."""

    def __repr__(self) -> str:
        return repr(tuple(self))


#: The kernels :func:`scaled_dot_product_attention` can run, name -> :class:`Kernel`:
#: ``"reference"`` (the formula, any mask, weights on request), ``"flash"`` (tiled, the
#: ``n x m`` scores never stored), ``"torch"`` (``torch.nn.functional.
#: scaled_dot_product_attention``: any mask, no weights) and, registered by
#: :mod:`selfattn.flex`, ``"flex"`` (torch's FlexAttention: any mask, no weights, no dropout).
KERNELS: dict[str, Kernel] = _Registry()


def register_kernel(name: str, kernel: Kernel) -> None:
    """Add (or replace) a kernel of :func:`scaled_dot_product_attention` under ``name``.

    Args:
        name: the ``kernel=`` string that selects it.
        kernel: its :class:`Kernel` record (what it supports, and the function to run).
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string, got {name!r}")
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a selfattn.attention.Kernel, got {type(kernel).__name__}")
    require_choice(kernel.backward, "backward", ("any", "gpu"))
    require_choice(kernel.causal, "causal", ("always", "square", "never"))
    KERNELS[name] = kernel


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax along ``dim``.

    Subtracts each row's maximum before exponentiating, so large scores cannot
    overflow. A row whose entries are all ``-inf`` (a fully masked row) gives
    all zeros instead of the ``0/0 = NaN`` a naive softmax produces.

    Args:
        x: scores of any shape ``(...)``, floating point.
        dim: the dimension to normalise over.

    Returns:
        A tensor of the same shape and dtype as ``x`` whose slices along ``dim``
        sum to 1 (or are all 0 for fully masked slices); empty if ``x`` is empty.

    Raises:
        TypeError: a non-float ``x``; a ``dim`` that is not an int (``None`` would
            normalise over every element at once, never what attention means).
        ValueError: a ``dim`` outside ``x``'s dimensions.
    """
    require_float(x, "x")
    dim = require_dim_arg(dim)
    if not -x.dim() <= dim < max(x.dim(), 1):
        raise ValueError(
            f"dim must lie in -{x.dim()}..{x.dim() - 1} for x of shape {tuple(x.shape)}, got {dim}"
        )
    return _softmax(x, dim)


def _softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """:func:`softmax` on checked arguments (trusting: the attention path's own scores)."""
    if x.dim() == 0 or x.shape[dim] == 0:
        # Nothing to normalise over (an empty row or a scalar's single entry): torch's
        # softmax returns the empty tensor, and the one entry of a scalar weighs 1.
        return torch.ones_like(x) if x.dim() == 0 else x.clone()
    row_max = x.amax(dim=dim, keepdim=True)
    # An all -inf row has max -inf, and -inf - (-inf) is NaN: shift such rows by 0 instead.
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exp = torch.exp(x - row_max)
    total = exp.sum(dim=dim, keepdim=True)
    return exp / torch.where(total == 0, torch.ones_like(total), total)


@dataclass(frozen=True)
class AttentionArgs:
    """The arguments of :func:`~selfattn.attention.scaled_dot_product_attention`, checked.

    ``q``, ``k``, ``v`` are float32 for half inputs on the reference kernel (``dtype`` keeps
    the inputs' dtype for the result). ``mask`` is ``None`` or a checked tensor: the string
    ``"causal"`` becomes the bottom-right causal mask, except where a kernel applies it
    itself (``causal`` is then set and ``mask`` is ``None``).
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor | None
    causal: bool
    scale: float
    kernel: str
    return_weights: bool
    dropout: float
    dtype: torch.dtype


def resolve_mask_arg(mask) -> tuple[torch.Tensor | None, bool]:
    """``mask`` as ``(tensor or None, causal)``: the string ``"causal"`` becomes the flag."""
    if isinstance(mask, str):
        if mask != "causal":
            raise ValueError(f"mask must be a tensor, None or the string 'causal', got {mask!r}")
        return None, True
    return mask, False


def require_kernel_args(
    kernel,
    kernels,
    *,
    mask=None,
    causal: bool = False,
    return_weights: bool = False,
    dropout: float = 0.0,
    score_bias=None,
    requires_grad: bool = False,
    device: torch.device | None = None,
) -> str:
    """A kernel of the registry ``kernels`` (name -> record of what it supports), and the
    arguments it can take: a loop over the record's flags, the one place these rules are read.
    """
    kernel = require_choice(kernel, "kernel", kernels)
    record = kernels[kernel]
    wanted = {  # flag -> (this call needs it, how the refusal reads)
        "masks": (mask is not None, "mask=None or 'causal'"),
        "score_bias": (score_bias is not None, "no score_bias"),
        "return_weights": (bool(return_weights), "return_weights=False"),
        "dropout": (bool(dropout), "no dropout"),
    }
    lacking = [flag for flag in wanted if not getattr(record, flag)]
    if any(wanted[flag][0] for flag in lacking):
        if record.masks and [flag for flag in lacking if wanted[flag][0]] == ["return_weights"]:
            raise ValueError(
                f"kernel={kernel!r} returns no weights: use kernel='reference' for them"
            )
        rules = [wanted[flag][1] for flag in lacking]
        rules = ", ".join(rules[:-1]) + " and " + rules[-1] if len(rules) > 1 else rules[0]
        shown = "causal" if causal else type(mask).__name__
        bias = "" if score_bias is None else f"score_bias {type(score_bias).__name__}, "
        raise ValueError(
            f"kernel={kernel!r} takes {rules}; got mask {shown}, {bias}"
            f"return_weights={return_weights}, dropout={dropout}"
        )
    if requires_grad and record.backward == "gpu" and device is not None and device.type == "cpu":
        raise ValueError(
            f"kernel={kernel!r} has no backward on the CPU (torch computes its gradients on "
            "GPUs only), got inputs that require grad on cpu; use kernel='reference' or "
            "'torch' to train, or call it under torch.no_grad()"
        )
    return kernel


def resolve_attention_args(
    q, k, v, mask, scale, return_weights, kernel, dropout, kernels
) -> AttentionArgs:
    """Every check of scaled dot-product attention's arguments, and their resolved values."""
    batch = require_qkv(q, k, v)
    return_weights = require_bool(return_weights, "return_weights")
    dropout = require_dropout(dropout)
    scale = require_scale(scale, q.shape[-1])
    mask, causal = resolve_mask_arg(mask)
    require_kernel_args(
        kernel,
        kernels,
        mask=mask,
        causal=causal,
        return_weights=return_weights,
        dropout=dropout,
        requires_grad=torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)),
        device=q.device,
    )
    if mask is not None:
        require_mask(mask, batch + (q.shape[-2], k.shape[-2]), q.device)
    return attention_args(
        q,
        k,
        v,
        mask,
        causal=causal,
        scale=scale,
        kernel=kernel,
        return_weights=return_weights,
        dropout=dropout,
        kernels=kernels,
    )


def attention_args(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    causal: bool = False,
    scale: float,
    kernel: str = "reference",
    return_weights: bool = False,
    dropout: float = 0.0,
    kernels: dict[str, Kernel] | None = None,
) -> AttentionArgs:
    """Arguments already checked (by :func:`scaled_dot_product_attention`, or built by a layer)
    as :func:`attend` takes them; trusting, it checks nothing.

    ``causal`` becomes the bottom-right causal mask unless the kernel applies it itself, and
    half inputs are upcast to float32 where the kernel computes in float32 here.
    """
    record = (KERNELS if kernels is None else kernels)[kernel]
    n, m = q.shape[-2], k.shape[-2]
    # torch's own causal path needs no mask stored (its CPU kernel gives NaN for a scale <= 0)
    kernel_is_causal = record.causal == "always" or (
        record.causal == "square" and n == m and scale > 0
    )
    if causal and not kernel_is_causal:
        mask, causal = (
            causal_mask(n, m, alignment="bottom_right", device=q.device),
            False,
        )
    dtype = q.dtype
    if record.upcast_half and is_half(q):
        # float16 overflows at 65504: half inputs get float32 scores and softmax (as torch
        # SDPA and the flash kernels accumulate), and the result comes back in their dtype.
        q, k, v = q.float(), k.float(), v.float()
    return AttentionArgs(q, k, v, mask, causal, scale, kernel, return_weights, dropout, dtype)


def attend(a: AttentionArgs):
    """``softmax(q k^T * scale + mask) v`` on checked arguments: the formula and the dispatch.

    Trusting: :func:`scaled_dot_product_attention` (and a layer that built its own
    arguments, through :func:`attention_args`) checks before calling it.
    """
    run = KERNELS[a.kernel].run
    if run is not None:
        return run(a)
    scores = a.q @ a.k.transpose(-2, -1) * a.scale  # S = Q K^T / sqrt(d_k), (..., n, m)
    weights = _softmax(apply_mask(scores, a.mask), -1)  # A = softmax(S + M)
    output = F.dropout(weights, a.dropout) @ a.v  # A V, (..., n, d_v)
    if a.return_weights:
        return output.to(a.dtype), weights.to(a.dtype)
    return output.to(a.dtype)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | str | None = None,
    *,
    scale: float | None = None,
    return_weights: bool = False,
    kernel: str = "reference",
    dropout: float = 0.0,
):
    r"""``softmax(q k^T * scale + mask) v``, and the weights on request (chapter 3).

    Args:
        q: queries ``(..., n, d_k)``.
        k: keys ``(..., m, d_k)``.
        v: values ``(..., m, d_v)``. The batch dimensions ``...`` of q, k, v broadcast.
        mask: optional, broadcastable to ``(..., n, m)``. Bool: ``True`` = may attend
            (torch SDPA's convention). Float: added to the scores (use ``-inf`` to forbid).
            A query whose keys are all masked gets zero weights and a zero output.
            The string ``"causal"``: query ``i`` of the ``n`` sees keys ``0 .. i + m - n``
            (aligned bottom-right, torch's ``causal_lower_right``: ordinary causal masking
            when ``n = m``, and the right one for new queries against a cache).
        scale: multiplies the scores; defaults to ``1 / sqrt(d_k)``.
        return_weights: also return the attention weights.
        kernel: one of :data:`KERNELS`. ``"flash"`` computes the same output tile by tile
            with :func:`~selfattn.efficient.flash.flash_attention` (differentiable); it
            takes ``mask=None`` or ``"causal"``, no ``return_weights`` and no ``dropout``.
            ``"torch"`` runs torch's fused ``scaled_dot_product_attention`` (any mask and
            dropout, no ``return_weights``); a fully masked query still gets zeros.
            ``"flex"`` (:mod:`selfattn.flex`, torch >= 2.6) runs torch's FlexAttention
            with the mask as a ``mask_mod`` and a float mask as a ``score_mod`` (no
            ``return_weights``, no ``dropout``, no backward on the CPU).
        dropout: probability of zeroing each weight before the weighted sum (the survivors
            scaled by ``1 / (1 - dropout)``, as ``torch.nn.functional.dropout``); the
            returned weights are those before dropout. Pass 0 outside training.

    Returns:
        ``output`` of shape ``(..., n, d_v)``, or ``(output, weights)`` with
        weights of shape ``(..., n, m)`` when ``return_weights`` is true.

    Half-precision inputs (float16, bfloat16) are computed with float32 scores, softmax
    and weighted sum, and the result is returned in the input dtype: float16 scores would
    overflow to ``inf`` (and the weights to NaN) past 65504.

    Empty dimensions behave as in torch SDPA: ``n = 0`` gives an empty output, ``m = 0``
    a zero output, ``d_k = 0`` uniform weights.

    Raises:
        TypeError: non-tensor, integer or mixed-dtype inputs; a mask neither bool nor float;
            a ``scale`` that is not a real number.
        ValueError: d_k or m mismatch, batch shapes or a mask that do not broadcast,
            tensors on different devices (or on ``meta``), a non-finite ``scale``.
    """
    a = resolve_attention_args(q, k, v, mask, scale, return_weights, kernel, dropout, KERNELS)
    return attend(a)


def _fused_kernel(a: AttentionArgs) -> torch.Tensor:
    """``kernel="torch"``: torch's fused kernel (``is_causal`` where ``n = m``)."""
    if a.causal:  # n == m: torch's own causal path, no mask stored
        return F.scaled_dot_product_attention(
            a.q, a.k, a.v, dropout_p=a.dropout, is_causal=True, scale=a.scale
        )
    return _torch_kernel(a.q, a.k, a.v, a.mask, a.scale, a.dropout)


def _torch_kernel(q, k, v, mask, scale: float, dropout: float) -> torch.Tensor:
    """``torch.nn.functional.scaled_dot_product_attention`` with the reference's conventions.

    A float mask is given q's dtype (float32 for half inputs, which torch accepts and which keeps
    a large negative bias from rounding to ``-inf``). A query that may attend to no key gets
    zeros: its row is opened for torch's kernel (some backends give NaN for an empty row, and
    NaN gradients behind it) and its output zeroed.
    """
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scale)
    if mask.dtype == torch.bool:
        empty = ~mask.any(dim=-1, keepdim=True)
        mask = mask | empty
    else:
        mask = mask.to(torch.float32 if is_half(q) else q.dtype)
        empty = ~(mask > float("-inf")).any(dim=-1, keepdim=True)
        mask = mask.masked_fill(empty, 0.0)
    out = F.scaled_dot_product_attention(q, k, v, mask, dropout_p=dropout, scale=scale)
    return out.masked_fill(empty, 0.0)


register_kernel("reference", Kernel(None, return_weights=True, upcast_half=True))
register_kernel("torch", Kernel(_fused_kernel, causal="square"))
