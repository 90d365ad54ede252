"""flash_attention (tiled, online softmax) against torch SDPA, the oracle."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from selfattn import scaled_dot_product_attention
from selfattn.efficient import flash_attention, online_softmax_steps


def sdpa(q, k, v, causal=False, scale=None):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


@given(
    n=st.integers(1, 70),
    m=st.integers(1, 70),
    d=st.sampled_from([1, 3, 8, 16]),
    dv=st.sampled_from([1, 5, 8]),
    bq=st.integers(1, 40),
    bk=st.integers(1, 40),
    causal=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_matches_sdpa_float32_random_shapes_and_blocks(n, m, d, dv, bq, bk, causal, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 3, n, d, generator=g) * 2, torch.randn(2, 3, m, d, generator=g) * 2
    v = torch.randn(2, 3, m, dv, generator=g)
    out = flash_attention(q, k, v, causal=causal, block_q=bq, block_k=bk)
    torch.testing.assert_close(out, sdpa(q, k, v, causal), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "n,bq,bk", [(1, 1, 1), (1, 256, 512), (513, 256, 512), (300, 64, 100), (1000, 128, 96)]
)
@pytest.mark.parametrize("causal", [False, True])
def test_edge_sizes_and_default_blocks(n, bq, bk, causal):
    q, k, v = (torch.randn(1, 4, n, 64) for _ in range(3))
    out = flash_attention(q, k, v, causal=causal, block_q=bq, block_k=bk)
    torch.testing.assert_close(out, sdpa(q, k, v, causal), atol=1e-5, rtol=1e-5)


def test_scale_broadcast_and_unbatched():
    q, k, v = torch.randn(5, 8), torch.randn(2, 3, 7, 8), torch.randn(1, 3, 7, 4)
    out = flash_attention(q, k, v, scale=0.3, block_q=2, block_k=3)
    ref = scaled_dot_product_attention(q, k, v, scale=0.3)
    assert out.shape == (2, 3, 5, 4)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_large_score_jumps_trigger_rescale_and_stay_exact():
    # Keys late in the sequence have huge norms: the running max jumps by far more than the lazy
    # limit, so the rescale path runs; the result must still match (relative to its magnitude).
    torch.manual_seed(1)
    q, k = torch.randn(1, 2, 100, 8), torch.randn(1, 2, 100, 8)
    k[..., 60:, :] *= 400
    v = torch.randn(1, 2, 100, 8)
    for causal in (False, True):
        out = flash_attention(q, k, v, causal=causal, block_q=16, block_k=8)
        ref = F.scaled_dot_product_attention(
            q.double(), k.double(), v.double(), is_causal=causal
        ).float()
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "dtype,tol", [(torch.float16, 2e-3), (torch.bfloat16, 1.6e-2), (torch.float64, 1e-12)]
)
def test_low_and_high_precision(dtype, tol):
    q, k, v = (torch.randn(2, 2, 45, 16).to(dtype) for _ in range(3))
    for causal in (False, True):
        out = flash_attention(q, k, v, causal=causal, block_q=16, block_k=7)
        assert out.dtype == dtype
        ref = sdpa(q.double(), k.double(), v.double(), causal)
        torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


def test_causal_skips_blocks_above_the_diagonal(monkeypatch):
    # Count the tile products: causal must compute only the blocks on or below the diagonal.
    calls = []
    real_bmm = torch.bmm

    def counting_bmm(a, b, **kw):
        calls.append(tuple(b.shape))
        return real_bmm(a, b, **kw)

    monkeypatch.setattr(torch, "bmm", counting_bmm)
    q = torch.randn(1, 1, 64, 8)
    flash_attention(q, q, q, causal=True, block_q=16, block_k=16)
    assert len(calls) == 1 + 2 + 3 + 4  # 4 query blocks see 1, 2, 3, 4 key blocks
    calls.clear()
    flash_attention(q, q, q, causal=False, block_q=16, block_k=16)
    assert len(calls) == 16


def test_online_softmax_steps_end_in_softmax_attention():
    g = torch.Generator().manual_seed(3)
    s, v = torch.randn(23, generator=g) * 3, torch.randn(23, 4, generator=g)
    steps = online_softmax_steps(s, v, block=5)
    assert [st_["stop"] for st_ in steps] == [5, 10, 15, 20, 23]
    ref = torch.softmax(s.double(), 0) @ v.double()
    torch.testing.assert_close(steps[-1]["out"], ref)
    assert steps[-1]["m"] == pytest.approx(float(s.max()))
    assert steps[-1]["l"] == pytest.approx(float(torch.exp(s.double() - s.max()).sum()))
    for st_ in steps:  # after every block: exact attention over the keys seen so far
        seen = slice(0, st_["stop"])
        torch.testing.assert_close(
            st_["out"], torch.softmax(s[seen].double(), 0) @ v[seen].double()
        )
        assert 0 <= st_["alpha"] <= 1


@pytest.mark.parametrize(
    "kwargs,err",
    [
        (dict(block_q=0), ValueError),
        (dict(block_k=-3), ValueError),
        (dict(block_q=2.5), TypeError),
        (dict(block_k=True), TypeError),
    ],
)
def test_bad_blocks(kwargs, err):
    q = torch.randn(4, 8)
    with pytest.raises(err, match="block"):
        flash_attention(q, q, q, **kwargs)


def test_bad_tensors():
    q = torch.randn(4, 8)
    with pytest.raises(ValueError, match="d_k"):
        flash_attention(q, torch.randn(4, 7), torch.randn(4, 8))
    with pytest.raises(TypeError, match="floating-point"):
        flash_attention(q.long(), q.long(), q.long())
    with pytest.raises(ValueError):
        online_softmax_steps(torch.randn(4), torch.randn(5, 2), 2)


def test_no_n_squared_tensor(monkeypatch):
    # The largest tensor any tile product creates is block_q x block_k, never n x n.
    sizes = []
    real_bmm = torch.bmm

    def spy(a, b, **kw):
        out = real_bmm(a, b, **kw)
        sizes.append(out.shape[-2] * out.shape[-1])
        return out

    monkeypatch.setattr(torch, "bmm", spy)
    q = torch.randn(1, 1, 200, 8)
    flash_attention(q, q, q, block_q=32, block_k=48)
    assert max(sizes) <= 32 * 48 < 200 * 200
    assert math.isfinite(sum(sizes))
