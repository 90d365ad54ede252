"""selfattn.from_transformers against the ``transformers`` models it converts, built offline from
tiny random configs: the same logits (float32 within 1e-5, float64 within 1e-10), the same
greedy tokens from ``generate``, cached and uncached decoding alike, padding masks, refusals.

In float64 ``transformers`` computes its RMSNorms, its RoPE angles and its eager softmax in
float32 whatever the model's dtype; the float64 comparison therefore runs ``transformers`` with
SDPA attention and with those norms and rotary tables computed in float64
(:func:`exact_float64`), which changes no formula.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

transformers = pytest.importorskip("transformers")
import selfattn  # noqa: E402
from selfattn.hf import FAMILIES, from_transformers  # noqa: E402

V = 97  # vocabulary
WINDOW = 4  # sliding window of the local layers (n = 9 goes beyond it)
LENGTHS = (1, 3, 9)
#: DeepSeek-V3 and V3.2's latent attention (and their MoE, which the book refuses).
MLA = dict(
    num_attention_heads=4,
    num_key_value_heads=4,
    q_lora_rank=16,
    kv_lora_rank=12,
    qk_nope_head_dim=8,
    qk_rope_head_dim=4,
    v_head_dim=6,
    moe_intermediate_size=16,
    n_routed_experts=4,
    num_experts_per_tok=2,
    n_group=1,
    topk_group=1,
)
TOP_K = 4  # DeepSeek-V3.2's indexer: each query attends to 4 tokens (n = 9 goes beyond it)
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
#: Where a step runs in float32 in a float64 model, which the float64 comparison cannot undo
#: without rewriting the layer: DiffLlama's lambda in transformers
#: (``torch.sum(..., dtype=torch.float32)``; measured 2e-8), and Qwen3-Next's Gated DeltaNet,
#: float32 inside in transformers and in the book's layer alike (measured 3e-6).
FLOAT64_TOL = {"diffllama": 1e-7, "qwen3_next": 1e-4}
#: Qwen3-Next's Gated DeltaNet keeps its state in float32 whatever the model's dtype, in
#: transformers and in the book's layer (selfattn.delta_net); a prefill of a few tokens and
#: the whole sequence (chunked), or one token at a time, round differently, and four layers of
#: random weights carry that to the logits (about 5e-5 on logits of size 5).
RECURRENT_TOL = {"qwen3_next": 1e-4}


def _configs():
    T = transformers
    small = dict(vocab_size=V, hidden_size=32, intermediate_size=64, max_position_embeddings=64)
    return {
        "gpt2": lambda: T.GPT2LMHeadModel(
            T.GPT2Config(vocab_size=V, n_positions=64, n_embd=32, n_layer=2, n_head=4)
        ),
        "bert": lambda: T.BertForMaskedLM(
            T.BertConfig(num_hidden_layers=2, num_attention_heads=4, **small)
        ),
        "vit": lambda: T.ViTForImageClassification(
            T.ViTConfig(
                image_size=16,
                patch_size=4,
                num_channels=3,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=64,
                num_labels=5,
            )
        ),
        "llama": lambda: T.LlamaForCausalLM(
            T.LlamaConfig(
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, **small
            )
        ),
        "qwen3": lambda: T.Qwen3ForCausalLM(
            T.Qwen3Config(
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=16,
                **small,
            )
        ),
        "gemma2": lambda: T.Gemma2ForCausalLM(
            T.Gemma2Config(
                num_hidden_layers=3,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=16,
                sliding_window=WINDOW,
                query_pre_attn_scalar=16,
                attn_logit_softcapping=2.0,
                final_logit_softcapping=3.0,
                **small,
            )
        ),
        "gpt_oss": lambda: T.GptOssForCausalLM(
            T.GptOssConfig(
                vocab_size=V,
                hidden_size=32,
                intermediate_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=8,
                num_local_experts=4,
                num_experts_per_tok=2,
                sliding_window=WINDOW,
                max_position_embeddings=64,
                rope_parameters={
                    "rope_type": "yarn",
                    "rope_theta": 150000.0,
                    "factor": 4.0,
                    "beta_fast": 32.0,
                    "beta_slow": 1.0,
                    "truncate": False,
                    "original_max_position_embeddings": 16,
                },
            )
        ),
        "deepseek_v3": lambda: T.DeepseekV3ForCausalLM(
            T.DeepseekV3Config(num_hidden_layers=2, first_k_dense_replace=2, **MLA, **small)
        ),
        "deepseek_v32": lambda: T.DeepseekV32ForCausalLM(
            T.DeepseekV32Config(
                num_hidden_layers=2,
                mlp_layer_types=["dense", "dense"],
                index_n_heads=4,
                index_head_dim=8,
                index_topk=TOP_K,
                **MLA,
                **small,
            )
        ),
        "qwen3_next": lambda: T.Qwen3NextForCausalLM(
            T.Qwen3NextConfig(
                num_hidden_layers=4,  # DeltaNet, DeltaNet, DeltaNet, gated attention
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=16,
                linear_num_key_heads=2,
                linear_num_value_heads=4,
                linear_key_head_dim=8,
                linear_value_head_dim=8,
                mlp_only_layers=[0, 1, 2, 3],
                num_experts=4,
                num_experts_per_tok=2,
                moe_intermediate_size=16,
                shared_expert_intermediate_size=16,
                **small,
            )
        ),
        "diffllama": lambda: T.DiffLlamaForCausalLM(
            T.DiffLlamaConfig(
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, **small
            )
        ),
    }


CONFIGS = _configs()
CAUSAL = [f for f in CONFIGS if f not in ("bert", "vit")]


def randomized(model, seed=1):
    """Weights drawn large enough that every part of the model moves the logits (the default
    initialisation, std 0.02, leaves them near zero): norm scales near 1, the rest N(0, 0.15)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower() and p.dim() == 1:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))
    return model


def build(family, dtype=torch.float32):
    torch.manual_seed(0)
    hf = randomized(CONFIGS[family]()).eval()
    hf.config._attn_implementation = "eager"
    if dtype == torch.float64:
        hf = exact_float64(hf.double())
    return hf, from_transformers(hf)


def eager_float64(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kwargs
):
    """``transformers``' eager attention with the softmax in the inputs' dtype (its own
    computes the softmax in float32)."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = query @ key.transpose(2, 3) * scaling
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, float("-inf"))
        else:
            scores = scores + attention_mask[..., : key.shape[-2]]
    weights = torch.softmax(scores, dim=-1)
    return (weights @ value).transpose(1, 2).contiguous(), weights


def _register_eager_float64():
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    AttentionInterface.register("eager_float64", eager_float64)
    ALL_MASK_ATTENTION_FUNCTIONS.register("eager_float64", eager_mask)


def exact_float64(hf):
    """``hf`` (float64) with its float32 steps done in float64: RMSNorms and rotary tables
    recomputed in float64, the eager softmax in float64, the experts without grouped_mm
    (float32 only). No formula changes."""
    if hf.config.model_type == "deepseek_v32":  # applies its top-k mask only for eager/sdpa
        hf.config._attn_implementation = "sdpa"
    elif hf.config.model_type != "gpt_oss":  # gpt-oss's eager softmax keeps the dtype
        _register_eager_float64()
        hf.config._attn_implementation = "eager_float64"
    hf.config._experts_implementation = "eager"
    for module in hf.modules():
        name = type(module).__name__
        if hasattr(module, "scalar_embed_scale"):  # Gemma: sqrt(d) stored in float32
            module.embed_scale.fill_(module.scalar_embed_scale)
        if type(module) is torch.nn.RMSNorm:
            continue  # torch's computes in the input's dtype
        if name.endswith("RMSNorm") and hasattr(module, "weight"):
            eps = getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6))
            offset = 1.0 if ("Gemma" in name or "Qwen3Next" in name) else 0.0

            def forward(self, x, eps=eps, offset=offset):
                x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
                return x * (offset + self.weight)

            module.forward = types.MethodType(forward, module)
        elif name.endswith("RotaryEmbedding") and hasattr(module, "inv_freq"):
            halves = module(torch.zeros(1), torch.zeros(1, 1, dtype=torch.long))[0].shape[-1]
            twice = halves == 2 * module.inv_freq.numel()

            def forward(self, x, position_ids, twice=twice):
                freqs = position_ids[..., None].double() * self.inv_freq.double()
                emb = torch.cat((freqs, freqs), dim=-1) if twice else freqs
                scale = getattr(self, "attention_scaling", 1.0)
                return (emb.cos() * scale).to(x.dtype), (emb.sin() * scale).to(x.dtype)

            module.forward = types.MethodType(forward, module)
    return hf


def largest_difference(family, ours, hf, x):
    """The largest logit difference, and on failure the first layer whose output differs."""
    with torch.no_grad():
        if family == "vit":
            return (ours(x) - hf(pixel_values=x).logits).abs().max().item()
        return (ours(x) - hf(x).logits).abs().max().item()


def first_differing_layer(family, ours, hf, x, tol):
    """Name the first block whose output differs from ``transformers``' by more than ``tol``
    (``transformers``' ``hidden_states``: the embeddings, then each layer's output, the last
    one with or without the final norm)."""
    with torch.no_grad():
        if family == "vit":
            hidden = hf(pixel_values=x, output_hidden_states=True).hidden_states
            h, blocks = ours.embed(x), ours.encoder.blocks
            run = lambda block, h: block(h)  # noqa: E731
        else:
            hidden = hf(x, output_hidden_states=True).hidden_states
            if family == "gpt2":
                h, blocks = ours.embed(x), ours.decoder.blocks
                run = lambda block, h: block(h, mask="causal")  # noqa: E731
            elif family == "bert":
                positions = torch.arange(x.shape[1])
                h = ours.ln(ours.tok(x) + ours.segment(torch.zeros_like(x)) + ours.pos(positions))
                blocks = ours.blocks
                run = lambda block, h: block(h)  # noqa: E731
            else:
                h, blocks = ours.embed(x), ours.blocks
                if ours.embed_scale is not None:
                    h = h * torch.tensor(ours.embed_scale, dtype=h.dtype)
                run = lambda block, h: block(h, mask="causal")  # noqa: E731
        final = {"gpt2": getattr(getattr(ours, "decoder", None), "ln_f", None)}.get(family)
        final = getattr(getattr(ours, "encoder", None), "ln_f", None) if family == "vit" else final
        final = getattr(ours, "final_norm", None) if final is None else final
        for i, block in enumerate(blocks):
            h = run(block, h)
            if i + 1 < len(hidden):
                diff = (h - hidden[i + 1]).abs().max().item()
                if i + 2 == len(hidden) and final is not None:  # maybe after the final norm
                    diff = min(diff, (final(h) - hidden[i + 1]).abs().max().item())
                if diff > tol:
                    name = type(getattr(block, "mixer", getattr(block, "attn", block))).__name__
                    return f"block {i} ({name}): {diff:.3g}"
    return "no single block (the final norm or the head)"


def inputs(family, n, dtype, seed=2):
    g = torch.Generator().manual_seed(seed + (n or 0))
    if family == "vit":
        return torch.randn(2, 3, 16, 16, generator=g, dtype=dtype)
    return torch.randint(0, V, (2, n), generator=g)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("family", list(CONFIGS))
def test_same_logits(family, dtype):
    hf, ours = build(family, dtype)
    assert ours.training is False
    assert next(ours.parameters()).dtype == dtype
    tol = TOL[dtype] if dtype == torch.float32 else FLOAT64_TOL.get(family, TOL[dtype])
    for n in LENGTHS if family != "vit" else (None,):
        x = inputs(family, n, dtype)
        diff = largest_difference(family, ours, hf, x)
        if diff > tol:
            where = first_differing_layer(family, ours, hf, x, tol)
            pytest.fail(
                f"{family} {dtype} n={n}: largest logit difference {diff:.3g} > {tol:g}; "
                f"first differing layer: {where}"
            )


@pytest.mark.parametrize("family", [f for f in CONFIGS if f != "vit"])
def test_padding_mask(family):
    """Left padding (causal families) or right padding (BERT): the real tokens' logits agree
    with ``transformers`` given the same ``attention_mask``."""
    hf, ours = build(family)
    ids = inputs(family, 7, torch.float32)
    attention = torch.ones_like(ids)
    if family == "bert":
        attention[1, 4:] = 0  # right padding
    else:
        attention[1, :3] = 0  # left padding
    real = attention.bool()
    with torch.no_grad():
        want = hf(ids, attention_mask=attention).logits
        if family == "gpt2":
            got = ours(ids)  # MiniGPT takes no padding: compare the unpadded row only
            real = torch.zeros_like(real)
            real[0] = True
        else:
            got = ours(ids, attention_mask=attention)
    diff = (got - want)[real].abs().max().item()
    tol = RECURRENT_TOL.get(family, TOL[torch.float32])
    assert diff < tol, f"{family}: padded logits differ by {diff:.3g}"


@pytest.mark.parametrize("family", CAUSAL)
def test_generate_matches_transformers(family):
    hf, ours = build(family)
    ids = inputs(family, 3, torch.float32)
    k = 8  # the sequence grows past the sliding window
    # No end-of-sequence token: transformers would stop there (or, with min_new_tokens, forbid
    # it), and the book's generate decodes exactly k tokens.
    hf.generation_config.eos_token_id = None
    with torch.no_grad():
        want = hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=k,
            pad_token_id=0,
        )
    got = ours.generate(ids, max_new_tokens=k)
    assert torch.equal(got, want), f"{family}: {got.tolist()} != {want.tolist()}"


@pytest.mark.parametrize("family", [f for f in CAUSAL if f != "gpt2"])
def test_cached_and_uncached_decoding_agree(family):
    _, ours = build(family)
    ids = inputs(family, 3, torch.float32)
    seq_c, logits_c = ours.generate(ids, 7, return_logits=True)
    seq_u, logits_u = ours.generate(ids, 7, use_cache=False, return_logits=True)
    assert torch.equal(seq_c, seq_u)
    diff = (logits_c - logits_u).abs().max().item()
    tol = RECURRENT_TOL.get(family, TOL[torch.float32])
    assert diff < tol, f"{family}: cached and uncached differ by {diff:.3g}"


def test_unknown_family_is_refused_naming_the_supported_ones():
    T = transformers
    hf = T.MistralForCausalLM(
        T.MistralConfig(
            vocab_size=V,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    )
    with pytest.raises(ValueError, match="mistral") as err:
        from_transformers(hf)
    for family in FAMILIES:
        assert family in str(err.value)
    with pytest.raises(TypeError, match="transformers model"):
        from_transformers(torch.nn.Linear(2, 2))
    bare = T.BertModel(
        T.BertConfig(
            vocab_size=V,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=4,
            intermediate_size=64,
        )
    )
    with pytest.raises(ValueError, match="BertForMaskedLM"):
        from_transformers(bare)


def test_deepseek_moe_layers_are_refused():
    T = transformers
    small = dict(vocab_size=V, hidden_size=32, intermediate_size=64)
    hf = T.DeepseekV3ForCausalLM(
        T.DeepseekV3Config(num_hidden_layers=2, first_k_dense_replace=1, **MLA, **small)
    )
    with pytest.raises(ValueError, match="first_k_dense_replace"):
        from_transformers(hf)
    hf = T.DeepseekV32ForCausalLM(
        T.DeepseekV32Config(
            num_hidden_layers=2,
            mlp_layer_types=["dense", "sparse"],
            index_n_heads=4,
            index_head_dim=8,
            index_topk=TOP_K,
            **MLA,
            **small,
        )
    )
    with pytest.raises(ValueError, match="mlp_layer_types"):
        from_transformers(hf)


def test_built_from_the_books_layers():
    from selfattn.latent import MultiHeadLatentAttention
    from selfattn.models.llm import TopKMoE

    _, gemma = build("gemma2")
    windows = [block.mixer.window for block in gemma.blocks]
    assert windows == [WINDOW, None, WINDOW]  # alternating local and global
    assert all(isinstance(b.mixer, selfattn.MultiHeadAttention) for b in gemma.blocks)
    _, oss = build("gpt_oss")
    assert all(isinstance(b.mlp, TopKMoE) and b.mixer.sink_logits is not None for b in oss.blocks)
    _, ds = build("deepseek_v3")
    assert all(isinstance(b.mixer, MultiHeadLatentAttention) for b in ds.blocks)


def test_import_selfattn_does_not_import_transformers():
    import subprocess

    code = (
        "import sys, selfattn, selfattn.models.llm, selfattn.norms; "
        "assert 'transformers' not in sys.modules, 'transformers was imported'; "
        "import selfattn.hf; assert 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_selfattn_exports_the_bridge_lazily():
    assert selfattn.from_transformers is from_transformers
    assert "from_transformers" in selfattn.__all__


def test_hf_extra_floor_is_the_tested_pin():
    """pyproject.toml's extra ``hf`` declares ``transformers>=`` the version requirements.txt
    pins, which is the one these tests run (so the floor is tested, as the other floors)."""
    import re

    tomllib = pytest.importorskip("tomllib")
    from tools.book import ROOT

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["hf"]
    (floor,) = [re.fullmatch(r"transformers>=([0-9.]+)", d)[1] for d in extra]
    pins = re.findall(r"^transformers==([0-9.]+)$", (ROOT / "requirements.txt").read_text(), re.M)
    assert pins, "requirements.txt must pin transformers"

    def release(version):
        return tuple(int(x) for x in version.split(".")) + (0,) * 3

    assert release(floor)[:3] == release(pins[0])[:3], (floor, pins[0])
    assert transformers.__version__ == pins[0]


def test_load_pretrained_offline_prints_one_line(monkeypatch, capsys, tmp_path):
    """The "try it on Colab" helper: offline (or without transformers) one line, and None."""
    from selfattn.hf import load_pretrained

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache: nothing to load offline
    assert load_pretrained("gpt2") is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "skipped" in out
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails
    assert load_pretrained("gpt2") is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "not installed" in out


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen3_next"])
def test_a_wrong_weight_is_found_in_its_layer(family):
    """The failure message's diagnosis: a weight changed in block 1 is reported there."""
    hf, ours = build(family)
    if family == "gpt2":
        norm = ours.decoder.blocks[1].ln2
    else:
        norm = ours.blocks[1].mlp_norm
    with torch.no_grad():
        norm.weight.add_(0.5)
    x = inputs(family, 5, torch.float32)
    assert largest_difference(family, ours, hf, x) > 1e-3
    assert first_differing_layer(family, ours, hf, x, 1e-4).startswith("block 1 ")


def test_deepseek_v32_attends_to_the_indexers_top_k_only():
    """The comparison at n = 9 exercises the selection: attending to every earlier token
    instead of the indexer's top 4 changes the logits by far more than the tolerance."""
    hf, ours = build("deepseek_v32")
    x = inputs("deepseek_v32", 9, torch.float32)
    assert largest_difference("deepseek_v32", ours, hf, x) < TOL[torch.float32]
    for block in ours.blocks:
        block.mixer.top_k = 9
    assert largest_difference("deepseek_v32", ours, hf, x) > 1e-2
