"""selfattn.bench_sparse (chapter 13): the timing harness runs and reports every layer."""

from __future__ import annotations

import json

from selfattn.bench_sparse import METHODS, main


def test_bench_sparse_writes_a_row_per_method_and_size(tmp_path):
    out = tmp_path / "bench_sparse.json"
    report = main(["--sizes", "32", "64", "--rounds", "1", "--out", str(out)])
    assert json.loads(out.read_text()) == report
    assert [(r["method"], r["n"]) for r in report["rows"]] == [
        (m, n) for n in (32, 64) for m in METHODS
    ]
    assert all(r["cpu_s"] > 0 for r in report["rows"]) and set(report["slopes"]) == set(METHODS)
