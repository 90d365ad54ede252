"""The Triton kernels' non-causal backward and zero keys, in Triton's interpreter, against SDPA.

Triton's fused-attention tutorial computes a wrong non-causal backward (triton-lang/triton
#4541, #5660): its dK/dV program starts at the key block's diagonal and its dQ program stops
there, as the causal case allows, so the query blocks before a key block (and the key blocks
after a query block) are left out. These tests use several blocks in each direction, where
that defect shows; a single block (n, m <= 16) would hide it. Chapter 7 makes the defect an
exercise (``ex-ch07-noncausal-bwd``).
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported (selfattn imports it lazily)

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from selfattn.efficient import triton_available, triton_flash_attention  # noqa: E402

from tools.references import grads as _grads  # noqa: E402

needs_triton = pytest.mark.skipif(not triton_available(), reason="Triton is not installed")

TOL = {torch.float32: 1e-5, torch.float16: 5e-3}


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(
    "n,m,block_q,block_k",
    [
        (64, 64, 16, 16),  # 4 x 4 blocks: every off-diagonal tile counts
        (40, 70, 16, 32),  # n < m, unequal blocks, short last blocks
        (70, 40, 32, 16),  # n > m
        (1, 50, 16, 16),  # one query against four key blocks
    ],
)
def test_noncausal_backward_matches_sdpa(dtype, n, m, block_q, block_k):
    g = torch.Generator().manual_seed(3 * n + m)
    q = torch.randn(2, n, 16, generator=g).to(dtype)
    k = torch.randn(2, m, 16, generator=g).to(dtype)
    v = torch.randn(2, m, 24, generator=g).to(dtype)
    do = torch.randn(2, n, 24, generator=g).to(dtype)
    got = _grads(
        lambda a, b, c: triton_flash_attention(a, b, c, block_q=block_q, block_k=block_k),
        q,
        k,
        v,
        do,
    )
    want = _grads(F.scaled_dot_product_attention, q.double(), k.double(), v.double(), do.double())
    tol = TOL[dtype]
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        assert a.dtype == dtype and a.shape == b.shape, name
        torch.testing.assert_close(a.double(), b, atol=tol, rtol=tol, msg=name)


@needs_triton
def test_tutorial_defect_would_fail_this_test():
    # The defect's dK/dV: query blocks from the key block's own on, as if causal. On these
    # sizes it differs from the right gradient by far more than the tolerance above, so the
    # test of the kernel would catch it.
    g = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(64, 16, generator=g, dtype=torch.float64) for _ in range(4))
    p = torch.softmax(q @ k.T / 4.0, -1)
    right_dv = p.T @ do
    late = torch.arange(64)[:, None] // 16 >= torch.arange(64)[None, :] // 16
    defect_dv = (p * late).T @ do  # query block >= key block only
    assert (defect_dv - right_dv).abs().max() > 100 * TOL[torch.float32]
    q32, k32, v32, do32 = (x.float() for x in (q, k, v, do))
    _, _, _, dv = _grads(lambda a, b, c: triton_flash_attention(a, b, c), q32, k32, v32, do32)
    torch.testing.assert_close(dv.double(), right_dv, atol=1e-5, rtol=1e-5)


@needs_triton
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_zero_keys_give_zeros_like_sdpa(causal, dtype):
    # m = 0: every row sees no key. SDPA returns zeros (and zero gradients), never NaN.
    q = torch.randn(2, 5, 16).to(dtype).requires_grad_()
    k = torch.randn(2, 0, 16).to(dtype).requires_grad_()
    v = torch.randn(2, 0, 8).to(dtype).requires_grad_()
    out = triton_flash_attention(q, k, v, causal=causal)
    ref = F.scaled_dot_product_attention(q, k, v)
    assert out.shape == ref.shape == (2, 5, 8)
    assert not out.isnan().any()
    torch.testing.assert_close(out, ref)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert dq.eq(0).all() and dk.shape == k.shape and dv.shape == v.shape
