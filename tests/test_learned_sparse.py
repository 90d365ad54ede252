"""NSA and DeepSeek Sparse Attention: against a per-token reading of the papers' equations,
causal, decoding == the sequence, forward/backward, and DSA's indexer against transformers'."""

import math

import pytest
import torch
from selfattn.learned_sparse import (
    DeepSeekSparseAttention,
    NativeSparseAttention,
    SparseCache,
    lightning_indexer_scores,
)


def softmax_read(q, ks, vs, scale):
    if ks.shape[0] == 0:
        return torch.zeros(vs.shape[-1], dtype=q.dtype)
    return torch.softmax(ks @ q * scale, 0) @ vs


def nsa_slow(m: NativeSparseAttention, x):
    """NSA token by token, head by head, from the paper's equations (section 3)."""
    bsz, n, _ = x.shape
    h, dh, l_ = m.num_heads, m.d_head, m.block_size
    q, k, v = (t.view(bsz, n, h, dh) for t in m.qkv(x).chunk(3, -1))
    scale = dh**-0.5
    out = torch.zeros(bsz, n, h, dh)
    for b in range(bsz):
        for t in range(n):
            g = torch.sigmoid(m.gates(x[b, t])).view(h, 3)
            nb = (t + 1) // l_  # complete blocks up to t
            p_sum = torch.zeros(nb)
            o_cmp = torch.zeros(h, dh)
            for hh in range(h):
                ck = (
                    torch.stack(
                        [
                            m.compress_k((k[b, i * l_ : (i + 1) * l_, hh] + m.block_pos).flatten())
                            for i in range(nb)
                        ]
                    )
                    if nb
                    else torch.zeros(0, dh)
                )
                cv = (
                    torch.stack(
                        [
                            m.compress_v((v[b, i * l_ : (i + 1) * l_, hh] + m.block_pos).flatten())
                            for i in range(nb)
                        ]
                    )
                    if nb
                    else torch.zeros(0, dh)
                )
                if nb:
                    p = torch.softmax(ck @ q[b, t, hh] * scale, 0)
                    p_sum += p
                    o_cmp[hh] = p @ cv
            own = t // l_
            others = sorted(range(own), key=lambda i: -float(p_sum[i]) if i < nb else 0.0)
            chosen = [own] + others[: m.num_selected - 1]
            idx = [j for i in chosen for j in range(i * l_, min((i + 1) * l_, t + 1))]
            win = list(range(max(0, t - m.window + 1), t + 1))
            for hh in range(h):
                o_s = softmax_read(q[b, t, hh], k[b, idx, hh], v[b, idx, hh], scale)
                o_w = softmax_read(q[b, t, hh], k[b, win, hh], v[b, win, hh], scale)
                out[b, t, hh] = g[hh, 0] * o_cmp[hh] + g[hh, 1] * o_s + g[hh, 2] * o_w
    return m.out_proj(out.reshape(bsz, n, h * dh))


def dsa_slow(m: DeepSeekSparseAttention, x):
    bsz, n, _ = x.shape
    h, dh = m.num_heads, m.d_head
    q, k, v = (t.view(bsz, n, h, dh) for t in m.qkv(x).chunk(3, -1))
    qi = m.index_q(x).view(bsz, n, m.index_heads, m.index_dim)
    ki = m.index_k_norm(m.index_k(x))
    w = m.index_weights(x) / math.sqrt(m.index_heads)
    out = torch.zeros(bsz, n, h, dh)
    clear = torch.ones(bsz, n, dtype=torch.bool)  # no tie at the top-k boundary
    for b in range(bsz):
        for t in range(n):
            score = [
                sum(
                    float(w[b, t, j])
                    * max(0.0, float(qi[b, t, j] @ ki[b, s]) / math.sqrt(m.index_dim))
                    for j in range(m.index_heads)
                )
                for s in range(t + 1)
            ]
            ranked = sorted(range(t + 1), key=lambda s: -score[s])
            idx = ranked[: m.top_k]
            if t + 1 > m.top_k and score[ranked[m.top_k - 1]] == score[ranked[m.top_k]]:
                clear[b, t] = False  # relu gives exact zeros: a tie topk may break either way
            for hh in range(h):
                out[b, t, hh] = softmax_read(q[b, t, hh], k[b, idx, hh], v[b, idx, hh], dh**-0.5)
    return m.out_proj(out.reshape(bsz, n, h * dh)), clear


def nsa(**kw):
    torch.manual_seed(0)
    return NativeSparseAttention(16, 2, block_size=4, num_selected=2, window=5, **kw)


def dsa(**kw):
    torch.manual_seed(0)
    return DeepSeekSparseAttention(16, 2, top_k=5, index_heads=3, index_dim=8, **kw)


@pytest.mark.parametrize("n", [1, 3, 4, 19])
def test_nsa_matches_the_equations(n):
    m = nsa()
    x = torch.randn(2, n, 16)
    with torch.no_grad():
        torch.testing.assert_close(m(x), nsa_slow(m, x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n", [1, 5, 17])
def test_dsa_matches_the_equations(n):
    m = dsa()
    x = torch.randn(2, n, 16)
    with torch.no_grad():
        want, clear = dsa_slow(m, x)
        torch.testing.assert_close(m(x)[clear], want[clear], atol=1e-5, rtol=1e-5)
    assert clear.float().mean() > 0.5


@pytest.mark.parametrize("make", [nsa, dsa])
def test_no_causal_leak(make):
    m = make()
    x = torch.randn(1, 20, 16)
    y = x.clone()
    y[:, 11:] = torch.randn(1, 9, 16)
    with torch.no_grad():
        torch.testing.assert_close(m(x)[:, :11], m(y)[:, :11])


@pytest.mark.parametrize("make", [nsa, dsa])
def test_decoding_step_by_step_equals_the_sequence(make):
    m = make()
    x = torch.randn(2, 18, 16)
    with torch.no_grad():
        full = m(x)
        cache = SparseCache()
        outs = [m(x[:, :6], cache=cache)]
        for t in range(6, 18):
            outs.append(m(x[:, t : t + 1], cache=cache))
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-5, rtol=1e-5)
    assert len(cache) == 18


@pytest.mark.parametrize("make", [nsa, dsa])
@pytest.mark.parametrize("shape", [(1, 1), (3, 13)])
def test_forward_backward_random_shapes(make, shape):
    m = make()
    x = torch.randn(*shape, 16, requires_grad=True)
    m(x).square().sum().backward()
    assert torch.isfinite(x.grad).all()


def test_nsa_parts_and_masks():
    m = nsa()
    y, parts = m(torch.randn(1, 12, 16), return_parts=True)
    sel = parts["selected_mask"][0]
    assert not sel.triu(1).any() and sel.diagonal().all()
    assert (sel.sum(-1) <= 2 * 4).all()  # at most num_selected blocks of block_size
    assert parts["gates"].shape == (1, 2, 12, 3)


def test_dsa_selects_top_k_and_indexer_kl_trains_the_indexer():
    m = dsa()
    x = torch.randn(2, 12, 16)
    _, mask = m(x, return_mask=True)
    assert (mask.sum(-1) == torch.clamp(torch.arange(1, 13), max=5)).all()
    loss = m.indexer_kl(x)
    loss.backward()
    assert loss >= 0 and m.index_q.weight.grad is not None and m.qkv.weight.grad is None


def test_indexer_agrees_with_transformers_deepseek_v32():
    pytest.importorskip("transformers")
    from transformers.models.deepseek_v32.configuration_deepseek_v32 import DeepseekV32Config
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Indexer

    cfg = DeepseekV32Config(
        hidden_size=32,
        index_n_heads=4,
        index_head_dim=16,
        qk_rope_head_dim=8,
        index_topk=6,
        q_lora_rank=24,
        num_hidden_layers=1,
    )
    torch.manual_seed(1)
    ref = DeepseekV32Indexer(cfg, 0).eval()
    n = 15
    x, q_resid = torch.randn(2, n, 32), torch.randn(2, n, 24)
    cos, sin = torch.ones(2, n, 8), torch.zeros(2, n, 8)  # position 0: no rotation
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    want = ref(x, q_resid, (cos, sin), causal.expand(2, n, n), None)
    with torch.no_grad():
        qi = ref.wq_b(q_resid).view(2, n, 4, 16)
        ki = ref.k_norm(ref.wk(x))
        w = ref.weights_proj(x) * 4**-0.5
        got = lightning_indexer_scores(qi, ki, w, causal).topk(6, dim=-1).indices
    assert torch.equal(got.sort(-1).values, want.long().sort(-1).values)


def test_bad_input():
    with pytest.raises(ValueError, match="divisible"):
        NativeSparseAttention(10, 3)
    with pytest.raises(ValueError, match="block_size"):
        NativeSparseAttention(16, 2, block_size=0)
    with pytest.raises(TypeError, match="top_k"):
        DeepSeekSparseAttention(16, 2, top_k=2.5)
    m = dsa()
    with pytest.raises(ValueError, match="d_model=16"):
        m(torch.randn(1, 3, 8))
    with pytest.raises(TypeError, match="cache"):
        m(torch.randn(1, 3, 16), cache={})
