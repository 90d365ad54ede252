"""flash_attention (tiled, online softmax) against torch SDPA, the oracle."""

import inspect
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from selfattn import scaled_dot_product_attention
from selfattn.efficient import flash as fl
from selfattn.efficient import flash_attention, flash_attention_reference, online_softmax_steps
from selfattn.efficient._tiled import Recompute
from tiled_attention_checks import (
    ALIGN,
    assert_forward_skips_autograd_without_grad,
    assert_gradients_match,
    assert_half_gradients_match,
    assert_rejects_bad_shared_arguments,
    torch_attention,
)
from tiled_attention_checks import qkv as _qkv

qkv = partial(_qkv, batch=(2, 3))


def sdpa(q, k, v, causal=False, scale=None):
    """torch's attention, causal aligned bottom-right as the library's default."""
    return torch_attention(q, k, v, causal, scale=scale)


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


def test_large_score_jumps_trigger_rescale_and_stay_exact(monkeypatch):
    # Keys late in the sequence have huge norms: the running max jumps by far more than the lazy
    # limit, so the rescale path runs (it recomputes the tile's scores: a second _tile_scores
    # call for the same tile); the result must still match (relative to its magnitude).
    tiles, real_tile_scores = [], fl._tile_scores

    def spy(qa, kt, s_buf, qs, qe, ks, ke, a):
        tiles.append((qs, ks))
        return real_tile_scores(qa, kt, s_buf, qs, qe, ks, ke, a)

    monkeypatch.setattr(fl, "_tile_scores", spy)
    torch.manual_seed(1)
    q, k = torch.randn(1, 2, 100, 8), torch.randn(1, 2, 100, 8)
    v = torch.randn(1, 2, 100, 8)
    flash_attention(q, k, v, block_q=16, block_k=8)
    assert len(tiles) == len(set(tiles)) == 7 * 13  # moderate scores: every tile computed once
    k[..., 60:, :] *= 400
    for causal in (False, True):
        tiles.clear()
        out = flash_attention(q, k, v, causal=causal, block_q=16, block_k=8)
        assert len(tiles) > len(set(tiles))  # some tile was rescaled
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
    steps = online_softmax_steps(s, v, block_k=5)
    assert [st_["stop"] for st_ in steps] == [5, 10, 15, 20, 23]
    ref = torch.softmax(s.double(), 0) @ v.double()
    torch.testing.assert_close(steps[-1]["out"], ref)
    assert steps[-1]["mu"] == pytest.approx(float(s.max()))
    assert steps[-1]["ell"] == pytest.approx(float(torch.exp(s.double() - s.max()).sum()))
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
    assert max(sizes) == 32 * 48 < 200 * 200
    assert len(sizes) == 7 * 5  # ceil(200 / 32) x ceil(200 / 48) tiles, each computed once


# --- the reference, both causal alignments, the backward pass, robustness -----------------------

LENGTHS = [(3, 8), (8, 8), (8, 3), (1, 5), (5, 1)]  # n < m, n = m, n > m, one query, one key


@given(
    n=st.integers(1, 30),
    m=st.integers(1, 30),
    bq=st.integers(1, 12),
    bk=st.integers(1, 12),
    causal=st.booleans(),
    alignment=st.sampled_from(ALIGN),
    seed=st.integers(0, 1000),
)
@settings(max_examples=30)
def test_reference_matches_torch_and_fast_matches_reference(n, m, bq, bk, causal, alignment, seed):
    q, k, v = qkv(n, m, seed=seed)
    ref = flash_attention_reference(
        q, k, v, causal=causal, alignment=alignment, block_q=bq, block_k=bk
    )
    torch.testing.assert_close(
        ref, torch_attention(q, k, v, causal, alignment), atol=1e-5, rtol=1e-5
    )
    fast = flash_attention(q, k, v, causal=causal, alignment=alignment, block_q=bq, block_k=bk)
    torch.testing.assert_close(fast, ref, atol=1e-5, rtol=1e-5)


def test_reference_reads_like_the_recurrence():
    # The reference is the bare recurrence: no buffer reuse, no lazy rescale, no matmul tricks.
    src = inspect.getsource(flash_attention_reference)
    for step in ("mu_new = torch.maximum(mu", "torch.exp(s - mu_new)", "alpha * ell", "acc / "):
        assert step in src
    assert "out=" not in src and "baddbmm" not in src


@pytest.mark.parametrize("alignment", ALIGN)
@pytest.mark.parametrize("n,m", LENGTHS)
def test_both_alignments_match_torch(n, m, alignment):
    q, k, v = qkv(n, m)
    want = torch_attention(q, k, v, True, alignment)
    for fn in (flash_attention, flash_attention_reference):
        got = fn(q, k, v, causal=True, alignment=alignment, block_q=2, block_k=3)
        assert not torch.isnan(got).any()
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # The two alignments differ exactly when n != m.
    other = "top_left" if alignment == "bottom_right" else "bottom_right"
    differs = not torch.allclose(
        flash_attention(q, k, v, causal=True, alignment=alignment),
        flash_attention(q, k, v, causal=True, alignment=other),
    )
    assert differs == (n != m)


def test_rows_that_see_no_key_are_zeros():
    # Bottom-right with n > m: the first n - m queries come before every key.
    q, k, v = qkv(6, 2)
    for fn in (flash_attention, flash_attention_reference):
        out = fn(q, k, v, causal=True, alignment="bottom_right", block_q=4, block_k=1)
        assert torch.equal(out[..., :4, :], torch.zeros_like(out[..., :4, :]))
        assert out[..., 4:, :].abs().sum() > 0


@pytest.mark.parametrize(
    "n,m,bq,bk,causal,alignment",
    [
        (5, 7, 2, 3, False, "top_left"),
        (7, 5, 3, 2, True, "top_left"),
        (4, 9, 3, 4, True, "bottom_right"),
        (9, 4, 4, 3, True, "bottom_right"),  # five rows see no key
        (1, 6, 1, 4, True, "bottom_right"),  # one query: decoding
        (1, 1, 1, 1, True, "top_left"),
        (6, 6, 4, 4, True, "top_left"),
    ],
)
def test_gradcheck_float64(n, m, bq, bk, causal, alignment):
    q, k, v = qkv(n, m, d=3, dv=2, batch=(2,), dtype=torch.float64, requires_grad=True)
    fn = lambda q, k, v: flash_attention(
        q, k, v, causal=causal, alignment=alignment, block_q=bq, block_k=bk
    )
    assert torch.autograd.gradcheck(fn, (q, k, v))


def test_gradcheck_with_broadcast_batch_and_scale():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(4, 3, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(2, 5, 3, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(1, 5, 2, dtype=torch.float64, generator=g, requires_grad=True)
    fn = lambda q, k, v: flash_attention(q, k, v, causal=True, scale=0.7, block_q=3, block_k=2)
    assert torch.autograd.gradcheck(fn, (q, k, v))


@given(
    n=st.integers(1, 40),
    m=st.integers(1, 40),
    bq=st.integers(1, 16),
    bk=st.integers(1, 16),
    causal=st.booleans(),
    alignment=st.sampled_from(ALIGN),
    seed=st.integers(0, 1000),
)
@settings(max_examples=25)
def test_gradients_match_torch_float32(n, m, bq, bk, causal, alignment, seed):
    q, k, v = qkv(n, m, d=16, dv=8, batch=(2, 2), seed=seed, requires_grad=True)
    assert_gradients_match(
        lambda q, k, v: flash_attention(
            q, k, v, causal=causal, alignment=alignment, block_q=bq, block_k=bk
        ),
        lambda q, k, v: torch_attention(q, k, v, causal, alignment),
        q,
        k,
        v,
        seed + 1,
    )


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 5e-3), (torch.bfloat16, 4e-2)])
def test_half_precision_gradients(dtype, tol):
    q, k, v = qkv(33, 40, d=16, dv=16, dtype=dtype, requires_grad=True)
    assert_half_gradients_match(
        lambda q, k, v: flash_attention(q, k, v, causal=True, block_q=8, block_k=16),
        lambda q, k, v: torch_attention(q, k, v, causal=True),
        q,
        k,
        v,
        tol=tol,
    )


def test_backward_holds_no_n_by_m_tensor(monkeypatch):
    # The backward recomputes P one block_q x block_k tile at a time: no bmm result is n x m.
    q, k, v = qkv(96, 80, d=8, dv=8, batch=(1,), requires_grad=True)
    out = flash_attention(q, k, v, block_q=16, block_k=32)
    sizes, real_bmm = [], torch.bmm

    def spy(a, b, **kw):
        res = real_bmm(a, b, **kw)
        sizes.append(res.shape[-2] * res.shape[-1])
        return res

    monkeypatch.setattr(torch, "bmm", spy)
    out.sum().backward()
    assert sizes and max(sizes) <= max(16 * 32, 96 * 8) < 96 * 80
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in (q, k, v))


def test_forward_without_grad_skips_autograd(monkeypatch):
    # The chapters and `make bench` time the forward: without gradients it must not save state.
    assert_forward_skips_autograd_without_grad(monkeypatch, Recompute, flash_attention)


def test_half_inputs_with_large_finite_scores_stay_finite():
    for dtype in (torch.float16, torch.bfloat16):
        q = torch.full((1, 4, 8), 100.0, dtype=dtype)  # scores 100 * 100 * 8 / sqrt(8): finite
        v = torch.randn(1, 4, 8).to(dtype)
        for fn in (flash_attention, flash_attention_reference):
            out = fn(q, q, v, causal=True)
            assert out.dtype == dtype and torch.isfinite(out).all()
            want = torch_attention(q.float(), q.float(), v.float(), True)
            torch.testing.assert_close(out, want.to(dtype))  # the dtype's own tolerance


@pytest.mark.parametrize(
    "shape_q,shape_k,shape_v",
    [
        ((2, 0, 8), (2, 5, 8), (2, 5, 4)),  # no queries
        ((2, 3, 8), (2, 0, 8), (2, 0, 4)),  # no keys: zeros, as SDPA
        ((2, 3, 8), (2, 5, 8), (2, 5, 0)),  # d_v = 0
        ((0, 3, 8), (0, 5, 8), (0, 5, 4)),  # empty batch
        ((2, 3, 0), (2, 5, 0), (2, 5, 4)),  # d_k = 0: every score is 0
    ],
)
def test_zero_length_dims_behave_like_sdpa(shape_q, shape_k, shape_v):
    q, k, v = torch.randn(shape_q), torch.randn(shape_k), torch.randn(shape_v)
    want = F.scaled_dot_product_attention(q, k, v, scale=1.0 if q.shape[-1] == 0 else None)
    for fn in (flash_attention, flash_attention_reference):
        for causal in (False, True):
            got = fn(q, k, v, causal=causal, alignment="bottom_right")
            assert got.shape == want.shape
            if not causal:
                torch.testing.assert_close(got, want)


def test_robust_arguments():
    assert_rejects_bad_shared_arguments(flash_attention)
    assert_rejects_bad_shared_arguments(flash_attention_reference)
    q = torch.randn(4, 8)
    with pytest.raises(ValueError, match="block_k"):
        flash_attention_reference(q, q, q, block_k=0)


def test_online_softmax_steps_masked_scores_give_zeros_not_nan():
    s = torch.tensor([float("-inf")] * 3 + [0.5, 1.0])
    steps = online_softmax_steps(s, torch.ones(5, 2), block_k=3)
    assert torch.equal(steps[0]["out"], torch.zeros(2)) and steps[0]["ell"] == 0.0
    torch.testing.assert_close(steps[-1]["out"], torch.ones(2, dtype=torch.float64))
    all_masked = online_softmax_steps(torch.full((4,), float("-inf")), torch.ones(4, 2), 2)
    assert all(torch.equal(st_["out"], torch.zeros(2, dtype=torch.float64)) for st_ in all_masked)
