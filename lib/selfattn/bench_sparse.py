"""Chapter 13's benchmark: learned sparse attention's time against n, beside full attention.

``python -m selfattn.bench_sparse`` times, for ``n`` in :data:`SIZES` (one sequence, width 256,
4 heads of 64, one CPU thread, forward, no gradient), four causal layers that share the same
projections (those of a :class:`~selfattn.learned_sparse.NativeSparseAttention`):

* ``sdpa``: full causal attention, torch's SDPA (its fused kernel);
* ``window``: :func:`~selfattn.efficient.sliding_window.sliding_window_attention`, the last
  :data:`WINDOW` tokens;
* ``nsa``: :class:`~selfattn.learned_sparse.NativeSparseAttention` (blocks of 16, 2 selected,
  a window of 32: about 64 tokens per query, plus the compressed blocks);
* ``dsa``: :class:`~selfattn.learned_sparse.DeepSeekSparseAttention` (its indexer's top 64).

The book's NSA and DSA are reference PyTorch: they build ``(n, n)`` masks and compute every
score before masking, so their time grows as ``n^2`` like full attention's, with a larger
constant; the papers' speed comes from kernels that gather only the selected blocks or tokens.
Times are CPU time (this process's, less disturbed by other programs than wall time), the
best of a few rounds. The table goes to ``chapters/results/bench_sparse.json`` (about a minute
on an idle machine; not part of ``make bench``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from .bench import fit_slope, machine_info, timeit
from .efficient.sliding_window import sliding_window_attention
from .learned_sparse import DeepSeekSparseAttention, NativeSparseAttention

__all__ = ["run_sparse", "main", "DEFAULT_OUT", "SIZES", "WINDOW", "METHODS"]

#: Where the table goes in a checkout of the book.
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "chapters" / "results" / "bench_sparse.json"
#: The sequence lengths timed.
SIZES = (256, 512, 1024, 2048)
#: The sliding window's tokens, and DSA's top-k.
WINDOW = 64
#: The layers timed, in the table's order.
METHODS = ("sdpa", "window", "nsa", "dsa")
D_MODEL, HEADS = 256, 4


def _layers() -> dict:
    """Each method's ``x -> y`` on ``(1, n, D_MODEL)``, the four sharing NSA's projections."""
    torch.manual_seed(0)
    nsa = NativeSparseAttention(D_MODEL, HEADS, block_size=16, num_selected=2, window=32)
    dsa = DeepSeekSparseAttention(D_MODEL, HEADS, top_k=WINDOW)
    dsa.qkv, dsa.out_proj = nsa.qkv, nsa.out_proj

    def sdpa(x):
        q, k, v, _, _ = nsa._project(x, None)
        return nsa._merge(F.scaled_dot_product_attention(q, k, v, is_causal=True))

    def window(x):
        q, k, v, _, _ = nsa._project(x, None)
        return nsa._merge(sliding_window_attention(q, k, v, WINDOW, causal=True))

    return {"sdpa": sdpa, "window": window, "nsa": nsa, "dsa": dsa}


def run_sparse(sizes=SIZES, *, rounds: int = 3) -> dict:
    """Time the four layers at each ``n`` of ``sizes``; returns the report."""
    torch.set_num_threads(1)
    layers = _layers()
    rows = []
    with torch.no_grad():
        for n in sizes:
            x = torch.randn(1, n, D_MODEL, generator=torch.Generator().manual_seed(n))
            fns = [lambda f=layers[m], x=x: f(x) for m in METHODS]
            times = timeit(fns, rounds=rounds, clock="cpu")
            rows += [{"method": m, "n": n, "cpu_s": t} for m, t in zip(METHODS, times)]
            print(f"n={n}: " + ", ".join(f"{m} {t:.4f} s" for m, t in zip(METHODS, times)))
    slopes = {m: fit_slope(sizes, [r["cpu_s"] for r in rows if r["method"] == m]) for m in METHODS}
    return {
        "sizes": list(sizes),
        "d_model": D_MODEL,
        "heads": HEADS,
        "window": WINDOW,
        "nsa": {"block_size": 16, "num_selected": 2, "window": 32},
        "dsa": {"top_k": WINDOW, "index_heads": 4, "index_dim": 32},
        "threads": 1,
        "clock": "cpu",
        "rounds": rounds,
        "torch": torch.__version__,
        "machine": machine_info(),
        "rows": rows,
        "slopes": slopes,
    }


def main(argv: list[str] | None = None) -> dict:
    """``python -m selfattn.bench_sparse [--sizes N ...] [--out FILE]``: run, write the table."""
    p = argparse.ArgumentParser(prog="python -m selfattn.bench_sparse", description=__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    report = run_sparse(args.sizes, rounds=args.rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print("slopes (time ~ n^p): " + ", ".join(f"{m} {s:.2f}" for m, s in report["slopes"].items()))
    return report


if __name__ == "__main__":
    main()
