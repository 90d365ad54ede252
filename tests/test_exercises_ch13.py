"""Chapter 13's checkers pass the right answers, name the likely mistakes, and see stubs."""

import math

import torch
from selfattn.efficient.delta_rule import gated_delta_rule
from selfattn.exercises.ch13 import (
    OVERWRITE_CASE,
    check_chunked,
    check_delta_step,
    check_gated_step,
    check_overwrite_prediction,
    check_ssd_mask,
    chunked_buggy,
    delta_step_mistakes,
    gated_step_mistakes,
    ssd_mask_mistakes,
)


def stub(*args):
    raise NotImplementedError


def status(result):
    return result.status, result.message


def test_delta_step():
    add, no_beta, transposed = delta_step_mistakes()
    assert check_delta_step(lambda s, k, v, b: s + b * torch.outer(k, v - s.T @ k)).passed
    r = check_delta_step(lambda s, k, v, b: s + b * torch.outer(k, v))
    assert not r.passed and add in r.message
    r = check_delta_step(lambda s, k, v, b: s + torch.outer(k, v - s.T @ k))
    assert not r.passed and no_beta in r.message
    r = check_delta_step(lambda s, k, v, b: s + b * torch.outer(k, v - s @ k))
    assert not r.passed and transposed in r.message
    assert check_delta_step(stub).status == "not attempted"


def test_gated_step():
    before, after, none = gated_step_mistakes()

    def right(s, k, v, b, a):
        s = a * s
        return s + b * torch.outer(k, v - s.T @ k)

    assert check_gated_step(right).passed
    r = check_gated_step(lambda s, k, v, b, a: a * s + b * torch.outer(k, v - s.T @ k))
    assert not r.passed and before in r.message
    r = check_gated_step(lambda s, k, v, b, a: a * (s + b * torch.outer(k, v - s.T @ k)))
    assert not r.passed and after in r.message
    r = check_gated_step(lambda s, k, v, b, a: s + b * torch.outer(k, v - s.T @ k))
    assert not r.passed and none in r.message
    assert check_gated_step(stub).status == "not attempted"


def fixed(q, k, v, g, beta, chunk_size):
    n, dk = k.shape
    s = q.new_zeros(dk, v.shape[-1])
    outs = []
    for a in range(0, n, chunk_size):
        e = min(a + chunk_size, n)
        qc, kc, vc, gc, bc = q[a:e], k[a:e], v[a:e], g[a:e], beta[a:e]
        c = e - a
        cum = gc.cumsum(0)
        decay = (
            (cum[:, None] - cum[None, :])
            .masked_fill(~torch.ones(c, c, dtype=torch.bool).tril(), -math.inf)
            .exp()
        )
        gamma = cum.exp()
        a_mat = ((kc @ kc.T) * decay * bc[:, None]).tril(-1)
        t = torch.linalg.inv(torch.eye(c, dtype=q.dtype) + a_mat)
        u = t @ (bc[:, None] * vc) - t @ ((bc * gamma)[:, None] * kc) @ s
        outs.append((qc * gamma[:, None]) @ s + ((qc @ kc.T) * decay) @ u)
        s = s * gc.sum().exp() + (kc * (cum[-1] - cum).exp()[:, None]).T @ u
    return torch.cat(outs)


def test_chunked():
    assert check_chunked(fixed).passed
    lib = lambda q, k, v, g, b, c: gated_delta_rule(  # noqa: E731
        *(t[None, None] for t in (q, k, v, g, b)), scale=1.0, chunk_size=c
    )[0, 0]
    assert check_chunked(lib).passed
    r = check_chunked(chunked_buggy)
    assert not r.passed and "treated as 1" in r.message
    assert "cumsum" not in r.message
    r = check_chunked(lambda q, k, v, g, b, c: fixed(q, k, v, g * 0, b, c))
    assert not r.passed and "largest difference" in r.message
    r = check_chunked(lambda q, k, v, g, b, c: fixed(q, k, v, g, b, c)[:, :2])
    assert not r.passed and "shape" in r.message
    assert check_chunked(stub).status == "not attempted"


def test_ssd_mask():
    with_a_s, upper, from_start = ssd_mask_mistakes()

    def right(log_a):
        cum = log_a.cumsum(0)
        n = len(log_a)
        return torch.where(
            torch.ones(n, n, dtype=torch.bool).tril(), (cum[:, None] - cum[None, :]).exp(), 0.0
        )

    assert check_ssd_mask(right).passed
    r = check_ssd_mask(lambda la: (la.cumsum(0)[:, None] - la.cumsum(0)[None, :]).exp())
    assert not r.passed and upper in r.message

    def incl(log_a):
        cum = log_a.cumsum(0)
        n = len(log_a)
        lower = torch.ones(n, n, dtype=torch.bool).tril()
        return torch.where(lower, (cum[:, None] - cum[None, :] + log_a[None, :]).exp(), 0.0)

    r = check_ssd_mask(incl)
    assert not r.passed and with_a_s in r.message
    r = check_ssd_mask(
        lambda la: torch.where(
            torch.ones(len(la), len(la), dtype=torch.bool).tril(),
            la.cumsum(0)[:, None].exp().expand(len(la), len(la)),
            0.0,
        )
    )
    assert not r.passed and from_start in r.message
    assert check_ssd_mask(stub).status == "not attempted"


def test_overwrite_prediction():
    d, writes = OVERWRITE_CASE
    assert check_overwrite_prediction(d).passed
    r = check_overwrite_prediction(2 * d - writes)
    assert not r.passed and "linear attention" in r.message
    r = check_overwrite_prediction(writes)
    assert not r.passed and "one key" in r.message
    r = check_overwrite_prediction(d - 1)
    assert not r.passed and str(d) not in r.message.split(":")[-1]
    assert check_overwrite_prediction(None).status == "not attempted"
