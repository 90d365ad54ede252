"""FlashAttention's Triton kernels, defined once at module level.

Imported by :mod:`selfattn.efficient.triton_flash` on the first call, not with
``selfattn``. Triton decides when a kernel is defined whether it is compiled for the
GPU or run by its interpreter (``TRITON_INTERPRET=1``, CPU tensors): the mode is the
one in force when this module is first imported, for the whole process.
Without Triton installed the module still imports, and the kernels are plain Python
functions: their source can be read (chapter 7 prints ``online_softmax_tile``),
not run.

Conventions shared by the kernels: tensors are ``(batch x heads, rows, head dim)``
with a contiguous last dim; a one-axis grid of ``batch x heads x row blocks`` programs,
the row block varying fastest (:func:`~selfattn.efficient.triton_configs.launch_grid`);
base offsets are int64 (a tensor may hold more than 2^31 elements), offsets inside a
tile int32. Key ``j`` is visible to query ``i`` when ``j <= i + diag`` (``diag`` = 0
top-left, ``m - n`` bottom-right). Scores are in base 2: ``qk_scale`` = softmax scale *
log2(e), and ``LSE`` holds each row's log2-sum-exp2 (+inf for a row that sees no key).
The tiles are ``BLOCK_Q`` queries by ``BLOCK_K`` keys; the running maximum and sum of
the online softmax are ``mu`` and ``ell``, as in chapter 7.
"""

from __future__ import annotations

try:
    import triton
    import triton.language as tl

    jit = triton.jit
    #: Whether the kernels run in Triton's interpreter (fixed at this module's import).
    INTERPRETED = bool(triton.knobs.runtime.interpret)
except ImportError:  # no Triton: the kernels stay plain functions, to be read
    tl = None
    INTERPRETED = False

    def jit(fn=None, **options):
        return fn if fn is not None else (lambda f: f)


# The kernels themselves (online_softmax_tile, flash_fwd, flash_bwd_delta, flash_bwd) are
# reached through triton_flash; with Triton installed they are JIT objects, which autodoc
# cannot document, so the API page shows them through this module's docstring only.
__all__ = ["INTERPRETED"]


# The kernels share these helpers; Triton inlines them, so they cost nothing at run time.
# Their block sizes and flags (BLOCK, CAUSAL, ...) are the kernels' constexprs, passed on:
# a constexpr argument is compiled in, annotated or not.


@jit
def _program_rows(n, BLOCK):
    # One grid axis: program = head * blocks + block, so neighbouring programs share a
    # head (its keys and values stay in L2) and batch x heads meets no 65535 limit.
    # Returns the head (int64: a base offset's factor), the block's first row and its rows.
    blocks = tl.cdiv(n, BLOCK)
    bh = (tl.program_id(0) // blocks).to(tl.int64)
    row0 = (tl.program_id(0) % blocks) * BLOCK
    return bh, row0, row0 + tl.arange(0, BLOCK)


@jit
def _row_ptrs(X, bh, stride_b, row0, stride_n, BLOCK, offs_d):
    # Pointers to rows row0 .. row0 + BLOCK - 1 of head bh: int64 base, int32 tile offsets.
    local = tl.arange(0, BLOCK)[:, None] * stride_n + offs_d[None, :]
    return X + bh * stride_b + row0.to(tl.int64) * stride_n + local


@jit
def _load(ptrs, rows, n, cols, d, DOT_IN_FP32):
    # A tile of rows < n and columns < d (zeros elsewhere: any n, any d), upcast to fp32
    # when the dots run in fp32.
    x = tl.load(ptrs, mask=(rows[:, None] < n) & (cols[None, :] < d), other=0.0)
    if DOT_IN_FP32:
        x = x.to(tl.float32)
    return x


@jit
def _store(ptrs, x, rows, n, cols, d):
    # x, in the tensor's dtype, where rows < n and columns < d.
    tl.store(ptrs, x.to(ptrs.dtype.element_ty), mask=(rows[:, None] < n) & (cols[None, :] < d))


@jit
def _row_stats(LSE, DELTA, bh, n_q, rows):
    # Each query row's log2-sum-exp2 (+inf past the end: p = 0 there) and D.
    lse = tl.load(LSE + bh * n_q + rows, mask=rows < n_q, other=float("inf"))
    delta = tl.load(DELTA + bh * n_q + rows, mask=rows < n_q, other=0.0)
    return lse, delta


@jit
def _probs(a, b, lse, valid, qk_scale, PRECISION):
    # The backward's P, recomputed from the saved log-sum-exp: exp2(a b^T * qk_scale - lse),
    # with (a, b) = (q, k) for dQ and (k, q), transposed, for dK and dV.
    s = tl.dot(a, tl.trans(b), input_precision=PRECISION) * qk_scale
    return tl.where(valid, tl.exp2(s - lse), 0.0)


@jit
def _dscores(p, x, y, delta, PRECISION):
    # dS = P o (dP - D) with dP = x y^T: (dO, v) for dQ, (v, dO) for the transposed tiles.
    dp = tl.dot(x, tl.trans(y), input_precision=PRECISION)
    return p * (dp - delta)


@jit
def _visible(rows, cols, n_q, n_k, diag, CAUSAL):
    # Query rows x key cols (broadcast by the caller): both in range, and the key on or
    # below the query's diagonal.
    valid = (cols < n_k) & (rows < n_q)
    if CAUSAL:
        valid = valid & (cols <= rows + diag)
    return valid


# fmt: off
@jit
def online_softmax_tile(
    q, acc, mu, ell, kt_ptrs, v_ptrs, rows, cols, n_k, diag, qk_scale,
    offs_dk, d_k, offs_dv, d_v, MASKED, CAUSAL, PRECISION, DOT_IN_FP32,
):
    """One key tile of the forward pass, for one block of query rows.

    In base 2: qk_scale holds log2(e), so exp2 below is exp of the
    real scores. Returns the new (acc, mu, ell).
    """
    kt = _load(kt_ptrs, offs_dk, d_k, cols, n_k, DOT_IN_FP32)  # k^T
    s = tl.dot(q, kt, input_precision=PRECISION) * qk_scale
    if MASKED:  # a tile across the diagonal or past the last key
        valid = cols[None, :] < n_k
        if CAUSAL:
            valid = valid & (cols[None, :] <= rows[:, None] + diag)
        s = tl.where(valid, s, float("-inf"))
    mu_new = tl.maximum(mu, tl.max(s, 1))
    mu_ref = mu_new
    if MASKED and CAUSAL:
        # A row that has seen no key yet (bottom-right, n > m) has
        # mu' = -inf: against 0 instead, p = 0 and alpha = 0, not NaN.
        mu_ref = tl.where(mu_new == float("-inf"), 0.0, mu_new)
    alpha = tl.exp2(mu - mu_ref)  # exp(mu - mu'): rescales ell and acc
    p = tl.exp2(s - mu_ref[:, None])
    ell = ell * alpha + tl.sum(p, 1)
    v = _load(v_ptrs, cols, n_k, offs_dv, d_v, DOT_IN_FP32)
    pv = tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    acc = acc * alpha[:, None] + pv
    return acc, mu_new, ell
# fmt: on


# Sizes are not specialised: one compiled kernel serves every n, m (and n = 1), instead of
# a recompilation per divisibility class of each size.
_SIZES = ["n_q", "n_k", "d_k", "d_v", "diag"]


# fmt: off
@jit(do_not_specialize=_SIZES)
def flash_fwd(
    Q, K, V, Out, LSE, qk_scale,
    n_q, n_k, d_k, d_v, diag,
    stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn, stride_ob, stride_on,
    CAUSAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr, PRECISION: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """The forward pass: one program per (batch x head, block of queries).

    Writes the output and each row's log2-sum-exp2 (``LSE``); the keys and values
    stream through in tiles of ``BLOCK_K``, full tiles first without masks.
    """
    bh, row0, offs_q = _program_rows(n_q, BLOCK_Q)
    offs_k = tl.arange(0, BLOCK_K)
    offs_dk = tl.arange(0, BLOCK_DK)
    offs_dv = tl.arange(0, BLOCK_DV)
    # This program's queries stay on chip for the whole loop.
    q_ptrs = _row_ptrs(Q, bh, stride_qb, row0, stride_qn, BLOCK_Q, offs_dk)
    q = _load(q_ptrs, offs_q, n_q, offs_dk, d_k, DOT_IN_FP32)
    kt_ptrs = K + bh * stride_kb + offs_k[None, :] * stride_kn + offs_dk[:, None]
    v_ptrs = V + bh * stride_vb + offs_k[:, None] * stride_vn + offs_dv[None, :]
    mu = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    ell = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, BLOCK_DV], tl.float32)
    # Key tiles every row of this block sees in full run without masks; the tiles that
    # straddle the diagonal or the end of the keys run masked; the causal loop stops at
    # this block's last visible key.
    hi = n_k
    full = n_k // BLOCK_K * BLOCK_K
    if CAUSAL:
        hi = tl.minimum(n_k, row0 + BLOCK_Q + diag)
        full = tl.maximum(tl.minimum(n_k, row0 + diag + 1), 0) // BLOCK_K * BLOCK_K
    for stage in tl.static_range(2):  # 0: full tiles, no masks; 1: the masked rest
        if stage == 0:
            lo, end = 0, full
        else:
            lo, end = full, hi
        for start_k in range(lo, end, BLOCK_K):
            acc, mu, ell = online_softmax_tile(
                q, acc, mu, ell, kt_ptrs, v_ptrs, offs_q, start_k + offs_k, n_k, diag,
                qk_scale, offs_dk, d_k, offs_dv, d_v, stage == 1, CAUSAL, PRECISION,
                DOT_IN_FP32,
            )
            kt_ptrs += BLOCK_K * stride_kn
            v_ptrs += BLOCK_K * stride_vn
    # A row that sees no key (causal with n > m bottom-right, or no keys at all, m = 0)
    # has ell = 0: output 0 as SDPA gives, not 0 / 0 = NaN.
    ell_div = tl.where(ell == 0.0, 1.0, ell)
    acc = acc / ell_div[:, None]
    out_ptrs = _row_ptrs(Out, bh, stride_ob, row0, stride_on, BLOCK_Q, offs_dv)
    _store(out_ptrs, acc, offs_q, n_q, offs_dv, d_v)
    lse = tl.where(ell == 0.0, float("inf"), mu + tl.log2(ell_div))
    tl.store(LSE + bh * n_q + offs_q, lse, mask=offs_q < n_q)
# fmt: on


# fmt: off
@jit(do_not_specialize=["n_q", "d_v"])
def flash_bwd_delta(
    Out, DO, DELTA, n_q, d_v, stride_ob, stride_on, stride_dob, stride_don,
    BLOCK_Q: tl.constexpr, BLOCK_DV: tl.constexpr,
):
    """``D_i = rowsum(dO_i * O_i)`` for every query row, the backward's first kernel."""
    # D_i = rowsum(dO_i * O_i) = sum_j P_ij dP_ij: the term dS = P (dP - D) needs.
    bh, row0, offs_q = _program_rows(n_q, BLOCK_Q)
    offs_dv = tl.arange(0, BLOCK_DV)
    o_ptrs = _row_ptrs(Out, bh, stride_ob, row0, stride_on, BLOCK_Q, offs_dv)
    do_ptrs = _row_ptrs(DO, bh, stride_dob, row0, stride_don, BLOCK_Q, offs_dv)
    o = _load(o_ptrs, offs_q, n_q, offs_dv, d_v, True)  # True: the product in fp32
    do = _load(do_ptrs, offs_q, n_q, offs_dv, d_v, True)
    tl.store(DELTA + bh * n_q + offs_q, tl.sum(o * do, 1), mask=offs_q < n_q)
# fmt: on


# fmt: off
@jit(do_not_specialize=_SIZES)
def flash_bwd(
    Q, K, V, DO, LSE, DELTA, DQ, DK, DV, sm_scale, qk_scale,
    n_q, n_k, d_k, d_v, diag,
    stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn, stride_dob, stride_don,
    DKDV: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr, PRECISION: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """The backward pass (FlashAttention-2's Algorithm 2), one pass per launch.

    ``DKDV``, a constexpr, picks the pass (each compiles to a kernel of its own): dK and dV
    over the queries, a program per block of keys; or dQ over the keys, a program per
    block of queries. Both recompute P tile by tile from the saved log-sum-exp.
    """
    offs_dk, offs_dv = tl.arange(0, BLOCK_DK), tl.arange(0, BLOCK_DV)
    if DKDV:
        # The dK/dV pass (_flash_bwd_dkdv in compile_for_gpu's report): one program per
        # block of keys; it keeps k, v, dK, dV on chip and streams the queries.
        bh, col0, offs_k = _program_rows(n_k, BLOCK_K)
        k_ptrs = _row_ptrs(K, bh, stride_kb, col0, stride_kn, BLOCK_K, offs_dk)
        v_ptrs = _row_ptrs(V, bh, stride_vb, col0, stride_vn, BLOCK_K, offs_dv)
        k = _load(k_ptrs, offs_k, n_k, offs_dk, d_k, DOT_IN_FP32)
        v = _load(v_ptrs, offs_k, n_k, offs_dv, d_v, DOT_IN_FP32)
        dk = tl.zeros([BLOCK_K, BLOCK_DK], tl.float32)
        dv = tl.zeros([BLOCK_K, BLOCK_DV], tl.float32)
        offs_q = tl.arange(0, BLOCK_Q)
        q_ptrs = Q + bh * stride_qb + offs_q[:, None] * stride_qn + offs_dk[None, :]
        do_ptrs = DO + bh * stride_dob + offs_q[:, None] * stride_don + offs_dv[None, :]
        lo = 0
        if CAUSAL:
            # Query i sees key j iff i >= j - diag: earlier query blocks see none of them.
            lo = tl.maximum(col0 - diag, 0) // BLOCK_Q * BLOCK_Q
            q_ptrs += lo.to(tl.int64) * stride_qn
            do_ptrs += lo.to(tl.int64) * stride_don
        for start_q in range(lo, n_q, BLOCK_Q):
            rows = start_q + offs_q
            q = _load(q_ptrs, rows, n_q, offs_dk, d_k, DOT_IN_FP32)
            do = _load(do_ptrs, rows, n_q, offs_dv, d_v, DOT_IN_FP32)
            lse, delta = _row_stats(LSE, DELTA, bh, n_q, rows)
            # Transposed tiles (keys x queries).
            valid = _visible(rows[None, :], offs_k[:, None], n_q, n_k, diag, CAUSAL)
            pt = _probs(k, q, lse[None, :], valid, qk_scale, PRECISION)
            dv += tl.dot(pt.to(do.dtype), do, input_precision=PRECISION)
            dst = _dscores(pt, v, do, delta[None, :], PRECISION)
            dk += tl.dot(dst.to(q.dtype), q, input_precision=PRECISION)
            q_ptrs += BLOCK_Q * stride_qn
            do_ptrs += BLOCK_Q * stride_don
        dk_ptrs = _row_ptrs(DK, bh, stride_kb, col0, stride_kn, BLOCK_K, offs_dk)
        _store(dk_ptrs, dk * sm_scale, offs_k, n_k, offs_dk, d_k)
        dv_ptrs = _row_ptrs(DV, bh, stride_vb, col0, stride_vn, BLOCK_K, offs_dv)
        _store(dv_ptrs, dv, offs_k, n_k, offs_dv, d_v)
    else:
        # The dQ pass (_flash_bwd_dq): one program per block of queries; it keeps q, dO, dQ
        # on chip and streams the keys.
        bh, row0, offs_q = _program_rows(n_q, BLOCK_Q)
        q_ptrs = _row_ptrs(Q, bh, stride_qb, row0, stride_qn, BLOCK_Q, offs_dk)
        do_ptrs = _row_ptrs(DO, bh, stride_dob, row0, stride_don, BLOCK_Q, offs_dv)
        q = _load(q_ptrs, offs_q, n_q, offs_dk, d_k, DOT_IN_FP32)
        do = _load(do_ptrs, offs_q, n_q, offs_dv, d_v, DOT_IN_FP32)
        lse, delta = _row_stats(LSE, DELTA, bh, n_q, offs_q)
        dq = tl.zeros([BLOCK_Q, BLOCK_DK], tl.float32)
        offs_k = tl.arange(0, BLOCK_K)
        k_ptrs = K + bh * stride_kb + offs_k[:, None] * stride_kn + offs_dk[None, :]
        v_ptrs = V + bh * stride_vb + offs_k[:, None] * stride_vn + offs_dv[None, :]
        hi = n_k
        if CAUSAL:
            hi = tl.minimum(n_k, row0 + BLOCK_Q + diag)
        for start_k in range(0, hi, BLOCK_K):
            cols = start_k + offs_k
            k = _load(k_ptrs, cols, n_k, offs_dk, d_k, DOT_IN_FP32)
            v = _load(v_ptrs, cols, n_k, offs_dv, d_v, DOT_IN_FP32)
            valid = _visible(offs_q[:, None], cols[None, :], n_q, n_k, diag, CAUSAL)
            p = _probs(q, k, lse[:, None], valid, qk_scale, PRECISION)
            ds = _dscores(p, do, v, delta[:, None], PRECISION)
            dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
            k_ptrs += BLOCK_K * stride_kn
            v_ptrs += BLOCK_K * stride_vn
        dq_ptrs = _row_ptrs(DQ, bh, stride_qb, row0, stride_qn, BLOCK_Q, offs_dk)
        _store(dq_ptrs, dq * sm_scale, offs_q, n_q, offs_dk, d_k)
# fmt: on


# Triton's interpreter wraps a kernel without its docstring (the compiler's wrapper keeps it).
for _kernel in (online_softmax_tile, flash_fwd, flash_bwd_delta, flash_bwd):
    _kernel.__doc__ = getattr(_kernel, "fn", _kernel).__doc__
