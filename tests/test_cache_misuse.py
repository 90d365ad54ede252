"""A KV cache knows what filled it and refuses a use that does not match (robustness review,
round 2): mixed dtypes, two layers on one cache, another model's caches, a cross-attention
cache given another context or used by another layer. The messages say what to do."""

import pytest
import torch
from selfattn import KVCache, MultiHeadAttention
from selfattn.models import Decoder, MiniGPT

torch.manual_seed(0)
X = torch.randn(1, 3, 8)
SOURCE = torch.randn(1, 5, 8)
WHAT_TO_DO = r"fresh KVCache\(\)|cache\.reset\(\)"


def test_append_refuses_keys_and_values_of_different_dtypes():
    cache = KVCache()
    with pytest.raises(TypeError, match="one dtype.*float32.*float64"):
        cache.append(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4, dtype=torch.float64))
    assert len(cache) == 0


def test_one_cache_fed_by_two_layers_is_refused():
    a, b = MultiHeadAttention(8, 2), MultiHeadAttention(8, 2)
    cache = KVCache()
    a(X, mask="causal", cache=cache)
    with pytest.raises(ValueError, match=WHAT_TO_DO):
        b(X[:, :1], mask="causal", cache=cache)
    assert len(cache) == 3  # untouched
    cache.reset()
    b(X, mask="causal", cache=cache)  # a reset cache serves any layer
    assert len(cache) == 3


def test_a_cross_attention_cache_used_by_another_layer_without_context_is_refused():
    a, b = MultiHeadAttention(8, 2), MultiHeadAttention(8, 2)
    cache = KVCache()
    a(X, context=SOURCE, cache=cache)
    with pytest.raises(ValueError, match=WHAT_TO_DO):
        b(X, cache=cache)  # would silently attend over a's context


def test_a_cross_attention_cache_refuses_a_different_context():
    layer = MultiHeadAttention(8, 2)
    cache = KVCache()
    expected = layer(X, context=SOURCE)
    layer(X, context=SOURCE, cache=cache)
    with pytest.raises(ValueError, match=r"another context.*context=None.*reset"):
        layer(X, context=torch.randn(1, 5, 8), cache=cache)
    with pytest.raises(ValueError, match="another context"):
        layer(X, context=torch.randn(1, 7, 8), cache=cache)
    # the documented reuse still works: the same layer, no context or the same context
    torch.testing.assert_close(layer(X, cache=cache), expected)
    torch.testing.assert_close(layer(X, context=SOURCE.clone(), cache=cache), expected)


def test_the_caches_of_one_model_fed_to_another_are_refused():
    kw = dict(d_model=8, num_heads=2, num_layers=2, max_len=16)
    first, second = MiniGPT(10, **kw), MiniGPT(10, **kw)
    caches = first.decoder.new_caches()
    first(torch.randint(0, 10, (1, 4)), caches=caches)
    with pytest.raises(ValueError, match=WHAT_TO_DO):
        second(torch.randint(0, 10, (1, 1)), caches=caches)
    decoder = Decoder(8, 2, 2, cross_attention=True)
    caches = decoder.new_caches()
    decoder(torch.randn(1, 2, 8), context=SOURCE, caches=caches)
    swapped = [caches[1], caches[0]]  # layer 0's caches given to layer 1
    with pytest.raises(ValueError, match=WHAT_TO_DO):
        decoder(torch.randn(1, 1, 8), context=SOURCE, caches=swapped)


def test_a_cache_filled_by_append_is_taken_by_the_first_layer_that_uses_it():
    layer = MultiHeadAttention(8, 2)
    cache = KVCache()
    cache.append(torch.randn(1, 2, 4, 4), torch.randn(1, 2, 4, 4))
    assert layer(X[:, :1], cache=cache).shape == (1, 1, 8)
    with pytest.raises(ValueError, match=WHAT_TO_DO):
        MultiHeadAttention(8, 2)(X[:, :1], cache=cache)
