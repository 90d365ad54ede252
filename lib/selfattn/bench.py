"""The benchmark harness behind ``make bench`` (chapters 7 and 8). Benchmarks are not tests.

    python -m selfattn.bench                  # CPU table -> chapters/results/bench_cpu.json
    python -m selfattn.bench --quick          # tiny sizes (harness check) -> a temp file
    python -m selfattn.bench --gpu            # GPU table (forward): Triton vs SDPA flash, bf16
    python -m selfattn.bench --threads 2      # torch threads for every case (default 1)
    python -m selfattn.bench --only linear_decode --memory-only   # merged into the file

Where it writes: ``--out FILE``. Without it, run from a checkout of the book's
repository, the results go to the repository's ``chapters/results/``; from an installed
package there is no such folder, and the command stops and asks for ``--out``.

How it measures:

* **time**: each case runs once to warm up, then ``repeats`` times; the table reports the
  median wall-clock time (and the median CPU time of the process, which is less
  disturbed when other programs share the machine). Every case uses the same torch
  thread count, so SDPA and the library's functions are compared on equal terms.
* **memory**: each case runs again in a **fresh subprocess**: build the inputs, run the
  case once (warm-up), reset the kernel's peak-RSS counter (``/proc/self/clear_refs``),
  read the resident size, run the case, and read the peak resident size (``VmHWM``, the
  OS's max-RSS). *Extra peak memory* is the difference: what the computation needed on
  top of its inputs.
* The inputs: float32, batch 1 x 4 heads x n x d = 64, seeded.
* **training** cases (``*_train``) time one forward and one backward pass (the
  gradients of q, k and v for a fixed upstream gradient); their extra peak memory is
  what the forward keeps for the backward plus what the backward needs.
* **decoding** cases time ``DECODE_TOKENS`` new tokens per call and also report the time
  per token: one query at a time against a cache of ``n`` keys and values
  (``flash_decoding``, ``sdpa_decode``, ``plain_decode``: the attention alone, cache
  fixed), or a whole :class:`~selfattn.multihead.MultiHeadAttention` layer (d_model 512,
  8 query heads) appending to its :class:`~selfattn.multihead.KVCache` (``mha_decode``:
  8 key/value heads; ``gqa_decode``: 2), with the cache's bytes from
  :func:`~selfattn.costs.kv_cache_bytes`.

The results file holds the machine (CPU model, cores), the date, the torch version, the
thread count, every case and the performance targets that chapters 7 and 8 quote, each
with whether it was met.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import importlib.util
import json
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ._checks import require_bool, require_int, require_number
from .costs import kv_cache_bytes
from .efficient import (
    LinearAttentionState,
    flash_attention,
    linear_attention,
    linear_attention_step,
    sliding_window_attention,
)
from .efficient.decoding import flash_decoding
from .efficient.delta_rule import gated_delta_rule
from .latent import MultiHeadLatentAttention
from .models.attention_decoder import attention_stack, generate
from .multihead import KVCache

# torch.utils.benchmark imports torch.utils.cpp_extension, which logs a warning on stderr
# ("No CUDA runtime is found") when torch has CUDA support but the machine has no GPU, as
# on a CPU Colab runtime; nothing here compiles an extension, so that warning is silenced.
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
import torch.utils.benchmark as benchmark  # noqa: E402

__all__ = [
    "plain_attention",
    "METHODS",
    "make_inputs",
    "timeit",
    "time_case",
    "memory_case",
    "run_cpu",
    "run_gpu",
    "fit_slope",
    "goal_met",
    "merge_results",
    "DEFAULT_OUT",
    "main",
]

HEADS, D_HEAD = 4, 64
WINDOW = 256
#: Tokens decoded per timed call in the decoding cases (time per token = call time / this).
DECODE_TOKENS = 32
#: The GQA comparison's layer: d_model, query heads, and the key/value heads of GQA.
GQA_D_MODEL, GQA_HEADS, GQA_KV_HEADS = 512, 8, 2


def _checkout_results() -> Path | None:
    """The repository's ``chapters/results/`` when this module runs from a checkout, else None."""
    root = Path(__file__).resolve().parents[2]
    folder = root / "chapters" / "results"
    if (root / "pyproject.toml").is_file() and folder.is_dir():
        return folder
    return None


#: Where ``make bench`` writes the CPU table by default: the repository's
#: ``chapters/results/bench_cpu.json`` when run from a checkout; ``None`` from an installed
#: package (the command line then asks for ``--out``).
DEFAULT_OUT = _checkout_results() / "bench_cpu.json" if _checkout_results() else None
#: The GPU table's default, next to :data:`DEFAULT_OUT` (``None`` outside a checkout).
DEFAULT_GPU_OUT = DEFAULT_OUT.with_name("bench_gpu.json") if DEFAULT_OUT else None


def plain_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Textbook attention that materialises the n x m score matrix once (softmax done in place).

    The leanest honest baseline: one ``(..., n, m)`` float matrix, no copies of it.
    Shapes: q ``(..., n, d)``, k ``(..., m, d)``, v ``(..., m, d_v)`` -> ``(..., n, d_v)``.
    """
    s = q @ k.transpose(-2, -1)
    s.mul_(1.0 / math.sqrt(q.shape[-1]))
    s.sub_(s.amax(dim=-1, keepdim=True)).exp_()
    s.div_(s.sum(dim=-1, keepdim=True))
    return s @ v


def _plain_differentiable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """plain_attention without in-place steps (autograd needs the scores it would overwrite)."""
    return torch.softmax((q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1), dim=-1) @ v


def _train_step(attention: Callable, x: dict) -> torch.Tensor:
    """One forward and one backward pass; returns the gradient of q."""
    # The harness times and measures under no_grad; a training step needs the graph.
    with torch.enable_grad():
        out = attention(x["q"], x["k"], x["v"])
        dq, _, _ = torch.autograd.grad(out, (x["q"], x["k"], x["v"]), x["grad_out"])
    return dq


def _decode_queries(attention: Callable, x: dict) -> torch.Tensor:
    """Each of the new queries ``(1, 4, 1, d)`` attends to the whole cache, one by one."""
    out = None
    for q in x["queries"]:
        out = attention(q, x["k"], x["v"])
    return out


def _layer_decode(x: dict) -> torch.Tensor:
    """The new tokens go through the layer one by one, each appended to its cache."""
    cache = x["cache"]
    # Back to the n prefilled positions (no copy), so that every call decodes against
    # the same cache instead of one that grows from call to call.
    cache.k, cache.v = x["k0"], x["v0"]
    out = None
    for t in range(x["tokens"]):
        out = x["layer"](x["new"][:, t : t + 1], cache=cache)
    return out


#: Chapter 11's MLA decode: heads, latent width, model width, tokens per timed call, and the
#: head widths (d_nope = d_v, rope_dim = width / 2, DeepSeek-V3's 128 / 64 at the top).
MLA_HEADS, MLA_KV_RANK, MLA_D_MODEL, MLA_TOKENS = 8, 512, 1024, 4
MLA_WIDTHS = (32, 64, 128)


def _mla_case(width: int, absorb: bool) -> _Case:
    how = "absorbed (W_UK in the query, W_UV after the sum)" if absorb else "up-projecting"
    return _Case(
        functools.partial(_mla_decode, absorb=absorb),
        f"{MLA_TOKENS} tokens through MultiHeadLatentAttention(d_model={MLA_D_MODEL}, "
        f"num_heads={MLA_HEADS}, kv_rank={MLA_KV_RANK}, d_nope=d_v={width}, "
        f"rope_dim={width // 2}) against a latent cache of n positions, {how}",
        "mla_decode",
    )


def _mla_decode(x: dict, absorb: bool) -> torch.Tensor:
    """Chapter 11: decode ``tokens`` new tokens against the same ``n`` cached latents."""
    cache, out = x["cache"], None
    cache.latent, cache.k_rope = x["latent0"], x["k_rope0"]
    for t in range(x["tokens"]):
        out = x["layer"](x["new"][:, t : t + 1], cache=cache, absorb=absorb)
    return out


def _mla_inputs(method: str, n: int, g: torch.Generator, seed: int) -> dict:
    width = int(method.rsplit("_d", 1)[1])
    with torch.random.fork_rng():  # the layer's seeded weights leave the global stream alone
        torch.manual_seed(seed)
        layer = MultiHeadLatentAttention(
            MLA_D_MODEL, MLA_HEADS, MLA_KV_RANK, width // 2, d_nope=width, d_v=width
        ).eval()
    cache = layer.new_cache()
    cache.append(
        torch.randn(1, n, MLA_KV_RANK, generator=g), torch.randn(1, n, width // 2, generator=g)
    )
    new = torch.randn(1, MLA_TOKENS, MLA_D_MODEL, generator=g)
    return dict(layer=layer, cache=cache, latent0=cache.latent, k_rope0=cache.k_rope, new=new)


def _linear_decode(x) -> torch.Tensor:
    """The recurrent (decoding) form: n steps that keep the state only, not the n outputs."""
    q, k, v = x["q"], x["k"], x["v"]
    state = LinearAttentionState.empty(q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype)
    out = None
    for t in range(q.shape[-2]):
        out, state = linear_attention_step(state, q[..., t, :], k[..., t, :], v[..., t, :])
    return out


# -- the cases ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Case:
    """One benchmark case: what it runs on :func:`make_inputs`' dict, and what it is."""

    run: Callable[[dict], torch.Tensor]
    description: str
    kind: str = "attention"  # or "train", "decode_queries", "layer_decode", "generate"


def _layer_case(num_kv_heads: int, label: str) -> _Case:
    kv = "" if num_kv_heads == GQA_HEADS else f", num_kv_heads={num_kv_heads}"
    return _Case(
        _layer_decode,
        f"{DECODE_TOKENS} tokens through MultiHeadAttention(d_model={GQA_D_MODEL}, "
        f"num_heads={GQA_HEADS}{kv}) appending to a KVCache of n positions "
        f"({label}, {num_kv_heads} KV heads)",
        "layer_decode",
    )


_QUERIES = f"{DECODE_TOKENS} tokens, each one query against a cache of n"
# The one registry of cases: name -> what runs and its description.
_CASES: dict[str, _Case] = {
    "plain": _Case(
        lambda x: plain_attention(x["q"], x["k"], x["v"]),
        "plain attention, n x n matrix materialised (bench.plain_attention)",
    ),
    "sdpa": _Case(
        lambda x: F.scaled_dot_product_attention(x["q"], x["k"], x["v"]),
        "torch SDPA (CPU: its fused flash kernel)",
    ),
    "flash_attention": _Case(
        lambda x: flash_attention(x["q"], x["k"], x["v"]),
        "selfattn.efficient.flash_attention (block_q=256, block_k=512)",
    ),
    "dense_masked_sdpa": _Case(
        lambda x: F.scaled_dot_product_attention(x["q"], x["k"], x["v"], attn_mask=x["mask"]),
        f"torch SDPA with a dense bool band mask (causal window {WINDOW})",
    ),
    "sliding_window": _Case(
        lambda x: sliding_window_attention(x["q"], x["k"], x["v"], WINDOW, causal=True),
        f"selfattn.efficient.sliding_window_attention (causal window {WINDOW}, band only)",
    ),
    "linear_attention": _Case(
        lambda x: linear_attention(x["q"], x["k"], x["v"]),
        "selfattn.efficient.linear_attention (non-causal, elu+1)",
    ),
    "linear_decode": _Case(
        _linear_decode,
        "causal linear attention decoded token by token with "
        "linear_attention_step, keeping only the state (S, z) and the last output",
    ),
    "kv_cache_decode": _Case(
        lambda x: generate(x["layers"], x["prompt"], x["steps"], use_cache=True),
        "selfattn.generate with KV cache (4 layers, d_model 256, 4 heads)",
        "generate",
    ),
    "no_cache_decode": _Case(
        lambda x: generate(x["layers"], x["prompt"], x["steps"], use_cache=False),
        "selfattn.generate recomputing the prefix each step",
        "generate",
    ),
    "flash_attention_train": _Case(
        lambda x: _train_step(flash_attention, x),
        "selfattn.efficient.flash_attention forward + backward "
        "(block_q=256, block_k=512; saves only the output and the row log-sum-exp)",
        "train",
    ),
    "sdpa_train": _Case(
        lambda x: _train_step(F.scaled_dot_product_attention, x),
        "torch SDPA forward + backward (CPU: its fused flash kernel)",
        "train",
    ),
    "plain_train": _Case(
        lambda x: _train_step(_plain_differentiable, x),
        "plain attention forward + backward with autograd "
        "(softmax(q k^T / sqrt(d)) v; keeps the n x n probabilities for the backward)",
        "train",
    ),
    "flash_decoding": _Case(
        lambda x: _decode_queries(flash_decoding, x),
        f"{_QUERIES}: selfattn.efficient.decoding.flash_decoding (chunk_size=1024)",
        "decode_queries",
    ),
    "sdpa_decode": _Case(
        lambda x: _decode_queries(F.scaled_dot_product_attention, x),
        f"{_QUERIES}: torch SDPA",
        "decode_queries",
    ),
    "plain_decode": _Case(
        lambda x: _decode_queries(plain_attention, x),
        f"{_QUERIES}: bench.plain_attention",
        "decode_queries",
    ),
    "mha_decode": _layer_case(GQA_HEADS, "MHA"),
    "gqa_decode": _layer_case(GQA_KV_HEADS, "GQA"),
    # Chapter 13: the gated delta rule's two forms beside causal SDPA (k L2-normalised,
    # g = log(0.9..1), beta in (0, 1)).
    "sdpa_causal": _Case(
        lambda x: F.scaled_dot_product_attention(x["q"], x["k"], x["v"], is_causal=True),
        "torch SDPA, causal (CPU: its fused flash kernel)",
    ),
    "gated_delta_recurrent": _Case(
        lambda x: gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"]),
        "selfattn.efficient.gated_delta_rule, recurrent form (one token at a time)",
    ),
    "gated_delta_chunked": _Case(
        lambda x: gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], chunk_size=64),
        "selfattn.efficient.gated_delta_rule, chunked WY/UT form (chunk_size=64)",
    ),
    # Chapter 11: MLA's decode step, up-projecting the cached latents or absorbed, by width.
    **{
        f"mla_{way}_d{w}": _mla_case(w, way == "absorbed")
        for w in MLA_WIDTHS
        for way in ("up", "absorbed")
    },
}
#: The cases the harness knows, by name.
METHODS = tuple(_CASES)


def _of_kind(kind: str) -> tuple[str, ...]:
    return tuple(name for name, case in _CASES.items() if case.kind == kind)


_TRAIN, _DECODE_QUERIES, _LAYER_DECODE = map(_of_kind, ("train", "decode_queries", "layer_decode"))


def make_inputs(method: str, n: int, *, seed: int = 0) -> dict:
    """Inputs for one case: q, k, v of shape ``(1, 4, n, 64)`` float32 (plus a mask or a model).

    For ``kv_cache_decode`` / ``no_cache_decode`` ``n`` is the number of generated tokens
    (prompt of 16); for the other decoding cases it is the length of the cache, and the
    inputs hold ``DECODE_TOKENS`` new queries (or new tokens, for the GQA layer).
    Training cases' q, k, v require grad and come with an upstream gradient ``grad_out``.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    g = torch.Generator().manual_seed(seed)
    if method in ("kv_cache_decode", "no_cache_decode"):
        return {
            "layers": attention_stack(
                num_layers=4, d_model=HEADS * D_HEAD, num_heads=HEADS, seed=seed
            ),
            "prompt": torch.randn(1, 16, HEADS * D_HEAD, generator=g),
            "steps": n,
        }
    if method in _LAYER_DECODE:
        kv_heads = GQA_KV_HEADS if method == "gqa_decode" else GQA_HEADS
        layer = attention_stack(
            num_layers=1,
            d_model=GQA_D_MODEL,
            num_heads=GQA_HEADS,
            num_kv_heads=kv_heads,
            seed=seed,
        )[0]
        d_head = GQA_D_MODEL // GQA_HEADS
        cache = KVCache()
        cache.append(
            torch.randn(1, kv_heads, n, d_head, generator=g),
            torch.randn(1, kv_heads, n, d_head, generator=g),
        )
        return {
            "layer": layer,
            "cache": cache,
            "k0": cache.k,
            "v0": cache.v,
            "new": torch.randn(1, DECODE_TOKENS, GQA_D_MODEL, generator=g),
            "tokens": DECODE_TOKENS,
        }
    x = {name: torch.randn(1, HEADS, n, D_HEAD, generator=g) for name in ("q", "k", "v")}
    if method in _DECODE_QUERIES:
        x["queries"] = list(torch.randn(DECODE_TOKENS, 1, HEADS, 1, D_HEAD, generator=g))
        x["tokens"] = DECODE_TOKENS
        del x["q"]
    if method in _TRAIN:
        for name in ("q", "k", "v"):
            x[name].requires_grad_(True)
        x["grad_out"] = torch.randn(1, HEADS, n, D_HEAD, generator=g)
    if method.startswith("mla_"):
        return {**_mla_inputs(method, n, g, seed), "tokens": MLA_TOKENS}
    if method.startswith("gated_delta"):
        x["k"] = F.normalize(x["k"], dim=-1)
        x["g"] = torch.log(0.9 + 0.1 * torch.rand(1, HEADS, n, generator=g))
        x["beta"] = torch.rand(1, HEADS, n, generator=g)
    if method == "dense_masked_sdpa":
        from .masks import sliding_window_mask

        x["mask"] = sliding_window_mask(n, WINDOW, causal=True)
    return x


def _timer_mean(timer: benchmark.Timer, number: int) -> float:
    """Seconds per call over one timing of exactly ``number`` calls.

    ``Timer.timeit(number)`` makes two untimed calls before every timing and runs at
    ``Timer``'s one thread; :func:`timeit` has warmed up already and times at the caller's
    thread count, so it runs ``Timer``'s timing loop alone (``Timer.timeit`` where a torch
    lacks it). ``tests/test_bench.py`` counts the calls.
    """
    timing_loop = getattr(timer, "_timeit", None)
    if timing_loop is None:
        return timer.timeit(number).mean
    return timing_loop(number) / number


def _do_bench(fn: Callable) -> float:
    """Seconds per call by ``triton.testing.do_bench``: its median over ~100 ms of calls."""
    import triton.testing

    return triton.testing.do_bench(fn, rep=100, return_mode="median") / 1e3


def timeit(
    fns,
    *,
    rounds: int = 5,
    number: int = 1,
    warmup: int = 1,
    clock: str = "wall",
    stat: str = "min",
    device: str | torch.device | None = None,
):
    """Seconds per call of one function, or of several timed in interleaved rounds.

    The book's one timer: chapters, :func:`time_case`, :func:`run_gpu` and
    ``tools/gpu_check.py`` use it. Each round times every function once, so a machine that
    slows down mid-way slows every function alike; the result is the best
    (``stat="min"``) or the median round. A round is ``number`` calls timed by
    ``torch.utils.benchmark.Timer`` (which also waits for the GPU), or, for
    ``device="cuda"``, ``triton.testing.do_bench`` (CUDA events, the L2 cache flushed before
    every call, as many calls as fit in 100 ms; its median), the timer of Triton's own
    benchmarks.

    Args:
        fns: a callable taking no arguments, or a sequence of them.
        rounds: timed rounds (each function once per round), at least 1.
        number: calls per timing (raise it for calls far shorter than a millisecond).
        warmup: untimed calls of each function first (caches, lazy initialisation).
        clock: ``"wall"`` (elapsed time) or ``"cpu"`` (this process's CPU time, which other
            programs sharing the machine disturb much less).
        stat: ``"min"`` or ``"median"`` over the rounds.
        device: where the functions run; ``"cuda"`` (or a CUDA device) times with
            ``triton.testing.do_bench`` (``number`` and ``clock`` are then not used);
            anything else, or a machine without Triton, with the Timer.

    Returns:
        A float for one function, a list of floats (one per function) for a sequence.
    """
    single = callable(fns)
    fns = [fns] if single else list(fns)
    if not fns or not all(callable(f) for f in fns):
        raise TypeError(f"timeit: fns must be a callable or a sequence of callables, got {fns!r}")
    rounds = require_int(rounds, "timeit: rounds", 1)
    number = require_int(number, "timeit: number", 1)
    warmup = require_int(warmup, "timeit: warmup", 0)
    clocks = {"wall": time.perf_counter, "cpu": time.process_time}
    if clock not in clocks:
        raise ValueError(f"timeit: clock must be 'wall' or 'cpu', got {clock!r}")
    if stat not in ("min", "median"):
        raise ValueError(f"timeit: stat must be 'min' or 'median', got {stat!r}")
    on_gpu = device is not None and torch.device(device).type == "cuda"
    if on_gpu and importlib.util.find_spec("triton") is not None:
        measures = [functools.partial(_do_bench, f) for f in fns]
    else:
        measures = [
            functools.partial(
                _timer_mean,
                benchmark.Timer(stmt="fn()", globals={"fn": f}, timer=clocks[clock]),
                number,
            )
            for f in fns
        ]
    for f in fns:
        for _ in range(warmup):
            f()
    rows: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for row, measure in zip(rows, measures):
            row.append(measure())
    pick = min if stat == "min" else statistics.median
    results = [float(pick(row)) for row in rows]
    return results[0] if single else results


def time_case(
    method: str, n: int, *, repeats: int = 5, warmup: int = 1, budget_s: float = 20.0
) -> dict:
    """Warm up, then time ``repeats`` runs; fewer repeats (at least 3) when one run is slow.

    Returns:
        ``{"median_s", "cpu_median_s", "times_s", "cpu_times_s"}``; the decoding cases
        that decode several tokens per call add ``"per_token_s"`` and
        ``"cpu_per_token_s"`` (the medians divided by the number of tokens).
    """
    budget_s = require_number(budget_s, "budget_s", positive=True)
    fn = _CASES[method].run
    x = make_inputs(method, n)
    with torch.no_grad():
        if warmup:  # the last warm-up call is timed: a slow case gets fewer repeats
            first = timeit(lambda: fn(x), rounds=1, warmup=warmup - 1)
            if first * repeats > budget_s:
                repeats = max(3, int(budget_s / max(first, 1e-9)))
        wall, cpu = [], []
        for _ in range(repeats):  # each run timed by both clocks, so the two rows match
            c0 = time.process_time()
            wall.append(timeit(lambda: fn(x), rounds=1, warmup=0))
            cpu.append(time.process_time() - c0)
    row = {
        "median_s": statistics.median(wall),
        "cpu_median_s": statistics.median(cpu),
        "times_s": [round(t, 5) for t in wall],
        "cpu_times_s": [round(t, 5) for t in cpu],
    }
    if x.get("tokens"):
        row["per_token_s"] = row["median_s"] / x["tokens"]
        row["cpu_per_token_s"] = row["cpu_median_s"] / x["tokens"]
    return row


def _facts(method: str, n: int) -> dict:
    """What a case is, beyond its measurements: tokens per call, the cache's bytes."""
    facts = {}
    if method in _DECODE_QUERIES + _LAYER_DECODE:
        facts["tokens"] = DECODE_TOKENS
    if method.startswith("mla_"):  # chapter 11: the latent cache's bytes (float32)
        width = int(method.rsplit("_d", 1)[1])
        facts.update(tokens=MLA_TOKENS, cache_bytes=n * (MLA_KV_RANK + width // 2) * 4)
    if method in _LAYER_DECODE:
        facts["cache_bytes"] = kv_cache_bytes(
            1,
            GQA_HEADS,
            GQA_D_MODEL // GQA_HEADS,
            n,
            num_kv_heads=GQA_KV_HEADS if method == "gqa_decode" else GQA_HEADS,
        )
    return facts


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: reset VmHWM to the current RSS
        return True
    except OSError:
        return False


def _memory_child(method: str, n: int, threads: int) -> dict:
    """Runs inside the fresh subprocess: the case's extra peak RSS over its inputs."""
    import gc
    import resource

    torch.set_num_threads(threads)
    fn = _CASES[method].run
    x = make_inputs(method, n)
    with torch.no_grad():
        fn(x)  # warm-up: one-off allocations (thread pools, kernels) are not the method's cost
        gc.collect()
        reset = _reset_peak()
        base = (
            _status_kib("VmRSS") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        )
        out = fn(x)
        peak = (
            _status_kib("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        )
    del out
    return {
        "base_rss_mib": base / 1024,
        "peak_rss_mib": peak / 1024,
        "extra_peak_mib": (peak - base) / 1024,
        "peak_reset": reset,
    }


def memory_case(method: str, n: int, *, threads: int = 1, timeout: float = 600) -> dict:
    """Extra peak memory of one case, measured in a fresh ``python`` subprocess (module doc)."""
    timeout = require_number(timeout, "timeout", positive=True)
    env = dict(os.environ)
    lib = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = lib + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "selfattn.bench", "--child", method, str(n), str(threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"memory subprocess for {method} n={n} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fit_slope(ns, values) -> float:
    """Least-squares slope of log(values) against log(ns): the exponent p in value ~ n^p."""
    logs = np.log(np.maximum(np.asarray(values, dtype=float), 1e-12))
    return float(np.polyfit(np.log(np.asarray(ns, dtype=float)), logs, 1)[0])


def _sizes(quick: bool) -> dict:
    """The sizes of the plan (and of the targets), full or quick."""
    if quick:
        return dict(
            sweep=[64], big=256, mid=128, steps=4, train=[64, 128], cache=256, gqa_cache=128
        )
    return dict(
        sweep=[1024, 2048, 4096, 8192],
        big=16384,
        mid=8192,
        steps=256,
        train=[1024, 2048, 4096],
        cache=16384,
        gqa_cache=4096,
    )


def _plan(quick: bool) -> list[tuple[str, int]]:
    """(method, n) pairs, in the order they are measured."""
    size = _sizes(quick)
    sweep, big, mid, steps = size["sweep"], size["big"], size["mid"], size["steps"]
    plan = []
    for n in sweep:
        plan += [
            (m, n)
            for m in (
                "plain",
                "sdpa",
                "flash_attention",
                "sliding_window",
                "linear_attention",
                "linear_decode",
            )
        ]
    plan += [("dense_masked_sdpa", mid), ("dense_masked_sdpa", big)]
    plan += [
        ("plain", big),
        ("sdpa", big),
        ("flash_attention", big),
        ("sliding_window", big),
        ("linear_attention", big),
        ("linear_decode", big),
    ]
    plan += [("kv_cache_decode", steps), ("no_cache_decode", steps)]
    for n in size["train"]:
        plan += [(m, n) for m in _TRAIN]
    plan += [(m, size["cache"]) for m in _DECODE_QUERIES]
    plan += [(m, size["gqa_cache"]) for m in _LAYER_DECODE]
    for n in sweep:  # chapter 13 (the recurrent loop is left out at the largest n)
        plan += [("sdpa_causal", n), ("gated_delta_chunked", n), ("gated_delta_recurrent", n)]
    plan += [("sdpa_causal", big), ("gated_delta_chunked", big)]
    plan += [(m, size["gqa_cache"]) for m in METHODS if m.startswith("mla_")]  # chapter 11
    return plan


def machine_info() -> dict:
    """CPU model, logical cores, OS, python and torch versions."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "logical_cores": os.cpu_count(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def _case(results: list[dict], method: str, n: int) -> dict | None:
    """The case measured for ``method`` at ``n`` with both time and memory, else None."""
    row = next((r for r in results if r["method"] == method and r["n"] == n), None)
    if row is None or "median_s" not in row or "extra_peak_mib" not in row:
        return None  # e.g. a memory-only update of a method the full run did not time
    return row


#: The goal of a figure reported without a target (always "met").
REPORTED = "(reported, no target)"


def goal_met(goal: str, value: float) -> bool:
    """Whether ``value`` meets a goal as the results file writes it: ``"<= 1.25"``,
    ``">= 5"``, ``"<= 1.2 (at most linear)"`` (a comparison, a bound, then any words).

    The one place a target's bound is read, so a chapter's verdict on another figure under
    the same goal (say, the CPU-time ratio) uses the bound ``make bench`` wrote.
    """
    words = goal.split() if isinstance(goal, str) else []
    try:
        op, bound = words[0], float(words[1])
        if op not in ("<=", ">="):
            raise ValueError
    except (IndexError, ValueError):
        raise ValueError(f"goal must read '<= bound' or '>= bound', got {goal!r}") from None
    value = require_number(value, "value")
    return value <= bound if op == "<=" else value >= bound


def _delta_targets(t: _Targets, sweep: list[int], big: int) -> None:
    """Chapter 13: the chunked gated delta rule against its recurrent form and causal SDPA,
    and the smallest n of the plan from which the chunked form is the faster."""
    mid = sweep[-2] if len(sweep) > 1 else sweep[-1]
    rec, chunk = t.case("gated_delta_recurrent", mid), t.case("gated_delta_chunked", mid)
    if rec and chunk:
        name = f"gated_delta recurrent time / chunked time, n={mid}"
        t.ratio(name, rec, chunk, (">=", 3))
    sdpa, chunk = t.case("sdpa_causal", big), t.case("gated_delta_chunked", big)
    if sdpa and chunk:
        t.ratio(f"causal SDPA time / gated_delta chunked time, n={big}", sdpa, chunk, (">=", 1))
    pairs = [(n, t.case("sdpa_causal", n), t.case("gated_delta_chunked", n)) for n in sweep]
    pairs = [(n, a, b) for n, a, b in pairs if a and b] + (
        [(big, sdpa, chunk)] if sdpa and chunk else []
    )
    if pairs:
        faster = [n for n, a, b in pairs if b["median_s"] < a["median_s"]]
        detail = "; ".join(
            f"n={n}: {b['median_s']:.3f} s vs {a['median_s']:.3f} s" for n, a, b in pairs
        )
        t.add(  # -1: the chunked form is slower at every n of the plan
            "crossover: smallest n where gated_delta chunked beats causal SDPA",
            float(faster[0]) if faster else -1.0,
            REPORTED,
            detail,
        )


def _mla_targets(t: _Targets, cache: int) -> None:
    """Chapter 11: MLA's up-projecting decode step over its absorbed one, at each width
    (the target at DeepSeek-V3's width 128, the others reported to show the growth)."""
    for w in MLA_WIDTHS:
        up, ab = t.case(f"mla_up_d{w}", cache), t.case(f"mla_absorbed_d{w}", cache)
        if up and ab:
            name = f"MLA decode: up-projecting time / absorbed time, head width {w}, cache {cache}"
            t.ratio(name, up, ab, (">=", 2) if w == MLA_WIDTHS[-1] else None)


class _Targets:
    """The targets table as it is built: one row per target, with its value, goal and verdict."""

    def __init__(self, results: list[dict]):
        self.results, self.rows = results, []

    def case(self, method: str, n: int) -> dict | None:
        return _case(self.results, method, n)

    def add(self, name, value, goal, detail, value_cpu=None) -> None:
        met = goal == REPORTED or goal_met(goal, value)
        row = {"target": name, "value": value, "goal": goal, "met": met, "detail": detail}
        if value_cpu is not None:  # from process CPU times (less disturbed by other load)
            row["value_cpu_time"] = value_cpu
        self.rows.append(row)

    def ratio(self, name, a, b, goal=None, *, key="median_s") -> None:
        """The target ``a[key] / b[key]``; goal ``("<=" or ">=", bound)``, None: reported."""
        r = a[key] / b[key]
        if key == "median_s":
            detail, cpu = f"{a[key]:.3f} s vs {b[key]:.3f} s", _cpu_ratio(a, b)
        else:
            detail, cpu = f"{a[key]:.1f} MiB vs {b[key]:.1f} MiB", None
        self.add(name, r, REPORTED if goal is None else f"{goal[0]} {goal[1]:g}", detail, cpu)

    def slope(self, name, points: list[tuple[int, float]], detail: str) -> None:
        """The log-log slope in n of an extra peak memory, at most linear as the goal."""
        p = fit_slope([a for a, _ in points], [b for _, b in points])
        self.add(name, p, "<= 1.2 (at most linear)", detail)


def _cpu_ratio(a: dict, b: dict) -> float | None:
    if a.get("cpu_median_s") and b.get("cpu_median_s"):
        return a["cpu_median_s"] / b["cpu_median_s"]
    return None


def _mib(points) -> str:
    return ", ".join(f"n={a}: {b:.1f} MiB" for a, b in points)


def evaluate_targets(results: list[dict], *, quick: bool = False) -> list[dict]:
    """The performance targets chapters 7 and 8 quote, each with its value and whether met.

    A target whose cases are missing (or lack a time or a memory) is left out.
    """
    size = _sizes(quick)
    t = _Targets(results)
    _forward_targets(t, size["mid"], size["big"], size["steps"])
    _training_targets(t, size["train"][-1])
    _decoding_targets(t, size["cache"], size["gqa_cache"])
    _delta_targets(t, size["sweep"], size["big"])
    _mla_targets(t, size["gqa_cache"])
    return t.rows


def _forward_targets(t: _Targets, mid: int, big: int, steps: int) -> None:
    """FlashAttention against SDPA and plain attention, the sparse and linear kernels, and
    the KV cache's speed-up."""
    flash, sdpa, plain = (t.case(m, mid) for m in ("flash_attention", "sdpa", "plain"))
    if flash and sdpa:
        t.ratio(f"flash_attention time / SDPA time, n={mid}", flash, sdpa, ("<=", 1.25))
    if flash and plain and plain.get("extra_peak_mib", 0) > 0:
        name = f"flash_attention extra peak / plain's, n={mid}"
        t.ratio(name, flash, plain, ("<=", 0.05), key="extra_peak_mib")
    win, dense = t.case("sliding_window", big), t.case("dense_masked_sdpa", big)
    if win and dense:
        t.ratio(f"dense masked time / sliding_window time, n={big}", dense, win, (">=", 5))
    wins = sorted(
        (r["n"], r["extra_peak_mib"])
        for r in t.results
        if r["method"] == "sliding_window" and "extra_peak_mib" in r
    )
    wins = [w for w in wins if w[0] >= big // 4]
    if len(wins) >= 2:
        name = f"sliding_window extra-memory slope in n (log-log, n >= {big // 4})"
        t.slope(name, wins, _mib(wins))
    lin, plain_big = t.case("linear_attention", big), t.case("plain", big)
    if lin and plain_big:
        t.ratio(f"plain time / linear_attention time, n={big}", plain_big, lin, (">=", 10))
    fast, slow = t.case("kv_cache_decode", steps), t.case("no_cache_decode", steps)
    if fast and slow:
        t.ratio(f"KV-cache decoding speed-up, {steps} tokens", slow, fast)


def _training_targets(t: _Targets, train: int) -> None:
    """FlashAttention's forward and backward against SDPA's and plain attention's."""
    flash, sdpa, plain = (
        t.case(m, train) for m in ("flash_attention_train", "sdpa_train", "plain_train")
    )
    if flash and sdpa:
        t.ratio(f"flash_attention fwd+bwd time / SDPA fwd+bwd, n={train}", flash, sdpa, ("<=", 2))
    if flash and plain and plain["extra_peak_mib"] > 0:
        name = f"flash_attention fwd+bwd extra peak / plain's, n={train}"
        t.ratio(name, flash, plain, ("<=", 0.1), key="extra_peak_mib")
    grows = {
        m: sorted((r["n"], r["extra_peak_mib"]) for r in t.results if r["method"] == m)
        for m in ("flash_attention_train", "plain_train")
        if t.case(m, train)
    }
    if len(grows.get("flash_attention_train", [])) >= 2:
        detail = _mib(grows["flash_attention_train"])
        if len(grows.get("plain_train", [])) >= 2:
            detail += f"; plain's slope {fit_slope(*zip(*grows['plain_train'])):.2f}"
        name = "flash_attention fwd+bwd extra-peak slope in n (log-log)"
        t.slope(name, grows["flash_attention_train"], detail)


def _decoding_targets(t: _Targets, cache: int, gqa_cache: int) -> None:
    """FlashDecoding against SDPA per token, and grouped-query attention's cache and time."""
    flash, sdpa, plain = (t.case(m, cache) for m in _DECODE_QUERIES)
    if flash and sdpa and "per_token_s" in flash and "per_token_s" in sdpa:
        r = flash["per_token_s"] / sdpa["per_token_s"]
        detail = f"{flash['per_token_s'] * 1e3:.2f} ms vs {sdpa['per_token_s'] * 1e3:.2f} ms"
        if plain and "per_token_s" in plain:
            detail += f"; plain {plain['per_token_s'] * 1e3:.2f} ms"
        name = f"flash_decoding time per token / SDPA decode's, cache {cache}"
        t.add(name, r, REPORTED, detail + " per token", _cpu_ratio(flash, sdpa))
    mha = next((r for r in t.results if r["method"] == "mha_decode" and r["n"] == gqa_cache), None)
    gqa = next((r for r in t.results if r["method"] == "gqa_decode" and r["n"] == gqa_cache), None)
    if mha and gqa and mha.get("cache_bytes") and gqa.get("cache_bytes"):
        t.add(
            f"GQA ({GQA_HEADS}->{GQA_KV_HEADS} KV heads) cache bytes / MHA's, {gqa_cache} "
            "positions",
            gqa["cache_bytes"] / mha["cache_bytes"],
            f"<= {GQA_KV_HEADS / GQA_HEADS:g}",
            f"{gqa['cache_bytes'] / 2**20:.1f} MiB vs {mha['cache_bytes'] / 2**20:.1f} MiB "
            "(one layer)",
        )
    mha, gqa = t.case("mha_decode", gqa_cache), t.case("gqa_decode", gqa_cache)
    if mha and gqa and "per_token_s" in mha and "per_token_s" in gqa:
        t.add(
            f"GQA decode time per token / MHA's, {gqa_cache} cached positions",
            gqa["per_token_s"] / mha["per_token_s"],
            REPORTED,
            f"{gqa['per_token_s'] * 1e3:.2f} ms vs {mha['per_token_s'] * 1e3:.2f} ms per token",
            _cpu_ratio(gqa, mha),
        )


def run_cpu(
    *,
    quick: bool = False,
    threads: int = 1,
    repeats: int = 5,
    out: Path | str | None = DEFAULT_OUT,
    memory: bool = True,
    timing: bool = True,
    only: list[str] | tuple[str, ...] | None = None,
    log=print,
) -> dict:
    """Measure the cases of the CPU plan and write the results file (``out=None``: do not write).

    Args:
        quick: tiny sizes (seconds), to check the harness.
        threads: torch threads for every case.
        repeats: timed runs per case after the warm-up.
        out: the results file. With ``only``, an existing file is not replaced: the new
            measurements are merged into it (:func:`merge_results`).
        memory: measure the extra peak memory (a fresh subprocess per case).
        timing: measure the time (``False``: memory only, which other programs on the
            machine do not distort).
        only: the methods to run (names from :data:`METHODS`); default all.
        log: where progress lines go.

    Returns:
        The report written (the merged one when ``only`` updated an existing file).
    """
    quick = require_bool(quick, "quick")
    memory = require_bool(memory, "memory")
    timing = require_bool(timing, "timing")
    if not (memory or timing):
        raise ValueError("run_cpu: memory and timing are both off, nothing to measure")
    if only is not None:
        unknown = [m for m in only if m not in METHODS]
        if unknown or not only:
            raise ValueError(f"only: unknown methods {unknown}; expected some of {METHODS}")
    torch.set_num_threads(threads)
    started = _dt.datetime.now(_dt.timezone.utc)
    results = [
        _measure(
            method, n, timing=timing, memory=memory, repeats=repeats, threads=threads, log=log
        )
        for method, n in _plan(quick)
        if only is None or method in only
    ]
    report = _cpu_report(results, started, threads=threads, quick=quick)
    if memory and timing and only is None:
        report["targets"] = evaluate_targets(results, quick=quick)
    if only is not None:
        report["only"] = list(only)
        report["timing"] = timing
        report["memory"] = memory
        if out is not None and Path(out).is_file():
            report = merge_results(json.loads(Path(out).read_text()), report)
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n")
        log(f"wrote {out}")
    return report


def _measure(method: str, n: int, *, timing, memory, repeats, threads, log) -> dict:
    """One row of the CPU table: the case's facts, its time and its memory; logged."""
    row = {"method": method, "n": n, "description": _CASES[method].description}
    row.update(_facts(method, n))
    if timing:
        row.update(time_case(method, n, repeats=repeats))
    if memory:
        row.update(memory_case(method, n, threads=threads))
    line = f"{method:>18} n={n:>6}:"
    if timing:
        line += f" median {row['median_s']:.4f} s (cpu {row['cpu_median_s']:.4f} s)"
    if "per_token_s" in row:
        line += f" = {row['per_token_s'] * 1e3:.2f} ms/token"
    if memory:
        line += f" extra peak {row['extra_peak_mib']:.1f} MiB"
    log(line)
    return row


def _cpu_report(results: list[dict], started, *, threads: int, quick: bool) -> dict:
    """The CPU results file: the machine, the settings and the cases."""
    return {
        "kind": "cpu",
        "date": started.isoformat(timespec="seconds"),
        "seconds": round((_dt.datetime.now(_dt.timezone.utc) - started).total_seconds(), 1),
        "machine": machine_info(),
        "torch_threads": threads,
        "dtype": "float32",
        "shape": f"batch 1 x {HEADS} heads x n x d={D_HEAD}",
        "window": WINDOW,
        "quick": quick,
        "method": "median of repeats after 1 warm-up (wall and process CPU time); extra peak "
        "RSS over the inputs in a fresh subprocess (VmHWM after /proc/self/clear_refs)",
        "cases": results,
    }


def merge_results(old: dict, new: dict) -> dict:
    """Merge a partial run (``run_cpu(only=...)``) into an existing results file.

    Each new case updates the old case of the same method and n field by field (a
    memory-only run keeps the old times), or is appended. The old file's date, machine
    and thread count stay; the partial run is listed under ``"updates"``, with its own
    date and machine, and the targets are evaluated again (from the cases that have
    both a time and a memory).

    Args:
        old: the results file's contents (a full run).
        new: the partial run's report.

    Returns:
        The merged report (``old`` is not modified).
    """
    if old.get("quick") != new.get("quick") or old.get("torch_threads") != new.get(
        "torch_threads"
    ):
        raise ValueError(
            "merge_results: the partial run must use the same sizes and thread count as the "
            f"file (quick {old.get('quick')} vs {new.get('quick')}, threads "
            f"{old.get('torch_threads')} vs {new.get('torch_threads')})"
        )
    merged = json.loads(json.dumps(old))
    cases = merged["cases"]
    for row in new["cases"]:
        same = next((c for c in cases if (c["method"], c["n"]) == (row["method"], row["n"])), None)
        if same is None:
            cases.append(dict(row))
        else:
            same.update(row)
    merged.setdefault("updates", []).append(
        {
            "date": new["date"],
            "methods": new.get("only"),
            "timing": new.get("timing", True),
            "memory": new.get("memory", True),
            "machine": new["machine"],
        }
    )
    merged["targets"] = evaluate_targets(cases, quick=bool(merged.get("quick")))
    return merged


def format_targets(report: dict) -> str:
    """The targets as a plain-text table."""
    lines = [f"{'target':<62} {'value':>9} {'(cpu time)':>10} {'goal':>14}  met"]
    for t in report.get("targets", []):
        cpu = f"{t['value_cpu_time']:.3g}" if t.get("value_cpu_time") is not None else "-"
        lines.append(
            f"{t['target']:<62} {t['value']:>9.3g} {cpu:>10} {t['goal']:>14}  "
            f"{'yes' if t['met'] else 'NO'}  ({t['detail']})"
        )
    return "\n".join(lines)


# -- GPU: the Triton kernel against SDPA's flash backend --------------------------------

#: The GPU table's sizes: sequence lengths and head dims.
GPU_NS = (1024, 2048, 4096, 8192, 16384)
GPU_DS = (64, 128)


def _sdpa_backend(device: torch.device):
    """``(name, q, k, v, causal -> out)``: torch's flash backend (sm80 and later), the
    memory-efficient one on older GPUs (a T4), the default one on the CPU (a dry run)."""
    if device.type != "cuda":
        return "default (CPU)", lambda q, k, v, causal: F.scaled_dot_product_attention(
            q, k, v, is_causal=causal
        )
    from torch.nn.attention import SDPBackend, sdpa_kernel

    flash = torch.cuda.get_device_capability(device)[0] >= 8
    chosen = SDPBackend.FLASH_ATTENTION if flash else SDPBackend.EFFICIENT_ATTENTION

    def sdpa(q, k, v, causal):
        with sdpa_kernel(chosen):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return ("flash" if flash else "efficient"), sdpa


def _gpu_row(n, d, causal, *, tokens, width, dtype, device, sdpa, rounds, backward) -> dict:
    """One row of the GPU table: both kernels timed in interleaved rounds (see run_gpu)."""
    from .efficient import triton_flash_attention

    batch, heads = max(1, tokens // n), max(1, width // d)
    g = torch.Generator().manual_seed(n + d)
    q, k, v = (
        torch.randn(batch, heads, n, d, generator=g).to(device, dtype).requires_grad_()
        for _ in range(3)
    )
    do = torch.randn_like(q)
    impls = {
        "sdpa_flash": functools.partial(sdpa, causal=causal),
        "triton": functools.partial(triton_flash_attention, causal=causal),
    }
    row = {"n": n, "d": d, "batch": batch, "heads": heads, "causal": causal}
    with torch.no_grad():
        outs = [fn(q, k, v).float() for fn in impls.values()]
        row["max_abs_diff"] = (outs[1] - outs[0]).abs().max().item()
        del outs
        fwd = [functools.partial(fn, q, k, v) for fn in impls.values()]
        times = {"fwd": timeit(fwd, rounds=rounds, warmup=1, stat="median", device=device)}

    def step(fn):
        fn(q, k, v).backward(do)
        q.grad = k.grad = v.grad = None

    if backward:
        steps = [functools.partial(step, fn) for fn in impls.values()]
        times["fwd_bwd"] = timeit(steps, rounds=rounds, warmup=1, stat="median", device=device)
    # 4 B h n^2 d for the two matmuls of the forward (half when causal); the backward does
    # 2.5 forwards of matmul work (FlashAttention-2's count): forward + backward = 3.5 x.
    flops = 4 * batch * heads * n * n * d * (0.5 if causal else 1.0)
    for part, seconds in times.items():
        for name, t in zip(impls, seconds):
            row[f"{name}_{part}_ms"] = 1e3 * t
            row[f"{name}_{part}_tflops"] = (3.5 if part == "fwd_bwd" else 1.0) * flops / t / 1e12
        row[f"{part}_ratio"] = row[f"triton_{part}_tflops"] / row[f"sdpa_flash_{part}_tflops"]
    return row


def _gpu_line(row: dict) -> str:
    """One row of the GPU table as :func:`run_gpu` prints it."""
    both = (
        f"; fwd+bwd {row['triton_fwd_bwd_tflops']:.3g} / "
        f"{row['sdpa_flash_fwd_bwd_tflops']:.3g} ({row['fwd_bwd_ratio']:.2f} x)"
        if "fwd_bwd_ratio" in row
        else ""
    )
    return (
        f"n={row['n']:>5} d={row['d']:>3} causal={row['causal']!s:<5} fwd TFLOP/s: Triton "
        f"{row['triton_fwd_tflops']:.3g}, SDPA {row['sdpa_flash_fwd_tflops']:.3g} "
        f"({row['fwd_ratio']:.2f} x){both}, max |diff| {row['max_abs_diff']:.1e}"
    )


def _gpu_record(device: torch.device, dtype, backend: str, rows: list[dict]) -> dict:
    """The GPU table's record around its rows: the machine, versions, units and the target."""
    target = [r["fwd_ratio"] for r in rows if r["n"] >= 4096 and r["d"] == 64 and not r["causal"]]
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    on_gpu = device.type == "cuda"
    report = {
        "gpu": torch.cuda.get_device_name(device) if on_gpu else None,
        "capability": ".".join(map(str, torch.cuda.get_device_capability(device)))
        if on_gpu
        else None,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "triton": triton_version,
            "cuda": torch.version.cuda,
        },
        "dtype": str(dtype).removeprefix("torch."),
        "sdpa_backend": backend,
        "timer": "triton.testing.do_bench (median)" if on_gpu else "wall clock (median)",
        "flops": "forward 4 B H n^2 d (half when causal); forward+backward 3.5 x that",
        "rows": rows,
        "target": "Triton forward >= 0.7 x SDPA flash throughput at n >= 4096, d = 64",
        "target_min_ratio": min(target) if target else None,
        "target_met": bool(target) and min(target) >= 0.7,
    }
    return report


def run_gpu(
    *,
    out: Path | str | None = DEFAULT_GPU_OUT,
    ns=GPU_NS,
    ds=GPU_DS,
    tokens: int = 16384,
    width: int = 2048,
    backward: bool = True,
    device: str | torch.device | None = None,
    rounds: int = 3,
    deadline: float | None = None,
    extra: dict | None = None,
    log=print,
) -> dict:
    """The GPU table: ``triton_flash_attention`` against torch SDPA's flash backend.

    The book's one GPU benchmark and the one writer of ``bench_gpu.json``: ``make
    gpu-check`` (``tools/gpu_check.py``) calls it after its checks, and ``python -m
    selfattn.bench --gpu`` runs it alone, forward only. For each head dim ``d`` in ``ds`` and
    length ``n`` in ``ns``, causal and not: ``tokens // n`` sequences of ``width // d`` heads in
    bf16 (fp16 on GPUs without native bf16), forward and forward + backward timed by
    :func:`timeit` (``triton.testing.do_bench``, the median of ``rounds`` interleaved rounds
    after a warm-up call that includes Triton's autotuning), reported in TFLOP/s and as the
    ratio Triton / SDPA. On GPUs before sm80 torch's memory-efficient backend stands in for
    flash (the record says which).

    Args:
        out: the JSON file to write (``None``: write nothing).
        ns, ds: sequence lengths and head dims.
        tokens, width: tokens per batch (``batch = tokens // n``), heads x head dim.
        backward: also time forward + backward (``False``: the forward table alone).
        device: a CUDA device (default ``cuda``); ``"cpu"`` only for ``make gpu-check
            DRY_RUN=1`` (tiny sizes, Triton's interpreter, a wall clock, SDPA's default).
        rounds: timed rounds per row.
        deadline: a ``time.perf_counter()`` value after which no new row starts (the record
            then says ``"complete": false``).
        extra: more keys for the record (``make gpu-check``'s check results).
        log: called with one line per row.

    Returns:
        The record it writes, holding the GPU, its compute capability, the date, ``versions``
        (python, torch, triton, cuda), ``dtype``, ``sdpa_backend``, ``rows`` (per row ``n``,
        ``d``, ``batch``, ``heads``, ``causal``, ``max_abs_diff``, and for ``fwd`` and
        ``fwd_bwd`` each kernel's ``{name}_{part}_ms`` and ``{name}_{part}_tflops``, with
        ``{part}_ratio``), the target and whether it is met, ``complete`` and ``errors``.
    """
    device = torch.device("cuda" if device is None else device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("run_gpu needs a CUDA GPU; this machine has none")
    from .runtime import preferred_dtype

    dtype = preferred_dtype(device) if device.type == "cuda" else torch.float16
    backend, sdpa = _sdpa_backend(device)
    rows, errors, complete = [], [], True
    for d in ds:
        for n in ns:
            for causal in (False, True):
                if deadline is not None and time.perf_counter() > deadline:
                    complete = False
                    break
                try:
                    row = _gpu_row(
                        n, d, causal, tokens=tokens, width=width, dtype=dtype, device=device,
                        sdpa=sdpa, rounds=rounds, backward=backward,
                    )  # fmt: skip
                except Exception as e:  # noqa: BLE001  (the record lists it; the table goes on)
                    errors.append(f"n={n} d={d} causal={causal}: {e!r}"[:300])
                    continue
                rows.append(row)
                log(_gpu_line(row))
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    report = {**_gpu_record(device, dtype, backend, rows), "complete": complete}
    report.update(errors=errors, **(extra or {}))
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(report, indent=1) + "\n")
        log(f"wrote {out}")
    return report


def _parser() -> argparse.ArgumentParser:
    """The command line of :func:`main`."""
    parser = argparse.ArgumentParser(
        prog="python -m selfattn.bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes (seconds): checks the harness"
    )
    parser.add_argument(
        "--gpu", action="store_true", help="the GPU table (Triton vs SDPA flash, bf16)"
    )
    parser.add_argument(
        "--flex", action="store_true", help="chapter 12: FlexAttention (selfattn.bench_flex)"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads for every case (default 1)"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results file (default, in a checkout of the book: chapters/results/bench_*.json)",
    )
    parser.add_argument(
        "--only",
        type=lambda text: [m.strip() for m in text.split(",") if m.strip()],
        default=None,
        metavar="METHOD[,METHOD]",
        help=f"run these methods only and merge them into --out; one of {', '.join(METHODS)}",
    )
    parser.add_argument(
        "--memory-only",
        action="store_true",
        help="measure memory only (other programs on the machine do not distort it)",
    )
    parser.add_argument(
        "--child", nargs=3, metavar=("METHOD", "N", "THREADS"), help=argparse.SUPPRESS
    )
    return parser


def _out_path(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Path:
    """Where the results go; a ``parser.error`` for no place or unknown ``--only`` methods."""
    default = DEFAULT_GPU_OUT if args.gpu else DEFAULT_OUT
    if args.quick and args.out is None:
        # Tiny sizes check the harness; they must never replace the book's measured table.
        default = Path(tempfile.gettempdir()) / "selfattn_bench_quick.json"
    out = args.out or default
    if out is None:
        parser.error(
            "where should the results go? This selfattn is not a checkout of the book's "
            "repository (no chapters/results/ next to it): pass --out FILE"
        )
    if args.only is not None:
        unknown = [m for m in args.only if m not in METHODS]
        if unknown or not args.only:
            parser.error(
                f"--only: unknown methods {unknown}; expected some of {', '.join(METHODS)}"
            )
    return out


def main(argv: list[str] | None = None) -> dict | None:
    """Command line: ``python -m selfattn.bench [--quick] [--gpu] [--threads N] [--out FILE]``.

    Also ``--repeats R``, ``--only METHOD[,METHOD]`` (merge into ``--out``) and
    ``--memory-only``.

    Returns:
        The report written (``None`` in the internal ``--child`` mode).
    """
    parser = _parser()
    args = parser.parse_args(argv)
    if args.flex:  # its own table and file, chapters/results/ch12_bench.json; a process of its
        # own, since selfattn.bench_flex imports this module (its timer)
        out = [] if args.out is None else ["--out", str(args.out)]
        subprocess.run([sys.executable, "-m", "selfattn.bench_flex", *out], check=True)
        return None
    if args.child:
        method, n, threads = args.child
        print(json.dumps(_memory_child(method, int(n), int(threads))))
        return None
    out = _out_path(parser, args)
    if args.gpu:  # the forward table alone; `make gpu-check` adds forward + backward
        return run_gpu(out=out, backward=False)
    report = run_cpu(
        quick=args.quick,
        threads=args.threads,
        repeats=args.repeats,
        out=out,
        only=args.only,
        timing=not args.memory_only,
    )
    print(format_targets(report))
    return report


if __name__ == "__main__":
    main()
