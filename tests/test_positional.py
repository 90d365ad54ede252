"""Positional encodings against their formulas, the papers' reference code, and their defining
properties."""

import math

import pytest
import selfattn
import torch
from hypothesis import given
from hypothesis import strategies as st
from selfattn.positional import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RopeScaling,
    RotaryEmbedding,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    apply_rope_complex,
    relative_position_bucket,
    rope_frequencies,
    rotate_half_permutation,
    scaled_rope_frequencies,
    sinusoidal_encoding,
    sinusoidal_shift_matrix,
)

TOL = 1e-5


# ---- sinusoidal ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "n,d,base", [(1, 2, 10000.0), (7, 6, 10000.0), (50, 64, 10000.0), (9, 10, 100.0)]
)
def test_sinusoidal_matches_the_formula_entry_by_entry(n, d, base):
    pe = sinusoidal_encoding(n, d, base=base)
    assert pe.shape == (n, d) and pe.dtype == torch.float32
    for pos in range(n):
        for i in range(d // 2):
            angle = pos / base ** (2 * i / d)
            assert abs(pe[pos, 2 * i].item() - math.sin(angle)) < 1e-6
            assert abs(pe[pos, 2 * i + 1].item() - math.cos(angle)) < 1e-6


def test_sinusoidal_offset_and_first_row():
    full = sinusoidal_encoding(12, 8)
    assert torch.equal(sinusoidal_encoding(4, 8, offset=8), full[8:])
    # position 0: sin 0 = 0 and cos 0 = 1 in every pair
    assert torch.equal(full[0], torch.tensor([0.0, 1.0] * 4))


@pytest.mark.parametrize("k", [-5, 0, 1, 3, 40])
def test_sinusoidal_shift_is_a_fixed_block_rotation(k):
    d = 16
    pe = sinusoidal_encoding(100, d, dtype=torch.float64)
    M = sinusoidal_shift_matrix(k, d, dtype=torch.float64)
    lo, hi = max(0, -k), min(100, 100 - k)
    assert torch.allclose(pe[lo:hi] @ M.T, pe[lo + k : hi + k], atol=1e-10)
    # each 2x2 block is a rotation: M is orthogonal with determinant 1
    assert torch.allclose(M @ M.T, torch.eye(d, dtype=torch.float64), atol=1e-12)
    assert abs(torch.linalg.det(M).item() - 1.0) < 1e-10


def test_sinusoidal_dot_product_depends_only_on_distance():
    pe = sinusoidal_encoding(60, 32, dtype=torch.float64)
    for k in (0, 1, 5, 20):
        dots = (pe[: 60 - k] * pe[k:]).sum(-1)
        expected = torch.cos(
            k * torch.tensor([10000.0 ** (-2 * i / 32) for i in range(16)], dtype=torch.float64)
        ).sum()
        assert torch.allclose(dots, expected.expand_as(dots), atol=1e-10)


@pytest.mark.parametrize(
    "args,kwargs,exc,msg",
    [
        ((5, 7), {}, ValueError, "d must be even"),
        ((0, 8), {}, ValueError, "n must be >= 1"),
        ((5.0, 8), {}, TypeError, "n must be an int, got float"),
        ((5, 8), {"base": 1.0}, ValueError, "base must be a number > 1"),
        ((5, 8), {"offset": -1}, ValueError, "offset must be >= 0"),
    ],
)
def test_sinusoidal_bad_input(args, kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        sinusoidal_encoding(*args, **kwargs)


def test_shift_matrix_bad_input():
    with pytest.raises(TypeError, match="k must be an int, got float"):
        sinusoidal_shift_matrix(1.5, 8)
    with pytest.raises(ValueError, match="d must be even"):
        sinusoidal_shift_matrix(1, 5)


# ---- learned ------------------------------------------------------------------------


def test_learned_embedding_adds_its_rows_and_refuses_positions_beyond_the_table():
    emb = LearnedPositionalEmbedding(10, 4)
    x = torch.randn(2, 6, 4)
    assert torch.allclose(emb(x), x + emb.weight[:6])
    assert torch.allclose(emb(x, offset=4), x + emb.weight[4:10])
    with pytest.raises(ValueError, match=r"positions 0..10 do not fit the table of max_len=10"):
        emb(torch.randn(1, 11, 4))
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., n, d=4\), got \(2, 6, 5\)"):
        emb(torch.randn(2, 6, 5))
    with pytest.raises(TypeError, match="floating-point"):
        emb(torch.ones(2, 6, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len must be >= 1"):
        LearnedPositionalEmbedding(0, 4)


def test_learned_embedding_rows_never_used_get_no_gradient():
    emb = LearnedPositionalEmbedding(8, 4)
    emb(torch.randn(3, 5, 4)).sum().backward()
    assert (emb.weight.grad[:5] != 0).all() and (emb.weight.grad[5:] == 0).all()


# ---- ALiBi --------------------------------------------------------------------------


def _paper_slopes(n):
    """ALiBi's reference code (ofirpress/attention_with_linear_biases, get_slopes), verbatim in
    logic."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (
        get_slopes_power_of_2(closest_power_of_2)
        + _paper_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]
    )


@pytest.mark.parametrize("h", list(range(1, 17)) + [24, 32, 48, 64])
def test_alibi_slopes_match_the_papers_code(h):
    assert torch.allclose(
        alibi_slopes(h), torch.tensor(_paper_slopes(h), dtype=torch.float32), rtol=1e-6, atol=0
    )


def test_alibi_slopes_power_of_two_are_the_geometric_sequence():
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    assert torch.allclose(
        alibi_slopes(16), torch.tensor([2.0 ** (-(i + 1) / 2) for i in range(16)])
    )
    # 12 heads (not a power of two): the 8-head slopes, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
    expected = [2.0 ** -(i + 1) for i in range(8)] + [2.0 ** -(i + 0.5) for i in range(4)]
    assert torch.allclose(alibi_slopes(12), torch.tensor(expected))
    assert len(set(alibi_slopes(12).tolist())) == 12  # all distinct


def test_alibi_bias_values_causal_and_cache_alignment():
    h, n = 3, 5
    bias = alibi_bias(h, n)
    slopes = alibi_slopes(h)
    for i in range(n):
        for j in range(n):
            assert torch.allclose(bias[:, i, j], -slopes * abs(i - j))
    causal = alibi_bias(h, n, causal=True)
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    assert torch.isinf(causal[:, future]).all() and torch.equal(
        causal[:, ~future], bias[:, ~future]
    )
    # 2 new queries against 6 keys: they are positions 4 and 5
    assert torch.equal(alibi_bias(h, 2, 6), alibi_bias(h, 6)[:, 4:])
    # as a float mask it plugs straight into attention: heads as a batch dimension
    q, k, v = torch.randn(3, 2, h, n, 8).unbind(0)
    out = selfattn.scaled_dot_product_attention(q, k, v, causal)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=causal)
    assert torch.allclose(out, ref, atol=TOL)


def test_alibi_bad_input():
    with pytest.raises(ValueError, match="num_heads must be >= 1, got 0"):
        alibi_slopes(0)
    with pytest.raises(TypeError, match="num_heads must be an int, got float"):
        alibi_slopes(4.0)
    with pytest.raises(ValueError, match="needs m >= n"):
        alibi_bias(4, 5, 3)


# ---- T5 relative buckets ------------------------------------------------------------


def _t5_bucket(rel, bidirectional=True, num_buckets=32, max_distance=128):
    """T5's _relative_position_bucket (mesh-tensorflow / HF transformers) for one integer."""
    ret = 0
    n = -rel
    if bidirectional:
        num_buckets //= 2
        ret += (n < 0) * num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    val = max_exact + int(
        math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    )
    return ret + min(val, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 20)])
def test_relative_buckets_match_t5(bidirectional, num_buckets, max_distance):
    rel = torch.arange(-300, 301)
    got = relative_position_bucket(
        rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    expected = [_t5_bucket(r, bidirectional, num_buckets, max_distance) for r in rel.tolist()]
    assert got.tolist() == expected
    assert got.min() >= 0 and got.max() < num_buckets


def test_relative_position_bias_is_toeplitz_and_trainable():
    mod = RelativePositionBias(2, num_buckets=8, max_distance=16)
    with torch.no_grad():
        mod.bias.weight.copy_(torch.randn(8, 2))
    b = mod(6)
    assert b.shape == (2, 6, 6)
    for i in range(1, 6):  # constant along diagonals: depends only on j - i
        for j in range(1, 6):
            assert torch.equal(b[:, i, j], b[:, i - 1, j - 1])
    assert torch.equal(mod(2, 6), b[:, 4:])
    b.sum().backward()
    assert mod.bias.weight.grad.abs().sum() > 0
    with pytest.raises(TypeError, match="integer tensor"):
        relative_position_bucket(torch.tensor([0.5]))
    with pytest.raises(ValueError, match="m must be >= 6"):
        mod(6, 3)


# ---- RoPE ---------------------------------------------------------------------------


def _rope_by_matrices(x, positions, base=10000.0):
    """The oracle: build the block-diagonal rotation matrix R_p for every position, multiply."""
    n, d = x.shape
    out = torch.empty_like(x, dtype=torch.float64)
    for row, p in enumerate(positions.tolist()):
        R = torch.zeros(d, d, dtype=torch.float64)
        for i in range(d // 2):
            a = p * base ** (-2 * i / d)
            R[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(
                [[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]]
            )
        out[row] = R @ x[row].double()
    return out


def test_rope_matches_explicit_rotation_matrices_and_complex_form():
    x = torch.randn(7, 12, dtype=torch.float64)
    pos = torch.tensor([0, 1, 2, 5, 10, 100, 4097])
    assert torch.allclose(apply_rope(x, pos), _rope_by_matrices(x, pos), atol=1e-10)
    assert torch.allclose(apply_rope_complex(x, pos), apply_rope(x, pos), atol=1e-12)
    assert torch.equal(apply_rope(x, torch.zeros(7)), x)  # position 0: identity


@given(
    m=st.integers(0, 500),
    n=st.integers(0, 500),
    shift=st.integers(-300, 300),
    seed=st.integers(0, 2**16),
    d=st.sampled_from([2, 8, 64]),
)
def test_rope_scores_depend_only_on_the_offset(m, n, shift, seed, d):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 1, d, generator=g, dtype=torch.float64)
    score = (apply_rope(q, torch.tensor([m])) * apply_rope(k, torch.tensor([n]))).sum()
    m2, n2 = m + shift, n + shift  # same offset m - n, other absolute positions
    score2 = (apply_rope(q, torch.tensor([m2])) * apply_rope(k, torch.tensor([n2]))).sum()
    relative = (q * apply_rope(k, torch.tensor([n - m]))).sum()  # <q, R_{n-m} k>
    assert torch.allclose(score, score2, atol=1e-9) and torch.allclose(score, relative, atol=1e-9)


@given(seed=st.integers(0, 2**16), d=st.sampled_from([2, 4, 32, 128]))
def test_rope_preserves_norms_in_float32(seed, d):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 9, d, generator=g)
    pos = torch.randint(0, 10_000, (9,), generator=g)
    out = apply_rope(x, pos)
    assert out.dtype == torch.float32 and out.shape == x.shape
    assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), rtol=1e-5, atol=1e-5)


def test_rope_batched_positions_half_precision_and_module():
    x = torch.randn(2, 3, 5, 8)
    pos = torch.stack([torch.arange(5), torch.arange(5) + 7])[
        :, None, :
    ]  # (2, 1, 5): per-batch offsets
    out = apply_rope(x, pos)
    assert torch.allclose(out[1], apply_rope(x[1], torch.arange(5) + 7), atol=1e-6)
    for dtype in (torch.float16, torch.bfloat16):
        low = apply_rope(x.to(dtype), torch.arange(5))
        assert low.dtype == dtype
        assert torch.allclose(low.float(), apply_rope(x, torch.arange(5)), atol=2e-2)
    rot = RotaryEmbedding(8)
    q, k = rot(x[:, :, 3:], x)  # 2 queries decoding against 5 keys: positions 3, 4
    assert torch.allclose(q, apply_rope(x[:, :, 3:], torch.tensor([3, 4])), atol=1e-6)
    assert torch.allclose(k, apply_rope(x, torch.arange(5)), atol=1e-6)
    assert list(rot.parameters()) == []
    assert torch.allclose(rope_frequencies(8), torch.tensor([1.0, 0.1, 0.01, 0.001]), rtol=1e-6)


def test_rope_bad_input():
    with pytest.raises(ValueError, match=r"x.s last dimension d must be even .*got 5"):
        apply_rope(torch.randn(3, 5), torch.arange(3))
    with pytest.raises(
        ValueError, match=r"positions must have shape \(n,\) or \(\.\.\., n\) with n=3.*got \(4,\)"
    ):
        apply_rope(torch.randn(3, 4), torch.arange(4))
    with pytest.raises(TypeError, match="got the int 3"):
        apply_rope(torch.randn(3, 4), 3)
    with pytest.raises(TypeError, match="floating-point"):
        apply_rope(torch.ones(3, 4, dtype=torch.long), torch.arange(3))
    with pytest.raises(ValueError, match="base must be a number > 1"):
        apply_rope(torch.randn(3, 4), torch.arange(3), base=0.5)
    with pytest.raises(ValueError, match=r"q must have shape \(\.\.\., n, d_head=8\)"):
        RotaryEmbedding(8)(torch.randn(2, 6), torch.randn(2, 8))
    with pytest.raises(ValueError, match="d_head must be even"):
        RotaryEmbedding(7)


# ---- the chapter's explorer ---------------------------------------------------------


def test_explorer_curves_and_plots():
    import matplotlib

    matplotlib.use("Agg")
    from selfattn.widgets import ch06

    curves = ch06.distance_curves(32, 16, 100.0)
    sin_curve, rope_ones, rope_rand = curves.values()
    assert sin_curve.shape == (32,) and abs(sin_curve[0] - 1) < 1e-12
    assert abs(sum(abs(a - b) for a, b in zip(sin_curve, rope_ones))) < 1e-10  # the same curve
    assert (abs(rope_rand) <= 1 + 1e-12).all()
    fig = ch06.plot_encodings_grid(((16, 8, 10.0),))
    assert fig.axes[1].get_xlabel() == "distance k (positions)"
    # Building the explorer precomputes every view of its grid (a minute of CPU time):
    # only its refusals are checked here.
    with pytest.raises(ValueError, match="the explorer's grid"):
        ch06.explorer(n=16, d=8, base=100.0)
    with pytest.raises(ValueError, match="d must be even"):
        ch06.distance_curves(16, 7)
    with pytest.raises(ValueError, match="base must be one of"):
        ch06.explorer(base=5.0)


# ---- RoPE layouts, partial rotary, scaling ---------------------------------------------


def _rotate_half_reference(x, positions, base=10000.0):
    # GPT-NeoX / Hugging Face LLaMA: emb = cat(freqs, freqs); x * cos + rotate_half(x) * sin
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = positions.double()[:, None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * emb.cos().to(x.dtype) + rotated * emb.sin().to(x.dtype)


@pytest.mark.parametrize("d", [2, 8, 64])
def test_rope_half_layout_is_the_interleaved_one_after_the_permutation(d):
    g = torch.Generator().manual_seed(d)
    x = torch.randn(3, 11, d, generator=g, dtype=torch.float64)
    pos = torch.arange(11) * 13
    perm = rotate_half_permutation(d)
    half = apply_rope(x[..., perm], pos, layout="half")
    assert torch.allclose(apply_rope(x, pos)[..., perm], half, atol=1e-12)
    assert torch.allclose(half, _rotate_half_reference(x[..., perm], pos), atol=1e-12)
    assert sorted(perm.tolist()) == list(range(d))
    if d > 2:  # the layouts really differ: the same x is rotated differently
        assert not torch.allclose(half, apply_rope(x[..., perm], pos), atol=1e-3)


def test_partial_rotary_rotates_the_first_dims_only():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 9, 32, generator=g, dtype=torch.float64)
    pos = torch.arange(9) + 5
    out = apply_rope(x, pos, rotary_dim=8)
    assert torch.equal(out[..., 8:], x[..., 8:])
    assert torch.allclose(out[..., :8], apply_rope(x[..., :8], pos), atol=1e-12)
    # the frequencies are those of an 8-dimensional RoPE (base^(-2i/8)), as in GPT-NeoX
    assert torch.allclose(out[..., :8], apply_rope(x[..., :8], pos, base=10000.0), atol=1e-12)
    module = RotaryEmbedding(32, rotary_fraction=0.25, layout="half")
    q, k = module(x, x)
    assert module.rotary_dim == 8
    assert torch.allclose(q, apply_rope(x, torch.arange(9), rotary_dim=8, layout="half"))
    # partial rotary keeps the offset property on the rotated part and leaves the rest alone
    s1 = (
        apply_rope(x[0, :1], torch.tensor([3]), rotary_dim=8)
        * apply_rope(x[0, 1:2], torch.tensor([10]), rotary_dim=8)
    ).sum()
    s2 = (
        apply_rope(x[0, :1], torch.tensor([103]), rotary_dim=8)
        * apply_rope(x[0, 1:2], torch.tensor([110]), rotary_dim=8)
    ).sum()
    assert abs(s1 - s2) < 1e-9


def test_rope_scaling_frequencies_follow_the_papers_formulas():
    d, base, s, L = 16, 10000.0, 4.0, 32
    i = torch.arange(d // 2, dtype=torch.float64)
    theta = base ** (-2 * i / d)
    assert torch.allclose(scaled_rope_frequencies(d, None), theta)
    # position interpolation (Chen et al. 2023): f(x, m) -> f(x, m L / L')
    pi = scaled_rope_frequencies(d, RopeScaling("linear", s))
    assert torch.allclose(pi, theta / s)
    # NTK-aware: base' = base * s^(d / (d - 2)); fastest pair unchanged, slowest divided by s
    ntk = scaled_rope_frequencies(d, RopeScaling("ntk", s))
    assert torch.allclose(ntk, (base * s ** (d / (d - 2))) ** (-2 * i / d))
    assert math.isclose(ntk[0].item(), 1.0) and math.isclose(ntk[-1] / theta[-1], 1 / s)
    # YaRN (Peng et al. 2023, eqs. 17-19): r = L / lambda, gamma ramp between alpha and beta
    yarn_cfg = RopeScaling("yarn", s, original_length=L, beta_fast=32.0, beta_slow=1.0)
    yarn = scaled_rope_frequencies(d, yarn_cfg)
    for t, got in zip(theta.tolist(), yarn.tolist()):
        r = L / (2 * math.pi / t)
        gamma = 0.0 if r < 1 else 1.0 if r > 32 else (r - 1) / 31
        assert math.isclose(got, (1 - gamma) * t / s + gamma * t, rel_tol=1e-12)
    assert math.isclose(yarn_cfg.attention_factor, 0.1 * math.log(s) + 1)
    assert RopeScaling("ntk", s).attention_factor == 1.0
    # slow pairs are interpolated, pair 0 (5 turns over L) only partly
    assert math.isclose(yarn[-1] / theta[-1], 1 / s) and 1 / s < yarn[0] / theta[0] < 1
    # a factor of 1 changes nothing
    for method in ("linear", "ntk", "yarn"):
        same = scaled_rope_frequencies(d, RopeScaling(method, 1.0, original_length=L))
        assert torch.allclose(same, theta)


def test_position_interpolation_equals_dividing_the_positions():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 16, generator=g, dtype=torch.float64)
    pos = torch.arange(5) * 7
    module = RotaryEmbedding(16, scaling=RopeScaling("linear", 4.0))
    q, _ = module(x, x, q_positions=pos, k_positions=pos)
    assert torch.allclose(q, apply_rope(x, pos.double() / 4))
    yarn = RotaryEmbedding(16, scaling=RopeScaling("yarn", 4.0, original_length=8))
    qy, ky = yarn(x, x)
    factor = 0.1 * math.log(4.0) + 1
    freqs = scaled_rope_frequencies(16, yarn.scaling)
    assert torch.allclose(qy, factor * apply_rope(x, torch.arange(5), frequencies=freqs))
    assert torch.allclose(qy, ky)
    assert "yarn" in repr(yarn)


@pytest.mark.parametrize(
    "kwargs, exc, msg",
    [
        (dict(method="cubic", factor=2.0), ValueError, "method"),
        (dict(method="linear", factor=0.5), ValueError, "factor"),
        (dict(method="linear", factor="2"), TypeError, "factor"),
        (dict(method="yarn", factor=2.0), ValueError, "original_length"),
        (dict(method="yarn", factor=2.0, original_length=8, beta_slow=40.0), ValueError, "beta"),
    ],
)
def test_rope_scaling_bad_input(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        RopeScaling(**kwargs)


def test_rope_layout_partial_and_frequencies_bad_input():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match="layout"):
        apply_rope(x, torch.arange(4), layout="neox")
    with pytest.raises(ValueError, match="rotary_dim"):
        apply_rope(x, torch.arange(4), rotary_dim=10)
    with pytest.raises(ValueError, match="rotary_dim"):
        apply_rope(x, torch.arange(4), rotary_dim=3)
    with pytest.raises(ValueError, match="frequencies"):
        apply_rope(x, torch.arange(4), frequencies=torch.ones(3))
    with pytest.raises(ValueError, match="rotary_fraction"):
        RotaryEmbedding(8, rotary_fraction=0.0)
    with pytest.raises(ValueError, match="rotary_fraction"):
        RotaryEmbedding(8, rotary_fraction=0.125)  # one dimension
    with pytest.raises(ValueError, match="even"):
        RotaryEmbedding(8, rotary_fraction=0.375)  # three dimensions
    with pytest.raises(TypeError, match="scaling"):
        RotaryEmbedding(8, scaling={"method": "linear", "factor": 2})
    with pytest.raises(TypeError, match="scaling"):
        scaled_rope_frequencies(8, "yarn")
