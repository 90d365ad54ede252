"""selfattn.models.llm (today's decoder LM from the book's layers) and selfattn.models.bert, on
their own: each piece against its formula, decoding with and without caches, bad input.
(tests/test_from_transformers.py checks them against the transformers models they copy.)"""

import pytest
import torch
import torch.nn.functional as F
from selfattn import KVCache, MultiHeadAttention
from selfattn.delta_net import GatedDeltaNet
from selfattn.models.bert import BertMLM
from selfattn.models.llm import (
    DecoderBlock,
    DecoderLM,
    GatedMLP,
    RecurrentCache,
    RecurrentMixer,
    TopKMoE,
)
from selfattn.norms import RMSNorm
from selfattn.positional import RotaryEmbedding

D, V = 16, 23


def test_gated_mlp_formula():
    torch.manual_seed(0)
    x = torch.randn(2, 5, D)
    for act, f in (("silu", F.silu), ("gelu_tanh", lambda t: F.gelu(t, approximate="tanh"))):
        mlp = GatedMLP(D, 24, act=act)
        want = mlp.down(f(mlp.gate(x)) * mlp.up(x))
        assert torch.equal(mlp(x), want)
    with pytest.raises(ValueError, match="act"):
        GatedMLP(D, 24, act="relu")


@pytest.mark.parametrize("act", ["silu", "gpt_oss"])
def test_top_k_moe_against_a_loop_over_tokens(act):
    torch.manual_seed(0)
    moe = TopKMoE(D, 8, num_experts=4, top_k=2, act=act, limit=1.5)
    with torch.no_grad():
        for p in (moe.gate_b, moe.up_b, moe.down_b):
            p.normal_()
    x = torch.randn(3, 4, D, dtype=torch.float64)
    moe = moe.double()
    want = torch.zeros_like(x)
    for idx in range(3):
        for t in range(4):
            logits = moe.router(x[idx, t])
            top, experts = logits.topk(2)
            weights = torch.softmax(top, -1)
            for w, e in zip(weights, experts):
                gate = x[idx, t] @ moe.gate_w[e] + moe.gate_b[e]
                up = x[idx, t] @ moe.up_w[e] + moe.up_b[e]
                if act == "gpt_oss":
                    gate, up = gate.clamp(max=1.5), up.clamp(-1.5, 1.5)
                    glu = (up + 1) * gate * torch.sigmoid(1.702 * gate)
                else:
                    glu = F.silu(gate) * up
                want[idx, t] += w * (glu @ moe.down_w[e] + moe.down_b[e])
    assert (moe(x) - want).abs().max() < 1e-12
    x.requires_grad_(True)
    moe(x).sum().backward()
    assert torch.isfinite(x.grad).all() and moe.gate_w.grad is not None
    with pytest.raises(ValueError, match="top_k"):
        TopKMoE(D, 8, num_experts=2, top_k=3)


def tiny_lm(seed=0, recurrent=False):
    torch.manual_seed(seed)
    blocks = []
    for i in range(3):
        if recurrent and i == 1:
            mixer = RecurrentMixer(GatedDeltaNet(D, 2, chunk_size=None))
        else:
            mixer = MultiHeadAttention(
                D,
                4,
                num_kv_heads=2,
                bias=False,
                rope=RotaryEmbedding(4, layout="half"),
                window=3 if i == 0 else None,
                qk_norm=True,
                sinks=i == 2,
            )
        blocks.append(
            DecoderBlock(mixer, GatedMLP(D, 32), RMSNorm(D), RMSNorm(D), RMSNorm(D), None)
        )
    return DecoderLM(
        torch.nn.Embedding(V, D),
        blocks,
        RMSNorm(D, unit_offset=True),
        torch.nn.Linear(D, V, bias=False),
        embed_scale=D**0.5,
        final_softcap=5.0,
    ).eval()


@pytest.mark.parametrize("recurrent", [False, True])
def test_cached_decoding_equals_the_full_sequence(recurrent):
    model = tiny_lm(recurrent=recurrent)
    ids = torch.randint(0, V, (2, 9))
    with torch.no_grad():
        full = model(ids)
        caches = model.new_caches()
        parts = [model(ids[:, :4], caches=caches)]
        parts += [model(ids[:, t : t + 1], caches=caches) for t in range(4, 9)]
    assert (torch.cat(parts, 1) - full).abs().max() < 1e-5
    assert full.abs().max() <= 5.0  # the final soft-cap
    seq_c, logits_c = model.generate(ids[:, :2], 6, return_logits=True)
    seq_u, logits_u = model.generate(ids[:, :2], 6, use_cache=False, return_logits=True)
    assert torch.equal(seq_c, seq_u) and (logits_c - logits_u).abs().max() < 1e-5
    assert seq_c.shape == (2, 8)


def test_padding_mask_keeps_real_tokens_as_without_padding():
    model = tiny_lm(recurrent=True)
    ids = torch.randint(0, V, (2, 5))
    padded = torch.cat([ids, torch.zeros(2, 2, dtype=torch.long)], 1)  # right padding
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1] * 7])
    with torch.no_grad():
        alone = model(ids)
        got = model(padded, attention_mask=mask)[:, :5]
    assert (got - alone).abs().max() < 1e-5


def test_decoder_lm_bad_input():
    model = tiny_lm()
    ids = torch.randint(0, V, (2, 4))
    with pytest.raises(ValueError, match="one entry per block"):
        model(ids, caches=[KVCache()])
    with pytest.raises(ValueError, match="attention_mask"):
        model(ids, attention_mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match="final_softcap"):
        DecoderLM(model.embed, [], model.final_norm, model.head, final_softcap=0.0)
    mixer = RecurrentMixer(GatedDeltaNet(D, 2))
    x = torch.randn(2, 3, D)
    with pytest.raises(TypeError, match="RecurrentCache"):
        mixer(x, cache=KVCache())
    with pytest.raises(ValueError, match="recurrent mixer"):
        mixer(x, mask=torch.zeros(3, 3))
    cache = mixer.new_cache()
    assert isinstance(cache, RecurrentCache) and len(cache) == 0
    mixer(x, cache=cache)
    assert len(cache) == 3
    cache.reset()
    assert len(cache) == 0 and cache.state is None


def test_bert_post_norm_block_and_padding():
    torch.manual_seed(0)
    bert = BertMLM(V, d_model=D, num_heads=4, num_layers=2, hidden=32, max_len=12).eval()
    ids = torch.randint(0, V, (2, 6))
    with torch.no_grad():
        logits = bert(ids)
        block = bert.blocks[0]
        x = torch.randn(1, 6, D)
        want = block.ln2(block.ln1(x + block.attn(x)) + block.mlp(block.ln1(x + block.attn(x))))
        assert (block(x) - want).abs().max() < 1e-6
        mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1] * 6])
        padded = bert(ids, attention_mask=mask)
        short = bert(ids[:1, :4])
    assert logits.shape == (2, 6, V)
    assert (padded[0, :4] - short[0]).abs().max() < 1e-5  # padding is never attended to
    with pytest.raises(ValueError, match="attention_mask"):
        bert(ids, attention_mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match="positions"):
        bert(torch.zeros(1, 13, dtype=torch.long))
