"""Checkers for chapter 5's exercises (multi-head attention, cross-attention, the KV cache,
decoding).

Each checker runs the reader's answer on several cases, edge cases included,
and prints one line: passed, not attempted yet, or the first case that failed
with expected vs got. None of them raises.
"""

from __future__ import annotations

import torch

from ..efficient.decoding import partial_attention
from ..multihead import kv_cache_bytes, merge_heads, mha_param_count, split_heads
from ._core import Mismatch, call_answer, checker, expect_close, expect_int, expect_true

__all__ = [
    "check_split_heads",
    "check_merge_heads",
    "check_cross_projections",
    "check_cache_bytes",
    "check_param_count",
    "check_merge_states",
    "check_decode_mask",
]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@checker("5.1", "split into heads")
def check_split_heads(answer) -> None:
    """``answer(x, h)`` for ``x (B, n, d)`` must return ``(B, h, n, d // h)`` where head ``j``
    holds features ``j * d_head .. (j + 1) * d_head - 1`` of every position."""
    for B, n, d, h in ((2, 5, 12, 3), (1, 1, 8, 2), (3, 4, 6, 1), (2, 3, 8, 8), (1, 6, 6, 3)):
        x = torch.randn(B, n, d, generator=_gen(B * 100 + n * 10 + h), dtype=torch.float64)
        expect_close(
            call_answer(answer, x.clone(), h),
            split_heads(x, h),
            case=f"B={B}, n={n}, d={d}, h={h}",
            atol=0,
            rtol=0,
        )


@checker("5.2", "concatenate the heads")
def check_merge_heads(answer) -> None:
    """``answer(x)`` for ``x (B, h, n, d_head)`` must return ``(B, n, h * d_head)``: for each
    position, head 0's features, then head 1's, and so on."""
    for B, h, n, dh in ((2, 3, 5, 4), (1, 1, 1, 8), (3, 4, 2, 2), (1, 2, 6, 3)):
        x = torch.randn(B, h, n, dh, generator=_gen(B + h + n + dh), dtype=torch.float64)
        expect_close(
            call_answer(answer, x.clone()),
            merge_heads(x),
            case=f"B={B}, h={h}, n={n}, d_head={dh}",
            atol=0,
            rtol=0,
        )


@checker("5.3", "cross-attention from one fused weight")
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
            f"case B={B}, n={n}, m={m}, d={d}: return a tuple (q, k, v)",
        )
        for name, g_, e in zip("qkv", got, expected):
            expect_close(g_, e, case=f"{name}, B={B}, n={n}, m={m}, d={d}", atol=1e-9, rtol=1e-9)


@checker("5.4", "the size of a KV cache")
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
            case=f"layers={L}, heads={h}, d_head={dh}, n={n}, {nbytes} bytes, batch={B} "
            "(in bytes)",
        )


@checker("5.5", "parameters of multi-head attention")
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
        ("2 x 3 queries, 10 keys split 4 + 6", 2, 3, 10, 4, 5, 1.0, torch.float64),
        ("1 query, 8 keys split 1 + 7", 1, 1, 8, 1, 4, 2.0, torch.float64),
        (
            "4 queries, 12 keys split 6 + 6, scores above 300, float32",
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
            "3 queries, part a sees no key of query 1 (lse -inf)",
            (out_a, lse_a, out_b, lse_b),
            (full, lse),
        )
    )
    return cases


@checker("5.6", "merge two partial attention states")
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
            f"case {name}: return a tuple (out, lse)",
        )
        got_out, got_lse = got
        tol = 1e-4 if out.dtype == torch.float32 else 1e-9
        if name.endswith("float32"):
            finite = all(
                torch.isfinite(torch.as_tensor(t, dtype=torch.float32)).all()
                for t in (got_out, got_lse)
            )
            expect_true(
                finite,
                f"case {name}: your result has inf or NaN: exp(lse) overflowed. Never "
                "form exp(lse_i) itself: use torch.logaddexp(lse_a, lse_b), or subtract "
                "the larger lse before exponentiating",
            )
        if not _matches(got_out, out):
            w_a, w_b = (torch.exp(t - lse).unsqueeze(-1) for t in (lse_a, lse_b))
            named = (
                (
                    (out_a + out_b) / 2,
                    "you averaged the outputs; each part weighs by its share of the "
                    "softmax mass, exp(lse_i - lse)",
                ),
                (
                    out_a + out_b,
                    "you forgot to rescale by exp(lse_i - lse): each part's output is "
                    "normalised over its own keys only",
                ),
                (
                    torch.exp(lse_a).unsqueeze(-1) * out_a
                    + torch.exp(lse_b).unsqueeze(-1) * out_b,
                    "you weighted by exp(lse_i) but did not divide by the total "
                    "exp(lse): the weights must be exp(lse_i - lse)",
                ),
                (w_b * out_a + w_a * out_b, "you swapped the weights of the two parts"),
            )
            for candidate, message in named:
                if _matches(got_out, torch.nan_to_num(candidate)):
                    raise Mismatch(f"case {name}: {message}")
            expect_close(got_out, out, case=f"{name} (out)", atol=tol, rtol=tol)
        if not _matches(got_lse, lse):
            named_lse = (
                (
                    lse_a + lse_b,
                    "the lse of the union is log(exp(lse_a) + exp(lse_b)), not lse_a + lse_b",
                ),
                (
                    torch.maximum(lse_a, lse_b),
                    "you kept the larger lse; the union's lse is "
                    "log(exp(lse_a) + exp(lse_b)) (torch.logaddexp)",
                ),
            )
            for candidate, message in named_lse:
                if _matches(got_lse, candidate):
                    raise Mismatch(f"case {name}: {message}")
            expect_close(got_lse, lse, case=f"{name} (lse)", atol=tol, rtol=tol)


@checker("5.7", "the decoding mask")
def check_decode_mask(answer) -> None:
    """``answer(n, m)`` must return the bool causal mask ``(n, m)`` (True = may attend) of
    ``n`` new queries against ``m`` keys, the cached ones first: the queries are the last
    ``n`` positions, so query ``i`` sees keys ``j <= i + m - n`` (bottom-right alignment).
    Named mistakes: top-left alignment, an inverted mask, a query that cannot see its own
    key or that sees the next one, no causality among the new queries, not bool."""
    for n, m in ((1, 8), (3, 8), (4, 4), (2, 5), (1, 1), (5, 9)):
        case = f"n={n} new queries, m={m} keys"
        i = torch.arange(n)[:, None]
        j = torch.arange(m)[None, :]
        expected = j <= i + (m - n)
        got = call_answer(answer, n, m)
        if not isinstance(got, torch.Tensor):
            try:
                got = torch.as_tensor(got)
            except Exception:
                raise Mismatch(
                    f"case {case}: return a bool tensor (n, m), got {type(got).__name__}"
                ) from None
        expect_true(
            tuple(got.shape) == (n, m),
            f"case {case}: expected shape {(n, m)}, got {tuple(got.shape)}",
        )
        expect_true(
            got.dtype == torch.bool,
            f"case {case}: return a bool mask (True = may attend), got dtype {got.dtype}",
        )
        if torch.equal(got, expected):
            continue
        named = (
            (
                j <= i,
                "you aligned the causal mask top-left, so the new token cannot see the "
                "cache: query i is position i + m - n, not position i",
            ),
            (~expected, "True must mean may attend; your mask marks the blocked keys"),
            (j < i + (m - n), "each new query must see its own key (j = i + m - n)"),
            (j <= i + (m - n) + 1, "query i sees the key after its own position"),
            (
                torch.ones(n, m, dtype=torch.bool),
                "the earlier new queries must not see the later new ones",
            ),
        )
        for candidate, message in named:
            if torch.equal(got, candidate):
                raise Mismatch(f"case {case}: {message}")
        bad = (got != expected).nonzero()[0].tolist()
        raise Mismatch(f"case {case}: entry {tuple(bad)} should be {bool(expected[tuple(bad)])}")
