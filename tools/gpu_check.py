"""Prove the book on a GPU in one command: ``make gpu-check`` (``make gpu-check DRY_RUN=1``).

    python tools/gpu_check.py              # on a machine with CUDA: at most ~8 minutes
    python tools/gpu_check.py --dry-run    # on the CPU at tiny sizes (Triton interpreter)

Five steps:

1. versions: the GPU, its compute capability, torch, Triton, CUDA, Python;
2. the kernel suite against float64 oracles (``tools/references.py``, the tests' too):
   ``triton_flash_attention`` forward and backward over dtype {fp16, bf16 where native, fp32}
   x head dim {32, 64, 128, 256} x causal {none, top_left, bottom_right} x (n, m) in
   {1, 17, 113 x 203, 1023 x 1024, 4096}; the same for ``flash_attention``,
   ``sliding_window_attention`` and ``linear_attention`` on CUDA tensors. A case passes when
   its error is at most ``max(floor, 4 x`` the error of the same computation done by torch in
   that dtype``)``, so the bar follows the dtype's rounding;
3. every chapter executed top to bottom on the GPU in a fresh kernel (nbclient), from a copy
   in a temporary folder; any error or any stderr output fails it; each chapter's time;
4. the GPU table, by the book's one GPU benchmark (``selfattn.bench.run_gpu``, which
   ``python -m selfattn.bench --gpu`` runs alone): ``triton_flash_attention`` against torch
   SDPA's flash backend, n = 1k..16k, d = 64 and 128, bf16 (fp16 where bf16 is not native),
   forward and forward + backward, timed with ``triton.testing.do_bench``; written to
   ``chapters/results/bench_gpu.json`` (GPU name, date, versions, TFLOP/s, ratio), with this
   run's check results added;
5. one summary line: passed/failed counts and the worst errors. Exit status 1 on any failure.

The dry run does the same at tiny sizes on the CPU: the Triton kernels in the interpreter,
two short chapters, the benchmark timed with a wall clock, its json written to a temporary
folder (never to chapters/results). ``tests/test_gpu_check.py`` runs it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import inspect
import math
import multiprocessing
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from tools import references  # noqa: E402  (the oracles, shared with tests/)


def _use_source_tree(argv: list[str]) -> None:
    """Without an installed selfattn (a bare GPU machine), run again with lib/ (and the root,
    for ``tools``) on PYTHONPATH, which the chapters' kernels then inherit."""
    import importlib.util

    if importlib.util.find_spec("selfattn") is None and "SELFATTN_GPU_CHECK_LIB" not in os.environ:
        path = (str(ROOT / "lib"), str(ROOT), os.environ.get("PYTHONPATH"))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
        env["SELFATTN_GPU_CHECK_LIB"] = "1"
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, "-m", "tools.gpu_check", *argv], env)


CAUSAL_MODES = ("none", "top_left", "bottom_right")
# Errors are max |kernel - float64 oracle| / max(1, max |oracle|): absolute for outputs of
# size about 1, relative for the larger gradients of long rows. Below these floors an error is
# the dtype's rounding whatever torch does.
FLOOR = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
# Times torch's own error in that dtype that a kernel may reach.
SLACK = 4.0


@dataclass
class Plan:
    """Sizes of one run: the full GPU check or the CPU dry run."""

    dry_run: bool
    dtypes: tuple[str, ...]
    head_dims: tuple[int, ...]
    shapes: tuple[tuple[int, int], ...]
    torch_shapes: tuple[tuple[int, int], ...]
    chapters: tuple[str, ...]
    bench_n: tuple[int, ...]
    bench_d: tuple[int, ...]
    bench_tokens: int
    bench_width: int  # heads x head dim
    window: int = 16


@dataclass
class Report:
    passed: int = 0
    failed: int = 0
    skipped: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    worst: dict[str, tuple[float, str]] = field(default_factory=dict)

    def check(self, ok: bool, label: str, detail: str = "") -> None:
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            self.failures.append(f"{label} {detail}".strip())
            print(f"  FAIL {label} {detail}", flush=True)

    def error(self, key: str, err: float, label: str) -> None:
        if key not in self.worst or err > self.worst[key][0] or math.isnan(err):
            self.worst[key] = (err, label)


def make_plan(dry_run: bool, device) -> Plan:
    import torch
    from selfattn.runtime import preferred_dtype

    if dry_run:
        return Plan(
            dry_run=True,
            dtypes=("float32", "float16"),
            head_dims=(16,),
            shapes=((1, 1), (17, 17), (20, 33), (33, 20)),
            torch_shapes=((1, 1), (17, 17), (20, 33), (33, 20)),
            # two chapters prove the mechanism (fresh kernels, copies, nothing written back);
            # the short ones, since strict nbval runs every chapter on the CPU anyway
            chapters=("04_masking.ipynb", "10_summary.ipynb"),
            bench_n=(32, 64),
            bench_d=(16,),
            bench_tokens=64,
            bench_width=32,
        )
    dtypes = ["float16"]
    if preferred_dtype(device) == torch.bfloat16:
        dtypes.append("bfloat16")
    dtypes.append("float32")
    try:
        from tools.book import toc_chapters  # reads _toc.yml (needs PyYAML)

        chapters = tuple(p.name for p in toc_chapters())
    except ImportError:
        chapters = tuple(sorted(p.name for p in (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb")))
    return Plan(
        dry_run=False,
        dtypes=tuple(dtypes),
        head_dims=(32, 64, 128, 256),
        shapes=((1, 1), (17, 17), (113, 203), (1023, 1024), (4096, 4096)),
        torch_shapes=((1, 1), (17, 17), (113, 203), (1023, 1024), (4096, 4096)),
        chapters=chapters,
        bench_n=(1024, 2048, 4096, 8192, 16384),
        bench_d=(64, 128),
        bench_tokens=16384,
        bench_width=2048,
    )


# ---------------------------------------------------------------- step 1: versions


def versions(device) -> dict:
    import torch

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": str(device),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        major, minor = torch.cuda.get_device_capability(device)
        info["capability"] = f"{major}.{minor}"
        from selfattn.efficient.triton_configs import device_shared_memory

        info["shared_memory_per_block"] = device_shared_memory(device)
    else:
        info["gpu"] = None
        info["capability"] = None
    return info


# ---------------------------------------------------------------- step 2: kernel suite


def _inputs(n, m, d, dtype, device, seed):
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    shape = (1, 2)  # batch x heads
    q = torch.randn(*shape, n, d, generator=g)
    k = torch.randn(*shape, m, d, generator=g)
    v = torch.randn(*shape, m, d, generator=g)
    do = torch.randn(*shape, n, d, generator=g)
    return [t.to(device=device, dtype=dtype) for t in (q, k, v, do)]


def run_case(report, kernel, fn, oracle, q, k, v, do, dtype_name, label, backward):
    """One case: forward (and backward) of ``fn`` against ``oracle`` in float64 and in dtype."""
    import torch

    q64, k64, v64, do64 = (t.double() for t in (q, k, v, do))
    try:
        if backward:
            out, *grads = references.grads(fn, q, k, v, do)
            ref, *ref_grads = references.grads(oracle, q64, k64, v64, do64)
            low, *low_grads = references.grads(oracle, q, k, v, do)
        else:
            with torch.no_grad():
                out, ref, low = fn(q, k, v), oracle(q64, k64, v64), oracle(q, k, v)
            grads = ref_grads = low_grads = ()
    except ValueError as e:
        if "fits this device's shared memory" not in str(e):
            report.check(False, f"{kernel} {label}", f"raised ValueError: {e}")
        else:  # a documented limit (fp32 backward at d = 256 on sm75), not a bug
            report.skipped.append(f"{kernel} {label}: too large for this GPU's shared memory")
        return
    except Exception as e:  # noqa: BLE001  (any other exception is a failed case, reported)
        report.check(False, f"{kernel} {label}", f"raised {type(e).__name__}: {e}")
        return
    parts = [("out", out, ref, low)] + [
        (f"d{name}", g, r, lo) for name, g, r, lo in zip("qkv", grads, ref_grads, low_grads)
    ]
    for part, got, want, torch_low in parts:
        err = references.max_error(got, want)
        bar = max(FLOOR[dtype_name], SLACK * references.max_error(torch_low, want))
        ok = got.shape == want.shape and err <= bar and not math.isnan(err)
        report.error(f"{kernel} {dtype_name}", err, f"{label} {part}")
        report.check(ok, f"{kernel} {label} {part}", f"error {err:.2e} > bar {bar:.2e}")


def kernel_suite(plan: Plan, device, report: Report, deadline: float) -> dict:
    """Every kernel over the plan's cases; returns {kernel: [checks, seconds]}."""
    import torch
    from selfattn import efficient

    timings = {}

    kernels = []
    if efficient.triton_available() and (device.type == "cuda" or plan.dry_run):
        kernels.append(("triton_flash_attention", efficient.triton_flash_attention))
    else:
        report.check(False, "triton_flash_attention", "Triton is not installed")
    kernels += [
        ("flash_attention", efficient.flash_attention),
        ("sliding_window_attention", efficient.sliding_window_attention),
        ("linear_attention", efficient.linear_attention),
    ]
    for name, fn in kernels:
        start = time.perf_counter()
        before = report.passed + report.failed
        params = inspect.signature(fn).parameters
        has_alignment = "alignment" in params
        shapes = plan.shapes if name == "triton_flash_attention" else plan.torch_shapes
        skipped = []
        seed = 0
        for dtype_name in plan.dtypes:
            dtype = getattr(torch, dtype_name)
            for d in plan.head_dims:
                for n, m in shapes:
                    for mode in CAUSAL_MODES:
                        if time.perf_counter() > deadline:
                            report.check(False, name, "not finished: out of time")
                            return timings
                        if mode == "bottom_right" and not has_alignment:
                            skipped.append(mode)
                            continue
                        seed += 1
                        q, k, v, do = _inputs(n, m, d, dtype, device, seed)
                        call, oracle = _kernel_pair(name, fn, mode, n, m, plan.window, device)
                        label = f"{dtype_name} d={d} n={n} m={m} causal={mode}"
                        run_case(report, name, call, oracle, q, k, v, do, dtype_name, label, True)
        took = time.perf_counter() - start
        count = report.passed + report.failed - before
        timings[name] = [count, took, len(skipped)]
    return timings


def _suite_task(dry_run: bool, dtype_name: str, head_dim: int, deadline_wall: float) -> dict:
    """One (dtype, head dim) slice of the kernel suite, in a worker process of its own.

    Slices run in parallel so that Triton compiles their kernel variants on several cores.
    (A spawned worker starts with the parent's ``sys.path``: lib/ too, where the parent ran
    again with it, see :func:`_use_source_tree`.)
    """
    if dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    torch.set_num_threads(1)
    device = torch.device("cpu") if dry_run else torch.device("cuda", 0)
    plan = make_plan(dry_run, device)
    plan.dtypes, plan.head_dims = (dtype_name,), (head_dim,)
    report = Report()
    deadline = time.perf_counter() + (deadline_wall - time.time())
    try:
        timings = kernel_suite(plan, device, report, deadline)
    except Exception:  # noqa: BLE001  (a crash of the slice is reported and counted)
        report.check(False, f"kernel suite {dtype_name} d={head_dim}", traceback.format_exc())
        timings = {}
    return {"report": report, "timings": timings, "shared": shared_memory_report(device)}


def run_kernel_suite(plan: Plan, report: Report, deadline: float, jobs: int) -> list[dict]:
    """The kernel suite in ``jobs`` worker processes, one (dtype, head dim) slice per task."""
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=max(1, jobs), mp_context=multiprocessing.get_context("spawn")
    )
    deadline_wall = time.time() + (deadline - time.perf_counter())
    futures = [
        pool.submit(_suite_task, plan.dry_run, dt, d, deadline_wall)
        for dt in plan.dtypes
        for d in plan.head_dims
    ]
    timings, shared = {}, {}
    for future in futures:
        try:
            part = future.result(timeout=max(1.0, deadline - time.perf_counter() + 30))
        except Exception as e:  # noqa: BLE001  (a dead worker, or out of time)
            report.check(False, "kernel suite", f"a slice did not finish: {type(e).__name__} {e}")
            continue
        sub = part["report"]
        report.passed += sub.passed
        report.failed += sub.failed
        report.skipped += sub.skipped
        for failure in sub.failures:
            report.failures.append(failure)
            print(f"  FAIL {failure}", flush=True)
        for key, (err, where) in sub.worst.items():
            report.error(key, err, where)
        for name, (count, took, skipped) in part["timings"].items():
            total = timings.setdefault(name, [0, 0.0, 0])
            total[0], total[1], total[2] = total[0] + count, total[1] + took, total[2] + skipped
        for row in part["shared"]:
            shared[row["kernel"], row["shared"], row["num_warps"], row["num_stages"]] = row
    pool.shutdown(wait=False, cancel_futures=True)
    for name, (count, took, skipped) in timings.items():
        note = f" (no alignment argument: {skipped} bottom_right cases skipped)" * bool(skipped)
        print(f"  {name}: {count} checks, {took:.1f} s of worker time{note}", flush=True)
    return sorted(shared.values(), key=lambda r: (r["kernel"], r["shared"]))


def _kernel_pair(name, fn, mode, n, m, window, device):
    """(kernel call, oracle) for one causal mode; both take (q, k, v)."""
    import torch

    causal = mode != "none"
    kw = {"alignment": mode} if causal else {}
    if name in ("triton_flash_attention", "flash_attention"):
        mask = references.causal_mask(n, m, mode, device)
        return (lambda q, k, v: fn(q, k, v, causal=causal, **kw)), (
            lambda q, k, v: references.sdpa(q, k, v, mask)
        )
    if name == "sliding_window_attention":
        # a band without a causal mask is centred on the default diagonal, bottom-right
        align = "top_left" if mode == "top_left" else "bottom_right"
        band = references.band_mask(n, m, window, causal, align, device)
        return (lambda q, k, v: fn(q, k, v, window, causal=causal, **kw)), (
            lambda q, k, v: references.sdpa(q, k, v, band)
        )
    mask = references.causal_mask(n, m, mode, device)

    def oracle(q, k, v):  # sums of n terms overflow float16: the baseline works in float32
        if q.dtype == torch.float64:
            return references.linear_attention(q, k, v, mask)
        return references.linear_attention(q.float(), k.float(), v.float(), mask).to(q.dtype)

    return (lambda q, k, v: fn(q, k, v, causal=causal, **kw)), oracle


def launch_configs(plan: Plan, device) -> list[dict]:
    """The Triton launch settings this device gets (the dry run shows a T4's: sm75's budget)."""
    import torch
    from selfattn.efficient.triton_configs import (
        SHARED_MEMORY_BUDGET,
        choose_config,
        device_shared_memory,
        shared_memory_bytes,
    )

    budget = device_shared_memory(device) if device.type == "cuda" else SHARED_MEMORY_BUDGET[75]
    rows = []
    for kernel in ("forward", "backward"):
        for dtype_name in plan.dtypes:
            dtype = getattr(torch, dtype_name)
            for d in (32, 64, 128, 256):
                try:
                    c = choose_config(kernel, d, d, dtype, False, budget)
                except ValueError:
                    rows.append({"kernel": kernel, "dtype": dtype_name, "d": d, "config": None})
                    continue
                rows.append(
                    {
                        "kernel": kernel,
                        "dtype": dtype_name,
                        "d": d,
                        "config": f"{c.block_q}x{c.block_k} w{c.num_warps} s{c.num_stages}",
                        "estimated_shared": shared_memory_bytes(c, kernel, d, d, dtype),
                    }
                )
    return rows


def shared_memory_report(device) -> list[dict]:
    """Shared memory Triton allocated for each compiled kernel (compare with the estimate)."""
    if device.type != "cuda":
        return []
    from selfattn.efficient import triton_kernels

    rows = []
    # the backward kernel's cache holds both passes' variants
    kernels = (triton_kernels.flash_fwd, triton_kernels.flash_bwd_delta, triton_kernels.flash_bwd)
    for jit_fn in kernels:
        try:
            caches = jit_fn.device_caches[device.index or 0][0]
            for compiled in caches.values():
                md = compiled.metadata
                rows.append(
                    {
                        "kernel": md.name,
                        "shared": md.shared,
                        "num_warps": md.num_warps,
                        "num_stages": md.num_stages,
                    }
                )
        except Exception:  # noqa: BLE001  (Triton's cache layout differs between versions)
            continue
    return rows


# ---------------------------------------------------------------- step 3: chapters


def _execute_chapter(path: str, timeout: int) -> dict:
    """Run one notebook (a copy) in a fresh kernel; errors and stderr output fail it."""
    import nbformat
    from nbclient import NotebookClient

    os.environ["SELFATTN_PROGRESS"] = "0"
    os.environ["SELFATTN_RECORD"] = "1"  # the book tested on the GPU: a failed claim raises
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(Path(path).parent)}},
    )
    start = time.perf_counter()
    try:
        client.execute()
        error = None
    except Exception as e:  # noqa: BLE001  (CellExecutionError, timeouts, dead kernels)
        error = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e) else ''}"
    seconds = time.perf_counter() - start
    stderr = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                stderr.append(f"cell {i}: {out.get('text', '').strip()[:200]}")
    return {
        "chapter": Path(path).name,
        "executed": str(path),
        "seconds": seconds,
        "error": error,
        "stderr": stderr,
    }


def run_chapters(plan: Plan, workdir: Path, jobs: int, timeout: int):
    """Copy the chapters (and their results folder) to ``workdir``; execute them in parallel."""
    shutil.copytree(ROOT / "chapters" / "results", workdir / "results")
    paths = []
    for name in plan.chapters:
        shutil.copy(ROOT / "chapters" / name, workdir / name)
        paths.append(str(workdir / name))
    # spawn: the workers only drive nbclient, and must not inherit this process's CUDA state
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=max(1, jobs), mp_context=multiprocessing.get_context("spawn")
    )
    futures = [pool.submit(_execute_chapter, p, timeout) for p in paths]
    return pool, futures


def report_chapters(futures, report: Report, deadline: float) -> list[dict]:
    rows = []
    for future in futures:
        try:
            row = future.result(timeout=max(1.0, deadline - time.perf_counter()))
        except concurrent.futures.TimeoutError:
            report.check(False, "chapters", "not finished: out of time")
            break
        except Exception as e:  # noqa: BLE001  (e.g. nbclient missing on this machine)
            report.check(False, "chapters", f"could not run: {type(e).__name__}: {e}")
            break
        rows.append(row)
        ok = row["error"] is None and not row["stderr"]
        detail = row["error"] or "; ".join(row["stderr"])
        print(f"  {row['chapter']:<40} {row['seconds']:6.1f} s  {'ok' if ok else 'FAILED'}")
        report.check(ok, f"chapter {row['chapter']}", detail)
    return rows


# ---------------------------------------------------------------- step 4: benchmark


def benchmark(plan: Plan, device, report: Report, deadline: float, out: Path, extra) -> dict:
    """The GPU table (``selfattn.bench.run_gpu``, the book's one GPU benchmark and the one
    writer of ``bench_gpu.json``) at the plan's sizes, this run's results added to its record;
    its errors and an unfinished table count as failed cases."""
    from selfattn.bench import run_gpu

    result = run_gpu(
        out=out,
        ns=plan.bench_n,
        ds=plan.bench_d,
        tokens=plan.bench_tokens,
        width=plan.bench_width,
        device=device,
        deadline=deadline,
        extra=extra,
        log=lambda line: print(f"  {line}", flush=True),
    )
    for error in result["errors"]:
        report.check(False, "benchmark", error)
    if not result["complete"]:
        report.check(False, "benchmark", "not finished: out of time")
    return result


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU")
    parser.add_argument("--out", type=Path, help="where to write bench_gpu.json")
    parser.add_argument("--jobs", type=int, default=None, help="chapters executed at once")
    parser.add_argument("--time-limit", type=float, default=None, help="seconds in all")
    parser.add_argument("--skip-chapters", action="store_true")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    _use_source_tree(sys.argv[1:] if argv is None else argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before Triton is first used
    os.environ["SELFATTN_PROGRESS"] = "0"
    import torch

    torch.set_num_threads(1)
    if not args.dry_run and not torch.cuda.is_available():
        print("gpu-check: no CUDA device here; run `make gpu-check DRY_RUN=1` to test the script")
        return 2
    device = torch.device("cpu") if args.dry_run else torch.device("cuda", 0)
    limit = args.time_limit or (600.0 if args.dry_run else 470.0)
    deadline = t0 + limit
    plan = make_plan(args.dry_run, device)
    report = Report()
    tmp = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    out_path = args.out or (
        tmp / "bench_gpu.json"
        if args.dry_run
        else ROOT / "chapters" / "results" / "bench_gpu.json"
    )
    mode = "DRY RUN on the CPU (Triton interpreter, tiny sizes)" if args.dry_run else "GPU"
    print(f"gpu-check: {mode}, time limit {limit:.0f} s", flush=True)

    print("[1/5] versions", flush=True)
    info = versions(device)
    for key, value in info.items():
        print(f"  {key:<24} {value}")
    configs = launch_configs(plan, device)
    budget_of = "this GPU" if device.type == "cuda" else "a T4 (sm75), for show"
    print(f"  Triton launch configs for {budget_of} (block_q x block_k, warps, stages):")
    for kernel in ("forward", "backward"):
        cells = [
            f"{r['dtype'].replace('float', 'f')} d={r['d']}: {r['config'] or 'does not fit'}"
            for r in configs
            if r["kernel"] == kernel
        ]
        for i in range(0, len(cells), 4):
            print(f"    {kernel if i == 0 else '':<8} " + "; ".join(cells[i : i + 4]))

    # Chapters run in their own kernels while the kernel suite runs here; the benchmark waits
    # for both, so nothing else uses the GPU while it is timed.
    pool = futures = None
    if not args.skip_chapters:
        jobs = args.jobs or (1 if args.dry_run else max(1, min(5, (os.cpu_count() or 2) // 2)))
        pool, futures = run_chapters(plan, tmp / "chapters", jobs, timeout=int(limit))

    print("[2/5] kernel suite against SDPA in float64", flush=True)
    suite_jobs = 1 if args.dry_run else max(1, min(6, (os.cpu_count() or 2) // 2))
    smem = run_kernel_suite(plan, report, deadline - (60 if not args.dry_run else 30), suite_jobs)
    for row in smem:
        print(f"  compiled {row['kernel']}: {row['shared']} bytes of shared memory")

    print(f"[3/5] chapters ({len(plan.chapters)}, fresh kernels, from copies)", flush=True)
    chapter_rows = []
    if futures is not None:
        chapter_rows = report_chapters(
            futures, report, deadline - (45 if not args.dry_run else 20)
        )
        pool.shutdown(wait=False, cancel_futures=True)
    else:
        print("  skipped (--skip-chapters)")

    print(f"[4/5] benchmark: Triton vs SDPA flash -> {out_path}", flush=True)
    result = {}
    try:
        extra = {
            "kernel_suite": {"passed": report.passed, "failed": report.failed},
            "shared_memory": smem,
            "launch_configs": configs,
            "chapters": chapter_rows,
        }
        result = benchmark(plan, device, report, deadline, out_path, extra)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        report.check(False, "benchmark", "crashed")

    print("[5/5] summary", flush=True)
    chapters_ok = (
        "chapters skipped"
        if args.skip_chapters
        else f"chapters {sum(r['error'] is None and not r['stderr'] for r in chapter_rows)}/"
        f"{len(plan.chapters)} ok"
    )
    worst = ", ".join(f"{k} {e:.1e} ({where})" for k, (e, where) in sorted(report.worst.items()))
    ratio = result.get("target_min_ratio")
    status = "PASSED" if report.failed == 0 else "FAILED"
    print(
        f"gpu-check {status}: {report.passed} passed, {report.failed} failed, "
        f"{len(report.skipped)} skipped in "
        f"{time.perf_counter() - t0:.0f} s; {chapters_ok}; Triton/SDPA forward at n>=4k, d=64: "
        f"{'n/a' if ratio is None else f'{ratio:.2f}x'}; worst errors: {worst}",
        flush=True,
    )
    for failure in report.failures[:20]:
        print(f"  - {failure}")
    shutil.rmtree(tmp / "chapters", ignore_errors=True)
    return 0 if report.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
