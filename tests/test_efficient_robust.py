"""Bad and edge-case arguments to the efficient kernels: a clear ValueError/TypeError, or a result.

Never a silent NaN, an obscure torch error, or a huge allocation (issue: robust under bad input).
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from selfattn.efficient import (
    flash_attention,
    flash_attention_reference,
    flash_decoding,
    linear_attention,
    sliding_window_attention,
    sliding_window_attention_reference,
)

SIZES = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([10**9, 2.5, 1.0, True, None, "2", float("nan")]),
)
ALIGNMENTS = st.sampled_from(["top_left", "bottom_right", "lower_right", None, 3])
SCALES = st.sampled_from([None, 0.5, 0, -1.0, "2", True, float("inf")])

KERNELS = {
    "flash_attention": lambda q, k, v, size, **kw: flash_attention(
        q, k, v, block_q=size, block_k=size, **kw
    ),
    "flash_attention_reference": lambda q, k, v, size, **kw: flash_attention_reference(
        q, k, v, block_q=size, block_k=size, **kw
    ),
    "sliding_window_attention": lambda q, k, v, size, **kw: sliding_window_attention(
        q, k, v, size, **kw
    ),
    "sliding_window_attention_reference": lambda q, k, v, size, **kw: (
        sliding_window_attention_reference(q, k, v, 2, block_q=size, **kw)
    ),
    "linear_attention": lambda q, k, v, size, scale=None, **kw: linear_attention(
        q, k, v, chunk_size=size, **kw
    ),
    "flash_decoding": lambda q, k, v, size, alignment=None, **kw: flash_decoding(
        q, k, v, chunk_size=size, **kw
    ),
}


def names_an_argument(message: str) -> bool:
    words = ("block", "window", "chunk_size", "alignment", "scale", "q", "k", "v", "device")
    return any(w in message for w in words)


@given(
    kernel=st.sampled_from(sorted(KERNELS)),
    n=st.integers(0, 6),
    m=st.integers(0, 6),
    d=st.integers(0, 4),
    size=SIZES,
    alignment=ALIGNMENTS,
    scale=SCALES,
    causal=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.int64]),
)
@settings(max_examples=150)
def test_bad_arguments_fail_clearly_or_work(
    kernel, n, m, d, size, alignment, scale, causal, dtype
):
    q = torch.randn(2, n, d).to(dtype)
    k, v = torch.randn(2, m, d).to(dtype), torch.randn(2, m, 3).to(dtype)
    kwargs = dict(causal=causal, scale=scale)
    if alignment is not None:
        kwargs["alignment"] = alignment
    try:
        out = KERNELS[kernel](q, k, v, size, **kwargs)
    except (ValueError, TypeError) as err:
        assert names_an_argument(str(err)), str(err)
        return
    assert out.shape == (2, n, 3) and out.dtype == dtype
    if scale is None or (isinstance(scale, float) and math.isfinite(scale)):
        assert not torch.isnan(out).any()


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_non_tensors_and_devices(kernel):
    q = torch.randn(4, 8)
    with pytest.raises(TypeError, match="q"):
        KERNELS[kernel](None, q, q, 2)
    with pytest.raises(TypeError, match="k"):
        KERNELS[kernel](q, [[1.0] * 8] * 4, q, 2)
    with pytest.raises(ValueError, match="device"):
        KERNELS[kernel](q, q, q.to("meta"), 2)
