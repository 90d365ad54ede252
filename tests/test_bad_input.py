"""Bad and edge-case input: every public function works or says what is wrong.

Property tests (hypothesis, the quick "book" profile of conftest.py) throw generated
shapes, dtypes and sizes at the core modules (attention, masks, multihead,
positional): a call either raises ValueError/TypeError naming the argument, or
returns what an independent float64 oracle computes. Below them, one test per item
of the robustness review.
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from selfattn import (
    KVCache,
    MultiHeadAttention,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    apply_rope_complex,
    attention_stack,
    causal_mask,
    kv_cache_bytes,
    merge_heads,
    mha_flops,
    mha_param_count,
    padding_mask,
    rope_frequencies,
    scaled_dot_product_attention,
    sinusoidal_encoding,
    sliding_window_mask,
    softmax,
    split_heads,
    to_additive_mask,
)
from selfattn.data.vocab import Vocab
from selfattn.models import (
    AttentionClassifier,
    Decoder,
    MiniGPT,
    OrderModel,
    SelfAttention,
    TransformerBlock,
)
from selfattn.positional import LearnedPositionalEmbedding, RotaryEmbedding

ERRORS = (ValueError, TypeError)


def _raises_naming(fn, *names):
    """``fn()`` must raise ValueError/TypeError whose message names one of ``names``."""
    with pytest.raises(ERRORS) as info:
        fn()
    message = str(info.value)
    assert any(name in message for name in names), message
    return message


# -- oracles --------------------------------------------------------------------------------


def _oracle(q, k, v, mask=None, scale=None):
    """softmax(q k^T scale + mask) v in float64, fully masked rows giving zeros."""
    q, k, v = q.double(), k.double(), v.double()
    d = q.shape[-1]
    scale = (1 / math.sqrt(d) if d else 1.0) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask.double()
    if s.shape[-1] == 0:
        return s @ v
    w = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return w @ v


# -- strategies -----------------------------------------------------------------------------

small = st.integers(0, 3)
shape = st.lists(small, min_size=0, max_size=4).map(tuple)
bad_size = st.one_of(
    st.integers(-5, -1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["3", None, True, [2], (2,), 2.5, torch.tensor(2.0)]),
)
not_a_tensor = st.sampled_from([None, 3, 2.5, "q", [[1.0, 2.0]], (1.0,)])


def _tensor(shape, dtype=torch.float32, scale=1.0):
    return scale * torch.randn(shape, dtype=torch.float64).to(dtype)


# -- attention ------------------------------------------------------------------------------


@given(q_shape=shape, k_shape=shape, v_shape=shape, mask_shape=st.none() | shape, data=st.data())
def test_sdpa_any_shapes_raise_clearly_or_match_the_oracle(
    q_shape, k_shape, v_shape, mask_shape, data
):
    q, k, v = _tensor(q_shape), _tensor(k_shape), _tensor(v_shape)
    mask = None
    if mask_shape is not None:
        as_bool = data.draw(st.booleans())
        mask = torch.rand(mask_shape) > 0.3 if as_bool else _tensor(mask_shape)
    try:
        out = scaled_dot_product_attention(q, k, v, mask)
    except ERRORS as err:
        assert any(name in str(err) for name in ("q", "k", "v", "mask")), str(err)
        return
    expected = _oracle(q, k, v, mask)
    assert out.shape == expected.shape and out.dtype == q.dtype
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)


def _bad_values(which):
    """Values that are wrong for one argument of scaled_dot_product_attention."""
    good = {
        "q": torch.randn(2, 3, 4),
        "k": torch.randn(2, 5, 4),
        "v": torch.randn(2, 5, 6),
        "mask": torch.ones(3, 5, dtype=torch.bool),
    }
    if which in good:
        t = good[which]
        return [
            None if which != "mask" else False,
            3,
            "x",
            t.tolist(),
            t.long(),
            t.to("meta"),
            t.to(torch.complex64),
            t[..., :1, :1].expand(2, 2, 2) if which != "mask" else t[:, :2],
        ] + ([t.double()] if which != "mask" else [t.int()])
    if which == "scale":
        return ["2", float("nan"), float("inf"), True, [1.0], 1j]
    return [None, 1, "yes", torch.tensor([True])]  # return_weights (0-dim bools are flags)


@given(
    which=st.sampled_from(["q", "k", "v", "mask", "scale", "return_weights"]),
    index=st.integers(0, 8),
)
def test_sdpa_bad_arguments_are_named(which, index):
    args = {
        "q": torch.randn(2, 3, 4),
        "k": torch.randn(2, 5, 4),
        "v": torch.randn(2, 5, 6),
        "mask": None,
        "scale": None,
        "return_weights": False,
    }
    bad = _bad_values(which)
    args[which] = bad[index % len(bad)]
    _raises_naming(lambda: scaled_dot_product_attention(**args), which)


def test_sdpa_float16_large_scores_stay_finite_and_return_float16():
    g = torch.Generator().manual_seed(0)
    q = 100 * torch.randn(1, 2, 6, 16, generator=g)
    k = 100 * torch.randn(1, 2, 6, 16, generator=g)
    v = torch.randn(1, 2, 6, 16, generator=g)
    for dtype in (torch.float16, torch.bfloat16):
        out, w = scaled_dot_product_attention(
            q.to(dtype), k.to(dtype), v.to(dtype), return_weights=True
        )
        assert out.dtype == dtype and w.dtype == dtype and torch.isfinite(out).all()
        ref = _oracle(q.to(dtype), k.to(dtype), v.to(dtype))
        torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)
    # these dot products pass float16's largest value: computed in float16 they overflow
    naive = torch.softmax((q.half() @ k.half().transpose(-2, -1)) / 4, dim=-1)
    assert not torch.isfinite(naive).all()


def test_sdpa_empty_dimensions_behave_as_torch():
    F = torch.nn.functional
    for qs, ks, vs in (
        ((2, 0, 4), (2, 3, 4), (2, 3, 5)),  # no queries: empty output
        ((2, 3, 4), (2, 0, 4), (2, 0, 5)),  # no keys: zeros
        ((2, 3, 0), (2, 3, 0), (2, 3, 5)),  # d_k = 0: uniform weights
        ((0, 3, 4), (0, 3, 4), (0, 3, 4)),
        ((2, 3, 4), (2, 3, 4), (2, 3, 0)),
    ):
        q, k, v = torch.randn(qs), torch.randn(ks), torch.randn(vs)
        torch.testing.assert_close(
            scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v)
        )
    assert softmax(torch.empty(2, 0)).shape == (2, 0)


def test_softmax_dim_must_name_one_dimension():
    x = torch.randn(2, 3)
    _raises_naming(lambda: softmax(x, dim=None), "dim")
    _raises_naming(lambda: softmax(x, dim=2), "dim")
    _raises_naming(lambda: softmax(x, dim=1.0), "dim")
    _raises_naming(lambda: softmax([1.0, 2.0]), "x")
    torch.testing.assert_close(softmax(x, dim=0), torch.softmax(x, dim=0))


def test_scale_must_be_a_real_number():
    q = torch.randn(2, 3, 4)
    msg = _raises_naming(lambda: scaled_dot_product_attention(q, q, q, scale="2"), "scale")
    assert "str" in msg
    _raises_naming(lambda: scaled_dot_product_attention(q, q, q, scale=float("nan")), "scale")
    out = scaled_dot_product_attention(q, q, q, scale=torch.tensor(0.5))
    torch.testing.assert_close(out.double(), _oracle(q, q, q, scale=0.5))


def test_devices_must_agree_and_meta_is_refused():
    q = torch.randn(2, 3, 4)
    _raises_naming(lambda: scaled_dot_product_attention(q.to("meta"), q, q), "q", "device")
    _raises_naming(lambda: scaled_dot_product_attention(q, q.to("meta"), q), "k")
    mask = torch.ones(3, 3, dtype=torch.bool, device="meta")
    _raises_naming(lambda: scaled_dot_product_attention(q, q, q, mask), "mask")
    mha = MultiHeadAttention(4, 2)
    _raises_naming(lambda: mha(q.to("meta")), "x")
    _raises_naming(lambda: mha(q, context=q.to("meta")), "context")


def test_non_tensors_get_a_type_error_naming_the_argument():
    q = torch.randn(3, 4)
    _raises_naming(lambda: scaled_dot_product_attention(None, q, q), "q")
    _raises_naming(lambda: scaled_dot_product_attention(q, q, [[1.0]]), "v")
    _raises_naming(lambda: MultiHeadAttention(4, 2)(None), "x")
    _raises_naming(lambda: MultiHeadAttention(4, 2)(q, context="c"), "context")
    _raises_naming(lambda: split_heads(None, 2), "x")
    _raises_naming(lambda: merge_heads([1.0]), "x")
    _raises_naming(lambda: apply_rope(None, torch.arange(3)), "x")
    _raises_naming(lambda: apply_rope(q, None), "positions")
    _raises_naming(lambda: apply_rope(q, "abc"), "positions")
    _raises_naming(lambda: to_additive_mask(None), "mask")
    _raises_naming(lambda: KVCache().append(None, None), "k")


# -- masks ------------------------------------------------------------------------------------


@given(n=bad_size)
def test_mask_sizes_are_validated(n):
    _raises_naming(lambda: causal_mask(n), "n")
    if n is not None:  # m=None means m = n
        _raises_naming(lambda: causal_mask(3, n), "m")
    _raises_naming(lambda: sliding_window_mask(n, 2), "n")
    _raises_naming(lambda: sliding_window_mask(4, n), "window")
    if not (isinstance(n, int) and not isinstance(n, bool)) or n < 0:
        _raises_naming(lambda: padding_mask([1, 2], n), "max_len")


@given(
    n=st.integers(1, 6), m=st.integers(1, 6), align=st.sampled_from(["top_left", "bottom_right"])
)
def test_causal_mask_matches_its_definition(n, m, align):
    offset = 0 if align == "top_left" else m - n
    expected = torch.tensor([[j <= i + offset for j in range(m)] for i in range(n)])
    assert torch.equal(causal_mask(n, m, alignment=align), expected.reshape(n, m))


def test_mask_review_items():
    msg = _raises_naming(lambda: causal_mask(1.5), "n")
    assert "ones()" not in msg and "float" in msg
    _raises_naming(lambda: padding_mask([2], 2.5), "max_len")
    _raises_naming(lambda: padding_mask([2, -1], 3), "length")
    _raises_naming(lambda: padding_mask([[1, 2]], 3), "lengths")
    _raises_naming(lambda: padding_mask(["a"], 3), "lengths")
    _raises_naming(lambda: sliding_window_mask(4, 2, causal="yes"), "causal")
    _raises_naming(lambda: to_additive_mask(torch.ones(2, dtype=torch.bool), fill="x"), "fill")
    _raises_naming(lambda: to_additive_mask(torch.ones(2, dtype=torch.bool), "float"), "dtype")
    assert padding_mask([0, 2], 0 + 2).shape == (2, 1, 2)
    assert padding_mask([], 3).shape == (0, 1, 3)


# -- multihead ------------------------------------------------------------------------------


@given(value=bad_size)
def test_multihead_sizes_are_validated(value):
    _raises_naming(lambda: MultiHeadAttention(value, 2), "d_model")
    _raises_naming(lambda: MultiHeadAttention(8, value), "num_heads")
    _raises_naming(lambda: split_heads(torch.randn(2, 3, 8), value), "num_heads")
    _raises_naming(lambda: mha_param_count(value), "d_model")
    _raises_naming(lambda: kv_cache_bytes(2, 2, 8, value), "n")
    _raises_naming(lambda: kv_cache_bytes(value, 2, 8, 4), "num_layers")
    _raises_naming(lambda: kv_cache_bytes(2, 2, 8, 4, batch=value), "batch")
    _raises_naming(lambda: mha_flops(value, 8), "n")
    _raises_naming(lambda: attention_stack(value, 8, 2), "num_layers")


@given(
    batch=st.integers(1, 2),
    n=st.integers(0, 3),
    mask_shape=st.none() | shape,
    as_bool=st.booleans(),
    half=st.booleans(),
)
def test_mha_any_mask_raises_clearly_or_matches_the_oracle(batch, n, mask_shape, as_bool, half):
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(batch, n, 8)
    mask = None
    if mask_shape is not None:
        mask = torch.rand(mask_shape) > 0.3 if as_bool else torch.randn(mask_shape)
    dtype = torch.float16 if half else torch.float32
    try:
        y = mha.to(dtype)(x.to(dtype), mask=mask)
    except ERRORS as err:
        assert "mask" in str(err), str(err)
        return
    mha = mha.double()
    q, k, v = (split_heads(t, 2) for t in mha.qkv(x.to(dtype).double()).split(8, dim=-1))
    heads_mask = mask
    if mask is not None and mask.dim() == 3:
        heads_mask = mask.unsqueeze(1)
    expected = mha.out(merge_heads(_oracle(q, k, v, heads_mask)))
    assert y.dtype == dtype and y.shape == (batch, n, 8)
    tol = 2e-2 if half else 1e-5
    torch.testing.assert_close(y.double(), expected, atol=tol, rtol=tol)


def test_mha_float16_large_inputs_stay_finite():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2).eval()
    x = 30 * torch.randn(1, 5, 16)
    with torch.no_grad():
        mha.qkv.weight.mul_(8)
        y32 = mha(x)
        y16 = mha.half()(x.half())
    assert y16.dtype == torch.float16 and torch.isfinite(y16).all()
    torch.testing.assert_close(y16.float(), y32, atol=0.5, rtol=5e-2)


def test_multihead_review_items():
    _raises_naming(lambda: mha_param_count(-3), "d_model")
    _raises_naming(lambda: kv_cache_bytes(2, 2, 8, n=-5), "n")
    _raises_naming(lambda: kv_cache_bytes(2, 2, 8, 4, "float16"), "dtype")
    _raises_naming(lambda: split_heads(torch.randn(2, 3, 8), 0), "num_heads")
    _raises_naming(lambda: split_heads(torch.randn(2, 3, 8), 3), "num_heads")
    _raises_naming(lambda: MultiHeadAttention(8, 2, dropout="0.1"), "dropout")
    _raises_naming(lambda: MultiHeadAttention(8, 2, bias="yes"), "bias")
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    _raises_naming(lambda: mha(x[0], context=x), "context")  # unbatched x, batched context
    cache = KVCache()
    mha(x, cache=cache)
    _raises_naming(lambda: mha(x.double(), cache=cache), "x", "dtype")
    _raises_naming(lambda: cache.append(torch.randn(2, 2, 1, 4).double(), torch.randn(2)), "v")
    # empty sequences: empty outputs, as torch's own layer gives
    assert mha(torch.randn(2, 0, 8)).shape == (2, 0, 8)
    assert mha(torch.randn(0, 3, 8)).shape == (0, 3, 8)
    assert kv_cache_bytes(2, 2, 8, 0) == 0 and mha_flops(0, 8) == 0


# -- positional -------------------------------------------------------------------------------


@given(value=bad_size)
def test_positional_sizes_are_validated(value):
    _raises_naming(lambda: sinusoidal_encoding(value, 8), "n")
    _raises_naming(lambda: sinusoidal_encoding(4, value), "d")
    _raises_naming(lambda: alibi_slopes(value), "num_heads")
    _raises_naming(lambda: alibi_bias(2, value), "n")
    _raises_naming(lambda: rope_frequencies(value), "d")
    _raises_naming(lambda: RotaryEmbedding(value), "d_head")
    _raises_naming(lambda: LearnedPositionalEmbedding(value, 4), "max_len")
    _raises_naming(
        lambda: LearnedPositionalEmbedding(8, 4)(torch.randn(2, 8 - 1, 4), offset=value), "offset"
    )


@given(x_batch=shape, pos_batch=shape, n=st.integers(1, 3), complex_form=st.booleans())
def test_rope_positions_never_enlarge_the_batch(x_batch, pos_batch, n, complex_form):
    x = torch.randn(*x_batch, n, 4)
    positions = torch.randint(0, 50, (*pos_batch, n))
    rope = apply_rope_complex if complex_form else apply_rope
    try:
        out = rope(x, positions)
    except ERRORS as err:
        assert "positions" in str(err), str(err)
        return
    assert out.shape == x.shape
    # the oracle: rotate each pair by its own angle, positions broadcast to x's batch
    pos = positions.double().expand(*x.shape[:-1])
    theta = 10000.0 ** (-torch.arange(0, 4, 2, dtype=torch.float64) / 4)
    angle = pos[..., None] * theta
    x1, x2 = x.double()[..., 0::2], x.double()[..., 1::2]
    ref = torch.stack(
        (x1 * angle.cos() - x2 * angle.sin(), x1 * angle.sin() + x2 * angle.cos()), -1
    )
    torch.testing.assert_close(out.double(), ref.flatten(-2), atol=1e-5, rtol=1e-5)


def test_rope_review_item():
    msg = _raises_naming(
        lambda: apply_rope(torch.randn(4, 8), torch.arange(8).reshape(2, 4)), "positions"
    )
    assert "(2, 4)" in msg
    _raises_naming(
        lambda: apply_rope(torch.randn(4, 8), torch.tensor([0.0, 1, 2, math.inf])), "positions"
    )
    _raises_naming(lambda: sinusoidal_encoding(4, 8, base="1e4"), "base")
    _raises_naming(lambda: sinusoidal_encoding(4, 8, base=math.inf), "base")


# -- models and data ----------------------------------------------------------------------------


def test_self_attention_reads_a_3d_mask_per_sequence():
    torch.manual_seed(0)
    layer = SelfAttention(8, num_heads=2)
    x = torch.randn(2, 4, 8)
    mask = torch.rand(2, 4, 4) > 0.4  # B = 2 = n_heads: once read along the head axis
    mask[..., 0] = True
    out = layer(x, mask=mask)
    for b in range(2):
        alone = layer(x[b : b + 1], mask=mask[b : b + 1])
        torch.testing.assert_close(out[b : b + 1], alone)
    _raises_naming(lambda: layer(x, mask=mask[0, 0]), "mask")
    _raises_naming(lambda: layer(x, temperature="hot"), "temperature")
    _raises_naming(lambda: SelfAttention(-2), "d_model")


def test_blocks_refuse_a_context_they_would_ignore():
    block = TransformerBlock(8, 2)
    x = torch.randn(1, 3, 8)
    _raises_naming(lambda: block(x, context=x), "context", "cross_attention")
    _raises_naming(lambda: block(x, cross_cache=KVCache()), "cross_cache")
    _raises_naming(lambda: Decoder(8, 2, 1)(x, context=x), "context", "cross_attention")
    with_cross = Decoder(8, 2, 1, cross_attention=True)
    assert with_cross(x, context=torch.randn(1, 5, 8)).shape == (1, 3, 8)


def test_model_sizes_and_token_ids_are_validated():
    _raises_naming(lambda: OrderModel(num_layers=-1), "num_layers")
    _raises_naming(lambda: OrderModel(d_model=2.5), "d_model")
    _raises_naming(lambda: Decoder(8, 2, 0), "num_layers")
    _raises_naming(lambda: TransformerBlock(8, 2, mlp_ratio=-1), "mlp_ratio")  # 0: no MLP
    ids = torch.tensor([[1, 2, 99]])
    _raises_naming(lambda: OrderModel(vocab_size=16)(ids), "tokens")
    _raises_naming(lambda: MiniGPT(16, d_model=8, num_heads=2, num_layers=1)(ids), "ids")
    _raises_naming(lambda: MiniGPT(16, d_model=8, num_heads=2, num_layers=1)(-ids), "ids")
    _raises_naming(lambda: AttentionClassifier(16, 3, d_model=8)(ids), "ids")
    gpt = MiniGPT(16, d_model=8, num_heads=2, num_layers=1)
    _raises_naming(lambda: gpt.generate(ids % 16, 2.5), "max_new_tokens")
    _raises_naming(lambda: gpt.generate(ids % 16, 2, temperature=0), "temperature")


def test_vocab_decode_refuses_ids_outside_the_vocabulary():
    v = Vocab(["a", "b"])
    assert v.decode([1, 2, 0]) == ["a", "b"]
    _raises_naming(lambda: v.decode([-1]), "ids")
    _raises_naming(lambda: v.decode([3]), "ids")
    _raises_naming(lambda: v.decode([1.0]), "ids")
    _raises_naming(lambda: v.encode("ab"), "tokens")


@pytest.mark.parametrize("value", [None, "x", 2.5])
def test_sweep_of_non_tensor_arguments_gives_type_errors(value):
    from selfattn.data.images import patch_coverage, patchify
    from selfattn.data.text import char_windows, encode_sentences, is_grammatical, word_vocab
    from selfattn.models import (
        MLP,
        KeyValueRecallModel,
        MiniViT,
        PatchEmbedding,
        SingleHeadSelfAttention,
        clip_loss,
        count_parameters,
        lookup_loss,
        mlm_loss,
        token_accuracy,
    )

    _raises_naming(lambda: patchify(value, 2), "images")
    _raises_naming(lambda: patch_coverage(value, 2), "masks")
    _raises_naming(lambda: char_windows(value, 4, 2), "data")
    if not isinstance(value, str):  # any string is a (possibly ungrammatical) sentence
        _raises_naming(lambda: is_grammatical(value), "sentence")
    _raises_naming(lambda: encode_sentences(["the cat ."], value), "vocab")
    _raises_naming(lambda: clip_loss(value), "logits")
    _raises_naming(lambda: mlm_loss(value, torch.zeros(2, 3)), "logits")
    _raises_naming(lambda: count_parameters(value), "model")
    _raises_naming(lambda: token_accuracy(value, torch.zeros(1, 2), torch.zeros(1, 2)), "model")
    _raises_naming(lambda: lookup_loss(torch.nn.Linear(1, 1), value), "batch")
    _raises_naming(lambda: SingleHeadSelfAttention(4, 4)(value), "x")
    _raises_naming(lambda: encode_sentences("the cat .", word_vocab()), "sentences")
    _raises_naming(lambda: patchify(torch.zeros(1, 1, 4, 4), 0), "patch")
    _raises_naming(lambda: char_windows(torch.arange(10), -1, 2), "block_size")
    for make, name in (
        (lambda: KeyValueRecallModel(-1, 4, 8, 8), "n_keys"),
        (lambda: MLP(-1, 4), "d_model"),
        (lambda: TransformerBlock(-1, 2), "d_model"),
        (lambda: PatchEmbedding(8, -1, 3, 8), "patch"),
        (lambda: MiniViT(-1), "num_classes"),
    ):
        _raises_naming(make, name)


def test_reference_and_train_loop_name_their_arguments():
    import numpy as np
    from selfattn import train_loop
    from selfattn.reference import attention_steps, softmax_np

    W = np.ones((4, 2))
    _raises_naming(lambda: attention_steps("a", W, W, W), "X")
    _raises_naming(lambda: attention_steps(np.ones((3, 4)), W, W, [["b"]]), "W_v")
    _raises_naming(lambda: softmax_np(None), "x")
    _raises_naming(lambda: softmax_np(np.ones((2, 3)), axis=None), "axis")
    assert softmax_np(np.zeros(2, dtype=np.float32)).dtype == np.float32
    model = torch.nn.Linear(1, 1)

    def loss(m, b):
        return m(b).sum()

    _raises_naming(lambda: train_loop(None, [], loss, steps=1), "model")
    _raises_naming(lambda: train_loop(model, [], loss, steps=2.5), "steps")
    _raises_naming(lambda: train_loop(model, [], loss, steps=1, lr=-1), "lr")
    _raises_naming(lambda: train_loop(model, [], "loss", steps=1), "loss_fn")


def test_constructor_sizes_of_tasks_and_models():
    from selfattn.data.images import make_shapes
    from selfattn.data.order_tasks import ShiftedCopyTask
    from selfattn.models import LookupHeadsModel, MiniBERT, MiniCLIP

    _raises_naming(lambda: ShiftedCopyTask(shift=-1), "shift")
    _raises_naming(lambda: ShiftedCopyTask(vocab_size=2.5), "vocab_size")
    _raises_naming(lambda: LookupHeadsModel(vocab_size=-1), "vocab_size")
    _raises_naming(lambda: MiniBERT(10, d_model=-1), "d_model")
    _raises_naming(lambda: MiniBERT(10, pad_id=-1), "pad_id")
    _raises_naming(lambda: MiniCLIP(10, embed_dim=-1), "embed_dim")
    _raises_naming(lambda: make_shapes(2, seed=2.5), "seed")
    _raises_naming(lambda: mha_param_count(8, num_heads=3), "num_heads")
    _raises_naming(lambda: mha_flops(4, 8, num_heads=-1), "num_heads")
