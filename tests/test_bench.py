"""The benchmark harness measures what it says (tiny sizes; no timing is asserted)."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from selfattn import bench


def test_plain_attention_is_attention():
    q, k, v = (torch.randn(2, 3, 17, 8) for _ in range(3))
    torch.testing.assert_close(
        bench.plain_attention(q, k, v), F.scaled_dot_product_attention(q, k, v)
    )


def test_fit_slope_recovers_exponents():
    ns = [100, 200, 400, 800]
    assert bench.fit_slope(ns, [3 * n**2 for n in ns]) == pytest.approx(2.0)
    assert bench.fit_slope(ns, [n for n in ns]) == pytest.approx(1.0)


def test_inputs_and_every_method_runs():
    for method in bench.METHODS:
        n = 3 if "decode" in method else 40
        x = bench.make_inputs(method, n)
        out = bench._methods()[method](x)
        assert torch.isfinite(out).all()
    with pytest.raises(ValueError, match="unknown method"):
        bench.make_inputs("nope", 4)


def test_time_case_reports_medians():
    r = bench.time_case("flash_attention", 64, repeats=3)
    assert len(r["times_s"]) == 3
    assert r["median_s"] == pytest.approx(sorted(r["times_s"])[1], abs=1e-5)
    assert r["cpu_median_s"] >= 0


def test_memory_case_sees_the_n_by_n_matrix():
    # plain attention at n=1024 holds 4 x 1024 x 1024 float32 scores = 16 MiB; flash holds tiles only.
    plain = bench.memory_case("plain", 1024)
    flash = bench.memory_case("flash_attention", 1024)
    assert 12 <= plain["extra_peak_mib"] <= 48, plain
    assert flash["extra_peak_mib"] < plain["extra_peak_mib"] / 2, (flash, plain)


def test_run_cpu_writes_a_results_file(tmp_path):
    out = tmp_path / "bench.json"
    report = bench.run_cpu(quick=True, repeats=1, out=out, memory=False, log=lambda *_: None)
    data = json.loads(out.read_text())
    assert data["machine"]["torch"] == torch.__version__
    assert data["torch_threads"] == 1 and data["quick"] is True
    assert {c["method"] for c in data["cases"]} >= {
        "plain",
        "sdpa",
        "flash_attention",
        "sliding_window",
    }
    assert data["cases"] == json.loads(json.dumps(report["cases"]))


def test_targets_are_evaluated_from_the_cases():
    cases = [
        dict(method="flash_attention", n=8192, median_s=1.1, extra_peak_mib=20.0),
        dict(method="sdpa", n=8192, median_s=1.0, extra_peak_mib=8.0),
        dict(method="plain", n=8192, median_s=2.0, extra_peak_mib=1000.0),
        dict(method="sliding_window", n=4096, median_s=0.1, extra_peak_mib=100.0),
        dict(method="sliding_window", n=16384, median_s=0.4, extra_peak_mib=400.0),
        dict(method="dense_masked_sdpa", n=16384, median_s=1.6, extra_peak_mib=1000.0),
        dict(method="linear_attention", n=16384, median_s=0.1, extra_peak_mib=50.0),
        dict(method="plain", n=16384, median_s=8.0, extra_peak_mib=4000.0),
    ]
    t = {x["target"].split(",")[0]: x for x in bench.evaluate_targets(cases)}
    assert t["flash_attention time / SDPA time"]["met"] and t["flash_attention time / SDPA time"][
        "value"
    ] == pytest.approx(1.1)
    assert t["flash_attention extra peak / plain's"]["value"] == pytest.approx(0.02)
    assert not t["dense masked time / sliding_window time"]["met"]  # 4x < 5x
    assert t["plain time / linear_attention time"]["value"] == pytest.approx(80)
    slope = next(x for x in t.values() if "slope" in x["target"])
    assert math.isclose(slope["value"], 1.0) and slope["met"]
    assert "NO" in bench.format_targets({"targets": list(t.values())})


def test_gpu_mode_refuses_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="CUDA"):
        bench.run_gpu(out=None)
