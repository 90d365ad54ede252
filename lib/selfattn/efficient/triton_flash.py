"""FlashAttention's forward and backward passes as Triton kernels: launchers and autograd.

The same algorithm as :func:`~selfattn.efficient.flash.flash_attention`. Forward: one program
per (batch x head, block of queries); it keeps its queries, the running max ``mu``, the
running sum ``ell`` and the unnormalised output on chip, streams the keys and values through
in blocks, and writes the output and each row's log-sum-exp. Backward (FlashAttention-2,
Algorithm 2): a small kernel computes D = rowsum(dO * O); then one backward kernel runs
twice, a constexpr picking its pass: a program per block of keys accumulates dK and dV over
the queries, then a program per block of queries accumulates dQ over the keys, both
recomputing P tile by tile from the log-sum-exp. fp16, bf16 and fp32 inputs; the tiles
accumulate in fp32. Launch settings fit the device's shared memory
(:mod:`~selfattn.efficient.triton_configs`).

The kernels themselves are in :mod:`~selfattn.efficient.triton_kernels`, imported on the
first call, so ``import selfattn`` works on a machine without Triton or a GPU. With the
environment variable ``TRITON_INTERPRET=1`` set before the first call, the kernels run in
Triton's interpreter on CPU tensors (slowly): that is how the tests check them against
torch SDPA without a GPU.
"""

from __future__ import annotations

import os
from dataclasses import replace

import torch

from .._checks import (
    require_bool,
    require_power_of_two,
)
from ._tiled import check_tiled, flatten_batch
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


def _kernels(device: torch.device):
    """The kernels module, imported (and its kernels defined) on the first call.

    Triton fixes at that import whether the kernels are compiled or interpreted: CPU
    tensors need the interpreter, CUDA tensors compiled kernels.
    """
    from . import triton_kernels

    if triton_kernels.INTERPRETED != (device.type == "cpu"):
        mode = "interpreted" if triton_kernels.INTERPRETED else "compiled"
        raise RuntimeError(
            f"the Triton kernels were defined {mode} in this process (TRITON_INTERPRET at "
            f"their first use), so they cannot run on {device}: restart with "
            "TRITON_INTERPRET=1 for CPU tensors, or without it for CUDA tensors"
        )
    return triton_kernels


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
    block_q: int | None,
    block_k: int | None,
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
    if block_q is not None or block_k is not None:
        fwd = replace(fwd, block_q=block_q or fwd.block_q, block_k=block_k or fwd.block_k)
        base = bwd or fwd
        bwd = replace(base, block_q=block_q or base.block_q, block_k=block_k or base.block_k)
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
        "BLOCK_Q": cfg.block_q,
        "BLOCK_K": cfg.block_k,
        "BLOCK_DK": _pow2(d_k),
        "BLOCK_DV": _pow2(d_v),
        "PRECISION": "ieee" if ieee else "tf32",
        "DOT_IN_FP32": dot_fp32,
    }


def _launch(
    kernel, grid, leading, qf, kf, vf, x, scale, causal, offset, cfg, dot_fp32, **flags
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
        offset,
        *qf.stride()[:2],
        *kf.stride()[:2],
        *vf.stride()[:2],
        *x.stride()[:2],
        **_constants(qf.dtype, causal, d_k, d_v, cfg, dot_fp32, qf.device.type != "cpu"),
        **flags,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def _forward(qf, kf, vf, scale, causal, offset, cfg, dot_fp32):
    bh, n, _ = qf.shape
    out = torch.empty(bh, n, vf.shape[2], dtype=qf.dtype, device=qf.device)
    lse = torch.empty(bh, n, dtype=torch.float32, device=qf.device)
    fwd = _kernels(qf.device).flash_fwd
    grid = launch_grid(bh, n, cfg.block_q)
    _launch(
        fwd, grid, (qf, kf, vf, out, lse), qf, kf, vf, out, scale, causal, offset, cfg, dot_fp32
    )
    return out, lse


def _backward(qf, kf, vf, out, lse, do, scale, causal, offset, cfg, dot_fp32):
    kernels = _kernels(qf.device)
    delta_k, dkdv_k = kernels.flash_bwd_delta, kernels.flash_bwd
    dq_k = dkdv_k  # the backward kernel, once per pass
    bh, n, m, d_v = qf.shape[0], qf.shape[1], kf.shape[1], vf.shape[2]
    do = do.contiguous()
    delta = torch.empty(bh, n, dtype=torch.float32, device=qf.device)
    delta_k[launch_grid(bh, n, cfg.block_q)](
        out,
        do,
        delta,
        n,
        d_v,
        *out.stride()[:2],
        *do.stride()[:2],
        BLOCK_Q=cfg.block_q,
        BLOCK_DV=_pow2(d_v),
    )
    dq, dk, dv = torch.empty_like(qf), torch.empty_like(kf), torch.empty_like(vf)
    leading = (qf, kf, vf, do, lse, delta, dq, dk, dv, scale)
    shared = (qf, kf, vf, do, scale, causal, offset, cfg, dot_fp32)
    _launch(dkdv_k, launch_grid(bh, m, cfg.block_k), leading, *shared, DKDV=True)  # key blocks
    _launch(dq_k, launch_grid(bh, n, cfg.block_q), leading, *shared, DKDV=False)  # query blocks
    return dq, dk, dv


class _TritonFlash(torch.autograd.Function):
    """Forward saves q, k, v, the output and the row log-sum-exp (O(n d) memory, not P)."""

    @staticmethod
    def forward(ctx, qf, kf, vf, scale, causal, offset, fwd_cfg, bwd_cfg, dot_fp32):
        out, lse = _forward(qf, kf, vf, scale, causal, offset, fwd_cfg, dot_fp32)
        ctx.save_for_backward(qf, kf, vf, out, lse)
        ctx.args = (scale, causal, offset, bwd_cfg, dot_fp32)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do):
        qf, kf, vf, out, lse = ctx.saved_tensors
        scale, causal, offset, cfg, dot_fp32 = ctx.args
        if cfg is None:
            d_k, d_v = qf.shape[-1], vf.shape[-1]
            choose_config(  # raises, saying why
                "backward", d_k, d_v, qf.dtype, causal, device_shared_memory(qf.device)
            )
        dq, dk, dv = _backward(qf, kf, vf, out, lse, do, scale, causal, offset, cfg, dot_fp32)
        return dq, dk, dv, None, None, None, None, None, None


def triton_flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
    alignment: str = "bottom_right",
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
        block_q, block_k: queries and keys per tile (powers of two >= 16) for the forward and
            backward kernels. Default: chosen for the device's shared memory
            (:func:`~selfattn.efficient.triton_configs.choose_config`); 16 in the interpreter.
        alignment: ``"bottom_right"`` (the default, as ``mask="causal"``: ``j <= i + m - n``,
            ``causal_lower_right``: the last query sees every key, as in decoding against a
            cache) or ``"top_left"`` (query ``i`` sees keys ``j <= i``, SDPA's ``is_causal``); see
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
    a = check_tiled(q, k, v, causal, alignment, scale, block_q=16)
    _check_triton_inputs(q, v, block_q, block_k)
    n, d_k, d_v = q.shape[-2], q.shape[-1], v.shape[-1]
    configs = _launch_configs(q.device, d_k, d_v, q.dtype, a.causal, block_q, block_k)
    qf, kf, vf = (t.contiguous() for t in flatten_batch(a.batch, q, k, v))
    dot_fp32 = _dot_in_fp32(q.dtype, _capability(q.device))
    offset = a.offset if a.causal else 0
    out = _TritonFlash.apply(qf, kf, vf, a.scale, a.causal, offset, *configs, dot_fp32)
    return out.reshape(*a.batch, n, d_v)


def _check_triton_inputs(q, v, block_q, block_k) -> None:
    """What the kernels add to :func:`~selfattn.efficient._tiled.check_tiled`'s checks."""
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(
            f"triton_flash_attention supports float16, bfloat16 and float32, got {q.dtype}"
        )
    d_k, d_v = q.shape[-1], v.shape[-1]
    if max(d_k, d_v) > 256:
        raise ValueError(
            f"triton_flash_attention supports head dims up to 256, got d_k={d_k}, d_v={d_v}"
        )
    if q.device.type == "cpu" and not _interpreting():
        raise RuntimeError(
            "triton_flash_attention needs CUDA tensors; on the CPU set TRITON_INTERPRET=1 before "
            "the first call to run it in Triton's (slow) interpreter"
        )
    _require_triton("triton_flash_attention")
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        if b is not None:
            require_power_of_two(b, name, 16)


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

    kernels = _kernels(torch.device("cuda"))  # compiled, not interpreted
    fwd, bwd = kernels.flash_fwd, kernels.flash_bwd
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
