"""Arguments are checked once, at the public entry (issue 53, point 1).

Every validator of ``selfattn._checks`` (``require_*``), and the resolvers that serve one
function (``resolve_mask_arg``, ``require_kernel_args``, ``require_layer_inputs``), is wrapped
wherever a module of the library bound it; a ``MultiHeadAttention`` forward must then check
each argument once: the layer's own checks, and a trusting attention path behind them
(q/k/v, the mask, the kernel and the cache's new entries are not checked again). A stack of
layers builds its causal mask once per call, not once per layer.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import sys

import pytest
import selfattn
import torch
from selfattn import _checks, attention, masks, multihead
from selfattn.models.transformer import Decoder

_RESOLVERS = (
    (attention, "resolve_mask_arg"),
    (attention, "require_kernel_args"),
    (multihead, "require_layer_inputs"),
)


def _validators():
    found = {
        name: fn
        for name, fn in vars(_checks).items()
        if name.startswith("require_") and inspect.isfunction(fn)
    }
    found.update({name: getattr(module, name) for module, name in _RESOLVERS})
    return found


@contextlib.contextmanager
def _counting(functions: dict):
    """Wrap ``functions`` (name -> function) in every ``selfattn`` module that binds them;
    yield a Counter of the outermost calls by ``(function, argument name)``."""
    calls = collections.Counter()
    depth = [0]
    patched = []
    for name, fn in functions.items():

        @functools.wraps(fn)
        def wrapper(*args, _fn=fn, _name=name, **kwargs):
            if depth[0] == 0:
                arg = kwargs.get("name")
                if arg is None:
                    strings = [a for a in args[1:] if isinstance(a, str)]
                    arg = strings[0] if strings else None
                calls[(_name, arg)] += 1
            depth[0] += 1
            try:
                return _fn(*args, **kwargs)
            finally:
                depth[0] -= 1

        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("selfattn") and (
                vars(module).get(name) is fn
            ):
                patched.append((module, name, fn))
                setattr(module, name, wrapper)
    try:
        yield calls
    finally:
        for module, name, fn in patched:
            setattr(module, name, fn)


def _forward_calls(layer, x, **kwargs):
    with _counting(_validators()) as calls:
        layer(x, **kwargs)
    return calls


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"mask": "causal"},
        {"mask": torch.ones(6, 6, dtype=torch.bool).tril()},
        {"mask": "causal", "return_weights": True},
    ],
    ids=["no-mask", "causal", "tensor-mask", "weights"],
)
def test_a_multi_head_forward_checks_each_argument_once(kwargs):
    torch.manual_seed(0)
    layer = multihead.MultiHeadAttention(16, 4).eval()
    calls = _forward_calls(layer, torch.randn(2, 6, 16), **kwargs)
    twice = {key: count for key, count in calls.items() if count > 1}
    assert not twice, f"checked more than once: {twice}"
    # The attention path behind the layer is the trusting one: q, k, v are the layer's own.
    assert calls[("require_qkv", None)] == 0
    assert calls[("require_kernel_args", None)] == 1
    assert calls[("require_mask", None)] == (0 if not kwargs else 1)


def test_a_decoding_step_checks_the_cache_entries_once():
    torch.manual_seed(0)
    layer = multihead.MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    cache = multihead.KVCache()
    with torch.no_grad():
        layer(torch.randn(1, 5, 16), mask="causal", cache=cache)
        calls = _forward_calls(layer, torch.randn(1, 1, 16), mask="causal", cache=cache)
    assert not {key: c for key, c in calls.items() if c > 1}
    # The new keys and values are the layer's own: KVCache.append's checks are not run.
    assert calls[("require_float", "k")] == calls[("require_float", "v")] == 0


def test_the_public_function_still_checks_everything():
    q = k = v = torch.randn(2, 5, 8)
    with _counting(_validators()) as calls:
        attention.scaled_dot_product_attention(q, k, v, torch.ones(5, 5, dtype=torch.bool))
    assert calls[("require_qkv", None)] == calls[("require_mask", None)] == 1
    assert calls[("require_kernel_args", None)] == 1
    with pytest.raises(ValueError, match="does not broadcast"):
        attention.scaled_dot_product_attention(q, k, v, torch.ones(4, 5, dtype=torch.bool))


def test_attend_on_built_arguments_equals_the_public_function():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    for kernel in ("reference", "torch", "flash"):
        want = attention.scaled_dot_product_attention(q, k, v, "causal", kernel=kernel)
        a = attention.attention_args(q, k, v, causal=True, scale=8**-0.5, kernel=kernel)
        torch.testing.assert_close(attention.attend(a), want, rtol=0, atol=0)


def _count_mask_builds(run):
    builds = []
    real = masks.causal_mask

    @functools.wraps(real)
    def counted(*args, **kwargs):
        builds.append(args)
        return real(*args, **kwargs)

    patched = [
        m
        for m in list(sys.modules.values())
        if getattr(m, "__name__", "").startswith("selfattn") and vars(m).get("causal_mask") is real
    ]
    for m in patched:
        m.causal_mask = counted
    try:
        out = run()
    finally:
        for m in patched:
            m.causal_mask = real
    return builds, out


@pytest.mark.parametrize("num_layers", [1, 4])
def test_a_decoder_builds_its_causal_mask_once_per_call(num_layers):
    torch.manual_seed(0)
    decoder = Decoder(16, 4, num_layers).eval()
    x = torch.randn(2, 7, 16)
    with torch.no_grad():
        builds, y = _count_mask_builds(lambda: decoder(x))
        assert len(builds) == 1
        # the same numbers as each layer building "causal" itself
        h = x
        for block in decoder.blocks:
            h = block(h, mask="causal")
        torch.testing.assert_close(y, decoder.ln_f(h), rtol=0, atol=0)
        caches = decoder.new_caches()
        decoder(x[:, :6], caches=caches)
        builds, _ = _count_mask_builds(lambda: decoder(x[:, 6:], caches=caches))
    assert len(builds) == 1 and builds[0][:2] == (1, 7)


def test_a_decoder_with_the_flash_kernel_leaves_causal_to_it():
    torch.manual_seed(0)
    decoder = Decoder(16, 4, 2).eval()
    for block in decoder.blocks:
        block.attn.kernel = "flash"
    with torch.no_grad():
        builds, y = _count_mask_builds(lambda: decoder(torch.randn(2, 7, 16)))
    assert builds == [] and y.shape == (2, 7, 16)


def test_the_language_models_build_one_mask_per_call():
    torch.manual_seed(0)
    model = selfattn.models.transformer.MiniGPT(vocab_size=11, d_model=16, num_heads=4)
    model.eval()
    ids = torch.randint(0, 11, (2, 9))
    with torch.no_grad():
        builds, _ = _count_mask_builds(lambda: model(ids))
    assert len(builds) == 1


@pytest.mark.parametrize("shape", [(2, 3, 5, 8), (1, 5, 8)])
def test_the_flash_kernel_checks_once_and_equals_flash_attention(shape):
    from selfattn.efficient.flash import flash_attention

    torch.manual_seed(0)
    q = torch.randn(*shape[:-2], 4, shape[-1], requires_grad=True)
    k, v = torch.randn(*shape), torch.randn(*shape)
    with _counting(_validators()) as calls:
        out = attention.scaled_dot_product_attention(q, k, v, "causal", kernel="flash")
    assert calls[("require_qkv", None)] == 1
    want = flash_attention(q, k, v, causal=True, alignment="bottom_right")
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    (grad,) = torch.autograd.grad(out.sum(), q)
    (grad_want,) = torch.autograd.grad(want.sum(), q)
    torch.testing.assert_close(grad, grad_want, rtol=0, atol=0)


@pytest.mark.parametrize("absorb", [False, True])
@pytest.mark.parametrize(
    "mask",
    [None, "causal", torch.ones(6, 6, dtype=torch.bool).tril()],
    ids=["none", "causal", "t"],
)
def test_a_latent_attention_forward_checks_its_mask_once(absorb, mask):
    # MultiHeadLatentAttention builds q, k, v and the mask itself: both attention paths
    # (up-projected, absorbed) are the trusting ones, as MultiHeadAttention's.
    from selfattn.latent import MultiHeadLatentAttention

    torch.manual_seed(0)
    layer = MultiHeadLatentAttention(32, 4, kv_rank=8, rope_dim=4, d_nope=8).eval()
    with torch.no_grad():
        calls = _forward_calls(layer, torch.randn(2, 6, 32), mask=mask, absorb=absorb)
    # (RoPE checks the query and key parts it rotates, two tensors: not counted here.)
    attention_checks = ("resolve_mask_arg", "require_mask", "require_kernel_args", "require_qkv")
    twice = {k: c for k, c in calls.items() if c > 1 and k[0] in attention_checks}
    assert not twice, twice
    assert calls[("resolve_mask_arg", None)] == 1
    assert calls[("require_qkv", None)] == 0
    assert calls[("require_mask", None)] == (1 if isinstance(mask, torch.Tensor) else 0)
