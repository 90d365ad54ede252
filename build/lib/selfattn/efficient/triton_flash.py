"""FlashAttention's forward pass as a Triton kernel (chapter 7).

The same algorithm as :func:`~selfattn.efficient.flash.flash_attention`: one program per
(block of queries, batch x head); it keeps its queries, the running max ``m``, the
running sum ``l`` and the unnormalised output in registers / SRAM, streams the keys
and values through in blocks, and writes only the final output. fp16, bf16 and
fp32 inputs; the tiles accumulate in fp32.

Triton is imported lazily, on the first call, so ``import selfattn`` works on a
machine without Triton or a GPU. With the environment variable
``TRITON_INTERPRET=1`` set before the first call, the kernel runs in Triton's
interpreter on CPU tensors (slowly): that is how the tests check it against
torch SDPA without a GPU.
"""

from __future__ import annotations

import functools
import math
import os

import torch

from .._checks import check_qkv

__all__ = ["triton_flash_attention", "triton_available"]


def triton_available() -> bool:
    """True when Triton can be imported (it still needs a GPU or ``TRITON_INTERPRET=1`` to run)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.cache
def _kernel():
    """Define the kernel on first use (importing triton here, not at module import)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _flash_fwd(
        Q,
        K,
        V,
        O,
        qk_scale,  # softmax scale * log2(e): the kernel works with exp2
        n_q,
        n_k,
        d_k,
        d_v,
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
        start_m = tl.program_id(0)
        bh = tl.program_id(1)
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_dk = tl.arange(0, BLOCK_DK)
        offs_dv = tl.arange(0, BLOCK_DV)
        # This program's queries stay on chip for the whole loop (masked loads: any n, any d).
        q = tl.load(
            Q + bh * stride_qb + offs_m[:, None] * stride_qn + offs_dk[None, :],
            mask=(offs_m[:, None] < n_q) & (offs_dk[None, :] < d_k),
            other=0.0,
        )
        if DOT_IN_FP32:
            q = q.to(tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
        # Causal: key blocks past this block's last query are fully masked, so the loop stops early.
        hi = n_k
        if CAUSAL:
            hi = tl.minimum(n_k, (start_m + 1) * BLOCK_M)
        for start_n in range(0, hi, BLOCK_N):
            cols = start_n + offs_n
            kt = tl.load(
                K + bh * stride_kb + cols[None, :] * stride_kn + offs_dk[:, None],
                mask=(cols[None, :] < n_k) & (offs_dk[:, None] < d_k),
                other=0.0,
            )  # (BLOCK_DK, BLOCK_N): k transposed
            if DOT_IN_FP32:
                kt = kt.to(tl.float32)
            s = tl.dot(q, kt, input_precision=PRECISION) * qk_scale
            valid = cols[None, :] < n_k
            if CAUSAL:
                valid = valid & (cols[None, :] <= offs_m[:, None])
            s = tl.where(valid, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))  # finite: key 0 is visible to every row
            alpha = tl.exp2(m_i - m_new)  # rescale factor exp(m_old - m_new), in base 2
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(
                V + bh * stride_vb + cols[:, None] * stride_vn + offs_dv[None, :],
                mask=(cols[:, None] < n_k) & (offs_dv[None, :] < d_v),
                other=0.0,
            )
            if DOT_IN_FP32:
                v = v.to(tl.float32)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            m_i = m_new
        acc = acc / l_i[:, None]
        tl.store(
            O + bh * stride_ob + offs_m[:, None] * stride_on + offs_dv[None, :],
            acc.to(O.dtype.element_ty),
            mask=(offs_m[:, None] < n_q) & (offs_dv[None, :] < d_v),
        )

    return _flash_fwd


def _pow2(x: int, at_least: int = 16) -> int:
    return max(at_least, 1 << (x - 1).bit_length())


def triton_flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    r"""softmax(q k^T * scale) v by the Triton FlashAttention kernel (forward only).

    Args:
        q: queries ``(..., n, d_k)``; k: keys ``(..., m, d_k)``; v: values ``(..., m, d_v)``,
            all float16, bfloat16 or float32, on a CUDA device (or on the CPU with
            ``TRITON_INTERPRET=1``). Batch dimensions broadcast; d_k, d_v <= 256.
        causal: query ``i`` sees keys ``j <= i`` (top-left, as SDPA's ``is_causal``).
        scale: defaults to ``1 / sqrt(d_k)``.
        block_m, block_n: queries per program and keys per inner step (powers of two >= 16;
            defaults 128 and 64 on a GPU, 16 in the interpreter).

    Returns:
        ``(..., n, d_v)`` in the input dtype. fp32 inputs use exact fp32 dots (not TF32).

    Raises:
        ImportError: Triton is not installed.
        RuntimeError: the tensors are on the CPU and ``TRITON_INTERPRET=1`` is not set.
        TypeError: a dtype other than float16, bfloat16, float32, or bad tensors.
        ValueError: mismatched shapes or devices, head dims over 256, or bad block sizes.
    """
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
    if q.device.type == "cpu" and not _interpreting():
        raise RuntimeError(
            "triton_flash_attention needs CUDA tensors; on the CPU set TRITON_INTERPRET=1 before the "
            "first call to run it in Triton's (slow) interpreter"
        )
    if not triton_available():
        raise ImportError("triton_flash_attention needs Triton: pip install triton")
    # GPU defaults follow Triton's fused-attention tutorial for d <= 64 (128 x 64 tiles, 4 warps,
    # 3 pipeline stages); the interpreter runs fastest with small tiles.
    on_gpu = q.device.type != "cpu"
    block_m = (128 if on_gpu else 16) if block_m is None else block_m
    block_n = (64 if on_gpu else 16) if block_n is None else block_n
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if isinstance(b, bool) or not isinstance(b, int) or b < 16 or b & (b - 1):
            raise ValueError(f"{name} must be a power of two >= 16, got {b!r}")
    if scale is None:
        scale = 1.0 / math.sqrt(d_k)

    qf = q.expand(*batch, n, d_k).reshape(-1, n, d_k).contiguous()
    kf = k.expand(*batch, m, d_k).reshape(-1, m, d_k).contiguous()
    vf = v.expand(*batch, m, d_v).reshape(-1, m, d_v).contiguous()
    bh = qf.shape[0]
    out = torch.empty(bh, n, d_v, dtype=q.dtype, device=q.device)
    grid = (-(-n // block_m), bh)
    _kernel()[grid](
        qf,
        kf,
        vf,
        out,
        scale * 1.4426950408889634,  # log2(e)
        n,
        m,
        d_k,
        d_v,
        qf.stride(0),
        qf.stride(1),
        kf.stride(0),
        kf.stride(1),
        vf.stride(0),
        vf.stride(1),
        out.stride(0),
        out.stride(1),
        CAUSAL=bool(causal),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_DK=_pow2(d_k),
        BLOCK_DV=_pow2(d_v),
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        # Triton's interpreter computes bf16 x bf16 dots wrongly (numpy has no bfloat16), so there
        # the tiles are upcast to fp32 before each dot; on a GPU the dots run in bf16 tensor cores.
        DOT_IN_FP32=bool(q.device.type == "cpu" and q.dtype == torch.bfloat16),
        num_warps=4 if max(d_k, d_v) <= 64 else 8,
        num_stages=3,
    )
    return out.reshape(*batch, n, d_v)
