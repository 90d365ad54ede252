"""selfattn.costs: each formula against a measurement (torch's FLOP counter, tensor sizes,
autograd's saved tensors) and against the numbers the chapters quote."""

from __future__ import annotations

import pytest
import selfattn
import torch
from selfattn import costs
from selfattn.costs import (
    attention_flops,
    kv_cache_bytes,
    mha_flops,
    mha_param_count,
    saved_for_backward_bytes,
    scores_bytes,
)
from selfattn.efficient import flash_attention
from selfattn.multihead import KVCache, MultiHeadAttention
from torch.utils.flop_counter import FlopCounterMode


def _counted_flops(fn, *args, **kwargs) -> int:
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return counter.get_total_flops()


def _plain(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ v


@pytest.mark.parametrize("n,m,d_k,d_v", [(4, 4, 8, 8), (1, 7, 3, 5), (33, 17, 16, 4)])
def test_attention_flops_is_what_torch_counts(n, m, d_k, d_v):
    q, k, v = torch.randn(2, 3, n, d_k), torch.randn(2, 3, m, d_k), torch.randn(2, 3, m, d_v)
    assert attention_flops(n, m, d_k, d_v, heads=3, batch=2) == _counted_flops(_plain, q, k, v)
    assert attention_flops(n, m, d_k, d_v) == 2 * n * m * d_k + 2 * n * m * d_v


def test_attention_flops_defaults_and_the_chapter_7_table():
    # self-attention, d_v = d_k: 4 n^2 d per head; 4x the length is 16x the work
    assert attention_flops(1024, d_k=128) == 4 * 1024**2 * 128
    assert attention_flops(16384, d_k=128) / attention_flops(4096, d_k=128) == 16
    assert attention_flops(0, d_k=8) == 0


def test_scores_bytes_is_the_size_of_the_materialised_matrix():
    s = torch.empty(2, 3, 5, 7, dtype=torch.float16)
    assert scores_bytes(5, 7, heads=3, batch=2, dtype=torch.float16) == s.nbytes
    # chapter 7: 32 heads of fp16 scores at n = 128k take 1024 GiB per layer
    assert scores_bytes(131072, heads=32, dtype=torch.float16) / 2**30 == 1024
    assert scores_bytes(16384, heads=4) / 2**20 == 4096  # float32, 4 heads


def _saved_bytes(fn, q, k, v) -> int:
    inputs = {t.untyped_storage().data_ptr() for t in (q, k, v)}
    kept = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in inputs:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(q, k, v)
    return sum(kept.values())


@pytest.mark.parametrize("n,d", [(64, 16), (128, 32)])
def test_saved_for_backward_bytes_is_what_autograd_keeps(n, d):
    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(1, 4, n, d, generator=g).requires_grad_() for _ in range(3))
    assert _saved_bytes(_plain, q, k, v) == saved_for_backward_bytes(n, d_v=d, heads=4)
    flash = saved_for_backward_bytes(n, d_v=d, heads=4, kernel="flash")
    assert _saved_bytes(flash_attention, q, k, v) == flash == 4 * n * d * 4 + 4 * n * 4


def test_saved_for_backward_bytes_rejects_an_unknown_kernel():
    with pytest.raises(ValueError, match="kernel"):
        saved_for_backward_bytes(8, kernel="sparse")


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("h,h_kv", [(4, None), (4, 2), (4, 1)])
def test_mha_param_count_counts_the_layer(bias, h, h_kv):
    layer = MultiHeadAttention(24, h, num_kv_heads=h_kv, bias=bias)
    count = sum(p.numel() for p in layer.parameters())
    kw = {} if h_kv is None else {"num_heads": h, "num_kv_heads": h_kv}
    assert mha_param_count(24, bias=bias, **kw) == count
    if h_kv is None:
        assert count == 4 * 24**2 + (4 * 24 if bias else 0)


@pytest.mark.parametrize("h_kv", [None, 2])
def test_mha_flops_is_what_torch_counts(h_kv):
    layer = MultiHeadAttention(32, 4, num_kv_heads=h_kv).eval()
    kw = {} if h_kv is None else {"num_heads": 4, "num_kv_heads": h_kv}
    x, ctx = torch.randn(1, 6, 32), torch.randn(1, 9, 32)
    with torch.no_grad():
        assert mha_flops(6, 32, **kw) == _counted_flops(layer, x)
        if h_kv is None:  # cross-attention: the keys/values come from 9 positions
            assert mha_flops(6, 32, 9) == _counted_flops(layer, x, context=ctx)
    assert mha_flops(10, 8) == 8 * 10 * 64 + 4 * 100 * 8


def test_kv_cache_bytes_is_the_cache_nbytes():
    layer = MultiHeadAttention(16, 4, num_kv_heads=2)
    cache = KVCache()
    layer(torch.randn(3, 5, 16), cache=cache)
    assert cache.nbytes == kv_cache_bytes(1, 4, 4, 5, batch=3, num_kv_heads=2)
    assert kv_cache_bytes(12, 12, 64, 1024, torch.float16) == 2 * 12 * 12 * 64 * 1024 * 2


def test_cost_formulas_live_in_costs_only():
    # chapters import them from selfattn, which re-exports costs; multihead holds the layer only
    from selfattn import bench, multihead

    for name in ("kv_cache_bytes", "mha_flops", "mha_param_count"):
        assert getattr(selfattn, name) is getattr(costs, name)
        assert not hasattr(multihead, name)
    # chapter 5's decoding model lives in models; selfattn imports it on first use
    from selfattn.models import attention_decoder

    assert selfattn.generate is attention_decoder.generate
    assert selfattn.attention_stack is attention_decoder.attention_stack
    assert bench.generate is attention_decoder.generate  # the harness times the same
    assert not hasattr(multihead, "generate")


@pytest.mark.parametrize(
    "call,arg",
    [
        (lambda: attention_flops(-1), "n"),
        (lambda: attention_flops(4, d_k=0), "d_k"),
        (lambda: attention_flops(4, 2.5), "m"),
        (lambda: scores_bytes(4, heads=0), "heads"),
        (lambda: scores_bytes(4, dtype="float16"), "dtype"),
        (lambda: saved_for_backward_bytes(4, batch=True), "batch"),
        (lambda: mha_flops(4, 8, num_heads=3), "num_heads"),
        (lambda: mha_param_count(16, num_kv_heads=2), "num_kv_heads"),
        (lambda: kv_cache_bytes(1, 4, 8, 10, num_kv_heads=3), "num_kv_heads"),
    ],
)
def test_bad_input_names_the_argument(call, arg):
    with pytest.raises((TypeError, ValueError), match=arg):
        call()
