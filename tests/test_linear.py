"""Linear attention: parallel == chunked == recurrent == the written-out kernel formula."""

import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from selfattn.efficient import (
    LinearAttentionState,
    elu_feature_map,
    linear_attention,
    linear_attention_recurrent,
    linear_attention_step,
)

from tools import references


def oracle(q, k, v, causal, phi=elu_feature_map, eps=1e-6):
    """The definition in matrix form (tools/references.py), causal = the top-left mask."""
    mask = references.causal_mask(q.shape[-2], k.shape[-2]) if causal else None
    return references.linear_attention(q, k, v, mask, phi=phi, eps=eps)


@given(
    n=st.integers(1, 40),
    d=st.sampled_from([1, 4, 8]),
    dv=st.sampled_from([1, 3, 8]),
    chunk=st.integers(1, 50),
    causal=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_parallel_matches_the_formula(n, d, dv, chunk, causal, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 2, n, d, generator=g), torch.randn(2, 2, n, d, generator=g)
    v = torch.randn(2, 2, n, dv, generator=g)
    out = linear_attention(q, k, v, causal=causal, chunk_size=chunk)
    torch.testing.assert_close(out, oracle(q, k, v, causal), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n", [1, 2, 17, 64])
def test_recurrent_form_equals_parallel_form(n):
    q, k, v = (torch.randn(3, n, 8, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(
        linear_attention_recurrent(q, k, v), linear_attention(q, k, v, causal=True, chunk_size=5)
    )


def test_cross_attention_lengths_and_custom_feature_map():
    q, k, v = torch.randn(5, 4), torch.randn(9, 4), torch.randn(9, 2)
    phi = torch.nn.functional.softplus
    torch.testing.assert_close(
        linear_attention(q, k, v, feature_map=phi), oracle(q, k, v, False, phi)
    )


def test_step_memory_is_constant_and_matches():
    q, k, v = (torch.randn(2, 30, 8) for _ in range(3))
    state = LinearAttentionState.empty((2,), 8, 8)
    size = state.nbytes()
    outs = []
    for t in range(30):
        o, state = linear_attention_step(state, q[:, t], k[:, t], v[:, t])
        outs.append(o)
        assert state.nbytes() == size
    assert state.steps == 30
    torch.testing.assert_close(
        torch.stack(outs, 1), linear_attention(q, k, v, causal=True), atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 5e-3), (torch.bfloat16, 3e-2)])
def test_half_precision(dtype, tol):
    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))
    for causal in (False, True):
        out = linear_attention(q.to(dtype), k.to(dtype), v.to(dtype), causal=causal)
        torch.testing.assert_close(out.float(), oracle(q, k, v, causal), atol=tol, rtol=tol)


def test_feature_map_is_positive():
    x = torch.linspace(-50, 50, 101)
    assert (elu_feature_map(x) > 0).all()
    torch.testing.assert_close(
        elu_feature_map(x.double()), torch.nn.functional.elu(x.double()) + 1
    )


def test_bad_input():
    q = torch.randn(5, 4)
    with pytest.raises(ValueError, match="alignment"):
        linear_attention(q, q, q, causal=True, alignment="top-left")
    with pytest.raises(ValueError, match="chunk_size"):
        linear_attention(q, q, q, causal=True, chunk_size=0)
    with pytest.raises(TypeError, match="chunk_size must be an int"):
        linear_attention(q, q, q, causal=True, chunk_size=2.0)
    with pytest.raises(TypeError, match="feature_map"):
        linear_attention(q, q, q, feature_map="elu")
    state = LinearAttentionState.empty((), 4, 4)
    with pytest.raises(ValueError, match="state"):
        linear_attention_step(state, torch.randn(3), torch.randn(3), torch.randn(4))
    with pytest.raises(TypeError, match="q_t"):
        linear_attention_step(state, [1.0] * 4, torch.randn(4), torch.randn(4))


# --- causal alignment with n != m, half precision, robustness --------------------------------


def torch_causal_mask(n, m, alignment):
    """torch's own causal masks: SDPA's is_causal (upper left) and causal_lower_right."""
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that lower-right with n > m has empty rows
        bias = (causal_upper_left if alignment == "top_left" else causal_lower_right)(n, m)
        return bias._materialize()  # bool (n, m), True = may attend


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
@pytest.mark.parametrize("n,m", [(3, 9), (9, 9), (9, 3), (1, 5), (5, 1)])
@pytest.mark.parametrize("chunk", [1, 2, 4, 128])
def test_causal_alignment_matches_torchs_masks(n, m, alignment, chunk):
    q, k, v = torch.randn(2, n, 4), torch.randn(2, m, 4), torch.randn(2, m, 3)
    a = elu_feature_map(q) @ elu_feature_map(k).transpose(-2, -1)
    a = a * torch_causal_mask(n, m, alignment)
    want = (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)  # a row with no key: 0 / eps = 0
    got = linear_attention(q, k, v, causal=True, alignment=alignment, chunk_size=chunk)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_half_inputs_with_large_finite_scores_stay_finite():
    for dtype in (torch.float16, torch.bfloat16):
        q = torch.full((1, 6, 8), 60.0, dtype=dtype)  # phi(q).phi(k) = 61^2 * 8 > float16's max
        for causal in (False, True):
            out = linear_attention(q, q, q, causal=causal)
            assert out.dtype == dtype and torch.isfinite(out).all()
            torch.testing.assert_close(out, q)


@pytest.mark.parametrize("n,m,dv", [(0, 5, 4), (3, 0, 4), (3, 5, 0)])
def test_zero_length_dims(n, m, dv):
    q, k, v = torch.randn(2, n, 4), torch.randn(2, m, 4), torch.randn(2, m, dv)
    for causal in (False, True):
        out = linear_attention(q, k, v, causal=causal, alignment="bottom_right")
        assert out.shape == (2, n, dv) and not out.abs().sum()


def test_devices_must_agree():
    q = torch.randn(5, 4)
    with pytest.raises(ValueError, match="device"):
        linear_attention(q, q.to("meta"), q)
    with pytest.raises(ValueError, match="device"):
        linear_attention_recurrent(q, q, q.to("meta"))
    state = LinearAttentionState.empty((), 4, 4, device="meta")
    with pytest.raises(ValueError, match="device"):
        linear_attention_step(state, q[0], q[0], q[0])


# Decay and gating: the parallel (masked-matrix) form equals the recurrence.


def decay_oracle(q, k, v, gamma, normalize=True, phi=elu_feature_map, eps=1e-6):
    """The unrolled recurrence, one output at a time: weights prod_{t=j+1..i} gamma_t."""
    n = q.shape[-2]
    outs = []
    for i in range(n):
        num = torch.zeros(v.shape[-1], dtype=q.dtype)
        den = torch.zeros((), dtype=q.dtype)
        for j in range(i + 1):
            w = torch.ones(q.shape[-1], dtype=q.dtype)
            for t in range(j + 1, i + 1):
                w = w * gamma[t]
            a = (phi(q[i]) * phi(k[j]) * w).sum()
            num, den = num + a * v[j], den + a
        outs.append(num / (den + eps) if normalize else num)
    return torch.stack(outs)


@pytest.mark.parametrize("kind", ["constant", "scalar", "channel"])
@pytest.mark.parametrize("normalize", [True, False])
def test_decayed_parallel_equals_recurrent_and_oracle(kind, normalize):
    from selfattn.efficient import linear as lin

    g = torch.Generator().manual_seed(11)
    n, d, dv = 9, 4, 3
    q, k = (
        torch.randn(n, d, generator=g, dtype=torch.float64),
        torch.randn(n, d, generator=g, dtype=torch.float64),
    )
    v = torch.randn(n, dv, generator=g, dtype=torch.float64)
    if kind == "constant":
        decay, gamma = 0.8, torch.full((n, d), 0.8, dtype=torch.float64)
    elif kind == "scalar":
        decay = torch.rand(n, 1, generator=g, dtype=torch.float64) * 0.6 + 0.3
        gamma = decay.expand(n, d)
    else:
        decay = torch.rand(n, d, generator=g, dtype=torch.float64) * 0.9 + 0.05
        gamma = decay
    par = lin.decayed_linear_attention(q, k, v, decay, normalize=normalize)
    rec = linear_attention_recurrent(q, k, v, decay=decay, normalize=normalize)
    torch.testing.assert_close(par, decay_oracle(q, k, v, gamma, normalize))
    torch.testing.assert_close(rec, par)


def test_decay_one_is_plain_causal_linear_attention_and_forgets_otherwise():
    from selfattn.efficient.linear import decayed_linear_attention

    g = torch.Generator().manual_seed(12)
    q, k, v = (torch.randn(2, 3, 20, 8, generator=g, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(
        decayed_linear_attention(q, k, v, 1.0), linear_attention(q, k, v, causal=True)
    )
    # A tiny gate wipes the state: each output is (almost) its own token's value.
    out = decayed_linear_attention(q, k, v, torch.full((2, 3, 20, 1), 1e-9, dtype=torch.float64))
    torch.testing.assert_close(out, v, atol=1e-6, rtol=1e-6)


def test_decayed_step_state_and_bad_decay():
    from selfattn.efficient.linear import decayed_linear_attention

    d, dv = 4, 2
    state = LinearAttentionState.empty((), d, dv, dtype=torch.float64)
    x = torch.ones(d, dtype=torch.float64)
    _, state = linear_attention_step(state, x, x, torch.ones(dv, dtype=torch.float64), decay=0.5)
    _, state2 = linear_attention_step(state, x, x, torch.ones(dv, dtype=torch.float64), decay=0.5)
    torch.testing.assert_close(state2.z, 1.5 * elu_feature_map(x))  # 0.5 * z + phi(k)
    q = torch.randn(5, d)
    for bad, err in ((1.5, ValueError), (0.0, ValueError), ("x", TypeError), (True, TypeError)):
        with pytest.raises(err, match="decay"):
            decayed_linear_attention(q, q, q, bad)
    with pytest.raises(ValueError, match="last dimension"):
        decayed_linear_attention(q, q, q, torch.full((5, 3), 0.5))
    with pytest.raises(ValueError, match="n=5"):
        decayed_linear_attention(q, q, q, torch.full((4, 1), 0.5))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        linear_attention_recurrent(q, q, q, decay=torch.full((5, 1), 1.5))
    with pytest.raises(ValueError, match="queries"):
        decayed_linear_attention(q, torch.randn(6, d), torch.randn(6, d), 0.5)


def test_recurrent_form_passes_the_step_options_and_names_unknown_ones():
    from selfattn.efficient.linear import linear_attention_recurrent

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    phi = torch.exp  # positive features: the normaliser never vanishes
    got = linear_attention_recurrent(q, k, v, feature_map=phi, eps=1e-3)
    torch.testing.assert_close(
        got, linear_attention(q, k, v, causal=True, feature_map=phi, eps=1e-3)
    )
    unnormalised = linear_attention_recurrent(q, k, v, feature_map=phi, normalize=False)
    torch.testing.assert_close(unnormalised, (phi(q) @ phi(k).mT).tril() @ v)
    empty = linear_attention_recurrent(q[:, :0], k[:, :0], v[:, :0])
    assert empty.shape == (2, 0, 4)
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['feature'\]"):
        linear_attention_recurrent(q, k, v, feature=phi)
