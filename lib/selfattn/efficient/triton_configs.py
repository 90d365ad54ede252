"""Launch settings for the Triton FlashAttention kernels that fit the device.

A Triton program keeps its tiles in the GPU's shared memory (SRAM): the tile it holds for the
whole loop (the queries in the forward pass) plus ``num_stages`` copies of the tiles it streams
(keys and values), so the next tiles load while the current ones are used. Whether a launch
fits is arithmetic on those sizes, so it is checked here, on any machine, against each GPU
generation's limit per block: 64 KiB on sm75 (T4, Colab's free GPU), 163 KiB on sm80 (A100),
99 KiB on sm86/sm89 (consumer Ampere and Ada) and 227 KiB on sm90 (H100).

Each key (kernel, head dim, dtype, causal) has a short list of candidate configurations in order
of preference; :func:`choose_config` takes the first whose estimated shared memory fits the
device, with headroom for the kernel's own scratch (row reductions, layout conversions).
:func:`shared_memory_bytes` is the estimate; ``tools/gpu_check.py`` compares it with what
Triton actually allocated on a real GPU.

The grid is one axis of ``batch x heads x row blocks`` programs (axis 0 takes up to 2^31 - 1;
axes 1 and 2 only 65535), see :func:`launch_grid`; the kernels compute base offsets in int64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from .._checks import (
    require_bool,
    require_int,
)

__all__ = [
    "LaunchConfig",
    "SHARED_MEMORY_BUDGET",
    "SCRATCH_HEADROOM",
    "MAX_GRID_AXIS0",
    "MAX_GRID_AXIS1",
    "config_candidates",
    "shared_memory_bytes",
    "choose_config",
    "launch_grid",
    "device_shared_memory",
]

Kernel = Literal["forward", "backward"]

#: Shared memory one block may use (opt-in maximum), bytes, by compute capability (major * 10
#: + minor). CUDA C Programming Guide, "Compute capabilities", table of technical specifications.
SHARED_MEMORY_BUDGET: dict[int, int] = {
    75: 64 * 1024,
    80: 163 * 1024,
    86: 99 * 1024,
    89: 99 * 1024,
    90: 227 * 1024,
}

#: Bytes kept free for what the estimate does not count (reductions, layout conversions).
SCRATCH_HEADROOM = 4 * 1024

#: CUDA's grid limit on axis 0 (2^31 - 1 blocks; the kernels' one axis).
MAX_GRID_AXIS0 = 2**31 - 1
#: CUDA's grid limit on axes 1 and 2 (65535 blocks, too few for batch x heads).
MAX_GRID_AXIS1 = 65535


@dataclass(frozen=True)
class LaunchConfig:
    """Tile sizes and launch options of one kernel launch.

    ``block_q`` query rows and ``block_k`` key rows per tile (powers of two >= 16),
    ``num_warps`` warps per program, ``num_stages`` software-pipelining stages.
    """

    block_q: int
    block_k: int
    num_warps: int
    num_stages: int


def _config(block_q: int, block_k: int, num_warps: int, num_stages: int) -> LaunchConfig:
    return LaunchConfig(block_q, block_k, num_warps, num_stages)


# Preference order: the fastest first (Triton's fused-attention tutorial's tiles for A100/H100),
# then smaller tiles or fewer stages until one fits sm75. Keyed on (kernel, head-dim bucket,
# element bytes of the staged tiles). Causal uses the same lists for now: the key carries it so
# that a measurement on a GPU (make gpu-check) can specialise it.
_CANDIDATES: dict[tuple[str, int, int], tuple[LaunchConfig, ...]] = {
    # forward, 16-bit inputs
    ("forward", 64, 2): (
        _config(128, 64, 4, 3),
        _config(128, 64, 4, 2),
        _config(64, 64, 4, 2),
        _config(64, 32, 4, 2),
    ),
    ("forward", 128, 2): (_config(128, 64, 8, 3), _config(128, 32, 8, 3), _config(64, 32, 4, 2)),
    ("forward", 256, 2): (_config(128, 64, 8, 2), _config(64, 32, 4, 2), _config(32, 16, 4, 2)),
    # forward, fp32 inputs
    ("forward", 64, 4): (_config(128, 64, 4, 3), _config(64, 64, 4, 2), _config(64, 32, 4, 2)),
    ("forward", 128, 4): (_config(64, 32, 4, 2), _config(32, 32, 4, 2), _config(32, 16, 4, 2)),
    ("forward", 256, 4): (
        _config(64, 32, 4, 2),
        _config(32, 16, 4, 2),
        _config(16, 16, 4, 2),
        _config(16, 16, 4, 1),
    ),
    # backward (one config for the dK/dV and the dQ kernel), 16-bit inputs
    ("backward", 64, 2): (_config(64, 64, 4, 3), _config(64, 64, 4, 2), _config(32, 32, 4, 2)),
    ("backward", 128, 2): (_config(64, 64, 8, 3), _config(64, 64, 8, 2), _config(32, 32, 4, 2)),
    ("backward", 256, 2): (_config(64, 64, 8, 2), _config(32, 32, 4, 2), _config(16, 16, 4, 2)),
    # backward, fp32 inputs
    ("backward", 64, 4): (_config(64, 64, 4, 2), _config(32, 32, 4, 2)),
    ("backward", 128, 4): (_config(64, 64, 8, 2), _config(32, 32, 4, 2), _config(16, 16, 4, 2)),
    ("backward", 256, 4): (_config(32, 32, 4, 2), _config(16, 16, 4, 2), _config(16, 16, 4, 1)),
}

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _bucket(d_head: int) -> int:
    require_int(d_head, "d_head", 1)
    if d_head > 256:
        raise ValueError(f"d_head must be an int in 1..256, got {d_head!r}")
    return 64 if d_head <= 64 else 128 if d_head <= 128 else 256


def _element_bytes(dtype: torch.dtype) -> int:
    if dtype not in _DTYPES:
        raise TypeError(f"dtype must be float16, bfloat16 or float32, got {dtype}")
    return 4 if dtype == torch.float32 else 2


def _kernel_name(kernel: str) -> str:
    if kernel not in ("forward", "backward"):
        raise ValueError(f"kernel must be 'forward' or 'backward', got {kernel!r}")
    return kernel


def config_candidates(
    kernel: Kernel, d_head: int, dtype: torch.dtype, causal: bool
) -> tuple[LaunchConfig, ...]:
    """The candidate configurations for one key, fastest first.

    ``d_head`` is the larger of d_k and d_v (1..256).
    """
    require_bool(causal, "causal")  # same candidates for now; kept in the key (module docstring)
    return _CANDIDATES[_kernel_name(kernel), _bucket(d_head), _element_bytes(dtype)]


def _padded(d: int) -> int:
    return max(16, 1 << (d - 1).bit_length())


def shared_memory_bytes(
    config: LaunchConfig, kernel: Kernel, d_k: int, d_v: int, dtype: torch.dtype
) -> int:
    """Estimated shared memory of one program, in bytes: resident tile + staged tiles.

    Forward: the query tile ``block_q x d_k`` stays, ``num_stages`` key and value tiles
    ``block_k x (d_k + d_v)`` stream, and the probabilities ``block_q x block_k`` pass through
    shared memory on their way into the second dot (on sm75: compiled for sm75 with Triton 3.9,
    the forward kernel at 128 x 64 tiles, d = 64, fp16, two stages, uses exactly this sum,
    64 KiB; on sm80 and sm90 Triton needs less). Backward: the dK/dV kernel keeps a key/value tile
    ``block_k x (d_k + d_v)`` and streams query/dO tiles ``block_q x (d_k + d_v)``; the dQ
    kernel the other way round; the larger of the two counts. Head dims are padded to a power
    of two (>= 16), as the kernels do; each element takes the input dtype's bytes.
    """
    kernel = _kernel_name(kernel)
    elt = _element_bytes(dtype)
    dk, dv = _padded(d_k), _padded(d_v)
    bm, bn, stages = config.block_q, config.block_k, config.num_stages
    if kernel == "forward":
        return elt * (bm * dk + stages * bn * (dk + dv) + bm * bn)
    width = dk + dv
    return elt * width * max(bn + stages * bm, bm + stages * bn)


def device_shared_memory(device: torch.device | str | None = None) -> int:
    """The shared-memory budget per block of a CUDA device, in bytes.

    Read from the device properties when torch reports it, else from
    :data:`SHARED_MEMORY_BUDGET` by compute capability (the nearest lower one listed).
    """
    props = torch.cuda.get_device_properties(device)
    optin = getattr(props, "shared_memory_per_block_optin", 0)
    if optin:
        return int(optin)
    cc = props.major * 10 + props.minor
    known = [c for c in SHARED_MEMORY_BUDGET if c <= cc]
    return SHARED_MEMORY_BUDGET[max(known)] if known else SHARED_MEMORY_BUDGET[75]


def choose_config(
    kernel: Kernel,
    d_k: int,
    d_v: int,
    dtype: torch.dtype,
    causal: bool,
    budget: int,
) -> LaunchConfig:
    """The first candidate whose estimated shared memory fits ``budget - SCRATCH_HEADROOM``.

    Args:
        kernel: ``"forward"`` or ``"backward"``.
        d_k, d_v: head dims of queries/keys and of values (1..256).
        dtype: the inputs' dtype (float16, bfloat16, float32).
        causal: whether the launch is causal (part of the key).
        budget: shared memory per block in bytes (:func:`device_shared_memory`, or an entry of
            :data:`SHARED_MEMORY_BUDGET`).

    Raises:
        ValueError: no candidate fits (e.g. the fp32 backward at head dim 256 on sm75).
    """
    causal = require_bool(causal, "causal")
    candidates = config_candidates(kernel, max(d_k, d_v), dtype, causal)
    for config in candidates:
        if shared_memory_bytes(config, kernel, d_k, d_v, dtype) <= budget - SCRATCH_HEADROOM:
            return config
    smallest = shared_memory_bytes(candidates[-1], kernel, d_k, d_v, dtype)
    raise ValueError(
        f"no {kernel} launch configuration for d_k={d_k}, d_v={d_v}, {dtype} fits this device's "
        f"shared memory: budget {budget} bytes, the smallest tiles need {smallest} + "
        f"{SCRATCH_HEADROOM} bytes; use float16 or a smaller head dim"
    )


def launch_grid(batch_heads: int, rows: int, block: int) -> tuple[int]:
    """The one-axis grid ``(batch_heads * ceil(rows / block),)`` of the Triton kernels.

    Program ``p`` handles row block ``p % blocks`` of head ``p // blocks``: neighbouring
    programs share a head, so its keys and values stay in L2 (the order of Triton's
    fused-attention tutorial, whose grid is ``(blocks, batch x heads)``), and batch x heads
    sits on axis 0, which takes up to 2^31 - 1 programs, not on axis 1 or 2 (65535 at most).

    Raises:
        ValueError: more than 2^31 - 1 programs.
    """
    blocks = -(-rows // block)
    if batch_heads * blocks > MAX_GRID_AXIS0:
        raise ValueError(
            f"batch x heads = {batch_heads} times {blocks} blocks of {block} rows exceeds the "
            f"grid's axis-0 limit {MAX_GRID_AXIS0}; use a larger block or a smaller batch"
        )
    return (batch_heads * blocks,)
