"""The gated delta rule and SSD: recurrent == chunked == transformers' references; SSD's
recurrence == masked attention == chapter 8's decayed linear attention."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from selfattn.efficient import decayed_linear_attention
from selfattn.efficient.delta_rule import delta_rule, delta_rule_step, gated_delta_rule
from selfattn.efficient.ssd import semiseparable_mask, ssd_attention, ssd_recurrent


def inputs(b, h, n, dk, dv, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, n, dk, generator=g, dtype=dtype)
    k = F.normalize(torch.randn(b, h, n, dk, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(b, h, n, dv, generator=g, dtype=dtype)
    logdecay = -torch.rand(b, h, n, generator=g, dtype=dtype)
    beta = torch.rand(b, h, n, generator=g, dtype=dtype)
    return q, k, v, logdecay, beta


def written_out(q, k, v, g, beta, scale):
    """The definition, one token at a time, in float64 with explicit matrices."""
    q, k, v, g, beta = (t.double() for t in (q, k, v, g, beta))
    b, h, n, dk = q.shape
    s = torch.zeros(b, h, dk, v.shape[-1], dtype=torch.float64)
    out = []
    for t in range(n):
        s = g[:, :, t, None, None].exp() * s
        kt, vt = k[:, :, t], v[:, :, t]
        pred = torch.einsum("bhkv,bhk->bhv", s, kt)
        s = s + beta[:, :, t, None, None] * torch.einsum("bhk,bhv->bhkv", kt, vt - pred)
        out.append(torch.einsum("bhkv,bhk->bhv", s, q[:, :, t] * scale))
    return torch.stack(out, 2)


@given(
    n=st.integers(1, 40),
    dk=st.sampled_from([1, 4, 8]),
    dv=st.sampled_from([1, 3, 8]),
    chunk=st.integers(1, 24),
    seed=st.integers(0, 1000),
)
def test_recurrent_and_chunked_match_the_definition(n, dk, dv, chunk, seed):
    q, k, v, g, beta = inputs(2, 2, n, dk, dv, seed)
    want = written_out(q, k, v, g, beta, dk**-0.5).float()
    torch.testing.assert_close(gated_delta_rule(q, k, v, g, beta), want, atol=2e-5, rtol=1e-4)
    got = gated_delta_rule(q, k, v, g, beta, chunk_size=chunk)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_plain_delta_rule_is_g_zero_and_recovers_a_key():
    q, k, v, _, beta = inputs(1, 2, 9, 8, 4)
    out = delta_rule(q, k, v, beta, chunk_size=4)
    torch.testing.assert_close(out, gated_delta_rule(q, k, v, torch.zeros_like(beta), beta))
    # beta = 1 with orthonormal keys: the state holds each value exactly, reads return it.
    eye = torch.eye(8)[:5].expand(1, 1, 5, 8)
    vals = torch.randn(1, 1, 5, 3)
    ones = torch.ones(1, 1, 5)
    read = delta_rule(eye, eye, vals, ones, scale=1.0, output_final_state=True)[1]
    torch.testing.assert_close(eye[0, 0] @ read[0, 0], vals[0, 0])


def test_writing_the_same_key_twice_overwrites():
    k = torch.zeros(1, 1, 2, 4)
    k[..., 0] = 1.0
    v = torch.tensor([[[[1.0, 0.0], [0.0, 2.0]]]])
    ones = torch.ones(1, 1, 2)
    out = delta_rule(k, k, v, ones, scale=1.0)
    torch.testing.assert_close(out[0, 0, 1], v[0, 0, 1])  # the new value, not the sum


@pytest.mark.parametrize("chunk", [None, 3, 8])
def test_initial_state_chains_two_halves(chunk):
    q, k, v, g, beta = inputs(2, 3, 13, 6, 5, seed=3)
    whole, s_whole = gated_delta_rule(q, k, v, g, beta, chunk_size=chunk, output_final_state=True)
    a, s = gated_delta_rule(
        *(t[:, :, :6] for t in (q, k, v, g, beta)), chunk_size=chunk, output_final_state=True
    )
    b, s2 = gated_delta_rule(
        *(t[:, :, 6:] for t in (q, k, v, g, beta)),
        chunk_size=chunk,
        initial_state=s,
        output_final_state=True,
    )
    torch.testing.assert_close(torch.cat([a, b], 2), whole, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(s2, s_whole, atol=1e-5, rtol=1e-5)


def test_step_by_step_equals_the_sequence():
    q, k, v, g, beta = inputs(1, 2, 7, 4, 3, seed=5)
    state = torch.zeros(1, 2, 4, 3)
    outs = []
    for t in range(7):
        o, state = delta_rule_step(
            state, q[:, :, t], k[:, :, t], v[:, :, t], g[:, :, t], beta[:, :, t]
        )
        outs.append(o)
    torch.testing.assert_close(torch.stack(outs, 2), gated_delta_rule(q, k, v, g, beta))


def test_backward_recurrent_equals_chunked():
    q, k, v, g, beta = inputs(1, 2, 11, 4, 3, seed=7, dtype=torch.float64)
    grads = []
    for chunk in (None, 4):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v, g, beta)]
        out = gated_delta_rule(*leaves, chunk_size=chunk)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
        grads.append([t.grad for t in leaves])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)
    leaves = [t[:, :1, :5].clone().requires_grad_(True) for t in (q, k, v, g, beta)]
    assert torch.autograd.gradcheck(lambda *x: gated_delta_rule(*x, chunk_size=2), leaves)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_computed_in_float32(dtype):
    q, k, v, g, beta = inputs(1, 2, 10, 8, 4)
    half = [t.to(dtype) for t in (q, k, v, g, beta)]
    out = gated_delta_rule(*half, chunk_size=4)
    assert out.dtype == dtype
    want = gated_delta_rule(*(t.float() for t in half))
    torch.testing.assert_close(out.float(), want, atol=2e-2, rtol=2e-2)


def test_empty_sequence():
    q, k, v, g, beta = inputs(1, 1, 0, 4, 2)
    for chunk in (None, 4):
        assert gated_delta_rule(q, k, v, g, beta, chunk_size=chunk).shape == (1, 1, 0, 2)


def test_bad_input():
    q, k, v, g, beta = inputs(1, 2, 5, 4, 3)
    with pytest.raises(ValueError, match="g must have shape"):
        gated_delta_rule(q, k, v, g[..., :4], beta)
    with pytest.raises(ValueError, match="v must have shape"):
        gated_delta_rule(q, k, v[:, :, :4], g, beta)
    with pytest.raises(ValueError, match="chunk_size"):
        gated_delta_rule(q, k, v, g, beta, chunk_size=0)
    with pytest.raises(TypeError, match="chunk_size"):
        gated_delta_rule(q, k, v, g, beta, chunk_size=2.0)
    with pytest.raises(TypeError, match="q"):
        gated_delta_rule(q.long(), k, v, g, beta)
    with pytest.raises(ValueError, match=r"\(B, H, n, d\)"):
        gated_delta_rule(q[0], k[0], v[0], g[0], beta[0])
    with pytest.raises(ValueError, match="initial_state"):
        gated_delta_rule(q, k, v, g, beta, initial_state=torch.zeros(1, 2, 3, 3))


# -- transformers' Qwen3-Next reference functions ---------------------------------------


@pytest.mark.parametrize("n,chunk", [(1, 4), (37, 16), (64, 64), (70, 64)])
def test_agrees_with_transformers_qwen3_next(n, chunk):
    qn = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    q, k, v, g, beta = inputs(2, 3, n, 8, 5, seed=n)
    s0 = torch.randn(2, 3, 8, 5) * 0.1
    t = lambda x: x.transpose(1, 2)  # noqa: E731 (transformers' (B, n, H, d) layout)
    args = (t(q), t(k), t(v), t(g), t(beta))
    ref_r, st_r = qn.torch_recurrent_gated_delta_rule(
        *args, initial_state=s0, output_final_state=True
    )
    ref_c, st_c = qn.torch_chunk_gated_delta_rule(
        *args, chunk_size=chunk, initial_state=s0, output_final_state=True
    )
    out_r, s_r = gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True)
    out_c, s_c = gated_delta_rule(
        q, k, v, g, beta, chunk_size=chunk, initial_state=s0, output_final_state=True
    )
    tol = dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_r, t(ref_r), **tol)
    torch.testing.assert_close(s_r, st_r, **tol)
    torch.testing.assert_close(out_c, t(ref_c), **tol)
    torch.testing.assert_close(s_c, st_c, **tol)


# -- SSD ---------------------------------------------------------------------------------


def ssd_inputs(b=2, n=12, h=3, p=4, nstate=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, h, p, generator=g, dtype=torch.float64)
    dt = F.softplus(torch.randn(b, n, h, generator=g, dtype=torch.float64))
    a = -torch.rand(h, generator=g, dtype=torch.float64) - 0.1
    bb = torch.randn(b, n, h, nstate, generator=g, dtype=torch.float64)
    cc = torch.randn(b, n, h, nstate, generator=g, dtype=torch.float64)
    return x, dt, a, bb, cc


@pytest.mark.parametrize("n", [1, 2, 12, 33])
def test_ssd_recurrence_equals_masked_attention(n):
    args = ssd_inputs(n=n, seed=n)
    torch.testing.assert_close(ssd_attention(*args), ssd_recurrent(*args))


def test_ssd_is_decayed_linear_attention_with_dt_scaled_values():
    x, dt, a, bb, cc = ssd_inputs()
    gates = torch.exp(dt * a).transpose(1, 2).unsqueeze(-1)  # (B, H, n, 1)
    values = (x * dt.unsqueeze(-1)).transpose(1, 2)
    ch8 = decayed_linear_attention(
        cc.transpose(1, 2),
        bb.transpose(1, 2),
        values,
        gates,
        feature_map=lambda t: t,
        normalize=False,
    )
    torch.testing.assert_close(ch8.transpose(1, 2), ssd_attention(x, dt, a, bb, cc))


def test_semiseparable_mask_rank_one_blocks():
    log_a = -torch.rand(10, dtype=torch.float64)
    m = semiseparable_mask(log_a)
    assert torch.all(m.triu(1) == 0) and torch.allclose(m.diagonal(), torch.ones(10).double())
    block = m[6:, :4]  # strictly below the diagonal
    assert torch.linalg.matrix_rank(block) == 1


def test_ssd_bad_input():
    x, dt, a, bb, cc = ssd_inputs()
    with pytest.raises(ValueError, match="dt must have shape"):
        ssd_attention(x, dt[:, :3], a, bb, cc)
    with pytest.raises(ValueError, match="A must have shape"):
        ssd_recurrent(x, dt, a[:2], bb, cc)
    with pytest.raises(TypeError, match="x"):
        ssd_attention(x.long(), dt, a, bb, cc)
