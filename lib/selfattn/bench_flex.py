"""Chapter 12's benchmark: compiled FlexAttention against the fraction of tiles it computes.

``python -m selfattn.bench --flex`` (or ``python -m selfattn.bench_flex``) times, at
``n = 8192`` (4 heads of 64, one CPU thread), the sliding window, BigBird and document
patterns three ways: compiled FlexAttention with their ``BlockMask``, torch's SDPA with the
same mask as a dense ``(n, n)`` bool tensor, and (for the window) the book's own
:func:`~selfattn.efficient.sliding_window.sliding_window_attention`; causal SDPA beside them.
Compile time is measured separately (the first call of each shape), and eager FlexAttention's
peak memory at a few sizes in a child process (it materialises the ``h x n x m`` scores). The
results go to ``chapters/results/ch12_bench.json`` with the two targets of issue 48.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from . import flex as fx
from .bench import _reset_peak, _status_kib, machine_info, timeit
from .efficient.sliding_window import sliding_window_attention
from .efficient.sparse import bigbird_layout, block_sparse_mask
from .masks import sliding_window_mask

__all__ = ["run_flex", "main", "DEFAULT_OUT"]

#: Where the table goes in a checkout of the book.
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "chapters" / "results" / "ch12_bench.json"
HEADS, D_HEAD, WINDOW, BLOCK = 4, 64, 256, 128


def _documents(n: int, seed: int = 0) -> list[int]:
    """Document lengths that fill ``n`` positions (between 1/32 and 1/4 of n each)."""
    g = torch.Generator().manual_seed(seed)
    lengths, left = [], n
    while left > 0:
        size = int(torch.randint(n // 32, n // 4 + 1, (1,), generator=g))
        lengths.append(min(size, left))
        left -= lengths[-1]
    return lengths


def _patterns(n: int) -> dict:
    """Each pattern's ``mask_mod`` and dense bool mask ``(n, n)``."""
    layout = bigbird_layout(math.ceil(n / BLOCK), generator=torch.Generator().manual_seed(0))
    doc_ids, _ = fx.pack_documents(_documents(n))
    same = doc_ids[:, None] == doc_ids[None, :]
    return {
        "window": (fx.sliding_window(WINDOW), sliding_window_mask(n, WINDOW)),
        "bigbird": (fx.bigbird(layout, BLOCK), block_sparse_mask(n, BLOCK, layout)),
        "document": (fx.document(doc_ids), same & torch.ones(n, n, dtype=torch.bool).tril()),
    }


def _time_pattern(name: str, mask_mod, dense, q, k, v, rounds: int) -> dict:
    """One pattern's row: compiled FlexAttention, dense-masked SDPA (and the book's window)."""
    bm = fx.block_mask(mask_mod, q.shape[-2], block_size=BLOCK)
    t0 = time.perf_counter()
    out = fx.flex(q, k, v, block_mask=bm, compiled=True)  # compiles this shape
    first = time.perf_counter() - t0
    flex_s = timeit(lambda: fx.flex(q, k, v, block_mask=bm, compiled=True), rounds=rounds)
    sdpa_s = timeit(lambda: F.scaled_dot_product_attention(q, k, v, dense), rounds=rounds)
    diff = float((out - F.scaled_dot_product_attention(q, k, v, dense)).abs().max())
    row = {
        "pattern": name,
        "block_fraction": fx.block_fraction(bm),
        "pair_fraction": float(dense.float().mean()),
        "flex_s": flex_s,
        "sdpa_dense_s": sdpa_s,
        "compile_s": max(first - flex_s, 0.0),
        "max_abs_diff": diff,
    }
    if name == "window":
        row["book_window_s"] = timeit(
            lambda: sliding_window_attention(q, k, v, WINDOW), rounds=rounds
        )
    return row


def _targets(window: dict) -> list[dict]:
    """Issue 48's two targets, judged on the window row."""
    return [
        {
            "target": "flex window >= 10x faster than dense-masked SDPA",
            "value": window["sdpa_dense_s"] / window["flex_s"],
            "met": window["sdpa_dense_s"] / window["flex_s"] >= 10,
        },
        {
            "target": "flex window <= 1.5x the book's sliding_window_attention",
            "value": window["flex_s"] / window["book_window_s"],
            "met": window["flex_s"] / window["book_window_s"] <= 1.5,
        },
    ]


def run_flex(n: int = 8192, *, rounds: int = 3, memory_sizes=(1024, 2048, 4096)) -> dict:
    """Time the three patterns at ``n``; returns the report (see the module docstring)."""
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, n, D_HEAD, generator=g) for _ in range(3))
    with torch.no_grad():
        causal_s = timeit(
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), rounds=rounds
        )
        rows = [
            _time_pattern(name, mask_mod, dense, q, k, v, rounds)
            for name, (mask_mod, dense) in _patterns(n).items()
        ]
    return {
        "n": n,
        "heads": HEADS,
        "d_head": D_HEAD,
        "window": WINDOW,
        "block": BLOCK,
        "threads": 1,
        "torch": torch.__version__,
        "machine": machine_info(),
        "sdpa_causal_s": causal_s,
        "patterns": rows,
        "eager_memory": [_eager_memory(size) for size in memory_sizes],
        "targets": _targets(rows[0]),
    }


def _eager_memory(n: int) -> dict:
    """Eager FlexAttention's peak memory above its inputs at ``n`` (a child process)."""
    cmd = [sys.executable, "-m", "selfattn.bench_flex", "--memory-child", str(n)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["scores_mib"] = HEADS * n * n * 4 / 2**20  # one float32 score matrix per head
    return row


def _memory_child(n: int) -> dict:
    torch.set_num_threads(1)
    q, k, v = (torch.randn(1, HEADS, n, D_HEAD) for _ in range(3))
    bm = fx.block_mask(fx.sliding_window(WINDOW), n, block_size=BLOCK)
    with torch.no_grad():
        fx.flex(q[:, :, :8], k[:, :, :8], v[:, :, :8])  # load what the call needs
        reset = _reset_peak()
        before = _status_kib("VmHWM" if reset else "VmRSS")
        fx.flex(q, k, v, block_mask=bm)
        after = _status_kib("VmHWM")
    return {"n": n, "peak_mib": (after - before) / 1024 if after and before else None}


def main(argv: list[str] | None = None) -> dict | None:
    """``python -m selfattn.bench_flex [--n N] [--out FILE]``: run and write the table."""
    p = argparse.ArgumentParser(prog="python -m selfattn.bench_flex", description=__doc__)
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.memory_child:
        print(json.dumps(_memory_child(args.memory_child)))
        return None
    report = run_flex(args.n)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for t in report["targets"]:
        print(f"{'met ' if t['met'] else 'MISS'} {t['target']}: {t['value']:.2f}")
    return report


if __name__ == "__main__":
    main()
