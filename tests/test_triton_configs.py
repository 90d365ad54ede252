"""Launch settings of the Triton kernels, checked by arithmetic (no GPU, no kernel run).

Shared memory of every candidate configuration against the budgets of sm75 (T4), sm80
(A100) and sm90 (H100); the grid for B*H = 70000; int64 offsets for n*d > 2^31; the GPU
dtype helper.
"""

import contextlib
import inspect
import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from selfattn.efficient import triton_flash, triton_kernels
from selfattn.efficient.triton_configs import (
    _CANDIDATES,
    MAX_GRID_AXIS1,
    SCRATCH_HEADROOM,
    SHARED_MEMORY_BUDGET,
    LaunchConfig,
    choose_config,
    config_candidates,
    launch_grid,
    shared_memory_bytes,
)
from selfattn.runtime import preferred_dtype

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
HEAD_DIMS = (16, 32, 40, 64, 96, 128, 200, 256)
KERNELS = ("forward", "backward")
# The one key whose smallest tiles need more than sm75's 64 KiB (by the estimate): fp32
# backward with both head dims > 128. Everything else runs on a T4.
NOT_ON_SM75 = {("backward", 256, torch.float32)}


def _not_on_sm75(kernel, d_k, d_v, dtype):
    return (kernel, 256, dtype) in NOT_ON_SM75 and min(d_k, d_v) > 128


def _bucket(d):
    return 64 if d <= 64 else 128 if d <= 128 else 256


def test_estimate_by_hand():
    # Triton tutorial's forward tiles at d = 64 in fp16: q 128x64, 3 stages of k, v 64x64
    # each, p 128x64.
    cfg = LaunchConfig(128, 64, 4, 3)
    assert shared_memory_bytes(cfg, "forward", 64, 64, torch.float16) == 2 * (
        128 * 64 + 3 * 64 * 128 + 128 * 64
    )
    # head dims are padded to a power of two, as the kernels do: 40 -> 64
    assert shared_memory_bytes(cfg, "forward", 40, 40, torch.float16) == 81920
    assert shared_memory_bytes(cfg, "forward", 64, 64, torch.float32) == 163840
    # what Triton 3.9 allocated compiling for sm75 (compile_for_gpu): 64 KiB, all of a T4's
    t4_tutorial = LaunchConfig(128, 64, 4, 2)
    assert shared_memory_bytes(t4_tutorial, "forward", 64, 64, torch.float16) == 65536
    # backward: the dK/dV kernel (32 resident key rows + 3 x 64 streamed query rows) is the
    # larger of the two kernels here
    back = LaunchConfig(64, 32, 4, 3)
    assert shared_memory_bytes(back, "backward", 64, 64, torch.float16) == 2 * 128 * (32 + 192)


@pytest.mark.parametrize("cc", [75, 80, 90])
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_choice_fits_the_budget(cc, kernel):
    budget = SHARED_MEMORY_BUDGET[cc]
    for dtype, d_k, d_v, causal in itertools.product(DTYPES, HEAD_DIMS, HEAD_DIMS, (False, True)):
        key = (kernel, _bucket(max(d_k, d_v)), dtype)
        if cc == 75 and _not_on_sm75(kernel, d_k, d_v, dtype):
            with pytest.raises(ValueError, match="shared memory"):
                choose_config(kernel, d_k, d_v, dtype, causal, budget)
            continue
        cfg = choose_config(kernel, d_k, d_v, dtype, causal, budget)
        used = shared_memory_bytes(cfg, kernel, d_k, d_v, dtype)
        assert used + SCRATCH_HEADROOM <= budget, (key, cfg, used)
        assert cfg in config_candidates(kernel, max(d_k, d_v), dtype, causal)


def test_every_key_has_a_config_for_sm75_and_h100_gets_the_fastest():
    for (kernel, bucket, elt), candidates in _CANDIDATES.items():
        dtype = torch.float32 if elt == 4 else torch.float16
        for c in candidates:
            assert c.block_q >= 16 and c.block_k >= 16 and c.num_stages >= 1
            assert not c.block_q & (c.block_q - 1) and not c.block_k & (c.block_k - 1)
        sm75 = [
            shared_memory_bytes(c, kernel, bucket, bucket, dtype) + SCRATCH_HEADROOM
            <= SHARED_MEMORY_BUDGET[75]
            for c in candidates
        ]
        assert any(sm75) != ((kernel, bucket, dtype) in NOT_ON_SM75), (kernel, bucket, dtype)
        h100 = choose_config(kernel, bucket, bucket, dtype, False, SHARED_MEMORY_BUDGET[90])
        assert h100 == candidates[0]


def test_choose_config_bad_input():
    with pytest.raises(ValueError, match="d_head"):
        choose_config("forward", 300, 64, torch.float16, False, 65536)
    with pytest.raises(TypeError, match="float64"):
        choose_config("forward", 64, 64, torch.float64, False, 65536)
    with pytest.raises(ValueError, match="'sideways'"):
        choose_config("sideways", 64, 64, torch.float16, False, 65536)


def test_gpu_path_picks_configs_for_the_device(monkeypatch):
    # The launch settings a CUDA call would use, with the device's budget faked as a T4's.
    monkeypatch.setattr(triton_flash, "device_shared_memory", lambda dev: 65536)
    dev = torch.device("cuda", 0)
    fwd, bwd = triton_flash._launch_configs(dev, 128, 128, torch.float16, True, None, None)
    assert shared_memory_bytes(fwd, "forward", 128, 128, torch.float16) <= 65536 - 4096
    assert shared_memory_bytes(bwd, "backward", 128, 128, torch.float16) <= 65536 - 4096
    fwd, bwd = triton_flash._launch_configs(dev, 256, 256, torch.float32, False, None, None)
    assert fwd is not None and bwd is None  # forward runs; backward will raise, saying why
    fwd, bwd = triton_flash._launch_configs(dev, 64, 64, torch.float16, False, 32, None)
    assert fwd.block_q == bwd.block_q == 32  # the caller's block sizes win


def test_grid_puts_batch_heads_on_axis_0():
    # B*H = 70000 is over the 65535 limit of axes 1 and 2: one axis, up to 2^31 - 1.
    assert launch_grid(70000, 4096, 128) == (70000 * 32,)
    assert 70000 > MAX_GRID_AXIS1 and launch_grid(70000, 1, 16) == (70000,)
    assert launch_grid(1, 1, 16) == (1,)
    assert launch_grid(2, 17, 16) == (4,)
    with pytest.raises(ValueError, match="axis-0 limit"):
        launch_grid(70000, 2**20, 16)  # 70000 x 65536 programs
    # program p -> (head p // blocks, block p % blocks), the kernels' arithmetic, covers each
    # (head, block) once with the block varying fastest
    blocks = 3
    pairs = [(p // blocks, p % blocks) for p in range(launch_grid(4, 40, 16)[0])]
    assert pairs == [(h, b) for h in range(4) for b in range(blocks)]


def test_the_kernel_launch_uses_that_grid(monkeypatch):
    # B*H = 70000 (over the 65535 limit of axes 1 and 2) with fake kernels: record each launch.
    launches = []

    class Fake:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                # the backward kernel runs twice, its DKDV constexpr picking the pass
                name = {True: "dkdv", False: "dq"}.get(kwargs.get("DKDV"), self.name)
                launches.append((name, grid))
                for t in args:  # write something so the outputs are defined
                    if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.dim() == 2:
                        t.zero_()

            return launch

    fakes = SimpleNamespace(
        flash_fwd=Fake("fwd"), flash_bwd_delta=Fake("delta"), flash_bwd=Fake("bwd")
    )
    monkeypatch.setattr(triton_flash, "_kernels", lambda device: fakes)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    q = torch.randn(7000, 10, 1, 16, requires_grad=True)  # B = 7000, H = 10
    k = torch.randn(7000, 10, 33, 16, requires_grad=True)
    out = triton_flash.triton_flash_attention(q, k, k)
    out.sum().backward()
    assert launches == [
        ("fwd", (70000,)),
        ("delta", (70000,)),
        ("dkdv", (70000 * 3,)),  # 33 keys in blocks of 16
        ("dq", (70000,)),
    ]


@pytest.mark.parametrize(
    "bh,n,d,block",
    [
        (70000, 4096, 128, 128),  # B*H = 70000: the batch offset passes 2^31
        (1, 2**23 + 5, 256, 128),  # one head with n*d > 2^31
    ],
)
def test_offsets_are_int64_beyond_2_to_the_31(bh, n, d, block):
    stride_n, stride_b = d, n * d
    assert bh * n * d > 2**31
    (programs,) = launch_grid(bh, n, block)  # fits the grid
    blocks = -(-n // block)
    exact = (bh - 1) * stride_b + (blocks - 1) * block * stride_n + (block - 1) * stride_n + d - 1

    # The kernel's arithmetic for the last program: program ids are int32; head and row block
    # are cast to int64 before the multiply by a stride; offsets inside a tile stay int32.
    def kernel_offset(int_base):
        pid, nb = np.int32(programs - 1), np.int32(blocks)
        head = (pid // nb).astype(int_base)
        row0 = ((pid % nb) * np.int32(block)).astype(int_base)
        local = np.int32(block - 1) * np.int32(stride_n) + np.int32(d - 1)
        # a stride over 2^31 reaches the kernel as an int64 argument (Triton's specialisation)
        sb = np.int64(stride_b) if stride_b >= 2**31 else np.int32(stride_b)
        return int(head * sb + row0 * np.int32(stride_n) + local)

    assert kernel_offset(np.int64) == exact
    with np.errstate(over="ignore"):
        assert kernel_offset(np.int32) != exact  # what int32 offsets would compute
    # ... and the kernels do cast: every base offset is built from an int64 value. The
    # kernels (forward, D, the backward's two passes) take (head, first row) from one
    # helper, which casts the head, and build the pointers to a block of rows with another,
    # which casts the first row.
    src = inspect.getsource(triton_kernels)
    assert src.count("bh = (tl.program_id(0) // blocks).to(tl.int64)") == 1
    assert src.count("= _program_rows(") == 4
    assert "return X + bh * stride_b + row0.to(tl.int64) * stride_n + local" in src
    assert src.count("_row_ptrs(") == 12  # its definition and the eleven blocks of rows
    assert "lo.to(tl.int64) * stride_qn" in src  # the causal dK/dV loop's first query
    assert "offs_m[:, None] * stride_qn" not in src.split("def flash_bwd(")[0]


def test_preferred_dtype(monkeypatch):
    assert preferred_dtype("cpu") == torch.float32
    asked = []

    def fake_bf16(including_emulation=True):
        asked.append(including_emulation)
        return native

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", fake_bf16)
    monkeypatch.setattr(torch.cuda, "device", lambda dev: contextlib.nullcontext())
    native = True  # A100, H100
    assert preferred_dtype(torch.device("cuda", 0)) == torch.bfloat16
    native = False  # T4: bf16 only emulated
    assert preferred_dtype("cuda") == torch.float16
    assert asked == [False, False]  # emulation does not count
