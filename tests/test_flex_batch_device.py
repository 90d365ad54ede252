"""selfattn.flex: block masks built with the real batch and heads, on the inputs' device.

A mask that depends on the batch row (padding lengths that differ per row) must give the same
result compiled, eager and as dense SDPA: a BlockMask built for ``b = 0`` only and broadcast
makes the compiled kernel, which trusts the tiles, silently wrong for the other rows. And the
BlockMask must be built where q, k, v live (torch refuses one on another device); the device
logic is checked on the CPU by recording what reaches ``block_mask``.
"""

from __future__ import annotations

import pytest
import torch
from selfattn import flex as fx
from selfattn.attention import scaled_dot_product_attention
from selfattn.masks import padding_mask

OK, WHY = fx.flex_available()
pytestmark = pytest.mark.skipif(not OK, reason=WHY or "FlexAttention unavailable")

TOL = dict(atol=1e-5, rtol=1e-5)


def _qkv(b, h, n, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=g) for _ in range(3))


def _padding_reference(q, k, v, lengths):
    mask = padding_mask(torch.tensor(lengths), k.shape[-2]).unsqueeze(1)  # (B, 1, 1, m)
    return scaled_dot_product_attention(q, k, v, mask)


def test_padding_block_mask_has_the_real_batch_rows():
    n, lengths = 256, [256, 64]
    q, k, _ = _qkv(2, 2, n)
    bm = fx._block_mask_for(fx.padding(lengths), q, k)
    dense = fx.dense_mask(fx.padding(lengths), n, batch=2, heads=2)
    assert bm.shape[:2] == (2, 2)
    visible = bm.to_dense()  # (B, H, tiles_q, tiles_k): row 1 has empty tiles, row 0 none
    assert visible[0].all() and not visible[1].all()
    assert not dense[1].all() and dense[0].all()


def test_eager_flex_with_per_row_padding_equals_dense_sdpa():
    q, k, v = _qkv(2, 2, 256, seed=1)
    out = fx.flex(q, k, v, mask_mod=fx.padding([256, 64]))
    torch.testing.assert_close(out, _padding_reference(q, k, v, [256, 64]), **TOL)


def test_compiled_flex_with_per_row_padding_equals_eager_and_dense_sdpa():
    ok, why = fx.flex_available(compiled=True)
    if not ok:
        pytest.skip(why)
    n, lengths = 256, [256, 64]
    q, k, v = _qkv(2, 2, n, seed=2)
    compiled = fx.flex(q, k, v, mask_mod=fx.padding(lengths), compiled=True)
    eager = fx.flex(q, k, v, mask_mod=fx.padding(lengths))
    expected = _padding_reference(q, k, v, lengths)
    torch.testing.assert_close(eager, expected, **TOL)
    torch.testing.assert_close(compiled, expected, **TOL)  # was 0.87 off in row 1


@pytest.fixture
def recorded_devices(monkeypatch):
    seen = []
    real = fx.block_mask

    def recording(*args, **kwargs):
        seen.append(kwargs.get("device"))
        kwargs["device"] = "cpu"  # no GPU here: record where it was asked for, build on the CPU
        return real(*args, **kwargs)

    monkeypatch.setattr(fx, "block_mask", recording)
    return seen


def test_flex_builds_the_block_mask_on_the_inputs_device(recorded_devices):
    q, k, v = _qkv(1, 1, 8)
    fx.flex(q, k, v, mask_mod=fx.causal())
    assert recorded_devices == [q.device]


@pytest.mark.parametrize("how", ["causal", "bool", "float"])
def test_sdpa_kernel_flex_builds_the_block_mask_on_the_inputs_device(recorded_devices, how):
    q, k, v = _qkv(2, 1, 8)
    n = q.shape[-2]
    later = torch.ones(n, n, dtype=torch.bool).triu(1)
    mask = {
        "causal": "causal",
        "bool": ~later,
        "float": torch.zeros(n, n).masked_fill(later, -1e9),
    }
    with torch.no_grad():
        out = scaled_dot_product_attention(q, k, v, mask[how], kernel="flex")
        ref = scaled_dot_product_attention(q, k, v, mask[how])
    torch.testing.assert_close(out, ref, **TOL)
    assert recorded_devices == [q.device]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sdpa_kernel_flex_runs_on_cuda():
    q, k, v = (t.cuda() for t in _qkv(2, 1, 64))
    with torch.no_grad():
        out = scaled_dot_product_attention(q, k, v, "causal", kernel="flex")
        ref = scaled_dot_product_attention(q, k, v, "causal")
    assert out.device == q.device
    torch.testing.assert_close(out, ref, atol=2e-3, rtol=2e-3)
