"""tools/gpu_check.py (make gpu-check): its dry run on the CPU, its checking helpers, and the
oracles it shares with the tests (tools/references.py).

The dry run is the whole script at tiny sizes: Triton in the interpreter, two chapters
executed from copies, the benchmark timed with a wall clock and written to a temporary path.
"""

import hashlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from tools import gpu_check, references
from tools.book import ROOT


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def test_dry_run(tmp_path):
    out = tmp_path / "bench.json"
    committed = ROOT / "chapters" / "results" / "bench_gpu.json"
    before = _digest(committed)
    env = dict(os.environ, SELFATTN_PROGRESS="0", MPLBACKEND="Agg")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.gpu_check",
            "--dry-run",
            "--out",
            str(out),
            "--time-limit=1200",  # a busy machine is slow; this test checks the script
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=1500,
    )
    text = proc.stdout
    assert proc.returncode == 0, text[-4000:] + proc.stderr[-2000:]
    for step in range(1, 6):
        assert f"[{step}/5]" in text
    summary = [line for line in text.splitlines() if line.startswith("gpu-check ")]
    assert len(summary) == 1 and summary[0].startswith("gpu-check PASSED"), summary
    assert " 0 failed" in summary[0] and "chapters 2/2 ok" in summary[0]
    for name in ("triton_flash_attention", "flash_attention", "linear_attention"):
        assert f"  {name}: " in text
    result = json.loads(out.read_text())
    assert {"gpu", "date", "versions", "rows", "dtype", "target"} <= set(result)
    assert result["versions"]["triton"] and result["versions"]["torch"] == torch.__version__
    row = result["rows"][0]
    for key in ("triton_fwd_tflops", "sdpa_flash_fwd_bwd_tflops", "fwd_ratio", "fwd_bwd_ratio"):
        assert row[key] > 0
    assert [r["seconds"] > 0 and r["error"] is None for r in result["chapters"]] == [True] * 2
    # the chapters ran from copies (the committed notebooks keep their outputs), and nothing
    # was written to chapters/results
    chapters = (ROOT / "chapters").resolve()
    for r in result["chapters"]:
        assert chapters not in Path(r["executed"]).resolve().parents, r["executed"]
    assert _digest(committed) == before


def test_a_wrong_kernel_fails_its_case():
    report = gpu_check.Report()
    q, k, v, do = gpu_check._inputs(9, 12, 8, torch.float32, torch.device("cpu"), 0)
    mask = references.causal_mask(9, 12, "bottom_right", q.device)

    def oracle(q, k, v):
        return references.sdpa(q, k, v, mask)

    gpu_check.run_case(report, "k", oracle, oracle, q, k, v, do, "float32", "right", True)
    assert (report.passed, report.failed) == (4, 0)  # out, dq, dk, dv

    def top_left(q, k, v):  # the classic mistake: top-left alignment against a cache
        return references.sdpa(q, k, v, references.causal_mask(9, 12, "top_left", q.device))

    gpu_check.run_case(report, "k", top_left, oracle, q, k, v, do, "float32", "wrong", True)
    assert report.failed == 4 and report.failures[0].startswith("k wrong out error")

    def broken(q, k, v):
        raise RuntimeError("no kernel image")

    gpu_check.run_case(report, "k", broken, oracle, q, k, v, do, "float32", "raises", False)
    assert report.failed == 5 and "no kernel image" in report.failures[-1]


@pytest.mark.parametrize("n,m", [(4, 9), (9, 9), (9, 4)])
def test_masks_match_torch(n, m):
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        lower_right = causal_lower_right(n, m)._materialize()
    assert torch.equal(references.causal_mask(n, m, "bottom_right", "cpu"), lower_right)
    upper_left = causal_upper_left(n, m)._materialize()
    assert torch.equal(references.causal_mask(n, m, "top_left", "cpu"), upper_left)
    assert references.causal_mask(n, m, "none") is None
    # a causal band of 3 keys: the bottom-right causal mask less every key 3 or more behind
    band = references.band_mask(n, m, 3, True, "bottom_right", "cpu")
    behind = torch.ones(n, m, dtype=torch.bool).tril(diagonal=m - n - 3)
    assert torch.equal(band, lower_right & ~behind)
    wide = references.band_mask(n, m, m + n, False, "top_left", "cpu")
    assert wide.all()  # a window wider than the matrix: every key


def test_sdpa_oracle_zeroes_rows_without_keys():
    q, k, v, _ = gpu_check._inputs(6, 2, 4, torch.float64, torch.device("cpu"), 1)
    out = references.sdpa(q, k, v, references.causal_mask(6, 2, "bottom_right", "cpu"))
    assert out[..., :4, :].eq(0).all() and out[..., 4:, :].ne(0).all()
