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
from torch.nn.attention.bias import causal_lower_right

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
    b = layer(seq[:, 4:], mask=causal_mask(3, 7, alignment="bottom_right"), cache=cache)
    assert_close(torch.cat([a, b], 1), full)
    # the top-left alignment is wrong here: new query 0 would see only key 0
    cache2 = KVCache()
    layer(seq[:, :4], mask="causal", cache=cache2)
    wrong = layer(seq[:, 4:], mask=causal_mask(3, 7, alignment="top_left"), cache=cache2)
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


# ---- decoding against a cache: bottom-right causal alignment ------------------------


def _torch_cached_reference(layer, x, start):
    """torch SDPA for the queries of positions ``start..`` against keys ``0..``, with
    torch's own bottom-right causal bias and ``enable_gqa``: what a call with a cache
    holding ``start`` positions must return."""
    d, d_kv = layer.d_model, layer.d_kv
    w, b = layer.qkv.weight, layer.qkv.bias
    q = split_heads(torch.nn.functional.linear(x[:, start:], w[:d], b[:d]), layer.num_heads)
    k, v = torch.nn.functional.linear(x, w[d:], b[d:]).split(d_kv, dim=-1)
    k, v = split_heads(k, layer.num_kv_heads), split_heads(v, layer.num_kv_heads)
    bias = causal_lower_right(q.shape[-2], k.shape[-2])
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)
    return layer.out(merge_heads(o))


@pytest.mark.parametrize("kernel", ["reference", "flash"])
@pytest.mark.parametrize("h,h_kv", [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize(
    "cached,n",
    [(0, 5), (3, 4), (5, 2), (6, 6), (7, 1)],  # n = m (empty cache), n < m, n = cached
)
def test_prefill_onto_cache_matches_torch_causal_lower_right(kernel, h, h_kv, cached, n):
    torch.manual_seed(100 * h + 10 * h_kv + cached)
    layer = MultiHeadAttention(8 * h, h, num_kv_heads=h_kv, kernel=kernel).eval()
    x = torch.randn(2, cached + n, 8 * h)
    cache = KVCache()
    with torch.no_grad():
        if cached:
            layer(x[:, :cached], mask="causal", cache=cache)
        y = layer(x[:, cached:], mask="causal", cache=cache)
        ref = _torch_cached_reference(layer, x, cached)
    assert len(cache) == cached + n and cache.k.shape[1] == h_kv
    assert_close(y, ref)
    if cached and n > 1:
        # top-left alignment (SDPA's is_causal) is a different answer, and a wrong one
        layer_cache = KVCache()
        with torch.no_grad():
            layer(x[:, :cached], cache=layer_cache)
            top_left = causal_mask(n, cached + n, alignment="top_left")
            layer.kernel = "reference"  # the flash kernel takes no explicit mask
            wrong = layer(x[:, cached:], mask=top_left, cache=layer_cache)
        assert (wrong - ref).abs().max() > 1e-3


@pytest.mark.parametrize("kernel", ["reference", "flash"])
@pytest.mark.parametrize("h_kv", [4, 2, 1])
def test_token_by_token_decoding_equals_one_causal_pass(kernel, h_kv):
    torch.manual_seed(h_kv)
    layer = MultiHeadAttention(16, 4, num_kv_heads=h_kv, kernel=kernel).eval()
    x = torch.randn(2, 9, 16)
    with torch.no_grad():
        full = layer(x, mask="causal")
        # prefill of 3, a chunk of 2 (bottom-right "causal"), then one token at a time
        cache = KVCache()
        parts = [layer(x[:, :3], mask="causal", cache=cache)]
        parts.append(layer(x[:, 3:5], mask="causal", cache=cache))
        parts += [layer(x[:, t : t + 1], mask="causal", cache=cache) for t in range(5, 9)]
        # and from the very first token on
        cache1 = KVCache()
        steps = [layer(x[:, t : t + 1], cache=cache1) for t in range(9)]
    assert_close(torch.cat(parts, dim=1), full)
    assert_close(torch.cat(steps, dim=1), full)
    assert_close(full, _torch_cached_reference(layer, x, 0))


def test_explicit_bottom_right_mask_equals_causal_string_and_weights_are_aligned():
    torch.manual_seed(3)
    layer = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    x = torch.randn(1, 7, 16)
    c1, c2 = KVCache(), KVCache()
    with torch.no_grad():
        layer(x[:, :4], cache=c1)
        layer(x[:, :4], cache=c2)
        y1, w1 = layer(x[:, 4:], mask="causal", cache=c1, return_weights=True)
        y2 = layer(x[:, 4:], mask=causal_mask(3, 7, alignment="bottom_right"), cache=c2)
    assert torch.equal(y1, y2)
    # new query i sees keys 0 .. 4 + i and nothing after
    i, j = torch.arange(3)[:, None], torch.arange(7)
    allowed = j <= i + 7 - 3
    assert torch.equal(w1[0] > 0, allowed.expand(4, 3, 7))
    torch.testing.assert_close(w1.sum(-1), torch.ones(1, 4, 3))


# ---- grouped-query attention without repeating K/V --------------------------------


def _repeated_kv_layer_output(layer, x, mask=None, context=None):
    """The former implementation: K/V heads copied to their query heads, then the
    book's attention function (the oracle for 'results unchanged')."""
    d, d_kv, group = layer.d_model, layer.d_kv, layer.num_heads // layer.num_kv_heads
    w, b = layer.qkv.weight, layer.qkv.bias
    src = x if context is None else context
    q = split_heads(torch.nn.functional.linear(x, w[:d], b[:d]), layer.num_heads)
    k, v = torch.nn.functional.linear(src, w[d:], b[d:]).split(d_kv, dim=-1)
    k = split_heads(k, layer.num_kv_heads).repeat_interleave(group, dim=1)
    v = split_heads(v, layer.num_kv_heads).repeat_interleave(group, dim=1)
    o, wts = selfattn.scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    return layer.out(merge_heads(o)), wts


@pytest.mark.parametrize("h,h_kv", [(4, 2), (6, 3), (8, 1), (8, 2)])
@pytest.mark.parametrize("mask_kind", ["none", "2d", "padding", "per_head", "per_head_row"])
def test_gqa_without_repeat_equals_repeated_kv_and_sdpa(h, h_kv, mask_kind):
    torch.manual_seed(h + h_kv)
    B, n, d = 3, 6, 4 * h
    layer = MultiHeadAttention(d, h, num_kv_heads=h_kv).eval()
    x = torch.randn(B, n, d)
    g = torch.Generator().manual_seed(7)
    mask = {
        "none": None,
        "2d": causal_mask(n),
        "padding": padding_mask([6, 3, 1], n),  # (B, 1, m)
        "per_head": (torch.rand(B, h, n, n, generator=g) > 0.4) | torch.eye(n, dtype=torch.bool),
        "per_head_row": torch.rand(B, h, 1, n, generator=g) > 0.5,  # one row for all queries
    }[mask_kind]
    with torch.no_grad():
        y, w = layer(x, mask=mask, return_weights=True)
        mask4 = None if mask is None else (mask.unsqueeze(1) if mask.dim() == 3 else mask)
        y_rep, w_rep = _repeated_kv_layer_output(layer, x, mask4)
    assert w.shape == (B, h, n, n)
    assert_close(y, y_rep, 1e-6)
    assert_close(w, w_rep, 1e-6)
    if mask_kind != "per_head_row":  # rows with no key: torch gives NaN, we give zeros
        ref = _gqa_reference(layer, x) if mask is None else None
        if ref is None:
            d_, dkv = layer.d_model, layer.d_kv
            q = split_heads(torch.nn.functional.linear(x, layer.qkv.weight[:d_]), h)
            q = q + split_heads(layer.qkv.bias[:d_].expand(B, n, d_), h)
            k, v = layer.qkv(x)[..., d_:].split(dkv, -1)
            o = torch.nn.functional.scaled_dot_product_attention(
                q, split_heads(k, h_kv), split_heads(v, h_kv), attn_mask=mask4, enable_gqa=True
            )
            ref = layer.out(merge_heads(o))
        assert_close(y, ref)


def test_gqa_decode_passes_the_stored_kv_heads_uncopied(monkeypatch):
    """The attention function gets the cache's own K/V tensors (num_kv_heads heads, same
    storage) and queries with the same batch shape, so no product broadcasts (torch's
    matmul would copy a broadcast K)."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(32, 8, num_kv_heads=2).eval()
    cache = KVCache()
    seen = []
    real = selfattn.multihead.attend

    def spy(a):
        seen.append((a.q.shape, a.k, a.v, None if a.mask is None else a.mask.shape))
        return real(a)

    monkeypatch.setattr(selfattn.multihead, "attend", spy)
    with torch.no_grad():
        layer(torch.randn(2, 5, 32), mask="causal", cache=cache)
        layer(torch.randn(2, 1, 32), mask="causal", cache=cache)
    (q0, k0, _, m0), (q1, k1, v1, m1) = seen
    assert q0 == (2, 2, 4 * 5, 4) and m0 == (1, 4 * 5, 5)  # 4 heads' rows per K/V head
    assert q1 == (2, 2, 4, 4) and k1.shape == (2, 2, 6, 4) and m1 == (1, 1, 6)
    assert k1 is cache.k and v1 is cache.v  # no copy of the cache


def test_gqa_decode_allocates_nothing_of_the_repeated_size():
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    h, h_kv, m, d_head = 8, 1, 1024, 16
    layer = MultiHeadAttention(h * d_head, h, num_kv_heads=h_kv).eval()
    cache = KVCache()
    with torch.no_grad():
        layer(torch.randn(1, m, h * d_head), cache=cache)
        repeated_bytes = h * (m + 1) * d_head * 4  # K with one head per query head

        def largest_allocation(fn):
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                fn()
            return max(e.cpu_memory_usage for e in prof.events())

        decode = largest_allocation(lambda: layer(torch.randn(1, 1, h * d_head), cache=cache))
        control = largest_allocation(lambda: cache.k.repeat_interleave(h, dim=1))
    assert control >= repeated_bytes  # the measurement sees a repeat when there is one
    assert decode < repeated_bytes / 2, (decode, repeated_bytes)


def test_gqa_training_gradients_match_repeated_kv():
    torch.manual_seed(5)
    layer = MultiHeadAttention(24, 6, num_kv_heads=2)
    x = torch.randn(2, 5, 24, requires_grad=True)
    layer(x, mask="causal").square().sum().backward()
    grads = [x.grad.clone(), layer.qkv.weight.grad.clone()]
    x.grad, layer.qkv.weight.grad = None, None
    _repeated_kv_layer_output(layer, x, causal_mask(5))[0].square().sum().backward()
    torch.testing.assert_close(grads[0], x.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grads[1], layer.qkv.weight.grad, atol=1e-5, rtol=1e-5)
    layer.dropout = 0.5
    torch.manual_seed(0)
    a = layer(x, mask="causal")
    assert not torch.allclose(a, layer(x, mask="causal"))  # dropout acts in training
    assert torch.isfinite(a).all()


def test_flash_kernel_trains_and_refuses_what_it_cannot_do():
    torch.manual_seed(2)
    ref = MultiHeadAttention(24, 6, num_kv_heads=3)
    flash = MultiHeadAttention(24, 6, num_kv_heads=3, kernel="flash")
    flash.load_state_dict(ref.state_dict())
    assert "kernel='flash'" in repr(flash) and "kernel" not in repr(ref)
    assert MultiHeadAttention(24, 6, kernel="flash").grouped(3).kernel == "flash"
    x = torch.randn(2, 7, 24, requires_grad=True)
    for layer in (ref, flash):
        layer(x, mask="causal").square().sum().backward()
    torch.testing.assert_close(flash(x, mask="causal"), ref(x, mask="causal"))
    torch.testing.assert_close(flash.qkv.weight.grad, ref.qkv.weight.grad, atol=1e-5, rtol=1e-5)
    ctx = torch.randn(2, 5, 24)
    with torch.no_grad():
        torch.testing.assert_close(flash(x, context=ctx), ref(x, context=ctx))
    with pytest.raises(ValueError, match="kernel must be one of"):
        MultiHeadAttention(24, 6, kernel="triton")
    with pytest.raises(ValueError, match="kernel='flash' takes mask=None or 'causal'"):
        flash(x, mask=causal_mask(7))
    with pytest.raises(ValueError, match="return_weights"):
        flash(x, return_weights=True)
    flash.dropout = 0.1
    with pytest.raises(ValueError, match="dropout"):
        flash(x)
    cache = KVCache()
    flash.dropout, flash.kernel = 0.0, "flsh"
    with pytest.raises(ValueError, match="kernel must be one of"):
        flash(x, cache=cache)
    assert len(cache) == 0  # a refused call leaves the cache empty


@pytest.mark.parametrize("num_kv_heads", [None, 3, 1])
def test_torch_kernel_layer_matches_the_reference(num_kv_heads):
    torch.manual_seed(4)
    ref = MultiHeadAttention(24, 6, num_kv_heads=num_kv_heads)
    fast = MultiHeadAttention(24, 6, num_kv_heads=num_kv_heads, kernel="torch")
    fast.load_state_dict(ref.state_dict())
    x = torch.randn(2, 7, 24, requires_grad=True)
    pad = padding_mask(torch.tensor([7, 4]), 7)
    for mask in (None, "causal", pad):
        torch.testing.assert_close(fast(x, mask=mask), ref(x, mask=mask), atol=1e-5, rtol=1e-5)
    for layer in (ref, fast):
        layer(x, mask="causal").square().sum().backward()
    torch.testing.assert_close(fast.qkv.weight.grad, ref.qkv.weight.grad, atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # decoding against a cache: bottom-right causal, n != m
        caches = [KVCache(), KVCache()]
        for layer, cache in zip((ref, fast), caches):
            layer(x[:, :5], mask="causal", cache=cache)
        torch.testing.assert_close(
            fast(x[:, 5:], mask="causal", cache=caches[1]),
            ref(x[:, 5:], mask="causal", cache=caches[0]),
            atol=1e-5,
            rtol=1e-5,
        )
    with pytest.raises(ValueError, match="kernel='torch' returns no weights"):
        fast(x, return_weights=True)


def test_library_sdpa_accepts_broadcast_kv_heads_like_enable_gqa():
    # The other way to share K/V heads: queries (B, h_kv, group, n, d) against K/V
    # (B, h_kv, 1, m, d). The book's function broadcasts it correctly, but torch.matmul
    # copies a broadcast operand to the full batch, so the layer stacks rows instead.
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 5, 4, generator=g)
    k, v = torch.randn(2, 2, 7, 4, generator=g), torch.randn(2, 2, 7, 4, generator=g)
    mask = causal_mask(5, 7, alignment="bottom_right")
    out = selfattn.scaled_dot_product_attention(
        q.reshape(2, 2, 4, 5, 4), k.unsqueeze(2), v.unsqueeze(2), mask
    ).reshape(2, 8, 5, 4)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=causal_lower_right(5, 7), enable_gqa=True
    )
    assert_close(out, ref)


# ---- positional hooks: rope= and score_bias= ------------------------------------------


def _by_hand(layer, x, mask_or_bias):
    """The layer written out: project, split, rotate, one attention call, merge, project."""
    from selfattn import scaled_dot_product_attention

    q, k, v = (split_heads(t, layer.num_heads) for t in layer.qkv(x).split(layer.d_model, -1))
    if layer.rope is not None:
        q, k = layer.rope(q, k)
    return layer.out(merge_heads(scaled_dot_product_attention(q, k, v, mask_or_bias)))


def test_rope_hook_rotates_queries_and_keys_and_decodes_with_the_cache():
    from selfattn.positional import RotaryEmbedding

    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, rope=RotaryEmbedding(4)).eval()
    x = torch.randn(2, 7, 16)
    full = layer(x, mask="causal")
    torch.testing.assert_close(full, _by_hand(layer, x, causal_mask(7)), atol=TOL, rtol=TOL)
    plain = MultiHeadAttention(16, 4).eval()
    plain.load_state_dict(layer.state_dict())
    assert (plain(x, mask="causal") - full).abs().max() > 1e-3  # the rotation changed something
    cache = KVCache()
    steps = [layer(x[:, :3], mask="causal", cache=cache)]
    steps += [layer(x[:, t : t + 1], cache=cache) for t in range(3, 7)]
    # positions continue after the cached ones: decoding reproduces the full pass
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=TOL, rtol=TOL)


def test_score_bias_is_added_to_the_scores_and_follows_the_cache():
    from functools import partial

    from selfattn.positional import RelativePositionBias, alibi_bias

    torch.manual_seed(1)
    layer = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    alibi = alibi_bias(4, 6)
    expected = _by_hand(layer, x, alibi.masked_fill(~causal_mask(6), float("-inf")))
    for bias in (alibi, partial(alibi_bias, 4)):
        got = layer(x, mask="causal", score_bias=bias)
        torch.testing.assert_close(got, expected, atol=TOL, rtol=TOL)
    float_mask = torch.randn(6, 6)
    torch.testing.assert_close(
        layer(x, mask=float_mask, score_bias=alibi),
        _by_hand(layer, x, alibi + float_mask),
        atol=TOL,
        rtol=TOL,
    )
    rel = RelativePositionBias(4, bidirectional=False)
    with torch.no_grad():
        rel.bias.weight.normal_()
    full = layer(x, mask="causal", score_bias=rel)
    assert (full - layer(x, mask="causal")).abs().max() > 1e-3
    cache = KVCache()
    steps = [layer(x[:, :2], mask="causal", score_bias=rel, cache=cache)]
    steps += [layer(x[:, t : t + 1], score_bias=rel, cache=cache) for t in range(2, 6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=TOL, rtol=TOL)


def test_positional_hooks_reject_what_they_cannot_do():
    from selfattn.positional import RotaryEmbedding

    x = torch.randn(1, 5, 16)
    with pytest.raises(ValueError, match="d_head=4"):
        MultiHeadAttention(16, 4, rope=RotaryEmbedding(8))
    with pytest.raises(TypeError, match="rope"):
        MultiHeadAttention(16, 4, rope="rope")
    with pytest.raises(ValueError, match="cross"):
        MultiHeadAttention(16, 4, rope=RotaryEmbedding(4))(x, context=x)
    layer = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match="score_bias"):
        layer(x, score_bias=torch.zeros(4, 5, 6))
    with pytest.raises(TypeError, match="score_bias"):
        layer(x, score_bias=torch.zeros(4, 5, 5, dtype=torch.bool))
    layer.kernel = "flash"
    with pytest.raises(ValueError, match="score_bias"):
        layer(x, score_bias=torch.zeros(4, 5, 5))


def test_heads_mask_inserts_the_head_axis_for_one_mask_per_sequence():
    from selfattn import heads_mask

    assert heads_mask(torch.ones(2, 1, 5, dtype=torch.bool)).shape == (2, 1, 1, 5)
    assert heads_mask(torch.ones(4, 5)).shape == (4, 5)
    assert heads_mask(torch.ones(2, 3, 4, 5)).shape == (2, 3, 4, 5)
    with pytest.raises(ValueError, match="2-D"):
        heads_mask(torch.ones(1, 1, 1, 4, 5))
    with pytest.raises(TypeError, match="mask"):
        heads_mask([[True]])


def test_dropout_in_training_is_the_attention_function_s():
    from selfattn import scaled_dot_product_attention

    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, dropout=0.3).train()
    x = torch.randn(2, 5, 16)
    torch.manual_seed(1)
    got = layer(x, mask="causal")
    torch.manual_seed(1)
    q, k, v = (split_heads(t, 4) for t in layer.qkv(x).split(16, -1))
    attended = scaled_dot_product_attention(q, k, v, causal_mask(5), dropout=0.3)
    torch.testing.assert_close(got, layer.out(merge_heads(attended)))


@pytest.mark.parametrize("kernel", ["reference", "flash"])
def test_temperature_divides_the_scaled_scores(kernel):
    """temperature T: softmax(q k^T / (sqrt(d_head) T)), checked against torch's SDPA."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(12, 3, kernel=kernel).double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    q, k, v = (split_heads(t, 3) for t in layer.qkv(x).split(12, dim=-1))
    for t in (0.25, 1.0, 4.0):
        ref = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=1 / (2.0 * t)
        )
        got = layer(x, mask="causal", temperature=t)
        torch.testing.assert_close(got, layer.out(merge_heads(ref)))
    assert torch.equal(layer(x, temperature=1.0), layer(x))
    with pytest.raises(ValueError, match="temperature must be"):
        layer(x, temperature=0.0)
    with pytest.raises(TypeError, match="temperature must be a real number"):
        layer(x, temperature="hot")


def test_grouped_keeps_the_rotary_embedding():
    # Bug (issue 35): grouped() built its copy without `rope`, so the grouped layer lost
    # its positions. grouped(num_heads) is an exact copy, rotation included.
    torch.manual_seed(0)
    layer = MultiHeadAttention(24, 6, rope=selfattn.RotaryEmbedding(4)).eval()
    x = torch.randn(2, 7, 24)
    copy = layer.grouped(6)
    assert copy.rope is not None
    torch.testing.assert_close(copy(x, mask="causal"), layer(x, mask="causal"))
    gqa = layer.grouped(2)
    assert gqa.rope is not None and gqa.rope.d_head == 4
    # and it rotates: decoding against a cache gives the full pass's last position
    cache = KVCache()
    with torch.no_grad():
        gqa(x[:, :6], mask="causal", cache=cache)
        torch.testing.assert_close(
            gqa(x[:, 6:], mask="causal", cache=cache), gqa(x, mask="causal")[:, 6:]
        )
