"""The KV cache of today's LLMs in bytes, from their published configurations (chapter 11).

Each :class:`AttentionConfig` holds the numbers of a model's ``config.json`` that size its
cache; :func:`cache_bytes` turns them into the bytes a sequence of ``context`` tokens keeps,
over every layer, for one sequence:

* a **full** layer with ``h_kv`` key/value heads of width ``d_head`` keeps
  ``2 * h_kv * d_head`` numbers per token (MHA: ``h_kv = h``; GQA: fewer; MQA: 1);
* a **sliding-window** layer keeps the same per token, but for the last ``window`` tokens only;
* an **MLA** layer keeps ``kv_rank + rope_dim`` numbers per token (the latent and the rotated
  key, :class:`~selfattn.latent.LatentCache`).

The sources are the models' Hugging Face repositories (named in :data:`PUBLISHED`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._checks import require_int

__all__ = ["AttentionConfig", "PUBLISHED", "cache_bytes", "bytes_per_token"]


@dataclass(frozen=True)
class AttentionConfig:
    """The numbers of a model's configuration that size its KV cache.

    Attributes:
        name: the model.
        source: where the numbers come from (a Hugging Face repository's ``config.json``).
        layers: ``num_hidden_layers``.
        heads: ``num_attention_heads`` (query heads).
        kv_heads: ``num_key_value_heads`` (0 for MLA, which caches no heads).
        d_head: ``head_dim``.
        local_layers: how many layers use a sliding window (the rest are full).
        window: ``sliding_window`` (0: none).
        kv_rank: MLA's ``kv_lora_rank`` (0: not MLA).
        rope_dim: MLA's ``qk_rope_head_dim``.
        bytes_per_number: 2 for the bf16 the models are published in.
    """

    name: str
    source: str
    layers: int
    heads: int
    kv_heads: int
    d_head: int
    local_layers: int = 0
    window: int = 0
    kv_rank: int = 0
    rope_dim: int = 0
    bytes_per_number: int = 2


#: Five published configurations (bf16 caches), by short name.
PUBLISHED: dict[str, AttentionConfig] = {
    "Llama 3 8B": AttentionConfig(
        "Llama 3 8B", "meta-llama/Meta-Llama-3-8B", layers=32, heads=32, kv_heads=8, d_head=128
    ),
    "Qwen3 8B": AttentionConfig(
        "Qwen3 8B", "Qwen/Qwen3-8B", layers=36, heads=32, kv_heads=8, d_head=128
    ),
    "DeepSeek-V3": AttentionConfig(
        "DeepSeek-V3",
        "deepseek-ai/DeepSeek-V3",
        layers=61,
        heads=128,
        kv_heads=0,
        d_head=128,
        kv_rank=512,
        rope_dim=64,
    ),
    "gpt-oss-120b": AttentionConfig(
        "gpt-oss-120b",
        "openai/gpt-oss-120b",
        layers=36,
        heads=64,
        kv_heads=8,
        d_head=64,
        local_layers=18,
        window=128,
    ),
    "Gemma 3 27B": AttentionConfig(
        "Gemma 3 27B",
        "google/gemma-3-27b-it",
        layers=62,
        heads=32,
        kv_heads=16,
        d_head=128,
        local_layers=52,
        window=1024,
    ),
}


def bytes_per_token(config: AttentionConfig) -> int:
    """Bytes one token adds to one layer's cache (a full layer's, or MLA's)."""
    if not isinstance(config, AttentionConfig):
        raise TypeError(f"config must be an AttentionConfig, got {type(config).__name__}")
    if config.kv_rank:
        return (config.kv_rank + config.rope_dim) * config.bytes_per_number
    return 2 * config.kv_heads * config.d_head * config.bytes_per_number


def cache_bytes(config: AttentionConfig, context: int, *, batch: int = 1) -> int:
    """Bytes of the whole model's cache after ``context`` tokens (``batch`` sequences).

    Full layers grow with ``context``; sliding-window layers stop at ``window`` tokens.
    """
    per_layer = bytes_per_token(config)
    context = require_int(context, "context", 0)
    batch = require_int(batch, "batch", 1)
    full = config.layers - config.local_layers
    local_tokens = min(context, config.window) if config.local_layers else 0
    return batch * per_layer * (full * context + config.local_layers * local_tokens)
