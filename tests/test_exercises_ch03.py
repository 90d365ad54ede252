"""Chapter 3's checkers: each accepts the reference solution, rejects plausible wrong answers,
and reports "not attempted" for the untouched stub. The solutions are those of the chapter."""

import math

import numpy as np
import pytest
import selfattn
import torch
from selfattn.exercises.ch03 import (
    check_dot_variance,
    check_five_steps,
    check_softmax_jacobian,
    check_stable_softmax,
    check_temperature,
)


def stub(*args):
    raise NotImplementedError


# ---- 3.1 the five steps -------------------------------------------------------------------------
def attention_np(X, W_q, W_k, W_v, *, scale=True, axis=1, scale_by=None):
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    s = Q @ K.T
    if scale:
        s = s / (scale_by(Q.shape[1]) if scale_by else np.sqrt(Q.shape[1]))
    s = s - s.max(axis=axis, keepdims=True)
    w = np.exp(s) / np.exp(s).sum(axis=axis, keepdims=True)
    return w @ V


FIVE_STEPS_WRONG = {
    "no scale": lambda *a: attention_np(*a, scale=False),
    "divided by d_k": lambda *a: attention_np(*a, scale_by=lambda d: d),
    "softmax over queries (axis 0)": lambda *a: attention_np(*a, axis=0),
    "returns the weights": lambda X, W_q, W_k, W_v: (
        selfattn.reference.attention_steps(X, W_q, W_k, W_v).weights
    ),
}


def test_five_steps_accepts_solution():
    assert check_five_steps(attention_np).passed
    assert check_five_steps(lambda *a: selfattn.reference.attention_steps(*a).output).passed


@pytest.mark.parametrize("name", FIVE_STEPS_WRONG)
def test_five_steps_rejects(name):
    assert check_five_steps(FIVE_STEPS_WRONG[name]).status == "failed"


# ---- 3.2 stable softmax -------------------------------------------------------------------------
def softmax_solution(x):
    row_max = x.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    e = torch.exp(x - row_max)
    total = e.sum(dim=-1, keepdim=True)
    return e / torch.where(total == 0, torch.ones_like(total), total)


SOFTMAX_WRONG = {
    "naive exp / sum (overflows)": lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True),
    "global max instead of row max": lambda x: (
        torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(-1, keepdim=True)
    ),
    "row max but nan on fully masked rows": lambda x: torch.softmax(x, dim=-1),
    "softmax over the first dimension": lambda x: softmax_solution(x.transpose(0, -1)).transpose(
        0, -1
    ),
    "returns numpy": lambda x: softmax_solution(x).numpy(),
}


def test_softmax_accepts_solution_and_library():
    assert check_stable_softmax(softmax_solution).passed
    assert check_stable_softmax(selfattn.softmax).passed


@pytest.mark.parametrize("name", SOFTMAX_WRONG)
def test_softmax_rejects(name):
    result = check_stable_softmax(SOFTMAX_WRONG[name])
    assert result.status == "failed", result.message


def test_softmax_message_names_the_case():
    msg = check_stable_softmax(SOFTMAX_WRONG["naive exp / sum (overflows)"]).message
    assert "large scores" in msg and "NaN" in msg


# ---- 3.3 variance with sigma --------------------------------------------------------------------
VARIANCE_WRONG = {
    "sigma^2 d_k": lambda d_k, sigma: sigma**2 * d_k,
    "d_k only": lambda d_k, sigma: d_k,
    "sigma^4 sqrt(d_k)": lambda d_k, sigma: sigma**4 * math.sqrt(d_k),
    "not a number": lambda d_k, sigma: "d_k * sigma**4",
}


def test_variance_accepts_solution():
    assert check_dot_variance(lambda d_k, sigma: d_k * sigma**4).passed
    # numpy / torch scalars are numbers too
    assert check_dot_variance(lambda d_k, sigma: np.float64(d_k) * sigma**4).passed
    assert check_dot_variance(
        lambda d_k, sigma: torch.tensor(float(d_k) * sigma**4, dtype=torch.float64)
    ).passed


@pytest.mark.parametrize("name", VARIANCE_WRONG)
def test_variance_rejects(name):
    assert check_dot_variance(VARIANCE_WRONG[name]).status == "failed"


def test_variance_formula_matches_monte_carlo():
    # The checker's formula is the theorem's; check it against a simulation once.
    g = torch.Generator().manual_seed(0)
    d_k, sigma, n = 16, 2.0, 200_000
    q, k = sigma * torch.randn(n, d_k, generator=g), sigma * torch.randn(n, d_k, generator=g)
    assert abs((q * k).sum(-1).var().item() / (sigma**4 * d_k) - 1) < 0.02


# ---- 3.4 temperature ----------------------------------------------------------------------------
def temperature_solution(q, k, v, temperature):
    return selfattn.scaled_dot_product_attention(
        q, k, v, scale=1.0 / (temperature * math.sqrt(q.shape[-1]))
    )


TEMPERATURE_WRONG = {
    "multiplies by T": lambda q, k, v, t: selfattn.scaled_dot_product_attention(
        q, k, v, scale=t / math.sqrt(q.shape[-1])
    ),
    "forgets sqrt(d_k)": lambda q, k, v, t: selfattn.scaled_dot_product_attention(
        q, k, v, scale=1.0 / t
    ),
    "ignores T": lambda q, k, v, t: selfattn.scaled_dot_product_attention(q, k, v),
}


def test_temperature_accepts_solution():
    assert check_temperature(temperature_solution).passed
    # written out by hand, with torch's own softmax
    assert check_temperature(
        lambda q, k, v, t: (
            torch.softmax(q @ k.transpose(-2, -1) / (t * math.sqrt(q.shape[-1])), -1) @ v
        )
    ).passed


@pytest.mark.parametrize("name", TEMPERATURE_WRONG)
def test_temperature_rejects(name):
    assert check_temperature(TEMPERATURE_WRONG[name]).status == "failed"


# ---- 3.5 softmax Jacobian -----------------------------------------------------------------------
JACOBIAN_WRONG = {
    "diag(p) only": lambda p: torch.diag(p),
    "sign flipped": lambda p: torch.outer(p, p) - torch.diag(p),
    "diagonal p(1-p) only": lambda p: torch.diag(p * (1 - p)),
}


def test_jacobian_accepts_solution():
    assert check_softmax_jacobian(lambda p: torch.diag(p) - torch.outer(p, p)).passed


def test_jacobian_formula_is_autograds():
    s = torch.tensor([0.3, -1.0, 2.0, 0.0], dtype=torch.float64)
    p = torch.softmax(s, 0)
    auto = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, 0), s)
    assert torch.allclose(torch.diag(p) - torch.outer(p, p), auto, atol=1e-12)


@pytest.mark.parametrize("name", JACOBIAN_WRONG)
def test_jacobian_rejects(name):
    assert check_softmax_jacobian(JACOBIAN_WRONG[name]).status == "failed"


# ---- every checker: stubs are "not attempted", crashes are reported -----------------------------
ALL = [
    check_five_steps,
    check_stable_softmax,
    check_dot_variance,
    check_temperature,
    check_softmax_jacobian,
]


@pytest.mark.parametrize("check", ALL, ids=lambda c: c.__name__)
def test_stub_is_not_attempted(check, capsys):
    assert check(stub).status == "not attempted"
    assert check(lambda *a: None).status == "not attempted"
    assert check(None).status == "not attempted"
    assert capsys.readouterr().out.count("not attempted yet") == 3


@pytest.mark.parametrize("check", ALL, ids=lambda c: c.__name__)
def test_a_crash_is_reported_not_raised(check):
    def crashes(*args):
        raise RuntimeError("boom")

    result = check(crashes)
    assert result.status == "failed" and "RuntimeError: boom" in result.message
