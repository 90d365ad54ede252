"""Inputs that must not lose information silently (robustness review, round 2).

Complex values are refused where a conversion to a real array would keep the real part
only; extreme integers stay in range; half-precision inputs accumulate in float32; a
caption with no real word, or an empty batch, is an error instead of a NaN.
"""

import matplotlib
import pytest
import torch
from selfattn import diagrams, positional, reference, viz
from selfattn.efficient import linear
from selfattn.models import transformer

matplotlib.use("Agg")


@pytest.mark.parametrize(
    "call",
    [
        lambda z: viz.plot_attention(z),
        lambda z: reference.attention_steps(
            z, torch.randn(3, 2), torch.randn(3, 2), torch.randn(3, 2)
        ),
        lambda z: reference.attention_steps(
            torch.randn(3, 3), z, torch.randn(3, 2), torch.randn(3, 2)
        ),
        lambda z: reference.softmax_np(z.numpy()),
        lambda z: diagrams.dot_product_softmax(keys=z[:2, :2].tolist()),
    ],
)
def test_complex_input_is_refused_not_cut_to_its_real_part(call):
    z = torch.rand(3, 3) + 1j * torch.rand(3, 3)
    with pytest.raises(TypeError, match="complex"):
        call(z)


def test_extreme_relative_positions_stay_in_the_bucket_range():
    extremes = torch.tensor([-(2**63), 2**63 - 1, -(10**12), 10**12, -5, 0, 5])
    for bidirectional in (True, False):
        buckets = positional.relative_position_bucket(extremes, bidirectional=bidirectional)
        assert buckets.min() >= 0 and buckets.max() <= 31, buckets
        far = positional.relative_position_bucket(
            torch.tensor([-(2**63), -1000]), bidirectional=bidirectional
        )
        assert far[0] == far[1]  # beyond max_distance every distance shares the last bucket


def test_recurrent_linear_attention_in_float16_accumulates_in_float32():
    g = torch.Generator().manual_seed(0)
    q, k, v = ((1e4 * torch.randn(2, 16, 8, generator=g)).half() for _ in range(3))
    out = linear.linear_attention_recurrent(q, k, v)
    parallel = linear.linear_attention(q, k, v, causal=True)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), parallel.float(), atol=1e-2, rtol=1e-2)


def _clip():
    return transformer.MiniCLIP(10, image_size=8, patch=4, d_model=8, num_heads=2, num_layers=1)


def test_a_caption_without_a_real_word_is_an_error_not_nan():
    clip = _clip()
    tokens = torch.randn(2, 3, 8)
    real = torch.tensor([[True, True, False], [False, False, False]])
    with pytest.raises(ValueError, match=r"caption\(s\) \[1\] have no real word"):
        clip.embed_text(tokens, real)
    with pytest.raises(ValueError, match="no real word"):
        clip.match_tokens(torch.randn(2, 5, 8), tokens, real)
    with pytest.raises(ValueError, match="non-padding"):
        clip.encode_text(torch.tensor([[1, 2, 0], [0, 0, 0]]))
    # with a real word in every caption: finite
    real[1, 0] = True
    assert torch.isfinite(clip.embed_text(tokens, real)).all()


def test_clip_loss_of_an_empty_batch_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        transformer.clip_loss(torch.zeros(0, 0))
    assert torch.isfinite(transformer.clip_loss(torch.randn(3, 3)))
