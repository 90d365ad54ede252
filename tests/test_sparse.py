"""Sliding-window attention (band only) against dense attention with the band mask; masks."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from selfattn.efficient import (
    block_sparse_mask,
    receptive_field,
    sliding_window_attention,
    sliding_window_attention_reference,
    strided_mask,
)
from selfattn.efficient._tiled import Recompute
from selfattn.masks import sliding_window_mask
from tiled_attention_checks import (
    ALIGN,
    assert_forward_skips_autograd_without_grad,
    assert_gradients_match,
    assert_half_gradients_match,
    assert_rejects_bad_shared_arguments,
    qkv,
    torch_attention,
)

from tools.references import band_mask


@given(
    n=st.integers(1, 60),
    w=st.integers(1, 70),
    causal=st.booleans(),
    block=st.one_of(st.none(), st.integers(1, 20)),
    seed=st.integers(0, 1000),
)
def test_equals_dense_masked_attention(n, w, causal, block, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g) for _ in range(3))
    out = sliding_window_attention(q, k, v, w, causal=causal, block_q=block)
    ref = F.scaled_dot_product_attention(
        q, k, v, attn_mask=sliding_window_mask(n, w, causal=causal)
    )
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_as_accurate_as_sdpa(dtype):
    # Scores, softmax and sums in float32: the error is that of torch SDPA on the same half
    # inputs (the softmax in bf16 gave twice SDPA's error).
    q, k, v = (torch.randn(1, 2, 50, 16) for _ in range(3))
    mask = sliding_window_mask(50, 7)
    half = [t.to(dtype) for t in (q, k, v)]
    out = sliding_window_attention(*half, 7)
    assert out.dtype == dtype
    exact = F.scaled_dot_product_attention(*(t.double() for t in half), attn_mask=mask)
    theirs = F.scaled_dot_product_attention(*half, attn_mask=mask)
    ours_err = (out.double() - exact).abs().max().item()
    assert ours_err <= 1.05 * (theirs.double() - exact).abs().max().item()
    assert ours_err <= (4e-3 if dtype == torch.float16 else 1.6e-2)


def test_window_one_is_identity_on_values_and_huge_window_is_causal_attention():
    q, k, v = (torch.randn(1, 30, 4) for _ in range(3))
    torch.testing.assert_close(sliding_window_attention(q, k, v, 1), v)
    torch.testing.assert_close(
        sliding_window_attention(q, k, v, 100),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
        atol=1e-6,
        rtol=1e-5,
    )


def test_work_is_linear_in_n(monkeypatch):
    # The score tiles hold n * (block + window - 1) entries in all, not n^2, and at most a bounded
    # number of them at once.
    seen = []
    real = torch.matmul

    def spy(a, b, **kw):
        out = real(a, b, **kw)
        if out.shape[-1] in (16 + 15, 256 + 255):  # score tiles: (..., block, span)
            seen.append(out.numel())
        return out

    monkeypatch.setattr(torch, "matmul", spy)
    q = torch.randn(1, 1, 1024, 8)
    sliding_window_attention(q, q, q, 16)
    assert sum(seen) == 1024 * (16 + 15)
    big = torch.randn(1, 1, 1 << 16, 4)
    seen.clear()
    sliding_window_attention(big, big, big, 256)
    assert sum(seen) == (1 << 16) * 511 and len(seen) > 1 and max(seen) <= 1 << 22


def test_masks():
    s = strided_mask(9, 3)
    assert s[8].nonzero().flatten().tolist() == [2, 5, 6, 7, 8]
    assert not s.triu(1).any()
    assert strided_mask(9, 3, causal=False)[0].nonzero().flatten().tolist() == [0, 1, 2, 3, 6]
    layout = torch.tensor([[True, False, False], [True, True, False], [False, True, True]])
    b = block_sparse_mask(7, 3, layout)
    assert b.shape == (7, 7) and b[6, 3] and b[6, 6] and not b[6, 0] and b[0, 0] and not b[0, 3]


def test_receptive_field_grows_by_window_minus_one_per_layer():
    mask = sliding_window_mask(40, 4)  # 4 keys: itself and 3 back
    for layers in (1, 2, 4):
        reach = receptive_field(mask, layers)
        assert reach[39].sum().item() == 3 * layers + 1


@pytest.mark.parametrize(
    "call,err,match",
    [
        (lambda q: sliding_window_attention(q, q, q, 0), ValueError, "window"),
        (lambda q: sliding_window_attention(q, q, q, 2.0), TypeError, "window"),
        (lambda q: sliding_window_attention(q, q[:, :3], q, 2), ValueError, "d_k"),
        (lambda q: sliding_window_attention(q, q, q, 2, block_q=0), ValueError, "block_q"),
        (
            lambda q: block_sparse_mask(5, 2, torch.ones(2, 2, dtype=torch.bool)),
            ValueError,
            r"\(3, 3\)",
        ),
        (lambda q: block_sparse_mask(5, 2, torch.ones(3, 3)), TypeError, "bool"),
        (lambda q: receptive_field(torch.ones(3, 4, dtype=torch.bool), 2), ValueError, "square"),
        (lambda q: strided_mask(5, 0), ValueError, "stride"),
    ],
)
def test_bad_input(call, err, match):
    with pytest.raises(err, match=match):
        call(torch.randn(5, 4))


# --- the reference, alignments with n != m, the backward pass, robustness -----------------------


def dense(q, k, v, window, causal, alignment):
    mask = band_mask(q.shape[-2], k.shape[-2], window, causal, alignment)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # SDPA: 0 for empty rows


@given(
    n=st.integers(1, 30),
    m=st.integers(1, 30),
    w=st.integers(1, 35),
    causal=st.booleans(),
    alignment=st.sampled_from(ALIGN),
    block=st.one_of(st.none(), st.integers(1, 12)),
    seed=st.integers(0, 1000),
)
@settings(max_examples=40)
def test_fast_and_reference_match_the_dense_band(n, m, w, causal, alignment, block, seed):
    q, k, v = qkv(n, m, seed=seed)
    want = dense(q, k, v, w, causal, alignment)
    ref = sliding_window_attention_reference(
        q, k, v, w, causal=causal, alignment=alignment, block_q=block or 7
    )
    fast = sliding_window_attention(q, k, v, w, causal=causal, alignment=alignment, block_q=block)
    assert not torch.isnan(fast).any() and not torch.isnan(ref).any()
    torch.testing.assert_close(ref, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("alignment", ALIGN)
@pytest.mark.parametrize("n,m", [(3, 8), (8, 8), (8, 3)])
def test_window_covering_everything_is_torch_causal_attention(n, m, alignment):
    # A window of max(n, m) keys hides nothing but the causal part: torch's own implementations.
    q, k, v = qkv(n, m)
    want = torch_attention(q, k, v, True, alignment)
    for fn in (sliding_window_attention, sliding_window_attention_reference):
        got = fn(q, k, v, max(n, m), alignment=alignment, block_q=3)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_empty_bands_give_zeros():
    q, k, v = qkv(7, 2)  # bottom-right: queries 0..4 come before every key
    for fn in (sliding_window_attention, sliding_window_attention_reference):
        out = fn(q, k, v, 2, alignment="bottom_right", block_q=3)
        assert torch.equal(out[:, :5], torch.zeros_like(out[:, :5]))
        assert out[:, 5:].abs().sum() > 0


@pytest.mark.parametrize(
    "n,m,w,causal,alignment,block",
    [
        (6, 6, 2, True, "top_left", 4),
        (5, 8, 3, False, "top_left", 2),
        (8, 5, 2, True, "bottom_right", 3),  # three queries see no key
        (1, 6, 3, True, "bottom_right", None),
        (7, 7, 20, False, "bottom_right", None),  # window beyond the sequence
    ],
)
def test_gradcheck_float64(n, m, w, causal, alignment, block):
    q, k, v = qkv(n, m, d=3, dv=2, dtype=torch.float64, requires_grad=True)
    fn = lambda q, k, v: sliding_window_attention(
        q, k, v, w, causal=causal, alignment=alignment, block_q=block
    )
    assert torch.autograd.gradcheck(fn, (q, k, v))


@given(
    n=st.integers(1, 40),
    m=st.integers(1, 40),
    w=st.integers(1, 20),
    causal=st.booleans(),
    alignment=st.sampled_from(ALIGN),
    seed=st.integers(0, 1000),
)
@settings(max_examples=20)
def test_gradients_match_dense_sdpa_float32(n, m, w, causal, alignment, seed):
    q, k, v = qkv(n, m, d=16, dv=8, batch=(2, 2), seed=seed, requires_grad=True)
    assert_gradients_match(
        lambda q, k, v: sliding_window_attention(
            q, k, v, w, causal=causal, alignment=alignment, block_q=5
        ),
        lambda q, k, v: dense(q, k, v, w, causal, alignment),
        q,
        k,
        v,
        seed + 1,
    )


def test_forward_without_grad_skips_autograd(monkeypatch):
    assert_forward_skips_autograd_without_grad(
        monkeypatch, Recompute, lambda q, k, v: sliding_window_attention(q, k, v, 3)
    )


def test_huge_window_or_block_does_not_allocate_huge_tiles(monkeypatch):
    # window=10**5 with n=5 once asked for a 10**5 x 2*10**5 tile; it means the same as window 5.
    q = torch.randn(5, 4)
    seen, real = [], torch.matmul

    def spy(a, b, **kw):
        res = real(a, b, **kw)
        seen.append(res.numel())
        return res

    monkeypatch.setattr(torch, "matmul", spy)
    out = sliding_window_attention(q, q, q, 10**5)
    out_block = sliding_window_attention(q, q, q, 2, block_q=10**6)
    monkeypatch.undo()
    assert max(seen) < 1000
    torch.testing.assert_close(out, sliding_window_attention(q, q, q, 5))
    torch.testing.assert_close(out_block, sliding_window_attention(q, q, q, 2))


def test_half_inputs_with_large_finite_scores_stay_finite():
    for dtype in (torch.float16, torch.bfloat16):
        q = torch.full((6, 8), 100.0, dtype=dtype)
        out = sliding_window_attention(q, q, q, 3)
        assert out.dtype == dtype and torch.isfinite(out).all()


@pytest.mark.parametrize(
    "n,m,dv,batch", [(0, 5, 4, (2,)), (3, 0, 4, (2,)), (3, 5, 0, (2,)), (3, 5, 4, (0,))]
)
def test_zero_length_dims_behave_like_sdpa(n, m, dv, batch):
    q, k, v = torch.randn(*batch, n, 8), torch.randn(*batch, m, 8), torch.randn(*batch, m, dv)
    for fn in (sliding_window_attention, sliding_window_attention_reference):
        got = fn(q, k, v, 2, causal=False)
        torch.testing.assert_close(got, dense(q, k, v, 2, False, "top_left"))


def test_robust_arguments():
    for fn in (sliding_window_attention, sliding_window_attention_reference):
        assert_rejects_bad_shared_arguments(lambda q, k, v, fn=fn, **kw: fn(q, k, v, 2, **kw))
    q = torch.randn(5, 4)
    with pytest.raises(ValueError, match="window"):
        sliding_window_attention_reference(q, q, q, -1)
    with pytest.raises(TypeError, match="block_q"):
        sliding_window_attention_reference(q, q, q, 2, block_q=1.5)


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 3e-3), (torch.bfloat16, 2e-2)])
def test_half_precision_gradients(dtype, tol):
    q, k, v = qkv(40, 40, d=16, dv=16, dtype=dtype, requires_grad=True)
    assert_half_gradients_match(
        lambda q, k, v: sliding_window_attention(q, k, v, 5, block_q=8),
        lambda q, k, v: dense(q, k, v, 5, True, "top_left"),
        q,
        k,
        v,
        tol=tol,
    )


# Patterns of real models, and the blocked implementation that computes only their tiles.


def test_longformer_mask_is_window_plus_global_rows_and_columns():
    from selfattn.efficient.sparse import longformer_mask

    m = longformer_mask(12, 2, 1)
    assert m[0].all() and m[:, 0].all()  # the global token sees and is seen by all
    assert m[5, 4] and m[5, 6] and not m[5, 3] and not m[5, 7]
    c = longformer_mask(12, 2, [0, 6], causal=True)
    assert not c.triu(1).any()
    assert c[11, 6] and c[6, 2] and not c[9, 3]
    assert longformer_mask(5, 1, 0).equal(torch.eye(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="global_tokens"):
        longformer_mask(5, 1, [7])


def test_bigbird_layout_window_global_and_random_blocks():
    from selfattn.efficient.sparse import bigbird_layout, bigbird_mask

    g = torch.Generator().manual_seed(0)
    lay = bigbird_layout(8, window_blocks=3, global_blocks=1, random_blocks=2, generator=g)
    assert lay[0].all() and lay[:, 0].all()
    for a in range(1, 8):
        band = {b for b in range(8) if abs(a - b) <= 1} | {0}
        assert int(lay[a].sum()) == len(band) + 2  # exactly the random blocks on top
        assert all(lay[a, b] for b in band)
    m = bigbird_mask(30, 4, generator=torch.Generator().manual_seed(1))
    assert m.shape == (30, 30) and m[:, :4].all()


def test_sink_window_mask_keeps_the_first_tokens():
    from selfattn.efficient.sparse import sink_window_mask

    m = sink_window_mask(10, 3, 2)
    assert m[9].nonzero().flatten().tolist() == [0, 1, 7, 8, 9]
    assert sink_window_mask(10, 3, 0).equal(sliding_window_mask(10, 3))


@pytest.mark.parametrize("block", [1, 4, 7, 16])
def test_block_sparse_attention_equals_dense_masked(block):
    from selfattn.efficient.sparse import (
        bigbird_mask,
        block_sparse_attention,
        layout_from_mask,
        longformer_mask,
        sink_window_mask,
    )

    g = torch.Generator().manual_seed(block)
    n = 37
    q, k, v = (torch.randn(2, 3, n, 8, generator=g) for _ in range(3))
    for mask in (
        longformer_mask(n, 4, 2),
        longformer_mask(n, 3, [5, 30], causal=True),
        bigbird_mask(n, 5, generator=g),
        sink_window_mask(n, 6, 4),
        torch.zeros(n, n, dtype=torch.bool),
    ):
        layout = layout_from_mask(mask, block)
        out = block_sparse_attention(q, k, v, layout, block, mask=mask)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        ref = torch.where(mask.any(-1, keepdim=True), ref, torch.zeros_like(ref))
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_block_sparse_attention_without_mask_uses_the_whole_tiles():
    from selfattn.efficient.sparse import block_sparse_attention

    g = torch.Generator().manual_seed(5)
    n, block = 10, 4
    q, k, v = (torch.randn(n, 6, generator=g) for _ in range(3))
    layout = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 1, 1]], dtype=torch.bool)
    out = block_sparse_attention(q, k, v, layout, block)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=block_sparse_mask(n, block, layout))
    torch.testing.assert_close(out, ref)
    with pytest.raises(ValueError, match="layout"):
        block_sparse_attention(q, k, v, layout[:2], block)
    with pytest.raises(ValueError, match="mask"):
        block_sparse_attention(q, k, v, layout, block, mask=torch.ones(3, 3, dtype=torch.bool))


def test_layout_from_mask_marks_touched_tiles():
    from selfattn.efficient.sparse import layout_from_mask

    mask = torch.zeros(5, 5, dtype=torch.bool)
    mask[4, 0] = True
    lay = layout_from_mask(mask, 2)
    assert lay.shape == (3, 3) and lay.nonzero().tolist() == [[2, 0]]


def test_bigbird_mask_expands_the_layout_its_keywords_describe():
    from selfattn.efficient.sparse import bigbird_layout, bigbird_mask, block_sparse_mask

    options = {"window_blocks": 5, "global_blocks": 2, "random_blocks": 0}
    layout = bigbird_layout(math.ceil(30 / 4), **options)
    assert bigbird_mask(30, 4, **options).equal(block_sparse_mask(30, 4, layout))
    with pytest.raises(TypeError, match="window"):
        bigbird_mask(30, 4, window=3)
