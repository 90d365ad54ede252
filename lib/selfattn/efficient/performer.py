r"""Performer's FAVOR+ (Choromanski et al. 2021): softmax attention from random features.

Softmax attention's kernel ``exp(q . k)`` is an expectation over Gaussian vectors ``w``::

    exp(q . k) = E_w[ exp(w . q - |q|^2 / 2) exp(w . k - |k|^2 / 2) ],   w ~ N(0, I_d)

so with ``r`` draws ``w_1 .. w_r`` (the rows of ``W``) the *positive random features*::

    phi(x) = exp(W x - |x|^2 / 2) / sqrt(r)

give ``phi(q) . phi(k)``, an unbiased estimate of ``exp(q . k)`` that is positive (so the
normaliser cannot vanish, unlike the ``cos``/``sin`` features of Rahimi and Recht), and
plugging it into linear attention's formula approximates softmax attention in ``O(n r d)``
instead of ``O(n^2 d)``. Drawing the rows of ``W`` in blocks of ``d`` *orthogonal* directions
(each rescaled to the length of a Gaussian vector, so every row is still ``N(0, I_d)``)
lowers the variance further: the "orthogonal random features" of FAVOR+.

The estimate's error is Monte Carlo's: it falls as ``1 / sqrt(r)``, and its relative size
grows like ``sqrt(exp(|q + k|^2))`` (Choromanski et al., Lemma 2), so queries and keys of large
norm need many features, whether or not the attention they give is sharp (chapter 8).
"""

from __future__ import annotations

import math

import torch

from .._checks import (
    require_bool,
    require_float_tensors,
    require_int,
    require_number,
    require_qkv,
)
from ._tiled import work_dtype
from .linear import linear_attention

__all__ = [
    "gaussian_projection",
    "positive_random_features",
    "performer_attention",
]


def gaussian_projection(
    num_features: int,
    d: int,
    *,
    orthogonal: bool = True,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> torch.Tensor:
    """The random matrix ``W`` ``(num_features, d)`` whose rows are ``N(0, I_d)`` vectors.

    With ``orthogonal`` the rows come in blocks of ``d`` mutually orthogonal directions (the QR
    factor of a Gaussian matrix), each row rescaled to the norm of an independent Gaussian
    vector; every row is still marginally ``N(0, I_d)`` (so the estimate stays unbiased) and
    the rows of one block are exactly orthogonal. Otherwise rows are independent.
    """
    orthogonal = require_bool(orthogonal, "orthogonal")
    num_features = require_int(num_features, "num_features", 1)
    d = require_int(d, "d", 1)
    if not orthogonal:
        return torch.randn(num_features, d, generator=generator, dtype=dtype, device=device)
    blocks = []
    for _ in range(math.ceil(num_features / d)):
        g = torch.randn(d, d, generator=generator, dtype=torch.float64, device=device)
        q, r = torch.linalg.qr(g)
        q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)  # Haar-uniform orientation
        blocks.append(q.T)  # rows: d orthonormal directions
    directions = torch.cat(blocks)[:num_features]
    norms = torch.randn(
        num_features, d, generator=generator, dtype=torch.float64, device=device
    ).norm(dim=-1, keepdim=True)  # chi-distributed lengths, as a Gaussian vector's
    return (directions * norms).to(dtype)


def positive_random_features(
    x: torch.Tensor, projection: torch.Tensor, *, stabilize: str | None = None
) -> torch.Tensor:
    """``phi(x) = exp(W x - |x|^2 / 2) / sqrt(r)``: ``(..., n, d)`` -> ``(..., n, r)``.

    ``E[phi(q) . phi(k)] = exp(q . k)`` over Gaussian rows of ``W`` (``projection``, ``(r, d)``).

    Args:
        x: ``(..., n, d)``, already scaled (attention's ``1 / sqrt(d)`` folded in).
        projection: ``(r, d)`` from :func:`gaussian_projection`.
        stabilize: ``None``; ``"row"`` subtracts each row's largest exponent (for queries:
            a per-query factor that cancels in attention's normalisation); ``"all"`` subtracts
            the largest exponent over the last two dimensions (for keys: one factor for all of
            them, which cancels too). Either keeps ``exp`` from overflowing.
    """
    require_float_tensors(x=x)
    if (
        not isinstance(projection, torch.Tensor)
        or projection.dim() != 2
        or projection.shape[-1] != x.shape[-1]
    ):
        raise ValueError(
            f"projection must be an (r, d={x.shape[-1]}) tensor, got "
            f"{tuple(getattr(projection, 'shape', ()))}"
        )
    expo = x @ projection.to(x).T - (x * x).sum(-1, keepdim=True) / 2
    if stabilize == "row":
        expo = expo - expo.amax(dim=-1, keepdim=True).detach()
    elif stabilize == "all":
        expo = expo - expo.amax(dim=(-2, -1), keepdim=True).detach()
    elif stabilize is not None:
        raise ValueError(f"stabilize must be None, 'row' or 'all', got {stabilize!r}")
    return torch.exp(expo) / math.sqrt(projection.shape[0])


def performer_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    num_features: int = 256,
    orthogonal: bool = True,
    projection: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    causal: bool = False,
    scale: float | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    r"""FAVOR+: softmax attention estimated with positive (orthogonal) random features.

    ``out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j))`` with
    ``phi`` from :func:`positive_random_features` on ``q sqrt(scale)`` and ``k sqrt(scale)``,
    so that ``phi(q_i) . phi(k_j)`` estimates ``exp(scale q_i . k_j)``. As ``num_features``
    grows the output converges to ``softmax(scale Q K^T) V``.

    Args:
        q, k: ``(..., n, d)``, ``(..., m, d)``; v: ``(..., m, d_v)`` (batch dims broadcast).
        num_features: ``r``, rows of the random projection (ignored with ``projection``).
        orthogonal: draw orthogonal blocks (FAVOR+) rather than independent rows.
        projection: a fixed ``(r, d)`` matrix instead of a fresh draw.
        generator: for the draw.
        causal: prefix sums (``j <= i``, top-left), through
            :func:`selfattn.efficient.linear.linear_attention`.
        scale: defaults to ``1 / sqrt(d)``.
        eps: added to the normaliser.

    Returns:
        ``(..., n, d_v)`` in the dtype of ``q`` (half inputs computed in float32).
    """
    causal = require_bool(causal, "causal")
    orthogonal = require_bool(orthogonal, "orthogonal")
    eps = require_number(eps, "eps", nonnegative=True)
    batch = require_qkv(q, k, v)
    d = q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    # > 0 and finite: its square root scales q and k
    scale = require_number(scale, "scale", positive=True)
    dtype, work = q.dtype, work_dtype(q.dtype)
    if projection is None:
        projection = gaussian_projection(
            num_features, d, orthogonal=orthogonal, generator=generator, dtype=work,
            device=q.device,
        )  # fmt: skip
    root = math.sqrt(scale)
    fq = positive_random_features(q.to(work) * root, projection, stabilize="row")
    fk = positive_random_features(
        (k.to(work) * root).expand(*batch, *k.shape[-2:]), projection, stabilize="all"
    )
    out = linear_attention(
        fq, fk, v.to(work), causal=causal, feature_map=_identity, eps=eps, chunk_size=128
    )
    return out.to(dtype)


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x
