"""The chapter-5 decoding model: a residual stack of attention layers, decoded with and
without a KV cache.

:func:`attention_stack` builds the layers (seeded, in eval mode) and :func:`generate` runs
them autoregressively, ``x <- x + layer(x, mask="causal")``, either with one
:class:`~selfattn.multihead.KVCache` per layer or recomputing the whole prefix at every
step. Chapter 5 times both; ``make bench`` (:mod:`selfattn.bench`) measures the same at a
larger size. ``selfattn`` exports both names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from .._checks import require_bool, require_float, require_int
from ..multihead import KVCache, MultiHeadAttention, stack_causal_mask

__all__ = ["attention_stack", "generate"]


def attention_stack(
    num_layers: int,
    d_model: int,
    num_heads: int,
    *,
    seed: int = 0,
    num_kv_heads: int | None = None,
) -> nn.ModuleList:
    """``num_layers`` :class:`~selfattn.multihead.MultiHeadAttention` layers, seeded, in eval mode.

    :func:`generate` runs them as a residual stack ``x <- x + layer(x, mask="causal")``.
    ``num_kv_heads`` makes every layer grouped-query attention.
    """
    num_layers = require_int(num_layers, "num_layers", 1)
    seed = require_int(seed, "seed", None)
    g = torch.Generator().manual_seed(seed)
    layers = nn.ModuleList(
        MultiHeadAttention(d_model, num_heads, num_kv_heads=num_kv_heads)
        for _ in range(num_layers)
    )
    with torch.no_grad():
        for p in layers.parameters():
            # nn.Linear's default init, drawn from our own generator so the stack does not
            # depend on (or disturb) the global RNG.
            bound = 1.0 / math.sqrt(d_model)
            p.copy_(torch.empty_like(p).uniform_(-bound, bound, generator=g))
    return layers.eval()


def _next_input(y_last: torch.Tensor) -> torch.Tensor:
    # The "token" fed back: the last output, rescaled to unit RMS so that 256 steps
    # neither explode nor vanish (a stand-in for sampling a token and embedding it).
    return y_last / y_last.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()


@torch.no_grad()
def generate(
    layers: Sequence[MultiHeadAttention],
    prompt: torch.Tensor,
    steps: int,
    *,
    use_cache: bool = True,
) -> torch.Tensor:
    """Decode ``steps`` vectors autoregressively through a residual stack of attention layers.

    Each layer computes ``x + layer(x, mask="causal")``; the output at the last position,
    rescaled to unit RMS, is the next input. With ``use_cache`` the prompt is run once
    (prefill) and every later step feeds one position through the layers and their
    :class:`~selfattn.multihead.KVCache`; without it every step re-runs the whole prefix.
    The results agree to float rounding (tested), so timing both measures the cache's
    speed-up::

        layers = attention_stack(num_layers=4, d_model=256, num_heads=8, seed=0)
        prompt = torch.randn(1, 16, 256)
        fast = generate(layers, prompt, 256, use_cache=True)  # (1, 256, 256)
        slow = generate(layers, prompt, 256, use_cache=False)  # same values, O(T^2) work

    Args:
        layers: e.g. :func:`attention_stack`'s output.
        prompt: ``(B, p, d_model)`` with ``p >= 1``.
        steps: number of vectors to generate (>= 1).
        use_cache: decode with one KV cache per layer, or recompute.

    Returns:
        ``(B, steps, d_model)``, the generated inputs in order.
    """
    use_cache = require_bool(use_cache, "use_cache")
    require_float(prompt, "prompt")
    if prompt.dim() != 3 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must have shape (B, p >= 1, d_model), got {tuple(prompt.shape)}")
    steps = require_int(steps, "steps", 1)
    out = []
    if use_cache:
        caches = [KVCache() for _ in layers]
        x = prompt
        for _ in range(steps):
            h = x
            mask = stack_causal_mask(layers, h, caches)  # once for all the layers
            for layer, cache in zip(layers, caches):
                h = h + layer(h, mask=mask, cache=cache)
            x = _next_input(h[:, -1:])  # (B, 1, d): only the new position goes in next time
            out.append(x)
    else:
        seq = prompt
        for _ in range(steps):
            h = seq
            mask = stack_causal_mask(layers, h)
            for layer in layers:
                h = h + layer(h, mask=mask)
            x = _next_input(h[:, -1:])
            out.append(x)
            seq = torch.cat([seq, x], dim=1)
    return torch.cat(out, dim=1)
