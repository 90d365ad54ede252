"""MultiHeadAttention's options of chapter 11 (d_head, scale, qk_norm, softcap, sinks, gate,
window), each against its formula written out here, forward and backward; the KV cache
against the full sequence; n = 1; bad input."""

import math

import pytest
import torch
from selfattn import KVCache, MultiHeadAttention, causal_mask, padding_mask
from selfattn.norms import RMSNorm, rms_norm
from selfattn.positional import RotaryEmbedding

TOL = 1e-5


def oracle(layer: MultiHeadAttention, x, mask=None):
    """The layer's output from its weights, by the formulas of the docstring (float64)."""
    x = x.double()
    B, n, _ = x.shape
    h, hk, dh = layer.num_heads, layer.num_kv_heads, layer.d_head
    w = {k: v.double() for k, v in layer.state_dict().items()}
    qkv = x @ w["qkv.weight"].T + (w["qkv.bias"] if "qkv.bias" in w else 0)
    q, k, v = qkv.split([h * dh, hk * dh, hk * dh], -1)
    q = q.reshape(B, n, h, dh).transpose(1, 2)
    k = k.reshape(B, n, hk, dh).transpose(1, 2)
    v = v.reshape(B, n, hk, dh).transpose(1, 2)
    if layer.q_norm is not None:
        eps = layer.q_norm.eps
        q = q / torch.sqrt((q * q).mean(-1, keepdim=True) + eps) * w["q_norm.weight"]
        k = k / torch.sqrt((k * k).mean(-1, keepdim=True) + eps) * w["k_norm.weight"]
    if layer.rope is not None:
        q, k = layer.rope(q, k)
    k = k.repeat_interleave(h // hk, dim=1)
    v = v.repeat_interleave(h // hk, dim=1)
    scale = layer.scale if layer.scale is not None else 1 / math.sqrt(dh)
    s = q @ k.transpose(-1, -2) * scale
    if layer.softcap is not None:
        s = layer.softcap * torch.tanh(s / layer.softcap)
    allowed = torch.ones(n, n, dtype=torch.bool)
    if layer.window is not None:
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        allowed = (j <= i) & (i - j < layer.window)
    if mask is not None:
        allowed = allowed & (mask.unsqueeze(1) if mask.dim() == 3 else mask)
    s = s.masked_fill(~allowed, float("-inf"))
    e = torch.exp(s - s.amax(-1, keepdim=True).clamp_min(-1e300).nan_to_num(0))
    total = e.sum(-1, keepdim=True)
    if layer.sink_logits is not None:
        sink = w["sink_logits"].reshape(1, h, 1, 1)
        m = torch.maximum(s.amax(-1, keepdim=True), sink)
        e = torch.exp(s - m)
        total = e.sum(-1, keepdim=True) + torch.exp(sink - m)
    a = e / torch.where(total == 0, torch.ones_like(total), total)
    heads = (a @ v).transpose(1, 2).reshape(B, n, h * dh)
    if layer.gate is not None:
        g = x @ w["gate.weight"].T + (w["gate.bias"] if "gate.bias" in w else 0)
        heads = heads * torch.sigmoid(g)
    return heads @ w["out.weight"].T + (w["out.bias"] if "out.bias" in w else 0)


OPTIONS = [
    dict(d_head=6),
    dict(d_head=10, num_kv_heads=2),
    dict(scale=0.3),
    dict(qk_norm=True, norm_eps=1e-5),
    dict(softcap=2.0, scale=1.5),
    dict(sinks=True),
    dict(sinks=True, num_kv_heads=2),
    dict(gate=True),
    dict(window=3),
    dict(d_head=6, qk_norm=True, softcap=5.0, sinks=True, gate=True, window=4, num_kv_heads=1),
]


def make(seed=0, d=16, h=4, **options):
    torch.manual_seed(seed)
    layer = MultiHeadAttention(d, h, **options)
    with torch.no_grad():  # non-trivial norm weights and sinks
        for name in ("q_norm", "k_norm"):
            if getattr(layer, name) is not None:
                getattr(layer, name).weight.uniform_(0.5, 1.5)
        if layer.sink_logits is not None:
            layer.sink_logits.normal_()
    return layer


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o))
@pytest.mark.parametrize("n", [1, 2, 7])
def test_option_against_its_formula(options, n):
    layer = make(**options)
    x = torch.randn(2, n, 16)
    for mask in (None, "causal"):
        y = layer(x, mask=mask)
        causal = None if mask is None else causal_mask(n)
        if layer.window is not None and mask is None:
            causal = None
        want = oracle(layer, x, causal)
        diff = (y.double() - want).abs().max().item()
        assert diff < TOL, f"{options} n={n} mask={mask}: max difference {diff:.3g}"


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o))
def test_option_backward_against_its_formula(options):
    layer = make(**options).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64, requires_grad=True)
    (layer(x, mask="causal") ** 2).sum().backward()
    got = {"x": x.grad.clone(), **{k: p.grad.clone() for k, p in layer.named_parameters()}}
    x.grad = None
    layer.zero_grad()
    (oracle(layer, x, causal_mask(5)) ** 2).sum().backward()
    # the oracle reads a copy of the weights (state_dict): only x's gradient flows through it
    assert (got["x"] - x.grad).abs().max().item() < 1e-10
    for name, g in got.items():
        assert torch.isfinite(g).all(), name
    assert torch.autograd.gradcheck(
        lambda t: layer(t, mask="causal"), (x.detach()[:1, :3].requires_grad_(),)
    )


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o))
def test_option_cache_decode_equals_full_sequence(options):
    layer = make(rope=None, **options)
    x = torch.randn(2, 9, 16)
    full = layer(x, mask="causal")
    cache = KVCache()
    parts = [layer(x[:, :4], mask="causal", cache=cache)]
    parts += [layer(x[:, t : t + 1], cache=cache) for t in range(4, 9)]
    diff = (torch.cat(parts, 1) - full).abs().max().item()
    assert diff < TOL, f"{options}: cached decoding differs by {diff:.3g}"


def test_options_with_rope_and_cache():
    torch.manual_seed(1)
    rope = RotaryEmbedding(8, layout="half")
    layer = make(
        d=16,
        h=4,
        d_head=8,
        num_kv_heads=2,
        rope=rope,
        qk_norm=True,
        sinks=True,
        window=3,
        gate=True,
    )
    x = torch.randn(1, 6, 16)
    full = layer(x, mask="causal")
    assert (full.double() - oracle(layer, x, causal_mask(6))).abs().max() < TOL
    cache = KVCache()
    steps = [layer(x[:, t : t + 1], cache=cache) for t in range(6)]
    assert (torch.cat(steps, 1) - full).abs().max() < TOL


def test_padding_mask_and_fully_masked_rows():
    layer = make(sinks=True, softcap=3.0)
    x = torch.randn(2, 4, 16)
    pad = padding_mask([4, 2], 4)
    y = layer(x, mask=pad)
    assert (y.double() - oracle(layer, x, pad)).abs().max() < TOL
    empty = padding_mask([4, 0], 4)
    y = layer(x, mask=empty)
    assert torch.isfinite(y).all()
    assert torch.allclose(y[1], layer.out.bias.expand(4, 16))  # a sink row carries no value
    plain = make(window=2)
    y = plain(x, mask=empty)
    assert torch.isfinite(y).all() and torch.allclose(y[1], plain.out.bias.expand(4, 16))


def test_float_mask_with_window_and_weights():
    layer = make(window=2, sinks=True)
    x = torch.randn(1, 5, 16)
    bias = torch.zeros(5, 5)
    y, weights = layer(x, mask=bias, return_weights=True)
    assert weights.shape == (1, 4, 5, 5)
    assert (weights.triu(1) == 0).all() and (weights.tril(-2) == 0).all()
    assert (weights.sum(-1) < 1).all()  # the sinks take their share
    assert (y.double() - oracle(layer, x)).abs().max() < TOL


def test_defaults_are_the_plain_layer():
    torch.manual_seed(0)
    a = MultiHeadAttention(16, 4)
    torch.manual_seed(0)
    b = MultiHeadAttention(
        16,
        4,
        d_head=4,
        scale=None,
        qk_norm=False,
        softcap=None,
        sinks=False,
        gate=False,
        window=None,
    )
    x = torch.randn(2, 5, 16)
    assert torch.equal(a(x, mask="causal"), b(x, mask="causal"))
    assert a.to_torch() is not None
    with pytest.raises(ValueError, match="none of the options"):
        make(gate=True).to_torch()


def test_grouped_keeps_the_options():
    layer = make(d_head=6, qk_norm=True, sinks=True, gate=True, softcap=4.0, window=3)
    same = layer.grouped(4)
    x = torch.randn(2, 5, 16)
    assert (same(x, mask="causal") - layer(x, mask="causal")).abs().max() < TOL


def test_half_precision_formula_path():
    layer = make(sinks=True, softcap=2.0).to(torch.bfloat16)
    x = torch.randn(2, 5, 16)
    y = layer(x.to(torch.bfloat16), mask="causal")
    assert y.dtype == torch.bfloat16
    want = oracle(layer, x.to(torch.bfloat16).float(), causal_mask(5))
    assert (y.double() - want).abs().max() < 0.05


def test_torch_kernel_takes_window_and_gate():
    layer = make(window=3, gate=True, qk_norm=True, d_head=8)
    x = torch.randn(2, 6, 16)
    want = layer(x, mask="causal")
    layer.kernel = "torch"
    assert (layer(x, mask="causal") - want).abs().max() < TOL


def test_rms_norm():
    x = torch.randn(3, 8, dtype=torch.float64)
    norm = RMSNorm(8, eps=1e-5)
    with torch.no_grad():
        norm.weight.uniform_()
    want = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * norm.weight
    assert (norm(x) - want).abs().max() < 1e-12
    gemma = RMSNorm(8, unit_offset=True)
    assert torch.equal(gemma.weight, torch.zeros(8))
    assert (gemma(x) - rms_norm(x, eps=1e-6)).abs().max() < 1e-12
    assert rms_norm(x.half()).dtype == torch.float16
    with pytest.raises(ValueError, match="d=8"):
        norm(torch.randn(3, 7))


def test_bad_options_are_refused():
    with pytest.raises(TypeError, match="d_head"):
        MultiHeadAttention(16, 4, d_head=2.5)
    with pytest.raises(ValueError, match="d_head"):
        MultiHeadAttention(16, 4, d_head=0)
    with pytest.raises(ValueError, match="scale"):
        MultiHeadAttention(16, 4, scale=-1.0)
    with pytest.raises(ValueError, match="softcap"):
        MultiHeadAttention(16, 4, softcap=0.0)
    with pytest.raises(TypeError, match="sinks"):
        MultiHeadAttention(16, 4, sinks="yes")
    with pytest.raises(ValueError, match="window"):
        MultiHeadAttention(16, 4, window=0)
    x = torch.randn(1, 3, 16)
    for options in (dict(softcap=2.0), dict(sinks=True)):
        layer = MultiHeadAttention(16, 4, kernel="torch", **options)
        with pytest.raises(ValueError, match="formula path"):
            layer(x)
    with pytest.raises(ValueError, match="flash"):
        MultiHeadAttention(16, 4, window=2, kernel="flash")(x, mask="causal")
    with pytest.raises(ValueError, match="cross"):
        MultiHeadAttention(16, 4, window=2)(x, context=torch.randn(1, 4, 16))
