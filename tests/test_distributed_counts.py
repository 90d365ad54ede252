"""The communication counters of selfattn.distributed can fail: a stray collective, a wrong
count or a wrong formula is caught.

`count_problems` is what chapter 14's claims use. It compares three counts with the formula:
the library's own (the ring's sends, Ulysses' all-to-alls, and, for tensor parallelism, the
collectives `count_collectives` sees torch dispatch), the bytes the Linux kernel saw the rank
write (`written_bytes`, payload plus gloo's headers), and `CommDebugMode`'s collectives. One
launch of P = 2 gloo processes runs every case (spawning costs seconds).
"""

from __future__ import annotations

import copy
import sys

import pytest
from selfattn import distributed as D

SHAPE = dict(B=1, h=2, n=16, d=8, dtype="float32", causal=False, seed=0)
CASES = [
    dict(strategy="ring", layout="contiguous", **SHAPE),
    dict(strategy="ring", layout="contiguous", extra_collective=True, **SHAPE),
    dict(strategy="ulysses", **SHAPE),
    dict(strategy="ulysses", extra_collective=True, **SHAPE),
    dict(strategy="tensor", **SHAPE),
    dict(strategy="tensor", extra_collective=True, **SHAPE),
]
LINUX = sys.platform.startswith("linux")


@pytest.fixture(scope="module")
def rows():
    out = D.launch(D.chapter_worker, 2, CASES, dict(n=16, repeats=1), timeout=240)
    assert out["ranks"] == [0, 1]
    assert len(out["refusals"]) == 2
    assert set(out["timeline"]) == set(D.LAYOUTS)
    # (2P + 1) / 4 blocks of (n / P)^2 scores, for each of the 2 heads
    assert out["timeline"]["zigzag"]["work"] == [1.25 * 8**2 * 2] * 2
    return out["rows"]


def _by(rows, strategy, stray):
    (row,) = [
        r for r in rows if r["strategy"] == strategy and bool(r.get("extra_collective")) == stray
    ]
    return row


@pytest.mark.parametrize("strategy", ["ring", "ulysses", "tensor"])
def test_the_clean_run_agrees_with_its_formula(rows, strategy):
    row = _by(rows, strategy, False)
    assert D.count_problems(row, 2) == []
    assert row["sent_forward_ranks"] == [D.expected_bytes(row, 2)] * 2
    if LINUX:  # the kernel's count: the payload and a few hundred bytes of headers
        for wire in row["wire_forward_ranks"]:
            assert 0 < wire - row["sent_forward"] < 2048, row


@pytest.mark.parametrize("strategy", ["ring", "ulysses", "tensor"])
def test_a_stray_collective_is_caught(rows, strategy):
    row = _by(rows, strategy, True)
    problems = D.count_problems(row, 2)
    assert any("CommDebugMode saw" in p for p in problems), problems
    if LINUX:
        assert any("the kernel saw" in p for p in problems), problems
    if strategy == "tensor":  # count_collectives sees every collective dispatched
        assert any("the library counted" in p for p in problems), problems
        assert row["sent_forward"] == D.expected_bytes(row, 2) + 4096 * 4  # 2 (P-1)/P = 1


def test_a_wrong_count_is_caught(rows):
    row = copy.deepcopy(_by(rows, "tensor", False))
    row["sent_forward_ranks"][1] += 4
    assert D.count_problems(row, 2) == [
        f"rank 1: the library counted {row['sent_forward_ranks'][1]} bytes, the formula "
        f"{D.expected_bytes(row, 2)}"
    ]


def test_a_count_of_the_reduced_tensor_is_caught(rows):
    # The old counter logged the size of the all-reduced tensor, B n d: at P = 4 that is
    # not what a rank sends, 2 (P - 1) / P of it.
    row = copy.deepcopy(_by(rows, "tensor", False))
    full = row["B"] * row["n"] * row["h"] * row["d"] * 4
    assert D.tensor_parallel_bytes(row["n"], row["h"] * row["d"], 4) != full
    row["sent_forward_ranks"] = [full] * 2
    assert D.count_problems(row, 2) == []  # at P = 2, 2 (P - 1) / P = 1: the same number
    assert D.count_problems(row, 4)  # at P = 4 the formula is 1.5 times it


def test_a_wrong_kernel_count_or_collective_is_caught(rows):
    row = copy.deepcopy(_by(rows, "ulysses", False))
    row["wire_forward_ranks"] = [row["sent_forward"] - 1, None]
    row["comm_debug"] = {"c10d.alltoall_base_": 3}
    problems = D.count_problems(row, 2)
    assert len(problems) == 2 and "rank 0: the kernel saw" in problems[0], problems
    assert "expected {'all_to_all': 4}" in problems[1]


def test_expected_bytes_refuses_other_rows():
    with pytest.raises(ValueError, match="row must be a check_worker row"):
        D.expected_bytes({"strategy": "hello"}, 2)
    with pytest.raises(TypeError, match="timeline must be a dict"):
        D.chapter_worker(0, 2, [], timeline=3)


def test_collective_bytes_model():
    # Ring all-reduce 2 (P - 1) / P, reduce-scatter and all-to-all (P - 1) / P, all-gather P - 1.
    assert D._collective_bytes("all_reduce", 1024, 4) == 1536
    assert D._collective_bytes("reduce_scatter_tensor", 1024, 4) == 768
    assert D._collective_bytes("all_to_all_single", 1024, 4) == 768
    assert D._collective_bytes("all_gather_into_tensor", 1024, 4) == 3072


def test_written_bytes_counts_a_write(tmp_path):
    before = D.written_bytes()
    if before is None:
        pytest.skip("no /proc/self/io here")
    (tmp_path / "x").write_bytes(b"0" * 10000)
    assert D.written_bytes() - before >= 10000
