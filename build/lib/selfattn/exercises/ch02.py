"""Checkers for chapter 2, "Queries, keys and values".

* 2.1 ``check_hard_lookup``: a dictionary lookup by the best-matching key.
* 2.2 ``check_soft_lookup``: softmax-weighted sum of values, with a temperature.
* 2.3 ``check_cross_attention``: queries from one sequence, keys and values from another.
* 2.4 ``check_antecedent_share``: the share of attention from ``it`` on the right noun.
"""

from __future__ import annotations

import math

import torch

from ._core import call_answer, checker, expect_close, expect_shape

__all__ = [
    "check_hard_lookup",
    "check_soft_lookup",
    "check_cross_attention",
    "check_antecedent_share",
    "hard_lookup",
    "soft_lookup",
    "cross_attention",
    "antecedent_share",
]


def hard_lookup(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The value ``(d_v,)`` whose key (of ``(m, d)``) has the largest dot product with ``(d,)``."""
    return values[torch.argmax(keys @ query)]


def soft_lookup(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """``softmax(keys @ query / temperature) @ values``.

    Shapes: query ``(d,)``, keys ``(m, d)``, values ``(m, d_v)`` -> ``(d_v,)``.
    """
    return torch.softmax(keys @ query / temperature, dim=-1) @ values


def cross_attention(
    x: torch.Tensor, context: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor
) -> torch.Tensor:
    """Queries from ``x`` ``(n, d)``, keys and values from ``context`` ``(m, d)``.

    Returns ``(n, d_v)``.

    ``w_q``, ``w_k``: ``(d, d_k)``; ``w_v``: ``(d, d_v)``. Scores are scaled by ``1/sqrt(d_k)``.
    """
    q, k, v = x @ w_q, context @ w_k, context @ w_v
    return torch.softmax(q @ k.T / math.sqrt(k.shape[-1]), dim=-1) @ v


def antecedent_share(
    weights: torch.Tensor, it_position: torch.Tensor, antecedent_position: torch.Tensor
) -> float:
    """Mean over sentences of the weight from query ``it`` to key ``antecedent``.

    weights ``(B, n, n)`` (rows are queries), it_position and antecedent_position ``(B,)``.
    """
    b = torch.arange(weights.shape[0])
    return float(weights[b, it_position, antecedent_position].mean())


def _library(generator):
    keys = torch.randn(6, 4, generator=generator) * torch.tensor(
        [[0.5], [3.0], [1.0], [1.0], [2.0], [0.2]]
    )
    values = torch.randn(6, 3, generator=generator)
    return keys, values


@checker("2.1", "hard lookup")
def check_hard_lookup(answer):
    generator = torch.Generator().manual_seed(0)
    keys, values = _library(generator)
    for i in range(5):
        query = torch.randn(4, generator=generator)
        got = call_answer(answer, query.clone(), keys.clone(), values.clone())
        expect_shape(got, (3,), case=f"query {i}")
        expect_close(got, hard_lookup(query, keys, values), case=f"query {i}")
    # one key only: the lookup must return its value whatever the query
    expect_close(
        call_answer(answer, torch.ones(4), keys[:1].clone(), values[:1].clone()),
        values[0],
        case="m=1",
    )


@checker("2.2", "soft lookup with a temperature")
def check_soft_lookup(answer):
    generator = torch.Generator().manual_seed(1)
    keys, values = _library(generator)
    for temperature in (1.0, 0.25, 4.0, 1e-3):
        query = torch.randn(4, generator=generator)
        got = call_answer(answer, query.clone(), keys.clone(), values.clone(), temperature)
        expect_shape(got, (3,), case=f"temperature={temperature}")
        expect_close(
            got, soft_lookup(query, keys, values, temperature), case=f"temperature={temperature}"
        )
    big = torch.full((4,), 300.0)  # scores near 1e5 at temperature 0.01: a naive exp overflows
    expect_close(
        call_answer(answer, big, keys.clone(), values.clone(), 0.01),
        soft_lookup(big, keys, values, 0.01),
        case="large scores (use a stable softmax)",
    )


@checker("2.3", "cross-attention")
def check_cross_attention(answer):
    generator = torch.Generator().manual_seed(2)
    for n, m, d, d_k, d_v in ((3, 5, 4, 2, 3), (1, 1, 4, 4, 2), (4, 2, 6, 8, 5)):
        x, context = torch.randn(n, d, generator=generator), torch.randn(m, d, generator=generator)
        w_q, w_k = (
            torch.randn(d, d_k, generator=generator),
            torch.randn(d, d_k, generator=generator),
        )
        w_v = torch.randn(d, d_v, generator=generator)
        got = call_answer(
            answer, x.clone(), context.clone(), w_q.clone(), w_k.clone(), w_v.clone()
        )
        case = f"n={n}, m={m}, d_k={d_k}, d_v={d_v}"
        expect_shape(got, (n, d_v), case=case)
        expect_close(got, cross_attention(x, context, w_q, w_k, w_v), case=case)


@checker("2.4", "share of attention on the antecedent")
def check_antecedent_share(answer):
    generator = torch.Generator().manual_seed(3)
    weights = torch.softmax(3 * torch.randn(5, 7, 7, generator=generator), dim=-1)
    it_position = torch.tensor([4, 4, 5, 3, 6])
    antecedent_position = torch.tensor([1, 2, 0, 1, 5])
    got = call_answer(answer, weights.clone(), it_position.clone(), antecedent_position.clone())
    expected = antecedent_share(weights, it_position, antecedent_position)
    expect_close(
        torch.as_tensor(got, dtype=torch.float64).reshape(()),
        torch.tensor(expected),
        case="5 sentences of 7 tokens",
        atol=1e-6,
    )
