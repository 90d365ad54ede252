"""The Triton kernels, run in Triton's interpreter on the CPU, against torch SDPA.

Small sizes: the interpreter is slow.
"""

import os

os.environ["TRITON_INTERPRET"] = (
    "1"  # before Triton is imported (selfattn imports it only when called)
)

import inspect  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from selfattn.efficient import triton_available, triton_flash_attention  # noqa: E402

needs_triton = pytest.mark.skipif(not triton_available(), reason="Triton is not installed")

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "n,m,dk,dv,causal",
    [
        (1, 1, 8, 8, False),
        (1, 1, 8, 8, True),
        (37, 37, 24, 40, True),
        (20, 45, 16, 16, False),
        (33, 33, 64, 64, True),
    ],
)
def test_matches_sdpa_in_the_interpreter(dtype, n, m, dk, dv, causal):
    g = torch.Generator().manual_seed(n + m)
    q = torch.randn(2, n, dk, generator=g).to(dtype)
    k = torch.randn(2, m, dk, generator=g).to(dtype)
    v = torch.randn(2, m, dv, generator=g).to(dtype)
    out = triton_flash_attention(q, k, v, causal=causal)
    assert out.dtype == dtype and out.shape == (2, n, dv)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    tol = TOL[dtype]
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


@needs_triton
def test_broadcast_batch_scale_and_blocks():
    q, k, v = torch.randn(3, 19, 16), torch.randn(1, 19, 16), torch.randn(1, 19, 8)
    out = triton_flash_attention(q, k, v, scale=0.2, block_q=32, block_k=16)
    ref = F.scaled_dot_product_attention(q, k.expand(3, 19, 16), v.expand(3, 19, 8), scale=0.2)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@needs_triton
def test_bad_input():
    q = torch.randn(4, 16)
    with pytest.raises(TypeError, match="float64"):
        triton_flash_attention(q.double(), q.double(), q.double())
    with pytest.raises(ValueError, match="power of two"):
        triton_flash_attention(q, q, q, block_q=24)
    with pytest.raises(ValueError, match="256"):
        big = torch.randn(4, 300)
        triton_flash_attention(big, big, big)


def test_cpu_without_interpreter_says_how(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q = torch.randn(4, 16)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        triton_flash_attention(q, q, q)


def test_import_selfattn_without_triton():
    # A machine without Triton (or a GPU) must still import the library; the kernel says
    # what it needs.
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import selfattn, torch\n"
        "from selfattn.efficient import triton_available, triton_flash_attention\n"
        "assert not triton_available()\n"
        "q = torch.randn(4, 16)\n"
        "try:\n"
        "    triton_flash_attention(q, q, q)\n"
        "except ImportError as e:\n"
        "    print('ok', e)\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok") and "pip install triton" in out.stdout


def test_kernel_source_readable_without_triton():
    # Chapter 7 prints the forward's tile step with inspect.getsource: without Triton the
    # kernels module still imports, its kernels plain functions that can be read.
    code = (
        "import sys, inspect; sys.modules['triton'] = None\n"
        "from selfattn.efficient import triton_kernels as tk\n"
        "assert not tk.INTERPRETED\n"
        "print(inspect.getsource(tk.online_softmax_tile))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "def online_softmax_tile(" in out.stdout and "mu_new" in out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 79  # the book's width


@needs_triton
def test_kernels_are_defined_once_at_module_level():
    # One definition per kernel, at import: no factory, no globals() patching.
    from selfattn.efficient import triton_flash, triton_kernels

    source = inspect.getsource(triton_kernels) + inspect.getsource(triton_flash)
    assert "globals()" not in source
    assert triton_kernels.INTERPRETED  # conftest sets TRITON_INTERPRET=1 before the import
    assert triton_flash._kernels(torch.device("cpu")) is triton_kernels


def _sdpa(q, k, v, causal, alignment):
    """torch's own attention for each alignment: is_causal (top-left), causal_lower_right."""
    if not causal:
        return F.scaled_dot_product_attention(q, k, v)
    if alignment == "top_left":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    from torch.nn.attention.bias import causal_lower_right

    n, m = q.shape[-2], k.shape[-2]
    with warnings.catch_warnings():  # torch warns of NaN for n > m; its rows come out 0
        warnings.simplefilter("ignore", UserWarning)
        mask = causal_lower_right(n, m)._materialize(q.device)  # True = may attend
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


GRAD_TOL = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 4e-2}


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(
    "n,m,dk,dv,causal,alignment",
    [
        (17, 17, 16, 16, False, "top_left"),  # n not a multiple of the block (16)
        (20, 45, 16, 24, True, "top_left"),  # n < m
        (20, 45, 16, 24, True, "bottom_right"),
        (45, 20, 32, 16, False, "top_left"),  # n > m
        (45, 20, 32, 16, True, "bottom_right"),  # the first 25 queries see no key
        (1, 1, 8, 8, True, "top_left"),
    ],
)
def test_gradients_match_sdpa(dtype, n, m, dk, dv, causal, alignment):
    g = torch.Generator().manual_seed(n * m + dk)
    q, k = (torch.randn(2, r, dk, generator=g).to(dtype).requires_grad_() for r in (n, m))
    v = torch.randn(2, m, dv, generator=g).to(dtype).requires_grad_()
    do = torch.randn(2, n, dv, generator=g).to(dtype)
    out = triton_flash_attention(q, k, v, causal=causal, alignment=alignment)
    grads = torch.autograd.grad(out, (q, k, v), do)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = _sdpa(q64, k64, v64, causal, alignment)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), do.double())
    tol = GRAD_TOL[dtype]
    torch.testing.assert_close(out.double(), ref.detach(), atol=TOL[dtype], rtol=TOL[dtype])
    for name, got, want in zip("qkv", grads, ref_grads):
        assert got.dtype == dtype and got.shape == want.shape, name
        torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol, msg=f"d{name}")


@needs_triton
def test_gradients_bf16_and_broadcast_batch():
    # bf16 (upcast to fp32 dots in the interpreter) and a k, v broadcast over the batch: the
    # gradient of a broadcast input is summed over the copies, as autograd does for SDPA.
    g = torch.Generator().manual_seed(5)
    q = torch.randn(3, 19, 16, generator=g).bfloat16().requires_grad_()
    k = torch.randn(1, 23, 16, generator=g).bfloat16().requires_grad_()
    v = torch.randn(1, 23, 16, generator=g).bfloat16().requires_grad_()
    out = triton_flash_attention(q, k, v, causal=True, alignment="bottom_right", block_q=32)
    out.float().square().sum().backward()
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = _sdpa(q64, k64.expand(3, 23, 16), v64.expand(3, 23, 16), True, "bottom_right")
    ref.square().sum().backward()
    tol = GRAD_TOL[torch.bfloat16]
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert got.shape == want.shape
        torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)


@needs_triton
@pytest.mark.parametrize("n,m", [(5, 12), (12, 12), (12, 5)])
def test_bottom_right_alignment_matches_causal_lower_right(n, m):
    g = torch.Generator().manual_seed(n + 10 * m)
    q, k, v = (torch.randn(2, r, 16, generator=g) for r in (n, m, m))
    out = triton_flash_attention(q, k, v, causal=True)  # the default, as mask="causal"
    torch.testing.assert_close(out, _sdpa(q, k, v, True, "bottom_right"), atol=1e-5, rtol=1e-5)
    top = triton_flash_attention(q, k, v, causal=True, alignment="top_left")
    torch.testing.assert_close(top, _sdpa(q, k, v, True, "top_left"), atol=1e-5, rtol=1e-5)
    assert (n == m) == torch.allclose(out, top)  # the two alignments differ unless n == m
    if n > m:
        assert out[:, : n - m].eq(0).all()  # queries that see no key: output 0, not nan


@needs_triton
def test_bad_alignment():
    q = torch.randn(4, 16)
    with pytest.raises(ValueError, match="alignment.*'top-right'"):
        triton_flash_attention(q, q, q, causal=True, alignment="top-right")
