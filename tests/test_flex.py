"""selfattn.flex: every mask_mod and score_mod against the dense tensor the library builds.

Each factory is drawn by torch's ``create_mask`` and compared with chapters 4, 6 and 8's dense
masks and biases, then run through FlexAttention (eager; one compiled shape) and compared with
the library's ``scaled_dot_product_attention`` (the oracle) on random shapes: n != m, n = 1,
blocks that do not divide n, fully masked rows (zeros, never NaN).
"""

from __future__ import annotations

import random

import pytest
import selfattn
import torch
from selfattn import flex as fx
from selfattn.attention import KERNELS, scaled_dot_product_attention
from selfattn.efficient.sparse import bigbird_layout, block_sparse_mask, sink_window_mask
from selfattn.masks import causal_mask, padding_mask, sliding_window_mask
from selfattn.multihead import MultiHeadAttention
from selfattn.positional import RelativePositionBias, alibi_bias

OK, WHY = fx.flex_available()
pytestmark = pytest.mark.skipif(not OK, reason=WHY or "FlexAttention unavailable")

TOL = dict(atol=1e-5, rtol=1e-5)


def _qkv(b, h, n, m, d=8, d_v=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, h, n, d, generator=g),
        torch.randn(b, h, m, d, generator=g),
        torch.randn(b, h, m, d_v or d, generator=g),
    )


def _shapes(count=4, seed=0):
    rng = random.Random(seed)
    shapes = [(1, 1), (1, 9), (37, 37), (20, 33)]  # n = 1, n != m, blocks that do not divide
    while len(shapes) < count:
        shapes.append((rng.randint(1, 40), rng.randint(1, 40)))
    return shapes[:count]


# ---- masks: create_mask against the library's dense masks ------------------------------


@pytest.mark.parametrize("n,m", [(1, 1), (5, 5), (4, 9), (9, 4)])
def test_causal_mask_mod_draws_causal_mask(n, m):
    # One default everywhere: causal(n=, m=) is causal_mask(n, m), both aligned bottom-right.
    assert torch.equal(fx.dense_mask(fx.causal(n=n, m=m), n, m), causal_mask(n, m))
    expected = causal_mask(n, m, alignment="bottom_right")
    assert torch.equal(fx.dense_mask(fx.causal("bottom_right", n=n, m=m), n, m), expected)
    top_left = causal_mask(n, m, alignment="top_left")
    assert torch.equal(fx.dense_mask(fx.causal("top_left"), n, m), top_left)
    if n == m:  # the square mask, where the alignments agree
        assert torch.equal(fx.dense_mask(fx.causal(), n, m), causal_mask(n))
    else:  # without n and m it would have to guess the alignment: it refuses
        with pytest.raises(ValueError, match=rf"square mask.*n={n}, m={m}"):
            fx.dense_mask(fx.causal(), n, m)
        with pytest.raises(ValueError, match="square mask"):
            fx.block_mask(fx.and_masks(fx.causal(), fx.padding([n])), n, m)
    with pytest.raises(ValueError, match="both n and m"):
        fx.causal("bottom_right", n=3)
    with pytest.raises(ValueError, match="alignment"):
        fx.causal("bottom")


def test_padding_sliding_sinks_prefix_and_bigbird_draw_the_library_masks():
    lengths = torch.tensor([5, 0, 3])
    dense = fx.dense_mask(fx.padding(lengths), 4, 5, batch=3, heads=1)
    assert torch.equal(dense, padding_mask(lengths, 5).unsqueeze(1).expand(3, 1, 4, 5))
    for causal in (True, False):
        drawn = fx.dense_mask(fx.sliding_window(3, causal=causal), 11)
        assert torch.equal(drawn, sliding_window_mask(11, 3, causal=causal))
    assert torch.equal(fx.dense_mask(fx.sinks_window(4, 2), 13), sink_window_mask(13, 4, 2))
    prefix = causal_mask(9) | (torch.arange(9) < 4)[None, :]
    assert torch.equal(fx.dense_mask(fx.prefix_lm(4), 9), prefix)
    layout = bigbird_layout(4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(fx.dense_mask(fx.bigbird(layout, 5), 19), block_sparse_mask(19, 5, layout))


def test_document_mask_is_block_diagonal_and_causal():
    doc_ids, positions = fx.pack_documents([3, 1, 4])
    assert doc_ids.tolist() == [0, 0, 0, 1, 2, 2, 2, 2]
    assert positions.tolist() == [0, 1, 2, 0, 0, 1, 2, 3]
    blocks = torch.block_diag(*(torch.ones(s, s, dtype=torch.bool) for s in (3, 1, 4)))
    assert torch.equal(fx.dense_mask(fx.document(doc_ids, causal=False), 8), blocks)
    assert torch.equal(fx.dense_mask(fx.document(doc_ids), 8), blocks & causal_mask(8))
    both = fx.and_masks(fx.document(doc_ids, causal=False), fx.causal())
    assert torch.equal(fx.dense_mask(both, 8), blocks & causal_mask(8))


def test_bad_arguments_are_refused_with_their_names():
    with pytest.raises(ValueError, match="window"):
        fx.sliding_window(0)
    with pytest.raises(TypeError, match="causal"):
        fx.sliding_window(3, causal="yes")
    with pytest.raises(TypeError, match="doc_ids"):
        fx.document(torch.zeros(4))
    with pytest.raises(TypeError, match="lengths"):
        fx.padding([[1, 2]])
    with pytest.raises(ValueError, match="lengths"):
        fx.pack_documents([3, 0])
    with pytest.raises(ValueError, match="cap"):
        fx.softcap(0.0)
    with pytest.raises(TypeError, match="RelativePositionBias"):
        fx.t5_bias(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="layout"):
        fx.bigbird(torch.ones(2, 2), 4)
    with pytest.raises(ValueError, match="m >= n"):
        fx.alibi(4, n=5, m=3)


def test_too_old_torch_is_refused_clearly(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.5.1")
    ok, why = fx.flex_available()
    assert not ok and "torch >= 2.6" in why
    with pytest.raises(RuntimeError, match="torch >= 2.6"):
        fx.dense_mask(fx.causal(), 3)


# ---- through FlexAttention against the library's attention ------------------------------


@pytest.mark.parametrize("n,m", _shapes())
def test_flex_with_each_mask_equals_sdpa_with_the_dense_mask(n, m):
    q, k, v = _qkv(2, 2, n, m, d_v=5, seed=n * 100 + m)
    lengths = torch.tensor([m, max(m // 2, 0)])
    cases = [
        (fx.causal("bottom_right", n=n, m=m), causal_mask(n, m, alignment="bottom_right")),
        (fx.padding(lengths), padding_mask(lengths, m)[:, None]),
    ]
    if n == m:
        cases.append((fx.sliding_window(4), sliding_window_mask(n, 4)))
        cases.append((fx.sinks_window(3, 2), sink_window_mask(n, 3, 2)))
    for mask_mod, dense in cases:
        bm = fx.block_mask(mask_mod, n, m, batch=2, heads=1, block_size=16)
        out = fx.flex(q, k, v, block_mask=bm)
        torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, dense), **TOL)
        if dense.expand(2, 1, n, m).any(-1).all():  # torch's SDPA gives NaN for empty rows
            sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, dense)
            torch.testing.assert_close(out, sdpa, **TOL)


def test_fully_masked_rows_give_zeros_never_nan():
    q, k, v = _qkv(1, 2, 6, 6)
    out = fx.flex(q, k[:, :, :3], v[:, :, :3], mask_mod=fx.causal("bottom_right", n=6, m=3))
    assert not out.isnan().any()
    assert torch.equal(out[:, :, :3], torch.zeros_like(out[:, :, :3]))
    expected = scaled_dot_product_attention(q, k[:, :, :3], v[:, :, :3], "causal")
    torch.testing.assert_close(out, expected, **TOL)


@pytest.mark.parametrize("n,m", [(1, 1), (7, 7), (4, 11)])
def test_score_mods_equal_the_library_biases(n, m):
    q, k, v = _qkv(2, 4, n, m, seed=3)
    bias = alibi_bias(4, n, m)
    out = fx.flex(q, k, v, score_mod=fx.alibi(4, n=n, m=m))
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, bias), **TOL)
    t5 = RelativePositionBias(4, num_buckets=8, max_distance=16)
    torch.nn.init.normal_(t5.bias.weight)
    with torch.no_grad():
        out = fx.flex(q, k, v, score_mod=fx.t5_bias(t5, n=n, m=m))
        torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, t5(n, m)), **TOL)
    cap = 0.5
    scores = cap * torch.tanh(q @ k.transpose(-2, -1) / 8**0.5 / cap)
    expected = torch.softmax(scores, -1) @ v
    torch.testing.assert_close(fx.flex(q, k, v, score_mod=fx.softcap(cap)), expected, **TOL)


# ---- the kernel option ------------------------------------------------------------------


def test_flex_is_registered_with_what_it_supports():
    record = KERNELS["flex"]
    assert record.masks and record.score_bias and not record.return_weights
    assert not record.dropout and record.backward == "gpu"
    assert repr(KERNELS) == repr(tuple(KERNELS)) and "'flex'" in repr(KERNELS)  # names only


@pytest.mark.parametrize("n,m", [(1, 1), (5, 9), (9, 9), (17, 3)])
def test_sdpa_kernel_flex_equals_the_reference(n, m):
    g = torch.Generator().manual_seed(n + m)
    q, k = torch.randn(2, 3, n, 8, generator=g), torch.randn(3, m, 8, generator=g)
    v = torch.randn(1, 3, m, 6, generator=g)  # batch dimensions broadcast
    masks = [
        None,
        "causal",
        torch.rand(n, m, generator=g) > 0.5,  # fully masked rows likely
        torch.randn(3, n, m, generator=g).masked_fill(
            torch.rand(3, n, m, generator=g) > 0.7, -1e9
        ),
    ]
    for mask in masks:
        out = scaled_dot_product_attention(q, k, v, mask, kernel="flex")
        torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, mask), **TOL)
        assert not out.isnan().any()


def test_sdpa_kernel_flex_half_and_refusals():
    q, k, v = (t.to(torch.bfloat16) for t in _qkv(1, 2, 6, 6))
    out = scaled_dot_product_attention(q, k, v, "causal", kernel="flex")
    assert out.dtype == torch.bfloat16
    ref = scaled_dot_product_attention(q, k, v, "causal")
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)
    with pytest.raises(ValueError, match="kernel='flex' returns no weights"):
        scaled_dot_product_attention(q, k, v, kernel="flex", return_weights=True)
    with pytest.raises(ValueError, match="kernel='flex' takes"):
        scaled_dot_product_attention(q, k, v, kernel="flex", dropout=0.1)
    q = q.float().requires_grad_()
    with pytest.raises(ValueError, match="no backward on the CPU"):
        scaled_dot_product_attention(q, q, q, kernel="flex")
    with torch.no_grad():
        scaled_dot_product_attention(q, q, q, kernel="flex")  # inference is fine


def test_multihead_kernel_flex_equals_the_reference():
    torch.manual_seed(5)
    ref = MultiHeadAttention(24, 4, num_kv_heads=2).eval()
    fast = MultiHeadAttention(24, 4, num_kv_heads=2, kernel="flex").eval()
    fast.load_state_dict(ref.state_dict())
    x = torch.randn(2, 7, 24)
    pad = padding_mask(torch.tensor([7, 4]), 7)[:, None]
    bias = alibi_bias(4, 7)
    with torch.no_grad():
        for mask in (None, "causal", pad):
            torch.testing.assert_close(fast(x, mask=mask), ref(x, mask=mask), **TOL)
        torch.testing.assert_close(
            fast(x, mask="causal", score_bias=bias), ref(x, mask="causal", score_bias=bias), **TOL
        )
    with pytest.raises(ValueError, match="returns no weights"):
        fast(x, return_weights=True)


# ---- packed sequences -------------------------------------------------------------------


def test_packed_documents_give_each_document_its_own_attention():
    lengths = [5, 2, 7]
    doc_ids, _ = fx.pack_documents(lengths)
    q, k, v = _qkv(1, 2, 14, 14, seed=9)
    packed = fx.flex(q, k, v, mask_mod=fx.document(doc_ids))
    start = 0
    for length in lengths:
        part = slice(start, start + length)
        alone = scaled_dot_product_attention(q[:, :, part], k[:, :, part], v[:, :, part], "causal")
        torch.testing.assert_close(packed[:, :, part], alone, **TOL)
        start += length


# ---- compiled: one shape ----------------------------------------------------------------


@pytest.fixture(scope="module")
def compiled_ok():
    ok, why = fx.flex_available(compiled=True)
    if not ok:
        pytest.skip(why)
    return True


def test_compiled_sliding_window_equals_dense_sdpa(compiled_ok):
    q, k, v = _qkv(1, 2, 300, 300, d=16, seed=11)
    bm = fx.block_mask(fx.sliding_window(40), 300, block_size=128)
    assert 0 < fx.block_fraction(bm) < 1
    out = fx.flex(q, k, v, block_mask=bm, compiled=True)
    expected = scaled_dot_product_attention(q, k, v, sliding_window_mask(300, 40))
    torch.testing.assert_close(out, expected, **TOL)


def test_flex_is_exported():
    assert selfattn.flex is fx
