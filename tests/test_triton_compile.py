"""The Triton kernels compiled for a T4 (sm75) here, without a GPU, by Triton's own compiler.

``compile_for_gpu`` builds the kernels ahead of time for a GPU generation with the ``ptxas``
that ships with Triton: the compiled (not interpreted) code path is checked on any machine,
and the shared memory Triton really allocates is compared with the estimate the launch
configurations are chosen by (its one calibration point: 128 x 64 tiles on sm75 take all
64 KiB of a T4). Compiled kernels are cached by Triton, so reruns are quick.
"""

import json
import os
import subprocess
import sys

import pytest
import torch
from selfattn.efficient import triton_available
from selfattn.efficient.triton_configs import (
    SCRATCH_HEADROOM,
    SHARED_MEMORY_BUDGET,
    choose_config,
    shared_memory_bytes,
)
from selfattn.efficient.triton_flash import compile_for_gpu


def _can_compile() -> bool:
    if not triton_available():
        return False
    try:
        from triton.backends.compiler import GPUTarget  # noqa: F401
        from triton.backends.nvidia.compiler import get_ptxas  # noqa: F401
    except ImportError:
        return False
    return True


needs_compiler = pytest.mark.skipif(not _can_compile(), reason="Triton's CUDA backend is absent")


@needs_compiler
@pytest.mark.parametrize("kernel", ["forward", "backward"])
def test_t4_kernels_compile_within_the_estimate(kernel):
    budget = SHARED_MEMORY_BUDGET[75]
    cfg = choose_config(kernel, 64, 64, torch.float16, True, budget)
    # In a fresh process: once Triton has built compiled (not interpreted) kernels in a
    # process, the interpreter's kernels can no longer run there, and other tests use them.
    code = (
        "import json, torch; from selfattn.efficient.triton_flash import compile_for_gpu; "
        f"print(json.dumps(compile_for_gpu({kernel!r}, 75, torch.float16, 64, 64, causal=True)))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
    )
    assert run.returncode == 0, run.stderr[-2000:]
    shared = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(shared) == (1 if kernel == "forward" else 2)
    estimate = shared_memory_bytes(cfg, kernel, 64, 64, torch.float16)
    for name, used in shared.items():
        assert 0 < used <= estimate <= budget - SCRATCH_HEADROOM, (name, used, estimate)


def test_compile_for_gpu_bad_input():
    with pytest.raises(ValueError, match="capability"):
        compile_for_gpu("forward", 61, torch.float16, 64, 64)
    with pytest.raises(ValueError, match="'sideways'"):
        compile_for_gpu("sideways", 75, torch.float16, 64, 64)
