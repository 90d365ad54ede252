"""The two-level memory simulation against the paper's formulas."""

import math

import pytest
from selfattn.efficient import (
    TwoLevelMemory,
    flash_block_sizes,
    standard_attention_io,
    tiled_attention_io,
)
from selfattn.efficient.io_model import (
    flash_backward_block_sizes,
    standard_attention_backward_io,
    tiled_attention_backward_io,
)


def test_standard_with_ample_fast_memory_is_the_formula():
    # Rows fit: Q, K read once, S written, read, P written, read, V read, O written.
    for n, d in ((64, 8), (100, 16)):
        mem = standard_attention_io(n, d, M=10**9)
        assert mem.reads == 3 * n * d + 2 * n * n
        assert mem.writes == 2 * n * n + n * d


def test_tiled_counts_match_the_closed_form_for_any_n():
    for n, d, m in ((100, 16, 2000), (257, 8, 1000), (1, 4, 100)):
        br, bc = flash_block_sizes(d, m, n)
        mem = tiled_attention_io(n, d, m)
        assert mem.reads == n * d + math.ceil(n / br) * 2 * n * d
        assert mem.writes == n * d + n
        assert mem.peak <= m


def test_fast_memory_is_never_exceeded_and_tiled_wins():
    for m in (1_000, 10_000, 100_000):
        std, til = standard_attention_io(512, 64, m), tiled_attention_io(512, 64, m)
        assert std.peak <= m and til.peak <= m
        if m >= 10_000:
            assert til.total < std.total


def test_tiled_traffic_scales_as_n2_d2_over_m():
    # Quadrupling M (while blocks are far below n) cuts the traffic about 4x (less here,
    # where the key block is still growing towards d between the two sizes).
    a, b = tiled_attention_io(4096, 64, 8_000).total, tiled_attention_io(4096, 64, 32_000).total
    assert 2.5 < a / b < 5.0
    ratio = tiled_attention_io(4096, 64, 32_000).total / (4096**2 * 64**2 / 32_000)
    assert 4 < ratio < 12  # the constant hidden in Theta: about 8 with B = M / 4d


@pytest.mark.parametrize("n, d", [(1024, 64), (4096, 64), (8192, 64), (4096, 32), (2048, 128)])
def test_tiled_traffic_follows_n2_d2_over_m_within_a_factor_2_band(n, d):
    # Theta(N^2 d^2 / M) means one constant band over the whole range 64 d <= M <= N d / 2,
    # not just a slope between two points: square blocks with B^2 <= M drifted 3x above it.
    ratios = []
    M = 64 * d
    while M <= n * d // 2:
        mem = tiled_attention_io(n, d, M)
        assert mem.peak <= M
        ratios.append(mem.total / (n**2 * d**2 / M))
        M *= 2
    assert len(ratios) >= 4
    assert max(ratios) / min(ratios) <= 2.0, ratios


def test_the_query_block_grows_as_m_over_d_and_the_key_block_stays_small():
    d, n = 64, 1 << 20
    for M in (2**12, 2**14, 2**16, 2**18, 2**20):
        br, bc = flash_block_sizes(d, M, n)
        assert bc <= d
        assert 0.24 <= br * d / M <= 0.4, (M, br)  # between about M / 4d and 3M / 8d
    assert flash_block_sizes(64, math.inf, 100) == (100, 64)
    assert flash_block_sizes(64, 10**9, 50) == (50, 50)  # both capped at n


def test_overflow_and_bad_sizes():
    mem = TwoLevelMemory(10)
    with pytest.raises(MemoryError):
        mem.load(11)
    with pytest.raises(MemoryError):
        flash_block_sizes(64, 100, 10)
    with pytest.raises(ValueError, match="n must"):
        tiled_attention_io(0, 4, 100)
    with pytest.raises(ValueError, match="fast-memory"):
        standard_attention_io(4, 4, -1)
    with pytest.raises(TypeError, match="fast-memory"):
        tiled_attention_io(4, 4, True)


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: tiled_attention_io(256, 16, 4096, blocks=(-4, 8)),
            r"blocks\[0\] \(B_r\) must be >= 1",
        ),
        (
            lambda: tiled_attention_io(256, 16, 4096, blocks=(4, 0)),
            r"blocks\[1\] \(B_c\) must be >= 1",
        ),
        (
            lambda: tiled_attention_io(256, 16, 4096, blocks=(4.5, 8)),
            r"blocks\[0\] \(B_r\) must be an int",
        ),
        (lambda: tiled_attention_io(256, 16, 4096, blocks=4), "blocks must be a pair"),
        (lambda: standard_attention_io(256, 16, 4096, block=-3), "block must be >= 1"),
        (lambda: tiled_attention_io(-1, 16, 4096), "n must be >= 1, got -1"),
        (lambda: tiled_attention_io(8, 2.0, 4096), "d must be an int"),
    ],
)
def test_bad_block_sizes_are_refused(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


# The backward pass (FlashAttention-2, Algorithm 2) against the standard one.


def test_standard_backward_is_the_five_pass_formula():
    for n, d in ((64, 8), (100, 16), (1, 1)):
        mem = standard_attention_backward_io(n, d)
        assert mem.reads == 5 * n * n + 5 * n * d
        assert mem.writes == 2 * n * n + 3 * n * d


def test_tiled_backward_counts_match_the_closed_form_for_any_n():
    for n, d, m in ((100, 16, 2000), (257, 8, 1000), (1, 4, 100), (4096, 64, 65536)):
        br, bc = flash_backward_block_sizes(d, m, n)
        mem = tiled_attention_backward_io(n, d, m)
        t_c = math.ceil(n / bc)
        assert mem.reads == 4 * n * d + t_c * (3 * n * d + 2 * n)
        assert mem.writes == n + n * d + t_c * n * d + 2 * n * d
        assert mem.peak <= m
    # explicit blocks are honoured: one key block reads Q, dO, dQ, L, D exactly once
    mem = tiled_attention_backward_io(50, 8, 10**6, blocks=(5, 50))
    assert mem.reads == 4 * 50 * 8 + 3 * 50 * 8 + 2 * 50


@pytest.mark.parametrize("n, d", [(1024, 64), (4096, 64), (4096, 32), (2048, 128)])
def test_tiled_backward_follows_n2_d2_over_m_within_a_factor_2_band(n, d):
    ratios = []
    M = 64 * d
    while M <= n * d // 2:
        mem = tiled_attention_backward_io(n, d, M)
        assert mem.peak <= M
        ratios.append(mem.total / (n**2 * d**2 / M))
        M *= 2
    assert len(ratios) >= 4
    assert max(ratios) / min(ratios) <= 2.0, ratios


def test_tiled_backward_beats_the_standard_one_once_blocks_are_large():
    n, d = 4096, 64
    std = standard_attention_backward_io(n, d).total
    assert std > 7 * n * n  # P, dP, dS cross the slow memory seven times
    assert tiled_attention_backward_io(n, d, 65536).total < std / 3
    # the key block grows as M / d, the query block stays at most d
    for M in (2**14, 2**16, 2**18):
        br, bc = flash_backward_block_sizes(d, M, 1 << 20)
        assert br <= d
        assert 0.1 <= bc * d / M <= 0.26, (M, bc)


def test_backward_bad_sizes_are_refused():
    with pytest.raises(MemoryError):
        flash_backward_block_sizes(64, 100, 10)
    with pytest.raises(ValueError, match="n must"):
        standard_attention_backward_io(0, 4)
    with pytest.raises(ValueError, match=r"blocks\[1\] \(B_c\) must be >= 1"):
        tiled_attention_backward_io(64, 8, 4096, blocks=(4, 0))
    with pytest.raises(TypeError, match="blocks must be a pair"):
        tiled_attention_backward_io(64, 8, 4096, blocks=4)
