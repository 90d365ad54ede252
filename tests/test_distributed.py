"""selfattn.distributed: ring attention, Ulysses and tensor-parallel heads equal one device.

The strategies run on real gloo process groups (P = 2 and P = 4 processes on the CPU),
forward and backward, against torch's own SDPA on the whole sequence. One spawn per P runs
every check in one worker (spawning costs seconds), so the file stays within about a minute.
n not divisible by P (2P for zigzag) is refused, not padded.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch
from selfattn import distributed as D
from torch.nn.functional import scaled_dot_product_attention as sdpa

# Float32 to 1e-5, float64 to 1e-12, in units of the reference's largest entry (at least 1):
# both against torch's SDPA on the whole sequence.
TOL = {"float32": 1e-5, "float64": 1e-12}


def _cases(P: int) -> list[dict]:
    cases = []
    for dtype in ("float32", "float64"):
        for causal in (False, True):
            for layout in D.LAYOUTS:
                cases.append(
                    dict(
                        strategy="ring",
                        layout=layout,
                        causal=causal,
                        dtype=dtype,
                        B=2,
                        h=2,
                        n=8 * P,
                        d=8,
                        seed=1,
                    )
                )
            cases.append(
                dict(
                    strategy="ulysses",
                    causal=causal,
                    dtype=dtype,
                    B=2,
                    h=2 * P,
                    n=4 * P,
                    d=8,
                    seed=2,
                )
            )
            cases.append(
                dict(strategy="tensor", causal=causal, dtype=dtype, B=2, h=P, n=12, d=4, seed=3)
            )
    # Edge cases: one position per rank (two chunks of one for zigzag), n != d, GQA.
    cases.append(
        dict(
            strategy="ring",
            layout="contiguous",
            causal=True,
            dtype="float64",
            B=1,
            h=1,
            n=P,
            d=3,
            seed=4,
        )
    )
    cases.append(
        dict(
            strategy="ring",
            layout="zigzag",
            causal=True,
            dtype="float64",
            B=1,
            h=1,
            n=2 * P,
            d=5,
            seed=5,
        )
    )
    cases.append(
        dict(
            strategy="ulysses",
            causal=True,
            dtype="float64",
            B=1,
            h=2 * P,
            h_kv=P,
            n=P,
            d=4,
            seed=6,
        )
    )
    cases.append(
        dict(
            strategy="tensor",
            causal=False,
            dtype="float64",
            B=1,
            h=2 * P,
            h_kv=P,
            n=5,
            d=4,
            seed=7,
        )
    )
    return cases


@pytest.fixture(scope="module", params=[2, 4], ids=["P2", "P4"])
def run(request):
    P = request.param
    t0 = time.perf_counter()
    rows = D.launch(D.check_worker, P, _cases(P), refusals=True, timeout=240)
    return P, rows[:-1], rows[-1]["messages"], time.perf_counter() - t0


def test_equal_to_one_device_forward_and_backward(run):
    P, rows, _, _ = run
    assert len(rows) == len(_cases(P))
    for row in rows:
        tol = TOL[row["dtype"]]
        assert row["out_err"] < tol, row
        assert row["grad_err"] < tol, row


def test_bytes_against_formulas(run):
    P, rows, _, _ = run
    for row in rows:
        size = 4 if row["dtype"] == "float32" else 8
        B, h, n, d = row["B"], row["h"], row["n"], row["d"]
        if row["strategy"] == "ring":
            # Forward: P - 1 K and V blocks; backward: P - 1 again plus P dK, dV blocks.
            fwd = D.ring_bytes(n, d, P, batch=B, heads=h, bytes_per=size)
            assert row["sent_forward"] == fwd, row
            assert row["sent_backward"] == fwd + fwd * P // (P - 1), row
        elif row["strategy"] == "ulysses" and "h_kv" not in row:
            fwd = D.ulysses_bytes(n, h * d, P, batch=B, bytes_per=size)
            assert row["sent_forward"] == fwd, row
            assert row["sent_backward"] == fwd, row  # the inverse all-to-alls
        elif row["strategy"] == "tensor":
            # One ring all-reduce of B n d in the forward, one more (x's gradient) backward.
            fwd = D.tensor_parallel_bytes(n, h * d, P, batch=B, bytes_per=size)
            assert row["sent_forward"] == fwd, row
            assert row["sent_backward"] == fwd, row
            # CommDebugMode sees the one all-reduce of the forward.
            assert list(row["comm_debug"].values()) == [1], row
            assert "all_reduce" in next(iter(row["comm_debug"])), row
        # Every rank: the library's count, the kernel's count of bytes written (payload plus
        # gloo's headers) and CommDebugMode's collectives agree with the formula.
        assert D.count_problems(row, P) == [], row


def test_zigzag_balances_causal_work(run):
    P, rows, _, _ = run
    ring = [r for r in rows if r["strategy"] == "ring" and r["causal"] and r["n"] == 8 * P]
    for row in ring:
        c = row["n"] // P  # a rank's block is (n / P)^2 scores per batch and head
        units = row["work_forward"] / (c * c * row["B"] * row["h"])
        # Rank 0 (whose work is reported): 1 block contiguous, (2P + 1) / 4 zigzag.
        assert units == D.ring_work(P, row["layout"])[0], row


def test_refusals_are_clear(run):
    P, _, refusals, _ = run
    ulysses, zigzag = refusals
    assert "divisible by P" in ulysses and f"got {P + 1} query heads" in ulysses
    assert "even length" in zigzag


def test_a_raising_rank_stops_the_others_with_its_error():
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match=r"rank 1 of 2 raised[\s\S]*fails on purpose"):
        D.launch(D.raising_worker, 2, timeout=120)
    assert time.perf_counter() - t0 < 120


def test_a_hanging_rank_times_out():
    with pytest.raises(TimeoutError, match="did not finish within 3 s"):
        D.launch(D._sleep_worker, 1, 600.0, timeout=3)


@pytest.mark.parametrize("P", [1, 2, 3, 4])
@pytest.mark.parametrize("layout", D.LAYOUTS)
@pytest.mark.parametrize("causal", [False, True])
def test_simulation_equals_sdpa(P, layout, causal):
    g = torch.Generator().manual_seed(P)
    q, k, v = (torch.randn(2, 3, 4 * P, 5, generator=g, dtype=torch.float64) for _ in range(3))
    out, steps = D.simulate_ring(q, k, v, P, causal=causal, layout=layout, trace=True)
    assert (out - sdpa(q, k, v, is_causal=causal)).abs().max() < 1e-12
    # At step s, rank r holds the block of rank r - s.
    assert steps == [[(r - s) % P for r in range(P)] for s in range(P)]


def test_simulation_float32_and_gradients():
    q, k, v = (torch.randn(1, 2, 16, 8, requires_grad=True) for _ in range(3))
    out = D.simulate_ring(q, k, v, 4, causal=True, layout="zigzag")
    ref = sdpa(q, k, v, is_causal=True)
    assert (out - ref).abs().max() < 1e-6
    g1 = torch.autograd.grad(out.sum(), (q, k, v))
    g2 = torch.autograd.grad(ref.sum(), (q, k, v))
    assert max((a - b).abs().max() for a, b in zip(g1, g2)) < 1e-5


@pytest.mark.parametrize("layout", D.LAYOUTS)
def test_shard_round_trip(layout):
    x = torch.arange(24.0).reshape(1, 12, 2)
    parts = D.shard(x, 3, layout)
    assert len(parts) == 3 and all(p.shape == (1, 4, 2) for p in parts)
    assert torch.equal(D.unshard(parts, layout), x)
    if layout == "zigzag":  # rank 0 holds chunks 0 and 5 of 6
        assert parts[0][0, :, 0].tolist() == [0.0, 2.0, 20.0, 22.0]


def test_ring_work_formula():
    for P in (1, 2, 4, 8):
        assert D.ring_work(P, "contiguous") == [float(r + 1) for r in range(P)]
        assert D.ring_work(P, "zigzag") == [(2 * P + 1) / 4] * P
        assert D.ring_work(P, "contiguous", causal=False) == [float(P)] * P
        # Zigzag's chunks are half as long, so its diagonal blocks waste less: never more
        # work in all, and the slowest rank does (2P + 1) / 4 blocks instead of P.
        assert sum(D.ring_work(P, "zigzag")) <= sum(D.ring_work(P, "contiguous"))


def test_formulas():
    assert D.ring_bytes(1024, 64, 4) == 2 * 3 * 256 * 64 * 4
    assert D.ulysses_bytes(1024, 512, 4) == 4 * 3 * 256 * 512 * 4 // 4
    assert D.tensor_parallel_bytes(1024, 512, 4, batch=2) == 2 * 3 * 2 * 1024 * 512 * 4 // 4
    assert D.tensor_parallel_bytes(1024, 512, 1) == 0  # one rank sends nothing


def test_bad_input():
    x = torch.randn(1, 10, 4)
    with pytest.raises(ValueError, match=r"n=10 must be divisible by P=4.*refused, not padded"):
        D.shard(x, 4)
    with pytest.raises(ValueError, match=r"n=10 must be divisible by 2P=8"):
        D.shard(x, 4, "zigzag")
    with pytest.raises(ValueError, match="layout must be one of"):
        D.shard(x, 2, "ring")
    with pytest.raises(TypeError, match="x must be a tensor"):
        D.shard([1, 2], 2)
    with pytest.raises(TypeError, match="shards must be a non-empty list"):
        D.unshard(x)
    with pytest.raises(ValueError, match="one shape"):
        D.unshard([x, x[:, :4]])
    with pytest.raises(TypeError, match="fn must be a function"):
        D.launch("hello", 2)
    with pytest.raises(RuntimeError, match="not initialised"):
        D.ring_attention(x, x, x)
    with pytest.raises(ValueError, match="same batch dims and length"):
        D.simulate_ring(x, x[:, :8], x[:, :8], 2)
    with pytest.raises(TypeError, match="causal must be True or False"):
        D.simulate_ring(x, x, x, 2, causal="yes")
    from selfattn import MultiHeadAttention

    with pytest.raises(ValueError, match="h=3 and h_kv=3 must both be divisible by P"):
        D.TensorParallelAttention(MultiHeadAttention(12, 3), 2)


def test_tensor_parallel_layout_unsplit_equals_multihead():
    from selfattn import MultiHeadAttention

    mha = MultiHeadAttention(16, 4, num_kv_heads=2)
    tp = D.TensorParallelAttention(mha, 2)
    x = torch.randn(2, 7, 16)
    for causal in (False, True):
        ref = mha(x, mask="causal" if causal else None)
        assert (tp(x, causal=causal) - ref).abs().max() < 1e-6


def test_import_starts_nothing():
    code = (
        "import sys, selfattn, selfattn.distributed\n"
        "bad = [m for m in sys.modules if m.startswith(('torch.distributed.tensor',"
        " 'multiprocessing.popen'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
