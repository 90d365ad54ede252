"""gradient_reach: exact against the Jacobian, and no false zeros from squaring float32."""

import math

import pytest
import torch
from selfattn.gradient_reach import gradient_reach


def _jacobian_norms(encoder, x):
    jac = torch.autograd.functional.jacobian(lambda inp: encoder(inp[None])[0, -1], x)
    return jac.double().pow(2).sum(dim=(0, 2)).sqrt()  # (n,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_the_jacobian_of_an_lstm(dtype):
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(3, 4, batch_first=True).to(dtype)
    encoder = lambda t: lstm(t)[0]  # noqa: E731
    x = torch.randn(6, 3, dtype=dtype)
    got = gradient_reach(encoder, x)
    assert got.dtype == dtype and got.shape == (6,)
    torch.testing.assert_close(got.double(), _jacobian_norms(encoder, x), rtol=1e-5, atol=0)


def test_tiny_float32_gradients_are_not_squared_to_zero():
    # y[-1] = 1e-30 * (x[0] + x[-1]): the gradients are 1e-30, representable in float32,
    # but their squares (1e-60) are not; the norm sqrt(2) * 1e-30 must survive
    x = torch.randn(4, 2)
    encoder = lambda t: 1e-30 * (t + t[:, :1])  # noqa: E731
    got = gradient_reach(encoder, x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(
        got, torch.tensor([2**0.5 * 1e-30, 0.0, 0.0, 2**0.5 * 1e-30]), rtol=1e-5, atol=0
    )
    assert (got[[0, -1]] > 0).all()  # the old float32 accumulation returned exactly 0


def test_float64_follows_a_decay_below_float32_range():
    # a linear recurrence h_t = 0.01 h_{t-1} + x_t: d h_{n-1} / d x_t = 0.01 ** (n - 1 - t)
    def encoder(t):
        h, outs = torch.zeros_like(t[:, 0]), []
        for i in range(t.shape[1]):
            h = 0.01 * h + t[:, i]
            outs.append(h)
        return torch.stack(outs, dim=1)

    x = torch.randn(40, 1, dtype=torch.float64)
    got = gradient_reach(encoder, x)
    expected = 0.01 ** torch.arange(39, -1, -1, dtype=torch.float64)  # down to 1e-78
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=0)
    assert (got > 0).all()


def test_bad_input():
    with pytest.raises(ValueError, match=r"float tensor of shape \(n, d_in\), got Tensor"):
        gradient_reach(lambda t: t, torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="encoder must return"):
        gradient_reach(lambda t: t[0], torch.zeros(3, 2))


@pytest.mark.parametrize("k", [2, 3, 5])
def test_conv_reach_agrees_with_the_path_length_count(k):
    """Chapter 1's autograd check: output n sees input 0 exactly from ceil(n / (k-1)) layers."""
    from selfattn.gradient_reach import conv_reach

    for n in range(1, 13):
        needed = math.ceil(n / (k - 1))
        assert conv_reach(n, k, needed)
        if needed > 1:
            assert not conv_reach(n, k, needed - 1)


def test_conv_reach_names_bad_sizes():
    from selfattn.gradient_reach import conv_reach

    with pytest.raises(ValueError, match="k"):
        conv_reach(5, 1, 2)
    with pytest.raises(TypeError, match="layers"):
        conv_reach(5, 3, 2.0)
