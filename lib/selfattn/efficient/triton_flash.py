"""FlashAttention's forward and backward passes as Triton kernels.

The same algorithm as :func:`~selfattn.efficient.flash.flash_attention`. Forward: one program
per (batch x head, block of queries); it keeps its queries, the running max ``m``, the running
sum ``l`` and the unnormalised output on chip, streams the keys and values through in blocks,
and writes the output and each row's log-sum-exp. Backward (FlashAttention-2, Algorithm 2):
a small kernel computes D = rowsum(dO * O); then one backward kernel runs twice, a constexpr
picking its pass: a program per block of keys accumulates dK and dV over the queries, then a
program per block of queries accumulates dQ over the keys, both recomputing P tile by tile
from the log-sum-exp. fp16, bf16 and fp32 inputs; the tiles accumulate in fp32.
Launch settings fit the device's shared memory (:mod:`~selfattn.efficient.triton_configs`).

Triton is imported lazily, on the first call, so ``import selfattn`` works on a
machine without Triton or a GPU. With the environment variable
``TRITON_INTERPRET=1`` set before the first call, the kernels run in Triton's
interpreter on CPU tensors (slowly): that is how the tests check them against
torch SDPA without a GPU.
"""

from __future__ import annotations

import functools
import os
from dataclasses import replace

import torch

from .._checks import check_qkv, check_scale, require_bool, require_power_of_two
from ..masks import causal_diagonal
from .triton_configs import (
    SHARED_MEMORY_BUDGET,
    LaunchConfig,
    choose_config,
    device_shared_memory,
    launch_grid,
)

__all__ = [
    "triton_flash_attention",
    "triton_available",
    "compile_for_gpu",
]

_LOG2E = 1.4426950408889634


def triton_available() -> bool:
    """True when Triton can be imported (it still needs a GPU or ``TRITON_INTERPRET=1`` to run)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _kernels():
    """(forward, D, dK/dV pass, dQ pass) kernels: compiled for the GPU, or run by the interpreter
    if TRITON_INTERPRET=1. The two passes are one kernel, launched with DKDV=True, then False.
    """
    return _define_kernels(_interpreting())


@functools.cache
def _define_kernels(interpret: bool):
    """Define the kernels on first use (importing triton here, not at module import).

    Conventions shared by the kernels: tensors are ``(batch x heads, rows, head dim)``
    with a contiguous last dim; a one-axis grid of ``batch x heads x row blocks`` programs,
    the row block varying fastest (:func:`~selfattn.efficient.triton_configs.launch_grid`); base
    offsets are int64 (a tensor may hold more than 2^31 elements), offsets inside a tile int32.
    Key ``j`` is visible to query ``i`` when ``j <= i + diag`` (``diag`` = 0 top-left,
    ``m - n`` bottom-right). Scores are in base 2: ``qk_scale`` = softmax scale * log2(e), and
    ``LSE`` holds each row's log2-sum-exp2 (+inf for a row that sees no key).
    """
    saved = os.environ.get("TRITON_INTERPRET")
    # triton.jit reads the variable when a kernel is defined: interpreted or compiled.
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    try:
        return _jit_kernels()
    finally:
        if saved is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = saved


def _jit_kernels():
    import triton
    import triton.language as tl

    # The kernels share these helpers; Triton inlines them, so they cost nothing at run time.
    # Their block sizes and flags (BLOCK, CAUSAL, ...) are the kernels' constexprs, passed on:
    # a constexpr argument is compiled in, annotated or not (and an annotation would need ``tl``
    # in a helper's closure, which only a helper whose body uses ``tl`` has).

    @triton.jit
    def _program_rows(n, BLOCK):
        # One grid axis: program = head * blocks + block, so neighbouring programs share a
        # head (its keys and values stay in L2) and batch x heads meets no 65535 limit.
        # Returns the head (int64: a base offset's factor), the block's first row and its rows.
        blocks = tl.cdiv(n, BLOCK)
        bh = (tl.program_id(0) // blocks).to(tl.int64)
        row0 = (tl.program_id(0) % blocks) * BLOCK
        return bh, row0, row0 + tl.arange(0, BLOCK)

    @triton.jit
    def _row_ptrs(X, bh, stride_b, row0, stride_n, BLOCK, offs_d):
        # Pointers to rows row0 .. row0 + BLOCK - 1 of head bh: int64 base, int32 tile offsets.
        local = tl.arange(0, BLOCK)[:, None] * stride_n + offs_d[None, :]
        return X + bh * stride_b + row0.to(tl.int64) * stride_n + local

    @triton.jit
    def _load(ptrs, rows, n, cols, d, DOT_IN_FP32):
        # A tile of rows < n and columns < d (zeros elsewhere: any n, any d), upcast to fp32
        # when the dots run in fp32.
        x = tl.load(ptrs, mask=(rows[:, None] < n) & (cols[None, :] < d), other=0.0)
        if DOT_IN_FP32:
            x = x.to(tl.float32)
        return x

    @triton.jit
    def _store(ptrs, x, rows, n, cols, d):
        # x, in the tensor's dtype, where rows < n and columns < d.
        tl.store(ptrs, x.to(ptrs.dtype.element_ty), mask=(rows[:, None] < n) & (cols[None, :] < d))

    @triton.jit
    def _row_stats(LSE, DELTA, bh, n_q, rows):
        # Each query row's log2-sum-exp2 (+inf past the end: p = 0 there) and D.
        lse = tl.load(LSE + bh * n_q + rows, mask=rows < n_q, other=float("inf"))
        delta = tl.load(DELTA + bh * n_q + rows, mask=rows < n_q, other=0.0)
        return lse, delta

    @triton.jit
    def _probs(a, b, lse, valid, qk_scale, PRECISION):
        # The backward's P, recomputed from the saved log-sum-exp: exp2(a b^T * qk_scale - lse),
        # with (a, b) = (q, k) for dQ and (k, q), transposed, for dK and dV.
        s = tl.dot(a, tl.trans(b), input_precision=PRECISION) * qk_scale
        return tl.where(valid, tl.exp2(s - lse), 0.0)

    @triton.jit
    def _dscores(p, x, y, delta, PRECISION):
        # dS = P o (dP - D) with dP = x y^T: (dO, v) for dQ, (v, dO) for the transposed tiles.
        dp = tl.dot(x, tl.trans(y), input_precision=PRECISION)
        return p * (dp - delta)

    @triton.jit
    def _visible(rows, cols, n_q, n_k, diag, CAUSAL):
        # Query rows x key cols (broadcast by the caller): both in range, and the key on or
        # below the query's diagonal.
        valid = (cols < n_k) & (rows < n_q)
        if CAUSAL:
            valid = valid & (cols <= rows + diag)
        return valid

    if _interpreting():
        # The interpreter runs each function's source again in this module's globals, where
        # the names of this closure are not found: there the helpers are module globals too.
        helpers = (_program_rows, _row_ptrs, _load, _store, _row_stats, _probs, _dscores, _visible)
        globals().update({helper.__name__: helper for helper in helpers})

    # Sizes are not specialised: one compiled kernel serves every n, m (and n = 1), instead of
    # a recompilation per divisibility class of each size.
    sizes = ["n_q", "n_k", "d_k", "d_v", "diag"]

    @triton.jit(do_not_specialize=sizes)
    def _flash_fwd(
        Q,
        K,
        V,
        Out,
        LSE,
        qk_scale,
        n_q,
        n_k,
        d_k,
        d_v,
        diag,
        stride_qb,
        stride_qn,
        stride_kb,
        stride_kn,
        stride_vb,
        stride_vn,
        stride_ob,
        stride_on,
        CAUSAL: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_DK: tl.constexpr,
        BLOCK_DV: tl.constexpr,
        PRECISION: tl.constexpr,
        DOT_IN_FP32: tl.constexpr,
    ):
        bh, row0, offs_m = _program_rows(n_q, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_dk = tl.arange(0, BLOCK_DK)
        offs_dv = tl.arange(0, BLOCK_DV)
        # This program's queries stay on chip for the whole loop.
        q_ptrs = _row_ptrs(Q, bh, stride_qb, row0, stride_qn, BLOCK_M, offs_dk)
        q = _load(q_ptrs, offs_m, n_q, offs_dk, d_k, DOT_IN_FP32)
        kt_ptrs = K + bh * stride_kb + offs_n[None, :] * stride_kn + offs_dk[:, None]
        v_ptrs = V + bh * stride_vb + offs_n[:, None] * stride_vn + offs_dv[None, :]
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
        # Key tiles every row of this block sees in full run without masks; the tiles that
        # straddle the diagonal or the end of the keys run masked; the causal loop stops at
        # this block's last visible key.
        hi = n_k
        full = n_k // BLOCK_N * BLOCK_N
        if CAUSAL:
            hi = tl.minimum(n_k, row0 + BLOCK_M + diag)
            full = tl.maximum(tl.minimum(n_k, row0 + diag + 1), 0) // BLOCK_N * BLOCK_N
        for stage in tl.static_range(2):  # 0: full tiles, no masks; 1: the masked rest
            if stage == 0:
                lo, end = 0, full
            else:
                lo, end = full, hi
            for start_n in range(lo, end, BLOCK_N):
                cols = start_n + offs_n
                kt = tl.load(
                    kt_ptrs, mask=(cols[None, :] < n_k) & (offs_dk[:, None] < d_k), other=0.0
                )  # (BLOCK_DK, BLOCK_N): k transposed
                if DOT_IN_FP32:
                    kt = kt.to(tl.float32)
                s = tl.dot(q, kt, input_precision=PRECISION) * qk_scale
                if stage == 1:
                    valid = cols[None, :] < n_k
                    if CAUSAL:
                        valid = valid & (cols[None, :] <= offs_m[:, None] + diag)
                    s = tl.where(valid, s, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(s, 1))
                m_use = m_new
                if stage == 1 and CAUSAL:
                    # Bottom-right with n > m: a row may have seen no key yet (m = -inf);
                    # exponents taken against 0 instead give p = 0 and alpha = 0, not nan.
                    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
                alpha = tl.exp2(m_i - m_use)  # rescale factor exp(m_old - m_new), in base 2
                p = tl.exp2(s - m_use[:, None])
                l_i = l_i * alpha + tl.sum(p, 1)
                v = tl.load(
                    v_ptrs, mask=(cols[:, None] < n_k) & (offs_dv[None, :] < d_v), other=0.0
                )
                if DOT_IN_FP32:
                    v = v.to(tl.float32)
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
                m_i = m_new
                kt_ptrs += BLOCK_N * stride_kn
                v_ptrs += BLOCK_N * stride_vn
        l_div = l_i
        if CAUSAL:
            l_div = tl.where(l_i == 0.0, 1.0, l_i)  # a row that sees no key: output 0
        acc = acc / l_div[:, None]
        out_ptrs = _row_ptrs(Out, bh, stride_ob, row0, stride_on, BLOCK_M, offs_dv)
        _store(out_ptrs, acc, offs_m, n_q, offs_dv, d_v)
        lse = tl.where(l_i == 0.0, float("inf"), m_i + tl.log2(l_div))
        tl.store(LSE + bh * n_q + offs_m, lse, mask=offs_m < n_q)

    @triton.jit(do_not_specialize=["n_q", "d_v"])
    def _flash_bwd_delta(
        Out,
        DO,
        DELTA,
        n_q,
        d_v,
        stride_ob,
        stride_on,
        stride_dob,
        stride_don,
        BLOCK_M: tl.constexpr,
        BLOCK_DV: tl.constexpr,
    ):
        # D_i = rowsum(dO_i * O_i) = sum_j P_ij dP_ij: the term dS = P (dP - D) needs.
        bh, row0, offs_m = _program_rows(n_q, BLOCK_M)
        offs_dv = tl.arange(0, BLOCK_DV)
        o_ptrs = _row_ptrs(Out, bh, stride_ob, row0, stride_on, BLOCK_M, offs_dv)
        do_ptrs = _row_ptrs(DO, bh, stride_dob, row0, stride_don, BLOCK_M, offs_dv)
        o = _load(o_ptrs, offs_m, n_q, offs_dv, d_v, True)  # True: the product in fp32
        do = _load(do_ptrs, offs_m, n_q, offs_dv, d_v, True)
        tl.store(DELTA + bh * n_q + offs_m, tl.sum(o * do, 1), mask=offs_m < n_q)

    @triton.jit(do_not_specialize=sizes)
    def _flash_bwd(
        Q,
        K,
        V,
        DO,
        LSE,
        DELTA,
        DQ,
        DK,
        DV,
        sm_scale,
        qk_scale,
        n_q,
        n_k,
        d_k,
        d_v,
        diag,
        stride_qb,
        stride_qn,
        stride_kb,
        stride_kn,
        stride_vb,
        stride_vn,
        stride_dob,
        stride_don,
        DKDV: tl.constexpr,
        CAUSAL: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_DK: tl.constexpr,
        BLOCK_DV: tl.constexpr,
        PRECISION: tl.constexpr,
        DOT_IN_FP32: tl.constexpr,
    ):
        # The backward's two passes, launched one after the other. DKDV, a constexpr, picks
        # the pass: each compiles to a kernel of its own, with the other branch left out.
        offs_dk = tl.arange(0, BLOCK_DK)
        offs_dv = tl.arange(0, BLOCK_DV)
        if DKDV:
            # The dK/dV pass (_flash_bwd_dkdv in compile_for_gpu's report): one program per
            # block of keys; it keeps k, v, dK, dV on chip and streams the queries.
            bh, col0, offs_n = _program_rows(n_k, BLOCK_N)
            k_ptrs = _row_ptrs(K, bh, stride_kb, col0, stride_kn, BLOCK_N, offs_dk)
            v_ptrs = _row_ptrs(V, bh, stride_vb, col0, stride_vn, BLOCK_N, offs_dv)
            k = _load(k_ptrs, offs_n, n_k, offs_dk, d_k, DOT_IN_FP32)
            v = _load(v_ptrs, offs_n, n_k, offs_dv, d_v, DOT_IN_FP32)
            dk = tl.zeros([BLOCK_N, BLOCK_DK], tl.float32)
            dv = tl.zeros([BLOCK_N, BLOCK_DV], tl.float32)
            offs_m = tl.arange(0, BLOCK_M)
            q_ptrs = Q + bh * stride_qb + offs_m[:, None] * stride_qn + offs_dk[None, :]
            do_ptrs = DO + bh * stride_dob + offs_m[:, None] * stride_don + offs_dv[None, :]
            lo = 0
            if CAUSAL:
                # Query i sees key j iff i >= j - diag: earlier query blocks see none of them.
                lo = tl.maximum(col0 - diag, 0) // BLOCK_M * BLOCK_M
                q_ptrs += lo.to(tl.int64) * stride_qn
                do_ptrs += lo.to(tl.int64) * stride_don
            for start_m in range(lo, n_q, BLOCK_M):
                rows = start_m + offs_m
                q = _load(q_ptrs, rows, n_q, offs_dk, d_k, DOT_IN_FP32)
                do = _load(do_ptrs, rows, n_q, offs_dv, d_v, DOT_IN_FP32)
                lse, delta = _row_stats(LSE, DELTA, bh, n_q, rows)
                # Transposed tiles (keys x queries).
                valid = _visible(rows[None, :], offs_n[:, None], n_q, n_k, diag, CAUSAL)
                pt = _probs(k, q, lse[None, :], valid, qk_scale, PRECISION)
                dv += tl.dot(pt.to(do.dtype), do, input_precision=PRECISION)
                dst = _dscores(pt, v, do, delta[None, :], PRECISION)
                dk += tl.dot(dst.to(q.dtype), q, input_precision=PRECISION)
                q_ptrs += BLOCK_M * stride_qn
                do_ptrs += BLOCK_M * stride_don
            dk_ptrs = _row_ptrs(DK, bh, stride_kb, col0, stride_kn, BLOCK_N, offs_dk)
            _store(dk_ptrs, dk * sm_scale, offs_n, n_k, offs_dk, d_k)
            dv_ptrs = _row_ptrs(DV, bh, stride_vb, col0, stride_vn, BLOCK_N, offs_dv)
            _store(dv_ptrs, dv, offs_n, n_k, offs_dv, d_v)
        else:
            # The dQ pass (_flash_bwd_dq): one program per block of queries; it keeps q, dO, dQ
            # on chip and streams the keys.
            bh, row0, offs_m = _program_rows(n_q, BLOCK_M)
            q_ptrs = _row_ptrs(Q, bh, stride_qb, row0, stride_qn, BLOCK_M, offs_dk)
            do_ptrs = _row_ptrs(DO, bh, stride_dob, row0, stride_don, BLOCK_M, offs_dv)
            q = _load(q_ptrs, offs_m, n_q, offs_dk, d_k, DOT_IN_FP32)
            do = _load(do_ptrs, offs_m, n_q, offs_dv, d_v, DOT_IN_FP32)
            lse, delta = _row_stats(LSE, DELTA, bh, n_q, offs_m)
            dq = tl.zeros([BLOCK_M, BLOCK_DK], tl.float32)
            offs_n = tl.arange(0, BLOCK_N)
            k_ptrs = K + bh * stride_kb + offs_n[:, None] * stride_kn + offs_dk[None, :]
            v_ptrs = V + bh * stride_vb + offs_n[:, None] * stride_vn + offs_dv[None, :]
            hi = n_k
            if CAUSAL:
                hi = tl.minimum(n_k, row0 + BLOCK_M + diag)
            for start_n in range(0, hi, BLOCK_N):
                cols = start_n + offs_n
                k = _load(k_ptrs, cols, n_k, offs_dk, d_k, DOT_IN_FP32)
                v = _load(v_ptrs, cols, n_k, offs_dv, d_v, DOT_IN_FP32)
                valid = _visible(offs_m[:, None], cols[None, :], n_q, n_k, diag, CAUSAL)
                p = _probs(q, k, lse[:, None], valid, qk_scale, PRECISION)
                ds = _dscores(p, do, v, delta[:, None], PRECISION)
                dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
                k_ptrs += BLOCK_N * stride_kn
                v_ptrs += BLOCK_N * stride_vn
            dq_ptrs = _row_ptrs(DQ, bh, stride_qb, row0, stride_qn, BLOCK_M, offs_dk)
            _store(dq_ptrs, dq * sm_scale, offs_m, n_q, offs_dk, d_k)

    # (forward, D, dK/dV pass, dQ pass): one backward kernel serves both passes.
    return _flash_fwd, _flash_bwd_delta, _flash_bwd, _flash_bwd


def _pow2(x: int, at_least: int = 16) -> int:
    return max(at_least, 1 << (x - 1).bit_length())


def _dot_in_fp32(dtype: torch.dtype, capability: int | None) -> bool:
    # bf16 tl.dot needs sm80. Triton's interpreter (capability None) computes bf16 x bf16 dots
    # wrongly (NumPy has no bfloat16), and sm75 (T4) has no bf16 tensor cores: there the tiles
    # are upcast to fp32 before each dot; on sm80+ the dots run in bf16 tensor cores.
    return dtype == torch.bfloat16 and (capability is None or capability < 80)


def _capability(device: torch.device) -> int | None:
    """``major * 10 + minor`` of a CUDA device; None on the CPU (Triton's interpreter)."""
    if device.type == "cpu":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return major * 10 + minor


def _require_triton(caller: str) -> None:
    if not triton_available():
        raise ImportError(f"{caller} needs Triton: pip install triton")


def _launch_configs(
    device: torch.device,
    d_k: int,
    d_v: int,
    dtype: torch.dtype,
    causal: bool,
    block_m: int | None,
    block_n: int | None,
) -> tuple[LaunchConfig, LaunchConfig]:
    """(forward, backward) launch settings: chosen for the device, or the caller's block sizes."""
    if device.type == "cpu":  # the interpreter runs fastest with small tiles
        fwd = bwd = LaunchConfig(16, 16, 4, 1)
    else:
        budget = device_shared_memory(device)
        fwd = choose_config("forward", d_k, d_v, dtype, causal, budget)
        try:
            bwd = choose_config("backward", d_k, d_v, dtype, causal, budget)
        except ValueError:
            bwd = None  # only the backward pass raises, if it is ever called
    if block_m is not None or block_n is not None:
        fwd = replace(fwd, block_m=block_m or fwd.block_m, block_n=block_n or fwd.block_n)
        base = bwd or fwd
        bwd = replace(base, block_m=block_m or base.block_m, block_n=block_n or base.block_n)
    return fwd, bwd


def _constants(
    dtype: torch.dtype,
    causal: bool,
    d_k: int,
    d_v: int,
    cfg: LaunchConfig,
    dot_fp32: bool,
    on_gpu: bool = True,
) -> dict:
    """The compile-time arguments of the forward and backward kernels, but the backward's pass."""
    # fp32 inputs, and bf16 tiles upcast on a GPU: exact fp32 dots, not TF32.
    ieee = dtype == torch.float32 or (dot_fp32 and on_gpu)
    return {
        "CAUSAL": bool(causal),
        "BLOCK_M": cfg.block_m,
        "BLOCK_N": cfg.block_n,
        "BLOCK_DK": _pow2(d_k),
        "BLOCK_DV": _pow2(d_v),
        "PRECISION": "ieee" if ieee else "tf32",
        "DOT_IN_FP32": dot_fp32,
    }


def _launch(
    kernel, grid, leading, qf, kf, vf, x, scale, causal, diag, cfg, dot_fp32, **flags
) -> None:
    """Launch the forward kernel, or a pass of the backward kernel, on ``grid``.

    Their arguments: ``leading`` (the pointers, and the backward's softmax scale), then the
    ones the two share: the base-2 score scale, the sizes, the diagonal, the strides of q,
    k, v and of ``x`` (the output for the forward, dO for the backward), the constants, and
    ``flags``, the constants of one kernel only (the backward's ``DKDV``).
    """
    _, n, d_k = qf.shape
    m, d_v = kf.shape[1], vf.shape[2]
    kernel[grid](
        *leading,
        scale * _LOG2E,
        n,
        m,
        d_k,
        d_v,
        diag,
        *qf.stride()[:2],
        *kf.stride()[:2],
        *vf.stride()[:2],
        *x.stride()[:2],
        **_constants(qf.dtype, causal, d_k, d_v, cfg, dot_fp32, qf.device.type != "cpu"),
        **flags,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def _forward(qf, kf, vf, scale, causal, diag, cfg, dot_fp32):
    bh, n, _ = qf.shape
    out = torch.empty(bh, n, vf.shape[2], dtype=qf.dtype, device=qf.device)
    lse = torch.empty(bh, n, dtype=torch.float32, device=qf.device)
    fwd = _kernels()[0]
    grid = launch_grid(bh, n, cfg.block_m)
    _launch(fwd, grid, (qf, kf, vf, out, lse), qf, kf, vf, out, scale, causal, diag, cfg, dot_fp32)
    return out, lse


def _backward(qf, kf, vf, out, lse, do, scale, causal, diag, cfg, dot_fp32):
    _, delta_k, dkdv_k, dq_k = _kernels()  # the backward kernel, once per pass
    bh, n, m, d_v = qf.shape[0], qf.shape[1], kf.shape[1], vf.shape[2]
    do = do.contiguous()
    delta = torch.empty(bh, n, dtype=torch.float32, device=qf.device)
    delta_k[launch_grid(bh, n, cfg.block_m)](
        out,
        do,
        delta,
        n,
        d_v,
        *out.stride()[:2],
        *do.stride()[:2],
        BLOCK_M=cfg.block_m,
        BLOCK_DV=_pow2(d_v),
    )
    dq, dk, dv = torch.empty_like(qf), torch.empty_like(kf), torch.empty_like(vf)
    leading = (qf, kf, vf, do, lse, delta, dq, dk, dv, scale)
    shared = (qf, kf, vf, do, scale, causal, diag, cfg, dot_fp32)
    _launch(dkdv_k, launch_grid(bh, m, cfg.block_n), leading, *shared, DKDV=True)  # key blocks
    _launch(dq_k, launch_grid(bh, n, cfg.block_m), leading, *shared, DKDV=False)  # query blocks
    return dq, dk, dv


class _TritonFlash(torch.autograd.Function):
    """Forward saves q, k, v, the output and the row log-sum-exp (O(n d) memory, not P)."""

    @staticmethod
    def forward(ctx, qf, kf, vf, scale, causal, diag, fwd_cfg, bwd_cfg, dot_fp32):
        out, lse = _forward(qf, kf, vf, scale, causal, diag, fwd_cfg, dot_fp32)
        ctx.save_for_backward(qf, kf, vf, out, lse)
        ctx.args = (scale, causal, diag, bwd_cfg, dot_fp32)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do):
        qf, kf, vf, out, lse = ctx.saved_tensors
        scale, causal, diag, cfg, dot_fp32 = ctx.args
        if cfg is None:
            d_k, d_v = qf.shape[-1], vf.shape[-1]
            choose_config(  # raises, saying why
                "backward", d_k, d_v, qf.dtype, causal, device_shared_memory(qf.device)
            )
        dq, dk, dv = _backward(qf, kf, vf, out, lse, do, scale, causal, diag, cfg, dot_fp32)
        return dq, dk, dv, None, None, None, None, None, None


def triton_flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    alignment: str = "top_left",
) -> torch.Tensor:
    r"""softmax(q k^T * scale) v by the Triton FlashAttention kernels, differentiable.

    The forward kernel writes the output and each row's log-sum-exp; the backward pass
    (FlashAttention-2, Algorithm 2) computes D = rowsum(dO * O) in a small kernel, then dK, dV
    over key blocks and dQ over query blocks (one kernel, launched once for each), recomputing
    P tile by tile from the log-sum-exp. Extra memory: O(n) floats per head, never the n x m
    matrix.

    Args:
        q: queries ``(..., n, d_k)``; k: keys ``(..., m, d_k)``; v: values ``(..., m, d_v)``,
            all float16, bfloat16 or float32, on a CUDA device (or on the CPU with
            ``TRITON_INTERPRET=1``). Batch dimensions broadcast; d_k, d_v <= 256.
        causal: mask future keys, aligned as ``alignment`` says.
        scale: defaults to ``1 / sqrt(d_k)``.
        block_m, block_n: queries and keys per tile (powers of two >= 16) for the forward and
            backward kernels. Default: chosen for the device's shared memory
            (:func:`~selfattn.efficient.triton_configs.choose_config`); 16 in the interpreter.
        alignment: ``"top_left"`` (query ``i`` sees keys ``j <= i``, SDPA's ``is_causal``) or
            ``"bottom_right"`` (``j <= i + m - n``, ``causal_lower_right``: the last query sees
            every key, as in decoding against a cache); see
            :func:`~selfattn.masks.causal_diagonal`.

    Returns:
        ``(..., n, d_v)`` in the input dtype. fp32 inputs use exact fp32 dots (not TF32).

    Raises:
        ImportError: Triton is not installed.
        RuntimeError: the tensors are on the CPU and ``TRITON_INTERPRET=1`` is not set.
        TypeError: a dtype other than float16, bfloat16, float32, or bad tensors.
        ValueError: mismatched shapes or devices, head dims over 256, bad block sizes or
            alignment, or a grid over CUDA's limits.
    """
    causal = require_bool(causal, "causal")
    batch = check_qkv(q, k, v)
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(
            f"triton_flash_attention supports float16, bfloat16 and float32, got {q.dtype}"
        )
    n, m, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    if max(d_k, d_v) > 256:
        raise ValueError(
            f"triton_flash_attention supports head dims up to 256, got d_k={d_k}, d_v={d_v}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    diag = causal_diagonal(n, m, alignment)
    if q.device.type == "cpu" and not _interpreting():
        raise RuntimeError(
            "triton_flash_attention needs CUDA tensors; on the CPU set TRITON_INTERPRET=1 before "
            "the first call to run it in Triton's (slow) interpreter"
        )
    _require_triton("triton_flash_attention")
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if b is not None:
            require_power_of_two(b, name, 16)
    scale = check_scale(scale, d_k)
    causal = bool(causal)
    fwd_cfg, bwd_cfg = _launch_configs(q.device, d_k, d_v, q.dtype, causal, block_m, block_n)

    qf = q.expand(*batch, n, d_k).reshape(-1, n, d_k).contiguous()
    kf = k.expand(*batch, m, d_k).reshape(-1, m, d_k).contiguous()
    vf = v.expand(*batch, m, d_v).reshape(-1, m, d_v).contiguous()
    dot_fp32 = _dot_in_fp32(q.dtype, _capability(q.device))
    out = _TritonFlash.apply(
        qf, kf, vf, float(scale), causal, diag if causal else 0, fwd_cfg, bwd_cfg, dot_fp32
    )
    return out.reshape(*batch, n, d_v)


_TRITON_TYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


def compile_for_gpu(
    kernel: str,
    capability: int,
    dtype: torch.dtype,
    d_k: int,
    d_v: int,
    *,
    causal: bool = True,
    config: LaunchConfig | None = None,
) -> dict[str, int]:
    """Compile one pass's kernels for a GPU generation, on any machine (no GPU needed).

    Triton compiles ahead of time for a target (``GPUTarget("cuda", capability, 32)``) with
    its bundled ``ptxas``; the result says whether the kernels build for that GPU and how much
    shared memory each really uses, which the tests compare with the estimate of
    :func:`~selfattn.efficient.triton_configs.shared_memory_bytes` and the device's budget.

    Args:
        kernel: ``"forward"`` (the forward kernel) or ``"backward"`` (the backward kernel's
            dK/dV and dQ passes, each compiled on its own).
        capability: compute capability as ``major * 10 + minor``, e.g. 75 (T4), 80, 90.
        dtype: float16, bfloat16 or float32.
        d_k, d_v: head dims (1..256).
        causal: compile the causal variant.
        config: launch settings; default: what a device with ``capability``'s budget in
            :data:`~selfattn.efficient.triton_configs.SHARED_MEMORY_BUDGET` would get.

    Returns:
        ``{kernel name: shared memory in bytes}``; the backward's passes are named
        ``_flash_bwd_dkdv`` and ``_flash_bwd_dq``.

    Raises:
        ImportError: Triton is not installed.
        ValueError: an unknown capability or kernel, or no config fits.
    """
    causal = require_bool(causal, "causal")
    if capability not in SHARED_MEMORY_BUDGET:
        raise ValueError(
            f"capability must be one of {sorted(SHARED_MEMORY_BUDGET)}, got {capability!r}"
        )
    if config is None:
        config = choose_config(kernel, d_k, d_v, dtype, causal, SHARED_MEMORY_BUDGET[capability])
    _require_triton("compile_for_gpu")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fwd, _, bwd, _ = _define_kernels(interpret=False)
    if kernel == "forward":
        passes = {"_flash_fwd": (fwd, {})}
    else:
        passes = {
            "_flash_bwd_dkdv": (bwd, {"DKDV": True}),
            "_flash_bwd_dq": (bwd, {"DKDV": False}),
        }
    common = _constants(dtype, causal, d_k, d_v, config, _dot_in_fp32(dtype, capability))
    pointers = {"Q", "K", "V", "Out", "DO", "DQ", "DK", "DV"}
    shared = {}
    for label, (fn, flags) in passes.items():
        constants = {**common, **flags}
        signature = {}
        for name in fn.arg_names:
            if name in constants:
                signature[name] = "constexpr"
            elif name in pointers:
                signature[name] = "*" + _TRITON_TYPES[dtype]
            elif name in ("LSE", "DELTA"):
                signature[name] = "*fp32"
            elif name in ("qk_scale", "sm_scale"):
                signature[name] = "fp32"
            else:
                signature[name] = "i32"
        compiled = triton.compile(
            ASTSource(fn, signature, constexprs=constants),
            target=GPUTarget("cuda", capability, 32),
            options={"num_warps": config.num_warps, "num_stages": config.num_stages},
        )
        shared[label] = int(compiled.metadata.shared)
    return shared
