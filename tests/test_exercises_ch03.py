"""Chapter 3's checkers: each accepts the reference solution, rejects plausible wrong answers,
names the likely mistakes by their diagnosis, and reports "not attempted" for the untouched
stub. The solutions are those of the chapter."""

import math

import numpy as np
import pytest
import selfattn
import torch
from selfattn.exercises.ch03 import (
    PREDICTION_D_K,
    PREDICTION_SIGMA,
    buggy_attention_layer,
    check_five_steps,
    check_scale_bug,
    check_scaled_variance_prediction,
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


@pytest.mark.parametrize(
    "name, diagnosis",
    [("no scale", "not divided by sqrt(d_k)"), ("softmax over queries (axis 0)", "axis 0")],
)
def test_five_steps_names_the_mistake(name, diagnosis):
    assert diagnosis in check_five_steps(FIVE_STEPS_WRONG[name]).message


# ---- 3.2 stable softmax -------------------------------------------------------------------------
def softmax_solution(x):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


SOFTMAX_WRONG = {
    "naive exp / sum (overflows)": lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True),
    "global max instead of row max": lambda x: (
        torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(-1, keepdim=True)
    ),
    "softmax over the first dimension": lambda x: softmax_solution(x.transpose(0, -1)).transpose(
        0, -1
    ),
    "torch.softmax over dim 0": lambda x: torch.softmax(x, dim=0),
    "returns numpy": lambda x: softmax_solution(x).numpy(),
}


def test_softmax_accepts_solution_and_library():
    assert check_stable_softmax(softmax_solution).passed
    assert check_stable_softmax(selfattn.softmax).passed
    assert check_stable_softmax(lambda x: torch.softmax(x, dim=-1)).passed


@pytest.mark.parametrize("name", SOFTMAX_WRONG)
def test_softmax_rejects(name):
    result = check_stable_softmax(SOFTMAX_WRONG[name])
    assert result.status == "failed", result.message


def test_softmax_message_names_the_case():
    msg = check_stable_softmax(SOFTMAX_WRONG["naive exp / sum (overflows)"]).message
    assert "large scores" in msg and "NaN" in msg


@pytest.mark.parametrize(
    "name, diagnosis",
    [
        ("global max instead of row max", "one maximum for the whole tensor"),
        ("torch.softmax over dim 0", "runs over the first dimension"),
    ],
)
def test_softmax_names_the_mistake(name, diagnosis):
    msg = check_stable_softmax(SOFTMAX_WRONG[name]).message
    assert diagnosis in msg, msg


# ---- 3.3 find the bug: the scale ----------------------------------------------------------------
def fixed_layer(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v


def layer_with_scale(scale_of):
    def layer(x, w_q, w_k, w_v):
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        scores = q @ k.transpose(-2, -1) * scale_of(q.shape[-1])
        return torch.softmax(scores, dim=-1) @ v

    return layer


SCALE_BUG_WRONG = {
    "the bug left in": (buggy_attention_layer, "still multiplied by sqrt(d_k)"),
    "sqrt(d_model)": (None, "divided by sqrt(d_model), the width of x"),
    "divided by d_k": (layer_with_scale(lambda d_k: 1 / d_k), "divided by d_k instead"),
    "no scale": (layer_with_scale(lambda d_k: 1.0), "not divided at all"),
}


def test_scale_bug_accepts_the_fix():
    assert check_scale_bug(fixed_layer).passed
    assert check_scale_bug(
        lambda x, w_q, w_k, w_v: selfattn.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)
    ).passed


def layer_d_model(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1])
    return torch.softmax(scores, dim=-1) @ v


SCALE_BUG_WRONG["sqrt(d_model)"] = (layer_d_model, SCALE_BUG_WRONG["sqrt(d_model)"][1])


def test_buggy_layer_is_right_only_when_d_k_is_1():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 16, generator=g, dtype=torch.float64)
    one = [torch.randn(16, 1, generator=g, dtype=torch.float64) for _ in range(3)]
    assert torch.allclose(buggy_attention_layer(x, *one), fixed_layer(x, *one))
    wide = [torch.randn(16, 4, generator=g, dtype=torch.float64) for _ in range(3)]
    assert not torch.allclose(buggy_attention_layer(x, *wide), fixed_layer(x, *wide))


def test_scale_bug_is_caught_only_after_the_invisible_case():
    result = check_scale_bug(buggy_attention_layer)
    assert "d_k=1" not in result.message and "d_k=8" in result.message, result.message


@pytest.mark.parametrize("name", SCALE_BUG_WRONG)
def test_scale_bug_names_the_mistake(name):
    wrong, diagnosis = SCALE_BUG_WRONG[name]
    result = check_scale_bug(wrong)
    assert result.status == "failed" and diagnosis in result.message, result.message


def test_scale_bug_rejects_softmax_over_queries():
    def over_queries(x, w_q, w_k, w_v):
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return torch.softmax(scores, dim=-2) @ v

    assert check_scale_bug(over_queries).status == "failed"


# ---- 3.4 predict, then run: the variance of the scaled scores ---------------------------------
def test_prediction_accepts_sigma_to_the_fourth():
    assert check_scaled_variance_prediction(PREDICTION_SIGMA**4).passed
    assert check_scaled_variance_prediction(np.float64(PREDICTION_SIGMA**4)).passed
    assert check_scaled_variance_prediction(torch.tensor(PREDICTION_SIGMA**4)).passed
    assert check_scaled_variance_prediction(lambda: PREDICTION_SIGMA**4).passed


@pytest.mark.parametrize(
    "wrong, diagnosis",
    [
        (PREDICTION_SIGMA**2, "variance of one component"),
        (PREDICTION_SIGMA**4 * PREDICTION_D_K, "before the division"),
        (1.0, "components of variance 1"),
        (PREDICTION_SIGMA**4 * math.sqrt(PREDICTION_D_K), "its variance by c²"),
    ],
)
def test_prediction_names_the_mistake(wrong, diagnosis):
    result = check_scaled_variance_prediction(wrong)
    assert result.status == "failed" and diagnosis in result.message, result.message


def test_prediction_rejects_other_numbers_and_non_numbers():
    assert check_scaled_variance_prediction(0.3).status == "failed"
    assert check_scaled_variance_prediction("0.0625").status == "failed"
    assert check_scaled_variance_prediction(True).status == "failed"


def test_prediction_is_the_theorem():
    # The checker's answer is the theorem's; check it against a simulation once.
    g = torch.Generator().manual_seed(0)
    d_k, sigma, n = PREDICTION_D_K, PREDICTION_SIGMA, 200_000
    q, k = sigma * torch.randn(n, d_k, generator=g), sigma * torch.randn(n, d_k, generator=g)
    measured = ((q * k).sum(-1) / math.sqrt(d_k)).var().item()
    assert abs(measured / sigma**4 - 1) < 0.02


# ---- 3.5 temperature ----------------------------------------------------------------------------
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


@pytest.mark.parametrize(
    "name, diagnosis",
    [
        ("multiplies by T", "multiplies the scores"),
        ("forgets sqrt(d_k)", "the 1/sqrt(d_k) is gone"),
    ],
)
def test_temperature_names_the_mistake(name, diagnosis):
    msg = check_temperature(TEMPERATURE_WRONG[name]).message
    assert diagnosis in msg, msg


# ---- every checker: stubs are "not attempted", crashes are reported -----------------------------
ALL = [check_five_steps, check_stable_softmax, check_scale_bug, check_temperature]


@pytest.mark.parametrize(
    "check", [*ALL, check_scaled_variance_prediction], ids=lambda c: c.__name__
)
def test_stub_is_not_attempted(check, capsys):
    assert check(stub).status == "not attempted"
    assert check(lambda *a: None).status == "not attempted"
    assert check(None).status == "not attempted"
    assert capsys.readouterr().out.count("not attempted yet") == 3


@pytest.mark.parametrize(
    "check", [*ALL, check_scaled_variance_prediction], ids=lambda c: c.__name__
)
def test_a_crash_is_reported_not_raised(check):
    def crashes(*args):
        raise RuntimeError("boom")

    result = check(crashes)
    assert result.status == "failed" and "RuntimeError: boom" in result.message


def test_messages_name_the_mistake_not_the_fix():
    """Issue 45: 3.2's message handed over the code (x.amax(dim=-1, keepdim=True))."""
    msg = check_stable_softmax(SOFTMAX_WRONG["global max instead of row max"]).message
    assert "amax" not in msg and "dim=-1" not in msg, msg
    msg = check_five_steps(FIVE_STEPS_WRONG["softmax over queries (axis 0)"]).message
    assert "use axis=1" not in msg, msg
    msg = check_scale_bug(buggy_attention_layer).message
    assert "d_k ** -0.5" not in msg, msg
