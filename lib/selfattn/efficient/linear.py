r"""Linear attention (Katharopoulos et al. 2020): a kernel instead of softmax, O(n) not O(n^2).

Replace ``exp(q . k)`` by ``phi(q) . phi(k)`` with a positive feature map
``phi(x) = elu(x) + 1``. Then

    out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j))

and the two sums over j are computed once (``d x d_v`` and ``d``), not per query.
Causal: the sums run over ``j <= i`` and become a state updated token by token, which
makes the model an RNN with constant memory per decoding step. (The constant ``d x d_v``
state is the recurrent / decoding form's memory; the parallel form below also holds its
``n x d_v`` output and, when causal, one chunk's ``chunk_size x chunk_size`` scores.)

Three forms, equal up to rounding (the tests check it):

* parallel / chunked (:func:`linear_attention`): non-causal in one pass; causal in chunks,
  quadratic within a chunk, the state carried between chunks (``chunk_size >= n`` is the
  fully parallel masked form);
* recurrent (:func:`linear_attention_recurrent`): one token at a time, the RNN form;
* one decoding step (:func:`linear_attention_step` on a :class:`LinearAttentionState`).

Decay and gating (RetNet, gated linear attention, Mamba-2's state-space duality): the state
forgets geometrically, ``S_t = gamma_t * S_{t-1} + phi(k_t) v_t^T`` (``z`` likewise), with a
constant ``gamma`` (RetNet, Sun et al. 2023), a data-dependent scalar per step (Mamba-2, Dao
and Gu 2024) or a data-dependent vector over the key features (gated linear attention, Yang
et al. 2024). :func:`decayed_linear_attention` is its parallel form, the masked matrix
``A_ij = sum_c phi(q_i)_c phi(k_j)_c prod_{t=j+1..i} gamma_{t,c}`` for ``j <= i``;
:func:`linear_attention_recurrent` and :func:`linear_attention_step` take the same ``decay``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .._checks import (
    require_bool,
    require_float_tensors,
    require_int,
    require_number,
    require_qkv,
    require_same_device,
)
from ..masks import causal_diagonal
from ._tiled import work_dtype

__all__ = [
    "elu_feature_map",
    "linear_attention",
    "linear_attention_recurrent",
    "LinearAttentionState",
    "linear_attention_step",
    "decayed_linear_attention",
]

FeatureMap = Callable[[torch.Tensor], torch.Tensor]


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1, positive everywhere (Katharopoulos et al. 2020). Shape preserved.

    Computed as ``x + 1`` for ``x > 0`` and ``exp(x)`` otherwise (the same function): writing
    ``elu(x) + 1`` literally cancels to exactly 0 in float32 below x ~ -17.
    """
    return torch.where(x > 0, x + 1.0, torch.exp(torch.clamp(x, max=0.0)))


def _features(q, k, feature_map):
    phi = elu_feature_map if feature_map is None else feature_map
    if not callable(phi):
        raise TypeError(
            f"feature_map must be callable (tensor -> tensor) or None, got {type(phi).__name__}"
        )
    return phi(q), phi(k)


@dataclass(frozen=True)
class _LinearArgs:
    """The checked arguments of :func:`linear_attention`."""

    batch: tuple[int, ...]
    causal: bool
    offset: int  # causal: query i sees keys j <= i + offset
    eps: float
    chunk_size: int
    phi: FeatureMap


def _check_linear(q, k, v, causal, feature_map, eps, chunk_size, alignment) -> _LinearArgs:
    causal = require_bool(causal, "causal")
    eps = require_number(eps, "eps", nonnegative=True)
    batch = require_qkv(q, k, v)
    chunk_size = require_int(chunk_size, "chunk_size", 1)
    offset = causal_diagonal(q.shape[-2], k.shape[-2], alignment)
    phi = elu_feature_map if feature_map is None else feature_map
    if not callable(phi):
        raise TypeError(
            f"feature_map must be callable (tensor -> tensor) or None, got {type(phi).__name__}"
        )
    return _LinearArgs(batch, causal, offset, eps, chunk_size, phi)


def linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    feature_map: FeatureMap | None = None,
    eps: float = 1e-6,
    chunk_size: int = 128,
    alignment: str = "bottom_right",
) -> torch.Tensor:
    r"""Linear attention: ``phi(Q) (phi(K)^T V)`` over ``phi(Q) (phi(K)^T 1) + eps``.

    Causal: ``out_i`` sums over the keys up to ``i``'s diagonal only, in chunks of
    ``chunk_size`` queries: quadratic (the masked ``phi(Q) phi(K)^T``) within a chunk,
    the running state ``S = sum phi(k) v^T``, ``z = sum phi(k)`` carried between chunks.
    (A chunk is not a tile of the softmax kernels, hence its own name: no softmax, no
    running maximum, and the state it hands on is the RNN's.)

    Args:
        q: ``(..., n, d)``; k: ``(..., m, d)``; v: ``(..., m, d_v)`` (batch dims broadcast).
        causal: position ``i`` sums over the keys up to its diagonal only:
            ``j <= i + m - n`` (``alignment="bottom_right"``, the default: the last query
            sees every key, as when decoding against a cache) or ``j <= i`` (``"top_left"``).
        feature_map: ``phi``, applied to q and k; default ``elu(x) + 1``. Must give
            non-negative features, or the normaliser can vanish.
        eps: added to the normaliser.
        chunk_size: causal only: queries per chunk. Cost ``O(n (chunk_size + d) d)``.
        alignment: ``"bottom_right"`` (default) or ``"top_left"``; ignored when not ``causal``.

    Returns:
        ``(..., n, d_v)`` in the dtype of ``q``; float16 / bfloat16 inputs are computed in
        float32 (their feature products overflow half precision for large scores). A query
        that sees no key gets zeros.

    Raises:
        TypeError: bad tensors, a feature map that is not callable, a ``chunk_size``
            that is not an int.
        ValueError: shapes that do not fit, tensors on different devices, a
            ``chunk_size`` below 1, an unknown ``alignment``.
    """
    a = _check_linear(q, k, v, causal, feature_map, eps, chunk_size, alignment)
    dtype, work = q.dtype, work_dtype(q.dtype)  # half inputs: computed in float32
    phi_q, phi_k, v = a.phi(q.to(work)), a.phi(k.to(work)), v.to(work)
    if a.causal:
        return _causal_chunks(phi_q, phi_k, v, a).to(dtype)
    kv = phi_k.transpose(-2, -1) @ v  # (..., d, d_v): every key and value, summarised once
    z = phi_k.sum(dim=-2)  # (..., d)
    num = phi_q @ kv
    den = (phi_q * z.unsqueeze(-2)).sum(-1, keepdim=True)
    return (num / (den + a.eps)).to(dtype)


def _causal_chunks(phi_q, phi_k, v, a: _LinearArgs) -> torch.Tensor:
    """Causal linear attention, chunk by chunk, the state carried between chunks."""
    n, m, d, d_v = phi_q.shape[-2], phi_k.shape[-2], phi_q.shape[-1], v.shape[-1]
    fq = phi_q.expand(*a.batch, n, d)
    fk = phi_k.expand(*a.batch, m, d)
    v = v.expand(*a.batch, m, d_v)
    state = fq.new_zeros(*a.batch, d, d_v)  # S = sum over the absorbed keys of phi(k_j) v_j^T
    z = fq.new_zeros(*a.batch, d)  # z = sum over the absorbed keys of phi(k_j)
    absorbed = 0  # keys 0 .. absorbed - 1 are in the state: every later query sees them
    outs = [fq.new_zeros(*a.batch, 0, d_v)]
    for s in range(0, n, a.chunk_size):
        e = min(s + a.chunk_size, n)
        # The chunk's keys are those on its queries' diagonals: [s + offset, e + offset).
        ks, ke = min(max(s + a.offset, 0), m), min(max(e + a.offset, 0), m)
        if ks > absorbed:
            state = state + fk[..., absorbed:ks, :].transpose(-2, -1) @ v[..., absorbed:ks, :]
            z = z + fk[..., absorbed:ks, :].sum(dim=-2)
            absorbed = ks
        qc, kc, vc = fq[..., s:e, :], fk[..., ks:ke, :], v[..., ks:ke, :]
        # Within the chunk key ks + c is visible to query s + r when ks + c <= s + r + offset.
        scores = (qc @ kc.transpose(-2, -1)).tril(s + a.offset - ks)
        num = scores @ vc + qc @ state
        den = scores.sum(-1, keepdim=True) + (qc * z.unsqueeze(-2)).sum(-1, keepdim=True)
        outs.append(num / (den + a.eps))
    return torch.cat(outs, dim=-2)


@dataclass
class LinearAttentionState:
    """The whole memory of causal linear attention after t tokens: independent of t.

    Attributes:
        s: ``(..., d, d_v)`` the sum of ``phi(k_j) v_j^T`` so far.
        z: ``(..., d)`` the sum of ``phi(k_j)`` so far.
        steps: tokens absorbed.
    """

    s: torch.Tensor
    z: torch.Tensor
    steps: int = 0

    @classmethod
    def empty(
        cls, batch_shape: tuple[int, ...], d: int, d_v: int, *, dtype=torch.float32, device=None
    ):
        """A state with nothing absorbed.

        Zeros of shapes ``(*batch_shape, d, d_v)`` and ``(*batch_shape, d)``.
        """
        return cls(
            torch.zeros(*batch_shape, d, d_v, dtype=dtype, device=device),
            torch.zeros(*batch_shape, d, dtype=dtype, device=device),
        )

    def nbytes(self) -> int:
        """Bytes held: the same after 1 token or 1 million."""
        return self.s.numel() * self.s.element_size() + self.z.numel() * self.z.element_size()


def linear_attention_step(
    state: LinearAttentionState,
    q_t: torch.Tensor,
    k_t: torch.Tensor,
    v_t: torch.Tensor,
    *,
    feature_map: FeatureMap | None = None,
    eps: float = 1e-6,
    decay: float | torch.Tensor | None = None,
    normalize: bool = True,
) -> tuple[torch.Tensor, LinearAttentionState]:
    """One causal decoding step: absorb token t into the state, then read its output.

    ``S <- decay * S + phi(k_t) v_t^T`` and ``z <- decay * z + phi(k_t)``, then
    ``out_t = phi(q_t)^T S / (phi(q_t)^T z + eps)`` (or ``phi(q_t)^T S`` without ``normalize``).

    Args:
        state: from :meth:`LinearAttentionState.empty` or a previous step.
        q_t, k_t: ``(..., d)``; v_t: ``(..., d_v)``: the new token's query, key, value.
        feature_map: ``phi``; default ``elu(x) + 1``.
        eps: added to the normaliser.
        decay: ``None`` (no forgetting, ``gamma = 1``); a float in ``(0, 1]`` (RetNet's fixed
            decay); or a tensor ``(..., 1)`` (one gate for the whole state, Mamba-2) or
            ``(..., d)`` (one gate per key feature, gated linear attention), values in
            ``[0, 1]``, multiplying the rows of ``S`` and the entries of ``z``.
        normalize: divide by ``phi(q_t)^T z`` (Katharopoulos et al.); RetNet and gated linear
            attention use ``False`` and normalise the outputs elsewhere.

    Returns:
        ``(out_t, new_state)`` with ``out_t`` of shape ``(..., d_v)``. Memory and time per
        step are O(d d_v), whatever the number of tokens before.
    """
    normalize = require_bool(normalize, "normalize")
    eps = require_number(eps, "eps", nonnegative=True)
    require_float_tensors(q_t=q_t, k_t=k_t, v_t=v_t)
    if (
        q_t.shape[-1] != state.s.shape[-2]
        or v_t.shape[-1] != state.s.shape[-1]
        or k_t.shape != q_t.shape
    ):
        raise ValueError(
            f"step shapes do not match the state: q_t {tuple(q_t.shape)}, k_t {tuple(k_t.shape)}, "
            f"v_t {tuple(v_t.shape)}, state s {tuple(state.s.shape)} (..., d, d_v)"
        )
    require_same_device(q_t=q_t, k_t=k_t, v_t=v_t, state=state.s)
    fq, fk = _features(q_t, k_t, feature_map)
    s, z = state.s, state.z
    if decay is not None:
        gamma = _check_decay(decay, q_t.shape[-1], "decay", q_t.shape[:-1])
        rows = gamma.unsqueeze(-1) if isinstance(gamma, torch.Tensor) else gamma
        s, z = rows * s, gamma * z  # forget first, then write
    s = s + fk.unsqueeze(-1) * v_t.unsqueeze(-2)  # + phi(k_t) v_t^T
    z = z + fk
    out = (fq.unsqueeze(-2) @ s).squeeze(-2)
    if normalize:
        out = out / ((fq * z).sum(-1, keepdim=True) + eps)
    return out, LinearAttentionState(s, z, state.steps + 1)


def _check_decay(decay, d: int, name: str, lead: tuple[int, ...]) -> float | torch.Tensor:
    """A decay: a float in (0, 1], or gates in [0, 1] of shape ``(..., 1)`` or ``(..., d)``."""
    if isinstance(decay, bool) or not isinstance(decay, (float, int, torch.Tensor)):
        raise TypeError(
            f"{name} must be a float in (0, 1] or a tensor of gates, got {type(decay).__name__}"
        )
    if not isinstance(decay, torch.Tensor):
        if not 0.0 < float(decay) <= 1.0:
            raise ValueError(f"{name} must be in (0, 1], got {decay}")
        return float(decay)
    if not decay.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {decay.dtype}")
    if decay.dim() == 0 or decay.shape[-1] not in (1, d):
        raise ValueError(
            f"{name} must have last dimension 1 (one gate per step) or d={d} (one per key "
            f"feature), got shape {tuple(decay.shape)} for steps of shape {(*lead, d)}"
        )
    if bool(((decay < 0) | (decay > 1)).any()):
        raise ValueError(
            f"{name} must lie in [0, 1], got values from {decay.min()} to {decay.max()}"
        )
    return decay


def linear_attention_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    decay: float | torch.Tensor | None = None,
    **step,
) -> torch.Tensor:
    """Causal linear attention as an RNN: a loop over tokens with :func:`linear_attention_step`.

    Args:
        q, k: ``(..., n, d)``; v: ``(..., n, d_v)``.
        decay: ``None``, a float in ``(0, 1]``, or gates ``(..., n, 1)`` / ``(..., n, d)``
            (step t uses ``decay[..., t, :]``).
        step: the rest of :func:`linear_attention_step`'s keyword arguments
            (``feature_map``, ``eps``, ``normalize``), passed to every step; its defaults
            unless given.

    Returns:
        ``(..., n, d_v)`` in the dtype of ``q`` (half inputs computed in float32), equal to
        ``linear_attention(q, k, v, causal=True)`` (no decay) or
        :func:`decayed_linear_attention` up to rounding.
    """
    batch = require_qkv(q, k, v)
    n = q.shape[-2]
    if k.shape[-2] != n:
        raise ValueError(
            f"the recurrent form is causal self-attention: n={n} queries but m={k.shape[-2]} keys"
        )
    # Half inputs run in float32 (the state's sums overflow float16), as the other kernels do.
    dtype, work = q.dtype, work_dtype(q.dtype)
    q, k, v = q.to(work), k.to(work), v.to(work)
    state = LinearAttentionState.empty(
        batch, q.shape[-1], v.shape[-1], dtype=work, device=q.device
    )
    if isinstance(decay, torch.Tensor):
        decay = _check_decay(decay, q.shape[-1], "decay", q.shape[:-1])
        if decay.dim() < 2 or decay.shape[-2] != n:
            raise ValueError(
                f"decay must have shape (..., n={n}, 1) or (..., n={n}, d), "
                f"got {tuple(decay.shape)}"
            )
    unknown = sorted(set(step) - {"feature_map", "eps", "normalize"})
    if unknown:
        raise TypeError(
            f"linear_attention_recurrent got unexpected keyword arguments {unknown}; it takes "
            "decay and linear_attention_step's feature_map, eps and normalize"
        )
    outs = [v.new_empty(*batch, 0, v.shape[-1])]  # n = 0: no step, an empty output
    for t in range(n):
        gate = decay[..., t, :] if isinstance(decay, torch.Tensor) else decay
        out, state = linear_attention_step(
            state,
            q[..., t, :],
            k[..., t, :],
            v[..., t, :],
            decay=gate,
            **step,
        )
        outs.append(out.expand(*batch, v.shape[-1]).unsqueeze(-2))
    return torch.cat(outs, dim=-2).to(dtype)


def decayed_linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    decay: float | torch.Tensor,
    *,
    feature_map: FeatureMap | None = None,
    eps: float = 1e-6,
    normalize: bool = True,
) -> torch.Tensor:
    r"""Causal linear attention with decay, parallel form (RetNet, gated linear attention).

    With ``L_t = sum_{s <= t} log gamma_s`` (per channel ``c`` when the gates are per
    feature), the recurrence ``S_t = gamma_t * S_{t-1} + phi(k_t) v_t^T`` unrolls to

        A_ij = sum_c phi(q_i)_c phi(k_j)_c exp(L_ic - L_jc)   (j <= i, else 0)
        out  = A V / (A 1 + eps)   (or A V without ``normalize``)

    a masked ``n x n`` matrix like softmax attention's, with the decay in place of the
    softmax. With one gate per step the decay factors out of the feature sum, and ``A`` is
    ``(phi(Q) phi(K)^T) * D`` with ``D_ij = exp(L_i - L_j)``, Mamba-2's "semiseparable" mask;
    per-channel gates need an ``(n, n, d)`` intermediate (this reference form is for checking
    and short sequences; chunked kernels avoid it).

    Args:
        q, k: ``(..., n, d)``; v: ``(..., n, d_v)`` (self-attention: as many keys as queries).
        decay: a float in ``(0, 1]`` (fixed, RetNet), or gates in ``(0, 1]`` of shape
            ``(..., n, 1)`` (one per step, Mamba-2) or ``(..., n, d)`` (one per key feature,
            gated linear attention); gate t multiplies the state before token t is written.
        feature_map: ``phi``; default ``elu(x) + 1``. eps: added to the normaliser.
        normalize: divide by ``A 1`` (the library's linear attention); RetNet and gated linear
            attention use ``False``.

    Returns:
        ``(..., n, d_v)``, equal to ``linear_attention_recurrent(q, k, v, decay=decay)``.

    Raises:
        TypeError: an argument that is not a tensor.
        ValueError: bad shapes, or gates outside ``(0, 1]``.
    """
    normalize = require_bool(normalize, "normalize")
    eps = require_number(eps, "eps", nonnegative=True)
    batch = require_qkv(q, k, v)
    n, d = q.shape[-2], q.shape[-1]
    if k.shape[-2] != n:
        raise ValueError(
            f"decayed linear attention is causal self-attention: n={n} queries but "
            f"m={k.shape[-2]} keys"
        )
    gamma = _check_decay(decay, d, "decay", (*batch, n))
    fq, fk = _features(q, k, feature_map)
    if isinstance(gamma, float):  # a constant: L_t = t log gamma
        steps = torch.arange(1, n + 1, dtype=fq.dtype, device=fq.device)
        log_cum = (steps * math.log(gamma)).unsqueeze(-1)
    else:
        if gamma.dim() < 2 or gamma.shape[-2] != n:
            raise ValueError(
                f"decay must have shape (..., n={n}, 1) or (..., n={n}, d), "
                f"got {tuple(gamma.shape)}"
            )
        if bool((gamma <= 0).any()):
            raise ValueError("the parallel form needs gates > 0 (it takes their logarithm)")
        log_cum = torch.cumsum(torch.log(gamma.to(fq)), dim=-2)  # (..., n, 1 or d): L_t
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    if log_cum.shape[-1] == 1:
        diff = log_cum - log_cum.squeeze(-1).unsqueeze(-2)  # (..., n, n): L_i - L_j
        decay_mask = torch.exp(diff.masked_fill(~causal, float("-inf")))
        a = (fq @ fk.transpose(-2, -1)) * decay_mask
    else:
        diff = log_cum.unsqueeze(-2) - log_cum.unsqueeze(-3)  # (..., n, n, d): L_ic - L_jc
        decay_mask = torch.exp(diff.masked_fill(~causal.unsqueeze(-1), float("-inf")))
        a = (fq.unsqueeze(-2) * fk.unsqueeze(-3) * decay_mask).sum(-1)
    out = a @ v
    if normalize:
        out = out / (a.sum(-1, keepdim=True) + eps)
    return out
