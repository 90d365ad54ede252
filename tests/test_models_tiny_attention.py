"""The tiny attention models against the formula and torch's own attention."""

import math

import pytest
import torch
from long_range_training import long_range_accuracy
from selfattn.models import AttentionClassifier, SelfAttention
from selfattn.positional import sinusoidal_encoding


def test_self_attention_is_the_formula():
    torch.manual_seed(0)
    layer = SelfAttention(6, d_k=4, d_v=5)
    x = torch.randn(2, 7, 6)
    out, w = layer(x, return_weights=True)
    q, k, v = x @ layer.w_q.weight.T, x @ layer.w_k.weight.T, x @ layer.w_v.weight.T
    expected_w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(4), dim=-1)
    torch.testing.assert_close(w[:, 0], expected_w, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out, expected_w @ v, atol=1e-5, rtol=1e-5)
    assert out.shape == (2, 7, 5) and w.shape == (2, 1, 7, 7)


@pytest.mark.parametrize("n_heads", [1, 2, 4])
def test_heads_agree_with_torch_sdpa_and_cross_attention_shapes(n_heads):
    torch.manual_seed(1)
    layer = SelfAttention(8, num_heads=n_heads)
    x, ctx = torch.randn(3, 5, 8), torch.randn(3, 9, 8)
    out, w = layer(x, ctx, return_weights=True)
    assert out.shape == (3, 5, 8) and w.shape == (3, n_heads, 5, 9)
    split = lambda t: t.view(3, -1, n_heads, 8 // n_heads).transpose(1, 2)  # noqa: E731
    ref = torch.nn.functional.scaled_dot_product_attention(
        split(layer.w_q(x)), split(layer.w_k(ctx)), split(layer.w_v(ctx))
    )
    torch.testing.assert_close(out, ref.transpose(1, 2).reshape(3, 5, 8), atol=1e-5, rtol=1e-5)


def test_temperature_sharpens_and_flattens():
    torch.manual_seed(2)
    layer = SelfAttention(4)
    x = torch.randn(1, 6, 4) * 3
    _, w1 = layer(x, return_weights=True)
    _, cold = layer(x, temperature=0.01, return_weights=True)
    _, hot = layer(x, temperature=1e4, return_weights=True)
    torch.testing.assert_close(hot, torch.full_like(hot, 1 / 6), atol=1e-3, rtol=0)
    assert torch.equal(cold.argmax(-1), w1.argmax(-1)) and (cold.amax(-1) > 0.99).all()


def test_mask_and_n_equals_one():
    layer = SelfAttention(4)
    x = torch.randn(2, 1, 4)
    out = layer(x)
    torch.testing.assert_close(out, layer.w_v(x))  # one key: weight 1 on itself
    x = torch.randn(1, 3, 4)
    mask = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    out, w = layer(x, mask=mask, return_weights=True)
    assert (
        w[0, 0, 1].abs().sum() == 0 and out[0, 1].abs().sum() == 0
    )  # fully masked row: zeros, no NaN
    assert w[0, 0, 0, 0] == 1


def test_classifier_adds_the_sinusoidal_positions():
    model = AttentionClassifier(5, 2, d_model=4)
    ids = torch.zeros(1, 5, dtype=torch.long)
    p = model.embed_tokens(ids)[0] - model.embed(ids)[0]
    torch.testing.assert_close(p, sinusoidal_encoding(5, 4))
    torch.testing.assert_close(
        p[3], torch.tensor([math.sin(3), math.cos(3), math.sin(3 / 100), math.cos(3 / 100)])
    )


def test_classifier_shapes_weights_and_query_position():
    torch.manual_seed(0)
    for positions in ("sinusoidal", "learned", None):
        model = AttentionClassifier(
            10, 3, d_model=8, num_layers=2, num_heads=2, positions=positions, max_len=6, mlp=True
        )
        ids = torch.randint(1, 10, (4, 6))
        logits, weights = model(ids, return_weights=True)
        assert logits.shape == (4, 3) and len(weights) == 2 and weights[0].shape == (4, 2, 6, 6)
        torch.testing.assert_close(weights[1].sum(-1), torch.ones(4, 2, 6))
        torch.testing.assert_close(model(ids, torch.full((4,), 5)), logits)
        assert not torch.allclose(model(ids, torch.zeros(4, dtype=torch.long)), logits)


def test_without_positions_the_model_is_blind_to_order():
    torch.manual_seed(0)
    model = AttentionClassifier(10, 3, d_model=8, positions=None)
    ids = torch.tensor([[1, 2, 3, 4, 9]])
    shuffled = torch.tensor([[3, 1, 4, 2, 9]])  # same tokens, same query token last
    torch.testing.assert_close(model(ids), model(shuffled), atol=1e-6, rtol=1e-5)


def test_classifier_learns_the_long_range_task():
    accuracy = long_range_accuracy(
        lambda vocab: AttentionClassifier(vocab, 4, d_model=16),
        (1, 20),
        lr=3e-3,
        eval_length=15,
        eval_seed=5,
    )
    assert accuracy > 0.95


def test_errors():
    with pytest.raises(ValueError, match="must be divisible by num_heads=3"):
        SelfAttention(8, num_heads=3)
    with pytest.raises(ValueError, match=r"x must have shape \(B, n, d_model=4\), got \(2, 4\)"):
        SelfAttention(4)(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="temperature must be > 0, got 0"):
        SelfAttention(4)(torch.zeros(1, 2, 4), temperature=0)
    with pytest.raises(ValueError, match="positions must be"):
        AttentionClassifier(5, 2, positions="rotary")
    with pytest.raises(ValueError, match="positions 0..6 do not fit the table of max_len=6"):
        AttentionClassifier(5, 2, positions="learned", max_len=6)(
            torch.ones(1, 7, dtype=torch.long)
        )
    with pytest.raises(ValueError, match="query_position must be"):
        AttentionClassifier(5, 2)(torch.ones(2, 3, dtype=torch.long), torch.tensor([0, 3]))
    with pytest.raises(TypeError, match="ids must be a torch.long tensor of shape"):
        AttentionClassifier(5, 2)(torch.ones(2, 3))
    with pytest.raises(ValueError, match="even"):
        AttentionClassifier(5, 2, d_model=3)(torch.ones(2, 3, dtype=torch.long))


def test_one_name_per_argument_no_former_aliases():
    """num_heads and num_layers only (issue 53): the former n_heads/n_layers are gone."""
    model = AttentionClassifier(7, 2, d_model=8, num_layers=2, num_heads=2)
    assert [block.attn.num_heads for block in model.blocks] == [2, 2]
    assert not hasattr(model.blocks[0].attn, "n_heads")
    with pytest.raises(TypeError, match="n_heads"):
        SelfAttention(8, n_heads=4)
    with pytest.raises(TypeError, match="n_layers"):
        AttentionClassifier(7, 2, n_layers=2)


@pytest.mark.parametrize("num_heads,bias", [(1, False), (2, True), (4, False)])
def test_self_attention_is_multihead_attention_with_the_projections_apart(num_heads, bias):
    """The chapter-2 layer plus a W_O is chapter 5's fused layer: the same function."""
    torch.manual_seed(num_heads)
    layer = SelfAttention(8, num_heads=num_heads, bias=bias).double()
    w_o = torch.nn.Linear(8, 8, bias=bias).double()
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    fused = layer.to_multihead(w_o)
    y, w = fused(x, mask=causal, return_weights=True)
    out, weights = layer(x, mask=causal, return_weights=True)
    torch.testing.assert_close(y, w_o(out))
    torch.testing.assert_close(w, weights)
    # without a W_O the fused layer's output projection is the identity
    torch.testing.assert_close(layer.to_multihead()(x), layer(x))
    with pytest.raises(ValueError, match="d_k == d_v == d_model and scaled=True"):
        SelfAttention(8, d_k=4).to_multihead()
    with pytest.raises(ValueError, match="d_k == d_v == d_model and scaled=True"):
        SelfAttention(8, scaled=False).to_multihead()


def test_single_head_layer_is_the_self_attention_layer():
    from selfattn.models import SingleHeadSelfAttention

    torch.manual_seed(0)
    single = SingleHeadSelfAttention(6, 4, 5, scaled=False)
    torch.manual_seed(0)
    general = SelfAttention(6, d_k=4, d_v=5, scaled=False)
    assert isinstance(single, SelfAttention) and single.scale == general.scale == 1.0
    x = torch.randn(2, 3, 7, 6)  # any leading shape
    out, w = single(x, return_weights=True)
    ref, ref_w = general(x.reshape(6, 7, 6), return_weights=True)
    assert out.shape == (2, 3, 7, 5) and w.shape == (2, 3, 7, 7)
    assert torch.equal(out.reshape(6, 7, 5), ref) and torch.equal(w.reshape(6, 7, 7), ref_w[:, 0])


def test_learned_positions_are_one_module():
    from selfattn.models import LookupHeadsModel
    from selfattn.positional import LearnedPositionalEmbedding

    model = AttentionClassifier(10, 3, d_model=8, positions="learned", max_len=6)
    assert isinstance(model.pos, LearnedPositionalEmbedding)
    assert isinstance(LookupHeadsModel().pos, LearnedPositionalEmbedding)
    # registered as a reader writes them: the words' table, then the positions'
    names = [n for n, _ in model.named_parameters()]
    assert names[:2] == ["embed.weight", "pos.weight"]


@pytest.mark.parametrize("num_layers,mlp", [(1, False), (2, False), (2, True)])
def test_classifier_is_transformer_blocks_built_one_after_another(num_layers, mlp):
    """Blocks of the library (attention-only unless ``mlp``), whose attention is the chapter-2
    layer with its W_O; the weights are drawn as a reader writes the model: the embedding,
    then block by block (W_Q, W_K, W_V, W_O, the MLP), the head last."""
    from selfattn.models import TransformerBlock
    from selfattn.models.transformer import MLP

    torch.manual_seed(5)
    model = AttentionClassifier(9, 4, d_model=8, num_layers=num_layers, num_heads=2, mlp=mlp)
    torch.manual_seed(5)
    embed = torch.nn.Embedding(9, 8)
    layers, w_o, mlps = [], [], []
    for _ in range(num_layers):
        layers.append(SelfAttention(8, num_heads=2))
        w_o.append(torch.nn.Linear(8, 8, bias=False))
        if mlp:
            mlps.append(MLP(8, 16))
    head = torch.nn.Linear(8, 4)
    assert torch.equal(model.embed.weight, embed.weight)
    assert len(model.blocks) == num_layers
    for i, block in enumerate(model.blocks):
        assert isinstance(block, TransformerBlock) and isinstance(block.attn, SelfAttention)
        for name in ("w_q", "w_k", "w_v"):
            assert torch.equal(getattr(block.attn, name).weight, getattr(layers[i], name).weight)
        assert torch.equal(block.attn.out.weight, w_o[i].weight)
        assert (block.mlp is None) == (not mlp) and (block.ln2 is None) == (not mlp)
        if mlp:
            assert torch.equal(block.mlp.fc.weight, mlps[i].fc.weight)
            assert torch.equal(block.mlp.proj.bias, mlps[i].proj.bias)
    assert torch.equal(model.head.weight, head.weight)


def test_classifier_blocks_compute_the_residual_layers():
    """Each block is x + W_O attn(LN(x)) [+ MLP(LN(x))], the temperature reaching the scores."""
    torch.manual_seed(0)
    model = AttentionClassifier(11, 3, d_model=8, num_layers=2, mlp=True).double()
    ids = torch.randint(0, 11, (4, 6))
    x = model.embed_tokens(ids)
    weights = []
    for block in model.blocks:
        out, w = block.attn(block.ln1(x), temperature=0.5, return_weights=True)
        x = x + out
        x = x + block.mlp.proj(torch.nn.functional.gelu(block.mlp.fc(block.ln2(x))))
        weights.append(w)
    logits, got = model(ids, temperature=0.5, return_weights=True)
    torch.testing.assert_close(logits, model.head(model.final_norm(x[:, -1])))
    for a, b in zip(got, weights):
        torch.testing.assert_close(a, b)


def test_self_attention_output_projection_and_block_call():
    torch.manual_seed(1)
    layer = SelfAttention(8, d_v=6, num_heads=2)
    x = torch.randn(2, 5, 8)
    plain = layer(x)
    w_o = torch.nn.Linear(6, 8, bias=False)
    assert layer.with_output(w_o) is layer and layer.out is w_o
    torch.testing.assert_close(layer(x), w_o(plain))
    for bad in (torch.nn.Linear(8, 8), torch.nn.Conv1d(6, 8, 1)):
        with pytest.raises(ValueError, match=r"out must be an nn.Linear\(6, 8\)"):
            SelfAttention(8, d_v=6).with_output(bad)
    # called like MultiHeadAttention inside a block: no score bias, no cache
    with pytest.raises(ValueError, match="no score_bias and no cache"):
        layer(x, score_bias=torch.zeros(5, 5))
    with pytest.raises(ValueError, match="no score_bias and no cache"):
        layer(x, cache=object())
    # to_multihead takes the layer's own W_O by default
    square = SelfAttention(8, num_heads=2).double().with_output(torch.nn.Linear(8, 8).double())
    xd = x.double()
    torch.testing.assert_close(square.to_multihead()(xd), square(xd))
