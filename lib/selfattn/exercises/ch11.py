"""Checkers for chapter 11's exercises (latent attention, cache sizes, soft-capping).

In the chapter's order (:data:`EXERCISES`, whose labels number them): ``absorb`` (build,
:func:`check_absorbed_scores`), ``rope-latent`` (find the bug, :func:`check_mla_keys` against
:func:`mla_keys_buggy`), ``predict-gqa`` (predict, then run, :func:`check_gqa_bytes`),
``predict-mla`` (predict, then run, :func:`check_mla_bytes`) and ``softcap`` (build,
:func:`check_softcap`). A wrong answer that is a mistake the checker recognises is named.
"""

from __future__ import annotations

import torch

from ..cache_sizes import AttentionConfig, bytes_per_token
from ..i18n import _
from ..positional import apply_rope
from ._core import (
    NotAttempted,
    call_answer,
    checker,
    expect_close,
    expect_predicted,
    expect_true,
)

__all__ = [
    "EXERCISES",
    "check_absorbed_scores",
    "absorbed_mistakes",
    "mla_keys_buggy",
    "check_mla_keys",
    "mla_keys_mistakes",
    "LLAMA3_70B",
    "DEEPSEEK_V2_LITE",
    "check_gqa_bytes",
    "gqa_mistakes",
    "check_mla_bytes",
    "mla_bytes_mistakes",
    "check_softcap",
    "softcap_mistakes",
]

#: The labels of chapter 11's exercises (``ex-ch11-<label>``), in the chapter's order.
EXERCISES = ("absorb", "rope-latent", "predict-gqa", "predict-mla", "softcap")


# -- Build: absorb the key up-projection into the query ----------------------------------


def _absorbed_variants(q, w_uk, latent) -> dict[str, torch.Tensor]:
    variants = {}
    if w_uk.shape[-1] == w_uk.shape[-2]:
        variants[
            _(
                "you multiplied by W_UK transposed: the key is k = W_UK c, so the query meets "
                "W_UK's columns, q W_UK (a row vector times W_UK)"
            )
        ] = (q @ w_uk.transpose(-1, -2)) @ latent.T
    variants[_("every head used the first head's W_UK: each head has its own up-projection")] = (
        q @ w_uk[:1]
    ) @ latent.T
    variants[
        _(
            "these scores are divided by sqrt(d): the exercise asks for the unscaled q . k "
            "(the layer scales them afterwards)"
        )
    ] = (q @ w_uk) @ latent.T / q.shape[-1] ** 0.5
    return variants


def absorbed_mistakes() -> list[str]:
    """The mistakes :func:`check_absorbed_scores` names."""
    q, w = torch.randn(2, 1, 3), torch.randn(2, 3, 3)
    return list(_absorbed_variants(q, w, torch.randn(4, 3)))


@checker("absorb", "absorb the key up-projection")
def check_absorbed_scores(answer) -> None:
    """``answer(q_nope, w_uk, latent)``: ``q_nope`` ``(h, n, d_nope)``, the per-head key
    up-projections ``w_uk`` ``(h, d_nope, kv_rank)`` (head ``i``'s key is ``W_UK[i] @ c``) and
    the cached latents ``(t, kv_rank)``; it must return the unscaled scores ``(h, n, t)``,
    ``q_i . (W_UK[i] c_j)``, computed as ``(q_i W_UK[i]) . c_j``."""
    g = torch.Generator().manual_seed(11)
    for h, n, d, r, t in ((2, 1, 4, 4, 9), (4, 3, 5, 7, 6), (1, 2, 3, 8, 1)):
        q = torch.randn(h, n, d, generator=g, dtype=torch.float64)
        w = torch.randn(h, d, r, generator=g, dtype=torch.float64)
        c = torch.randn(t, r, generator=g, dtype=torch.float64)
        keys = torch.einsum("hdr,tr->htd", w, c)  # up-projected keys, (h, t, d_nope)
        expected = q @ keys.transpose(-1, -2)
        got = call_answer(answer, q, w, c)
        expect_close(
            got,
            expected,
            case=f"h={h}, n={n}, d_nope={d}, kv_rank={r}, t={t}",
            atol=1e-9,
            rtol=1e-9,
            mistakes=_absorbed_variants(q, w, c),
        )
    _expect_no_up_projection(answer)


def _expect_no_up_projection(answer) -> None:
    """Count the answer's operations on a case with far more latents than queries: folding
    ``W_UK`` into the queries costs ``2 h n d_nope r + 2 h n r t``, up-projecting the latents
    ``2 h t d_nope r`` more."""
    from torch.utils.flop_counter import FlopCounterMode  # lazily: not needed to import

    g = torch.Generator().manual_seed(13)
    h, n, d, r, t = 2, 1, 16, 8, 512
    q = torch.randn(h, n, d, generator=g, dtype=torch.float64)
    w = torch.randn(h, d, r, generator=g, dtype=torch.float64)
    c = torch.randn(t, r, generator=g, dtype=torch.float64)
    counter = FlopCounterMode(display=False)
    with counter:
        call_answer(answer, q, w, c)
    folded = 2 * h * n * d * r + 2 * h * n * r * t
    expect_true(
        counter.get_total_flops() <= 4 * folded,
        _(
            "you up-projected all t latents (h={h}, n={n}, d_nope={d}, kv_rank={r}, t={t}): "
            "{value} operations where folding W_UK into the n queries takes {folded}; fold W_UK "
            "into the queries instead",
            h=h,
            n=n,
            d=d,
            r=r,
            t=t,
            value=counter.get_total_flops(),
            folded=folded,
        ),
    )


# -- Find the bug: RoPE between the query and W_UK ----------------------------------------


def mla_keys_buggy(latent, k_rope, w_uk, positions):
    """MLA's keys with a planted bug: ``latent`` ``(t, kv_rank)``, ``k_rope`` ``(t, rope_dim)``,
    ``w_uk`` ``(h, d_nope, kv_rank)``, ``positions`` ``(t,)`` -> keys ``(h, t, d_nope +
    rope_dim)``. (The content part is rotated after the up-projection, which puts a
    position-dependent rotation between the query and ``W_UK`` and stops the absorption.)"""
    h = w_uk.shape[0]
    content = torch.einsum("hdr,tr->htd", w_uk, latent)
    content = apply_rope(content, positions)
    rotated = apply_rope(k_rope, positions).expand(h, -1, -1)
    return torch.cat([content, rotated], dim=-1)


def _mla_keys_variants(latent, k_rope, w_uk, positions) -> dict[str, torch.Tensor]:
    h = w_uk.shape[0]
    content = torch.einsum("hdr,tr->htd", w_uk, latent)
    rotated = apply_rope(k_rope, positions).expand(h, -1, -1)
    return {
        "right": torch.cat([content, rotated], dim=-1),
        _(
            "the decoupled key k^R is not rotated any more: without it the keys carry no "
            "position at all"
        ): torch.cat([content, k_rope.expand(h, -1, -1)], dim=-1),
        _(
            "the latent is rotated before the up-projection: W_UK can still be folded into the "
            "query, but the content score then depends on the key's absolute position, not on "
            "the distance, and the same latent gives the values, which would be rotated too"
        ): (
            torch.cat(
                [torch.einsum("hdr,tr->htd", w_uk, apply_rope(latent, positions)), rotated],
                dim=-1,
            )
        ),
    }


def mla_keys_mistakes() -> list[str]:
    """The mistakes :func:`check_mla_keys` names."""
    lat, kr, w = torch.randn(3, 4), torch.randn(3, 2), torch.randn(2, 4, 4)
    return [k for k in _mla_keys_variants(lat, kr, w, torch.arange(3)) if k != "right"]


@checker("rope-latent", "RoPE and the latent")
def check_mla_keys(answer) -> None:
    """``answer(latent, k_rope, w_uk, positions)`` must return MLA's keys ``(h, t, d_nope +
    rope_dim)``: the content part ``W_UK[i] c_j`` (no rotation) next to the rotated shared key
    ``RoPE(k^R_j, p_j)``. While it computes what :func:`mla_keys_buggy` computes, the exercise
    counts as not attempted."""
    g = torch.Generator().manual_seed(12)
    cases, planted = [], True
    for h, d, r, rd, t in ((3, 4, 6, 4, 5), (2, 2, 4, 2, 3)):
        lat = torch.randn(t, r, generator=g, dtype=torch.float64)
        kr = torch.randn(t, rd, generator=g, dtype=torch.float64)
        w = torch.randn(h, d, r, generator=g, dtype=torch.float64)
        pos = torch.arange(3, 3 + t)
        got = call_answer(answer, lat, kr, w, pos)
        try:
            same = torch.allclose(
                torch.as_tensor(got, dtype=torch.float64), mla_keys_buggy(lat, kr, w, pos)
            )
        except (TypeError, ValueError, RuntimeError):
            same = False
        planted = planted and same
        cases.append((lat, kr, w, pos, got))
    if planted:
        raise NotAttempted()
    for lat, kr, w, pos, got in cases:
        variants = _mla_keys_variants(lat, kr, w, pos)
        right = variants.pop("right")
        expect_close(
            got,
            right,
            case=f"h={w.shape[0]}, t={lat.shape[0]}",
            atol=1e-9,
            rtol=1e-9,
            mistakes=variants,
        )


# -- Predict, then run: cache bytes per token ---------------------------------------------


#: Llama 3 70B's configuration (meta-llama/Meta-Llama-3-70B, config.json), for exercise
#: ``predict-gqa``.
LLAMA3_70B = AttentionConfig(
    "Llama 3 70B", "meta-llama/Meta-Llama-3-70B", layers=80, heads=64, kv_heads=8, d_head=128
)
#: DeepSeek-V2-Lite's (deepseek-ai/DeepSeek-V2-Lite, config.json), for ``predict-mla``.
DEEPSEEK_V2_LITE = AttentionConfig(
    "DeepSeek-V2-Lite",
    "deepseek-ai/DeepSeek-V2-Lite",
    layers=27,
    heads=16,
    kv_heads=0,
    d_head=128,
    kv_rank=512,
    rope_dim=64,
)


def _gqa_variants() -> dict[str, int]:
    cfg = LLAMA3_70B
    one = bytes_per_token(cfg)  # 2 * 8 * 128 * 2
    return {
        "right": cfg.layers * one,
        _("that caches the keys only: the values are cached too, a factor 2"): cfg.layers
        * one
        // 2,
        _("that uses the 64 query heads; Llama 3 70B caches only its 8 key/value heads (GQA)"): (
            cfg.layers * one * cfg.heads // cfg.kv_heads
        ),
        _("that is one layer: every one of the 80 layers has its own cache"): one,
        _("that counts 4 bytes a number (float32); the model's bf16 takes 2"): cfg.layers
        * one
        * 2,
    }


def gqa_mistakes() -> list[str]:
    """The mistakes :func:`check_gqa_bytes` names."""
    return [k for k in _gqa_variants() if k != "right"]


@checker("predict-gqa", "Llama 3 70B's cache per token")
def check_gqa_bytes(prediction) -> None:
    """``prediction``: the bytes one token adds to Llama 3 70B's cache, over all 80 layers, in
    bf16 (64 query heads, 8 key/value heads of width 128)."""
    expect_predicted(prediction, _gqa_variants(), case=_("Llama 3 70B, bf16"))


def _mla_bytes_variants() -> dict[str, int]:
    cfg = DEEPSEEK_V2_LITE
    one = bytes_per_token(cfg)  # (512 + 64) * 2
    b = cfg.bytes_per_number
    return {
        "right": cfg.layers * one,
        _("that leaves out the rotated key k^R (64 numbers), which is cached beside the latent"): (
            cfg.layers * cfg.kv_rank * b
        ),
        _(
            "that caches the latent twice, once for the keys and once for the values; one latent "
            "serves both"
        ): cfg.layers * 2 * one,
        _("that is one layer: each of the 27 layers caches its own latent"): one,
        _(
            "that is what 16 heads of keys (192 numbers) and values (128) would cache without MLA"
        ): cfg.layers * cfg.heads * (cfg.d_head + cfg.rope_dim + cfg.d_head) * b,
    }


def mla_bytes_mistakes() -> list[str]:
    """The mistakes :func:`check_mla_bytes` names."""
    return [k for k in _mla_bytes_variants() if k != "right"]


@checker("predict-mla", "DeepSeek-V2-Lite's cache per token")
def check_mla_bytes(prediction) -> None:
    """``prediction``: the bytes one token adds to DeepSeek-V2-Lite's cache, over its 27
    layers, in bf16 (``kv_lora_rank = 512``, ``qk_rope_head_dim = 64``)."""
    expect_predicted(prediction, _mla_bytes_variants(), case=_("DeepSeek-V2-Lite, bf16"))


# -- Build: soft-capping ------------------------------------------------------------------


def _softcap_variants(s: torch.Tensor, cap: float) -> dict[str, torch.Tensor]:
    return {
        _(
            "tanh is applied to the raw scores: divide by the cap first, cap * tanh(s / cap), "
            "or small scores are squashed too"
        ): cap * torch.tanh(s),
        _("the result is not multiplied back by the cap: it lies in (-1, 1)"): torch.tanh(s / cap),
        _(
            "that is hard clipping: soft-capping is smooth, cap * tanh(s / cap), and keeps a "
            "gradient beyond the cap"
        ): s.clamp(-cap, cap),
    }


def softcap_mistakes() -> list[str]:
    """The mistakes :func:`check_softcap` names."""
    return list(_softcap_variants(torch.zeros(1), 1.0))


@checker("softcap", "soft-capping")
def check_softcap(answer) -> None:
    """``answer(scores, cap)`` must return Gemma 2's soft-capped scores
    ``cap * tanh(scores / cap)``, of the same shape."""
    g = torch.Generator().manual_seed(13)
    for shape, cap, spread in (((4, 6), 50.0, 80.0), ((2, 3, 5), 30.0, 10.0), ((1, 1), 5.0, 9.0)):
        s = torch.randn(*shape, generator=g, dtype=torch.float64) * spread
        expect_close(
            call_answer(answer, s, cap),
            cap * torch.tanh(s / cap),
            case=_("scores {shape}, cap {cap}", shape=shape, cap=f"{cap:g}"),
            atol=1e-9,
            rtol=1e-9,
            mistakes=_softcap_variants(s, cap),
        )
