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
        out = bench._CASES[method].run(x)
        assert torch.isfinite(out).all()
    with pytest.raises(ValueError, match="unknown method"):
        bench.make_inputs("nope", 4)


def test_time_case_reports_medians():
    r = bench.time_case("flash_attention", 64, repeats=3)
    assert len(r["times_s"]) == 3
    assert r["median_s"] == pytest.approx(sorted(r["times_s"])[1], abs=1e-5)
    assert r["cpu_median_s"] >= 0


def test_memory_case_sees_the_n_by_n_matrix():
    # plain attention at n=1024 holds 4 x 1024 x 1024 float32 scores = 16 MiB; flash: tiles.
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


def test_linear_decode_is_causal_linear_attention_and_its_memory_does_not_grow():
    from selfattn.efficient import linear_attention

    x = bench.make_inputs("linear_decode", 30)
    last = bench._CASES["linear_decode"].run(x)
    full = linear_attention(x["q"], x["k"], x["v"], causal=True)
    torch.testing.assert_close(last, full[..., -1, :])
    # The recurrent form keeps the state only: no n x d arrays, so the extra peak is tiny
    # (the parallel form at n = 4096 needs several n x d arrays, 4 MiB each).
    mem = bench.memory_case("linear_decode", 4096)
    assert mem["extra_peak_mib"] < 2.0, mem


def test_only_runs_the_named_methods_and_merges_into_the_file(tmp_path):
    out = tmp_path / "bench.json"
    quiet = {"log": lambda *_: None}
    full = bench.run_cpu(quick=True, repeats=1, out=out, memory=False, **quiet)
    part = bench.run_cpu(quick=True, out=out, timing=False, only=["sdpa"], **quiet)
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(part))
    assert data["date"] == full["date"]  # the file keeps the full run's date ...
    assert data["updates"][0]["methods"] == ["sdpa"]  # ... and lists the partial run
    assert len(data["cases"]) == len(full["cases"])  # updated in place, nothing duplicated
    untouched = [c for c in data["cases"] if c["method"] != "sdpa"]
    assert untouched == [c for c in full["cases"] if c["method"] != "sdpa"]
    for old, new in zip(
        [c for c in full["cases"] if c["method"] == "sdpa"],
        [c for c in data["cases"] if c["method"] == "sdpa"],
    ):  # a memory-only update: the old times stay, the memory is added
        assert new["times_s"] == old["times_s"] and "extra_peak_mib" in new
    with pytest.raises(ValueError, match="unknown methods"):
        bench.run_cpu(quick=True, out=None, only=["nope"], **quiet)
    with pytest.raises(ValueError, match="nothing to measure"):
        bench.run_cpu(quick=True, out=None, memory=False, timing=False, **quiet)


def test_merge_keeps_old_fields_of_a_memory_only_update():
    old = {
        "quick": False,
        "torch_threads": 1,
        "date": "old",
        "cases": [dict(method="linear_decode", n=1024, median_s=1.0, cpu_median_s=1.0)],
    }
    new = {
        "quick": False,
        "torch_threads": 1,
        "date": "new",
        "machine": {},
        "only": ["linear_decode"],
        "timing": False,
        "cases": [dict(method="linear_decode", n=1024, extra_peak_mib=0.1)],
    }
    merged = bench.merge_results(old, new)
    assert merged["cases"] == [
        dict(method="linear_decode", n=1024, median_s=1.0, cpu_median_s=1.0, extra_peak_mib=0.1)
    ]
    assert merged["date"] == "old" and merged["updates"][0]["timing"] is False
    assert "extra_peak_mib" not in old["cases"][0]  # the input is not modified
    with pytest.raises(ValueError, match="same sizes"):
        bench.merge_results(old, {**new, "quick": True})


def test_the_default_output_is_the_checkout_and_otherwise_out_is_required(monkeypatch, capsys):
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    assert bench.DEFAULT_OUT == repo / "chapters" / "results" / "bench_cpu.json"
    monkeypatch.setattr(bench, "DEFAULT_OUT", None)  # as in an installed wheel
    with pytest.raises(SystemExit):
        bench.main([])
    assert "--out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--quick", "--out", "x.json", "--only", "nope"])


def test_quick_runs_never_overwrite_the_measured_table(monkeypatch, tmp_path):
    monkeypatch.setattr(bench.tempfile, "gettempdir", lambda: str(tmp_path))
    seen = {}
    monkeypatch.setattr(bench, "run_cpu", lambda **kw: seen.update(kw) or {"targets": []})
    monkeypatch.setattr(bench, "format_targets", lambda report: "")
    bench.main(["--quick"])
    assert seen["out"] == tmp_path / "selfattn_bench_quick.json"


def test_training_cases_compute_the_gradients_of_attention():
    # Every training case returns dq of softmax(q k^T / sqrt(d)) v for the same upstream grad.
    x = bench.make_inputs("sdpa_train", 37)
    q, k, v = (x[n].detach().clone().requires_grad_(True) for n in ("q", "k", "v"))
    (F.scaled_dot_product_attention(q, k, v) * x["grad_out"]).sum().backward()
    for method in ("flash_attention_train", "sdpa_train", "plain_train"):
        dq = bench._CASES[method].run(bench.make_inputs(method, 37))
        torch.testing.assert_close(dq, q.grad, atol=1e-5, rtol=1e-5)
    # The harness measures under no_grad: the training step must still build its graph.
    with torch.no_grad():
        dq = bench._CASES["flash_attention_train"].run(bench.make_inputs("plain_train", 37))
    torch.testing.assert_close(dq, q.grad, atol=1e-5, rtol=1e-5)


def test_decoding_cases_attend_one_query_at_a_time_to_the_whole_cache():
    x = bench.make_inputs("sdpa_decode", 300)
    assert len(x["queries"]) == x["tokens"] == bench.DECODE_TOKENS
    assert x["queries"][-1].shape == (1, bench.HEADS, 1, bench.D_HEAD)
    expected = F.scaled_dot_product_attention(x["queries"][-1], x["k"], x["v"])
    for method in ("flash_decoding", "sdpa_decode", "plain_decode"):
        out = bench._CASES[method].run(bench.make_inputs(method, 300))
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    r = bench.time_case("flash_decoding", 300, repeats=3)
    assert r["per_token_s"] == pytest.approx(r["median_s"] / bench.DECODE_TOKENS)


def test_gqa_layer_decodes_against_a_cache_of_n_every_call_and_holds_a_quarter():
    mha, gqa = bench.make_inputs("mha_decode", 40), bench.make_inputs("gqa_decode", 40)
    assert gqa["layer"].num_kv_heads == bench.GQA_KV_HEADS
    assert mha["layer"].num_kv_heads == mha["layer"].num_heads == bench.GQA_HEADS
    # The prefilled cache is what kv_cache_bytes counts, a quarter of MHA's for 8 -> 2.
    assert gqa["cache"].nbytes == bench._facts("gqa_decode", 40)["cache_bytes"]
    assert mha["cache"].nbytes == bench._facts("mha_decode", 40)["cache_bytes"]
    assert gqa["cache"].nbytes * 4 == mha["cache"].nbytes
    run = bench._CASES["gqa_decode"].run
    first = run(gqa)
    assert len(gqa["cache"]) == 40 + bench.DECODE_TOKENS
    torch.testing.assert_close(run(gqa), first)  # the cache went back to n, not n + tokens
    assert len(gqa["cache"]) == 40 + bench.DECODE_TOKENS
    assert first.shape == (1, 1, bench.GQA_D_MODEL)


def test_quick_plan_has_the_new_rows_and_their_targets():
    report = bench.run_cpu(quick=True, repeats=1, out=None, memory=False, log=lambda *_: None)
    rows = {(c["method"], c["n"]): c for c in report["cases"]}
    for n in (64, 128):
        for method in ("flash_attention_train", "sdpa_train", "plain_train"):
            assert (method, n) in rows
    for method in ("flash_decoding", "sdpa_decode", "plain_decode"):
        row = rows[(method, 256)]
        assert row["tokens"] == bench.DECODE_TOKENS and row["per_token_s"] > 0
    mha, gqa = rows[("mha_decode", 128)], rows[("gqa_decode", 128)]
    assert gqa["cache_bytes"] * 4 == mha["cache_bytes"] == 2 * 8 * 64 * 128 * 4
    assert gqa["per_token_s"] > 0 and mha["per_token_s"] > 0


def _new_cases(**over):
    cases = [
        dict(method="flash_attention_train", n=4096, median_s=0.5, extra_peak_mib=30.0),
        dict(method="sdpa_train", n=4096, median_s=0.2, extra_peak_mib=20.0),
        dict(method="plain_train", n=4096, median_s=1.0, extra_peak_mib=800.0),
        dict(method="flash_decoding", n=16384, median_s=0.32, per_token_s=0.01),
        dict(method="sdpa_decode", n=16384, median_s=0.16, per_token_s=0.005),
        dict(method="plain_decode", n=16384, median_s=0.32, per_token_s=0.01),
        dict(method="mha_decode", n=4096, median_s=0.64, per_token_s=0.02, cache_bytes=16),
        dict(method="gqa_decode", n=4096, median_s=0.32, per_token_s=0.01, cache_bytes=4),
    ]
    for c in cases:
        c.setdefault("extra_peak_mib", 1.0)
        c.update(over.get(c["method"], {}))
    return cases


def test_new_targets_are_evaluated_from_the_cases():
    t = {x["target"].split(",")[0]: x for x in bench.evaluate_targets(_new_cases())}
    time_ratio = t["flash_attention fwd+bwd time / SDPA fwd+bwd"]
    assert time_ratio["value"] == pytest.approx(2.5) and not time_ratio["met"]  # goal <= 2
    memory = t["flash_attention fwd+bwd extra peak / plain's"]
    assert memory["value"] == pytest.approx(30 / 800) and memory["met"]  # goal <= 0.1
    decode = t["flash_decoding time per token / SDPA decode's"]
    assert decode["value"] == pytest.approx(2.0) and decode["met"]  # reported, no target
    assert "plain 10.00 ms" in decode["detail"]
    cache = next(x for k, x in t.items() if k.startswith("GQA (8->2 KV heads) cache bytes"))
    assert cache["value"] == pytest.approx(0.25) and cache["met"]
    assert t["GQA decode time per token / MHA's"]["value"] == pytest.approx(0.5)
    # A flash training step that needs more than a tenth of plain's memory fails its target,
    # and one within twice SDPA's time meets it.
    slow = {"flash_attention_train": dict(median_s=0.3, extra_peak_mib=100.0)}
    t = {x["target"].split(",")[0]: x for x in bench.evaluate_targets(_new_cases(**slow))}
    assert t["flash_attention fwd+bwd time / SDPA fwd+bwd"]["met"]
    assert not t["flash_attention fwd+bwd extra peak / plain's"]["met"]
    # Targets of a memory-only row (no time) are left out instead of failing.
    cases = [c for c in _new_cases() if c["method"] != "sdpa_train"]
    cases.append(dict(method="sdpa_train", n=4096, extra_peak_mib=20.0))
    names = [x["target"] for x in bench.evaluate_targets(cases)]
    assert not any("SDPA fwd+bwd" in name for name in names)


def test_a_partial_run_of_the_new_rows_adds_their_targets_to_the_file():
    old_case = dict(method="linear_decode", n=1024, extra_peak_mib=0.0)  # memory only
    old = {"quick": False, "torch_threads": 1, "date": "old", "cases": [old_case]}
    new = {
        "quick": False,
        "torch_threads": 1,
        "date": "new",
        "machine": {},
        "only": ["sdpa_train"],
        "cases": _new_cases(),
    }
    merged = bench.merge_results(old, new)
    names = [t["target"] for t in merged["targets"]]
    assert any(name.startswith("flash_attention fwd+bwd time") for name in names)
    assert any(name.startswith("GQA decode time") for name in names)


def test_timeit_orders_a_slow_and_a_fast_function_and_rejects_bad_arguments():
    import time

    import pytest
    from selfattn.bench import timeit

    def fast():
        pass

    def slow():
        time.sleep(0.01)

    t_fast, t_slow = timeit([fast, slow], rounds=2)
    assert t_slow >= 0.01 > t_fast
    assert isinstance(timeit(fast, rounds=1, clock="cpu", stat="median"), float)
    for bad in ({"rounds": 0}, {"clock": "gpu"}, {"stat": "mean"}, {"warmup": -1}):
        with pytest.raises(ValueError):
            timeit(fast, **bad)
    with pytest.raises(TypeError):
        timeit([fast, 3])


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_timeit_calls_each_function_warmup_plus_rounds_times_number(clock):
    # No hidden extra calls (Timer.timeit's own warm-up): a slow case costs what it says,
    # and time_case's CPU clock, read around one timed call, reads that call alone.
    from selfattn.bench import timeit

    calls = {"a": 0, "b": 0}

    def a():
        calls["a"] += 1

    def b():
        calls["b"] += 1

    timeit([a, b], rounds=3, number=4, warmup=2, clock=clock)
    assert calls == {"a": 2 + 3 * 4, "b": 2 + 3 * 4}


def test_time_case_times_one_call_per_repeat(monkeypatch):
    from selfattn import bench

    calls = []
    case = bench._CASES["sdpa"]
    monkeypatch.setitem(
        bench._CASES, "sdpa", bench._Case(lambda x: calls.append(1), case.description)
    )
    row = bench.time_case("sdpa", 64, repeats=4, warmup=2)
    assert len(calls) == 2 + 4 and len(row["times_s"]) == len(row["cpu_times_s"]) == 4


def test_timeit_on_a_gpu_uses_triton_do_bench(monkeypatch):
    """device="cuda" routes every round through triton.testing.do_bench (seconds from ms)."""
    import sys
    import types

    from selfattn import bench

    calls = []

    def fake_do_bench(fn, warmup=25, rep=100, return_mode="mean"):
        calls.append((fn, rep, return_mode))
        fn()
        return 2.0 if fn is slow else 1.0  # milliseconds, as Triton reports

    testing = types.SimpleNamespace(do_bench=fake_do_bench)
    monkeypatch.setitem(sys.modules, "triton", types.SimpleNamespace(testing=testing))
    monkeypatch.setitem(sys.modules, "triton.testing", testing)
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: object())

    def fast():
        pass

    def slow():
        pass

    assert bench.timeit([fast, slow], rounds=3, stat="median", device="cuda") == [1e-3, 2e-3]
    assert len(calls) == 6 and {(rep, mode) for _, rep, mode in calls} == {(100, "median")}
    # anything but CUDA keeps torch.utils.benchmark's Timer
    calls.clear()
    bench.timeit(fast, rounds=1, device="cpu")
    assert calls == []


def test_recorder_binds_the_chapter_prefix(tmp_path, monkeypatch):
    import json

    import pytest
    from selfattn import recorder

    rec = recorder("ch99", results_dir=tmp_path)
    assert rec("speed", 3) == 3 and rec.key("x") == "ch99_x"
    assert json.loads((tmp_path / "ch99.json").read_text()) == {"ch99_speed": 3}
    with pytest.raises(ValueError, match="pass 'x', not 'ch99_x'"):
        rec("ch99_x", 1)  # the prefix is the recorder's to add
    glued = []
    monkeypatch.setattr("myst_nb.glue", lambda *a, **k: glued.append((a, k)))
    assert rec.glue("live_ms", 2.5) == 2.5  # glued, not stored
    assert glued == [(("ch99_live_ms", 2.5), {"display": False})]
    assert json.loads((tmp_path / "ch99.json").read_text()) == {"ch99_speed": 3}
    with pytest.raises(ValueError):
        recorder("ch 9")


def test_goal_met_reads_a_target_as_the_results_file_writes_it():
    assert bench.goal_met("<= 1.25", 1.25) and not bench.goal_met("<= 1.25", 1.26)
    assert bench.goal_met(">= 5", 5.0) and not bench.goal_met(">= 5", 4.99)
    assert bench.goal_met("<= 1.2 (at most linear)", 1.19)
    for bad in (bench.REPORTED, "== 3", "<=", "<= fast", 5):
        with pytest.raises(ValueError, match="goal must read"):
            bench.goal_met(bad, 1.0)
    with pytest.raises(TypeError, match="value"):
        bench.goal_met("<= 1", "1")
    # every target the harness writes carries the verdict goal_met gives on its value
    for row in bench.evaluate_targets(_new_cases()):
        assert row["met"] == (
            row["goal"] == bench.REPORTED or bench.goal_met(row["goal"], row["value"])
        )
