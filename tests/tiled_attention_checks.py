"""Inputs, oracles and checks shared by the tests of the tiled kernels (flash, sliding window).

Not a test module (pytest does not collect it): ``tests/`` is on ``sys.path`` because it holds
``conftest.py``, so the tests import it by name.
"""

import pytest
import torch

from tools.references import torch_attention  # noqa: F401  (the oracle, shared with gpu_check)

ALIGN = ["top_left", "bottom_right"]


def qkv(n, m, d=8, dv=5, batch=(2,), dtype=torch.float32, seed=0, requires_grad=False):
    """q ``(*batch, n, d)``, k ``(*batch, m, d)``, v ``(*batch, m, dv)``, drawn in float64."""
    g = torch.Generator().manual_seed(seed)
    out = [
        torch.randn(*batch, length, width, generator=g, dtype=torch.float64).to(dtype)
        for length, width in ((n, d), (m, d), (m, dv))
    ]
    return [t.requires_grad_(requires_grad) for t in out]


def assert_gradients_match(ours, oracle, q, k, v, seed, *, tol=1e-5):
    """``ours(q, k, v)`` and ``oracle(q, k, v)`` give the same gradients for a random ``dO``."""
    out = ours(q, k, v)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    got = torch.autograd.grad(out, (q, k, v), g)
    want = torch.autograd.grad(oracle(q, k, v), (q, k, v), g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)


def assert_half_gradients_match(ours, oracle, q, k, v, *, tol):
    """Half-precision gradients: the input dtype, within ``tol`` of the float64 oracle's."""
    out = ours(q, k, v)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(0)).to(out.dtype)
    got = torch.autograd.grad(out, (q, k, v), g)
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(oracle(*ref), ref, g.double())
    for a, b, t in zip(got, want, (q, k, v)):
        assert a.dtype == t.dtype and a.shape == t.shape
        torch.testing.assert_close(a.double(), b, atol=tol, rtol=tol)


def assert_forward_skips_autograd_without_grad(monkeypatch, function_class, attention):
    """The forward alone (no input needs grad, or no_grad) never enters ``function_class``."""
    calls = []
    real_apply = function_class.apply
    monkeypatch.setattr(function_class, "apply", lambda *a: calls.append(a) or real_apply(*a))
    q, k, v = qkv(10, 10)
    attention(q, k, v)
    with torch.no_grad():
        attention(*(t.requires_grad_() for t in (q, k, v)))
    assert calls == []
    with_grad = attention(q, k, v)
    assert len(calls) == 1
    torch.testing.assert_close(with_grad, attention(*(t.detach() for t in (q, k, v))))
    with_grad.sum().backward()
    assert all(t.grad is not None for t in (q, k, v))


def assert_rejects_bad_shared_arguments(attention):
    """``attention(q, k, v, **kw)`` names the device, the alignment and the scale it rejects."""
    q = torch.randn(5, 4)
    with pytest.raises(ValueError, match="device"):
        attention(q, q, q.to("meta"))
    with pytest.raises(ValueError, match="alignment"):
        attention(q, q, q, alignment="lower_right")
    with pytest.raises(TypeError, match="scale"):
        attention(q, q, q, scale="2")
