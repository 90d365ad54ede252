"""The miniature Transformers of chapter 9, against direct formulas and invariances."""

import math

import pytest
import torch
import torch.nn.functional as F
from selfattn.data.images import patchify
from selfattn.models import (
    Decoder,
    Encoder,
    MiniBERT,
    MiniCLIP,
    MiniGPT,
    MiniViT,
    PatchEmbedding,
    TransformerBlock,
    clip_loss,
    count_parameters,
    mlm_loss,
)
from selfattn.positional import LearnedPositionalEmbedding

D, H = 32, 4


def test_block_is_pre_layernorm_with_residuals():
    block = TransformerBlock(D, H).eval()
    x = torch.randn(2, 5, D)
    h = x + block.attn(block.ln1(x))
    expected = h + block.mlp.proj(F.gelu(block.mlp.fc(block.ln2(h))))
    torch.testing.assert_close(block(x), expected, atol=1e-6, rtol=1e-6)
    y, w = block(x, mask="causal", return_weights=True)
    assert y.shape == x.shape and w["self"].shape == (2, H, 5, 5)
    assert torch.all(w["self"].triu(1) == 0)


def test_encoder_padding_mask_hides_padded_positions():
    enc = Encoder(D, H, 2).eval()
    x = torch.randn(2, 7, D)
    lengths = torch.tensor([4, 7])
    mask = (torch.arange(7)[None] < lengths[:, None]).unsqueeze(1)  # (B, 1, m)
    y = enc(x, mask=mask)
    x2 = x.clone()
    x2[0, 4:] = 100 * torch.randn(3, D)  # garbage where sequence 0 is padding
    y2 = enc(x2, mask=mask)
    torch.testing.assert_close(y2[0, :4], y[0, :4], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(y2[1], y[1], atol=1e-5, rtol=1e-5)
    # the real part of sequence 0 alone, with no padding at all, gives the same outputs
    torch.testing.assert_close(enc(x[:1, :4]), y[:1, :4], atol=1e-5, rtol=1e-5)


def test_decoder_is_causal_jacobian():
    dec = Decoder(D, H, 2).eval()
    x = torch.randn(1, 6, D, requires_grad=True)
    r = torch.randn(D)  # a random read-out (the plain sum of a LayerNorm's output is constant)
    jac = torch.autograd.functional.jacobian(lambda t: dec(t) @ r, x)  # (1, 6, 1, 6, D)
    dep = jac[0, :, 0].abs().sum(-1)  # (i, j): does output i depend on input j
    assert torch.all(dep.triu(1) == 0)  # exactly zero for j > i
    assert torch.all(dep.diagonal() > 0)


def test_gpt_output_i_independent_of_later_tokens():
    torch.manual_seed(1)
    gpt = MiniGPT(11, d_model=D, num_heads=H, num_layers=2, max_len=16).eval()
    ids = torch.randint(0, 11, (3, 12))
    logits = gpt(ids)
    for i in (0, 5, 10):
        changed = ids.clone()
        changed[:, i + 1 :] = torch.randint(0, 11, (3, 11 - i))
        torch.testing.assert_close(
            gpt(changed)[:, : i + 1], logits[:, : i + 1], atol=1e-5, rtol=1e-5
        )


@pytest.mark.parametrize("prompt_len", [1, 5])
def test_cached_generation_equals_uncached(prompt_len):
    torch.manual_seed(2)
    gpt = MiniGPT(13, d_model=D, num_heads=H, num_layers=2, max_len=40).eval()
    prompt = torch.randint(0, 13, (2, prompt_len))
    fast, lf = gpt.generate(prompt, 16, greedy=True, return_logits=True)
    slow, ls = gpt.generate(prompt, 16, greedy=True, use_cache=False, return_logits=True)
    assert torch.equal(fast, slow)
    torch.testing.assert_close(lf, ls, atol=1e-5, rtol=1e-5)
    # sampling with the same generator picks the same tokens too
    a = gpt.generate(prompt, 10, generator=torch.Generator().manual_seed(0))
    b = gpt.generate(prompt, 10, use_cache=False, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b)
    # the cached step's logits equal the full forward pass on the generated sequence
    full = gpt(fast[:, :-1])[:, prompt_len - 1 :]
    torch.testing.assert_close(lf, full, atol=1e-5, rtol=1e-5)


def test_cross_attention_decoder_cache():
    torch.manual_seed(3)
    dec = Decoder(D, H, 2, cross_attention=True).eval()
    ctx = torch.randn(2, 9, D)
    x = torch.randn(2, 6, D)
    full = dec(x, context=ctx)
    caches = dec.new_caches()
    steps = [dec(x[:, :3], context=ctx, caches=caches)]
    for t in range(3, 6):
        steps.append(
            dec(x[:, t : t + 1], context=None, caches=caches)
        )  # cross keys come from the cache
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="context"):
        dec(x)


def test_bert_padding_does_not_change_real_positions():
    torch.manual_seed(4)
    bert = MiniBERT(20, d_model=D, num_heads=H, num_layers=2, max_len=16).eval()
    ids = torch.randint(2, 20, (1, 6))
    padded = torch.cat([ids, torch.zeros(1, 5, dtype=torch.long)], dim=1)
    torch.testing.assert_close(bert(padded)[:, :6], bert(ids), atol=1e-5, rtol=1e-5)
    logits, weights = bert(padded, return_weights=True)
    assert logits.shape == (1, 11, 20) and len(weights) == 2
    assert torch.all(weights[0][..., 6:] == 0)  # nobody attends to padding
    # bidirectional: the first word's output depends on the last word
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] - 2 + 1) % 18 + 2
    assert not torch.allclose(bert(changed)[:, 0], bert(ids)[:, 0])


def test_mlm_loss_ignores_unpicked_positions():
    logits = torch.randn(2, 4, 7)
    targets = torch.full((2, 4), -100)
    targets[0, 1], targets[1, 3] = 3, 5
    expected = -(F.log_softmax(logits[0, 1], -1)[3] + F.log_softmax(logits[1, 3], -1)[5]) / 2
    torch.testing.assert_close(mlm_loss(logits, targets), expected)


def test_clip_loss_matches_the_direct_formula():
    torch.manual_seed(5)
    logits = torch.randn(6, 6, dtype=torch.float64) * 3
    e = logits.exp()
    i2t = -torch.log(e.diagonal() / e.sum(dim=1)).mean()
    t2i = -torch.log(e.diagonal() / e.sum(dim=0)).mean()
    torch.testing.assert_close(clip_loss(logits), (i2t + t2i) / 2, atol=1e-12, rtol=1e-12)
    assert clip_loss(100 * torch.eye(4)) < 1e-6  # perfectly aligned pairs cost nothing
    torch.testing.assert_close(clip_loss(torch.zeros(5, 5)), torch.tensor(math.log(5)))
    with pytest.raises(ValueError, match="square"):
        clip_loss(torch.randn(3, 4))


def test_vit_shapes_and_class_token_attention():
    vit = MiniViT(4, image_size=24, patch=6, d_model=D, num_heads=H, num_layers=2).eval()
    images = torch.randn(3, 3, 24, 24)
    logits, weights = vit(images, return_weights=True)
    assert logits.shape == (3, 4) and weights[-1].shape == (3, H, 17, 17)
    att = vit.class_token_attention(images)
    torch.testing.assert_close(att, weights[-1][:, :, 0, 1:].mean(1))
    assert torch.all(att.sum(-1) <= 1 + 1e-6)
    with pytest.raises(ValueError, match=r"\(B, 3, 24, 24\)"):
        vit(torch.randn(3, 3, 20, 20))
    with pytest.raises(ValueError, match="multiple of patch"):
        PatchEmbedding(24, 5, 3, D)


def test_vit_positions_are_the_learned_table():
    # the same LearnedPositionalEmbedding as the word models, one row per token (class first);
    # the module's own class token is listed first, then the projection and the positions,
    # in the order forward uses them
    torch.manual_seed(0)
    embed = PatchEmbedding(24, 6, 3, D)
    assert isinstance(embed.pos, LearnedPositionalEmbedding)
    assert embed.pos.weight.shape == (17, D)
    assert [n for n, _ in embed.named_parameters()] == [
        "cls",
        "proj.weight",
        "proj.bias",
        "pos.weight",
    ]
    images = torch.randn(2, 3, 24, 24)
    tokens = embed.proj(patchify(images, 6))
    expected = torch.cat([embed.cls.expand(2, -1, -1), tokens], 1) + embed.pos.weight
    torch.testing.assert_close(embed(images), expected)
    torch.manual_seed(1)
    vit = MiniViT(4, image_size=24, patch=6, d_model=D, num_heads=H, num_layers=1)
    std = vit.embed.pos.weight.std().item()
    assert 0.015 < std < 0.025, std


def test_models_register_their_parts_in_reading_order():
    # embedding, stack, head: the order a reader writes them (and forward uses them)
    def parts(model):
        return [name for name, _ in model.named_children()]

    assert parts(MiniViT(4, image_size=24, patch=6, d_model=D, num_heads=H)) == [
        "embed",
        "encoder",
        "head",
    ]
    assert parts(MiniGPT(11, d_model=D, num_heads=H)) == ["embed", "decoder", "head"]
    assert parts(MiniBERT(11, d_model=D, num_heads=H)) == ["embed", "encoder", "head"]
    assert parts(MiniCLIP(10, image_size=24, patch=6, d_model=D, num_heads=H))[:4] == [
        "image_embed",
        "image_encoder",
        "text_embed",
        "text_encoder",
    ]
    # GPT-2's initialisation draws every table, the positions' included, at std 0.02
    torch.manual_seed(0)
    gpt = MiniGPT(50, d_model=D, num_heads=H, max_len=200)
    for table in (gpt.embed.tok.weight, gpt.embed.pos.weight):
        assert 0.015 < table.std().item() < 0.025


def test_clip_embeddings_similarity_and_cross_attention():
    torch.manual_seed(6)
    clip = MiniCLIP(
        10, image_size=24, patch=6, d_model=D, num_heads=H, num_layers=1, embed_dim=8
    ).eval()
    images = torch.randn(4, 3, 24, 24)
    ids = torch.tensor([[1, 2, 3, 0], [1, 4, 5, 6], [2, 2, 0, 0], [7, 8, 9, 1]])
    img, txt = clip.encode_image(images), clip.encode_text(ids)
    torch.testing.assert_close(img.norm(dim=-1), torch.ones(4))
    torch.testing.assert_close(clip(images, ids), clip.logit_scale.exp() * img @ txt.T)
    # padding a caption further changes nothing
    torch.testing.assert_close(clip.encode_text(F.pad(ids, (0, 3))), txt, atol=1e-5, rtol=1e-5)
    logit, w = clip.match(images, ids, return_weights=True)
    assert logit.shape == (4,) and w.shape == (4, H, 4, 16)
    torch.testing.assert_close(w.sum(-1), torch.ones(4, H, 4))
    with pytest.raises(ValueError, match="non-padding"):
        clip.encode_text(torch.zeros(1, 3, dtype=torch.long))


def test_bad_ids_and_lengths():
    gpt = MiniGPT(5, d_model=D, num_heads=H, num_layers=1, max_len=8)
    with pytest.raises(TypeError, match="torch.long"):
        gpt(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="max_len=8"):
        gpt(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="0..4"):
        gpt(torch.full((1, 3), 7))
    with pytest.raises(ValueError, match="exceeds max_len"):
        gpt.generate(torch.zeros(1, 4, dtype=torch.long), 5)
    assert count_parameters(gpt) == sum(p.numel() for p in gpt.parameters())


def test_gpt_learns_a_repeating_pattern():
    torch.manual_seed(7)
    gpt = MiniGPT(4, d_model=D, num_heads=H, num_layers=1, max_len=16)
    seq = torch.tensor([[0, 1, 2, 3] * 4])
    opt = torch.optim.Adam(gpt.parameters(), lr=1e-2)
    first = gpt.loss(seq[:, :-1], seq[:, 1:]).item()
    for _ in range(60):
        loss = gpt.loss(seq[:, :-1], seq[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first > 1.0 and loss.item() < 0.05
    out = gpt.generate(seq[:, :2], 10, greedy=True)
    assert out[0].tolist() == [0, 1, 2, 3] * 3


def test_block_without_mlp_and_with_a_given_attention():
    from selfattn.models import SelfAttention

    torch.manual_seed(0)
    block = TransformerBlock(8, 2, mlp_ratio=0)
    assert block.mlp is None and block.ln2 is None
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(block(x), x + block.attn(block.ln1(x)))
    layer = SelfAttention(8, num_heads=2).with_output(torch.nn.Linear(8, 8, bias=False))
    given = TransformerBlock(8, 2, attention=layer)
    assert given.attn is layer
    y, w = given(x, temperature=2.0, return_weights=True)
    a, aw = layer(given.ln1(x), temperature=2.0, return_weights=True)
    torch.testing.assert_close(w["self"], aw)
    torch.testing.assert_close(y, x + a + given.mlp(given.ln2(x + a)))
    with pytest.raises(ValueError, match="attention has 2 heads, the block num_heads=4"):
        TransformerBlock(8, 4, attention=layer)
    with pytest.raises(ValueError, match="pass rope to the attention module"):
        TransformerBlock(8, 2, attention=layer, rope=torch.nn.Identity())
    with pytest.raises(ValueError, match="mlp_ratio"):
        TransformerBlock(8, 2, mlp_ratio=-1)


@pytest.mark.parametrize("kernel", ["torch", "flash"])
def test_blocks_run_the_fast_kernels(kernel):
    # Bug (issue 35): the block always asked its attention for weights, so a fast kernel
    # (which returns none) raised inside every model. Weights are asked for on request.
    torch.manual_seed(0)
    block = TransformerBlock(16, 4).eval()
    x = torch.randn(2, 6, 16)
    expected, weights = block(x, mask="causal", return_weights=True)
    block.attn.kernel = kernel
    torch.testing.assert_close(block(x, mask="causal"), expected, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="weights"):
        block(x, mask="causal", return_weights=True)
    decoder = Decoder(16, 4, 2).eval()
    y = torch.randn(2, 6, 16)
    reference = decoder(y)
    for b in decoder.blocks:
        b.attn.kernel = kernel
    torch.testing.assert_close(decoder(y), reference, atol=1e-5, rtol=1e-5)
    encoder = Encoder(16, 4, 2).eval()
    reference = encoder(y)
    for b in encoder.blocks:
        b.attn.kernel = kernel
    torch.testing.assert_close(encoder(y), reference, atol=1e-5, rtol=1e-5)
