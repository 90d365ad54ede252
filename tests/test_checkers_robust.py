"""Checkers cannot be fooled by mutation or truncation, cannot hang, and blame the right party."""

import threading
import time

import numpy as np
import pytest
import torch
from selfattn.costs import kv_cache_bytes, mha_param_count
from selfattn.efficient.linear import LinearAttentionState, linear_attention_step
from selfattn.efficient.sparse import strided_mask
from selfattn.exercises import (
    Mismatch,
    call_answer,
    ch01,
    ch03,
    ch04,
    ch07,
    ch08,
    ch09,
    checker,
    expect_close,
    expect_int,
    set_time_limit,
)
from selfattn.exercises.ch01 import check_reach_to_first
from selfattn.exercises.ch02 import check_soft_lookup, soft_lookup
from selfattn.exercises.ch05 import check_cache_bytes, check_param_count
from selfattn.exercises.ch08 import check_linear_step
from selfattn.exercises.ch09 import check_block_forward
from selfattn.gradient_reach import gradient_reach


@pytest.fixture
def short_limit():
    previous = set_time_limit(0.3)
    yield
    set_time_limit(previous)


# -- integers compared exactly ----------------------------------------------------------


def _cache_bytes(L, h, dh, n, nbytes, B):
    return 2 * L * h * dh * n * nbytes * B


def test_cache_bytes_refuses_the_right_answer_plus_a_fraction():
    assert check_cache_bytes(_cache_bytes).passed
    assert check_cache_bytes(lambda *a: float(_cache_bytes(*a))).passed  # exact float: fine
    assert check_cache_bytes(lambda *a: np.int64(_cache_bytes(*a))).passed
    assert check_cache_bytes(lambda *a: torch.tensor(_cache_bytes(*a))).passed
    result = check_cache_bytes(lambda *a: _cache_bytes(*a) + 0.9)
    assert not result.passed and "expected 8, got 8.9" in result.message
    assert not check_cache_bytes(lambda *a: _cache_bytes(*a) - 0.5)
    assert not check_cache_bytes(lambda *a: True)
    assert not check_cache_bytes(lambda *a: "16")
    # the reference agrees with the library's own formula
    assert _cache_bytes(2, 4, 16, 7, 4, 3) == kv_cache_bytes(2, 4, 16, 7, batch=3)


def test_param_count_refuses_the_right_answer_plus_a_fraction():
    def right(d, h, bias):
        return 4 * d * d + (4 * d if bias else 0)

    assert check_param_count(right).passed
    assert right(8, 2, True) == mha_param_count(8)
    assert not check_param_count(lambda d, h, bias: right(d, h, bias) + 0.9)
    assert not check_param_count(lambda d, h, bias: float("nan"))


def test_expect_int_messages():
    expect_int(5, 5, case="a")
    expect_int(5.0, 5, case="a")
    for bad in (5.5, 6, float("inf"), None, [5], torch.ones(2)):
        with pytest.raises(Mismatch, match="case a"):
            expect_int(bad, 5, case="a")


# -- mutation cannot fool a checker -------------------------------------------------------


def test_gradient_reach_cannot_be_fooled_by_zeroing_the_encoder():
    assert check_reach_to_first(lambda encoder, x: gradient_reach(encoder, x)[0]).passed

    def zero_then_answer(encoder, x):
        # the encoders are closures over their modules: reach them and zero the weights
        for cell in encoder.__closure__ or ():
            value = cell.cell_contents
            if isinstance(value, torch.nn.Module):
                with torch.no_grad():
                    for p in value.parameters():
                        p.zero_()
        return gradient_reach(encoder, x)[0]  # the right reach for the zeroed model

    assert not check_reach_to_first(zero_then_answer).passed


def test_block_forward_cannot_be_fooled_by_zeroing_the_block():
    assert check_block_forward(lambda block, x: block(x)).passed

    def zero_then_identity(block, x):
        with torch.no_grad():
            for p in block.parameters():
                p.zero_()
        return block(x)  # a zeroed pre-LN block is the identity

    assert not check_block_forward(zero_then_identity).passed


def test_linear_step_cannot_be_fooled_by_zeroing_the_token():
    def right(s, z, q, k, v):
        out, state = linear_attention_step(LinearAttentionState(s, z), q, k, v)
        return out, state.s, state.z

    assert check_linear_step(right).passed

    def zero_then_answer(s, z, q, k, v):
        for t in (q, k, v):
            t.zero_()
        return right(s, z, q, k, v)

    assert not check_linear_step(zero_then_answer).passed


def test_soft_lookup_cannot_be_fooled_by_changing_the_query():
    assert check_soft_lookup(soft_lookup).passed

    def shrink_large_queries(query, keys, values, temperature):
        if query.abs().max() > 100:  # the large-score case: make it easy
            query.zero_()
        return soft_lookup(query, keys, values, temperature)

    assert not check_soft_lookup(shrink_large_queries).passed


def test_call_answer_hands_over_copies():
    model = torch.nn.Linear(2, 2)
    before = model.weight.detach().clone()
    x = torch.ones(3)

    def vandal(m, t):
        with torch.no_grad():
            m.weight.zero_()
        t.zero_()
        return 1

    assert call_answer(vandal, model, x) == 1
    assert torch.equal(model.weight, before) and torch.equal(x, torch.ones(3))
    # a tensor inside an autograd graph cannot be deep-copied: it is cloned instead
    leaf = torch.ones(2, requires_grad=True)
    y = leaf * 2
    assert call_answer(lambda t: t.sum(), y).item() == 4.0
    assert torch.equal(y, torch.full((2,), 2.0))


# -- no checker hangs ----------------------------------------------------------------------


@checker("0.9", "identity")
def check_identity(answer):
    x = torch.arange(3.0)
    expect_close(call_answer(answer, x), x, case="x")


def _forever(x):
    while True:
        pass


def _forever_swallowing(x):
    while True:
        try:
            while True:
                pass
        except Exception:  # a careless reader's catch-all must not swallow the time limit
            continue


@pytest.mark.parametrize("answer", [_forever, _forever_swallowing])
def test_a_function_that_never_returns_is_reported_in_the_main_thread(short_limit, answer):
    start = time.perf_counter()
    result = check_identity(answer)
    assert time.perf_counter() - start < 5
    assert result.status == "failed" and "took too long" in result.message


_stop = threading.Event()


def _spin_until_stopped(x):
    # A thread cannot be killed: the test stops this one itself, so that no busy loop
    # outlives it and slows the rest of the suite.
    while not _stop.is_set():
        pass


def test_a_function_that_never_returns_is_reported_from_another_thread(short_limit):
    results = []
    _stop.clear()
    worker = threading.Thread(target=lambda: results.append(check_identity(_spin_until_stopped)))
    start = time.perf_counter()
    try:
        worker.start()
        worker.join(10)
    finally:
        _stop.set()
    assert not worker.is_alive() and time.perf_counter() - start < 5
    assert results[0].status == "failed" and "took too long" in results[0].message
    # the fallback still passes a correct answer and reports a crash as the reader's
    worker = threading.Thread(target=lambda: results.append(check_identity(lambda x: x)))
    worker.start()
    worker.join(10)
    assert results[1].passed


def test_the_timer_is_cleaned_up(short_limit):
    assert check_identity(lambda x: x).passed
    time.sleep(0.5)  # an alarm left behind would fire here and kill the test process
    import signal

    if hasattr(signal, "getitimer"):
        assert signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_set_time_limit_validates():
    with pytest.raises(ValueError, match="seconds"):
        set_time_limit(0)
    with pytest.raises(TypeError, match="seconds"):
        set_time_limit("5")


# -- the checker's own crash is the checker's fault ----------------------------------------


def test_checker_crash_is_not_blamed_on_the_reader():
    @checker("0.8", "broken before asking")
    def check_broken(answer):
        raise KeyError("oops")

    result = check_broken(lambda x: x)
    assert not result.passed
    assert "checker itself failed" in result.message and "your code" not in result.message

    @checker("0.7", "broken after asking")
    def check_reads(answer):
        got = call_answer(answer, 2)
        float(got)  # crashes on an unexpected type: the checker's failure, named as such

    result = check_reads(lambda x: object())
    assert "checker failed while reading your function's result" in result.message

    def crash(x):
        raise ZeroDivisionError("mine")

    result = check_identity(crash)
    assert "your code raised ZeroDivisionError: mine" in result.message


def test_a_non_function_answer_is_a_clear_failure():
    result = check_identity(42)
    assert result.status == "failed" and "expected a function, got int" in result.message


# -- every "predict, then run" checker reads the reader's number the same way ---------------

PREDICTIONS = [
    (ch01.check_predicted_layers, 26),
    (ch03.check_scaled_variance_prediction, ch03.PREDICTION_SIGMA**4),
    (ch04.check_allowed_pairs_prediction, 49),
    (ch07.check_causal_tiles_prediction, 72),
    (ch08.check_strided_prediction, int(strided_mask(*ch08.STRIDED_CASE).sum())),
    (ch09.check_vit_tokens, 37),
]


@pytest.mark.parametrize("check, right", PREDICTIONS, ids=lambda c: getattr(c, "__name__", ""))
def test_a_prediction_is_read_the_same_way_everywhere(check, right):
    assert check(right).passed
    for same in (np.float64(right), np.array([right]), torch.tensor(right), lambda: right):
        assert check(same).passed, same
    for stub in (None, ...):
        assert check(stub).status == "not attempted"
    for not_a_number in (str(right), True):
        result = check(not_a_number)
        assert result.status == "failed"
        assert "your prediction: write a number, got" in result.message
