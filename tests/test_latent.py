"""Multi-head latent attention (selfattn.latent) against its written formula and DeepSeek-V3."""

from __future__ import annotations

import math

import pytest
import torch
from selfattn.latent import LatentCache, MultiHeadLatentAttention, mla_cache_bytes_per_token
from selfattn.positional import apply_rope


def oracle(layer: MultiHeadLatentAttention, x: torch.Tensor, mask: torch.Tensor | None):
    """The formula, head by head, position by position's matrices, in float64."""
    p = {k: v.double() for k, v in layer.state_dict().items()}
    x = x.double()
    B, n, _ = x.shape
    h, dn, dv, r, R = layer.num_heads, layer.d_nope, layer.d_v, layer.rope_dim, layer.kv_rank

    def rms(t, w, eps):
        return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps) * w

    eps = layer.kv_norm.eps
    if layer.q_rank is None:
        q = x @ p["q_proj.weight"].T
        if "q_proj.bias" in p:
            q = q + p["q_proj.bias"]
    else:
        qa = x @ p["q_a.weight"].T + (p["q_a.bias"] if "q_a.bias" in p else 0)
        q = rms(qa, p["q_norm.weight"], layer.q_norm.eps) @ p["q_b.weight"].T
    ckv = x @ p["kv_a.weight"].T + (p["kv_a.bias"] if "kv_a.bias" in p else 0)
    c, kr = ckv[..., :R], ckv[..., R:]
    c = rms(c, p["kv_norm.weight"], eps)
    pos = torch.arange(n)
    kr = apply_rope(kr, pos, layout=layer.rope.layout, base=layer.rope.base)
    w = p["kv_b.weight"].view(h, dn + dv, R)
    outs = []
    for i in range(h):
        qi = q[..., i * (dn + r) : (i + 1) * (dn + r)]
        qi = torch.cat([qi[..., :dn], apply_rope(qi[..., dn:], pos, layout=layer.rope.layout)], -1)
        ki = torch.cat([c @ w[i, :dn].T, kr], -1)
        vi = c @ w[i, dn:].T
        s = qi @ ki.transpose(-1, -2) * layer.scale
        if mask is not None:
            s = s.masked_fill(~mask, -math.inf)
        a = torch.softmax(s, -1).nan_to_num(0.0)
        outs.append(a @ vi)
    y = torch.cat(outs, -1) @ p["out.weight"].T
    if "out.bias" in p:
        y = y + p["out.bias"]
    return y


SHAPES = [
    dict(d_model=32, num_heads=4, kv_rank=16, rope_dim=8, q_rank=12, d_nope=8, d_v=6),
    dict(d_model=24, num_heads=3, kv_rank=10, rope_dim=4),
    dict(d_model=16, num_heads=1, kv_rank=5, rope_dim=2, q_rank=7, bias=True),
    dict(d_model=32, num_heads=2, kv_rank=8, rope_dim=6, rope_layout="half", d_v=20),
]


@pytest.mark.parametrize("cfg", SHAPES)
@pytest.mark.parametrize("n", [1, 5])
@pytest.mark.parametrize("absorb", [False, True])
def test_forward_and_backward_against_the_formula(cfg, n, absorb):
    layer = MultiHeadLatentAttention(**cfg)
    with torch.no_grad():
        for prm in layer.parameters():
            prm.add_(0.1 * torch.randn_like(prm))  # norms' weights away from 1
    x = torch.randn(2, n, cfg["d_model"], requires_grad=True)
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    y = layer(x, mask="causal", absorb=absorb)
    xd = x.detach().double().requires_grad_(True)
    ref = oracle(layer, xd, mask)
    torch.testing.assert_close(y.double(), ref, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    (ref * g.double()).sum().backward()
    torch.testing.assert_close(x.grad.double(), xd.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("cfg", SHAPES[:2])
def test_absorbed_equals_up_projected_with_gradients_of_the_weights(cfg):
    layer = MultiHeadLatentAttention(**cfg)
    x = torch.randn(3, 6, cfg["d_model"])
    y1 = layer(x, mask="causal")
    g1 = torch.autograd.grad(y1.square().sum(), list(layer.parameters()))
    y2 = layer(x, mask="causal", absorb=True)
    g2 = torch.autograd.grad(y2.square().sum(), list(layer.parameters()))
    torch.testing.assert_close(y1, y2, atol=1e-5, rtol=1e-5)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("absorb", [False, True])
def test_decoding_with_the_cache_equals_the_full_causal_sequence(absorb):
    layer = MultiHeadLatentAttention(32, 4, 12, 8, q_rank=10)
    x = torch.randn(2, 9, 32)
    full = layer(x, mask="causal")
    cache = layer.new_cache()
    assert isinstance(cache, LatentCache) and len(cache) == 0 and cache.nbytes == 0
    steps = [layer(x[:, :4], mask="causal", cache=cache, absorb=absorb)]
    for t in range(4, 9):
        steps.append(layer(x[:, t : t + 1], cache=cache, absorb=absorb))
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert len(cache) == 9
    assert cache.nbytes == 2 * 9 * (12 + 8) * 4
    assert cache.latent.shape == (2, 9, 12) and cache.k_rope.shape == (2, 9, 8)


def test_cache_bytes_in_half_precision_and_the_per_token_formula():
    layer = MultiHeadLatentAttention(16, 2, 6, 4).to(torch.bfloat16)
    cache = layer.new_cache()
    layer(torch.randn(3, 5, 16, dtype=torch.bfloat16), mask="causal", cache=cache)
    assert cache.nbytes == 3 * 5 * (6 + 4) * 2
    assert mla_cache_bytes_per_token(512, 64, 2) == 1152


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_close_to_float32(dtype):
    layer = MultiHeadLatentAttention(32, 4, 16, 8, q_rank=12)
    x = torch.randn(2, 6, 32)
    ref = layer(x, mask="causal")
    low = layer.to(dtype)
    for absorb in (False, True):
        y = low(x.to(dtype), mask="causal", absorb=absorb)
        assert y.dtype == dtype
        torch.testing.assert_close(y.float(), ref, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("absorb", [False, True])
def test_fully_masked_rows_give_the_output_bias_and_no_nan(absorb):
    layer = MultiHeadLatentAttention(16, 2, 6, 4, bias=True)
    x = torch.randn(2, 4, 16)
    mask = torch.ones(2, 4, 4, dtype=torch.bool)
    mask[0, 1] = False
    y = layer(x, mask=mask, absorb=absorb)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y[0, 1], layer.out.bias.detach())
    ref = oracle(layer, x, mask)
    torch.testing.assert_close(y.double(), ref, atol=1e-5, rtol=1e-5)


def test_n_differs_from_m_with_an_explicit_mask_and_unbatched_input():
    layer = MultiHeadLatentAttention(16, 2, 6, 4)
    x = torch.randn(7, 16)
    full = layer(x, mask="causal")
    cache = layer.new_cache()
    layer(x[:4], mask="causal", cache=cache)
    mask = torch.ones(3, 7, dtype=torch.bool).tril(diagonal=4)
    for absorb in (False, True):
        c2 = layer.new_cache()
        layer(x[:4], mask="causal", cache=c2)
        y = layer(x[4:], mask=mask, cache=c2, absorb=absorb)
        torch.testing.assert_close(y, full[4:], atol=1e-5, rtol=1e-5)


def test_bad_input_names_what_it_got():
    layer = MultiHeadLatentAttention(16, 2, 6, 4)
    with pytest.raises(ValueError, match="rope_dim must be even"):
        MultiHeadLatentAttention(16, 2, 6, 3)
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadLatentAttention(15, 2, 6, 4)
    with pytest.raises(TypeError, match="absorb"):
        layer(torch.randn(1, 3, 16), absorb="yes")
    with pytest.raises(TypeError, match="LatentCache"):
        from selfattn.multihead import KVCache

        layer(torch.randn(1, 3, 16), cache=KVCache())
    with pytest.raises(ValueError, match="number of keys m=5"):
        cache = layer.new_cache()
        layer(torch.randn(1, 2, 16), cache=cache)
        layer(torch.randn(1, 3, 16), mask=torch.ones(3, 3, dtype=torch.bool), cache=cache)
    with pytest.raises(ValueError, match="16"):
        layer(torch.randn(1, 3, 15))
    with pytest.raises(TypeError, match="floating-point"):
        layer(torch.ones(1, 3, 16, dtype=torch.long))
    with pytest.raises(ValueError, match="another layer"):
        cache = layer.new_cache()
        layer(torch.randn(1, 2, 16), cache=cache)
        MultiHeadLatentAttention(16, 2, 6, 4)(torch.randn(1, 1, 16), cache=cache)
    with pytest.raises(ValueError, match="batch"):
        cache = layer.new_cache()
        layer(torch.randn(1, 2, 16), cache=cache)
        layer(torch.randn(2, 1, 16), cache=cache)


def test_matches_transformers_deepseek_v3_attention():
    tr = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    for interleave in (True, False):
        cfg = tr.DeepseekV3Config(
            hidden_size=32,
            num_attention_heads=4,
            num_key_value_heads=4,
            q_lora_rank=12,
            kv_lora_rank=16,
            qk_nope_head_dim=8,
            qk_rope_head_dim=8,
            v_head_dim=6,
            rope_interleave=interleave,
            attention_bias=False,
            vocab_size=10,
            num_hidden_layers=1,
        )
        cfg._attn_implementation = "eager"
        ref = ds.DeepseekV3Attention(cfg, layer_idx=0).eval()
        with torch.no_grad():
            for prm in ref.parameters():
                prm.copy_(torch.randn_like(prm) * 0.2 + (1.0 if prm.dim() == 1 else 0.0))
        layer = MultiHeadLatentAttention(
            32,
            4,
            16,
            8,
            q_rank=12,
            d_nope=8,
            d_v=6,
            scale=ref.scaling,
            rope_base=cfg.rope_parameters["rope_theta"],
            rope_layout="interleaved" if interleave else "half",
            norm_eps=cfg.rms_norm_eps,
        )
        names = dict(
            q_a="q_a_proj",
            q_norm="q_a_layernorm",
            q_b="q_b_proj",
            kv_a="kv_a_proj_with_mqa",
            kv_norm="kv_a_layernorm",
            kv_b="kv_b_proj",
            out="o_proj",
        )
        with torch.no_grad():
            for mine, theirs in names.items():
                getattr(layer, mine).weight.copy_(getattr(ref, theirs).weight)
        x = torch.randn(2, 7, 32)
        rot = ds.DeepseekV3RotaryEmbedding(cfg)
        pos = torch.arange(7)[None].expand(2, -1)
        cos_sin = rot(x, pos)
        mask = torch.full((7, 7), -math.inf).triu(1)[None, None]
        with torch.no_grad():
            want, _ = ref(x, cos_sin, mask)
            for absorb in (False, True):
                got = layer(x, mask="causal", absorb=absorb)
                torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
