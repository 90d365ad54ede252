import pytest
import torch
import torch.nn.functional as F

from selfattn import causal_mask, padding_mask


def test_causal_mask_matches_sdpa_is_causal():
    q, k, v = torch.randn(2, 5, 4), torch.randn(2, 7, 4), torch.randn(2, 7, 3)
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(5, 7))
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_causal_mask_values_and_alignment():
    assert torch.equal(causal_mask(3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool))
    bottom = causal_mask(2, 4, align="bottom_right")
    assert torch.equal(bottom, torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool))
    assert causal_mask(1, 1).item() is True
    with pytest.raises(ValueError, match="align must be"):
        causal_mask(2, align="left")
    with pytest.raises(ValueError, match="n >= 1"):
        causal_mask(0)


def test_padding_mask():
    m = padding_mask([3, 1, 0], 4)
    assert m.shape == (3, 1, 4) and m.dtype == torch.bool
    assert m[:, 0].tolist() == [[True, True, True, False], [True, False, False, False], [False] * 4]
    with pytest.raises(ValueError, match="0..max_len=4.*5"):
        padding_mask([5], 4)
    with pytest.raises(TypeError, match="integer"):
        padding_mask([1.5], 4)
