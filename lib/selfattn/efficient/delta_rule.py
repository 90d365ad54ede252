r"""The delta rule and Gated DeltaNet: a linear-attention state that overwrites.

Chapter 8's linear attention adds every write to one state, ``S_t = S_{t-1} + k_t v_t^T``,
and nothing is ever removed. The delta rule (Widrow and Hoff 1960; DeltaNet, Schlag et al.
2021, Yang et al. 2024) reads what the state holds for ``k_t`` first and writes only the
difference, one step of online regression on ``||S^T k_t - v_t||^2`` with step ``beta_t``:

    S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T,      o_t = S_t^T q_t.

Gated DeltaNet (Yang, Kautz and Hatamizadeh 2025) decays the state first, ``alpha_t =
exp(g_t)`` with a log-decay ``g_t <= 0``:

    S_t = alpha_t S_{t-1} + beta_t k_t (v_t - alpha_t S_{t-1}^T k_t)^T.

The state is ``(d_k, d_v)`` per head, the layout of ``transformers``' Qwen3-Next reference
functions (``torch_recurrent_gated_delta_rule``, ``torch_chunk_gated_delta_rule``), which
these functions reproduce to float32 rounding (``tests/test_delta_rule.py``).

Two forms of one function:

* recurrent (``chunk_size=None``): one token at a time, the RNN;
* chunked (``chunk_size=C``): within a chunk of ``C`` tokens the writes' corrections form a
  unit lower-triangular system ``(I + A) U = diag(beta) V - diag(beta gamma) K S_0`` with
  ``A_ij = beta_i (gamma_i / gamma_j) k_i . k_j`` for ``j < i`` (the WY / UT representation
  of the product of the chunk's Householder-like updates, Yang et al. 2024). It is solved
  for every chunk at once with one batched triangular solve; then a short loop over the
  ``n / C`` chunks carries the state: ``O = diag(gamma) Q S_0 + (Q K^T * Gamma) U`` and
  ``S_C = gamma_C S_0 + K^T diag(gamma_C / gamma) U``. Most of the work is matrix
  products, and the sequential loop is ``C`` times shorter than the recurrent one.

:func:`delta_rule` is the plain delta rule (``g = 0``, no decay).
"""

from __future__ import annotations

import math

import torch

from .._checks import (
    describe,
    require_bool,
    require_float,
    require_int,
    require_same_device,
    require_scale,
)
from ._tiled import work_dtype

__all__ = ["gated_delta_rule", "delta_rule", "delta_rule_step"]


def _check(q, k, v, g, beta, scale, chunk_size, initial_state):
    for name, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        require_float(t, name)
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            "q, k and v must have shape (B, H, n, d): q (B, H, n, d_k), k (B, H, n, d_k), "
            f"v (B, H, n, d_v), got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.shape != k.shape:
        raise ValueError(
            f"q and k must have the same shape (B, H, n, d_k), got q {tuple(q.shape)} "
            f"and k {tuple(k.shape)}"
        )
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"v must have shape (B, H, n, d_v) with q's (B, H, n) = {tuple(q.shape[:3])}, "
            f"got v {tuple(v.shape)}"
        )
    for name, t in (("g", g), ("beta", beta)):
        if tuple(t.shape) != tuple(q.shape[:3]):
            raise ValueError(
                f"{name} must have shape (B, H, n) = {tuple(q.shape[:3])}, got {tuple(t.shape)}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}"
        )
    require_same_device(q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state)
    if initial_state is not None:
        require_float(initial_state, "initial_state")
        want = (*q.shape[:2], q.shape[-1], v.shape[-1])
        if tuple(initial_state.shape) != want:
            raise ValueError(
                f"initial_state must have shape (B, H, d_k, d_v) = {want}, got "
                f"{describe(initial_state)}"
            )
    if chunk_size is not None:
        chunk_size = require_int(chunk_size, "chunk_size", 1)
    return require_scale(scale, q.shape[-1]), chunk_size


def gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    scale: float | None = None,
    chunk_size: int | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
):
    r"""The gated delta rule, causal: ``o_t = S_t^T (scale q_t)``.

    ``S_t = exp(g_t) S_{t-1} + beta_t k_t (v_t - exp(g_t) S_{t-1}^T k_t)^T``, ``S_0`` zero
    (or ``initial_state``).

    Args:
        q, k: ``(B, H, n, d_k)``. Gated DeltaNet L2-normalises them first (the layer does,
            not this function: the update is stable for ``0 <= beta ||k||^2 <= 2``).
        v: ``(B, H, n, d_v)``.
        g: ``(B, H, n)`` the log-decay, ``<= 0`` in the model (``0`` = no decay).
        beta: ``(B, H, n)`` the write strength, in ``(0, 1)`` in the model.
        scale: multiplies the queries; ``None`` = ``1 / sqrt(d_k)`` (as ``transformers``).
        chunk_size: ``None`` = the recurrent form; an int ``C >= 1`` = the chunked form
            (a length that is not a multiple of ``C`` is padded with zero writes).
        initial_state: ``(B, H, d_k, d_v)`` or ``None`` (zeros).
        output_final_state: also return the state after the last token.

    Returns:
        ``(B, H, n, d_v)`` in ``q``'s dtype (computed in float32, or float64 for float64
        inputs); with ``output_final_state`` the pair ``(out, state)``, the state
        ``(B, H, d_k, d_v)`` in the work dtype.

    Raises:
        TypeError: tensors that are not floating point, q, k, v of different dtypes, a
            ``chunk_size`` that is not an int.
        ValueError: shapes that do not fit, a ``chunk_size`` below 1, tensors on different
            devices.
    """
    scale, chunk_size = _check(q, k, v, g, beta, scale, chunk_size, initial_state)
    output_final_state = require_bool(output_final_state, "output_final_state")
    dtype, work = q.dtype, work_dtype(q.dtype)
    q, k, v, g, beta = (t.to(work) for t in (q, k, v, g, beta))
    q = q * scale
    state = initial_state.to(work) if initial_state is not None else None
    if chunk_size is None:
        out, state = _recurrent(q, k, v, g, beta, state)
    else:
        out, state = _chunked(q, k, v, g, beta, state, chunk_size)
    out = out.to(dtype)
    return (out, state) if output_final_state else out


def delta_rule(
    q, k, v, beta, *, scale=None, chunk_size=None, initial_state=None, output_final_state=False
):
    """The plain delta rule (DeltaNet): :func:`gated_delta_rule` with ``g = 0``, no decay."""
    require_float(beta, "beta")
    return gated_delta_rule(
        q,
        k,
        v,
        torch.zeros_like(beta),
        beta,
        scale=scale,
        chunk_size=chunk_size,
        initial_state=initial_state,
        output_final_state=output_final_state,
    )


def delta_rule_step(state, q_t, k_t, v_t, g_t, beta_t, *, scale=None):
    """One decoding step: ``(B, H, d_k, d_v)`` state and one token's ``(B, H, d)`` q, k, v,
    ``(B, H)`` g and beta; returns ``(o_t, new_state)``. No checks beyond shapes: the loop
    of :func:`gated_delta_rule` and the layers' decoding call it."""
    scale = require_scale(scale, q_t.shape[-1])
    state = state * g_t.exp()[..., None, None]
    read = (k_t.unsqueeze(-2) @ state).squeeze(-2)  # S^T k: what the state holds for k
    delta = (v_t - read) * beta_t[..., None]
    state = state + k_t.unsqueeze(-1) * delta.unsqueeze(-2)
    out = ((q_t * scale).unsqueeze(-2) @ state).squeeze(-2)
    return out, state


def _recurrent(q, k, v, g, beta, state):
    b, h, n, d_k = q.shape
    d_v = v.shape[-1]
    if state is None:
        state = q.new_zeros(b, h, d_k, d_v)
    outs = []
    alpha = g.exp()
    for t in range(n):
        state = state * alpha[:, :, t, None, None]
        k_t = k[:, :, t]
        read = (k_t.unsqueeze(-2) @ state).squeeze(-2)
        delta = (v[:, :, t] - read) * beta[:, :, t, None]
        state = state + k_t.unsqueeze(-1) * delta.unsqueeze(-2)
        outs.append((q[:, :, t].unsqueeze(-2) @ state).squeeze(-2))
    out = torch.stack(outs, dim=2) if outs else q.new_zeros(b, h, 0, d_v)
    return out, state


def _chunked(q, k, v, g, beta, state, c):
    b, h, n, d_k = q.shape
    d_v = v.shape[-1]
    if state is None:
        state = q.new_zeros(b, h, d_k, d_v)
    if n == 0:
        return q.new_zeros(b, h, 0, d_v), state
    pad = (-n) % c
    if pad:  # zero writes (beta = 0) that do not decay (g = 0): the state passes unchanged
        q, k, v = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        g, beta = (torch.nn.functional.pad(t, (0, pad)) for t in (g, beta))
    m = (n + pad) // c
    q, k, v = (t.reshape(b, h, m, c, t.shape[-1]) for t in (q, k, v))
    g, beta = g.reshape(b, h, m, c), beta.reshape(b, h, m, c)
    cum = g.cumsum(-1)  # log gamma_i: the decay from the chunk's start to token i
    diff = cum.unsqueeze(-1) - cum.unsqueeze(-2)  # log(gamma_i / gamma_j)
    lower = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
    # gamma_i / gamma_j for j <= i, 0 above (masked before exp: the upper side can overflow).
    decay = diff.masked_fill(~lower, -math.inf).exp()
    gamma = cum.exp()
    kk = k @ k.transpose(-1, -2)
    a = (kk * decay * beta.unsqueeze(-1)).tril(-1)
    eye = torch.eye(c, dtype=q.dtype, device=q.device)
    t_inv_rhs = torch.cat([v * beta.unsqueeze(-1), k * (beta * gamma).unsqueeze(-1)], dim=-1)
    solved = torch.linalg.solve_triangular(a + eye, t_inv_rhs, upper=False, unitriangular=True)
    u0, w = solved[..., :d_v], solved[..., d_v:]  # U = u0 - w S_0 for the chunk's S_0
    inner = (q @ k.transpose(-1, -2)) * decay  # (Q K^T * Gamma), causal within the chunk
    q_dec = q * gamma.unsqueeze(-1)
    tail = (cum[..., -1:] - cum).exp()  # gamma_C / gamma_j
    k_dec = (k * tail.unsqueeze(-1)).transpose(-1, -2)  # (.., d_k, c)
    last = gamma[..., -1, None, None]
    outs = []
    for i in range(m):
        u = u0[:, :, i] - w[:, :, i] @ state
        outs.append(q_dec[:, :, i] @ state + inner[:, :, i] @ u)
        state = state * last[:, :, i] + k_dec[:, :, i] @ u
    out = torch.stack(outs, dim=2).reshape(b, h, m * c, d_v)[:, :, :n]
    return out, state
