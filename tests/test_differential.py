"""Differential attention (selfattn.differential) against the paper's formula and DiffLlama."""

from __future__ import annotations

import math

import pytest
import torch
from selfattn.differential import DifferentialAttention, lambda_init
from selfattn.multihead import KVCache
from selfattn.positional import RotaryEmbedding


def oracle(layer: DifferentialAttention, x: torch.Tensor, mask: torch.Tensor | None):
    """The DIFF Transformer's equations, differential head by head, in float64."""
    p = {k: v.double() for k, v in layer.state_dict().items()}
    x = x.double()
    h, hkv, dh = layer.num_heads, layer.num_kv_heads, layer.d_head
    g = h // hkv

    def proj(name):
        y = x @ p[f"{name}.weight"].T
        return y + p[f"{name}.bias"] if f"{name}.bias" in p else y

    q, k, v = proj("q_proj"), proj("k_proj"), proj("v_proj")
    lam = (
        torch.exp((p["lambda_q1"] * p["lambda_k1"]).sum())
        - torch.exp((p["lambda_q2"] * p["lambda_k2"]).sum())
        + layer.lambda_init
    )

    def head(t, i):
        return t[..., i * dh : (i + 1) * dh]

    def rot(qi, ki):
        return (qi, ki) if layer.rope is None else layer.rope(qi, ki)

    outs = []
    for i in range(h // 2):
        maps = []
        for j in (i, i + h // 2):
            qj, kj = rot(head(q, j), head(k, j // g))
            s = qj @ kj.transpose(-1, -2) / math.sqrt(dh)
            if mask is not None:
                s = s.masked_fill(~mask, -math.inf)
            maps.append(torch.softmax(s, -1).nan_to_num(0.0))
        kv = i // g  # the key/value head of query head i
        half = hkv // 2
        vi = torch.cat([head(v, kv % half), head(v, half + kv % half)], -1)
        o = (maps[0] - lam * maps[1]) @ vi
        o = o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + layer.norm_eps)
        outs.append((1 - layer.lambda_init) * o)
    y = torch.cat(outs, -1) @ p["o_proj.weight"].T
    return y + p["o_proj.bias"] if "o_proj.bias" in p else y


CONFIGS = [
    dict(d_model=32, num_heads=4),
    dict(d_model=32, num_heads=8, num_kv_heads=2, layer_index=3, bias=True),
    dict(d_model=24, num_heads=2, d_head=5, layer_index=1),
]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("n", [1, 6])
@pytest.mark.parametrize("rope", [False, True])
def test_forward_and_backward_against_the_formula(cfg, n, rope):
    dh = cfg.get("d_head", cfg["d_model"] // cfg["num_heads"])
    if rope and dh % 2:
        pytest.skip("RoPE needs an even head width")
    layer = DifferentialAttention(**cfg, rope=RotaryEmbedding(dh, layout="half") if rope else None)
    x = torch.randn(2, n, cfg["d_model"], requires_grad=True)
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    y = layer(x, mask="causal")
    xd = x.detach().double().requires_grad_(True)
    ref = oracle(layer, xd, mask)
    torch.testing.assert_close(y.double(), ref, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    (ref * g.double()).sum().backward()
    torch.testing.assert_close(x.grad.double(), xd.grad, atol=1e-5, rtol=1e-4)
    assert layer.lambda_q1.grad is not None and torch.isfinite(layer.lambda_q1.grad).all()


def test_lambda_init_schedule():
    assert lambda_init(0) == pytest.approx(0.2)
    assert lambda_init(1) == pytest.approx(0.8 - 0.6 * math.exp(-0.3))
    assert lambda_init(100) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="layer_index"):
        lambda_init(-1)


def test_weights_are_the_difference_of_two_maps_and_rows_sum_to_one_minus_lambda():
    layer = DifferentialAttention(16, 4)
    y, w = layer(torch.randn(2, 5, 16), mask="causal", return_weights=True)
    assert w.shape == (2, 2, 5, 5)
    lam = float(layer.lambda_full().detach())
    torch.testing.assert_close(w.sum(-1), torch.full((2, 2, 5), 1 - lam))


def test_decoding_with_a_cache_equals_the_full_sequence():
    layer = DifferentialAttention(32, 4, num_kv_heads=2, rope=RotaryEmbedding(8))
    x = torch.randn(2, 8, 32)
    full = layer(x, mask="causal")
    cache = KVCache()
    steps = [layer(x[:, :3], mask="causal", cache=cache)]
    steps += [layer(x[:, t : t + 1], cache=cache) for t in range(3, 8)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert len(cache) == 8 and cache.nbytes == 2 * 2 * 2 * 8 * 8 * 4


def test_fully_masked_rows_and_unbatched_input():
    layer = DifferentialAttention(16, 2, bias=True)
    x = torch.randn(4, 16)
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[2] = False
    y = layer(x, mask=mask)
    assert y.shape == (4, 16) and torch.isfinite(y).all()
    torch.testing.assert_close(y[2], layer.o_proj.bias.detach())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype):
    layer = DifferentialAttention(32, 4)
    x = torch.randn(2, 6, 32)
    ref = layer(x, mask="causal")
    y = layer.to(dtype)(x.to(dtype), mask="causal")
    assert y.dtype == dtype
    torch.testing.assert_close(y.float(), ref, atol=5e-2, rtol=5e-2)


def test_same_parameters_as_a_standard_layer_plus_four_lambda_vectors():
    from selfattn.multihead import MultiHeadAttention

    diff = DifferentialAttention(32, 4)
    std = MultiHeadAttention(32, 4, bias=False)
    count = sum(p.numel() for p in diff.parameters())
    assert count == sum(p.numel() for p in std.parameters()) + 4 * 8


def test_bad_input():
    with pytest.raises(ValueError, match="even"):
        DifferentialAttention(30, 3)
    with pytest.raises(ValueError, match="num_kv_heads"):
        DifferentialAttention(32, 4, num_kv_heads=3)
    with pytest.raises(TypeError, match="RotaryEmbedding"):
        DifferentialAttention(32, 4, rope="rope")
    with pytest.raises(ValueError, match="d_head=4"):
        DifferentialAttention(32, 4, rope=RotaryEmbedding(4))
    layer = DifferentialAttention(16, 2)
    with pytest.raises(TypeError, match="return_weights"):
        layer(torch.randn(1, 3, 16), return_weights=1)
    with pytest.raises(ValueError, match="16"):
        layer(torch.randn(1, 3, 12))
    with pytest.raises(ValueError, match="number of keys"):
        layer(torch.randn(1, 3, 16), mask=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="KVCache"):
        layer(torch.randn(1, 3, 16), cache=[])


def test_matches_transformers_diffllama_attention():
    tr = pytest.importorskip("transformers")
    from transformers.models.diffllama import modeling_diffllama as dl

    for layer_idx, kv in ((0, 4), (2, 2)):
        cfg = tr.DiffLlamaConfig(
            hidden_size=32,
            num_attention_heads=4,
            num_key_value_heads=kv,
            vocab_size=10,
            num_hidden_layers=3,
            intermediate_size=16,
        )
        cfg._attn_implementation = "eager"
        ref = dl.DiffLlamaAttention(cfg, layer_idx=layer_idx).eval()
        layer = DifferentialAttention(
            32,
            4,
            num_kv_heads=kv,
            layer_index=layer_idx,
            rope=RotaryEmbedding(8, base=cfg.rope_parameters["rope_theta"], layout="half"),
            norm_eps=cfg.rms_norm_eps,
        )
        layer.load_state_dict(
            {k: v for k, v in ref.state_dict().items() if not k.startswith("groupnorm")}
        )
        x = torch.randn(2, 6, 32)
        rot = dl.DiffLlamaRotaryEmbedding(cfg)
        cos_sin = rot(x, torch.arange(6)[None].expand(2, -1))
        mask = torch.full((6, 6), -math.inf).triu(1)[None, None]
        with torch.no_grad():
            want, _ = ref(x, cos_sin, mask)
            torch.testing.assert_close(layer(x, mask="causal"), want, atol=1e-5, rtol=1e-5)
