"""Sliding-window attention (band only) against dense attention with the band mask; the sparse masks."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from selfattn.efficient import (
    block_sparse_mask,
    receptive_field,
    sliding_window_attention,
    strided_mask,
)
from selfattn.masks import sliding_window_mask


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
    out = sliding_window_attention(q, k, v, w, causal=causal, block_size=block)
    ref = F.scaled_dot_product_attention(
        q, k, v, attn_mask=sliding_window_mask(n, w, causal=causal)
    )
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)])
def test_half_precision(dtype, tol):
    q, k, v = (torch.randn(1, 2, 50, 16) for _ in range(3))
    out = sliding_window_attention(q.to(dtype), k.to(dtype), v.to(dtype), 7)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=sliding_window_mask(50, 7))
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)


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
        (lambda q: sliding_window_attention(q, q, q, 2, block_size=0), ValueError, "block_size"),
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
