"""Checkers for chapter 3's exercises (scaled dot-product attention).

In the chapter's order (:data:`EXERCISES`, whose labels number them): ``five-steps``
(build, :func:`check_five_steps`), ``softmax`` (build, :func:`check_stable_softmax`),
``scale-bug`` (find the bug, :func:`check_scale_bug`: the reader fixes
:func:`buggy_attention_layer`), ``predict-variance`` (predict, then run,
:func:`check_scaled_variance_prediction`) and ``temperature`` (build,
:func:`check_temperature`).

A wrong answer that is one of the likely mistakes is named instead of reported by its
largest difference.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..attention import scaled_dot_product_attention, softmax
from ..i18n import _
from ..reference import attention_steps
from ._core import (
    Mismatch,
    call_answer,
    checker,
    expect_close,
    expect_true,
    name_mistake,
    read_prediction,
)

__all__ = [
    "EXERCISES",
    "check_five_steps",
    "check_stable_softmax",
    "buggy_attention_layer",
    "check_scale_bug",
    "PREDICTION_SIGMA",
    "PREDICTION_D_K",
    "check_scaled_variance_prediction",
    "check_temperature",
]

#: The labels of chapter 3's exercises (``ex-ch03-<label>``), in the chapter's order.
EXERCISES = ("five-steps", "softmax", "scale-bug", "predict-variance", "temperature")


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _steps_np(X, W_q, W_k, W_v, *, scale: float | None = None, axis: int = 1) -> np.ndarray:
    # The five steps with one knob per likely mistake: the scale and the softmax axis.
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    s = Q @ K.T * (1 / math.sqrt(Q.shape[1]) if scale is None else scale)
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)) @ V


@checker("five-steps", "the five steps")
def check_five_steps(answer) -> None:
    """``answer(X, W_q, W_k, W_v)`` (NumPy arrays ``(n, d), (d, d_k), (d, d_k), (d, d_v)``)
    must return the attention output ``(n, d_v)`` of :func:`selfattn.reference.attention_steps`.

    Named mistakes: the scale forgotten, and the softmax taken over the queries (axis 0)."""
    cases = [
        ("n=5, d=6, d_k=4, d_v=3", 5, 6, 4, 3),
        (_("one token, n=1"), 1, 4, 4, 2),
        (_("d_k=64, where the scale matters"), 6, 8, 64, 3),
        ("n=7, d=3, d_k=5, d_v=2", 7, 3, 5, 2),
    ]
    for i, (name, n, d, d_k, d_v) in enumerate(cases):
        r = _rng(i)
        X = r.normal(size=(n, d))
        W_q, W_k, W_v = r.normal(size=(d, d_k)), r.normal(size=(d, d_k)), r.normal(size=(d, d_v))
        expected = attention_steps(X, W_q, W_k, W_v).output
        got = call_answer(answer, X.copy(), W_q.copy(), W_k.copy(), W_v.copy())
        mistakes = {
            _("the scores are not divided by sqrt(d_k) (step 3 is missing)"): _steps_np(
                X, W_q, W_k, W_v, scale=1.0
            ),
            _(
                "your softmax runs over axis 0, the queries: each key's weights sum to 1, "
                "not each query's"
            ): _steps_np(X, W_q, W_k, W_v, axis=0),
        }
        expect_close(got, expected, case=name, atol=1e-6, rtol=1e-6, mistakes=mistakes)


def _softmax_global_max(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x - x.max())
    return e / e.sum(-1, keepdim=True)


def _softmax_first_dim(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=0)


@checker("softmax", "stable softmax")
def check_stable_softmax(answer) -> None:
    """``answer(x)`` for a float tensor ``x (..., m)`` must return the softmax over the last
    dimension without overflow, also for rows whose scores are far apart in size.

    Named mistakes: the softmax over the first dimension instead of the last, and one
    maximum for the whole tensor instead of one per row; a naive ``exp(x) / sum`` is
    reported by the NaN its overflow produces."""
    cases = [
        (
            _("random scores (3, 5)"),
            torch.randn(3, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64),
        ),
        (
            _("large scores [1000, 1001, 1002]"),
            torch.tensor([[1000.0, 1001.0, 1002.0]], dtype=torch.float64),
        ),
        (
            _("very negative scores [-1000, -1001, -1002]"),
            torch.tensor([[-1000.0, -1001.0, -1002.0]], dtype=torch.float64),
        ),
        (
            _("rows far apart [[0, 1], [-1000, -999]]"),
            torch.tensor([[0.0, 1.0], [-1000.0, -999.0]], dtype=torch.float64),
        ),
        (
            _("batched input (2, 3, 4), softmax over the last dim"),
            torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64),
        ),
    ]
    for name, x in cases:
        got = call_answer(answer, x.clone())
        expect_true(
            isinstance(got, torch.Tensor),
            _(
                "case {case}: return a torch.Tensor, got {what}",
                case=name,
                what=type(got).__name__,
            ),
        )
        mistakes = {
            # First: on rows far apart the global maximum gives 0/0 = NaN, as the naive
            # formula does, and this is the more specific diagnosis there.
            _(
                "you subtract one maximum for the whole tensor: a row far below it "
                "underflows to 0/0"
            ): _softmax_global_max(x),
            _(
                "your softmax runs over the first dimension: each row's weights do not sum to 1"
            ): _softmax_first_dim(x),
        }
        expect_close(got, softmax(x), case=name, atol=1e-9, rtol=1e-7, mistakes=mistakes)


def buggy_attention_layer(
    x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor
) -> torch.Tensor:
    """Single-head attention with one planted bug, for "find the bug: the scale".

    ``x (..., n, d_model)``, ``w_q, w_k (d_model, d_k)``, ``w_v (d_model, d_v)``; returns
    ``(..., n, d_v)``. Its bug passes a test that checks only shapes, or only that the
    weights sum to 1.
    """
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (..., n, d_k), (..., n, d_k), (..., n, d_v)
    scale = q.shape[-1] ** 0.5
    scores = q @ k.transpose(-2, -1) * scale  # (..., n, n)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v


def _layer(x, w_q, w_k, w_v, *, scale: float, dim: int = -1) -> torch.Tensor:
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.transpose(-2, -1) * scale, dim=dim) @ v


@checker("scale-bug", "find the bug: the scale")
def check_scale_bug(answer) -> None:
    """``answer(x, w_q, w_k, w_v)`` must be :func:`buggy_attention_layer` with its bug
    fixed, output ``(..., n, d_v)``, compared with the book's attention on several cases (one
    of which hides the bug). The likely mistakes, the bug left in among them, are named."""
    g = torch.Generator().manual_seed(33)
    cases = [
        (_("d_k=1, where the bug is invisible"), 2, 5, 8, 1, 3),
        (_("d_model=32, d_k=8, one sequence of 5"), 1, 5, 32, 8, 4),
        (_("batch of 3, d_model=64, d_k=16"), 3, 6, 64, 16, 5),
        (_("d_model=8, d_k=128 (d_k larger than d_model)"), 2, 4, 8, 128, 3),
    ]
    for name, b, n, d_model, d_k, d_v in cases:
        x = torch.randn(b, n, d_model, generator=g, dtype=torch.float64)
        w_q = torch.randn(d_model, d_k, generator=g, dtype=torch.float64) / math.sqrt(d_model)
        w_k = torch.randn(d_model, d_k, generator=g, dtype=torch.float64) / math.sqrt(d_model)
        w_v = torch.randn(d_model, d_v, generator=g, dtype=torch.float64) / math.sqrt(d_model)
        args = (x, w_q, w_k, w_v)
        expected = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)
        got = call_answer(answer, *(a.clone() for a in args))
        expect_true(
            isinstance(got, torch.Tensor),
            _(
                "case {case}: return a torch.Tensor, got {what}",
                case=name,
                what=type(got).__name__,
            ),
        )
        mistakes = {
            _(
                "the scores are still multiplied by sqrt(d_k) = {root}: the scale stretches "
                "scores whose spread already grows like sqrt(d_k), and the weights saturate",
                root=f"{math.sqrt(d_k):.3g}",
            ): (buggy_attention_layer(*args)),
            _(
                "divided by d_k instead of sqrt(d_k): the scores come out too small and "
                "the weights too flat"
            ): _layer(*args, scale=1 / d_k),
            _("not divided at all: the scale is missing"): _layer(*args, scale=1.0),
            _(
                "divided by sqrt(d_model), the width of x, not a width of the queries and keys"
            ): _layer(*args, scale=1 / math.sqrt(d_model)),
        }
        expect_close(got, expected, case=name, atol=1e-8, rtol=1e-6, mistakes=mistakes)


#: For "predict the variance of the scaled scores", the standard deviation of every
#: component of q and k.
PREDICTION_SIGMA: float = 2.0
#: For the same prediction, the length of the query and key vectors.
PREDICTION_D_K: int = 64


@checker("predict-variance", "predict the variance of the scaled scores")
def check_scaled_variance_prediction(prediction) -> None:
    """``prediction`` (a number written before the simulation runs) must be the variance of
    ``q·k / sqrt(d_k)`` when the ``2 d_k`` components of ``q`` and ``k`` are independent with
    mean 0 and standard deviation :data:`PREDICTION_SIGMA`, ``d_k =`` :data:`PREDICTION_D_K`.

    ``prediction`` may also be a function returning the number (the checkers' usual form).
    The likely mistakes are named; a wrong prediction is never told the right value.
    """
    value = read_prediction(prediction)
    sigma, d_k = PREDICTION_SIGMA, PREDICTION_D_K
    mistakes = {
        _(
            "{value} is sigma², the variance of one component; q·k sums products q_i k_i, "
            "and a product of two components does not have a component's variance",
            value=f"{sigma**2:g}",
        ): sigma**2,
        _(
            "{value} is the variance of q·k before the division by sqrt(d_k); the "
            "prediction is about the scaled score",
            value=f"{sigma**4 * d_k:g}",
        ): sigma**4 * d_k,
        _("1 would need components of variance 1; the scale removes the d_k, not the sigma"): 1.0,
        _(
            "{value} divides the variance by sqrt(d_k); dividing a number by c divides its "
            "variance by c²",
            value=f"{sigma**4 * math.sqrt(d_k):g}",
        ): sigma**4 * math.sqrt(d_k),
    }
    expected = sigma**4
    if not math.isclose(float(value), expected, rel_tol=1e-6):
        name_mistake(float(value), mistakes, case=_("your prediction"), atol=0, rtol=1e-6)
        raise Mismatch(
            _(
                "your prediction {value} is not the variance; go over the theorem again "
                "before running the next cell",
                value=f"{float(value):g}",
            )
        )


@checker("temperature", "attention with a temperature")
def check_temperature(answer) -> None:
    """``answer(q, k, v, temperature)`` must return
    ``softmax(q k^T / (temperature * sqrt(d_k))) v`` for ``q (..., n, d_k)``,
    ``k (..., m, d_k)``, ``v (..., m, d_v)``.

    Named mistakes: the temperature multiplying the scores instead of dividing them, and
    the ``sqrt(d_k)`` dropped."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, 16, generator=g, dtype=torch.float64) for _ in range(3))
    cases = [
        (_("temperature 3"), q, k, v, 3.0),
        (_("temperature 10 (flat)"), q, k, v, 10.0),
        (_("temperature 0.05 (sharp)"), q, k, v, 0.05),
        (_("temperature 1 (plain scaled attention)"), q, k, v, 1.0),
        (
            _("n=3 queries, m=5 keys, d_v=2"),
            q[:, :3],
            torch.randn(2, 5, 16, generator=g, dtype=torch.float64),
            torch.randn(2, 5, 2, generator=g, dtype=torch.float64),
            2.5,
        ),
    ]
    for name, q_, k_, v_, t in cases:
        root = math.sqrt(q_.shape[-1])
        expected = scaled_dot_product_attention(q_, k_, v_, scale=1.0 / (t * root))
        got = call_answer(answer, q_.clone(), k_.clone(), v_.clone(), t)
        mistakes = {
            _(
                "the temperature multiplies the scores: a high temperature then sharpens the "
                "weights instead of flattening them"
            ): scaled_dot_product_attention(q_, k_, v_, scale=t / root),
            _(
                "the scores are divided by the temperature only: the 1/sqrt(d_k) is gone, so "
                "temperature 1 is no longer this chapter's attention"
            ): scaled_dot_product_attention(q_, k_, v_, scale=1.0 / t),
        }
        expect_close(got, expected, case=name, atol=1e-8, rtol=1e-6, mistakes=mistakes)
