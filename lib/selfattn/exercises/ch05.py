"""Checkers for chapter 5's exercises (multi-head attention, cross-attention, the KV cache,
decoding).

:data:`EXERCISES` lists the chapter's exercises in its order, which numbers their checkers.
Two checkers belong to no exercise of the chapter, :func:`check_cache_bytes` (a KV cache's
bytes) and :func:`check_param_count` (the parameters of multi-head attention): they are
:data:`EXTRA_EXERCISES`, numbered after the chapter's own.
"""

from __future__ import annotations

import copy
import math
import numbers

import torch

from ..attention import scaled_dot_product_attention
from ..costs import kv_cache_bytes, mha_param_count
from ..efficient.decoding import partial_attention
from ..i18n import _
from ..masks import causal_mask
from ..multihead import MultiHeadAttention, merge_heads, split_heads
from ._core import (
    AnswerRaised,
    Mismatch,
    call_answer,
    checker,
    expect_close,
    expect_int,
    expect_predicted,
    expect_true,
)

__all__ = [
    "EXERCISES",
    "EXTRA_EXERCISES",
    "PREDICT_HEAD_SHAPE",
    "PREDICT_HEAD_HEADS",
    "PREDICT_HEAD_INDEX",
    "check_predicted_head",
    "buggy_gqa_attention",
    "check_gqa_fixed",
    "check_cross_projections",
    "check_cache_bytes",
    "check_param_count",
    "buggy_heads",
    "check_heads_fixed",
    "check_merge_states",
    "buggy_cached_attention",
    "check_cached_attention_fixed",
    "check_decode_loop",
    "check_cache_prediction",
    "check_block_prediction",
    "lm_cache_bytes",
]

#: The labels of chapter 5's exercises (``ex-ch05-<label>``), in the chapter's order.
EXERCISES = (
    "predict-head",
    "gqa-bug",
    "cross",
    "merge-bug",
    "decode-loop",
    "mergestates",
    "cache-order-bug",
    "predict-cache",
    "predict-blocks",
)
#: Checkers that no exercise of the chapter uses, numbered after :data:`EXERCISES`.
EXTRA_EXERCISES = ("cache-bytes", "param-count")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


#: The setting of "predict, then run" on what a head holds. ``torch.arange(24.0)``
#: reshaped to ``PREDICT_HEAD_SHAPE`` ``(B, n, d)`` (entry ``[0, i, f]`` is ``d * i + f``),
#: split into ``PREDICT_HEAD_HEADS`` heads; the reader predicts
#: ``split_heads(x, h)[PREDICT_HEAD_INDEX]`` (batch 0, head 2, position 1, feature 0).
PREDICT_HEAD_SHAPE, PREDICT_HEAD_HEADS, PREDICT_HEAD_INDEX = (1, 4, 6), 3, (0, 2, 1, 0)


@checker("predict-head", "predict: what a head holds")
def check_predicted_head(answer) -> None:
    """``answer`` (a number, or a function returning it) must be the entry
    ``split_heads(x, 3)[0, 2, 1, 0]`` of ``x = torch.arange(24.0).reshape(1, 4, 6)``.
    The likely mistakes are named; a wrong prediction is never told the right value."""
    B, n, d = PREDICT_HEAD_SHAPE
    h = PREDICT_HEAD_HEADS
    x = torch.arange(float(B * n * d)).reshape(B, n, d)
    dh = d // h
    _batch, head, pos, feat = PREDICT_HEAD_INDEX
    variants = {
        "right": int(split_heads(x, h)[PREDICT_HEAD_INDEX]),
        _(
            "that is what x.reshape(B, h, n, d_head) holds there: it cuts the flattened "
            "tensor into h pieces, so a head gets whole positions, not a slice of each "
            "position's features"
        ): int(x.reshape(B, h, n, dh)[PREDICT_HEAD_INDEX]),
        _(
            "that is a strided split, head j taking features j, j + h, ...: the split gives head "
            "j the d_head = {dh} consecutive features j * d_head to (j + 1) * d_head - 1",
            dh=dh,
        ): int(x.reshape(B, n, dh, h).permute(0, 3, 1, 2)[PREDICT_HEAD_INDEX]),
        _(
            "head and position swapped: that is head {pos} at position {head}; the axes are (B, "
            "h, n, d_head)",
            pos=pos,
            head=head,
        ): int(split_heads(x, h)[0, pos, head, feat]),
    }
    expect_predicted(answer, variants, case=f"x = arange(24).reshape{(B, n, d)}, h = {h}")


# -- Find the bug: grouped-query attention ---------------------------------------------


def buggy_gqa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The function of "find the bug: grouped-query attention", with one planted bug.

    Shapes: ``q (B, h, n, d_head)``, ``k``, ``v`` ``(B, h_kv, m, d_head)`` ->
    ``(B, h, n, d_head)``.
    """
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    return scaled_dot_product_attention(q, k, v)


def _gqa(q, k, v, *, tiled: bool = False):
    group = q.shape[1] // k.shape[1]
    if tiled:
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    else:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return scaled_dot_product_attention(q, k, v)


@checker("gqa-bug", "grouped-query attention")
def check_gqa_fixed(answer) -> None:
    """``answer(q, k, v)`` with ``q (B, h, n, d_head)`` and ``k``, ``v``
    ``(B, h_kv, m, d_head)`` must return grouped-query attention ``(B, h, n, d_head)``, as
    :class:`~selfattn.multihead.MultiHeadAttention` computes it: :func:`buggy_gqa_attention`
    with its bug fixed. Some cases hide the bug; the bug left in is named."""
    for B, h, h_kv, n, m, dh in (
        (1, 4, 1, 3, 5, 4),
        (2, 4, 4, 3, 3, 2),
        (2, 8, 2, 4, 6, 4),
        (1, 6, 3, 2, 7, 3),
    ):
        g = _gen(100 * h + 10 * h_kv + n)
        q = torch.randn(B, h, n, dh, generator=g, dtype=torch.float64)
        k, v = (torch.randn(B, h_kv, m, dh, generator=g, dtype=torch.float64) for _ in "kv")
        got = call_answer(answer, q, k, v)
        group = h // h_kv
        mistakes = {
            _(
                "the bug is still there: repeat tiles the {h_kv} key/value heads, so query head "
                "i reads head i % {h_kv}, so the {group} consecutive query heads of a group read "
                "different key/value heads",
                h_kv=h_kv,
                group=group,
            ): _gqa(q, k, v, tiled=True),
        }
        expect_close(
            got,
            _gqa(q, k, v),
            case=_("h={h} query heads, h_kv={h_kv} key/value heads", h=h, h_kv=h_kv),
            atol=1e-9,
            rtol=1e-9,
            mistakes=mistakes,
        )


@checker("cross", "cross-attention from one fused weight")
def check_cross_projections(answer) -> None:
    """``answer(x, context, weight, bias)`` with ``x (B, n, d)``, ``context (B, m, d)`` and
    the fused ``weight (3d, d)``, ``bias (3d,)`` (rows ordered q, k, v) must return
    ``(q, k, v)``: queries ``(B, n, d)`` from ``x``, keys and values ``(B, m, d)`` from
    ``context``."""
    for B, n, m, d in ((2, 3, 5, 4), (1, 1, 7, 6), (2, 4, 1, 8)):
        g = _gen(n * 10 + m)
        x, ctx = (
            torch.randn(B, n, d, generator=g, dtype=torch.float64),
            torch.randn(B, m, d, generator=g, dtype=torch.float64),
        )
        w, b = (
            torch.randn(3 * d, d, generator=g, dtype=torch.float64),
            torch.randn(3 * d, generator=g, dtype=torch.float64),
        )
        expected = (
            x @ w[:d].T + b[:d],
            ctx @ w[d : 2 * d].T + b[d : 2 * d],
            ctx @ w[2 * d :].T + b[2 * d :],
        )
        got = call_answer(answer, x.clone(), ctx.clone(), w.clone(), b.clone())
        expect_true(
            isinstance(got, (tuple, list)) and len(got) == 3,
            _("case B={B}, n={n}, m={m}, d={d}: return a tuple (q, k, v)", B=B, n=n, m=m, d=d),
        )
        for name, g_, e in zip("qkv", got, expected):
            expect_close(g_, e, case=f"{name}, B={B}, n={n}, m={m}, d={d}", atol=1e-9, rtol=1e-9)


@checker("cache-bytes", "the size of a KV cache")
def check_cache_bytes(answer) -> None:
    """``answer(num_layers, num_heads, d_head, n, bytes_per_number, batch)`` must return the
    number of bytes a KV cache holds."""
    cases = [
        (1, 1, 1, 1, 4, 1),
        (12, 12, 64, 1024, 2, 1),
        (32, 32, 128, 4096, 2, 8),
        (2, 4, 16, 7, 4, 3),
        (1, 8, 64, 1, 1, 1),
    ]
    sizes = {4: torch.float32, 2: torch.float16, 1: torch.int8}
    for L, h, dh, n, nbytes, B in cases:
        expected = kv_cache_bytes(L, h, dh, n, sizes[nbytes], batch=B)
        got = call_answer(answer, L, h, dh, n, nbytes, B)
        expect_int(
            got,
            expected,
            case=_(
                "layers={L}, heads={h}, d_head={dh}, n={n}, {nbytes} bytes, batch={B} (in bytes)",
                L=L,
                h=h,
                dh=dh,
                n=n,
                nbytes=nbytes,
                B=B,
            ),
        )


@checker("param-count", "parameters of multi-head attention")
def check_param_count(answer) -> None:
    """``answer(d_model, num_heads, bias)`` must return the number of parameters of
    ``MultiHeadAttention(d_model, num_heads, bias=bias)``."""
    for d, h, bias in (
        (8, 1, True),
        (8, 2, True),
        (64, 8, False),
        (512, 8, True),
        (96, 12, False),
        (6, 3, True),
    ):
        expected = mha_param_count(d, bias=bias)
        got = call_answer(answer, d, h, bias)
        expect_int(got, expected, case=f"d_model={d}, num_heads={h}, bias={bias}")


def _matches(got, candidate) -> bool:
    """Whether ``got`` (any tensor-like) equals ``candidate`` in shape and value."""
    try:
        g = torch.as_tensor(got, dtype=candidate.dtype)
    except Exception:
        return False
    # float32 with lse near 300: exp(lse_i - lse) carries a relative error of ~300 eps
    tol = 1e-4 if candidate.dtype == torch.float32 else 1e-9
    return g.shape == candidate.shape and torch.allclose(g, candidate, atol=tol, rtol=tol)


def _merge_cases():
    """``(name, (out_a, lse_a, out_b, lse_b), (out, lse))``: the states of two disjoint parts
    of the keys, and attention over all of them computed in one piece."""
    cases = []
    for name, B, n, m, split, d, gain, dtype in (
        (_("2 x 3 queries, 10 keys split 4 + 6"), 2, 3, 10, 4, 5, 1.0, torch.float64),
        (_("1 query, 8 keys split 1 + 7"), 1, 1, 8, 1, 4, 2.0, torch.float64),
        (
            _("4 queries, 12 keys split 6 + 6, scores above 300, float32"),
            1,
            4,
            12,
            6,
            4,
            12.0,
            torch.float32,
        ),
    ):
        g = _gen(B * 1000 + m * 10 + split)
        q = torch.randn(B, n, d, generator=g, dtype=dtype)
        k = torch.randn(B, m, d, generator=g, dtype=dtype)
        v = torch.randn(B, m, d, generator=g, dtype=dtype)
        if gain != 1.0:  # scores of a few hundred: exp(lse) overflows float32
            q, k = q.abs() + gain, k.abs() + gain
        out_a, lse_a = partial_attention(q, k[:, :split], v[:, :split])
        out_b, lse_b = partial_attention(q, k[:, split:], v[:, split:])
        full, lse = partial_attention(q, k, v)
        cases.append((name, (out_a, lse_a, out_b, lse_b), (full, lse)))
    # Part a sees no key of one row (lse -inf, output 0): that row is part b's alone.
    g = _gen(77)
    q, k, v = (torch.randn(1, 3, 4, generator=g, dtype=torch.float64) for _ in range(3))
    mask_a = torch.tensor([[True, True, True], [False, False, False], [True, False, True]])
    k2, v2 = (torch.randn(1, 5, 4, generator=g, dtype=torch.float64) for _ in range(2))
    out_a, lse_a = partial_attention(q, k, v, mask=mask_a)
    out_b, lse_b = partial_attention(q, k2, v2)
    full, lse = partial_attention(
        q,
        torch.cat([k, k2], 1),
        torch.cat([v, v2], 1),
        mask=torch.cat([mask_a, torch.ones(3, 5, dtype=torch.bool)], 1),
    )
    cases.append(
        (
            _("3 queries, part a sees no key of query 1 (lse -inf)"),
            (out_a, lse_a, out_b, lse_b),
            (full, lse),
        )
    )
    return cases


def _expect_finite_merge(name: str, got_out, got_lse) -> None:
    # the float32 case: scores above 300, where exp(lse) overflows
    finite = all(
        torch.isfinite(torch.as_tensor(t, dtype=torch.float32)).all() for t in (got_out, got_lse)
    )
    expect_true(
        finite,
        _(
            "case {name}: your result has inf or NaN: exp(lse) overflowed (the "
            "log-sum-exps here are above 300)",
            name=name,
        ),
    )


def _merged_out_mistakes(out_a, lse_a, out_b, lse_b, lse):
    """``(candidate, diagnosis)`` pairs: the likely wrong merges of the two outputs."""
    w_a, w_b = (torch.exp(t - lse).unsqueeze(-1) for t in (lse_a, lse_b))
    return (
        (
            (out_a + out_b) / 2,
            _(
                "you averaged the outputs, as if both parts held the same share of "
                "the softmax mass"
            ),
        ),
        (
            out_a + out_b,
            _(
                "you added the outputs without rescaling them, although each part's "
                "output is normalised over its own keys only"
            ),
        ),
        (
            torch.exp(lse_a).unsqueeze(-1) * out_a + torch.exp(lse_b).unsqueeze(-1) * out_b,
            _("you weighted by exp(lse_i), and the weights do not sum to 1"),
        ),
        (w_b * out_a + w_a * out_b, _("you swapped the weights of the two parts")),
    )


def _merged_lse_mistakes(lse_a, lse_b):
    """``(candidate, diagnosis)`` pairs: the likely wrong merges of the two log-sum-exps."""
    return (
        (
            lse_a + lse_b,
            _("you added the two log-sum-exps, which multiplies the two sums"),
        ),
        (
            torch.maximum(lse_a, lse_b),
            _("you kept the larger lse, which leaves out the other part's mass"),
        ),
    )


def _diagnose_merge(name: str, got, named, *, nan_to_num: bool = False) -> None:
    """Raise the Mismatch of the first named mistake that ``got`` matches, if any."""
    for candidate, message in named:
        if _matches(got, torch.nan_to_num(candidate) if nan_to_num else candidate):
            raise Mismatch(_("case {case}: {diagnosis}", case=name, diagnosis=message))


@checker("mergestates", "merge two partial attention states")
def check_merge_states(answer) -> None:
    """``answer(out_a, lse_a, out_b, lse_b)`` must return ``(out, lse)``: attention over the
    union of two disjoint sets of keys, from each set's output ``(..., n, d_v)`` (normalised
    over its own keys) and row log-sum-exp ``(..., n)``. Named mistakes are diagnosed:
    averaging, no rescaling, weights ``exp(lse_i)`` not divided by the total, swapped
    weights, ``lse_a + lse_b`` or ``max`` for the log-sum-exp, overflow."""
    for name, (out_a, lse_a, out_b, lse_b), (out, lse) in _merge_cases():
        got = call_answer(answer, out_a, lse_a, out_b, lse_b)
        expect_true(
            isinstance(got, (tuple, list)) and len(got) == 2,
            _("case {name}: return a tuple (out, lse)", name=name),
        )
        got_out, got_lse = got
        tol = 1e-4 if out.dtype == torch.float32 else 1e-9
        if name.endswith("float32"):
            _expect_finite_merge(name, got_out, got_lse)
        if not _matches(got_out, out):
            named = _merged_out_mistakes(out_a, lse_a, out_b, lse_b, lse)
            _diagnose_merge(name, got_out, named, nan_to_num=True)
            expect_close(got_out, out, case=f"{name} (out)", atol=tol, rtol=tol)
        if not _matches(got_lse, lse):
            _diagnose_merge(name, got_lse, _merged_lse_mistakes(lse_a, lse_b))
            expect_close(got_lse, lse, case=f"{name} (lse)", atol=tol, rtol=tol)


# -- Find the bug: a cache appended in the wrong order -------------------------------


def buggy_cached_attention(
    q_new: torch.Tensor,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
):
    """The function of "find the bug: a cache appended in the wrong order", with one bug.

    One causal attention step of a decoder with a KV cache: ``q_new``, ``k_new``,
    ``v_new`` ``(B, n, d)`` are the ``n`` newest positions, ``k_cache``, ``v_cache``
    ``(B, c, d)`` the ``c`` positions before them (``c`` may be 0). Returns ``(out, k, v)``:
    the output ``(B, n, d)`` and the grown cache ``(B, c + n, d)``, oldest position first.
    """
    k = torch.cat([k_new, k_cache], dim=-2)
    v = torch.cat([v_new, v_cache], dim=-2)
    mask = causal_mask(q_new.shape[-2], k.shape[-2], alignment="bottom_right")
    return scaled_dot_product_attention(q_new, k, v, mask), k, v


def _cached_step(q_new, k_new, v_new, k_cache, v_cache, *, new_first=False, top_left=False):
    parts = (k_new, k_cache), (v_new, v_cache)
    if not new_first:
        parts = tuple(p[::-1] for p in parts)
    k, v = (torch.cat(p, dim=-2) for p in parts)
    align = "top_left" if top_left else "bottom_right"
    mask = causal_mask(q_new.shape[-2], k.shape[-2], alignment=align)
    return scaled_dot_product_attention(q_new, k, v, mask), k, v


def _as_triple(got, case: str):
    expect_true(
        isinstance(got, (tuple, list)) and len(got) == 3,
        _("case {case}: return a tuple (out, k, v)", case=case),
    )
    return got


def _cache_order_mistakes(args) -> dict:
    """The likely wrong outputs of one cached step with arguments ``args``, by diagnosis."""
    return {
        _(
            "the new keys and values are still put before the cached ones: a chunk of "
            "new queries then sees the wrong keys through the causal mask"
        ): _cached_step(*args, new_first=True)[0],
        _(
            "the causal mask is aligned top-left, so the new queries cannot see the "
            "cache: new query i is position c + i"
        ): _cached_step(*args, top_left=True)[0],
    }


def _grown_cache_mistakes(name: str, wrong_order, size: int, start: int) -> dict:
    """The returned cache ``name`` with the new positions first, by diagnosis."""
    if size == 1 and start > 0:
        return {
            _(
                "the output is right here only because one new query sees every key, and "
                "attention does not depend on the order of keys it sees all of; but the "
                "cache {name} you return puts the new position before the cached ones, "
                "which breaks the next chunk",
                name=name,
            ): wrong_order
        }
    return {
        _(
            "the cache {name} you return puts the new positions before the cached ones",
            name=name,
        ): wrong_order
    }


def _expect_grown_cache(got_k, got_v, k, v, start: int, stop: int, case: str) -> None:
    """The returned caches must be the keys and values of positions ``:stop``, oldest first."""
    for name, got_t, ref in (("k", got_k, k), ("v", got_v, v)):
        wrong_order = torch.cat([ref[:, start:stop], ref[:, :start]], dim=-2)
        expect_close(
            got_t,
            ref[:, :stop],
            case=_("{case} (the returned cache {name}, oldest first)", case=case, name=name),
            atol=0,
            rtol=0,
            mistakes=_grown_cache_mistakes(name, wrong_order, stop - start, start),
        )


@checker("cache-order-bug", "a cache appended in the wrong order")
def check_cached_attention_fixed(answer) -> None:
    """``answer(q_new, k_new, v_new, k_cache, v_cache)`` must return ``(out, k, v)``: the
    causal attention output of the ``n`` newest positions ``(B, n, d)`` over the cached and
    the new positions, and the grown cache, oldest position first. The checker decodes a
    sequence in steps (a prefill of 4, two single tokens, a chunk of 3) through the
    function's own caches and compares every step with a full causal pass
    (:func:`buggy_cached_attention` with its bug fixed). The bug left in and another likely
    mistake are named."""
    g = _gen(515)
    B, d, total = 2, 4, 9
    q, k, v = (torch.randn(B, total, d, generator=g, dtype=torch.float64) for _ in "qkv")
    full = scaled_dot_product_attention(q, k, v, causal_mask(total))
    k_cache = torch.zeros(B, 0, d, dtype=torch.float64)
    v_cache = torch.zeros(B, 0, d, dtype=torch.float64)
    start = 0
    for size in (4, 1, 1, 3):
        stop = start + size
        args = (q[:, start:stop], k[:, start:stop], v[:, start:stop], k_cache, v_cache)
        case = _("{size} new position(s) after {start} cached", size=size, start=start)
        got_out, got_k, got_v = _as_triple(call_answer(answer, *args), case)
        expect_close(
            got_out,
            full[:, start:stop],
            case=f"{case} (out)",
            atol=1e-9,
            rtol=1e-9,
            mistakes=_cache_order_mistakes(args),
        )
        _expect_grown_cache(got_k, got_v, k, v, start, stop, case)
        # carry the reader's own cache forward: a fix that only looks right for one step
        # meets its own cache again at the next
        k_cache = torch.as_tensor(got_k, dtype=torch.float64)
        v_cache = torch.as_tensor(got_v, dtype=torch.float64)
        start = stop


# -- Find the bug: heads merged in the wrong order -------------------------------------


def buggy_heads(x: torch.Tensor, layer: MultiHeadAttention) -> torch.Tensor:
    """The function of "find the bug: heads merged in the wrong order", with one planted
    bug: ``layer``'s self-attention written out by hand (no mask), ``(B, n, d) -> (B, n, d)``."""
    B, n, d = x.shape
    h = layer.num_heads
    q, k, v = layer.qkv(x).split(d, dim=-1)
    q, k, v = (split_heads(t, h) for t in (q, k, v))  # (B, h, n, d_head)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d // h)
    weights = torch.softmax(scores, dim=-1)
    return layer.out((weights @ v).reshape(B, n, d))


def _heads_attention(x, layer, *, scale: float | None = None, merge: str = "right"):
    """``layer``'s self-attention written out, with a chosen scale and way of merging."""
    B, n, d = x.shape
    h = layer.num_heads
    q, k, v = layer.qkv(x).split(d, dim=-1)
    q, k, v = (split_heads(t, h) for t in (q, k, v))
    scale = (d // h) ** -0.5 if scale is None else scale
    out = torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1) @ v  # (B, h, n, dh)
    merged = out.reshape(B, n, d) if merge == "reshape" else merge_heads(out)
    return layer.out(merged)


def _seeded_layer(d_model: int, num_heads: int, seed: int):
    torch.manual_seed(seed)  # the checker's own layers; the reader's RNG is restored below
    return MultiHeadAttention(d_model, num_heads).double().eval()


@checker("merge-bug", "heads merged in the wrong order")
def check_heads_fixed(answer) -> None:
    """``answer(x, layer)`` must return ``layer``'s self-attention output ``(B, n, d_model)``
    (no mask), as ``layer(x)``: :func:`buggy_heads` with its bug fixed. Some cases hide
    the bug; the bug left in and another likely mistake are named."""
    state = torch.random.get_rng_state()
    try:
        cases = [
            (B, n, d, h, _seeded_layer(d, h, 50 + d + h))
            for B, n, d, h in ((2, 5, 12, 1), (2, 5, 18, 3), (1, 7, 24, 3), (3, 4, 32, 8))
        ]
    finally:
        torch.random.set_rng_state(state)
    with torch.no_grad():
        for B, n, d, h, layer in cases:
            x = torch.randn(B, n, d, generator=_gen(n * 10 + d), dtype=torch.float64) * 2
            expected = layer(x)
            mistakes = {
                _(
                    "the bug is still there: (B, h, n, d_head) reshaped straight to (B, n, d) "
                    "cuts the heads' outputs into rows that mix positions"
                ): _heads_attention(x, layer, merge="reshape"),
                _(
                    "the merge is right now, but the scale changed: the scores are scaled by "
                    "sqrt(d_model) = sqrt({d}), while each head's scores are dot products of "
                    "d_head = {value} numbers",
                    d=d,
                    value=d // h,
                ): _heads_attention(x, layer, scale=d**-0.5),
            }
            got = call_answer(answer, x.clone(), layer)
            expect_close(
                got,
                expected,
                case=f"B={B}, n={n}, d_model={d}, h={h}",
                atol=1e-9,
                rtol=1e-9,
                mistakes=mistakes,
            )


# -- Build: a decoding loop with a cache -----------------------------------------------


def _tiny_lm(seed: int = 0):
    from ..models import MiniGPT

    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = MiniGPT(11, d_model=16, num_heads=2, num_layers=2, max_len=24)
    finally:
        torch.random.set_rng_state(state)
    return model.double().eval()


@torch.no_grad()
def _wrong_decode(model, prompt, steps: int, how: str) -> torch.Tensor | None:
    """What a decoding loop with a named mistake returns (``None`` if it crashes)."""
    seq = prompt
    caches = model.decoder.new_caches()
    try:
        if how == "no_prefill":  # only the last prompt token goes into the empty cache
            new = prompt[:, -1:]
        else:
            new = prompt
        for _ in range(steps):
            if how == "fresh_cache":  # a new cache at every step: no memory of the past
                caches = model.decoder.new_caches()
                new = seq[:, -1:] if seq.shape[1] > prompt.shape[1] else prompt
            if how == "whole_sequence":  # the whole sequence again, into the cache
                new = seq
            logits = model(new, caches=caches)[:, -1]
            nxt = logits.argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
            new = nxt
    except Exception:
        return None
    return seq


def _counting_copy(model):
    """A copy of ``model`` that appends to ``fed`` the positions each forward pass reads, and
    to ``fed.cached`` how many positions its caches already held then."""
    fed = _Fed()
    cached: list[int] = []
    fed.cached = cached

    class Counting(type(model)):
        def forward(self, ids, **kwargs):
            caches = kwargs.get("caches")
            held = max((_held(c) for c in caches or ()), default=0)
            fed.append(ids.shape[1])
            cached.append(held)
            return super().forward(ids, **kwargs)

    counting = copy.deepcopy(model)
    counting.__class__ = Counting
    return counting, fed


def _held(cache) -> int:
    """Positions a layer's cache holds (a ``KVCache``, or a dict of them by role)."""
    if isinstance(cache, dict):
        return max((_held(c) for c in cache.values()), default=0)
    try:
        return len(cache)
    except TypeError:
        return 0


class _Fed(list):
    """The positions each forward pass read (``cached``: what its caches held before)."""

    cached: list[int]


def _fed_again(fed: _Fed) -> tuple[int, int] | None:
    """``(positions fed, positions the caches held)`` of the first call that fed more than
    one position into caches already holding some: the whole sequence fed again."""
    for n, held in zip(fed, fed.cached):
        if held > 0 and n > 1:
            return n, held
    return None


def _whole_again() -> str:
    return _(
        "the whole sequence went into the model again although its caches already "
        "held all of it but the newest token"
    )


def _call_decode(answer, counting, prompt, steps: int, fed: _Fed, case: str) -> torch.Tensor:
    """The reader's ids as a tensor, naming a model that refused positions fed twice."""
    try:
        got = call_answer(answer, counting, prompt.clone(), steps)
    except AnswerRaised as err:
        again = _fed_again(fed)
        if again is None:
            raise
        # The model's own error (too many positions) hides the mistake: name it.
        raise Mismatch(
            _(
                "case {case}: {whole}: a call fed {value} positions into caches holding "
                "{value2}, so positions were cached twice, until the model refused ({type})",
                case=case,
                whole=_whole_again(),
                value=again[0],
                value2=again[1],
                type=type(err.error).__name__,
            )
        ) from None
    try:
        return torch.as_tensor(got)
    except Exception:
        raise Mismatch(
            _("case {case}: return a tensor of ids (B, p + steps)", case=case)
        ) from None


def _decode_mistakes(model, prompt, steps: int) -> dict:
    """What the likely wrong decoding loops return, by diagnosis (``None``: it crashes)."""
    return {
        _("you did not prefill: only the prompt's last token went into the empty cache"): (
            _wrong_decode(model, prompt, steps, "no_prefill")
        ),
        _("you made a new cache at every step, so each new token sees only itself"): (
            _wrong_decode(model, prompt, steps, "fresh_cache")
        ),
    }


def _expect_decode_shape(got: torch.Tensor, B: int, p: int, steps: int, case: str) -> None:
    if tuple(got.shape) == (B, p) or tuple(got.shape) == (B, steps):
        raise Mismatch(
            _(
                "case {case}: return the prompt followed by the {steps} new tokens, shape "
                "{value}; got {shape}",
                case=case,
                steps=steps,
                value=(B, p + steps),
                shape=tuple(got.shape),
            )
        )
    expect_true(
        tuple(got.shape) == (B, p + steps),
        _(
            "case {case}: expected ids of shape {value}, got {shape}",
            case=case,
            value=(B, p + steps),
            shape=tuple(got.shape),
        ),
    )


def _expect_fed_once(fed: _Fed, case: str) -> None:
    again = _fed_again(fed)
    if again is not None:
        raise Mismatch(
            _(
                "case {case}: {whole}: a call fed {value} positions into caches holding "
                "{value2}, so those positions were cached twice",
                case=case,
                whole=_whole_again(),
                value=again[0],
                value2=again[1],
            )
        )


def _diagnose_decode(got: torch.Tensor, expected: torch.Tensor, mistakes: dict, case: str):
    """The Mismatch for wrong ids ``got``: a named mistake, or the first wrong token."""
    for diagnosis, wrong in mistakes.items():
        if wrong is not None and torch.equal(got.long(), wrong):
            return Mismatch(_("case {case}: {diagnosis}", case=case, diagnosis=diagnosis))
    bad = (got.long() != expected).nonzero()[0].tolist()
    return Mismatch(
        _(
            "case {case}: token {bad} should be {value}, got {value2}",
            case=case,
            bad=tuple(bad),
            value=int(expected[tuple(bad)]),
            value2=int(got[tuple(bad)]),
        )
    )


def _expect_no_recompute(fed: _Fed, p: int, steps: int, case: str) -> None:
    expect_true(
        sum(fed) <= p + steps,
        _(
            "case {case}: right tokens, but your model read {fed} positions in {fed2} calls: "
            "with a cache it needs only the prompt once, then one new token per step "
            "({value} positions in all); you recomputed the prefix",
            case=case,
            fed=sum(fed),
            fed2=len(fed),
            value=p + steps - 1,
        ),
    )


@checker("decode-loop", "a decoding loop with a KV cache")
def check_decode_loop(answer) -> None:
    """``answer(model, prompt, steps)`` must continue ``prompt`` ``(B, p)`` greedily by
    ``steps`` tokens with the model's KV caches and return ``(B, p + steps)`` ids, equal to
    ``model.generate(prompt, steps, greedy=True, use_cache=False)``, feeding each token
    through the model once. Named mistakes: no prefill, a fresh cache every step, the whole
    sequence fed again into the cache, recomputing without the cache."""
    for seed, B, p, steps in ((0, 1, 5, 8), (1, 2, 3, 10), (2, 1, 1, 6)):
        model = _tiny_lm(seed)
        prompt = torch.randint(0, 11, (B, p), generator=_gen(seed + 7))
        expected = model.generate(prompt, steps, greedy=True, use_cache=False)
        counting, fed = _counting_copy(model)
        case = _("batch {B}, prompt of {p} tokens, {steps} steps", B=B, p=p, steps=steps)
        got = _call_decode(answer, counting, prompt, steps, fed, case)
        mistakes = _decode_mistakes(model, prompt, steps)
        _expect_decode_shape(got, B, p, steps, case)
        _expect_fed_once(fed, case)
        if not torch.equal(got.long(), expected):
            raise _diagnose_decode(got, expected, mistakes, case)
        _expect_no_recompute(fed, p, steps, case)


# -- Predict, then run: the size of the cache ------------------------------------------


def lm_cache_bytes(
    num_layers: int, d_model: int, prompt_len: int, new_tokens: int, bytes_per_number: int
) -> int:
    """Bytes held by the self-attention KV caches after greedy or sampled generation.

    The prompt's ``prompt_len`` positions and every generated token but the last (which is
    returned, never fed back) are cached: ``2 x layers x d_model x (p + T - 1) x bytes``.
    """
    return 2 * num_layers * d_model * (prompt_len + new_tokens - 1) * bytes_per_number


def _as_byte_count(prediction, case: str):
    """``prediction`` as a plain number (a one-element tensor's item), or a Mismatch."""
    if isinstance(prediction, torch.Tensor) and prediction.numel() == 1:
        prediction = prediction.item()
    if isinstance(prediction, bool) or not isinstance(prediction, numbers.Real):
        raise Mismatch(
            _(
                "case {case}: write a number of bytes, got {prediction}",
                case=case,
                prediction=f"{prediction!r:.60}",
            )
        )
    return prediction


def _cache_size_mistakes(expected: int, L: int, d: int, num_heads: int, p: int, T: int, nb: int):
    """``{wrong size: diagnosis}``: the likely wrong predictions of the caches' bytes."""
    return {
        expected // 2: _(
            "half the right size: the cache holds keys AND values, in every one of the {L} layers",
            L=L,
        ),
        2 * L * d * (p + T) * nb: _(
            "one position too many: the last generated token is "
            "returned but never fed back, so the cache holds p + T - 1 positions"
        ),
        2 * L * d * (T - 1) * nb: _(
            "you left out the prompt: its positions are cached too (by the prefill)"
        ),
        2 * L * d * T * nb: _(
            "you counted only the generated tokens: the prompt's positions "
            "are cached too, and the last token is never fed back (p + T - 1 positions)"
        ),
        expected * num_heads: _(
            "too large by the number of heads: the {num_heads} heads of d_head = {value} "
            "together make d_model = {d} numbers per position",
            num_heads=num_heads,
            value=d // num_heads,
            d=d,
        ),
        expected * 8: _("that is bits: divide by 8 for bytes"),
    }


@checker("predict-cache", "the size of the language model's cache")
def check_cache_prediction(
    prediction,
    *,
    num_layers: int = 2,
    d_model: int = 48,
    num_heads: int = 4,
    prompt_len: int = 8,
    new_tokens: int = 56,
    bytes_per_number: int = 4,
) -> None:
    """``prediction`` (a number, bytes) must equal the bytes the KV caches of a decoder with
    ``num_layers`` layers of width ``d_model`` hold after generating ``new_tokens`` tokens
    from a ``prompt_len``-token prompt, batch 1. The likely mistakes are named; a wrong
    prediction is never told the right value."""
    L, d, p, T, nb = num_layers, d_model, prompt_len, new_tokens, bytes_per_number
    expected = lm_cache_bytes(L, d, p, T, nb)
    case = _(
        "{L} layers, d_model = {d}, {num_heads} heads, prompt {p}, {T} new tokens, {nb} bytes "
        "per number",
        L=L,
        d=d,
        num_heads=num_heads,
        p=p,
        T=T,
        nb=nb,
    )
    prediction = _as_byte_count(prediction, case)
    mistakes = _cache_size_mistakes(expected, L, d, num_heads, p, T, nb)
    if prediction == expected:
        return
    for value, diagnosis in mistakes.items():
        if prediction == value:
            raise Mismatch(_("case {case}: {diagnosis}", case=case, diagnosis=diagnosis))
    ratio = prediction / expected if expected else float("nan")
    raise Mismatch(
        _(
            "case {case}: your prediction {prediction} is {ratio} times the size the caches "
            "hold; count what each cached position stores, in every layer",
            case=case,
            prediction=f"{prediction!r}",
            ratio=f"{ratio:.3g}",
        )
    )


# -- Predict, then run: the blocks of a paged cache ------------------------------------


@checker("predict-blocks", "the blocks of a paged cache")
def check_block_prediction(
    prediction, *, lengths: tuple[int, ...] = (100, 16, 17), block_size: int = 16
) -> None:
    """``prediction`` (a number) must equal the blocks a paged KV cache with blocks of
    ``block_size`` positions takes for sequences of the given ``lengths``. The likely
    mistakes are named; a wrong prediction is never told the right value."""
    expected = sum(-(-n // block_size) for n in lengths)
    case = _(
        "sequences of {value} positions, blocks of {block_size}",
        value=", ".join(map(str, lengths)),
        block_size=block_size,
    )
    if isinstance(prediction, torch.Tensor) and prediction.numel() == 1:
        prediction = prediction.item()
    if isinstance(prediction, bool) or not isinstance(prediction, numbers.Real):
        raise Mismatch(
            _(
                "case {case}: write a number of blocks, got {prediction}",
                case=case,
                prediction=f"{prediction!r:.60}",
            )
        )
    if prediction == expected:
        return
    mistakes = {
        sum(n // block_size for n in lengths): _(
            "you rounded down: a partly filled block is "
            "still a whole block, taken by its sequence alone"
        ),
        -(-sum(lengths) // block_size): _(
            "you pooled the sequences: blocks are never shared, "
            "each sequence takes whole blocks of its own"
        ),
        sum(n // block_size + 1 for n in lengths): _(
            "one block too many for a sequence that fills its blocks exactly: {block_size} "
            "positions fit in one block of {block_size}",
            block_size=block_size,
        ),
    }
    for value, diagnosis in mistakes.items():
        if prediction == value and value != expected:
            raise Mismatch(_("case {case}: {diagnosis}", case=case, diagnosis=diagnosis))
    raise Mismatch(
        _(
            "case {case}: {prediction} blocks is not it; count the blocks of each sequence "
            "before running the next cell",
            case=case,
            prediction=f"{prediction!r}",
        )
    )
