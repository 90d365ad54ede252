"""Attention across devices: ring attention, Ulysses and tensor-parallel heads (chapter 14).

A sequence too long for one device is cut along its positions into ``P`` shards, one per
process ("rank"). Three ways to still compute exact attention:

* **ring attention** (context parallelism, :func:`ring_attention`): each rank keeps its
  queries and passes its key/value block around a ring; after ``P`` steps every query has
  met every key. The partial results are merged with chapter 7's online-softmax identity,
  :func:`selfattn.efficient.decoding.merge_attention_states` (written with log-sum-exps: its
  weights ``exp(L_a - L)`` never exceed 1; ring-flash-attention and PyTorch's
  ``context_parallel`` write them as ``sigmoid(L_a - L_b)``). Its backward passes the
  key/value blocks round again, with their gradients travelling beside them
  (FlashAttention-2's backward per block).
* **DeepSpeed-Ulysses** (:func:`ulysses_attention`): one all-to-all turns "all heads, my
  positions" into "my heads, all positions"; each rank runs ordinary attention for its
  ``h / P`` heads; a second all-to-all turns it back.
* **tensor-parallel heads** (:class:`TensorParallelAttention`): every rank holds the whole
  sequence and ``h / P`` heads' columns of ``W^Q, W^K, W^V`` and rows of ``W^O``; one
  all-reduce sums the partial outputs. Built with DTensor's ``parallelize_module``
  (``ColwiseParallel`` / ``RowwiseParallel``), which runs on a CPU gloo mesh.

Everything runs on ``torch.distributed`` with the gloo backend on a CPU (NCCL on GPUs runs the
same code): :func:`launch` starts ``P`` processes that run a function of this module and
returns rank 0's result. :func:`simulate_ring` runs the ring in one process, ranks as a list
of shards, with the same block and merge code. :func:`comm_log` counts the bytes each rank
sends and times its compute and waits; :func:`ring_bytes`, :func:`ulysses_bytes` and
:func:`tensor_parallel_bytes` are the formulas the counts are checked against.

Nothing here starts a process or imports ``torch.distributed`` until called:
``import selfattn`` stays cheap.

Shapes: a rank's shard is ``(..., n / P, d)`` for the ring (any batch dims, the same for q,
k and v) and ``(B, h, n / P, d_head)`` for Ulysses. ``n`` must be divisible by ``P``
(``2 P`` for the zigzag layout): other lengths are **refused** with a ValueError, not padded.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue as queue_mod
import re
import socket
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from ._checks import (
    describe,
    require_bool,
    require_choice,
    require_int,
    require_number,
    require_qkv,
    require_scale,
)
from .attention import scaled_dot_product_attention
from .efficient._tiled import TiledArgs, band_backward, work_dtype
from .efficient.decoding import merge_attention_states, partial_attention
from .multihead import MultiHeadAttention, merge_heads, split_heads

__all__ = [
    "chapter_worker",
    "HEADER_BYTES",
    "LAYOUTS",
    "check_worker",
    "hello_worker",
    "raising_worker",
    "refusals_worker",
    "timeline_worker",
    "CommLog",
    "TensorParallelAttention",
    "chunk_ids",
    "comm_log",
    "count_collectives",
    "count_problems",
    "expected_bytes",
    "expected_collectives",
    "launch",
    "parallelize_heads",
    "ring_attention",
    "ring_bytes",
    "ring_work",
    "shard",
    "simulate_ring",
    "tensor_parallel_bytes",
    "ulysses_attention",
    "ulysses_bytes",
    "unshard",
    "written_bytes",
]

#: The ways to cut a sequence into ``P`` shards: ``"contiguous"`` (rank ``r`` holds positions
#: ``r n/P .. (r+1) n/P - 1``) and ``"zigzag"`` (the sequence cut into ``2 P`` chunks; rank ``r``
#: holds chunks ``r`` and ``2P - 1 - r``, which balances causal attention's work).
LAYOUTS = ("contiguous", "zigzag")


# ----------------------------------------------------------------------------- layouts


def _check_layout(layout) -> str:
    return require_choice(layout, "layout", LAYOUTS)


def chunk_ids(rank: int, world_size: int, layout: str = "contiguous") -> list[int]:
    """The chunks of the sequence that ``rank`` holds, in the order its shard stores them.

    ``"contiguous"``: the sequence is cut into ``P`` chunks and rank ``r`` holds ``[r]``;
    ``"zigzag"``: into ``2 P`` chunks and rank ``r`` holds ``[r, 2P - 1 - r]``.
    """
    world_size = require_int(world_size, "world_size", 1)
    rank = require_int(rank, "rank", 0, world_size - 1)
    layout = _check_layout(layout)
    return [rank] if layout == "contiguous" else [rank, 2 * world_size - 1 - rank]


def _num_chunks(world_size: int, layout: str) -> int:
    return world_size if layout == "contiguous" else 2 * world_size


def shard(x: torch.Tensor, world_size: int, layout: str = "contiguous") -> list[torch.Tensor]:
    """Cut a full sequence ``x (..., n, d)`` into the ``P = world_size`` shards of ``layout``.

    Returns a list of ``P`` tensors ``(..., n / P, d)``; :func:`unshard` inverts it. ``n`` must
    be divisible by ``P`` (by ``2 P`` for ``"zigzag"``): other lengths are refused, not padded.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor (..., n, d), got {describe(x)}")
    if x.dim() < 2:
        raise ValueError(f"x must be (..., n, d) with at least 2 dims, got {tuple(x.shape)}")
    world_size = require_int(world_size, "world_size", 1)
    layout = _check_layout(layout)
    n, c = x.shape[-2], _num_chunks(world_size, layout)
    if n % c:
        what = "P" if layout == "contiguous" else "2P"
        raise ValueError(
            f"the sequence length n={n} must be divisible by {what}={c} for the {layout} "
            f"layout over P={world_size} ranks (shorter shards are refused, not padded: pad "
            f"the sequence and mask the padding yourself)"
        )
    chunks = x.split(n // c, dim=-2)
    return [
        torch.cat([chunks[i] for i in chunk_ids(r, world_size, layout)], dim=-2)
        for r in range(world_size)
    ]


def unshard(shards: Sequence[torch.Tensor], layout: str = "contiguous") -> torch.Tensor:
    """The full sequence ``(..., n, d)`` from the ``P`` shards ``(..., n / P, d)`` of a layout."""
    if isinstance(shards, torch.Tensor) or not isinstance(shards, Sequence) or not shards:
        raise TypeError(f"shards must be a non-empty list of tensors, got {describe(shards)}")
    layout = _check_layout(layout)
    for i, s in enumerate(shards):
        if not isinstance(s, torch.Tensor) or s.dim() < 2:
            raise TypeError(f"shards[{i}] must be a tensor (..., n / P, d), got {describe(s)}")
        if s.shape != shards[0].shape:
            raise ValueError(
                f"all shards must have one shape, got {tuple(shards[0].shape)} and "
                f"{tuple(s.shape)} (shards[{i}])"
            )
    P = len(shards)
    per = len(chunk_ids(0, P, layout))
    if shards[0].shape[-2] % per:
        raise ValueError(
            f"a {layout} shard holds {per} chunks, so its length must be divisible by {per}, "
            f"got {shards[0].shape[-2]}"
        )
    full: list[torch.Tensor | None] = [None] * _num_chunks(P, layout)
    for r, s in enumerate(shards):
        for cid, piece in zip(chunk_ids(r, P, layout), s.split(s.shape[-2] // per, dim=-2)):
            full[cid] = piece
    return torch.cat(full, dim=-2)  # type: ignore[arg-type]


def ring_work(world_size: int, layout: str = "contiguous", causal: bool = True) -> list[float]:
    """Score blocks each rank computes in ring attention, in units of ``(n / P)^2`` scores.

    A pair (query chunk ``a``, key chunk ``b``) is computed unless causal masking hides all of
    it (``b > a``); a diagonal pair counts whole, as a kernel computes it with a mask. Without
    ``causal`` every rank computes ``P`` blocks. Causal and contiguous: rank ``r`` computes
    ``r + 1``; zigzag: every rank ``(2P + 1) / 4``.
    """
    world_size = require_int(world_size, "world_size", 1)
    layout, causal = _check_layout(layout), require_bool(causal, "causal")
    unit = (_num_chunks(world_size, layout) / world_size) ** 2  # chunk pairs per (n/P)^2
    work = []
    for r in range(world_size):
        mine = chunk_ids(r, world_size, layout)
        pairs = sum(
            1
            for a in mine
            for s in range(world_size)
            for b in chunk_ids(s, world_size, layout)
            if not (causal and b > a)
        )
        work.append(pairs / unit)
    return work


# ----------------------------------------------------------------------------- bytes and time


@dataclass
class CommLog:
    """What one rank sent and how it spent its time, filled while :func:`comm_log` is active.

    Attributes:
        events: ``(kind, label, nbytes, t0, t1)`` tuples in order; ``kind`` is ``"send"`` (a
            message posted: ``nbytes`` leave this rank), ``"wait"`` (blocked on a message),
            ``"compute"`` (a block of attention) or ``"collective"`` (an all-to-all or an
            all-reduce: ``nbytes`` leave this rank). Times are ``time.perf_counter()``.
        phase: ``"forward"`` or ``"backward"``, stored in each event's label prefix.
        work: score entries computed (query x key pairs), by phase.
    """

    events: list = field(default_factory=list)
    work: dict = field(default_factory=lambda: {"forward": 0, "backward": 0})
    phase: str = "forward"

    def sent_bytes(self, phase: str | None = "forward") -> int:
        """Bytes this rank sent to other ranks (in ``phase``; ``None``: both phases)."""
        return sum(
            e[2]
            for e in self.events
            if e[0] in ("send", "collective") and (phase is None or e[1].startswith(phase))
        )

    def seconds(self, kind: str) -> float:
        """Total seconds spent in events of ``kind`` (``"compute"``, ``"wait"``, ...)."""
        return sum(e[4] - e[3] for e in self.events if e[0] == kind)

    def _add(self, kind: str, label: str, nbytes: int, t0: float, t1: float | None = None):
        self.events.append((kind, f"{self.phase}:{label}", int(nbytes), t0, t1 or t0))


_LOG: CommLog | None = None


@contextlib.contextmanager
def comm_log():
    """Record what this process sends and computes: ``with comm_log() as log: ...``.

    Yields a :class:`CommLog`. Only the library's own collectives are counted (the ring's
    sends, Ulysses' all-to-alls, the tensor-parallel all-reduce); ``torch.distributed``'s
    own set-up messages are not.
    """
    global _LOG
    old, _LOG = _LOG, CommLog()
    try:
        yield _LOG
    finally:
        _LOG = old


@contextlib.contextmanager
def _timed(kind: str, label: str, nbytes: int = 0):
    t0 = time.perf_counter()
    yield
    if _LOG is not None:
        _LOG._add(kind, label, nbytes, t0, time.perf_counter())


@contextlib.contextmanager
def _backward_phase():
    """Log what runs inside as the backward pass."""
    old = _LOG.phase if _LOG is not None else None
    if _LOG is not None:
        _LOG.phase = "backward"
    try:
        yield
    finally:
        if _LOG is not None:
            _LOG.phase = old


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def ring_bytes(
    n: int, d: int, world_size: int, *, batch: int = 1, heads: int = 1, bytes_per: int = 4
) -> int:
    """Bytes one rank sends in ring attention's forward: ``(P - 1)`` K and V blocks.

    ``2 (P - 1) B h (n / P) d`` elements of ``bytes_per`` bytes (``d``: the head width).
    """
    P = require_int(world_size, "world_size", 1)
    return 2 * (P - 1) * batch * heads * (n // P) * d * bytes_per


def ulysses_bytes(n: int, d_model: int, world_size: int, *, batch: int = 1, bytes_per: int = 4):
    """Bytes one rank sends in Ulysses' forward: 4 all-to-alls (q, k, v in; the output back).

    Each all-to-all starts from the rank's ``B (n / P) d_model`` elements and keeps
    ``1 / P`` of them: ``4 (P - 1) / P * B n d_model / P`` elements of ``bytes_per`` bytes.
    """
    P = require_int(world_size, "world_size", 1)
    return 4 * (P - 1) * batch * (n // P) * d_model * bytes_per // P


def tensor_parallel_bytes(
    n: int, d_model: int, world_size: int, *, batch: int = 1, bytes_per: int = 4
) -> int:
    """Bytes one rank sends in tensor parallelism's forward: one ring all-reduce of ``B n d``.

    The all-reduce sums ``B n d_model`` elements over ``P`` ranks. In a ring all-reduce (the
    algorithm gloo runs; NCCL's ring too) each rank sends ``(P - 1) / P`` of the tensor to
    reduce-scatter it and as much again to all-gather the sums: ``2 (P - 1) / P * B n d_model``
    elements of ``bytes_per`` bytes. The backward sends as much again (one all-reduce of the
    gradient of the layer's input).
    """
    P = require_int(world_size, "world_size", 1)
    return 2 * (P - 1) * batch * n * d_model * bytes_per // P


def written_bytes() -> int | None:
    """Bytes this process has written so far, as the Linux kernel counts them.

    The ``wchar`` line of ``/proc/self/io``: every byte passed to ``write``/``writev``, which
    is how gloo's TCP transport puts messages on the wire (payload and its own headers). The
    difference across a call is what went out of this rank during it, counted by the kernel
    rather than by this module. ``None`` where ``/proc`` does not exist (macOS, Windows).
    """
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


#: The names of the collective ops :func:`count_collectives` counts (not waits, not wrappers).
_COLLECTIVE = re.compile(r"all_?reduce|gather|scatter|all_?to_?all|broadcast")


def _collective_bytes(name: str, nbytes: int, P: int) -> int:
    """Bytes one rank sends in a collective over ``P`` ranks whose input has ``nbytes``."""
    if "reduce_scatter" in name:
        return nbytes * (P - 1) // P
    if "all_reduce" in name or "allreduce" in name:
        return 2 * (P - 1) * nbytes // P  # ring: reduce-scatter, then all-gather
    if "gather" in name:
        return nbytes * (P - 1)  # every other rank gets this rank's input
    if "all_to_all" in name or "alltoall" in name:
        return nbytes * (P - 1) // P
    return nbytes * (P - 1)  # broadcast and the rest: at most this


@contextlib.contextmanager
def count_collectives():
    """Count the collectives torch dispatches inside (DTensor's), into :func:`comm_log`.

    A ``TorchDispatchMode`` sees every collective op (``all_reduce``, ``all_gather``,
    ``reduce_scatter``, ``all_to_all``; functional or not) with its input tensor and logs
    the bytes this rank sends in it as a ``"collective"`` event: ``2 (P - 1) / P`` of the
    input for an all-reduce (the ring algorithm), ``(P - 1) / P`` for a reduce-scatter or an
    all-to-all, ``P - 1`` times it for an all-gather. It counts what is called, not what a
    module says it does: a stray collective shows up. Point-to-point sends are not seen
    (the ring logs its own). Without an active :func:`comm_log`, it counts nothing.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch < 2.4
        DTensor = ()

    dist = _dist()

    def group_size(args) -> int:
        for a in args:
            if isinstance(a, str):  # a functional collective's group name
                with contextlib.suppress(Exception):
                    from torch.distributed.distributed_c10d import _resolve_process_group

                    return _resolve_process_group(a).size()
            size = getattr(a, "size", None)
            if a is not None and not isinstance(a, torch.Tensor) and callable(size):
                with contextlib.suppress(Exception):
                    return int(size())
        return dist.get_world_size()

    def tensor_bytes(x) -> int:
        if isinstance(x, torch.Tensor):
            return _nbytes(x)
        if isinstance(x, (list, tuple)):
            return sum(tensor_bytes(t) for t in x)
        return 0

    class _Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if DTensor and any(isinstance(t, type) and issubclass(t, DTensor) for t in types):
                return NotImplemented  # let DTensor desugar into collectives first
            out = func(*args, **(kwargs or {}))
            name = func.__name__.split(".")[0]
            if "c10d" in func.namespace and _LOG is not None and _COLLECTIVE.search(name):
                P = group_size(args)
                nbytes = tensor_bytes(args[0] if args else None)
                if "gather" in name and func.namespace == "c10d":
                    nbytes //= P  # c10d's own all-gathers take the output first
                _LOG._add(
                    "collective", name, _collective_bytes(name, nbytes, P), time.perf_counter()
                )
            return out

    with _Counter():
        yield


# ----------------------------------------------------------------------------- the ring


def _dist():
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is not initialised: run this inside selfattn.distributed.launch "
            "(or after dist.init_process_group)"
        )
    return dist


def _ranks(group) -> tuple[int, int, Callable[[int], int]]:
    """(rank in group, group size, group rank -> global rank)."""
    dist = _dist()
    P, r = dist.get_world_size(group), dist.get_rank(group)
    to_global = (lambda i: i) if group is None else (lambda i: dist.get_global_rank(group, i))
    return r, P, to_global


def _causal_pair(a: int, b: int, c: int, device) -> tuple[bool, torch.Tensor | None]:
    """Whether chunk pair (queries ``a``, keys ``b``) is computed, and its mask (None: all)."""
    if b > a:
        return False, None
    if b < a:
        return True, None
    return True, torch.ones(c, c, dtype=torch.bool, device=device).tril()


def _attend_block(q_chunks, kv, k_ids, state, q_ids, causal, scale, label="block"):
    """Merge one key/value block (its chunks ``k_ids``) into the state of each query chunk."""
    k, v = kv
    c = q_chunks[0].shape[-2]
    k_parts, v_parts = k.split(c, dim=-2), v.split(c, dim=-2)
    with _timed("compute", label):
        for i, (a, qa) in enumerate(zip(q_ids, q_chunks)):
            for b, kb, vb in zip(k_ids, k_parts, v_parts):
                go, mask = _causal_pair(a, b, c, qa.device) if causal else (True, None)
                if not go:
                    continue
                out_b, lse_b = partial_attention(qa, kb, vb, scale=scale, mask=mask)
                state[i] = merge_attention_states(*state[i], out_b, lse_b)
                if _LOG is not None:
                    _LOG.work["forward"] += c * c * math.prod(qa.shape[:-2])
    return state


def _empty_state(q_chunks, d_v, work):
    return [
        (
            torch.zeros(*qa.shape[:-1], d_v, dtype=work, device=qa.device),
            torch.full(qa.shape[:-1], float("-inf"), dtype=work, device=qa.device),
        )
        for qa in q_chunks
    ]


def _exchange(tensors, send_to, recv_from, group, label):
    """Post sends of ``tensors`` to ``send_to`` and receives of as many from ``recv_from``."""
    dist = _dist()
    bufs = [torch.empty_like(t) for t in tensors]
    ops = [dist.P2POp(dist.isend, t.contiguous(), send_to, group) for t in tensors]
    ops += [dist.P2POp(dist.irecv, b, recv_from, group) for b in bufs]
    t0 = time.perf_counter()
    reqs = dist.batch_isend_irecv(ops)
    if _LOG is not None:
        _LOG._add("send", label, sum(_nbytes(t) for t in tensors), t0, time.perf_counter())
    return reqs, bufs


def _wait(reqs, label):
    with _timed("wait", label):
        for req in reqs:
            req.wait()


def _ring_forward(q, k, v, causal, layout, scale, group):
    """This rank's output and row log-sum-exp, in the work dtype."""
    r, P, to_global = _ranks(group)
    work = work_dtype(q.dtype)
    per = len(chunk_ids(0, P, layout))
    q_ids = chunk_ids(r, P, layout)
    q_chunks = q.to(work).split(q.shape[-2] // per, dim=-2)
    state = _empty_state(q_chunks, v.shape[-1], work)
    kv = (k.to(work).contiguous(), v.to(work).contiguous())
    for step in range(P):
        src = (r - step) % P  # whose block this rank holds at this step
        if step < P - 1:  # pass it on while computing on it: communication under compute
            reqs, bufs = _exchange(kv, to_global((r + 1) % P), to_global((r - 1) % P), group, "kv")
        state = _attend_block(q_chunks, kv, chunk_ids(src, P, layout), state, q_ids, causal, scale)
        if step < P - 1:
            _wait(reqs, "kv")
            kv = tuple(bufs)
    out = torch.cat([s[0] for s in state], dim=-2)
    lse = torch.cat([s[1] for s in state], dim=-1)
    return out, lse


def _ring_backward(q, k, v, out, lse, d_out, causal, layout, scale, group):
    """Gradients of this rank's q, k, v: the blocks go round again with their gradients."""
    r, P, to_global = _ranks(group)
    per = len(chunk_ids(0, P, layout))
    c = q.shape[-2] // per
    batch = q.shape[:-2]
    flat = lambda t: t.reshape(-1, *t.shape[-2:])  # (B, L, d) for band_backward
    q3, o3, do3 = flat(q), flat(out), flat(d_out)
    lse2 = lse.reshape(-1, lse.shape[-1])
    q_ids = chunk_ids(r, P, layout)
    dq = torch.zeros_like(q3)
    k3, v3 = flat(k).contiguous(), flat(v).contiguous()
    dk, dv = torch.zeros_like(k3), torch.zeros_like(v3)
    for step in range(P):
        src = (r - step) % P
        if step < P - 1:
            reqs, bufs = _exchange(
                (k3, v3), to_global((r + 1) % P), to_global((r - 1) % P), group, "kv"
            )
        with _timed("compute", "block"):
            for i, a in enumerate(q_ids):
                qs = slice(i * c, (i + 1) * c)
                for j, b in enumerate(chunk_ids(src, P, layout)):
                    if causal and b > a:
                        continue
                    ks = slice(j * c, (j + 1) * c)
                    args = TiledArgs(
                        batch,
                        causal and a == b,
                        0,
                        scale,
                        c,
                        c,
                        hi=0 if causal and a == b else None,
                    )
                    g = band_backward(
                        q3[:, qs], k3[:, ks], v3[:, ks], o3[:, qs], lse2[:, qs], do3[:, qs], args
                    )
                    dq[:, qs] += g[0]
                    dk[:, ks] += g[1]
                    dv[:, ks] += g[2]
                    if _LOG is not None:
                        _LOG.work["backward"] += c * c * q3.shape[0]
        # The gradients of the block travel with it; after the last step, one more hop home.
        greqs, gbufs = _exchange(
            (dk, dv), to_global((r + 1) % P), to_global((r - 1) % P), group, "dkv"
        )
        if step < P - 1:
            _wait(reqs, "kv")
            k3, v3 = bufs
        _wait(greqs, "dkv")
        dk, dv = gbufs
    shape = lambda t, like: t.reshape(*batch, *t.shape[-2:]).to(like.dtype)
    return shape(dq, q), shape(dk, k), shape(dv, v)


class _Ring(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, layout, scale, group):
        out, lse = _ring_forward(q, k, v, causal, layout, scale, group)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (causal, layout, scale, group)
        return out.to(q.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        causal, layout, scale, group = ctx.args
        work = out.dtype
        with _backward_phase():
            grads = _ring_backward(
                q.to(work),
                k.to(work),
                v.to(work),
                out,
                lse,
                d_out.to(work),
                causal,
                layout,
                scale,
                group,
            )
        return (*(g.to(t.dtype) for g, t in zip(grads, (q, k, v))), None, None, None, None)


def _check_shards(q, k, v) -> None:
    require_qkv(q, k, v)
    if not (q.shape[:-1] == k.shape[:-1] == v.shape[:-1]):
        raise ValueError(
            f"q, k and v must be shards of one sequence, with the same batch dims and length, "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    layout: str = "contiguous",
    scale: float | None = None,
    group=None,
) -> torch.Tensor:
    """Ring attention: this rank's output shard of attention over the whole sequence.

    Call it on every rank of ``group`` (inside :func:`launch`) with that rank's shards, cut by
    :func:`shard` with the same ``layout``. At each of ``P`` steps the rank attends its
    queries to the key/value block it holds, merges the result into its running output with
    :func:`~selfattn.efficient.decoding.merge_attention_states`, and passes the block to the
    next rank (sent while it computes). Differentiable: the backward passes the blocks round
    again with their gradients.

    Args:
        q, k, v: ``(..., n / P, d)`` shards (the same batch dims and length).
        causal: position ``i`` sees positions ``j <= i`` of the whole sequence.
        layout: ``"contiguous"`` or ``"zigzag"`` (see :data:`LAYOUTS`).
        scale: multiplies the scores; defaults to ``1 / sqrt(d)``.
        group: a process group; ``None``: the default (all ranks).

    Returns:
        ``(..., n / P, d_v)``: this rank's rows of ``softmax(q k^T scale) v``, q's dtype.
    """
    _check_shards(q, k, v)
    causal, layout = require_bool(causal, "causal"), _check_layout(layout)
    scale = require_scale(scale, q.shape[-1])
    _, P, _ = _ranks(group)
    per = len(chunk_ids(0, P, layout))
    if q.shape[-2] % per:
        raise ValueError(f"a {layout} shard must have an even length, got {q.shape[-2]}")
    return _Ring.apply(q, k, v, causal, layout, scale, group)


def simulate_ring(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    world_size: int,
    *,
    causal: bool = False,
    layout: str = "contiguous",
    scale: float | None = None,
    trace: bool = False,
):
    """Ring attention in one process: the ranks are a list of shards, the steps a loop.

    The same block and merge code as :func:`ring_attention`, for reading and for the
    chapter's figures; the "sends" are list indexing.

    Args:
        q, k, v: the full sequence ``(..., n, d)`` (same batch dims and ``n``).
        world_size: ``P``, the number of simulated ranks.
        causal, layout, scale: as for :func:`ring_attention`.
        trace: also return, for each step, the list of which rank's block each rank holds.

    Returns:
        ``(..., n, d_v)``, equal to attention over the whole sequence (and the trace).
    """
    _check_shards(q, k, v)
    causal, layout = require_bool(causal, "causal"), _check_layout(layout)
    trace = require_bool(trace, "trace")
    scale = require_scale(scale, q.shape[-1])
    P = require_int(world_size, "world_size", 1)
    work = work_dtype(q.dtype)
    qs, ks, vs = (shard(t.to(work), P, layout) for t in (q, k, v))
    per = len(chunk_ids(0, P, layout))
    states, q_chunks = [], []
    for r in range(P):
        q_chunks.append(qs[r].split(qs[r].shape[-2] // per, dim=-2))
        states.append(_empty_state(q_chunks[r], v.shape[-1], work))
    held = list(range(P))  # rank r holds the block of rank held[r]
    steps = []
    for _step in range(P):
        steps.append(list(held))
        for r in range(P):
            src = held[r]
            states[r] = _attend_block(
                q_chunks[r],
                (ks[src], vs[src]),
                chunk_ids(src, P, layout),
                states[r],
                chunk_ids(r, P, layout),
                causal,
                scale,
            )
        held = [held[(r - 1) % P] for r in range(P)]  # every rank passes its block on
    outs = [torch.cat([s[0] for s in states[r]], dim=-2) for r in range(P)]
    out = unshard(outs, layout).to(q.dtype)
    return (out, steps) if trace else out


# ----------------------------------------------------------------------------- Ulysses


def _a2a(x: torch.Tensor, group, label: str) -> torch.Tensor:
    """all_to_all_single along dim 0 (one slice per rank), bytes to other ranks counted."""
    dist = _dist()
    P = dist.get_world_size(group)
    x = x.contiguous()
    out = torch.empty_like(x)
    with _timed("collective", label, _nbytes(x) * (P - 1) // P):
        dist.all_to_all_single(out, x, group=group)
    return out


def _seq_to_heads(x, group):
    """(B, h, n/P, d) -> (B, h/P, n, d): my heads, everyone's positions."""
    P = _dist().get_world_size(group)
    B, h, nl, d = x.shape
    send = x.reshape(B, P, h // P, nl, d).transpose(0, 1)  # slice j goes to rank j
    got = _a2a(send, group, "seq->heads")  # slice s came from rank s: its positions
    return got.permute(1, 2, 0, 3, 4).reshape(B, h // P, P * nl, d)


def _heads_to_seq(y, group):
    """(B, h/P, n, d) -> (B, h, n/P, d): the inverse of :func:`_seq_to_heads`."""
    P = _dist().get_world_size(group)
    B, hl, n, d = y.shape
    send = y.reshape(B, hl, P, n // P, d).permute(2, 0, 1, 3, 4)  # rank j's positions to j
    got = _a2a(send, group, "heads->seq")  # slice s: rank s's heads
    return got.transpose(0, 1).reshape(B, P * hl, n // P, d)


class _Reshard(torch.autograd.Function):
    """A differentiable all-to-all: ``there(x, group)`` forward, its inverse ``back`` on the
    gradient (:func:`_seq_to_heads` and :func:`_heads_to_seq` are each other's)."""

    @staticmethod
    def forward(ctx, x, group, there, back):
        ctx.group, ctx.back = group, back
        return there(x, group)

    @staticmethod
    def backward(ctx, g):
        with _backward_phase():
            return ctx.back(g, ctx.group), None, None, None


def ulysses_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    group=None,
) -> torch.Tensor:
    """DeepSpeed-Ulysses: all-to-all to head shards, ordinary attention, all-to-all back.

    Call it on every rank of ``group`` with contiguous shards (:func:`shard`). Each rank
    ends up with ``h / P`` heads over the whole sequence, so the number of query heads and
    of key/value heads must both be divisible by ``P`` (grouped-query attention with
    ``h_kv`` heads caps ``P`` at ``h_kv``). Differentiable (the all-to-alls' backward is the
    inverse all-to-all).

    Args:
        q: ``(B, h, n / P, d)``; k, v: ``(B, h_kv, n / P, d)``, ``h_kv`` dividing ``h``.
        causal: position ``i`` sees positions ``j <= i`` of the whole sequence.
        scale: multiplies the scores; defaults to ``1 / sqrt(d)``.
        group: a process group; ``None``: the default (all ranks).

    Returns:
        ``(B, h, n / P, d)``: this rank's rows of attention over the whole sequence.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if isinstance(t, torch.Tensor) and t.dim() != 4:
            raise ValueError(f"{name} must be a shard (B, h, n / P, d), got {tuple(t.shape)}")
    require_qkv(q[:, :1], k[:, :1], v[:, :1])  # dtypes, device, d_k (head counts below)
    causal = require_bool(causal, "causal")
    scale = require_scale(scale, q.shape[-1])
    if k.shape != v.shape[:-1] + k.shape[-1:] or q.shape[0] != k.shape[0]:
        raise ValueError(
            f"k and v must be (B, h_kv, n / P, d) with q's B, got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.shape[-2] != k.shape[-2] or q.shape[1] % k.shape[1]:
        raise ValueError(
            f"q and k must be shards of one sequence and k's heads must divide q's, got "
            f"q {tuple(q.shape)}, k {tuple(k.shape)}"
        )
    _, P, _ = _ranks(group)
    for name, h in (("query", q.shape[1]), ("key/value", k.shape[1])):
        if h % P:
            raise ValueError(
                f"Ulysses gives each of the P={P} ranks h/P whole heads, so the {name} head "
                f"count must be divisible by P, got {h} {name} heads for P={P} (use P dividing "
                f"{h}, or ring attention, which has no such limit)"
            )
    qh, kh, vh = (_Reshard.apply(t, group, _seq_to_heads, _heads_to_seq) for t in (q, k, v))
    group_size = q.shape[1] // k.shape[1]
    if group_size > 1:  # grouped-query attention: each kv head serves a group of query heads
        kh, vh = kh.repeat_interleave(group_size, 1), vh.repeat_interleave(group_size, 1)
    with _timed("compute", "attention"):
        oh = scaled_dot_product_attention(qh, kh, vh, "causal" if causal else None, scale=scale)
    if _LOG is not None:
        _LOG.work["forward"] += qh.shape[0] * qh.shape[1] * qh.shape[2] * kh.shape[2]
    return _Reshard.apply(oh, group, _heads_to_seq, _seq_to_heads)


# ----------------------------------------------------------------------------- tensor parallel


class TensorParallelAttention(nn.Module):
    """Multi-head self-attention laid out for tensor parallelism over its heads.

    The fused projection ``qkv`` has its output rows reordered rank by rank: the first
    ``1 / P`` of them are rank 0's heads' queries, keys and values, the next rank 1's, and
    so on. Split by columns (``ColwiseParallel``), each rank gets whole heads; ``out``
    split by rows (``RowwiseParallel``) gives each rank a partial ``y``, and one all-reduce
    sums them (:func:`parallelize_heads`). Unsplit, it equals the
    :class:`~selfattn.multihead.MultiHeadAttention` it was built from.

    Args:
        mha: a plain :class:`~selfattn.multihead.MultiHeadAttention` (no RoPE, no chapter 11
            options); its weights are copied.
        world_size: ``P``; the head counts ``h`` and ``h_kv`` must be divisible by it.
    """

    def __init__(self, mha: MultiHeadAttention, world_size: int) -> None:
        super().__init__()
        if not isinstance(mha, MultiHeadAttention):
            raise TypeError(f"mha must be a selfattn.MultiHeadAttention, got {describe(mha)}")
        if getattr(mha, "rope", None) is not None or not getattr(mha, "_plain", lambda: True)():
            raise ValueError("tensor-parallel heads take a plain MultiHeadAttention (no RoPE)")
        P = require_int(world_size, "world_size", 1)
        h, h_kv, dh = mha.num_heads, mha.num_kv_heads, mha.d_head
        if h % P or h_kv % P:
            raise ValueError(
                f"each of the P={P} ranks takes whole heads: h={h} and h_kv={h_kv} must both "
                f"be divisible by P"
            )
        self.world_size, self.num_heads, self.num_kv_heads, self.d_head = P, h, h_kv, dh
        d = mha.d_model
        rows = torch.arange(mha.qkv.out_features)
        q_rows, k_rows, v_rows = rows[:d], rows[d : d + h_kv * dh], rows[d + h_kv * dh :]
        order = torch.cat(
            [torch.cat([t.chunk(P)[r] for t in (q_rows, k_rows, v_rows)]) for r in range(P)]
        )
        self.qkv = nn.Linear(d, mha.qkv.out_features, bias=mha.qkv.bias is not None)
        self.out = nn.Linear(d, d, bias=mha.out.bias is not None)
        with torch.no_grad():
            self.qkv.weight.copy_(mha.qkv.weight[order])
            if mha.qkv.bias is not None:
                self.qkv.bias.copy_(mha.qkv.bias[order])
            self.out.load_state_dict(mha.out.state_dict())
        #: ``qkv`` row ``i`` is row ``qkv_order[i]`` of the original layer's (to compare grads).
        self.qkv_order = order

    def forward(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        """``x (B, n, d_model)``, the whole sequence on every rank -> ``(B, n, d_model)``."""
        causal = require_bool(causal, "causal")
        y = self.qkv(x)  # on a rank after parallelize_heads: its heads' columns only
        local = y.shape[-1] * self.world_size // self.qkv.out_features  # 1 split, P whole
        h_r, h_kv_r = self.num_heads // self.world_size, self.num_kv_heads // self.world_size
        h, h_kv, dh = h_r * local, h_kv_r * local, self.d_head
        # Rank-major rows: (rank, [its queries | keys | values]); heads back in their order.
        q, k, v = y.unflatten(-1, (local, -1)).split([h_r * dh, h_kv_r * dh, h_kv_r * dh], -1)
        q, k, v = (t.flatten(-2) for t in (q, k, v))
        q, k, v = split_heads(q, h), split_heads(k, h_kv), split_heads(v, h_kv)
        if h != h_kv:
            k, v = k.repeat_interleave(h // h_kv, 1), v.repeat_interleave(h // h_kv, 1)
        heads = scaled_dot_product_attention(q, k, v, "causal" if causal else None)
        return self.out(merge_heads(heads))


def parallelize_heads(module: TensorParallelAttention, mesh=None) -> TensorParallelAttention:
    """Split ``module`` over the ranks with DTensor: ``qkv`` by columns, ``out`` by rows.

    ``torch.distributed.tensor.parallel.parallelize_module`` with ``ColwiseParallel`` and
    ``RowwiseParallel`` on a 1-D CPU mesh (gloo; tested on torch 2.13). The all-reduce of
    ``out``'s partial sums is logged in :func:`comm_log` (``B n d_model`` elements; ``x``'s
    gradient needs one more in the backward). Returns the module, changed in place.

    Args:
        module: a :class:`TensorParallelAttention` built with the group's world size.
        mesh: a ``DeviceMesh``; ``None``: ``init_device_mesh("cpu", (P,))`` over all ranks.
    """
    if not isinstance(module, TensorParallelAttention):
        raise TypeError(f"module must be a TensorParallelAttention, got {describe(module)}")
    dist = _dist()
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    if mesh is None:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    if mesh.size() != module.world_size:
        raise ValueError(
            f"the module was built for P={module.world_size}, the mesh has {mesh.size()}"
        )
    parallelize_module(module, mesh, {"qkv": ColwiseParallel(), "out": RowwiseParallel()})
    return module


# ----------------------------------------------------------------------------- the launcher


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world_size, port, timeout, fn, args, kwargs, results):
    """One spawned rank: quiet stderr, join the group, run ``fn``, report to the parent."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)  # gloo and warnings must not reach a notebook's stderr (nbval)
    import warnings

    warnings.simplefilter("ignore")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    try:
        import datetime

        import torch.distributed as dist

        dist.init_process_group(
            "gloo",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout),
        )
        try:
            value = fn(rank, world_size, *args, **kwargs)
        finally:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        results.put((rank, True, value))
    except BaseException as err:  # reported to the parent, which raises
        results.put((rank, False, f"{type(err).__name__}: {err}\n{traceback.format_exc()}"))


#: Words of the errors a rank gets when a peer is gone (a consequence, not the cause).
_PEER_GONE = ("Connection reset", "Connection closed", "connection closed", "Broken pipe")


def _first_cause(results, rank: int, message: str, grace: float = 3.0) -> tuple[int, str]:
    """The error that started it: a rank whose peer died fails too, often first.

    Waits up to ``grace`` seconds for the other ranks' reports and prefers an error that
    is not a lost connection.
    """
    errors = [(rank, message)]
    end = time.monotonic() + grace
    while any(w in errors[0][1].split("\n")[0] for w in _PEER_GONE):
        left = end - time.monotonic()
        if left <= 0:
            break
        try:
            r, ok, value = results.get(timeout=left)
        except queue_mod.Empty:
            break
        if not ok:
            errors.append((r, value))
            errors.sort(key=lambda e: any(w in e[1].split("\n")[0] for w in _PEER_GONE))
    return errors[0]


def launch(
    fn: Callable,
    world_size: int,
    *args,
    timeout: float = 120.0,
    all_ranks: bool = False,
    **kwargs,
):
    """Run ``fn(rank, world_size, *args, **kwargs)`` on ``world_size`` gloo processes.

    The processes are spawned (a fresh interpreter each, as on Colab and in Jupyter), so
    ``fn`` must be importable: a function of a module such as this one, not one defined in
    a notebook. Each joins a gloo process group on a free local port; their stderr goes
    nowhere (errors come back through the parent).

    Args:
        fn: the worker, ``fn(rank, world_size, ...)``; its return value must pickle.
        world_size: ``P >= 1`` processes.
        timeout: seconds for the whole run; a rank that raises stops the others at once.
        all_ranks: return every rank's result (a list), not only rank 0's.

    Returns:
        rank 0's return value (or the list of all).

    Raises:
        RuntimeError: a rank raised (its error and traceback are in the message).
        TimeoutError: the ranks did not finish within ``timeout`` seconds; all are stopped.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function, got {describe(fn)}")
    world_size = require_int(world_size, "world_size", 1)
    timeout = require_number(timeout, "timeout", positive=True)
    all_ranks = require_bool(all_ranks, "all_ranks")
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(
            target=_worker,
            args=(r, world_size, port, timeout, fn, args, kwargs, results),
            daemon=True,
        )
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    values: dict[int, object] = {}
    try:
        while len(values) < world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"{world_size - len(values)} of {world_size} ranks did not finish within "
                    f"{timeout:g} s (ranks done: {sorted(values)}); all were stopped"
                )
            try:
                rank, ok, value = results.get(timeout=min(left, 0.5))
            except queue_mod.Empty:
                dead = [
                    r
                    for r, p in enumerate(procs)
                    if r not in values and not p.is_alive() and p.exitcode not in (0, None)
                ]
                if dead:
                    raise RuntimeError(
                        f"rank {dead[0]} of {world_size} died (exit code "
                        f"{procs[dead[0]].exitcode}) without reporting; all were stopped"
                    ) from None
                continue
            if not ok:
                rank, value = _first_cause(results, rank, value)
                raise RuntimeError(
                    f"rank {rank} of {world_size} raised while running {fn.__name__}; the "
                    f"other ranks were stopped. Its error:\n{value}"
                )
            values[rank] = value
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=5)
        results.close()
    return [values[r] for r in range(world_size)] if all_ranks else values[0]


# ----------------------------------------------------------------------------- workers


def _inputs(seed: int, B: int, h: int, n: int, d: int, dtype, h_kv: int | None = None):
    """The same full q, k, v on every rank (from a seed), needing gradients."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, h, n, d, generator=g, dtype=dtype)
    k = torch.randn(B, h_kv or h, n, d, generator=g, dtype=dtype)
    v = torch.randn(B, h_kv or h, n, d, generator=g, dtype=dtype)
    return q, k, v


def _reference(q, k, v, causal):
    """Single-device SDPA forward and backward (torch's own kernel), with a fixed d_out."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    if k.shape[1] != q.shape[1]:
        kr = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
        vr = v.repeat_interleave(q.shape[1] // k.shape[1], 1)
    else:
        kr, vr = k, v
    out = torch.nn.functional.scaled_dot_product_attention(q, kr, vr, is_causal=causal)
    d_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    out.backward(d_out)
    return out.detach(), d_out, (q.grad, k.grad, v.grad)


def _gather(t: torch.Tensor) -> list[torch.Tensor]:
    dist = _dist()
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return parts


def check_worker(
    rank: int,
    world_size: int,
    cases: Sequence[dict],
    refusals: bool = False,
) -> list[dict]:
    """Run each strategy on this rank and compare with one-device SDPA, forward and backward.

    Each case is a dict: ``strategy`` (``"ring"``, ``"ulysses"``, ``"tensor"``), ``causal``,
    ``layout`` (ring), ``B, h, n, d`` (``h_kv`` optional), ``dtype`` (``"float32"`` or
    ``"float64"``), ``seed``; ``extra_collective=True`` adds a stray all-reduce of 16 KiB
    to the forward (the counts must show it). Returns, per case, the largest errors of the
    output and of the gradients, the bytes this rank sent in the forward and the backward
    as the library counts them (``sent_*``) and as the kernel counts the bytes written
    (``wire_*``, :func:`written_bytes`; ``None`` without ``/proc``), every rank's forward
    counts (``sent_forward_ranks``, ``wire_forward_ranks``), ``CommDebugMode``'s collective
    counts (``comm_debug``, forward), and the score entries rank 0 computed. Errors are
    relative to the largest entry of the reference (at least 1). With ``refusals``, a last
    row ``{"strategy": "refusals", "messages": ...}`` holds :func:`refusals_worker`'s
    messages.
    """
    refusals = require_bool(refusals, "refusals")
    rows = []
    for case in cases:
        case = dict(case)
        dtype = getattr(torch, case.get("dtype", "float32"))
        B, h, n, d = case["B"], case["h"], case["n"], case["d"]
        causal, strategy = case.get("causal", False), case["strategy"]
        torch.manual_seed(case.get("seed", 0))
        with comm_log() as log:
            if strategy == "tensor":
                err = _tensor_case(rank, world_size, B, h, n, d, causal, dtype, case, log)
            else:
                err = _sequence_case(world_size, rank, B, h, n, d, causal, dtype, case, log)
        rows.append(
            {
                **case,
                **err,
                "sent_forward": log.sent_bytes("forward"),
                "sent_backward": log.sent_bytes("backward"),
                "messages_forward": sum(
                    1
                    for e in log.events
                    if e[0] in ("send", "collective") and e[1].startswith("forward")
                ),
                "work_forward": log.work["forward"],
                "compute_s": log.seconds("compute"),
                "wait_s": log.seconds("wait"),
            }
        )
    counts = [(r["sent_forward"], r["wire_forward"]) for r in rows if "sent_forward" in r]
    every = [None] * world_size
    _dist().all_gather_object(every, counts)
    for i, row in enumerate(r for r in rows if "sent_forward" in r):
        row["sent_forward_ranks"] = [e[i][0] for e in every]
        row["wire_forward_ranks"] = [e[i][1] for e in every]
    if refusals:
        rows.append({"strategy": "refusals", "messages": refusals_worker(rank, world_size)})
    return rows


def chapter_worker(
    rank: int, world_size: int, cases: Sequence[dict], timeline: dict | None = None
) -> dict:
    """A chapter's whole distributed work in one launch (each launch costs seconds).

    Returns ``{"ranks": ..., "rows": ..., "refusals": ..., "timeline": ...}``: the result of
    :func:`hello_worker`, :func:`check_worker`'s rows for ``cases``, :func:`refusals_worker`'s
    messages and, with ``timeline`` (keyword arguments of :func:`timeline_worker`), its
    result (else ``None``).
    """
    if timeline is not None and not isinstance(timeline, dict):
        raise TypeError(f"timeline must be a dict of keyword arguments, got {describe(timeline)}")
    ranks = hello_worker(rank, world_size)
    rows = check_worker(rank, world_size, cases, refusals=True)
    return {
        "ranks": ranks,
        "rows": rows[:-1],
        "refusals": rows[-1]["messages"],
        "timeline": None if timeline is None else timeline_worker(rank, world_size, **timeline),
    }


def expected_bytes(row: dict, world_size: int) -> int:
    """The formula's bytes one rank sends in the forward of a :func:`check_worker` row."""
    if not isinstance(row, dict) or row.get("strategy") not in ("ring", "ulysses", "tensor"):
        raise ValueError(f"row must be a check_worker row of a strategy, got {describe(row)}")
    P = require_int(world_size, "world_size", 1)
    size = getattr(torch, row.get("dtype", "float32")).itemsize
    B, h, n, d = row["B"], row["h"], row["n"], row["d"]
    h_kv = row.get("h_kv") or h
    if row["strategy"] == "ring":
        return ring_bytes(n, d, P, batch=B, heads=h_kv, bytes_per=size)
    if row["strategy"] == "ulysses":  # q with h heads; k and v with h_kv; the output
        q_o = ulysses_bytes(n, h * d, P, batch=B, bytes_per=size) // 2
        return q_o + ulysses_bytes(n, h_kv * d, P, batch=B, bytes_per=size) // 2
    return tensor_parallel_bytes(n, h * d, P, batch=B, bytes_per=size)


#: Gloo's own bytes per message (headers) on top of the payload, at most. Measured 144 to
#: 576 per message and peer on torch 2.13; the check allows this much per logged message.
HEADER_BYTES = 1024


def expected_collectives(row: dict) -> dict[str, int]:
    """The collectives ``CommDebugMode`` should see in the forward of a :func:`check_worker` row.

    By kind: Ulysses 4 all-to-alls, tensor parallelism 1 all-reduce, the ring none (its
    point-to-point sends are not collectives, and ``CommDebugMode`` does not see them).
    """
    return {"ring": {}, "ulysses": {"all_to_all": 4}, "tensor": {"all_reduce": 1}}[row["strategy"]]


def _collective_kinds(comm_debug: dict) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for name, count in comm_debug.items():
        kind = "all_reduce" if re.search("all_?reduce", name) else name.split(".")[-1]
        kind = "all_to_all" if re.search("all_?to_?all", name) else kind
        kinds[kind] = kinds.get(kind, 0) + count
    return kinds


def count_problems(row: dict, world_size: int) -> list[str]:
    """What disagrees in a :func:`check_worker` row's forward communication; ``[]``: nothing.

    Three counts, each against what the formula expects, on every rank: the library's
    bytes must equal :func:`expected_bytes`; the bytes the kernel saw written (where it
    counts them) must exceed it by no more than gloo's headers, at most
    :data:`HEADER_BYTES` per logged message and peer; and ``CommDebugMode``'s collectives
    must be :func:`expected_collectives`. A stray collective, a wrong formula or a count
    that logs the wrong tensor each show up here.
    """
    P = require_int(world_size, "world_size", 1)
    want = expected_bytes(row, P)
    problems = []
    for r, (sent, wire) in enumerate(zip(row["sent_forward_ranks"], row["wire_forward_ranks"])):
        if sent != want:
            problems.append(f"rank {r}: the library counted {sent} bytes, the formula {want}")
        slack = HEADER_BYTES * max(P - 1, 1) * max(row["messages_forward"], 1)
        if wire is not None and not 0 <= wire - want <= slack:
            problems.append(
                f"rank {r}: the kernel saw {wire} bytes written, the formula {want} "
                f"(plus at most {slack} of headers)"
            )
    seen, expected = _collective_kinds(row["comm_debug"]), expected_collectives(row)
    if seen != expected:
        problems.append(f"CommDebugMode saw {seen}, expected {expected}")
    return problems


def _err(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest difference, in units of the largest entry of ``want`` (at least 1).

    Rounding grows with the size of the numbers: a gradient summed over many queries has
    entries of several units, and float32 rounds them to about 1e-7 of their size.
    """
    return ((got - want).abs().max() / want.abs().max().clamp(min=1)).item()


def _sequence_case(P, rank, B, h, n, d, causal, dtype, case, log):
    strategy, layout = case["strategy"], case.get("layout", "contiguous")
    q, k, v = _inputs(case.get("seed", 0), B, h, n, d, dtype, case.get("h_kv"))
    ref, d_out, ref_grads = _reference(q, k, v, causal)
    mine = [shard(t, P, layout)[rank].detach().requires_grad_() for t in (q, k, v)]
    if strategy not in ("ring", "ulysses"):
        raise ValueError(f"strategy must be 'ring', 'ulysses' or 'tensor', got {strategy!r}")
    from torch.distributed.tensor.debug import CommDebugMode

    w0, t0 = written_bytes(), time.perf_counter()
    with CommDebugMode() as mode:
        if strategy == "ring":
            out = ring_attention(*mine, causal=causal, layout=layout)
        else:
            out = ulysses_attention(*mine, causal=causal)
        _stray(case)
    w1, t1 = written_bytes(), time.perf_counter()
    with _backward_phase():
        out.backward(shard(d_out, P, layout)[rank])
    w2, t2 = written_bytes(), time.perf_counter()
    full = unshard(_gather(out.detach()), layout)
    grads = [unshard(_gather(t.grad), layout) for t in mine]
    return {
        "out_err": _err(full, ref),
        "grad_err": max(_err(g, r) for g, r in zip(grads, ref_grads)),
        "forward_s": t1 - t0,
        "backward_s": t2 - t1,
        **_wire(w0, w1, w2),
        "comm_debug": {str(k): v for k, v in mode.get_comm_counts().items()},
    }


def _tensor_case(rank, P, B, h, n, d, causal, dtype, case, log):
    d_model = h * d
    torch.manual_seed(case.get("seed", 0))
    mha = MultiHeadAttention(d_model, h, num_kv_heads=case.get("h_kv") or h).to(dtype)
    g = torch.Generator().manual_seed(case.get("seed", 0) + 7)
    x = torch.randn(B, n, d_model, generator=g, dtype=dtype)
    d_y = torch.randn(B, n, d_model, generator=g, dtype=dtype)
    xr = x.clone().requires_grad_()
    ref = mha(xr, mask="causal" if causal else None)
    ref.backward(d_y)
    tp = TensorParallelAttention(mha, P).to(dtype)
    parallelize_heads(tp)
    xt = x.clone().requires_grad_()
    from torch.distributed.tensor.debug import CommDebugMode

    w0, t0 = written_bytes(), time.perf_counter()
    with CommDebugMode() as mode, count_collectives():
        y = _waited(tp(xt, causal=causal))  # DTensor's all-reduce runs asynchronously
        _stray(case)
    w1, t1 = written_bytes(), time.perf_counter()
    with _backward_phase(), count_collectives():
        y.backward(d_y)
        xt.grad = _waited(xt.grad)
    w2, t2 = written_bytes(), time.perf_counter()
    # Each rank's gradient shard of W_qkv against the matching rows of the full layer's.
    w_grad = tp.qkv.weight.grad
    w_grad = w_grad.to_local() if hasattr(w_grad, "to_local") else w_grad
    rows = tp.qkv_order.chunk(P)[rank]
    ref_w = mha.qkv.weight.grad[rows]
    o_grad = tp.out.weight.grad
    o_grad = o_grad.to_local() if hasattr(o_grad, "to_local") else o_grad
    ref_o = mha.out.weight.grad.chunk(P, dim=1)[rank]
    errs = [_err(xt.grad, xr.grad), _err(w_grad, ref_w), _err(o_grad, ref_o)]
    return {
        "out_err": _err(y, ref),
        "grad_err": max(errs),
        "forward_s": t1 - t0,
        "backward_s": t2 - t1,
        **_wire(w0, w1, w2),
        "comm_debug": {str(k): v for k, v in mode.get_comm_counts().items()},
    }


def _stray(case: dict) -> None:
    """A collective the formulas do not expect, when a case asks for one (for the tests)."""
    if case.get("extra_collective"):
        _dist().all_reduce(torch.ones(4096))


def _waited(t: torch.Tensor) -> torch.Tensor:
    """The tensor once its pending collective is done (an op on an AsyncCollectiveTensor
    waits for it; ``clone`` keeps the autograd history, which ``wait()`` would drop)."""
    return t.clone() if callable(getattr(t, "wait", None)) else t


def _wire(w0, w1, w2) -> dict:
    if None in (w0, w1, w2):
        return {"wire_forward": None, "wire_backward": None}
    return {"wire_forward": w1 - w0, "wire_backward": w2 - w1}


def raising_worker(rank: int, world_size: int, bad_rank: int = 1) -> int:
    """A worker in which ``bad_rank`` raises before a collective that the others enter.

    For the tests and the chapter: :func:`launch` must report the error, never hang.
    """
    if rank == bad_rank:
        raise ValueError(f"rank {rank} fails on purpose")
    t = torch.ones(1)
    _dist().all_reduce(t)  # never completes: bad_rank is gone
    return int(t.item())


def refusals_worker(rank: int, world_size: int) -> list[str]:
    """The errors this rank gets for shards the strategies refuse (rank 0's are returned).

    Ulysses with a head count not divisible by ``P``, and a zigzag shard of odd length.
    """
    messages = []
    odd = torch.randn(1, world_size + 1, 4, 8)  # P + 1 heads: not divisible by P >= 2
    try:
        ulysses_attention(odd, odd, odd)
    except ValueError as err:
        messages.append(str(err))
    three = torch.randn(1, 2, 3, 8)
    try:
        ring_attention(three, three, three, layout="zigzag")
    except ValueError as err:
        messages.append(str(err))
    return messages


def _sleep_worker(rank: int, world_size: int, seconds: float) -> int:
    """A rank that hangs (sleeps) for ``seconds``: the launcher's timeout must stop it."""
    time.sleep(seconds)
    return rank


def hello_worker(rank: int, world_size: int) -> list[int]:
    """Every rank's number, gathered by an all-reduce: the check that spawning works."""
    t = torch.zeros(world_size, dtype=torch.int64)
    t[rank] = rank
    _dist().all_reduce(t)
    return t.tolist()


def timeline_worker(
    rank: int,
    world_size: int,
    n: int,
    d: int = 64,
    h: int = 2,
    causal: bool = True,
    layouts: Sequence[str] = LAYOUTS,
    repeats: int = 3,
) -> dict:
    """Time ring attention's forward on every rank, in each layout; every rank's events.

    For each layout: a warm-up call, then ``repeats`` timed calls (after a barrier each); the
    fastest is kept. Returns ``{layout: {"events": [...] per rank, "work": [...] per rank,
    "total": [...] per rank}}``; an event is ``(kind, label, nbytes, t0, t1)`` with times in
    seconds from the start of that rank's call, and ``work`` counts score entries.
    """
    causal = require_bool(causal, "causal")
    q, k, v = _inputs(0, 1, h, n, d, torch.float32)
    result = {}
    for layout in layouts:
        mine = [shard(t, world_size, layout)[rank] for t in (q, k, v)]
        ring_attention(*mine, causal=causal, layout=layout)  # warm up
        runs = []
        for _ in range(repeats):
            _dist().barrier()
            with comm_log() as log:
                t0 = time.perf_counter()
                ring_attention(*mine, causal=causal, layout=layout)
                t1 = time.perf_counter()
            runs.append((log, t0, t1))
        log, t0, t1 = min(runs, key=lambda x: x[2] - x[1])
        events = [(e[0], e[1], e[2], e[3] - t0, e[4] - t0) for e in log.events]
        gathered = [None] * world_size
        mine_summary = {"events": events, "work": log.work["forward"], "total": t1 - t0}
        _dist().all_gather_object(gathered, mine_summary)
        result[layout] = {key: [g[key] for g in gathered] for key in ("events", "work", "total")}
    return result
