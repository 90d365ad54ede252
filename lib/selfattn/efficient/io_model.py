r"""An IO model of attention: how many elements move between slow and fast memory.

FlashAttention's argument (Dao et al. 2022, Theorem 2) is about memory traffic, not
FLOPs: with a fast memory (GPU SRAM) of ``M`` elements, standard attention reads and
writes ``Theta(N d + N^2)`` elements of slow memory (HBM), tiled attention
``Theta(N^2 d^2 / M)``. This module *simulates* both algorithms on a two-level machine:
:class:`TwoLevelMemory` counts every element loaded or stored, and checks that what
an algorithm holds in fast memory at once never exceeds ``M``.

Symbols: ``n`` (the paper's ``N``) queries and keys, ``d`` the head size, ``M`` the
fast-memory size in elements. (``m`` is kept for the number of keys and the running maximum
is ``mu``, so the three never share a letter.)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from .._checks import require_int, require_number

__all__ = [
    "TwoLevelMemory",
    "standard_attention_io",
    "tiled_attention_io",
    "flash_block_sizes",
    "standard_attention_backward_io",
    "tiled_attention_backward_io",
    "flash_backward_block_sizes",
]


@dataclass
class TwoLevelMemory:
    """Slow memory of unlimited size, fast memory of ``capacity`` elements; counts the traffic.

    Attributes:
        capacity: ``M``, elements the fast memory holds (``math.inf`` = unbounded).
        reads: elements loaded from slow memory; writes: elements stored to it.
        peak: the most elements held in fast memory at once.
    """

    capacity: float
    reads: int = 0
    writes: int = 0
    held: int = 0
    peak: int = 0

    def __post_init__(self):
        require_number(self.capacity, "capacity", positive=True, finite=False)

    def load(self, elements: int, what: str = "") -> None:
        """Bring ``elements`` into fast memory (counted as reads)."""
        self.reads += elements
        self.allocate(elements, what)

    def allocate(self, elements: int, what: str = "") -> None:
        """Hold ``elements`` of scratch in fast memory (no traffic); fails if over capacity."""
        self.held += elements
        self.peak = max(self.peak, self.held)
        if self.held > self.capacity:
            raise MemoryError(
                f"fast memory overflow: holding {self.held} elements > "
                f"M = {self.capacity} ({what})"
            )

    def store(self, elements: int) -> None:
        """Write ``elements`` back to slow memory (counted as writes); still held until freed."""
        self.writes += elements

    def free(self, elements: int) -> None:
        """Drop ``elements`` from fast memory."""
        self.held -= elements

    @property
    def total(self) -> int:
        """reads + writes."""
        return self.reads + self.writes


def standard_attention_io(
    n: int, d: int, M: float = math.inf, *, block: int | None = None
) -> TwoLevelMemory:
    """Standard attention (the paper's Algorithm 0) on the two-level machine.

    Three passes, each streaming its operands block by block through fast memory:
    ``S = Q K^T`` (read Q, K; write S), ``P = softmax(S)`` (read S; write P), ``O = P V``
    (read P, V; write O). The n x n matrices S and P each go to slow memory and back:
    ``Theta(n d + n^2)`` traffic whatever M is.

    Args:
        n: sequence length; d: head dimension; M: fast-memory size in elements.
        block: rows per block (default: the most that fit in M, at most n).

    Returns:
        The :class:`TwoLevelMemory` after the run (``reads``, ``writes``, ``total``, ``peak``).
    """
    _check(n, d, M)
    if block is not None:
        require_int(block, "block", minimum=1)
    mem = TwoLevelMemory(M)
    # Rows per block: a block of Q rows, of K rows and of S (b x b) must fit together.
    b = block or _largest(lambda b: 2 * b * d + b * b <= M, n)
    for bi in _blocks(n, b):  # 1) S = Q K^T, tile by tile
        mem.load(bi * d, "Q block")
        for bj in _blocks(n, b):
            mem.load(bj * d, "K block")
            mem.allocate(bi * bj, "S tile")
            mem.store(bi * bj)
            mem.free(bi * bj + bj * d)
        mem.free(bi * d)
    # 2) P = softmax(S), row by row. If a row of S and of P fit together, one read and one write;
    # otherwise stream the row in chunks twice (max and sum online, then normalise): two reads.
    if 2 * n <= M:
        rows = _largest(lambda r: 2 * r * n <= M, n)
        for r in _blocks(n, rows):
            mem.load(r * n, "S rows")
            mem.allocate(r * n, "P rows")
            mem.store(r * n)
            mem.free(2 * r * n)
    else:
        chunk = max(1, int(M // 2) - 1)
        for _ in range(n):
            for _pass in range(2):
                for c in _blocks(n, chunk):
                    mem.load(c, "S chunk")
                    mem.allocate(2, "row max and sum")
                    if _pass == 1:
                        mem.store(c)
                    mem.free(c + 2)
    for bi in _blocks(n, b):  # 3) O = P V
        mem.allocate(bi * d, "O block")
        for bj in _blocks(n, b):
            mem.load(bi * bj, "P tile")
            mem.load(bj * d, "V block")
            mem.free(bi * bj + bj * d)
        mem.store(bi * d)
        mem.free(bi * d)
    return mem


def flash_block_sizes(d: int, M: float, n: int) -> tuple[int, int]:
    """Block sizes ``(B_r, B_c)`` for tiled attention in FlashAttention-2's order.

    The outer loop runs over query blocks, so the query block ``B_r`` must grow as
    ``Theta(M / d)``: each query block reads all of K and V once, and the traffic is
    ``2 n^2 d / B_r``. The key block stays small: ``B_c = min(d, floor(M / 8d))`` (at
    least 1; capped at n), and ``B_r`` is then the most query rows whose working set
    fits, Q_i and O_i (``B_r d`` each), the row statistics mu and l (``2 B_r``), K_j and
    V_j (``B_c d`` each) and the tile S_ij (``B_r B_c``):
    ``B_r (2 d + 2 + B_c) + 2 B_c d <= M``. That gives ``B_r`` between about ``M / 4d``
    and ``3 M / 8d`` (about ``M / 3d`` once ``M >> d^2``), so the traffic stays between
    about ``6 n^2 d^2 / M`` and ``9 n^2 d^2 / M`` while ``B_r`` is well below n.

    (FlashAttention-1 loops the other way round, outer loop over key/value blocks, and
    takes ``B_c = ceil(M / 4d)``, ``B_r = min(B_c, d)``: the same ``Theta``, with the
    roles of the two blocks exchanged.)

    Args:
        d: head size; M: fast-memory size in elements; n: sequence length (caps both).

    Returns:
        ``(B_r, B_c)``: query rows and key rows per block.

    Raises:
        MemoryError: M is too small to hold one query row and one key row.
    """
    _check(n, d, M)
    bc = _small_block(d, n, M, 8)
    br = _largest(lambda r: r * (2 * d + 2 + bc) + 2 * bc * d <= M, n)
    return br, bc


def tiled_attention_io(
    n: int, d: int, M: float, *, blocks: tuple[int, int] | None = None
) -> TwoLevelMemory:
    """Tiled (FlashAttention-2 order) attention on the two-level machine.

    Outer loop over query blocks: load Q_i once, stream every K_j, V_j block through fast
    memory, keep S_ij, mu, l and O_i on chip, write O_i (and the row log-sum-exp) once.
    Reads: ``n d`` for Q plus ``2 n d`` per query block, i.e. ``n d + 2 n^2 d / B_r``
    with ``B_r = Theta(M / d)``: ``Theta(n^2 d^2 / M)``.

    Args:
        n, d: sizes; M: fast-memory size in elements.
        blocks: ``(B_r, B_c)``; default :func:`flash_block_sizes`.

    Returns:
        The :class:`TwoLevelMemory` after the run.
    """
    br, bc, mem = _start_tiled(n, d, M, blocks, flash_block_sizes)
    for r in _blocks(n, br):
        mem.load(r * d, "Q_i")
        mem.allocate(r * d + 2 * r, "O_i, mu_i, ell_i")
        for c in _blocks(n, bc):
            mem.load(2 * c * d, "K_j, V_j")
            mem.allocate(r * c, "S_ij")
            mem.free(r * c + 2 * c * d)
        mem.store(r * d + r)  # O_i and the log-sum-exp (kept for the backward pass)
        mem.free(2 * r * d + 2 * r)
    return mem


def standard_attention_backward_io(n: int, d: int) -> TwoLevelMemory:
    """The standard backward pass (the FlashAttention paper's Algorithm 3), each pass once.

    Five passes, each reading its operands from slow memory once and writing its result
    once (the least any M can do for this algorithm; a small M only adds re-reads):
    ``dV = P^T dO`` (read P, dO; write dV), ``dP = dO V^T`` (read dO, V; write dP),
    ``dS = P o (dP - rowsum(P o dP))`` (read P, dP; write dS), ``dQ = dS K / sqrt(d)``
    (read dS, K; write dQ), ``dK = dS^T Q / sqrt(d)`` (read dS, Q; write dK). The three
    n x n matrices P, dP and dS cross the slow memory seven times:
    ``reads = 5 n^2 + 5 n d``, ``writes = 2 n^2 + 3 n d``, ``Theta(n^2)`` whatever M is.

    Args:
        n: sequence length; d: head dimension.

    Returns:
        The :class:`TwoLevelMemory` (unbounded fast memory) after the run.
    """
    _check(n, d, math.inf)
    mem = TwoLevelMemory(math.inf)
    passes = (  # (elements read, elements written)
        (n * n + n * d, n * d),  # dV = P^T dO
        (2 * n * d, n * n),  # dP = dO V^T
        (2 * n * n, n * n),  # dS from P and dP
        (n * n + n * d, n * d),  # dQ = dS K
        (n * n + n * d, n * d),  # dK = dS^T Q
    )
    for read, written in passes:
        mem.load(read, "operands")
        mem.allocate(written, "result")
        mem.store(written)
        mem.free(read + written)
    return mem


def flash_backward_block_sizes(d: int, M: float, n: int) -> tuple[int, int]:
    """Block sizes ``(B_r, B_c)`` for the tiled backward in FlashAttention-2's order.

    The outer loop runs over *key* blocks (each keeps K_j, V_j, dK_j, dV_j on chip), so
    here the key block ``B_c`` is the big one, ``Theta(M / d)``: each key block streams
    Q, dO, dQ, L and D once. The query block stays small, ``B_r = min(d, floor(M / 16d))``
    (at least 1; capped at n), and ``B_c`` is the most key rows whose working set fits:
    K_j, V_j, dK_j, dV_j (``4 B_c d``), Q_i, dO_i, dQ_i (``3 B_r d``), L_i and D_i
    (``2 B_r``) and the tiles P_ij and dP_ij (``2 B_r B_c``):
    ``B_c (4 d + 2 B_r) + 3 B_r d + 2 B_r <= M``.

    Arguments, result ``(B_r, B_c)`` and ``MemoryError`` as for :func:`flash_block_sizes`.
    """
    _check(n, d, M)
    br = _small_block(d, n, M, 16)
    bc = _largest(lambda c: c * (4 * d + 2 * br) + 3 * br * d + 2 * br <= M, n)
    return br, bc


def tiled_attention_backward_io(
    n: int, d: int, M: float, *, blocks: tuple[int, int] | None = None
) -> TwoLevelMemory:
    """The tiled backward (FlashAttention-2, Algorithm 2) on the two-level machine.

    First ``D = rowsum(dO o O)``: read O and dO (``2 n d``), write D (``n``); dQ is zeroed
    in slow memory (``n d`` writes). Then the outer loop over key blocks: load K_j, V_j,
    keep dK_j, dV_j on chip; the inner loop over query blocks loads Q_i, dO_i, dQ_i, L_i,
    D_i, recomputes P_ij from Q_i, K_j and L_i, and writes dQ_i back (it accumulates over
    the key blocks); after the inner loop dK_j and dV_j are written once. With
    ``T_c = ceil(n / B_c)`` key blocks:
    ``reads = 4 n d + T_c (3 n d + 2 n)``, ``writes = n + n d + T_c n d + 2 n d``; with
    ``B_c = Theta(M / d)`` that is ``Theta(n^2 d^2 / M)``, and P and dP never leave the chip.

    Arguments and result as for :func:`tiled_attention_io`; ``blocks`` defaults to
    :func:`flash_backward_block_sizes`.
    """
    br, bc, mem = _start_tiled(n, d, M, blocks, flash_backward_block_sizes)
    chunk = min(br, n)  # D = rowsum(dO o O), a block of rows at a time
    for r in _blocks(n, chunk):
        mem.load(2 * r * d, "O_i, dO_i")
        mem.allocate(r, "D_i")
        mem.store(r)
        mem.free(2 * r * d + r)
    mem.store(n * d)  # dQ = 0 in slow memory
    for c in _blocks(n, bc):
        mem.load(2 * c * d, "K_j, V_j")
        mem.allocate(2 * c * d, "dK_j, dV_j")
        for r in _blocks(n, br):
            mem.load(3 * r * d + 2 * r, "Q_i, dO_i, dQ_i, L_i, D_i")
            mem.allocate(2 * r * c, "P_ij, dP_ij")
            mem.store(r * d)  # dQ_i accumulates over the key blocks
            mem.free(3 * r * d + 2 * r + 2 * r * c)
        mem.store(2 * c * d)  # dK_j, dV_j, once
        mem.free(4 * c * d)
    return mem


def _blocks(n: int, size: int) -> Iterator[int]:
    """The sizes of the blocks of ``size`` rows that cover ``n`` rows (the last may be short)."""
    return (min(size, n - i) for i in range(0, n, size))


def _largest(ok, upper: int) -> int:
    best = 0
    lo, hi = 1, upper
    while lo <= hi:  # ok() is monotone: binary search the largest size that fits
        mid = (lo + hi) // 2
        if ok(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    if best == 0:
        raise MemoryError("fast memory too small for even one row")
    return best


def _small_block(d: int, n: int, M: float, per_row: int) -> int:
    """The block that stays small: ``min(d, floor(M / (per_row d)))``, at least 1, at most n."""
    return min(d, n) if math.isinf(M) else max(1, min(d, n, int(M // (per_row * d))))


def _start_tiled(n, d, M, blocks, default_blocks) -> tuple[int, int, TwoLevelMemory]:
    """A tiled run's checks, its ``(B_r, B_c)`` (``default_blocks(d, M, n)`` unless given)
    and an empty machine."""
    _check(n, d, M)
    _check_blocks(blocks)
    br, bc = blocks or default_blocks(d, M, n)
    return br, bc, TwoLevelMemory(M)


def _check_blocks(blocks) -> None:
    """``blocks``, when given, is a pair of positive ints ``(B_r, B_c)``."""
    if blocks is None:
        return
    if not isinstance(blocks, tuple | list) or len(blocks) != 2:
        raise TypeError(f"blocks must be a pair (B_r, B_c), got {blocks!r}")
    require_int(blocks[0], "blocks[0] (B_r)", minimum=1)
    require_int(blocks[1], "blocks[1] (B_c)", minimum=1)


def _check(n, d, M) -> None:
    require_int(n, "n", 1)
    require_int(d, "d", 1)
    require_number(M, "M (fast-memory elements)", positive=True, finite=False)
