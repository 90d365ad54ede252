"""The Triton kernel, run in Triton's interpreter on the CPU, against torch SDPA (small sizes: it is slow)."""

import os

os.environ["TRITON_INTERPRET"] = (
    "1"  # before Triton is imported (selfattn imports it only when called)
)

import subprocess  # noqa: E402
import sys  # noqa: E402

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
    out = triton_flash_attention(q, k, v, scale=0.2, block_m=32, block_n=16)
    ref = F.scaled_dot_product_attention(q, k.expand(3, 19, 16), v.expand(3, 19, 8), scale=0.2)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@needs_triton
def test_bad_input():
    q = torch.randn(4, 16)
    with pytest.raises(TypeError, match="float64"):
        triton_flash_attention(q.double(), q.double(), q.double())
    with pytest.raises(ValueError, match="power of two"):
        triton_flash_attention(q, q, q, block_m=24)
    with pytest.raises(ValueError, match="256"):
        big = torch.randn(4, 300)
        triton_flash_attention(big, big, big)


def test_cpu_without_interpreter_says_how(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q = torch.randn(4, 16)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        triton_flash_attention(q, q, q)


def test_import_selfattn_without_triton():
    # A machine without Triton (or a GPU) must still import the library; the kernel says what it needs.
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
