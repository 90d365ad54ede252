"""FlashDecoding: split-KV attention vs torch SDPA; the merge is the online-softmax identity."""

import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from selfattn.efficient import (
    flash_attention,
    flash_decoding,
    merge_attention_states,
    partial_attention,
)


def lower_right(n, m):
    from torch.nn.attention.bias import causal_lower_right

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that n > m leaves rows without keys
        return causal_lower_right(n, m)


def cache(n, m, d=16, dv=8, batch=(2, 4), dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = ((n, d), (m, d), (m, dv))
    return [torch.randn(*batch, a, b, generator=g).to(dtype) for a, b in shapes]


@given(
    n=st.integers(1, 4),
    m=st.integers(1, 200),
    chunk=st.integers(4, 128),
    causal=st.booleans(),
    seed=st.integers(0, 1000),
)
@settings(max_examples=25)
def test_equals_sdpa(n, m, chunk, causal, seed):
    q, k, v = cache(n, m, seed=seed)
    mask = lower_right(n, m) if causal else None
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = flash_decoding(q, k, v, chunk_size=chunk, causal=causal)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_one_token_against_a_long_cache_and_its_lse():
    q, k, v = cache(1, 5000)
    out, lse = flash_decoding(q, k, v, chunk_size=512, return_lse=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-5, rtol=1e-5)
    scores = q @ k.transpose(-2, -1) / 4.0
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1))
    # Decoding is bottom-right: the same as flash_attention aligned bottom-right.
    q4, k4, v4 = cache(4, 300)
    torch.testing.assert_close(
        flash_decoding(q4, k4, v4, chunk_size=64, causal=True),
        flash_attention(q4, k4, v4, causal=True, alignment="bottom_right"),
        atol=1e-5,
        rtol=1e-5,
    )


def test_merge_is_exact_associative_and_commutative():
    q, k, v = cache(3, 90, dtype=torch.float64)
    parts = [
        partial_attention(q, k[..., s : s + 30, :], v[..., s : s + 30, :]) for s in (0, 30, 60)
    ]
    whole = partial_attention(q, k, v)
    left = merge_attention_states(*merge_attention_states(*parts[0], *parts[1]), *parts[2])
    right = merge_attention_states(*parts[0], *merge_attention_states(*parts[1], *parts[2]))
    swapped = merge_attention_states(*parts[2], *merge_attention_states(*parts[1], *parts[0]))
    for out, lse in (left, right, swapped):
        torch.testing.assert_close(out, whole[0])
        torch.testing.assert_close(lse, whole[1])


def test_merge_with_an_empty_part_changes_nothing():
    # A part that saw no key (lse = -inf) weighs nothing, even when both parts are empty.
    q, k, v = cache(2, 10)
    out, lse = partial_attention(q, k, v)
    empty = (torch.zeros_like(out), torch.full_like(lse, float("-inf")))
    merged = merge_attention_states(out, lse, *empty)
    torch.testing.assert_close(merged[0], out)
    torch.testing.assert_close(merged[1], lse)
    both = merge_attention_states(*empty, *empty)
    assert torch.equal(both[0], empty[0]) and torch.equal(both[1], empty[1])


def test_forgetting_the_rescale_is_wrong():
    # The merge must weigh each part by its share exp(L_c - L): a plain average is not attention.
    q, k, v = cache(1, 64)
    a = partial_attention(q, k[..., :32, :], v[..., :32, :])
    b = partial_attention(q, k[..., 32:, :], v[..., 32:, :])
    want = F.scaled_dot_product_attention(q, k, v)
    assert not torch.allclose((a[0] + b[0]) / 2, want, atol=1e-3)
    torch.testing.assert_close(merge_attention_states(*a, *b)[0], want, atol=1e-5, rtol=1e-5)


def test_rows_without_keys_and_masked_chunks_are_zeros():
    q, k, v = cache(5, 2)  # bottom-right, n > m: queries 0..2 see no key
    out = flash_decoding(q, k, v, chunk_size=1, causal=True)
    assert torch.equal(out[..., :3, :], torch.zeros_like(out[..., :3, :]))
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, attn_mask=lower_right(5, 2))
    )
    mask = torch.zeros(5, 2, dtype=torch.bool)
    o, lse = partial_attention(q, k, v, mask=mask)
    assert torch.equal(o, torch.zeros_like(o)) and torch.isneginf(lse).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype):
    q, k, v = cache(1, 700, dtype=dtype)
    out = flash_decoding(q, k, v, chunk_size=100)
    assert out.dtype == dtype
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double()).to(dtype)
    torch.testing.assert_close(out, want)
    big = torch.full((1, 3, 8), 100.0, dtype=dtype)  # large but finite scores
    assert torch.isfinite(flash_decoding(big, big, big, chunk_size=2)).all()


def test_empty_cache_and_empty_queries():
    q, k, v = cache(2, 0)
    assert torch.equal(flash_decoding(q, k, v), torch.zeros(2, 4, 2, 8))
    q, k, v = cache(0, 5)
    assert flash_decoding(q, k, v, causal=True).shape == (2, 4, 0, 8)


def test_bad_input():
    q = torch.randn(1, 4)
    with pytest.raises(ValueError, match="chunk_size"):
        flash_decoding(q, q, q, chunk_size=0)
    with pytest.raises(TypeError, match="chunk_size"):
        flash_decoding(q, q, q, chunk_size=2.0)
    with pytest.raises(ValueError, match="device"):
        flash_decoding(q, q.to("meta"), q)
    with pytest.raises(ValueError, match="lse"):
        merge_attention_states(
            torch.zeros(2, 3), torch.zeros(3), torch.zeros(2, 3), torch.zeros(2)
        )
    with pytest.raises(TypeError, match="mask"):
        partial_attention(q, q, q, mask=torch.ones(1, 1))
