"""The bridge to Hugging Face ``transformers``: the models readers load, rebuilt from the book's
layers (chapters 9 and 11).

:func:`from_transformers` takes a ``transformers`` model and returns the book's model holding the
same weights, with the same logits (``tests/test_from_transformers.py``: within 1e-5 in float32
on random tiny configs). Each family is a converter in :data:`FAMILIES`, keyed by
``config.model_type``:

=============  ==================================  =====================================
model_type     ``transformers`` class              the book's model
=============  ==================================  =====================================
gpt2           ``GPT2LMHeadModel``                 :class:`GreedyMiniGPT` (a MiniGPT)
bert           ``BertForMaskedLM``                 :class:`~selfattn.models.bert.BertMLM`
vit            ``ViTForImageClassification``       :class:`~selfattn.models.transformer.MiniViT`
llama          ``LlamaForCausalLM``                :class:`~selfattn.models.llm.DecoderLM`
qwen3          ``Qwen3ForCausalLM``                ``DecoderLM`` (QK-norm)
gemma2         ``Gemma2ForCausalLM``               ``DecoderLM`` (soft-caps, local/global)
gpt_oss        ``GptOssForCausalLM``               ``DecoderLM`` (sinks, YaRN, top-k MoE)
deepseek_v3    ``DeepseekV3ForCausalLM`` (dense)   ``DecoderLM`` with latent attention
deepseek_v32   ``DeepseekV32ForCausalLM`` (dense)  ``DecoderLM``, latent attention + DSA indexer
qwen3_next     ``Qwen3NextForCausalLM`` (dense)    ``DecoderLM``, gated attention + DeltaNet
diffllama      ``DiffLlamaForCausalLM``            ``DecoderLM`` with differential attention
=============  ==================================  =====================================

RoPE: the rotation speeds are copied from the model's ``rotary_emb.inv_freq`` buffer and its
``attention_scaling`` (YaRN's factor) rather than recomputed, so that every RoPE variant a
config names is reproduced exactly; ``transformers`` rotates in the "half" layout.

``transformers`` is imported only here, and only when a function of this module is called:
``import selfattn`` does not need it (``pip install selfattn[hf]`` installs it).
"""

from __future__ import annotations

import torch
from torch import nn

from ._checks import require_number
from .models.transformer import MiniGPT, copy_stacked, copy_weights, sizes_of, stacked_linear
from .multihead import MultiHeadAttention
from .norms import RMSNorm
from .positional import RotaryEmbedding, apply_rope

__all__ = ["from_transformers", "FAMILIES", "load_pretrained", "CopiedRotary", "GreedyMiniGPT"]


class CopiedRotary(RotaryEmbedding):
    """RoPE with given rotation speeds: ``transformers``' ``inv_freq`` and ``attention_scaling``.

    The "half" layout by default (``layout="interleaved"`` for DeepSeek's
    ``rope_interleave``); ``inv_freq`` ``(rotary_dim / 2,)``; queries and keys are multiplied by
    ``attention_scaling`` after the rotation (YaRN's ``0.1 ln s + 1``; 1 otherwise).
    """

    def __init__(
        self,
        d_head: int,
        inv_freq: torch.Tensor,
        attention_scaling: float = 1.0,
        *,
        layout: str = "half",
    ):
        rotary_dim = 2 * inv_freq.numel()
        super().__init__(d_head, layout=layout, rotary_fraction=rotary_dim / d_head)
        if self.rotary_dim != rotary_dim:
            raise ValueError(f"inv_freq of {inv_freq.numel()} pairs does not fit d_head={d_head}")
        self.register_buffer("inv_freq", inv_freq.detach().clone(), persistent=False)
        self.attention_scaling = require_number(
            attention_scaling, "attention_scaling", positive=True
        )

    def frequencies(self) -> torch.Tensor:
        return self.inv_freq.double()

    def forward(self, q, k, q_positions=None, k_positions=None):
        n_q, n_k = q.shape[-2], k.shape[-2]
        if k_positions is None:
            k_positions = torch.arange(n_k, device=k.device)
        if q_positions is None:
            q_positions = torch.arange(n_k - n_q, n_k, device=q.device)
        kwargs = dict(
            layout=self.layout, rotary_dim=self.rotary_dim, frequencies=self.frequencies()
        )
        q, k = apply_rope(q, q_positions, **kwargs), apply_rope(k, k_positions, **kwargs)
        if self.attention_scaling != 1.0:
            q, k = q * self.attention_scaling, k * self.attention_scaling
        return q, k


class GreedyMiniGPT(MiniGPT):
    """Chapter 9's :class:`~selfattn.models.transformer.MiniGPT` as ``from_transformers``
    returns GPT-2: ``generate`` decodes greedily unless ``greedy=False`` is passed (as every
    converted causal LM does; chapter 9's model samples by default)."""

    def generate(self, ids, max_new_tokens, **kwargs):
        kwargs.setdefault("greedy", True)
        return super().generate(ids, max_new_tokens, **kwargs)


# ---------------------------------------------------------------------------- helpers


def _norm_eps(src: nn.Module) -> float:
    """An RMSNorm's epsilon, whichever name its class gives it."""
    eps = getattr(src, "variance_epsilon", None)
    return getattr(src, "eps", 1e-6) if eps is None else eps


def _rms(src: nn.Module, *, unit_offset: bool = False) -> RMSNorm:
    norm = RMSNorm(src.weight.numel(), eps=_norm_eps(src), unit_offset=unit_offset)
    with torch.no_grad():
        norm.weight.copy_(src.weight)
    return norm


def _rotary(hf_model, d_head: int, layout: str = "half") -> CopiedRotary:
    rotary = hf_model.model.rotary_emb
    scaling = getattr(rotary, "attention_scaling", 1.0)
    return CopiedRotary(d_head, rotary.inv_freq, scaling, layout=layout)


def _rope_and_act(hf_model) -> tuple[CopiedRotary, str]:
    """A decoder's RoPE over its head width, and its MLP's activation (``hidden_act``)."""
    config = hf_model.config
    return _rotary(hf_model, _head_dim(config)), _act(config.hidden_act)


_ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
}


def _act(name: str) -> str:
    if name not in _ACTIVATIONS:
        raise ValueError(f"activation {name!r} is not one the book has: {sorted(_ACTIVATIONS)}")
    return _ACTIVATIONS[name]


def _head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def _window(config, i: int) -> int | None:
    types = getattr(config, "layer_types", None)
    if types and types[i] == "sliding_attention":
        return config.sliding_window
    return None


def _attention(config, src, rope, *, window=None, **options) -> MultiHeadAttention:
    """A :class:`MultiHeadAttention` holding ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``."""
    d_head = _head_dim(config)
    bias = any(
        getattr(getattr(src, name), "bias", None) is not None
        for name in ("q_proj", "k_proj", "v_proj", "o_proj")
    )
    mha = MultiHeadAttention(
        config.hidden_size,
        config.num_attention_heads,
        num_kv_heads=config.num_key_value_heads,
        d_head=d_head,
        bias=bias,
        rope=rope,
        window=window,
        **options,
    )
    copy_weights(mha.qkv, stacked_linear([src.q_proj, src.k_proj, src.v_proj], bias=bias))
    copy_weights(mha.out, src.o_proj)
    return mha


def _mlp(config, src, act: str):
    from .models.llm import GatedMLP

    bias = src.gate_proj.bias is not None
    mlp = GatedMLP(config.hidden_size, src.gate_proj.out_features, act=act, bias=bias)
    copy_weights(mlp.gate, src.gate_proj)
    copy_weights(mlp.up, src.up_proj)
    copy_weights(mlp.down, src.down_proj)
    return mlp


def _with_attention(hf_model, rope, **options):
    """Each decoder layer of ``hf_model`` with its ``self_attn`` converted by
    :func:`_attention` (a sliding window where ``layer_types`` says so), in order."""
    config = hf_model.config
    for i, layer in enumerate(hf_model.model.layers):
        yield (
            layer,
            _attention(config, layer.self_attn, rope, window=_window(config, i), **options),
        )


def _block(mixer: nn.Module, config, layer, act: str, *, unit_offset: bool = False):
    """A pre-norm decoder block: ``mixer``, then the layer's gated MLP, with the layer's two
    RMSNorms (``input_layernorm``, ``post_attention_layernorm``)."""
    from .models.llm import DecoderBlock

    return DecoderBlock(
        mixer,
        _mlp(config, layer.mlp, act),
        _rms(layer.input_layernorm, unit_offset=unit_offset),
        _rms(layer.post_attention_layernorm, unit_offset=unit_offset),
    )


def _lm(hf_model, blocks, final_norm, *, embed_scale=None, final_softcap=None):
    from .models.llm import DecoderLM

    config = hf_model.config
    src = hf_model.model.embed_tokens
    embed = nn.Embedding(src.num_embeddings, src.embedding_dim)
    head = nn.Linear(config.hidden_size, src.num_embeddings, bias=False)
    with torch.no_grad():
        embed.weight.copy_(src.weight)
        head.weight.copy_(hf_model.lm_head.weight)
    model = DecoderLM(
        embed,
        blocks,
        final_norm,
        head,
        embed_scale=embed_scale,
        final_softcap=final_softcap,
    )
    return model


# ---------------------------------------------------------------------------- families


def _llama_like(hf_model, *, qk_norm: bool = False):
    config = hf_model.config
    rope, act = _rope_and_act(hf_model)
    blocks = []
    for layer, attn in _with_attention(
        hf_model, rope, qk_norm=qk_norm, norm_eps=config.rms_norm_eps
    ):
        if qk_norm:
            with torch.no_grad():
                attn.q_norm.weight.copy_(layer.self_attn.q_norm.weight)
                attn.k_norm.weight.copy_(layer.self_attn.k_norm.weight)
        blocks.append(_block(attn, config, layer, act))
    return _lm(hf_model, blocks, _rms(hf_model.model.norm))


def _llama(hf_model):
    return _llama_like(hf_model)


def _qwen3(hf_model):
    return _llama_like(hf_model, qk_norm=True)


def _gemma2(hf_model):
    from .models.llm import DecoderBlock

    config = hf_model.config
    rope = _rotary(hf_model, _head_dim(config))
    act = _act(config.hidden_activation)
    blocks = []
    for layer, attn in _with_attention(
        hf_model,
        rope,
        scale=config.query_pre_attn_scalar**-0.5,
        softcap=config.attn_logit_softcapping,
    ):
        blocks.append(
            DecoderBlock(
                attn,
                _mlp(config, layer.mlp, act),
                _rms(layer.input_layernorm, unit_offset=True),
                _rms(layer.pre_feedforward_layernorm, unit_offset=True),
                post_mix_norm=_rms(layer.post_attention_layernorm, unit_offset=True),
                post_mlp_norm=_rms(layer.post_feedforward_layernorm, unit_offset=True),
            )
        )
    return _lm(
        hf_model,
        blocks,
        _rms(hf_model.model.norm, unit_offset=True),
        embed_scale=config.hidden_size**0.5,
        final_softcap=config.final_logit_softcapping,
    )


def _gpt_oss(hf_model):
    from .models.llm import DecoderBlock, TopKMoE

    config = hf_model.config
    rope = _rotary(hf_model, _head_dim(config))
    blocks = []
    for layer, attn in _with_attention(hf_model, rope, sinks=True):
        with torch.no_grad():
            attn.sink_logits.copy_(layer.self_attn.sinks)
        experts = layer.mlp.experts
        moe = TopKMoE(
            config.hidden_size,
            config.intermediate_size,
            config.num_local_experts,
            config.num_experts_per_tok,
            act="gpt_oss",
            alpha=experts.alpha,
            limit=experts.limit,
        )
        with torch.no_grad():
            moe.router.weight.copy_(layer.mlp.router.weight)
            moe.router.bias.copy_(layer.mlp.router.bias)
            # gate and up are interleaved columns of gate_up_proj (E, d, 2 f)
            moe.gate_w.copy_(experts.gate_up_proj[..., ::2])
            moe.up_w.copy_(experts.gate_up_proj[..., 1::2])
            moe.gate_b.copy_(experts.gate_up_proj_bias[..., ::2])
            moe.up_b.copy_(experts.gate_up_proj_bias[..., 1::2])
            moe.down_w.copy_(experts.down_proj)
            moe.down_b.copy_(experts.down_proj_bias)
        blocks.append(
            DecoderBlock(
                attn, moe, _rms(layer.input_layernorm), _rms(layer.post_attention_layernorm)
            )
        )
    return _lm(hf_model, blocks, _rms(hf_model.model.norm))


def _require_dense_deepseek(config, indexed: bool) -> None:
    """The book converts DeepSeek-V3 and V3.2 with dense layers only."""
    types = getattr(config, "mlp_layer_types", None)
    if indexed and types is not None and "sparse" in types:
        raise ValueError(
            "the book converts DeepSeek-V3.2 with dense layers only (mlp_layer_types all "
            f"'dense'), got mlp_layer_types={types}: its MoE layers (shared experts, grouped "
            "routing) are not the book's TopKMoE"
        )
    if not indexed and config.first_k_dense_replace < config.num_hidden_layers:
        raise ValueError(
            "the book converts DeepSeek-V3 with dense layers only (first_k_dense_replace = "
            f"num_hidden_layers = {config.num_hidden_layers}), got first_k_dense_replace="
            f"{config.first_k_dense_replace}: its MoE layers (shared experts, grouped routing) "
            "are not the book's TopKMoE"
        )


def _latent_attention(config, src, rope: CopiedRotary) -> nn.Module:
    """One DeepSeek MLA layer as the book's MultiHeadLatentAttention, weights copied."""
    from .latent import MultiHeadLatentAttention

    mla = MultiHeadLatentAttention(
        config.hidden_size,
        config.num_attention_heads,
        config.kv_lora_rank,
        config.qk_rope_head_dim,
        config.q_lora_rank,
        d_nope=config.qk_nope_head_dim,
        d_v=config.v_head_dim,
        scale=src.scaling,
        bias=bool(config.attention_bias),
        norm_eps=config.rms_norm_eps,
    )
    mla.rope = rope
    if config.q_lora_rank is None:
        copy_weights(mla.q_proj, src.q_proj)
    else:
        copy_weights(mla.q_a, src.q_a_proj)
        copy_weights(mla.q_b, src.q_b_proj)
        _copy_norm(mla.q_norm, src.q_a_layernorm)
    copy_weights(mla.kv_a, src.kv_a_proj_with_mqa)
    _copy_norm(mla.kv_norm, src.kv_a_layernorm)
    copy_weights(mla.kv_b, src.kv_b_proj)
    copy_weights(mla.out, src.o_proj)
    return mla


def _deepseek_v3(hf_model, *, indexed: bool = False):
    config = hf_model.config
    _require_dense_deepseek(config, indexed)
    # DeepSeek-V3.2's MLA always rotates interleaved pairs, its indexer the halves.
    interleaved = indexed or getattr(config, "rope_interleave", False)
    rope = _rotary(hf_model, config.qk_rope_head_dim, "interleaved" if interleaved else "half")
    act = _act(config.hidden_act)
    blocks = []
    for layer in hf_model.model.layers:
        src = layer.self_attn
        mla = _latent_attention(config, src, rope)
        if indexed:
            mla = _IndexedLatentAttention(
                mla, src.indexer, _rotary(hf_model, config.qk_rope_head_dim)
            )
        blocks.append(_block(mla, config, layer, act))
    return _lm(hf_model, blocks, _rms(hf_model.model.norm))


def _deepseek_v32(hf_model):
    return _deepseek_v3(hf_model, indexed=True)


class _IndexedLatentAttention(nn.Module):
    """DeepSeek-V3.2's attention: latent attention (``mla``) over the tokens a lightning
    indexer selects (:func:`~selfattn.learned_sparse.lightning_indexer_scores`, its top
    ``top_k`` per query). The indexer reads ``mla``'s normalised low-rank query (``wq_b``),
    its own key (``wk``, a LayerNorm ``k_norm``) and per-head weights (``weights_proj``), with
    RoPE in the "half" layout on the first ``rope_dim`` of its ``d_I``; its scores are float32
    whatever the dtype, as in ``transformers``."""

    def __init__(self, mla: nn.Module, src: nn.Module, rope: CopiedRotary):
        super().__init__()
        self.mla, self.rope = mla, rope
        self.top_k, self.index_heads, self.index_dim = src.index_topk, src.n_heads, src.head_dim
        self.wq_b = nn.Linear(src.wq_b.in_features, src.wq_b.out_features, bias=False)
        self.wk = nn.Linear(src.wk.in_features, src.wk.out_features, bias=False)
        self.weights_proj = nn.Linear(src.hidden_size, src.n_heads, bias=False)
        self.k_norm = nn.LayerNorm(src.head_dim, eps=src.k_norm.eps)
        for name in ("wq_b", "wk", "weights_proj"):
            copy_weights(getattr(self, name), getattr(src, name))
        self.k_norm.load_state_dict(src.k_norm.state_dict())

    def new_cache(self):
        """The latent attention's cache, with room for the indexer's keys."""
        cache = self.mla.new_cache()
        cache.index_k = None
        return cache

    def _rotated(self, x, start):
        r = self.rope.rotary_dim
        positions = torch.arange(start, start + x.shape[-2], device=x.device)
        rot, _ = self.rope(x[..., :r], x[..., :r], positions, positions)
        return torch.cat([rot, x[..., r:]], dim=-1)

    def forward(self, x: torch.Tensor, *, mask=None, cache=None) -> torch.Tensor:
        """``x`` ``(B, n, d_model)``; ``mask`` ``"causal"`` or bool ``(B, 1, n, m)``."""
        from .learned_sparse import lightning_indexer_scores

        bsz, n, _ = x.shape
        start = 0 if cache is None else len(cache)
        m = start + n
        if isinstance(mask, str) or mask is None:
            keys = torch.arange(m, device=x.device)
            mask = (keys[None, :] <= torch.arange(start, m, device=x.device)[:, None])[None, None]
        q_resid = self.mla.q_norm(self.mla.q_a(x))
        qi = self.wq_b(q_resid).view(bsz, n, self.index_heads, self.index_dim)
        qi = self._rotated(qi.transpose(1, 2), start).transpose(1, 2)  # (B, n, H_I, d_I)
        ki = self._rotated(self.k_norm(self.wk(x)), start)  # (B, n, d_I)
        if cache is not None:
            if cache.index_k is not None:
                ki = torch.cat([cache.index_k, ki], dim=1)
            cache.index_k = ki
        w = self.weights_proj(x).float() * self.index_heads**-0.5
        scores = lightning_indexer_scores(qi, ki, w, mask[:, 0])  # (B, n, m)
        top = scores.topk(min(self.top_k, m), dim=-1).indices
        chosen = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, top, True)
        return self.mla(x, mask=mask & chosen[:, None], cache=cache)


def _copy_norm(dst: nn.Module, src: nn.Module) -> None:
    """An RMSNorm's weight and epsilon (``dst`` the book's or torch's ``nn.RMSNorm``)."""
    eps = _norm_eps(src)
    with torch.no_grad():
        dst.weight.copy_(src.weight)
    dst.eps = eps


def _diffllama(hf_model):
    from .differential import DifferentialAttention

    config = hf_model.config
    rope, act = _rope_and_act(hf_model)
    blocks = []
    for i, layer in enumerate(hf_model.model.layers):
        src = layer.self_attn
        attn = DifferentialAttention(
            config.hidden_size,
            config.num_attention_heads,
            num_kv_heads=config.num_key_value_heads,
            d_head=rope.d_head,
            layer_index=i,
            rope=rope,
            bias=src.q_proj.bias is not None,
            norm_eps=config.rms_norm_eps,
        )
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            copy_weights(getattr(attn, name), getattr(src, name))
        with torch.no_grad():
            for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
                getattr(attn, name).copy_(getattr(src, name))
        attn.lambda_init = float(src.lambda_init)
        blocks.append(_block(attn, config, layer, act))
    return _lm(hf_model, blocks, _rms(hf_model.model.norm))


def _qwen3_next_delta(config, src) -> nn.Module:
    """One Qwen3-Next linear-attention layer as the book's gated DeltaNet."""
    from .delta_net import GatedDeltaNet
    from .models.llm import RecurrentMixer

    net = GatedDeltaNet(
        config.hidden_size,
        config.linear_num_key_heads,
        head_k_dim=config.linear_key_head_dim,
        head_v_dim=config.linear_value_head_dim,
        num_v_heads=config.linear_num_value_heads,
        conv_kernel=config.linear_conv_kernel_dim,
        eps=config.rms_norm_eps,
    )
    net.load_state_dict(src.state_dict())
    return RecurrentMixer(net)


def _qwen3_next_attention(config, src, rope, d_head: int) -> MultiHeadAttention:
    """One Qwen3-Next full-attention layer: gated output, q/k norms scaled by 1 + weight."""
    h = config.num_attention_heads
    mixer = MultiHeadAttention(
        config.hidden_size,
        h,
        num_kv_heads=config.num_key_value_heads,
        d_head=d_head,
        bias=src.q_proj.bias is not None,
        rope=rope,
        qk_norm=True,
        norm_eps=config.rms_norm_eps,
        gate=True,
    )
    # q_proj holds [query | gate] per head: (h, 2 d_head, d) rows
    q_rows = src.q_proj.weight.view(h, 2, d_head, -1)
    with torch.no_grad():
        mixer.qkv.weight.copy_(
            torch.cat(
                [
                    q_rows[:, 0].reshape(h * d_head, -1),
                    src.k_proj.weight,
                    src.v_proj.weight,
                ]
            )
        )
        mixer.gate.weight.copy_(q_rows[:, 1].reshape(h * d_head, -1))
        if src.q_proj.bias is not None:
            q_bias = src.q_proj.bias.view(h, 2, d_head)
            mixer.qkv.bias.copy_(
                torch.cat([q_bias[:, 0].reshape(-1), src.k_proj.bias, src.v_proj.bias])
            )
            mixer.gate.bias.copy_(q_bias[:, 1].reshape(-1))
        # Qwen3-Next's norms scale by 1 + weight
        mixer.q_norm.weight.copy_(1.0 + src.q_norm.weight)
        mixer.k_norm.weight.copy_(1.0 + src.k_norm.weight)
    copy_weights(mixer.out, src.o_proj)
    return mixer


def _qwen3_next(hf_model):
    config = hf_model.config
    rope, act = _rope_and_act(hf_model)
    blocks = []
    for i, layer in enumerate(hf_model.model.layers):
        if not hasattr(layer.mlp, "gate_proj"):
            raise ValueError(
                "the book converts Qwen3-Next with dense MLP layers (mlp_only_layers = every "
                f"layer, or num_experts = 0); layer {i} is a mixture of experts"
            )
        if config.layer_types[i] == "linear_attention":
            mixer = _qwen3_next_delta(config, layer.linear_attn)
        else:
            mixer = _qwen3_next_attention(config, layer.self_attn, rope, rope.d_head)
        blocks.append(_block(mixer, config, layer, act, unit_offset=True))
    return _lm(hf_model, blocks, _rms(hf_model.model.norm, unit_offset=True))


def _gpt2(hf_model):
    config = hf_model.config
    if config.n_inner not in (None, 4 * config.n_embd):
        raise ValueError(f"MiniGPT's MLP is 4 d wide; this GPT-2 has n_inner={config.n_inner}")
    model = GreedyMiniGPT(
        config.vocab_size,
        **sizes_of(config),  # GPT2Config maps hidden_size to n_embd, ...
        max_len=config.n_positions,
    )
    tr = hf_model.transformer
    with torch.no_grad():
        model.embed.tok.weight.copy_(tr.wte.weight)
        model.embed.pos.weight.copy_(tr.wpe.weight)
        for block, src in zip(model.decoder.blocks, tr.h):
            _layer_norm(block.ln1, src.ln_1)
            _layer_norm(block.ln2, src.ln_2)
            # GPT-2's Conv1D stores weights (in, out): transpose into Linear's (out, in)
            block.attn.qkv.weight.copy_(src.attn.c_attn.weight.T)
            block.attn.qkv.bias.copy_(src.attn.c_attn.bias)
            block.attn.out.weight.copy_(src.attn.c_proj.weight.T)
            block.attn.out.bias.copy_(src.attn.c_proj.bias)
            block.mlp.fc.weight.copy_(src.mlp.c_fc.weight.T)
            block.mlp.fc.bias.copy_(src.mlp.c_fc.bias)
            block.mlp.proj.weight.copy_(src.mlp.c_proj.weight.T)
            block.mlp.proj.bias.copy_(src.mlp.c_proj.bias)
            block.mlp.approximate = "tanh" if config.activation_function != "gelu" else "none"
        _layer_norm(model.decoder.ln_f, tr.ln_f)
        model.head.weight.copy_(hf_model.lm_head.weight)  # tied to wte in GPT-2
        model.head.bias.zero_()  # GPT-2's head has no bias
    return model


def _layer_norm(dst: nn.LayerNorm, src: nn.LayerNorm) -> None:
    with torch.no_grad():
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)
    dst.eps = src.eps


def _vit(hf_model):
    from .models.transformer import MLP, MiniViT

    config = hf_model.config
    model = MiniViT(
        config.num_labels,
        image_size=config.image_size,
        patch=config.patch_size,
        channels=config.num_channels,
        **sizes_of(config),
    )
    vit = hf_model.vit
    emb = vit.embeddings
    c, p, d = config.num_channels, config.patch_size, config.hidden_size
    with torch.no_grad():
        # Conv2d weight (d, C, p, p): patchify flattens a patch as (C, p, p), the same order
        model.embed.proj.weight.copy_(emb.patch_embeddings.projection.weight.reshape(d, c * p * p))
        model.embed.proj.bias.copy_(emb.patch_embeddings.projection.bias)
        model.embed.cls.copy_(emb.cls_token)
        model.embed.pos.weight.copy_(emb.position_embeddings[0])
        for block, src in zip(model.encoder.blocks, vit.layers):
            _layer_norm(block.ln1, src.layernorm_before)
            _layer_norm(block.ln2, src.layernorm_after)
            a = src.attention
            copy_stacked(block.attn.qkv, [a.q_proj, a.k_proj, a.v_proj])
            copy_weights(block.attn.out, a.o_proj)
            if src.mlp.fc1.out_features != block.mlp.fc.out_features:
                block.mlp = MLP(d, src.mlp.fc1.out_features)
            copy_weights(block.mlp.fc, src.mlp.fc1)
            copy_weights(block.mlp.proj, src.mlp.fc2)
            block.mlp.approximate = _approximate(config.hidden_act)
        _layer_norm(model.encoder.ln_f, vit.layernorm)
        copy_weights(model.head, hf_model.classifier)
    return model


def _approximate(act: str) -> str:
    kind = _act(act)
    if kind == "silu":
        raise ValueError(f"the book's MLP is GELU; this model uses {act!r}")
    return "tanh" if kind == "gelu_tanh" else "none"


def _bert(hf_model):
    from .models.bert import BertMLM

    return BertMLM.from_transformers(hf_model)


#: The families :func:`from_transformers` converts: ``config.model_type`` -> converter.
FAMILIES = {
    "gpt2": _gpt2,
    "bert": _bert,
    "vit": _vit,
    "llama": _llama,
    "qwen3": _qwen3,
    "gemma2": _gemma2,
    "gpt_oss": _gpt_oss,
    "deepseek_v3": _deepseek_v3,
    "deepseek_v32": _deepseek_v32,
    "diffllama": _diffllama,
    "qwen3_next": _qwen3_next,
}


#: The head each family's model must have, and the class that has it.
_HEADS = {
    "gpt2": ("lm_head", "GPT2LMHeadModel"),
    "bert": ("cls", "BertForMaskedLM"),
    "vit": ("classifier", "ViTForImageClassification"),
}


def from_transformers(hf_model) -> nn.Module:
    """The book's model holding the weights of a ``transformers`` model, with the same output.

    Args:
        hf_model: a ``transformers`` model of one of the :data:`FAMILIES` (the causal-LM class
            of a decoder family, ``BertForMaskedLM``, ``ViTForImageClassification``).

    Returns:
        The book's model, in ``hf_model``'s dtype and device, in eval mode. Causal LMs:
        ``model(ids)`` gives the logits ``(B, n, V)`` and ``model.generate(ids,
        max_new_tokens=k)`` decodes greedily with the book's KV cache; BERT: the masked-LM
        logits; ViT: ``model(pixel_values)`` gives ``(B, num_labels)``.

    Raises:
        TypeError: ``hf_model`` is not a ``transformers`` model (no ``config``).
        ValueError: a family (``config.model_type``) the book does not convert, naming those
            it does; a configuration of a known family that the book's layers do not cover.
    """
    config = getattr(hf_model, "config", None)
    model_type = getattr(config, "model_type", None)
    if not isinstance(hf_model, nn.Module) or model_type is None:
        raise TypeError(
            f"from_transformers needs a transformers model (an nn.Module with a config), "
            f"got {type(hf_model).__name__}"
        )
    if model_type not in FAMILIES:
        raise ValueError(
            f"from_transformers does not convert model_type={model_type!r}; it converts "
            + ", ".join(sorted(FAMILIES))
        )
    head, expected = _HEADS.get(model_type, ("lm_head", "its ...ForCausalLM class"))
    if not hasattr(hf_model, head):
        raise ValueError(
            f"from_transformers converts a {model_type} model as {expected} (with its "
            f"{head}), got {type(hf_model).__name__}"
        )
    param = next(hf_model.parameters())
    model = FAMILIES[model_type](hf_model)
    return model.to(device=param.device, dtype=param.dtype).eval()


def load_pretrained(name: str = "gpt2"):
    """``transformers``' pretrained ``name`` converted by :func:`from_transformers`, or ``None``
    (after printing one line) when ``transformers`` or the network is not available.

    Returns ``(model, tokenizer, hf_model)`` on success. Meant for the "try it on Colab" cells:
    nothing else in the book downloads.
    """
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        print("transformers is not installed (pip install selfattn[hf]): skipped")
        return None
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
        hf_model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="eager")
    except (OSError, ValueError) as err:
        print(f"could not load {name!r} ({type(err).__name__}; offline?): skipped")
        return None
    return from_transformers(hf_model.eval()), tokenizer, hf_model.eval()
