"""Flags and numeric parameters of the whole public API (robustness review, round 2).

* A bool flag takes ``True``/``False`` (NumPy and 0-dim torch bools too) and nothing else:
  a string such as ``causal="bottom_right"`` is a TypeError naming the flag, never a
  silently truthy value. ``FLAG_CALLS`` holds one call per bool parameter, and
  ``test_every_bool_parameter_has_a_call`` finds the bool parameters by introspection, so
  a new flag without a check fails here.
* A float parameter states its range (finite, > 0, >= 0) and refuses NaN and infinity.
"""

import importlib
import inspect
import pkgutil

import numpy as np
import pytest
import selfattn
import torch
from selfattn import bench, costs, masks, positional, train, viz
from selfattn.data.vocab import Vocab
from selfattn.efficient import (
    decoding,
    flash,
    linear,
    paged,
    performer,
    sliding_window,
    sparse,
    triton_configs,
    triton_flash,
)
from selfattn.models import finetune, single_head, tiny_attention, transformer
from selfattn.models import positional as mpos
from selfattn.multihead import MultiHeadAttention

torch.manual_seed(0)
Q = torch.randn(1, 2, 5, 4)
K = torch.randn(1, 2, 5, 4)
V = torch.randn(1, 2, 5, 4)
IDS = torch.randint(1, 10, (2, 5))
IMAGES = torch.rand(2, 3, 8, 8)


def _paged(flag):
    cache = paged.PagedKVCache(num_blocks=4, block_size=4, num_kv_heads=2, d_head=4)
    cache.append(cache.add_sequence(), torch.randn(2, 3, 4), torch.randn(2, 3, 4))
    return paged.paged_attention(torch.randn(1, 2, 1, 4), cache, [0], causal=flag)


def _layer():
    return MultiHeadAttention(8, 2)


def _clip():
    return transformer.MiniCLIP(10, image_size=8, patch=4, d_model=8, num_heads=2, num_layers=1)


def _gpt():
    return transformer.MiniGPT(10, d_model=8, num_heads=2, num_layers=1, max_len=16)


def _order_model():
    return mpos.OrderModel(10, d_model=8, num_heads=2, num_layers=1, max_len=8)


def _train(flag):
    model = torch.nn.Linear(2, 1)
    batch = (torch.randn(3, 2), torch.randn(3, 1))
    loss = lambda m, b: ((m(b[0]) - b[1]) ** 2).mean()  # noqa: E731
    return train.train_loop(model, [batch], loss, steps=1, progress=flag)


#: (module path, qualified name, parameter) -> a call passing ``flag`` to that parameter.
FLAG_CALLS = {
    ("selfattn.attention", "scaled_dot_product_attention", "return_weights"): lambda f: (
        selfattn.scaled_dot_product_attention(Q, K, V, return_weights=f)
    ),
    ("selfattn.models.attention_decoder", "generate", "use_cache"): lambda f: selfattn.generate(
        [_layer()], torch.randn(1, 2, 8), 1, use_cache=f
    ),
    ("selfattn.bench", "run_cpu", "quick"): lambda f: bench.run_cpu(quick=f, out=None),
    ("selfattn.bench", "run_cpu", "memory"): lambda f: bench.run_cpu(memory=f, out=None),
    ("selfattn.bench", "run_cpu", "timing"): lambda f: bench.run_cpu(timing=f, out=None),
    ("selfattn.costs", "mha_param_count", "bias"): lambda f: costs.mha_param_count(8, bias=f),
    ("selfattn.data.vocab", "Vocab.decode", "skip_pad"): lambda f: Vocab(["a", "b"]).decode(
        [0, 1], skip_pad=f
    ),
    ("selfattn.efficient.decoding", "flash_decoding", "causal"): lambda f: decoding.flash_decoding(
        Q, K, V, causal=f
    ),
    ("selfattn.efficient.decoding", "flash_decoding", "return_lse"): lambda f: (
        decoding.flash_decoding(Q, K, V, return_lse=f)
    ),
    ("selfattn.efficient.flash", "flash_attention", "causal"): lambda f: flash.flash_attention(
        Q, K, V, causal=f
    ),
    ("selfattn.efficient.flash", "flash_attention_reference", "causal"): lambda f: (
        flash.flash_attention_reference(Q, K, V, causal=f)
    ),
    ("selfattn.efficient.linear", "decayed_linear_attention", "normalize"): lambda f: (
        linear.decayed_linear_attention(Q, K, V, 0.9, normalize=f)
    ),
    ("selfattn.efficient.linear", "linear_attention", "causal"): lambda f: linear.linear_attention(
        Q, K, V, causal=f
    ),
    ("selfattn.efficient.linear", "linear_attention_step", "normalize"): lambda f: (
        linear.linear_attention_step(
            linear.LinearAttentionState.empty((), 4, 4),
            Q[0, 0, 0],
            K[0, 0, 0],
            V[0, 0, 0],
            normalize=f,
        )
    ),
    ("selfattn.efficient.paged", "paged_attention", "causal"): _paged,
    ("selfattn.efficient.performer", "gaussian_projection", "orthogonal"): lambda f: (
        performer.gaussian_projection(8, 4, orthogonal=f)
    ),
    ("selfattn.efficient.performer", "performer_attention", "causal"): lambda f: (
        performer.performer_attention(Q, K, V, num_features=8, causal=f)
    ),
    ("selfattn.efficient.performer", "performer_attention", "orthogonal"): lambda f: (
        performer.performer_attention(Q, K, V, num_features=8, orthogonal=f)
    ),
    ("selfattn.efficient.sparse", "longformer_mask", "causal"): lambda f: sparse.longformer_mask(
        6, 2, [0], causal=f
    ),
    ("selfattn.efficient.sliding_window", "sliding_window_attention", "causal"): lambda f: (
        sliding_window.sliding_window_attention(Q, K, V, 2, causal=f)
    ),
    (
        "selfattn.efficient.sliding_window",
        "sliding_window_attention_reference",
        "causal",
    ): lambda f: sliding_window.sliding_window_attention_reference(Q, K, V, 2, causal=f),
    ("selfattn.efficient.sparse", "strided_mask", "causal"): lambda f: sparse.strided_mask(
        6, 2, causal=f
    ),
    ("selfattn.efficient.triton_configs", "choose_config", "causal"): lambda f: (
        triton_configs.choose_config("forward", 64, 64, torch.float16, f, 100_000)
    ),
    ("selfattn.efficient.triton_configs", "config_candidates", "causal"): lambda f: (
        triton_configs.config_candidates("forward", 64, torch.float16, f)
    ),
    ("selfattn.efficient.triton_flash", "compile_for_gpu", "causal"): lambda f: (
        triton_flash.compile_for_gpu("forward", 80, torch.float16, 64, 64, causal=f)
    ),
    ("selfattn.efficient.triton_flash", "triton_flash_attention", "causal"): lambda f: (
        triton_flash.triton_flash_attention(Q, K, V, causal=f)
    ),
    ("selfattn.masks", "sliding_window_mask", "causal"): lambda f: masks.sliding_window_mask(
        6, 2, causal=f
    ),
    ("selfattn.models.finetune", "MatchHead.forward", "return_weights"): lambda f: (
        finetune.MatchHead(8, 2)(
            torch.randn(2, 3, 8),
            torch.ones(2, 3, dtype=torch.bool),
            torch.randn(2, 4, 8),
            return_weights=f,
        )
    ),
    ("selfattn.models.positional", "OrderModel.forward", "return_weights"): lambda f: (
        _order_model()(IDS % 10, return_weights=f)
    ),
    ("selfattn.models.positional", "OrderModelConfig.__init__", "causal"): lambda f: (
        mpos.OrderModel(10, d_model=8, num_heads=2, num_layers=1, causal=f)
    ),
    ("selfattn.models.positional", "token_accuracy", "per_position"): lambda f: (
        mpos.token_accuracy(_order_model(), IDS, IDS, per_position=f)
    ),
    ("selfattn.models.single_head", "KeyValueRecallModel.__init__", "scaled"): lambda f: (
        single_head.KeyValueRecallModel(4, 4, 8, 4, scaled=f)
    ),
    ("selfattn.models.single_head", "KeyValueRecallModel.forward", "return_weights"): lambda f: (
        single_head.KeyValueRecallModel(4, 4, 8, 4)(
            torch.randint(0, 4, (2, 3)),
            torch.randint(0, 4, (2, 3)),
            torch.randint(0, 4, (2,)),
            return_weights=f,
        )
    ),
    ("selfattn.models.single_head", "SingleHeadSelfAttention.__init__", "scaled"): lambda f: (
        single_head.SingleHeadSelfAttention(8, 4, scaled=f)
    ),
    ("selfattn.models.single_head", "SingleHeadSelfAttention.forward", "return_weights"): (
        lambda f: single_head.SingleHeadSelfAttention(8, 4)(torch.randn(2, 3, 8), return_weights=f)
    ),
    ("selfattn.models.tiny_attention", "AttentionClassifier.__init__", "mlp"): lambda f: (
        tiny_attention.AttentionClassifier(10, 2, d_model=8, mlp=f)
    ),
    ("selfattn.models.tiny_attention", "AttentionClassifier.forward", "return_weights"): (
        lambda f: tiny_attention.AttentionClassifier(10, 2, d_model=8)(IDS, return_weights=f)
    ),
    ("selfattn.models.tiny_attention", "SelfAttention.__init__", "bias"): lambda f: (
        tiny_attention.SelfAttention(8, bias=f)
    ),
    ("selfattn.models.tiny_attention", "SelfAttention.__init__", "scaled"): lambda f: (
        tiny_attention.SelfAttention(8, scaled=f)
    ),
    ("selfattn.models.tiny_attention", "SelfAttention.forward", "return_weights"): lambda f: (
        tiny_attention.SelfAttention(8)(torch.randn(2, 3, 8), return_weights=f)
    ),
    ("selfattn.models.transformer", "Decoder.__init__", "cross_attention"): lambda f: (
        transformer.Decoder(8, 2, 1, cross_attention=f)
    ),
    ("selfattn.models.transformer", "Decoder.forward", "return_weights"): lambda f: (
        transformer.Decoder(8, 2, 1)(torch.randn(2, 3, 8), return_weights=f)
    ),
    ("selfattn.models.transformer", "Encoder.forward", "return_weights"): lambda f: (
        transformer.Encoder(8, 2, 1)(torch.randn(2, 3, 8), return_weights=f)
    ),
    ("selfattn.models.transformer", "MiniBERT.forward", "return_weights"): lambda f: (
        transformer.MiniBERT(10, d_model=8, num_heads=2, num_layers=1)(IDS, return_weights=f)
    ),
    ("selfattn.models.transformer", "MiniCLIP.match", "return_weights"): lambda f: _clip().match(
        IMAGES, IDS, return_weights=f
    ),
    ("selfattn.models.transformer", "MiniCLIP.match_tokens", "return_weights"): lambda f: (
        _clip().match_tokens(
            torch.randn(2, 4, 8),
            torch.randn(2, 3, 8),
            torch.ones(2, 3, dtype=torch.bool),
            return_weights=f,
        )
    ),
    ("selfattn.models.transformer", "MiniGPT.forward", "return_weights"): lambda f: _gpt()(
        IDS, return_weights=f
    ),
    ("selfattn.models.transformer", "MiniGPT.generate", "greedy"): lambda f: _gpt().generate(
        IDS, 1, greedy=f
    ),
    ("selfattn.models.transformer", "MiniGPT.generate", "return_logits"): lambda f: (
        _gpt().generate(IDS, 1, return_logits=f)
    ),
    ("selfattn.models.transformer", "MiniGPT.generate", "use_cache"): lambda f: _gpt().generate(
        IDS, 1, use_cache=f
    ),
    ("selfattn.models.transformer", "MiniViT.forward", "return_weights"): lambda f: (
        transformer.MiniViT(2, image_size=8, d_model=8, num_heads=2, num_layers=1)(
            IMAGES, return_weights=f
        )
    ),
    ("selfattn.models.transformer", "MiniViT.tokens", "return_weights"): lambda f: (
        transformer.MiniViT(2, image_size=8, d_model=8, num_heads=2, num_layers=1).tokens(
            IMAGES, return_weights=f
        )
    ),
    ("selfattn.models.transformer", "TransformerBlock.__init__", "cross_attention"): lambda f: (
        transformer.TransformerBlock(8, 2, cross_attention=f)
    ),
    ("selfattn.models.transformer", "TransformerBlock.forward", "return_weights"): lambda f: (
        transformer.TransformerBlock(8, 2)(torch.randn(2, 3, 8), return_weights=f)
    ),
    ("selfattn.multihead", "MultiHeadAttention.__init__", "bias"): lambda f: MultiHeadAttention(
        8, 2, bias=f
    ),
    ("selfattn.multihead", "MultiHeadAttention.forward", "return_weights"): lambda f: _layer()(
        torch.randn(2, 3, 8), return_weights=f
    ),
    ("selfattn.positional", "RelativePositionBias.__init__", "bidirectional"): lambda f: (
        positional.RelativePositionBias(2, bidirectional=f)
    ),
    ("selfattn.positional", "alibi_bias", "causal"): lambda f: positional.alibi_bias(
        2, 4, causal=f
    ),
    ("selfattn.positional", "relative_position_bucket", "bidirectional"): lambda f: (
        positional.relative_position_bucket(torch.arange(-3, 4), bidirectional=f)
    ),
    ("selfattn.train", "train_loop", "progress"): _train,
    ("selfattn.viz", "plot_attention", "colorbar"): lambda f: viz.plot_attention(
        torch.rand(3, 3), colorbar=f
    ),
    ("selfattn.viz", "plot_attention", "annotate"): lambda f: viz.plot_attention(
        torch.rand(3, 3), annotate=f
    ),
    # chapter 11's layers
    ("selfattn.latent", "MultiHeadLatentAttention.__init__", "bias"): lambda f: _latent(bias=f),
    ("selfattn.latent", "MultiHeadLatentAttention.forward", "absorb"): lambda f: _latent()(
        torch.randn(1, 3, 8), absorb=f
    ),
    ("selfattn.differential", "DifferentialAttention.__init__", "bias"): lambda f: _differential(
        bias=f
    ),
    ("selfattn.differential", "DifferentialAttention.forward", "return_weights"): lambda f: (
        _differential()(torch.randn(1, 3, 8), return_weights=f)
    ),
}


def _latent(**kw):
    from selfattn.latent import MultiHeadLatentAttention

    return MultiHeadLatentAttention(8, 2, 4, 2, **kw)


def _differential(**kw):
    from selfattn.differential import DifferentialAttention

    return DifferentialAttention(8, 2, **kw)


def _distributed():
    from selfattn import distributed

    return distributed


Q4, K4, V4 = (t[..., :4, :] for t in (Q, K, V))  # n = 4: shards for P = 2


def _kernel_record(**flag):
    from selfattn.attention import Kernel

    return Kernel(None, **flag)


def _flex():
    from selfattn import flex

    return flex


FLAG_CALLS.update(
    {
        ("selfattn.attention", "Kernel.__init__", name): (
            lambda f, name=name: _kernel_record(**{name: f})
        )
        for name in ("masks", "return_weights", "dropout", "score_bias", "upcast_half")
    }
)
FLAG_CALLS.update(
    {
        ("selfattn.flex", "document", "causal"): lambda f: _flex().document(
            torch.zeros(3, dtype=torch.long), causal=f
        ),
        ("selfattn.flex", "sliding_window", "causal"): lambda f: _flex().sliding_window(
            2, causal=f
        ),
        ("selfattn.flex", "flex_available", "compiled"): lambda f: _flex().flex_available(f),
        ("selfattn.flex", "flex", "compiled"): lambda f: _flex().flex(Q, K, V, compiled=f),
    }
)
FLAG_CALLS.update(
    {
        ("selfattn.distributed", "ring_attention", "causal"): lambda f: (
            _distributed().ring_attention(Q4, K4, V4, causal=f)
        ),
        ("selfattn.distributed", "ulysses_attention", "causal"): lambda f: (
            _distributed().ulysses_attention(Q4, K4, V4, causal=f)
        ),
        ("selfattn.distributed", "ring_work", "causal"): lambda f: _distributed().ring_work(
            2, causal=f
        ),
        ("selfattn.distributed", "simulate_ring", "causal"): lambda f: (
            _distributed().simulate_ring(Q4, K4, V4, 2, causal=f)
        ),
        ("selfattn.distributed", "simulate_ring", "trace"): lambda f: _distributed().simulate_ring(
            Q4, K4, V4, 2, trace=f
        ),
        ("selfattn.distributed", "TensorParallelAttention.forward", "causal"): lambda f: (
            _distributed().TensorParallelAttention(MultiHeadAttention(8, 2), 2)(
                torch.randn(1, 3, 8), causal=f
            )
        ),
        ("selfattn.distributed", "launch", "all_ranks"): lambda f: _distributed().launch(
            _distributed().hello_worker, 2, all_ranks=f
        ),
        ("selfattn.distributed", "check_worker", "refusals"): lambda f: (
            _distributed().check_worker(0, 2, [], refusals=f)
        ),
        ("selfattn.distributed", "timeline_worker", "causal"): lambda f: (
            _distributed().timeline_worker(0, 2, 8, causal=f)
        ),
    }
)


def _llm():
    from selfattn.models import llm

    return llm


def _norms():
    from selfattn import norms

    return norms


def _decoder_lm(**kw):
    from selfattn.norms import RMSNorm

    return _llm().DecoderLM(
        torch.nn.Embedding(10, 8), [], RMSNorm(8), torch.nn.Linear(8, 10), **kw
    )


FLAG_CALLS.update(
    {
        ("selfattn.models.llm", "DecoderLM.generate", "return_logits"): lambda f: (
            _decoder_lm().generate(IDS, 1, return_logits=f)
        ),
        ("selfattn.models.llm", "DecoderLM.generate", "use_cache"): lambda f: (
            _decoder_lm().generate(IDS, 1, use_cache=f)
        ),
        ("selfattn.models.llm", "GatedMLP.__init__", "bias"): lambda f: _llm().GatedMLP(
            8, 16, bias=f
        ),
        ("selfattn.multihead", "MultiHeadAttention.__init__", "gate"): lambda f: (
            MultiHeadAttention(8, 2, gate=f)
        ),
        ("selfattn.multihead", "MultiHeadAttention.__init__", "qk_norm"): lambda f: (
            MultiHeadAttention(8, 2, qk_norm=f)
        ),
        ("selfattn.multihead", "MultiHeadAttention.__init__", "sinks"): lambda f: (
            MultiHeadAttention(8, 2, sinks=f)
        ),
        ("selfattn.norms", "RMSNorm.__init__", "unit_offset"): lambda f: _norms().RMSNorm(
            8, unit_offset=f
        ),
        ("selfattn.norms", "rms_norm", "unit_offset"): lambda f: _norms().rms_norm(
            torch.randn(2, 8), torch.ones(8), unit_offset=f
        ),
    }
)


def _chapter13(module):
    return importlib.import_module(f"selfattn.{module}")


G4 = torch.rand(1, 2, 5).log()  # the gated delta rule's log-decay and write strength
B4 = torch.rand(1, 2, 5)

FLAG_CALLS.update(
    {
        ("selfattn.delta_net", "GatedDeltaNet.forward", "return_state"): lambda f: _chapter13(
            "delta_net"
        ).GatedDeltaNet(8, 2)(torch.randn(1, 3, 8), return_state=f),
        ("selfattn.efficient.delta_rule", "gated_delta_rule", "output_final_state"): lambda f: (
            _chapter13("efficient.delta_rule").gated_delta_rule(
                Q, K, V, G4, B4, output_final_state=f
            )
        ),
        ("selfattn.learned_sparse", "DeepSeekSparseAttention.forward", "return_mask"): lambda f: (
            _chapter13("learned_sparse").DeepSeekSparseAttention(8, 2)(
                torch.randn(1, 3, 8), return_mask=f
            )
        ),
        ("selfattn.learned_sparse", "NativeSparseAttention.forward", "return_parts"): lambda f: (
            _chapter13("learned_sparse").NativeSparseAttention(8, 2)(
                torch.randn(1, 3, 8), return_parts=f
            )
        ),
    }
)

#: Flags this file does not call: owned by modules outside this review (the recorder).
NOT_CALLED = {
    ("selfattn.results", "record", "display"),
    ("selfattn.results", "Recorder.glue", "display"),
    ("selfattn.results", "Recorder.__call__", "display"),
    # The GPU benchmark runs only on a CUDA device (tools/gpu_check.py, issue 52).
    ("selfattn.bench", "run_gpu", "backward"),
}


def _public_modules():
    yield selfattn
    for info in pkgutil.walk_packages(selfattn.__path__, "selfattn."):
        parts = info.name.split(".")[1:]
        if any(p.startswith("_") for p in parts) or parts[0] in ("exercises", "widgets"):
            continue
        if parts[0] == "recorded":
            continue
        yield importlib.import_module(info.name)


def _parameters(annotated):
    """``(module, qualified name, parameter)`` of every public parameter whose annotation
    (a string: the library uses ``from __future__ import annotations``) passes ``annotated``."""
    found, seen = set(), set()

    def visit(obj, module, qual):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if inspect.isclass(obj):
            for name, member in vars(obj).items():
                if name.startswith("_") and name not in ("__init__", "__call__"):
                    continue
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if inspect.isfunction(member):
                    visit(member, module, f"{qual}.{name}")
            return
        try:
            params = inspect.signature(obj).parameters.values()
        except (TypeError, ValueError):
            return
        for p in params:
            ann = p.annotation if isinstance(p.annotation, str) else repr(p.annotation)
            if annotated(ann.replace(" ", "")):
                found.add((module, qual, p.name))

    for mod in _public_modules():
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name, None)
            owner = getattr(obj, "__module__", "") or ""
            if owner.startswith("selfattn") and (inspect.isclass(obj) or callable(obj)):
                visit(obj, owner, name)
    return found


def _bool_parameters():
    return _parameters(lambda ann: "bool" in ann.split("|"))


def test_every_bool_parameter_has_a_call():
    found = _bool_parameters()
    missing = found - set(FLAG_CALLS) - NOT_CALLED
    assert not missing, f"bool parameters without a call in FLAG_CALLS: {sorted(missing)}"
    stale = set(FLAG_CALLS) - found
    assert not stale, f"FLAG_CALLS names parameters that are not bool flags: {sorted(stale)}"


#: Flags whose ``None`` means "decide for me" (their annotation is ``bool | None``).
NONE_MEANS_DEFAULT = {
    ("selfattn.train", "train_loop", "progress"),
    ("selfattn.viz", "plot_attention", "annotate"),
}
NOT_BOOLS = ["bottom_right", "yes", "False", 1, 0, None, 1.0, [True], torch.tensor([True])]


@pytest.mark.parametrize("key", sorted(FLAG_CALLS), ids=lambda k: f"{k[1]}-{k[2]}")
def test_a_bool_flag_refuses_anything_but_a_bool(key):
    call = FLAG_CALLS[key]
    for bad in NOT_BOOLS:
        if bad is None and key in NONE_MEANS_DEFAULT:
            continue
        with pytest.raises(TypeError) as info:
            call(bad)
        message = str(info.value)
        assert key[2] in message and "True or False" in message, (bad, message)


def test_a_causal_alignment_string_says_how_to_spell_the_call():
    for fn in (flash.flash_attention, decoding.flash_decoding, linear.linear_attention):
        with pytest.raises(TypeError, match=r"causal=True, alignment='bottom_right'"):
            fn(Q, K, V, causal="bottom_right")
    with pytest.raises(TypeError, match=r"causal=True, alignment='top_left'"):
        flash.flash_attention(Q, K, V, causal="top_left")


@pytest.mark.parametrize(
    "flag", [np.bool_(True), torch.tensor(True), np.bool_(False), torch.tensor(False)]
)
def test_numpy_and_torch_bools_are_flags(flag):
    expected = flash.flash_attention(Q, K, V, causal=bool(flag))
    assert torch.equal(flash.flash_attention(Q, K, V, causal=flag), expected)
    assert torch.equal(
        masks.sliding_window_mask(6, 2, causal=flag),
        masks.sliding_window_mask(6, 2, causal=bool(flag)),
    )


# -- float parameters: NaN, infinity and values outside the stated range ----------------------

from selfattn.data import coreference, images, mqar, text  # noqa: E402
from selfattn.efficient import io_model  # noqa: E402
from selfattn.exercises import ch02  # noqa: E402
from selfattn.models import long_context  # noqa: E402

NAN, INF = float("nan"), float("inf")
#: What each range refuses (beyond NaN, which every float parameter refuses).
OUTSIDE = {
    "finite": [INF, -INF],
    "positive": [INF, 0.0, -1.0],
    "nonnegative": [INF, -1.0],
    "probability": [INF, -0.5, 1.5],
    "at_most_zero": [INF, 1.0],
    "positive_or_inf": [0.0, -1.0],
    "base": [INF, 1.0, 0.5],
    "gate": [INF, 0.0, 1.5, -0.5],
}


def _rw(value):
    return ch02.soft_lookup(torch.randn(4), torch.randn(3, 4), torch.randn(3, 2), value)


#: (module, qualified name, parameter) -> (range, a call passing the value).
FLOAT_CALLS = {
    # chapter 11's layers
    ("selfattn.latent", "MultiHeadLatentAttention.__init__", "scale"): (
        "positive",
        lambda x: _latent(scale=x),
    ),
    ("selfattn.latent", "MultiHeadLatentAttention.__init__", "rope_base"): (
        "base",
        lambda x: _latent(rope_base=x),
    ),
    ("selfattn.latent", "MultiHeadLatentAttention.__init__", "norm_eps"): (
        "positive",
        lambda x: _latent(norm_eps=x),
    ),
    ("selfattn.differential", "DifferentialAttention.__init__", "norm_eps"): (
        "positive",
        lambda x: _differential(norm_eps=x),
    ),
    ("selfattn.differential", "DifferentialAttention.__init__", "lambda_std"): (
        "nonnegative",
        lambda x: _differential(lambda_std=x),
    ),
    ("selfattn.attention", "scaled_dot_product_attention", "dropout"): (
        "probability",
        lambda x: selfattn.scaled_dot_product_attention(Q, K, V, dropout=x),
    ),
    ("selfattn.attention", "scaled_dot_product_attention", "scale"): (
        "finite",
        lambda x: selfattn.scaled_dot_product_attention(Q, K, V, scale=x),
    ),
    ("selfattn.bench", "memory_case", "timeout"): (
        "positive",
        lambda x: bench.memory_case("sdpa", 8, timeout=x),
    ),
    ("selfattn.bench", "time_case", "budget_s"): (
        "positive",
        lambda x: bench.time_case("sdpa", 8, budget_s=x),
    ),
    ("selfattn.data.coreference", "CorefTask.split", "held_out"): (
        "probability",
        lambda x: coreference.CorefTask().split(x),
    ),
    ("selfattn.data.images", "make_shapes", "noise"): (
        "nonnegative",
        lambda x: images.make_shapes(2, noise=x),
    ),
    ("selfattn.data.mqar", "train_mqar", "lr"): (
        "positive",
        lambda x: mqar.train_mqar("attention", 2, steps=1, lr=x),
    ),
    ("selfattn.data.text", "generate_sentences", "clause_prob"): (
        "probability",
        lambda x: text.generate_sentences(2, clause_prob=x),
    ),
    ("selfattn.data.text", "mask_tokens", "prob"): (
        "probability",
        lambda x: text.mask_tokens(IDS, torch.tensor([5, 5]), mask_id=1, vocab_size=10, prob=x),
    ),
    ("selfattn.diagrams", "dot_product_softmax", "temperature"): (
        "positive",
        lambda x: selfattn.diagrams.dot_product_softmax(temperature=x),
    ),
    ("selfattn.diagrams", "rope_rotation", "base"): (
        "base",
        lambda x: selfattn.diagrams.rope_rotation(base=x),
    ),
    ("selfattn.efficient.decoding", "flash_decoding", "scale"): (
        "finite",
        lambda x: decoding.flash_decoding(Q, K, V, scale=x),
    ),
    ("selfattn.efficient.decoding", "partial_attention", "scale"): (
        "finite",
        lambda x: decoding.partial_attention(Q, K, V, scale=x),
    ),
    ("selfattn.efficient.flash", "flash_attention", "scale"): (
        "finite",
        lambda x: flash.flash_attention(Q, K, V, scale=x),
    ),
    ("selfattn.efficient.flash", "flash_attention_reference", "scale"): (
        "finite",
        lambda x: flash.flash_attention_reference(Q, K, V, scale=x),
    ),
    ("selfattn.efficient.io_model", "TwoLevelMemory.__init__", "capacity"): (
        "positive_or_inf",
        lambda x: io_model.TwoLevelMemory(x),
    ),
    ("selfattn.efficient.io_model", "flash_backward_block_sizes", "M"): (
        "positive_or_inf",
        lambda x: io_model.flash_backward_block_sizes(64, x, 256),
    ),
    ("selfattn.efficient.io_model", "flash_block_sizes", "M"): (
        "positive_or_inf",
        lambda x: io_model.flash_block_sizes(64, x, 256),
    ),
    ("selfattn.efficient.io_model", "standard_attention_io", "M"): (
        "positive_or_inf",
        lambda x: io_model.standard_attention_io(64, 8, M=x),
    ),
    ("selfattn.efficient.io_model", "tiled_attention_backward_io", "M"): (
        "positive_or_inf",
        lambda x: io_model.tiled_attention_backward_io(64, 8, x),
    ),
    ("selfattn.efficient.io_model", "tiled_attention_io", "M"): (
        "positive_or_inf",
        lambda x: io_model.tiled_attention_io(64, 8, x),
    ),
    ("selfattn.efficient.linear", "decayed_linear_attention", "eps"): (
        "nonnegative",
        lambda x: linear.decayed_linear_attention(Q, K, V, 0.9, eps=x),
    ),
    ("selfattn.efficient.linear", "decayed_linear_attention", "decay"): (
        "gate",
        lambda x: linear.decayed_linear_attention(Q, K, V, x),
    ),
    ("selfattn.efficient.linear", "linear_attention_recurrent", "decay"): (
        "gate",
        lambda x: linear.linear_attention_recurrent(Q, K, V, decay=x),
    ),
    ("selfattn.efficient.linear", "linear_attention_step", "decay"): (
        "gate",
        lambda x: linear.linear_attention_step(
            linear.LinearAttentionState.empty((), 4, 4),
            Q[0, 0, 0],
            K[0, 0, 0],
            V[0, 0, 0],
            decay=x,
        ),
    ),
    ("selfattn.efficient.linear", "linear_attention", "eps"): (
        "nonnegative",
        lambda x: linear.linear_attention(Q, K, V, eps=x),
    ),
    ("selfattn.efficient.linear", "linear_attention_step", "eps"): (
        "nonnegative",
        lambda x: linear.linear_attention_step(
            linear.LinearAttentionState.empty((), 4, 4), Q[0, 0, 0], K[0, 0, 0], V[0, 0, 0], eps=x
        ),
    ),
    ("selfattn.efficient.paged", "paged_attention", "scale"): (
        "finite",
        lambda x: _paged_scale(x),
    ),
    ("selfattn.efficient.performer", "performer_attention", "eps"): (
        "nonnegative",
        lambda x: performer.performer_attention(Q, K, V, num_features=8, eps=x),
    ),
    ("selfattn.efficient.performer", "performer_attention", "scale"): (
        "positive",
        lambda x: performer.performer_attention(Q, K, V, num_features=8, scale=x),
    ),
    ("selfattn.efficient.sparse", "block_sparse_attention", "scale"): (
        "finite",
        lambda x: sparse.block_sparse_attention(
            Q, K, V, torch.ones(5, 5, dtype=torch.bool), 1, scale=x
        ),
    ),
    ("selfattn.efficient.sliding_window", "sliding_window_attention", "scale"): (
        "finite",
        lambda x: sliding_window.sliding_window_attention(Q, K, V, 2, scale=x),
    ),
    ("selfattn.efficient.sliding_window", "sliding_window_attention_reference", "scale"): (
        "finite",
        lambda x: sliding_window.sliding_window_attention_reference(Q, K, V, 2, scale=x),
    ),
    ("selfattn.efficient.triton_flash", "triton_flash_attention", "scale"): (
        "finite",
        lambda x: triton_flash.triton_flash_attention(Q, K, V, scale=x),
    ),
    ("selfattn.exercises.ch02", "soft_lookup", "temperature"): ("positive", _rw),
    ("selfattn.masks", "to_additive_mask", "fill"): (
        "at_most_zero",
        lambda x: masks.to_additive_mask(torch.ones(2, 2, dtype=torch.bool), fill=x),
    ),
    ("selfattn.models.finetune", "finetune_run", "lr"): (
        "positive",
        lambda x: finetune.finetune_run(
            None, IDS, IDS[:, 0], IDS, IDS[:, 0], Vocab(list("abcdefgh")), lr=x
        ),
    ),
    ("selfattn.models.finetune", "pretrain_mlm", "lr"): (
        "positive",
        lambda x: finetune.pretrain_mlm(
            transformer.MiniBERT(10), IDS, torch.tensor([5, 5]), Vocab(list("abcdefgh")), lr=x
        ),
    ),
    ("selfattn.models.long_context", "RetrievalModel.__init__", "rope_base"): (
        "base",
        lambda x: long_context.RetrievalModel(rope_base=x),
    ),
    ("selfattn.models.long_context", "rope_scaling_run", "lr"): (
        "positive",
        lambda x: long_context.rope_scaling_run(0, lr=x),
    ),
    ("selfattn.models.positional", "OrderModelConfig.__init__", "rope_base"): (
        "base",
        lambda x: mpos.OrderModel(10, d_model=8, num_heads=2, num_layers=1, rope_base=x),
    ),
    ("selfattn.models.positional", "extrapolation_run", "lr"): (
        "positive",
        lambda x: mpos.extrapolation_run("rope", 0, lr=x),
    ),
    ("selfattn.models.positional", "steps_to_loss", "threshold"): (
        "finite",
        lambda x: mpos.steps_to_loss([1.0, 0.5], x, window=1),
    ),
    ("selfattn.models.positional", "train_order_model", "lr"): (
        "positive",
        lambda x: mpos.train_order_model("rope", None, n_train=4, steps=1, lr=x),
    ),
    ("selfattn.models.tiny_attention", "AttentionClassifier.forward", "temperature"): (
        "positive",
        lambda x: tiny_attention.AttentionClassifier(10, 2, d_model=8)(IDS, temperature=x),
    ),
    ("selfattn.models.tiny_attention", "SelfAttention.forward", "temperature"): (
        "positive",
        lambda x: tiny_attention.SelfAttention(8)(torch.randn(2, 3, 8), temperature=x),
    ),
    ("selfattn.models.transformer", "MiniGPT.generate", "temperature"): (
        "positive",
        lambda x: _gpt().generate(IDS, 1, temperature=x),
    ),
    ("selfattn.models.transformer", "TransformerBlock.forward", "temperature"): (
        "positive",
        lambda x: transformer.TransformerBlock(8, 2)(torch.randn(2, 3, 8), temperature=x),
    ),
    ("selfattn.multihead", "MultiHeadAttention.__init__", "dropout"): (
        "probability",
        lambda x: MultiHeadAttention(8, 2, dropout=x),
    ),
    ("selfattn.multihead", "MultiHeadAttention.forward", "temperature"): (
        "positive",
        lambda x: _layer()(torch.randn(2, 3, 8), temperature=x),
    ),
    ("selfattn.positional", "LearnedPositionalEmbedding.__init__", "init_std"): (
        "nonnegative",
        lambda x: positional.LearnedPositionalEmbedding(4, 2, init_std=x),
    ),
    ("selfattn.positional", "RopeScaling.__init__", "beta_fast"): (
        "positive",
        lambda x: positional.RopeScaling("yarn", 2.0, 16, beta_fast=x),
    ),
    ("selfattn.positional", "RopeScaling.__init__", "beta_slow"): (
        "nonnegative",
        lambda x: positional.RopeScaling("yarn", 2.0, 16, beta_slow=x),
    ),
    ("selfattn.positional", "RopeScaling.__init__", "factor"): (
        "positive",
        lambda x: positional.RopeScaling("linear", x, 16),
    ),
    ("selfattn.positional", "RotaryEmbedding.__init__", "base"): (
        "base",
        lambda x: positional.RotaryEmbedding(4, base=x),
    ),
    ("selfattn.positional", "RotaryEmbedding.__init__", "rotary_fraction"): (
        "probability",
        lambda x: positional.RotaryEmbedding(4, rotary_fraction=x),
    ),
    ("selfattn.positional", "apply_rope", "base"): (
        "base",
        lambda x: positional.apply_rope(torch.randn(3, 4), torch.arange(3), base=x),
    ),
    ("selfattn.positional", "apply_rope_complex", "base"): (
        "base",
        lambda x: positional.apply_rope_complex(torch.randn(3, 4), torch.arange(3), base=x),
    ),
    ("selfattn.positional", "rope_frequencies", "base"): (
        "base",
        lambda x: positional.rope_frequencies(4, base=x),
    ),
    ("selfattn.positional", "scaled_rope_frequencies", "base"): (
        "base",
        lambda x: positional.scaled_rope_frequencies(
            4, positional.RopeScaling("linear", 2.0), base=x
        ),
    ),
    ("selfattn.positional", "sinusoidal_encoding", "base"): (
        "base",
        lambda x: positional.sinusoidal_encoding(4, 4, base=x),
    ),
    ("selfattn.positional", "sinusoidal_shift_matrix", "base"): (
        "base",
        lambda x: positional.sinusoidal_shift_matrix(1, 4, base=x),
    ),
    ("selfattn.train", "train_loop", "clip"): ("positive", lambda x: _train_with(clip=x)),
    ("selfattn.train", "train_loop", "lr"): ("positive", lambda x: _train_with(lr=x)),
}

#: Float parameters this file does not call: a measured value, not a setting.
FLOAT_CALLS.update(
    {
        ("selfattn.distributed", "ring_attention", "scale"): (
            "finite",
            lambda x: _distributed().ring_attention(Q4, K4, V4, scale=x),
        ),
        ("selfattn.distributed", "ulysses_attention", "scale"): (
            "finite",
            lambda x: _distributed().ulysses_attention(Q4, K4, V4, scale=x),
        ),
        ("selfattn.distributed", "simulate_ring", "scale"): (
            "finite",
            lambda x: _distributed().simulate_ring(Q4, K4, V4, 2, scale=x),
        ),
        ("selfattn.distributed", "launch", "timeout"): (
            "positive",
            lambda x: _distributed().launch(_distributed().hello_worker, 2, timeout=x),
        ),
    }
)

FLOAT_NOT_CALLED = {
    ("selfattn.bench", "goal_met", "value"),
    # The GPU benchmark runs only on a CUDA device (tools/gpu_check.py, issue 52).
    ("selfattn.bench", "run_gpu", "deadline"),
}


def _hf():
    from selfattn import hf

    return hf


def _bert():
    from selfattn.models import bert

    return bert


def _packing():
    from selfattn import packing

    return packing


FLOAT_CALLS.update(
    {
        ("selfattn.flex", "flex", "scale"): ("finite", lambda x: _flex().flex(Q, K, V, scale=x)),
        ("selfattn.flex", "softcap", "cap"): ("positive", lambda x: _flex().softcap(x)),
        ("selfattn.hf", "CopiedRotary.__init__", "attention_scaling"): (
            "positive",
            lambda x: _hf().CopiedRotary(4, torch.ones(2), x),
        ),
        ("selfattn.models.bert", "BertMLM.__init__", "eps"): (
            "positive",
            lambda x: _bert().BertMLM(10, d_model=8, num_heads=2, num_layers=1, hidden=16, eps=x),
        ),
        ("selfattn.models.bert", "PostNormBlock.__init__", "eps"): (
            "positive",
            lambda x: _bert().PostNormBlock(8, 2, 16, eps=x),
        ),
        ("selfattn.models.llm", "DecoderLM.__init__", "embed_scale"): (
            "positive",
            lambda x: _decoder_lm(embed_scale=x),
        ),
        ("selfattn.models.llm", "DecoderLM.__init__", "final_softcap"): (
            "positive",
            lambda x: _decoder_lm(final_softcap=x),
        ),
        ("selfattn.models.llm", "TopKMoE.__init__", "alpha"): (
            "positive",
            lambda x: _llm().TopKMoE(8, 16, 4, 2, act="gpt_oss", alpha=x),
        ),
        ("selfattn.models.llm", "TopKMoE.__init__", "limit"): (
            "positive",
            lambda x: _llm().TopKMoE(8, 16, 4, 2, act="gpt_oss", limit=x),
        ),
        ("selfattn.multihead", "MultiHeadAttention.__init__", "norm_eps"): (
            "positive",
            lambda x: MultiHeadAttention(8, 2, qk_norm=True, norm_eps=x),
        ),
        ("selfattn.multihead", "MultiHeadAttention.__init__", "scale"): (
            "positive",
            lambda x: MultiHeadAttention(8, 2, scale=x),
        ),
        ("selfattn.multihead", "MultiHeadAttention.__init__", "softcap"): (
            "positive",
            lambda x: MultiHeadAttention(8, 2, softcap=x),
        ),
        ("selfattn.norms", "RMSNorm.__init__", "eps"): (
            "positive",
            lambda x: _norms().RMSNorm(8, eps=x),
        ),
        ("selfattn.norms", "rms_norm", "eps"): (
            "positive",
            lambda x: _norms().rms_norm(torch.randn(2, 8), eps=x),
        ),
        ("selfattn.delta_net", "GatedDeltaNet.__init__", "eps"): (
            "positive",
            lambda x: _chapter13("delta_net").GatedDeltaNet(8, 2, eps=x),
        ),
        ("selfattn.delta_net", "GatedRMSNorm.__init__", "eps"): (
            "positive",
            lambda x: _chapter13("delta_net").GatedRMSNorm(8, eps=x),
        ),
        ("selfattn.delta_net", "l2norm", "eps"): (
            "positive",
            lambda x: _chapter13("delta_net").l2norm(torch.randn(2, 8), eps=x),
        ),
        ("selfattn.efficient.delta_rule", "gated_delta_rule", "scale"): (
            "finite",
            lambda x: _chapter13("efficient.delta_rule").gated_delta_rule(
                Q, K, V, G4, B4, scale=x
            ),
        ),
        ("selfattn.models.recall_stack", "train_recall", "lr"): (
            "positive",
            lambda x: _chapter13("models.recall_stack").train_recall("softmax", 2, steps=1, lr=x),
        ),
        ("selfattn.packing", "train_lm", "lr"): (
            "positive",
            lambda x: _packing().train_lm(
                "packed", [torch.arange(1, 4)], [torch.arange(1, 4)], 10, steps=1, lr=x
            ),
        ),
    }
)


def _paged_scale(x):
    cache = paged.PagedKVCache(num_blocks=4, block_size=4, num_kv_heads=2, d_head=4)
    cache.append(cache.add_sequence(), torch.randn(2, 3, 4), torch.randn(2, 3, 4))
    return paged.paged_attention(torch.randn(1, 2, 1, 4), cache, [0], scale=x)


def _train_with(**kw):
    model = torch.nn.Linear(2, 1)
    batch = (torch.randn(3, 2), torch.randn(3, 1))
    loss = lambda m, b: ((m(b[0]) - b[1]) ** 2).mean()  # noqa: E731
    return train.train_loop(model, [batch], loss, steps=1, progress=False, **kw)


def _float_parameters():
    return _parameters(lambda ann: "float" in ann.split("|"))


def test_every_float_parameter_has_a_call():
    found = _float_parameters() | {("selfattn.exercises.ch02", "soft_lookup", "temperature")}
    missing = found - set(FLOAT_CALLS) - FLOAT_NOT_CALLED
    assert not missing, f"float parameters without a call in FLOAT_CALLS: {sorted(missing)}"
    stale = set(FLOAT_CALLS) - found
    assert not stale, f"FLOAT_CALLS names parameters that are not floats: {sorted(stale)}"


@pytest.mark.parametrize("key", sorted(FLOAT_CALLS), ids=lambda k: f"{k[1]}-{k[2]}")
def test_a_float_parameter_refuses_nan_and_values_outside_its_range(key):
    kind, call = FLOAT_CALLS[key]
    for bad in [NAN, *OUTSIDE[kind]]:
        with pytest.raises((ValueError, TypeError)) as info:
            call(bad)
        assert key[2] in str(info.value), (bad, str(info.value))
