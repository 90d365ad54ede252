"""Gradient reach: how strongly the last output of a sequence model depends on each input.

For an encoder ``y = f(x_0, ..., x_{n-1})`` this measures ``|| d y_{n-1} / d x_t ||``, the
Frobenius norm of the Jacobian block of the last output with respect to input ``t``.
A recurrent model reaches ``x_0`` through ``n - 1`` multiplications by its recurrent
Jacobian, so the norm typically shrinks with distance; one attention layer reaches every
input in one step (chapter 1).

It is the last row of :func:`selfattn.masks.dependency_matrix` (which differentiates any
layer), for an encoder that takes a batch. The norm is accumulated in float64 whatever the
input's dtype: a float32 gradient of ``1e-30`` is perfectly representable, but its square
(``1e-60``) is not, and summing squares in float32 would report a false 0 (a "cliff" in a
log plot) long before the gradient itself underflows. To follow gradients below float32's
range at all, run the encoder itself in float64 (float64 weights and ``x``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._checks import require_int
from .masks import dependency_matrix

__all__ = ["gradient_reach", "conv_reach"]


def gradient_reach(
    encoder: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
) -> torch.Tensor:
    """Norms ``|| d y[-1] / d x[t] ||_F`` for every input position ``t``.

    Args:
        encoder: maps ``(1, n, d_in)`` to ``(1, n, d_out)`` (an ``nn.LSTM`` wrapped to return
            its outputs, a self-attention layer, ...), in the dtype of ``x``.
        x: one input sequence ``(n, d_in)`` (float).

    Returns:
        ``(n,)`` tensor in the dtype of ``x``: entry ``t`` is the norm of the Jacobian of the
        last output ``y[-1]`` (``d_out`` numbers) with respect to ``x[t]`` (``d_in``
        numbers), the last row of :func:`~selfattn.masks.dependency_matrix`. The squares are
        summed in float64, so the result is 0 only where the gradient itself is 0 (or the
        norm is below the smallest number of ``x``'s dtype).
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 2:
        got = f"{type(x).__name__} {getattr(x, 'dtype', '')} {tuple(getattr(x, 'shape', ()))}"
        raise ValueError(f"x must be a float tensor of shape (n, d_in), got {got}")

    def last_output(t: torch.Tensor) -> torch.Tensor:  # (n, d_in) -> (1, d_out)
        y = encoder(t[None])
        if not isinstance(y, torch.Tensor) or y.dim() != 3 or y.shape[0] != 1:
            got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
            raise ValueError(f"encoder must return (1, n, d_out), got {got}")
        return y[0, -1:]

    return dependency_matrix(last_output, x)[0]


def conv_reach(n: int, k: int, layers: int, *, seed: int = 0) -> bool:
    """Whether output ``n`` of ``layers`` stacked causal width-``k`` convolutions depends on
    input 0 (chapter 1): autograd's answer to the path-length count ``layers >= ceil(n / (k-1))``.

    Random 4-channel ``Conv1d`` layers with ``tanh`` between them, each padded on the left by
    ``k - 1`` so it stays causal and the length stays ``n + 1``; the answer is whether the
    gradient of output ``n`` reaches input 0 at all (structurally, not by its size).
    """
    n = require_int(n, "n", minimum=0)
    k = require_int(k, "k", minimum=2)
    layers = require_int(layers, "layers", minimum=1)
    torch.manual_seed(seed)
    convs = [torch.nn.Conv1d(4, 4, k) for _ in range(layers)]
    x = torch.randn(1, 4, n + 1, requires_grad=True)
    h = x
    for conv in convs:
        # left padding keeps it causal and the length n + 1
        h = torch.tanh(conv(torch.nn.functional.pad(h, (k - 1, 0))))
    h[0, :, n].sum().backward()
    return bool(x.grad[0, :, 0].abs().sum() > 0)
