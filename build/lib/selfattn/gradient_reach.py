"""Gradient reach: how strongly the last output of a sequence model depends on each input (chapter 1).

For an encoder ``y = f(x_0, ..., x_{n-1})`` this measures ``|| d y_{n-1} / d x_t ||``, the
Frobenius norm of the Jacobian block of the last output with respect to input ``t``.
A recurrent model reaches ``x_0`` through ``n - 1`` multiplications by its recurrent
Jacobian, so the norm typically shrinks with distance; one attention layer reaches every
input in one step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["gradient_reach"]


def gradient_reach(
    encoder: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
) -> torch.Tensor:
    """Norms ``|| d y[-1] / d x[t] ||_F`` for every input position ``t``.

    Args:
        encoder: maps ``(1, n, d_in)`` to ``(1, n, d_out)`` (an ``nn.LSTM`` wrapped to return
            its outputs, a self-attention layer, ...).
        x: one input sequence ``(n, d_in)`` (float).

    Returns:
        ``(n,)`` float tensor: entry ``t`` is the norm of the Jacobian of the last
        output ``y[-1]`` (``d_out`` numbers) with respect to ``x[t]`` (``d_in`` numbers).
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 2:
        got = f"{type(x).__name__} {getattr(x, 'dtype', '')} {tuple(getattr(x, 'shape', ()))}"
        raise ValueError(f"x must be a float tensor of shape (n, d_in), got {got}")
    x = x.detach().clone().requires_grad_(True)
    y_last = encoder(x[None])[0, -1]  # (d_out,)
    if y_last.dim() != 1:
        raise ValueError(
            f"encoder must return (1, n, d_out), got last output of shape {tuple(y_last.shape)}"
        )
    squared = torch.zeros(x.shape[0], dtype=x.dtype)
    for j in range(
        y_last.shape[0]
    ):  # one backward pass per output coordinate: exact, and d_out is small
        (grad,) = torch.autograd.grad(y_last[j], x, retain_graph=True)
        squared += grad.pow(2).sum(dim=-1)
    return squared.sqrt().detach()
