"""The paged KV cache equals the contiguous cache and torch SDPA, frees and reuses blocks,
and counts the slots it saves."""

import math

import pytest
import torch
import torch.nn.functional as F
from selfattn import KVCache, MultiHeadAttention, merge_heads, split_heads
from selfattn.efficient.paged import PagedKVCache, allocation_slots, paged_attention


def _fill(cache, lengths, chunks, g, dtype=torch.float64):
    """Interleave appends of several sequences (so their blocks interleave in the pool);
    returns ids and each sequence's contiguous keys and values."""
    h, d = cache.num_kv_heads, cache.d_head
    seqs = [cache.add_sequence() for _ in lengths]
    ks = {s: [] for s in seqs}
    vs = {s: [] for s in seqs}
    done = dict.fromkeys(seqs, 0)
    while any(done[s] < n for s, n in zip(seqs, lengths)):
        for s, n in zip(seqs, lengths):
            take = min(chunks, n - done[s])
            if take <= 0:
                continue
            k = torch.randn(h, take, d, generator=g, dtype=dtype)
            v = torch.randn(h, take, d, generator=g, dtype=dtype)
            cache.append(s, k, v)
            ks[s].append(k)
            vs[s].append(v)
            done[s] += take
    return seqs, {s: torch.cat(ks[s], 1) for s in seqs}, {s: torch.cat(vs[s], 1) for s in seqs}


@pytest.mark.parametrize("seed", range(4))
def test_gather_and_attention_equal_the_contiguous_cache(seed):
    g = torch.Generator().manual_seed(seed)
    block = int(torch.randint(1, 9, (1,), generator=g))
    h_kv = int(torch.randint(1, 4, (1,), generator=g))
    group = int(torch.randint(1, 4, (1,), generator=g))
    d = int(torch.randint(1, 17, (1,), generator=g))
    lengths = torch.randint(1, 40, (int(torch.randint(1, 5, (1,), generator=g)),), generator=g)
    lengths = lengths.tolist()
    cache = PagedKVCache(64, block, h_kv, d, dtype=torch.float64)
    seqs, ks, vs = _fill(cache, lengths, chunks=int(torch.randint(1, 6, (1,), generator=g)), g=g)
    for s, n in zip(seqs, lengths):
        k, v = cache.gather(s)
        assert torch.equal(k, ks[s]) and torch.equal(v, vs[s])
        assert len(cache.block_table(s)) == math.ceil(n / block)
    n_new = min(lengths)
    for n_q in sorted({1, n_new}):
        q = torch.randn(len(seqs), h_kv * group, n_q, d, generator=g, dtype=torch.float64)
        got = paged_attention(q, cache, seqs)
        for b, s in enumerate(seqs):
            m = lengths[b]
            i = torch.arange(n_q)[:, None]
            j = torch.arange(m)[None, :]
            want = F.scaled_dot_product_attention(
                q[b : b + 1],
                ks[s][None],
                vs[s][None],
                attn_mask=j <= i + m - n_q,  # bottom-right, torch's causal_lower_right
                enable_gqa=True,
            )
            torch.testing.assert_close(got[b : b + 1], want, atol=1e-12, rtol=1e-12)


def test_lengths_on_block_boundaries_and_one_position():
    g = torch.Generator().manual_seed(7)
    cache = PagedKVCache(16, 4, 2, 8, dtype=torch.float64)
    seqs, ks, vs = _fill(cache, [1, 4, 8, 9], chunks=4, g=g)
    assert [len(cache.block_table(s)) for s in seqs] == [1, 1, 2, 3]
    q = torch.randn(4, 2, 1, 8, generator=g, dtype=torch.float64)
    got = paged_attention(q, cache, seqs)
    for b, s in enumerate(seqs):
        want = F.scaled_dot_product_attention(q[b : b + 1], ks[s][None], vs[s][None])
        torch.testing.assert_close(got[b : b + 1], want, atol=1e-12, rtol=1e-12)


def test_equal_to_multi_head_attention_with_its_kv_cache():
    """Decode with a MultiHeadAttention layer's own KVCache, and with its projections and a
    paged cache shared by two sequences of different lengths: the same outputs."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(32, 4, num_kv_heads=2).eval()
    paged = PagedKVCache(32, 5, layer.num_kv_heads, layer.d_head)
    prompts = [torch.randn(1, 7, 32), torch.randn(1, 3, 32)]
    seqs = [paged.add_sequence() for _ in prompts]
    contiguous = [KVCache() for _ in prompts]

    def paged_step(xs):
        """One call of the layer for every sequence, through the paged cache."""
        outs = []
        for s, x in zip(seqs, xs):
            q, k, v = layer.qkv(x).split([32, layer.d_kv, layer.d_kv], dim=-1)
            k, v = split_heads(k, layer.num_kv_heads), split_heads(v, layer.num_kv_heads)
            paged.append(s, k[0], v[0], layer=layer)
            att = paged_attention(split_heads(q, layer.num_heads), paged, [s], layer=layer)
            outs.append(layer.out(merge_heads(att)))
        return outs

    with torch.no_grad():
        want = [layer(x, mask="causal", cache=c) for x, c in zip(prompts, contiguous)]
        got = paged_step(prompts)
        for _ in range(12):
            xs = [torch.randn(1, 1, 32) for _ in prompts]
            want += [layer(x, mask="causal", cache=c) for x, c in zip(xs, contiguous)]
            got += paged_step(xs)
            # the batched call: both sequences' new query at once
            q_all = torch.cat([split_heads(layer.qkv(x)[..., :32], layer.num_heads) for x in xs])
            batched = paged_attention(q_all, paged, seqs)
            for b, s in enumerate(seqs):
                single = paged_attention(q_all[b : b + 1], paged, [s])
                torch.testing.assert_close(batched[b : b + 1], single)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    for s, c in zip(seqs, contiguous):
        k, v = paged.gather(s)
        torch.testing.assert_close(k, c.k[0])
        torch.testing.assert_close(v, c.v[0])


def test_a_cache_filled_by_one_layer_refuses_another():
    """Two layers appending to one paged cache would mix their keys in one sequence: with
    ``layer=``, the second layer is refused (nothing written) until the cache is freed."""
    torch.manual_seed(0)
    first, second = MultiHeadAttention(8, 2), MultiHeadAttention(8, 2)
    cache = PagedKVCache(8, 2, 2, 4)
    s = cache.add_sequence()
    k = torch.randn(2, 3, 4)
    cache.append(s, k, k, layer=first)
    cache.append(s, k[:, :1], k[:, :1], layer=first)  # the same layer goes on
    held = (cache.length(s), cache.block_table(s), cache.num_free_blocks)
    with pytest.raises(ValueError, match="another attention layer.*own PagedKVCache"):
        cache.append(s, k, k, layer=second)
    assert (cache.length(s), cache.block_table(s), cache.num_free_blocks) == held
    q = torch.randn(1, 2, 1, 4)
    with pytest.raises(ValueError, match="another attention layer"):
        paged_attention(q, cache, [s], layer=second)
    torch.testing.assert_close(
        paged_attention(q, cache, [s], layer=first), paged_attention(q, cache, [s])
    )
    with pytest.raises(TypeError, match="nn.Module"):
        cache.append(s, k, k, layer="first")
    cache.free_sequence(s)  # empty again: the next layer may fill it
    t = cache.add_sequence()
    cache.append(t, k, k, layer=second)
    with pytest.raises(ValueError, match="another attention layer"):
        cache.append(t, k, k, layer=first)
    cache.reset()
    assert cache.sequences == [] and cache.num_free_blocks == cache.num_blocks
    u = cache.add_sequence()
    cache.append(u, k, k, layer=first)
    assert cache.length(u) == 3


def test_free_reuses_blocks_and_running_out_changes_nothing():
    cache = PagedKVCache(4, 2, 1, 3)
    a, b = cache.add_sequence(), cache.add_sequence()
    cache.append(a, torch.ones(1, 3, 3), torch.ones(1, 3, 3))  # 2 blocks
    cache.append(b, torch.ones(1, 4, 3), torch.ones(1, 4, 3))  # 2 blocks
    assert cache.num_free_blocks == 0
    with pytest.raises(RuntimeError, match="out of blocks"):
        cache.append(a, torch.ones(1, 2, 3), torch.ones(1, 2, 3))  # a 3rd block
    assert cache.length(a) == 3 and cache.num_free_blocks == 0
    held = cache.block_table(a)
    cache.free_sequence(a)
    assert cache.num_free_blocks == 2 and cache.sequences == [b]
    c = cache.add_sequence()
    cache.append(c, torch.full((1, 4, 3), 2.0), torch.full((1, 4, 3), 2.0))
    assert sorted(cache.block_table(c)) == sorted(held)  # a's blocks, reused
    assert torch.equal(cache.gather(c)[0], torch.full((1, 4, 3), 2.0))
    assert torch.equal(cache.gather(b)[0], torch.ones(1, 4, 3))  # b untouched
    with pytest.raises(ValueError, match="seq"):
        cache.length(a)


def test_allocation_slots_match_the_blocks_taken():
    lengths = [1, 16, 17, 100, 0]
    slots = allocation_slots(lengths, max_len=128, block_size=16)
    assert slots == {"used": 134, "contiguous": 640, "paged": 16 + 16 + 32 + 112 + 0}
    cache = PagedKVCache(64, 16, 1, 2)
    for n in lengths:
        s = cache.add_sequence()
        if n:
            cache.append(s, torch.zeros(1, n, 2), torch.zeros(1, n, 2))
    taken = (cache.num_blocks - cache.num_free_blocks) * cache.block_size
    assert taken == slots["paged"]
    assert slots["paged"] - slots["used"] < len(lengths) * 16  # under one block each
    assert cache.block_nbytes == 2 * 16 * 2 * 4
    with pytest.raises(ValueError, match="max_len"):
        allocation_slots([129], max_len=128, block_size=16)
    with pytest.raises(ValueError, match="block_size"):
        allocation_slots([1], max_len=128, block_size=0)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="block_size"):
        PagedKVCache(4, 0, 1, 2)
    with pytest.raises(TypeError, match="dtype"):
        PagedKVCache(4, 2, 1, 2, dtype=torch.int64)
    cache = PagedKVCache(4, 2, 2, 3)
    s = cache.add_sequence()
    with pytest.raises(ValueError, match="h_kv=2"):
        cache.append(s, torch.ones(1, 2, 3), torch.ones(1, 2, 3))
    with pytest.raises(TypeError, match="k"):
        cache.append(s, torch.ones(2, 2, 3, dtype=torch.int64), torch.ones(2, 2, 3))
    with pytest.raises(TypeError, match="float32"):
        cache.append(s, torch.ones(2, 2, 3).double(), torch.ones(2, 2, 3).double())
    with pytest.raises(ValueError, match="seq"):
        cache.append(99, torch.ones(2, 2, 3), torch.ones(2, 2, 3))
    cache.append(s, torch.ones(2, 2, 3), torch.ones(2, 2, 3))
    with pytest.raises(ValueError, match="d_head=3"):
        paged_attention(torch.ones(1, 2, 1, 4), cache, [s])
    with pytest.raises(ValueError, match="B=1"):
        paged_attention(torch.ones(1, 2, 1, 3), cache, [s, s])
    with pytest.raises(ValueError, match="multiple"):
        paged_attention(torch.ones(1, 3, 1, 3), cache, [s])
    with pytest.raises(ValueError, match="n=3"):
        paged_attention(torch.ones(1, 2, 3, 3), cache, [s])
    with pytest.raises(TypeError, match="PagedKVCache"):
        paged_attention(torch.ones(1, 2, 1, 3), KVCache(), [s])
