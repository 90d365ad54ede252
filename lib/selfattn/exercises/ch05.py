"""Checkers for chapter 5's exercises (multi-head attention, cross-attention, the KV cache).

Each checker runs the reader's answer on several cases, edge cases included,
and prints one line: passed, not attempted yet, or the first case that failed
with expected vs got. None of them raises.
"""

from __future__ import annotations

import torch

from ..multihead import kv_cache_bytes, merge_heads, mha_param_count, split_heads
from ._core import call_answer, checker, expect_close, expect_int, expect_true

__all__ = [
    "check_split_heads",
    "check_merge_heads",
    "check_cross_projections",
    "check_cache_bytes",
    "check_param_count",
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
