"""Checkers for chapter 3's exercises (scaled dot-product attention).

Each checker runs the reader's answer on several cases, edge cases included,
and prints one line: passed, not attempted yet, or the first case that failed
with expected vs got. None of them raises.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..attention import scaled_dot_product_attention, softmax
from ..reference import attention_steps
from ._core import call_answer, checker, expect_close, expect_true

__all__ = [
    "check_five_steps",
    "check_stable_softmax",
    "check_dot_variance",
    "check_temperature",
    "check_softmax_jacobian",
]


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


@checker("3.1", "the five steps")
def check_five_steps(answer) -> None:
    """``answer(X, W_q, W_k, W_v)`` (NumPy arrays ``(n, d), (d, d_k), (d, d_k), (d, d_v)``)
    must return the attention output ``(n, d_v)`` of :func:`selfattn.reference.attention_steps`."""
    cases = [
        ("n=5, d=6, d_k=4, d_v=3", 5, 6, 4, 3),
        ("one token, n=1", 1, 4, 4, 2),
        ("d_k=64, where the scale matters", 6, 8, 64, 3),
        ("n=7, d=3, d_k=5, d_v=2", 7, 3, 5, 2),
    ]
    for i, (name, n, d, d_k, d_v) in enumerate(cases):
        r = _rng(i)
        X = r.normal(size=(n, d))
        W_q, W_k, W_v = r.normal(size=(d, d_k)), r.normal(size=(d, d_k)), r.normal(size=(d, d_v))
        expected = attention_steps(X, W_q, W_k, W_v).output
        got = call_answer(answer, X.copy(), W_q.copy(), W_k.copy(), W_v.copy())
        expect_close(got, expected, case=name, atol=1e-6, rtol=1e-6)


@checker("3.2", "stable softmax")
def check_stable_softmax(answer) -> None:
    """``answer(x)`` for a float tensor ``x (..., m)`` must return the softmax over the last
    dimension, without overflow, and zeros for a row that is all ``-inf``."""
    inf = float("inf")
    cases = [
        (
            "random scores (3, 5)",
            torch.randn(3, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64),
        ),
        (
            "large scores [1000, 1001, 1002]",
            torch.tensor([[1000.0, 1001.0, 1002.0]], dtype=torch.float64),
        ),
        (
            "very negative scores [-1000, -1001, -1002]",
            torch.tensor([[-1000.0, -1001.0, -1002.0]], dtype=torch.float64),
        ),
        (
            "rows far apart [[0, 1], [-1000, -999]]",
            torch.tensor([[0.0, 1.0], [-1000.0, -999.0]], dtype=torch.float64),
        ),
        ("a masked entry [0, -inf, 1]", torch.tensor([[0.0, -inf, 1.0]], dtype=torch.float64)),
        (
            "a fully masked row [-inf, -inf, -inf]",
            torch.tensor([[1.0, 2.0, 3.0], [-inf, -inf, -inf]], dtype=torch.float64),
        ),
        (
            "batched input (2, 3, 4), softmax over the last dim",
            torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64),
        ),
    ]
    for name, x in cases:
        got = call_answer(answer, x.clone())
        expect_true(
            isinstance(got, torch.Tensor),
            f"case {name}: return a torch.Tensor, got {type(got).__name__}",
        )
        expect_close(got, softmax(x), case=name, atol=1e-9, rtol=1e-7)


@checker("3.3", "variance of q·k for variance σ²")
def check_dot_variance(answer) -> None:
    """``answer(d_k, sigma)`` must return ``Var[q·k]`` for q, k with independent components
    of mean 0 and standard deviation ``sigma``: ``sigma**4 * d_k``."""
    for d_k, sigma in ((1, 1.0), (64, 1.0), (64, 2.0), (10, 0.5), (1000, 0.1), (3, 3.0)):
        got = call_answer(answer, d_k, sigma)
        try:
            got = float(got)
        except (TypeError, ValueError):
            expect_true(
                False, f"case d_k={d_k}, σ={sigma}: return a number, got {type(got).__name__}"
            )
        expected = sigma**4 * d_k
        expect_true(
            math.isclose(got, expected, rel_tol=1e-9),
            f"case d_k={d_k}, σ={sigma}: expected Var[q·k] = {expected:.6g}, got {got:.6g}",
        )


@checker("3.4", "attention with a temperature")
def check_temperature(answer) -> None:
    """``answer(q, k, v, temperature)`` must return
    ``softmax(q k^T / (temperature * sqrt(d_k))) v`` for ``q (..., n, d_k)``,
    ``k (..., m, d_k)``, ``v (..., m, d_v)``."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, 16, generator=g, dtype=torch.float64) for _ in range(3))
    cases = [
        ("temperature 1 (plain scaled attention)", q, k, v, 1.0),
        ("temperature 1/sqrt(d_k) (the scale forgotten)", q, k, v, 1 / math.sqrt(16)),
        ("temperature 10 (flat)", q, k, v, 10.0),
        ("temperature 0.05 (sharp)", q, k, v, 0.05),
        (
            "n=3 queries, m=5 keys, d_v=2",
            q[:, :3],
            torch.randn(2, 5, 16, generator=g, dtype=torch.float64),
            torch.randn(2, 5, 2, generator=g, dtype=torch.float64),
            2.0,
        ),
    ]
    for name, q_, k_, v_, t in cases:
        expected = scaled_dot_product_attention(
            q_, k_, v_, scale=1.0 / (t * math.sqrt(q_.shape[-1]))
        )
        got = call_answer(answer, q_.clone(), k_.clone(), v_.clone(), t)
        expect_close(got, expected, case=name, atol=1e-8, rtol=1e-6)


@checker("3.5", "the softmax Jacobian")
def check_softmax_jacobian(answer) -> None:
    """``answer(p)`` for a probability vector ``p (m,)`` must return the Jacobian
    ``d softmax(s) / d s = diag(p) - p p^T``, shape ``(m, m)``."""
    cases = [
        (
            "p = softmax([1, 2, 0.5, -1, 0])",
            torch.softmax(torch.tensor([1.0, 2.0, 0.5, -1.0, 0.0], dtype=torch.float64), 0),
        ),
        ("uniform p over 4 keys", torch.full((4,), 0.25, dtype=torch.float64)),
        ("one-hot p (saturated softmax)", torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)),
        ("a single key, p = [1]", torch.ones(1, dtype=torch.float64)),
    ]
    for name, p in cases:
        expected = torch.diag(p) - torch.outer(p, p)
        got = call_answer(answer, p.clone())
        expect_close(got, expected, case=name, atol=1e-10, rtol=1e-8)
