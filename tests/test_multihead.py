"""MultiHeadAttention against torch.nn.MultiheadAttention (same weights), and the KV cache against
recomputation."""

import pytest
import selfattn
import torch
from hypothesis import given
from hypothesis import strategies as st
from selfattn import (
    KVCache,
    MultiHeadAttention,
    attention_stack,
    causal_mask,
    generate,
    kv_cache_bytes,
    merge_heads,
    mha_flops,
    mha_param_count,
    padding_mask,
    split_heads,
)
from torch import nn

TOL = 1e-5  # float32 agreement with nn.MultiheadAttention promised by the library


def pair(d=16, h=4, bias=True, seed=0):
    """Our layer and torch's, holding the same weights."""
    torch.manual_seed(seed)
    ours = MultiHeadAttention(d, h, bias=bias).eval()
    return ours, ours.to_torch().eval()


def torch_mha(mha, x, ctx=None, mask=None, key_padding=None):
    """torch's layer in our conventions: bool masks flipped (torch: True = ignore), per-head
    weights."""
    ctx = x if ctx is None else ctx
    attn_mask = None if mask is None else ~mask
    kpm = None if key_padding is None else ~key_padding
    return mha(
        x,
        ctx,
        ctx,
        attn_mask=attn_mask,
        key_padding_mask=kpm,
        need_weights=True,
        average_attn_weights=False,
    )


def assert_close(a, b, tol=TOL):
    diff = (a - b).abs().max().item()
    assert diff <= tol, f"max difference {diff:.3g} exceeds {tol:g}"


# ---- against nn.MultiheadAttention ----------------------------------------------


@given(
    st.integers(1, 3),  # B
    st.integers(1, 9),  # n
    st.sampled_from([(8, 1), (8, 2), (12, 3), (16, 4)]),  # (d, h)
    st.sampled_from(["none", "causal", "padding", "both", "float"]),
    st.booleans(),  # bias
    st.integers(0, 2**31 - 1),
)
def test_self_attention_matches_torch(B, n, dh, mask_kind, bias, seed):
    d, h = dh
    ours, theirs = pair(d, h, bias, seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, n, d, generator=g)
    lengths = torch.randint(
        1, n + 1, (B,), generator=g
    )  # >= 1 so no row is fully masked (torch gives NaN)
    mask, key_padding, float_mask = None, None, None
    if mask_kind in ("causal", "both"):
        mask = causal_mask(n)
    if mask_kind in ("padding", "both"):
        key_padding = padding_mask(lengths, n)[:, 0]  # (B, m)
    y_ref, w_ref = torch_mha(theirs, x, mask=mask, key_padding=key_padding)
    if mask_kind == "float":
        float_mask = torch.randn(n, n, generator=g)
        y_ref, w_ref = theirs(x, x, x, attn_mask=float_mask, average_attn_weights=False)
    ours_mask = mask
    if key_padding is not None:
        pm = key_padding[:, None, :]  # (B, 1, m): one mask per sequence
        ours_mask = pm if mask is None else (pm & mask)
    if float_mask is not None:
        ours_mask = float_mask
    y, w = ours(x, mask=ours_mask, return_weights=True)
    assert not torch.isnan(y_ref).any()  # lengths >= 1: every query keeps key 0
    assert y.shape == (B, n, d) and w.shape == (B, h, n, n)
    assert_close(y, y_ref)
    assert_close(w, w_ref)


@given(
    st.integers(1, 3),
    st.integers(1, 7),
    st.integers(1, 9),
    st.booleans(),
    st.integers(0, 2**31 - 1),
)
def test_cross_attention_matches_torch(B, n, m, with_mask, seed):
    ours, theirs = pair(16, 4, True, seed)
    g = torch.Generator().manual_seed(seed)
    x, ctx = torch.randn(B, n, 16, generator=g), torch.randn(B, m, 16, generator=g)
    key_padding = (
        padding_mask(torch.randint(1, m + 1, (B,), generator=g), m)[:, 0] if with_mask else None
    )
    y_ref, w_ref = torch_mha(theirs, x, ctx, key_padding=key_padding)
    y, w = ours(
        x,
        context=ctx,
        mask=None if key_padding is None else key_padding[:, None, :],
        return_weights=True,
    )
    assert y.shape == (B, n, 16) and w.shape == (B, 4, n, m)
    assert_close(y, y_ref)
    assert_close(w, w_ref)


def test_n_equals_one_and_unbatched():
    ours, theirs = pair()
    x = torch.randn(2, 1, 16)
    assert_close(ours(x, mask="causal"), torch_mha(theirs, x)[0])
    x2 = torch.randn(5, 16)  # unbatched (n, d)
    y = ours(x2, mask=causal_mask(5))
    assert y.shape == (5, 16)
    assert_close(y, torch_mha(theirs, x2[None], mask=causal_mask(5))[0][0])


def test_fully_masked_row_gives_bias_not_nan_where_torch_gives_nan():
    ours, theirs = pair()
    x = torch.randn(2, 4, 16)
    key_padding = padding_mask([4, 0], 4)  # the second sequence has no real token at all
    y, w = ours(x, mask=key_padding, return_weights=True)
    y_ref, _ = torch_mha(theirs, x, key_padding=key_padding[:, 0])
    assert torch.isnan(y_ref[1]).all()  # torch: 0/0
    assert torch.isfinite(y).all()
    assert torch.equal(w[1], torch.zeros_like(w[1]))
    torch.testing.assert_close(y[1], ours.out.bias.expand(4, 16))  # zero heads, then W_O's bias
    assert_close(y[0], y_ref[0])


def test_from_torch_round_trip_and_fused_rows_are_q_k_v():
    torch.manual_seed(1)
    theirs = nn.MultiheadAttention(12, 3, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(theirs)
    assert torch.equal(ours.qkv.weight, theirs.in_proj_weight)
    x = torch.randn(2, 5, 12)
    assert_close(ours(x), theirs(x, x, x)[0])
    # rows [0:d] of qkv make the queries: compare with a hand-made single projection
    q = x @ ours.qkv.weight[:12].T + ours.qkv.bias[:12]
    torch.testing.assert_close(split_heads(q, 3), split_heads(ours.qkv(x)[..., :12], 3))


def test_split_merge_heads():
    x = torch.randn(2, 5, 12)
    s = split_heads(x, 3)
    assert s.shape == (2, 3, 5, 4)
    torch.testing.assert_close(s[:, 1], x[..., 4:8])  # head 1 owns features 4..7
    assert torch.equal(merge_heads(s), x)
    with pytest.raises(ValueError, match="not divisible"):
        split_heads(x, 5)


def test_mask_shapes_2d_3d_4d_agree():
    ours, _ = pair()
    x = torch.randn(2, 5, 16)
    pm = padding_mask([5, 3], 5)  # (B, 1, m)
    full = pm & causal_mask(5)  # (B, n, m)
    y3 = ours(x, mask=full)
    y4 = ours(x, mask=full[:, None].expand(2, 4, 5, 5))
    torch.testing.assert_close(y3, y4)
    torch.testing.assert_close(ours(x, mask="causal"), ours(x, mask=causal_mask(5)))


def test_dropout_only_in_training():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(2, 6, 16)
    layer.eval()
    torch.testing.assert_close(layer(x), layer(x))
    layer.train()
    assert not torch.allclose(layer(x), layer(x))


def test_bad_input():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)
    with pytest.raises(TypeError, match="int"):
        MultiHeadAttention(8.0, 2)
    with pytest.raises(ValueError, match="dropout"):
        MultiHeadAttention(8, 2, dropout=1.0)
    layer = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"d_model=8.*\(2, 3, 6\)"):
        layer(torch.randn(2, 3, 6))
    with pytest.raises(TypeError, match="floating-point"):
        layer(torch.ones(2, 3, 8, dtype=torch.long))
    with pytest.raises(TypeError, match="float64"):
        layer(torch.randn(2, 3, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="context must have shape"):
        layer(torch.randn(2, 3, 8), context=torch.randn(3, 4, 8))
    with pytest.raises(ValueError, match="does not broadcast"):
        layer(torch.randn(2, 3, 8), mask=torch.ones(4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="2-D.*3-D.*4-D"):
        layer(torch.randn(2, 3, 8), mask=torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="'causal'"):
        layer(torch.randn(2, 3, 8), mask="causl")
    with pytest.raises(ValueError, match="cross-attention"):
        layer(torch.randn(2, 3, 8), context=torch.randn(2, 4, 8), mask="causal")
    with pytest.raises(TypeError, match="KVCache"):
        layer(torch.randn(2, 3, 8), cache={})


def test_3d_mask_never_broadcasts_over_heads():
    # B == h == 2: a (B, 1, m) mask read as (h, 1, m) would silently mask by head instead.
    layer = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 3, 8)
    pm = padding_mask([3, 1], 3)
    y = layer(x, mask=pm)
    y1 = layer(x[1:2, :1])  # sequence 1 has one real token; its queries all see only key 0
    torch.testing.assert_close(y[1], y1[0].expand(3, 8))


# ---- KV cache ------------------------------------------------------------------


@pytest.mark.parametrize("prompt_len", [1, 3])
def test_cache_decoding_equals_recomputation(prompt_len):
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4).eval()
    seq = torch.randn(2, prompt_len + 6, 16)
    full = layer(seq, mask="causal")
    cache = KVCache()
    parts = [layer(seq[:, :prompt_len], mask="causal", cache=cache)]
    for t in range(prompt_len, seq.shape[1]):
        parts.append(
            layer(seq[:, t : t + 1], cache=cache)
        )  # n = 1 sees every cached key: no mask needed
    assert len(cache) == seq.shape[1]
    assert_close(torch.cat(parts, dim=1), full)


def test_cache_chunked_prefill_needs_bottom_right_mask():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4).eval()
    seq = torch.randn(1, 7, 16)
    full = layer(seq, mask="causal")
    cache = KVCache()
    a = layer(seq[:, :4], mask="causal", cache=cache)
    b = layer(seq[:, 4:], mask=causal_mask(3, 7, align="bottom_right"), cache=cache)
    assert_close(torch.cat([a, b], 1), full)
    # the top-left alignment is wrong here: new query 0 would see only key 0
    cache2 = KVCache()
    layer(seq[:, :4], mask="causal", cache=cache2)
    wrong = layer(seq[:, 4:], mask=causal_mask(3, 7, align="top_left"), cache=cache2)
    assert (wrong - full[:, 4:]).abs().max() > 1e-3


def test_cross_attention_cache_reuses_context():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4).eval()
    x, ctx = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    full = layer(x, context=ctx)
    cache = KVCache()
    steps = [layer(x[:, :1], context=ctx, cache=cache)] + [
        layer(x[:, t : t + 1], cache=cache) for t in range(1, 5)
    ]
    assert len(cache) == 7 and cache.cross
    assert_close(torch.cat(steps, 1), full)
    with pytest.raises(ValueError, match="needs context"):
        empty = KVCache()
        empty.cross = True
        layer(x[:, :1], cache=empty)


def test_cache_errors_and_size():
    layer = MultiHeadAttention(16, 4).eval()
    cache = KVCache()
    assert len(cache) == 0 and cache.nbytes == 0
    layer(torch.randn(2, 3, 16), cache=cache)
    assert cache.k.shape == (2, 4, 3, 4)
    assert (
        cache.nbytes == kv_cache_bytes(1, 4, 4, 3, torch.float32, batch=2) == 2 * 4 * 4 * 3 * 4 * 2
    )
    with pytest.raises(ValueError, match="batch size 2"):
        layer(torch.randn(3, 1, 16), cache=cache)
    with pytest.raises(ValueError, match="number of keys m=4"):
        layer(torch.randn(2, 1, 16), cache=cache, mask=causal_mask(1, 1))  # must cover all 4 keys
    assert len(cache) == 3  # a refused call leaves the cache as it was
    with pytest.raises(ValueError, match="self-attention layer's keys"):
        layer(torch.randn(2, 1, 16), context=torch.randn(2, 3, 16), cache=cache)
    with pytest.raises(ValueError, match="cannot append"):
        cache.append(torch.randn(2, 4, 1, 8), torch.randn(2, 4, 1, 8))
    cache.reset()
    assert len(cache) == 0


def test_generate_with_and_without_cache_agree():
    layers = attention_stack(2, 16, 4, seed=3)
    prompt = torch.randn(2, 3, 16)
    fast = generate(layers, prompt, 12, use_cache=True)
    slow = generate(layers, prompt, 12, use_cache=False)
    assert fast.shape == (2, 12, 16)
    assert_close(
        fast, slow, tol=1e-4
    )  # 12 autoregressive steps through 2 layers compound rounding
    assert torch.equal(attention_stack(2, 16, 4, seed=3)[0].qkv.weight, layers[0].qkv.weight)
    with pytest.raises(ValueError, match="steps"):
        generate(layers, prompt, 0)
    with pytest.raises(ValueError, match="prompt"):
        generate(layers, torch.randn(3, 16), 2)


# ---- cost formulas ------------------------------------------------------------------


@pytest.mark.parametrize("d,h", [(8, 1), (64, 8), (96, 12)])
def test_param_count_formula(d, h):
    for bias in (True, False):
        layer = MultiHeadAttention(d, h, bias=bias)
        assert sum(p.numel() for p in layer.parameters()) == mha_param_count(d, bias=bias)


def test_flops_formula():
    assert mha_flops(10, 8) == 8 * 10 * 64 + 4 * 100 * 8
    assert mha_flops(10, 8, m=10) == mha_flops(10, 8)
    assert mha_flops(1, 4, m=5) == 4 * 16 + 4 * 5 * 16 + 4 * 5 * 4


def test_exported():
    for name in ("MultiHeadAttention", "KVCache", "generate", "attention_stack"):
        assert hasattr(selfattn, name)


@pytest.mark.parametrize(
    "dtype,tol", [(torch.float16, 1e-2), (torch.bfloat16, 5e-2), (torch.float64, 1e-12)]
)
def test_low_and_high_precision_against_float64(dtype, tol):
    # The same layer in float64 is the oracle; half precision must stay close and never give NaN,
    # including a fully masked sequence (the mask fills with -inf, which float16 represents).
    ours, _ = pair(16, 4)
    x = torch.randn(2, 6, 16)
    mask = padding_mask([6, 0], 6) & causal_mask(6)
    ref = ours.double()(x.double(), mask=mask)
    low = ours.to(dtype)(x.to(dtype), mask=mask)
    assert low.dtype == dtype and torch.isfinite(low).all()
    assert (low.double() - ref).abs().max().item() <= tol


# ---- grouped-query and multi-query attention (num_kv_heads) -------------------------


def _gqa_reference(layer, x, context=None, causal=False):
    """torch SDPA with enable_gqa=True on the layer's own projections."""
    d, d_kv = layer.d_model, layer.d_kv
    w, b = layer.qkv.weight, layer.qkv.bias
    src = x if context is None else context
    q = torch.nn.functional.linear(x, w[:d], b[:d])
    k, v = torch.nn.functional.linear(src, w[d:], b[d:]).split(d_kv, dim=-1)
    q = split_heads(q, layer.num_heads)
    k, v = split_heads(k, layer.num_kv_heads), split_heads(v, layer.num_kv_heads)
    o = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=causal, enable_gqa=True
    )
    return layer.out(merge_heads(o))


@pytest.mark.parametrize("h,h_kv", [(4, 4), (4, 2), (4, 1), (6, 3)])
def test_gqa_matches_sdpa_enable_gqa(h, h_kv):
    torch.manual_seed(h * 10 + h_kv)
    layer = MultiHeadAttention(6 * h, h, num_kv_heads=h_kv).eval()
    x, ctx = torch.randn(2, 5, 6 * h), torch.randn(2, 7, 6 * h)
    with torch.no_grad():
        torch.testing.assert_close(layer(x, mask="causal"), _gqa_reference(layer, x, causal=True))
        torch.testing.assert_close(layer(x, context=ctx), _gqa_reference(layer, x, ctx))
    assert layer.qkv.out_features == 6 * h + 2 * 6 * h_kv
    params = sum(p.numel() for p in layer.parameters())
    assert params == mha_param_count(6 * h, num_heads=h, num_kv_heads=h_kv)
    no_bias = MultiHeadAttention(6 * h, h, num_kv_heads=h_kv, bias=False)
    assert sum(p.numel() for p in no_bias.parameters()) == mha_param_count(
        6 * h, bias=False, num_heads=h, num_kv_heads=h_kv
    )
    assert mha_flops(5, 6 * h, num_heads=h, num_kv_heads=h) == mha_flops(5, 6 * h)
    assert mha_flops(5, 6 * h, 7, num_heads=h, num_kv_heads=h) == mha_flops(5, 6 * h, 7)


def test_gqa_equals_mha_with_repeated_kv_heads_and_grouped_pools_them():
    torch.manual_seed(0)
    gqa = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    mha = MultiHeadAttention(16, 4).eval()
    with torch.no_grad():
        w, b = gqa.qkv.weight, gqa.qkv.bias

        def repeat(t):  # (h_kv * d_head, ...) -> (h * d_head, ...): head j serves 2j, 2j+1
            return t.reshape(2, 1, 4, *t.shape[1:]).expand(2, 2, 4, *t.shape[1:]).flatten(0, 2)

        mha.qkv.weight.copy_(torch.cat([w[:16], repeat(w[16:24]), repeat(w[24:])]))
        mha.qkv.bias.copy_(torch.cat([b[:16], repeat(b[16:24]), repeat(b[24:])]))
        mha.out.load_state_dict(gqa.out.state_dict())
        x = torch.randn(3, 6, 16)
        torch.testing.assert_close(mha(x, mask="causal"), gqa(x, mask="causal"))
        # heads equal within each group: mean-pooling loses nothing
        pooled = mha.grouped(2)
        torch.testing.assert_close(pooled.qkv.weight, gqa.qkv.weight)
        torch.testing.assert_close(pooled(x, mask="causal"), gqa(x, mask="causal"))
        # grouped(h) is an exact copy; grouped(1) is multi-query attention
        torch.testing.assert_close(mha.grouped(4)(x), mha(x))
        mqa = mha.grouped(1)
        assert mqa.num_kv_heads == 1 and mqa.qkv.out_features == 16 + 2 * 4
        k_rows = mha.qkv.weight[16:32].reshape(4, 4, 16)
        torch.testing.assert_close(mqa.qkv.weight[16:20], k_rows.mean(0))


def test_gqa_cache_stores_only_kv_heads_and_decodes_like_recomputation():
    torch.manual_seed(1)
    layer = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    x = torch.randn(2, 7, 16)
    cache = KVCache()
    with torch.no_grad():
        parts = [layer(x[:, :4], mask="causal", cache=cache)]
        parts += [layer(x[:, t : t + 1], mask="causal", cache=cache) for t in range(4, 7)]
        full = layer(x, mask="causal")
    torch.testing.assert_close(torch.cat(parts, dim=1), full)
    assert cache.k.shape == (2, 2, 7, 4)
    assert cache.nbytes == kv_cache_bytes(1, 4, 4, 7, batch=2, num_kv_heads=2)
    assert kv_cache_bytes(1, 4, 4, 7, batch=2) == 2 * cache.nbytes
    layers = attention_stack(2, 16, 4, seed=0, num_kv_heads=1)
    prompt = torch.randn(1, 3, 16)
    torch.testing.assert_close(
        generate(layers, prompt, 5, use_cache=True),
        generate(layers, prompt, 5, use_cache=False),
        atol=1e-5,
        rtol=1e-5,
    )


def test_gqa_bad_input():
    with pytest.raises(ValueError, match="num_kv_heads=3 must divide num_heads=4"):
        MultiHeadAttention(16, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="num_kv_heads must be >= 1"):
        MultiHeadAttention(16, 4, num_kv_heads=0)
    with pytest.raises(TypeError, match="num_kv_heads must be an int"):
        MultiHeadAttention(16, 4, num_kv_heads=2.0)
    with pytest.raises(ValueError, match="no grouped-query form"):
        MultiHeadAttention(16, 4, num_kv_heads=2).to_torch()
    with pytest.raises(ValueError, match="already has num_kv_heads=2"):
        MultiHeadAttention(16, 4, num_kv_heads=2).grouped(1)
    with pytest.raises(ValueError, match="num_kv_heads needs num_heads"):
        mha_param_count(16, num_kv_heads=2)
    with pytest.raises(ValueError, match="num_kv_heads=3 must divide num_heads=4"):
        kv_cache_bytes(1, 4, 8, 10, num_kv_heads=3)
    assert "num_kv_heads=2" in repr(MultiHeadAttention(16, 4, num_kv_heads=2))
