"""GatedDeltaNet: Qwen3-Next's layer, weight for weight; causal; decoding == the sequence."""

import pytest
import torch
from selfattn.delta_net import GatedDeltaNet, GatedDeltaNetState


def layer(**kw):
    torch.manual_seed(0)
    return GatedDeltaNet(32, 2, head_k_dim=8, head_v_dim=6, num_v_heads=4, **kw)


@pytest.mark.parametrize("n", [1, 21])
def test_loads_qwen3_next_weights_and_agrees(n):
    pytest.importorskip("transformers")
    from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    cfg = Qwen3NextConfig(
        hidden_size=32,
        linear_num_value_heads=4,
        linear_num_key_heads=2,
        linear_key_head_dim=8,
        linear_value_head_dim=6,
        linear_conv_kernel_dim=4,
        num_hidden_layers=1,
        layer_types=["linear_attention"],
    )
    ref = Qwen3NextGatedDeltaNet(cfg, 0).eval()
    mine = layer(chunk_size=16)
    mine.load_state_dict(ref.state_dict(), strict=True)
    x = torch.randn(2, n, 32)
    with torch.no_grad():
        torch.testing.assert_close(mine(x), ref(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("chunk", [None, 4])
def test_causal_no_leak(chunk):
    m = layer(chunk_size=chunk)
    x = torch.randn(1, 12, 32)
    y = x.clone()
    y[:, 7:] = torch.randn(1, 5, 32)
    with torch.no_grad():
        torch.testing.assert_close(m(x)[:, :7], m(y)[:, :7])


def test_decoding_step_by_step_equals_the_sequence():
    m = layer(chunk_size=8)
    x = torch.randn(2, 19, 32)
    with torch.no_grad():
        full = m(x)
        y, s = m(x[:, :5], return_state=True)
        outs = [y]
        for t in range(5, 19):
            o, s = m(x[:, t : t + 1], state=s, return_state=True)
            outs.append(o)
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-5, rtol=1e-5)
    assert isinstance(s, GatedDeltaNetState) and s.steps == 19
    assert s.numel() == 2 * (m.conv_dim * 3 + 4 * 8 * 6)


@pytest.mark.parametrize("shape", [(1, 1), (3, 17)])
def test_forward_backward_random_shapes(shape):
    m = GatedDeltaNet(24, 3)
    x = torch.randn(*shape, 24, requires_grad=True)
    m(x).square().sum().backward()
    assert x.grad.shape == x.shape and torch.isfinite(x.grad).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())


def test_bf16_runs():
    m = layer().to(torch.bfloat16)
    out = m(torch.randn(1, 9, 32, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


def test_bad_input():
    with pytest.raises(ValueError, match="divisible"):
        GatedDeltaNet(30, 4)
    with pytest.raises(ValueError, match="multiple"):
        GatedDeltaNet(32, 2, num_v_heads=3)
    m = GatedDeltaNet(16, 2)
    with pytest.raises(ValueError, match="d_model=16"):
        m(torch.randn(1, 3, 8))
    with pytest.raises(TypeError, match="x"):
        m(torch.ones(1, 3, 16, dtype=torch.long))
    with pytest.raises(TypeError, match="state"):
        m(torch.randn(1, 3, 16), state=(1, 2))
