r"""State-space duality (Mamba-2, Dao and Gu 2024): a scalar-decay SSM is masked attention.

A selective state-space layer with a scalar decay per step, one head, state size ``N``:

    h_t = a_t h_{t-1} + (dt_t x_t) B_t^T,      y_t = h_t C_t,      a_t = exp(dt_t A)

with ``x_t`` in ``R^P`` (the head's channels), ``B_t, C_t`` in ``R^N``, ``dt_t > 0`` the step
and ``A < 0``. Unrolled, ``y_t = sum_{s <= t} (C_t . B_s) (a_{s+1} ... a_t) dt_s x_s``: that
is attention with queries ``C``, keys ``B``, values ``dt x`` and the mask

    L_ts = a_{s+1} a_{s+2} ... a_t  for s <= t, 0 above,

a 1-semiseparable matrix (every block below the diagonal has rank 1). So

    Y = (L * (C B^T)) (dt x),

quadratic, parallel: "masked attention" with no softmax. Chapter 8's decayed linear
attention is the same computation with queries ``phi(q)``, keys ``phi(k)`` and values ``v``
(its decay is ``gamma_t = a_t``), and one difference: Mamba-2 scales each value by its own
step ``dt_s`` (the discretised input, the "Delta-scaled input"), chapter 8 does not.

* :func:`ssd_recurrent`: the recurrence, token by token (the SSM view);
* :func:`ssd_attention`: the masked-attention form (the attention view);
* :func:`semiseparable_mask`: ``L`` from the log-decays ``dt A``.

Shapes follow mamba's ``ssd_minimal.py``: x ``(B, n, H, P)``, dt ``(B, n, H)``, A ``(H,)``,
B and C ``(B, n, H, N)``; y ``(B, n, H, P)``.
"""

from __future__ import annotations

import math

import torch

from .._checks import require_float, require_same_device
from ._tiled import work_dtype

__all__ = ["ssd_recurrent", "ssd_attention", "semiseparable_mask"]


def _check(x, dt, a, b, c):
    for name, t in (("x", x), ("dt", dt), ("A", a), ("B", b), ("C", c)):
        require_float(t, name)
    if x.dim() != 4:
        raise ValueError(f"x must have shape (B, n, H, P), got {tuple(x.shape)}")
    bsz, n, h, _ = x.shape
    if tuple(dt.shape) != (bsz, n, h):
        raise ValueError(f"dt must have shape (B, n, H) = {(bsz, n, h)}, got {tuple(dt.shape)}")
    if tuple(a.shape) != (h,):
        raise ValueError(f"A must have shape (H,) = ({h},), got {tuple(a.shape)}")
    if b.shape != c.shape or b.dim() != 4 or tuple(b.shape[:3]) != (bsz, n, h):
        raise ValueError(
            f"B and C must have one shape (B, n, H, N) with (B, n, H) = {(bsz, n, h)}, got "
            f"B {tuple(b.shape)} and C {tuple(c.shape)}"
        )
    require_same_device(x=x, dt=dt, A=a, B=b, C=c)


def semiseparable_mask(log_a: torch.Tensor) -> torch.Tensor:
    """``L_ts = exp(sum_{r=s+1..t} log_a_r)`` for ``s <= t``, 0 above: shape ``(..., n, n)``.

    Computed from differences of a cumulative sum, the upper side masked before ``exp``
    (it can overflow there).
    """
    require_float(log_a, "log_a")
    cum = log_a.cumsum(-1)
    diff = cum.unsqueeze(-1) - cum.unsqueeze(-2)
    n = log_a.shape[-1]
    lower = torch.ones(n, n, dtype=torch.bool, device=log_a.device).tril()
    return diff.masked_fill(~lower, -math.inf).exp()


def ssd_recurrent(x, dt, A, B, C):
    """The scalar-decay SSM as a recurrence over ``n`` steps, state ``(B, H, P, N)``."""
    _check(x, dt, A, B, C)
    dtype, work = x.dtype, work_dtype(x.dtype)
    x, dt, A, B, C = (t.to(work) for t in (x, dt, A, B, C))
    bsz, n, h, p = x.shape
    state = x.new_zeros(bsz, h, p, B.shape[-1])
    decay = torch.exp(dt * A)  # a_t, (B, n, H)
    ys = []
    for t in range(n):
        xin = x[:, t] * dt[:, t, :, None]  # dt_t x_t: the discretised input
        state = state * decay[:, t, :, None, None] + xin.unsqueeze(-1) * B[:, t].unsqueeze(-2)
        ys.append((state @ C[:, t].unsqueeze(-1)).squeeze(-1))
    y = torch.stack(ys, dim=1) if ys else x.new_zeros(bsz, 0, h, p)
    return y.to(dtype)


def ssd_attention(x, dt, A, B, C):
    """The same layer as masked attention: ``Y = (L * (C B^T)) (dt x)``, quadratic in ``n``."""
    _check(x, dt, A, B, C)
    dtype, work = x.dtype, work_dtype(x.dtype)
    x, dt, A, B, C = (t.to(work) for t in (x, dt, A, B, C))
    mask = semiseparable_mask((dt * A).transpose(1, 2))  # (B, H, n, n)
    scores = C.transpose(1, 2) @ B.transpose(1, 2).transpose(-1, -2)  # (B, H, n, n): C_t . B_s
    values = (x * dt.unsqueeze(-1)).transpose(1, 2)  # (B, H, n, P)
    return ((mask * scores) @ values).transpose(1, 2).to(dtype)
