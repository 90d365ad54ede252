import math

import pytest
import torch
import torch.nn.functional as F
from selfattn import (
    causal_mask,
    dependency_matrix,
    padding_mask,
    scaled_dot_product_attention,
    sliding_window_mask,
    to_additive_mask,
    to_ignore_mask,
)


def test_causal_mask_matches_torchs_two_alignments():
    # The default is bottom-right, torch's causal_lower_right (and mask="causal"'s alignment);
    # SDPA's is_causal is top-left.
    from torch.nn.attention.bias import causal_lower_right

    q, k, v = torch.randn(2, 5, 4), torch.randn(2, 7, 4), torch.randn(2, 7, 3)
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(5, 7))
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(5, 7))
    torch.testing.assert_close(ours, theirs)
    top_left = causal_mask(5, 7, alignment="top_left")
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=top_left)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_causal_mask_values_and_alignment():
    assert torch.equal(
        causal_mask(3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    )
    bottom = causal_mask(2, 4, alignment="bottom_right")
    assert torch.equal(bottom, torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool))
    assert causal_mask(1, 1).item() is True
    with pytest.raises(ValueError, match="alignment must be one of"):
        causal_mask(2, alignment="left")
    with pytest.raises(ValueError, match="n must be >= 1"):
        causal_mask(0)


def test_padding_mask():
    m = padding_mask([3, 1, 0], 4)
    assert m.shape == (3, 1, 4) and m.dtype == torch.bool
    assert m[:, 0].tolist() == [
        [True, True, True, False],
        [True, False, False, False],
        [False] * 4,
    ]
    with pytest.raises(ValueError, match="0..max_len=4.*5"):
        padding_mask([5], 4)
    with pytest.raises(TypeError, match="integer"):
        padding_mask([1.5], 4)


# ---- chapter 4: sliding windows, conventions, additive masks, dependency ---------


def test_sliding_window_mask_values():
    causal3 = sliding_window_mask(5, 3)
    # query 4 sees keys 2, 3, 4
    assert causal3[4].tolist() == [False, False, True, True, True]
    assert causal3.sum(1).tolist() == [1, 2, 3, 3, 3]
    both = sliding_window_mask(5, 2, causal=False)
    assert both[2].tolist() == [False, True, True, True, False]
    assert torch.equal(sliding_window_mask(6, 6), causal_mask(6))
    assert torch.equal(sliding_window_mask(6, 99), causal_mask(6))
    assert torch.equal(sliding_window_mask(4, 1), torch.eye(4, dtype=torch.bool))
    assert sliding_window_mask(1, 1).tolist() == [[True]]
    # brute-force definition
    n, w = 9, 4
    ref = torch.tensor([[0 <= i - j < w for j in range(n)] for i in range(n)])
    assert torch.equal(sliding_window_mask(n, w), ref)
    with pytest.raises(ValueError, match="window must be >= 1, got 0"):
        sliding_window_mask(4, 0)
    with pytest.raises(TypeError, match="window must be an int"):
        sliding_window_mask(4, 2.0)


def test_sliding_window_matches_sdpa_with_explicit_mask():
    q, k, v = torch.randn(2, 7, 4), torch.randn(2, 7, 4), torch.randn(2, 7, 3)
    mask = sliding_window_mask(7, 3)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, mask),
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
    )


def test_to_ignore_mask_feeds_nn_multihead_attention():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(1, 5, 8)
    causal = causal_mask(5)
    y_right = mha(x, x, x, attn_mask=to_ignore_mask(causal))[0]
    y_flat = mha(x, x, x, attn_mask=torch.triu(torch.ones(5, 5, dtype=torch.bool), 1))[
        0
    ]  # the usual torch idiom
    torch.testing.assert_close(y_right, y_flat)
    # passing our convention unflipped: the last query sees nothing (NaN), query 0 sees the future
    y_wrong = mha(x, x, x, attn_mask=causal)[0]
    assert torch.isnan(y_wrong[0, -1]).all()
    with pytest.raises(TypeError, match="bool"):
        to_ignore_mask(causal.float())


def test_to_additive_mask():
    m = torch.tensor([[True, False], [False, False]])
    add = to_additive_mask(m)
    assert add.dtype == torch.float32 and add[0].tolist() == [0.0, -math.inf]
    scores = torch.randn(2, 2)
    from selfattn import softmax

    torch.testing.assert_close(softmax(scores + add), softmax(scores.masked_fill(~m, -math.inf)))
    assert torch.equal(softmax(scores + add)[1], torch.zeros(2))  # fully masked row: zeros
    half = to_additive_mask(m, torch.float16, fill=-1e9)
    assert half.dtype == torch.float16 and half[0, 1].item() == -math.inf  # -1e9 overflows float16
    assert (
        to_additive_mask(m, torch.bfloat16, fill=-1e9)[0, 1].item() > -math.inf
    )  # bfloat16 keeps it finite
    with pytest.raises(TypeError, match="floating-point dtype"):
        to_additive_mask(m, torch.int32)


def test_dependency_matrix_of_a_causal_layer_is_lower_triangular():
    torch.manual_seed(0)
    W = torch.randn(3, 6, 6)

    def layer(x, mask):
        return scaled_dot_product_attention(x @ W[0], x @ W[1], x @ W[2], mask)

    x = torch.randn(5, 6)
    dep = dependency_matrix(lambda t: layer(t, causal_mask(5)), x)
    assert dep.shape == (5, 5)
    assert torch.equal(dep.triu(1), torch.zeros(5, 5))  # exactly zero, not just small
    assert (dep.diagonal() > 0).all()
    full = dependency_matrix(lambda t: layer(t, None), x)
    assert (full.triu(1)[0, 1:] > 0).all()
    with pytest.raises(ValueError, match=r"\(n, d\)"):
        dependency_matrix(lambda t: t, torch.randn(5))
