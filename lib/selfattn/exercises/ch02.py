"""Checkers for chapter 2, "Queries, keys and values".

In the chapter's order (:data:`EXERCISES`, whose labels number them):

* ``predict-score`` (predict, then run) ``check_predicted_score``: one step of the worked
  example by hand, the scaled score of "it" against a fourth token, "tired".
* ``soft`` (build) ``check_soft_lookup``: softmax-weighted sum of values, with a temperature.
* ``cross`` (find the bug) ``check_cross_attention``: cross-attention with one planted bug
  (:func:`buggy_cross_attention`), fixed.
* ``share`` (build) ``check_antecedent_share``: the share of attention from ``it`` on the
  right noun.

Each checker names the most likely wrong answers instead of only reporting which case
differs.

The worked example (:data:`WORKED_X`, :data:`WORKED_W_Q`, :data:`WORKED_W_K`,
:data:`WORKED_W_V`) is defined here once, so the chapter and the checker use the same numbers.
"""

from __future__ import annotations

import math

import torch

from .._checks import require_number
from ..i18n import _
from ._core import (
    call_answer,
    checker,
    expect_close,
    expect_predicted_close,
    expect_shape,
)

__all__ = [
    "EXERCISES",
    "WORKED_TOKENS",
    "WORKED_X",
    "WORKED_W_Q",
    "WORKED_W_K",
    "WORKED_W_V",
    "TIRED_X",
    "check_predicted_score",
    "buggy_cross_attention",
    "check_soft_lookup",
    "check_cross_attention",
    "check_antecedent_share",
    "soft_lookup",
    "cross_attention",
    "antecedent_share",
]

#: The labels of chapter 2's exercises (``ex-ch02-<label>``), in the chapter's order.
EXERCISES = ("predict-score", "soft", "cross", "share")

#: The worked example's three tokens, in order.
WORKED_TOKENS: tuple[str, ...] = ("animal", "street", "it")
#: Their 2-D embeddings, one row per token ``(3, 2)``.
WORKED_X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
#: The hand-chosen query projection ``(2, 2)``, ``Q = X W^Q``.
WORKED_W_Q = torch.tensor([[1.0, 0.0], [1.0, -1.0]])
#: The hand-chosen key projection ``(2, 2)``, ``K = X W^K``.
WORKED_W_K = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
#: The hand-chosen value projection ``(2, 2)``, ``V = X W^V``.
WORKED_W_V = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
#: The fourth token, "tired", of the exercise "predict, then run (a score by hand)", as a
#: 2-D embedding ``(2,)``.
TIRED_X = torch.tensor([2.0, 1.0])


def _worked_score(query_x: torch.Tensor, key_x: torch.Tensor, *, scaled: bool = True) -> float:
    q, k = query_x @ WORKED_W_Q, key_x @ WORKED_W_K
    score = float(q @ k)
    return score / math.sqrt(WORKED_W_K.shape[1]) if scaled else score


@checker("predict-score", "predict: a score by hand")
def check_predicted_score(answer):
    x_it = WORKED_X[WORKED_TOKENS.index("it")]
    case = _("'it' (query) against 'tired' (key)")
    mistakes = {
        _("this is the raw score q . k: the scaling step is missing"): _worked_score(
            x_it, TIRED_X, scaled=False
        ),
        _(
            "this scores the embeddings x_it and x_tired themselves, not the query of 'it' "
            "and the key of 'tired'"
        ): float(x_it @ TIRED_X) / math.sqrt(2),
        _("query and key swapped: this is the query of 'tired' against the key of 'it'"): (
            _worked_score(TIRED_X, x_it)
        ),
        _(
            "this divides the raw score by d_k = 2, which is not the formula's scale"
        ): _worked_score(x_it, TIRED_X, scaled=False) / 2,
    }
    expected = _worked_score(x_it, TIRED_X)
    # A number, or what holds one (a 0-d tensor, as chapter 3's checker reads it).
    expect_predicted_close(answer, expected, mistakes, case=case, atol=0.01)


def soft_lookup(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """``softmax(keys @ query / temperature) @ values``.

    Shapes: query ``(d,)``, keys ``(m, d)``, values ``(m, d_v)`` -> ``(d_v,)``.
    """
    temperature = require_number(temperature, "temperature", positive=True)
    return torch.softmax(keys @ query / temperature, dim=-1) @ values


def buggy_cross_attention(
    x: torch.Tensor, context: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor
) -> torch.Tensor:
    """The function of "find the bug: cross-attention", with one planted bug.

    Same shapes as :func:`cross_attention`; ``d`` is the token width, ``d_k`` the key width.
    """
    q, k, v = x @ w_q, context @ w_k, context @ w_v
    return torch.softmax(q @ k.T / math.sqrt(x.shape[-1]), dim=-1) @ v


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


def _soft_times(query, keys, values, temperature):
    return torch.softmax(keys @ query * temperature, dim=-1) @ values


def _soft_naive(query, keys, values, temperature):
    e = torch.exp(keys @ query / temperature)
    return (e / e.sum()) @ values


def _soft_mistakes() -> dict:
    # a function, not a constant: the diagnoses speak the language of the moment they are used
    return {
        _("the scores are multiplied by the temperature"): _soft_times,
        _("exp(s) / exp(s).sum() overflows to inf / inf = nan for large scores"): _soft_naive,
    }


@checker("soft", "soft lookup with a temperature")
def check_soft_lookup(answer):
    generator = torch.Generator().manual_seed(1)
    keys, values = _library(generator)
    for temperature in (1.0, 0.25, 4.0, 1e-3):
        query = torch.randn(4, generator=generator)
        got = call_answer(answer, query.clone(), keys.clone(), values.clone(), temperature)
        case = f"temperature={temperature}"
        expect_shape(got, (3,), case=case)
        expect_close(
            got,
            soft_lookup(query, keys, values, temperature),
            case=case,
            mistakes={d: f(query, keys, values, temperature) for d, f in _soft_mistakes().items()},
        )
    big = torch.full((4,), 300.0)  # scores near 1e5 at temperature 0.01: a naive exp overflows
    expect_close(
        call_answer(answer, big, keys.clone(), values.clone(), 0.01),
        soft_lookup(big, keys, values, 0.01),
        case=_("large scores (about 1e5 at temperature 0.01)"),
        mistakes={d: f(big, keys, values, 0.01) for d, f in _soft_mistakes().items()},
    )


@checker("cross", "cross-attention")
def check_cross_attention(answer):
    generator = torch.Generator().manual_seed(2)
    for n, m, d, d_k, d_v in ((3, 5, 6, 2, 3), (1, 1, 4, 4, 2), (4, 2, 6, 8, 5)):
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
        q, k, v = x @ w_q, context @ w_k, context @ w_v
        mistakes = {
            _(
                "still scaled by sqrt(d), with d the token width (the planted bug is still "
                "there; it shows where d != d_k)"
            ): buggy_cross_attention(x, context, w_q, w_k, w_v),
            _("the scale is gone: these scores are not scaled at all"): torch.softmax(
                q @ k.T, dim=-1
            )
            @ v,
            _("divided by d_k itself, which is not the formula's scale"): torch.softmax(
                q @ k.T / k.shape[-1], dim=-1
            )
            @ v,
        }
        expect_close(got, cross_attention(x, context, w_q, w_k, w_v), case=case, mistakes=mistakes)


@checker("share", "share of attention on the antecedent")
def check_antecedent_share(answer):
    generator = torch.Generator().manual_seed(3)
    weights = torch.softmax(3 * torch.randn(5, 7, 7, generator=generator), dim=-1)
    it_position = torch.tensor([4, 4, 5, 3, 6])
    antecedent_position = torch.tensor([1, 2, 0, 1, 5])
    got = call_answer(answer, weights.clone(), it_position.clone(), antecedent_position.clone())
    expected = antecedent_share(weights, it_position, antecedent_position)
    b = torch.arange(5)
    mistakes = {
        _("rows and columns swapped: this is the weight from the noun to 'it'"): weights[
            b, antecedent_position, it_position
        ].mean(),
        _("this averages the weight on the noun over every query, not only from 'it'"): weights[
            b, :, antecedent_position
        ].mean(),
        _(
            "the indexing mixes sentences: each sentence's weights are read at the positions "
            "of every sentence (a 5 x 5 table, not one weight per sentence)"
        ): weights[:, it_position, antecedent_position].mean(),
        _(
            "the indexing mixes sentences: the rows of 'it' are taken per sentence, then the "
            "noun's column of every sentence is read from each (5 x 5 per sentence)"
        ): weights[b, it_position][:, antecedent_position].mean(),
    }
    expect_close(
        torch.as_tensor(got, dtype=torch.float64).reshape(()),
        torch.tensor(expected),
        case=_("5 sentences of 7 tokens"),
        atol=1e-6,
        mistakes={d: torch.as_tensor(float(v), dtype=torch.float64) for d, v in mistakes.items()},
    )
