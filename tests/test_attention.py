"""scaled_dot_product_attention and softmax against torch's own operators."""

import math

import numpy as np
import pytest
import selfattn
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from selfattn import causal_mask, padding_mask, scaled_dot_product_attention, softmax
from selfattn.reference import attention_steps

TOL = 1e-5  # float32 agreement with torch SDPA promised by the library


def torch_sdpa(q, k, v, mask=None, scale=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


# ---- softmax ---------------------------------------------------------------


def test_softmax_matches_torch_and_is_stable():
    x = torch.randn(4, 7) * 50 + 1000.0  # huge scores: exp would overflow without the max shift
    assert torch.allclose(softmax(x), torch.softmax(x, -1), atol=1e-6)
    assert torch.isfinite(softmax(x)).all()


def test_softmax_all_masked_row_is_zero_not_nan():
    x = torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]])
    out = softmax(x)
    assert torch.equal(out[1], torch.zeros(2))
    assert torch.allclose(out[0].sum(), torch.tensor(1.0))


def test_softmax_other_dim_and_int_input():
    x = torch.randn(3, 5, 2)
    assert torch.allclose(softmax(x, dim=1), torch.softmax(x, 1), atol=1e-6)
    with pytest.raises(TypeError, match="floating-point.*int64"):
        softmax(torch.ones(3, dtype=torch.long))


# ---- attention against torch SDPA -------------------------------------------

shapes = st.tuples(
    st.lists(st.integers(1, 3), min_size=0, max_size=2),  # batch dims
    st.integers(1, 9),  # n
    st.integers(1, 9),  # m
    st.integers(1, 16),  # d_k
    st.integers(1, 16),  # d_v
)


@given(shapes, st.sampled_from(["none", "bool", "float", "causal"]), st.integers(0, 2**31 - 1))
def test_matches_torch_sdpa_on_random_shapes(shape, mask_kind, seed):
    batch, n, m, d_k, d_v = shape
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, n, d_k, generator=g)
    k = torch.randn(*batch, m, d_k, generator=g)
    v = torch.randn(*batch, m, d_v, generator=g)
    mask = None
    if mask_kind == "bool":  # random, may fully mask some rows
        mask = torch.rand(*batch, n, m, generator=g) > 0.4
    elif mask_kind == "float":
        mask = torch.randn(n, m, generator=g)
    elif mask_kind == "causal":
        mask = causal_mask(n, m)
    ours = scaled_dot_product_attention(q, k, v, mask)
    theirs = torch_sdpa(q, k, v, mask)
    assert ours.shape == theirs.shape == (*batch, n, d_v)
    assert torch.isfinite(ours).all()
    torch.testing.assert_close(ours, theirs, atol=TOL, rtol=TOL)


def test_fully_masked_rows_give_zero_output_like_torch():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[0, 1] = False
    mask[1, :] = False
    out, w = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    assert torch.equal(out[0, 1], torch.zeros(6)) and torch.equal(out[1], torch.zeros(3, 6))
    assert torch.equal(w[1], torch.zeros(3, 5))
    torch.testing.assert_close(out, torch_sdpa(q, k, v, mask), atol=TOL, rtol=TOL)


def test_float_mask_of_minus_inf_matches_bool_mask():
    q, k, v = torch.randn(3, 4, 8), torch.randn(3, 6, 8), torch.randn(3, 6, 8)
    allowed = torch.rand(4, 6) > 0.5
    additive = torch.zeros(4, 6).masked_fill(~allowed, -math.inf)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, allowed),
        scaled_dot_product_attention(q, k, v, additive),
    )


def test_batch_broadcasting_and_heads():
    q = torch.randn(2, 4, 5, 8)  # (B, h, n, d)
    k = torch.randn(1, 4, 7, 8)
    v = torch.randn(2, 1, 7, 3)
    mask = padding_mask([7, 3], 7).unsqueeze(1)  # (B, 1, 1, m)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, mask), torch_sdpa(q, k, v, mask), atol=TOL, rtol=TOL
    )


def test_custom_scale_and_weights():
    q, k, v = torch.randn(5, 4), torch.randn(6, 4), torch.randn(6, 2)
    out, w = scaled_dot_product_attention(q, k, v, scale=0.3, return_weights=True)
    torch.testing.assert_close(out, torch_sdpa(q, k, v, scale=0.3), atol=TOL, rtol=TOL)
    torch.testing.assert_close(w, torch.softmax(q @ k.T * 0.3, -1))
    torch.testing.assert_close(w.sum(-1), torch.ones(5))


def test_n_equals_one():
    q, k, v = torch.randn(1, 8), torch.randn(1, 8), torch.randn(1, 3)
    out = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, v)  # one key: all weight on it


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_dtypes(dtype):
    q, k, v = (torch.randn(2, 6, 8).to(dtype) for _ in range(3))
    mask = causal_mask(6)
    ours = scaled_dot_product_attention(q, k, v, mask)
    assert ours.dtype == dtype
    ref = torch_sdpa(q.double(), k.double(), v.double(), mask)
    tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float64: 1e-10}[dtype]
    torch.testing.assert_close(ours.double(), ref, atol=tol, rtol=tol)


def test_matches_numpy_reference_steps():
    rng = np.random.default_rng(0)
    X, Wq, Wk, Wv = (
        rng.normal(size=(5, 6)),
        rng.normal(size=(6, 4)),
        rng.normal(size=(6, 4)),
        rng.normal(size=(6, 3)),
    )
    steps = attention_steps(X, Wq, Wk, Wv, mask=causal_mask(5).numpy())
    t = lambda a: torch.tensor(a)  # noqa: E731
    out, w = scaled_dot_product_attention(
        t(X) @ t(Wq), t(X) @ t(Wk), t(X) @ t(Wv), causal_mask(5), return_weights=True
    )
    np.testing.assert_allclose(steps.output, out.numpy(), atol=1e-12)
    np.testing.assert_allclose(steps.weights, w.numpy(), atol=1e-12)
    assert (
        steps.Q.shape == (5, 4) and steps.scores.shape == (5, 5) and steps.output.shape == (5, 3)
    )
    np.testing.assert_allclose(
        steps.scaled_scores[np.isfinite(steps.scaled_scores)],
        (steps.scores / 2.0)[np.isfinite(steps.scaled_scores)],
    )


# ---- bad input --------------------------------------------------------------


@pytest.mark.parametrize(
    "q_shape,k_shape,v_shape,match",
    [
        ((3, 4), (5, 6), (5, 2), r"same last dimension d_k.*\(3, 4\).*\(5, 6\)"),
        ((3, 4), (5, 4), (6, 2), r"same number of keys.*\(5, 4\).*\(6, 2\)"),
        ((2, 3, 4), (3, 5, 4), (3, 5, 2), r"batch dimensions.*\(2,\).*\(3,\)"),
        ((4,), (5, 4), (5, 2), r"q must have shape \(\.\.\., n, d_k\).*\(4,\)"),
    ],
)
def test_shape_errors_name_the_shapes(q_shape, k_shape, v_shape, match):
    with pytest.raises(ValueError, match=match):
        scaled_dot_product_attention(
            torch.randn(q_shape), torch.randn(k_shape), torch.randn(v_shape)
        )


def test_dtype_errors():
    with pytest.raises(TypeError, match="q must be a floating-point tensor.*int64"):
        scaled_dot_product_attention(
            torch.ones(2, 3, dtype=torch.long), torch.randn(2, 3), torch.randn(2, 3)
        )
    with pytest.raises(TypeError, match="share one dtype.*float64"):
        scaled_dot_product_attention(
            torch.randn(2, 3), torch.randn(2, 3).double(), torch.randn(2, 3)
        )
    with pytest.raises(TypeError, match="torch.Tensor.*ndarray"):
        scaled_dot_product_attention(np.ones((2, 3)), torch.randn(2, 3), torch.randn(2, 3))


def test_mask_errors():
    q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
    with pytest.raises(ValueError, match=r"mask of shape \(5, 3\) does not broadcast.*\(3, 5\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(5, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must be bool.*int64"):
        scaled_dot_product_attention(q, k, v, torch.ones(3, 5, dtype=torch.long))
    # A mask with extra leading dims would silently grow the output: refused.
    with pytest.raises(ValueError, match="does not broadcast"):
        scaled_dot_product_attention(q, k, v, torch.ones(2, 3, 5, dtype=torch.bool))


def test_public_names_are_documented():
    for name in selfattn.__all__:
        obj = getattr(selfattn, name)
        assert obj.__doc__ and obj.__doc__.strip(), f"selfattn.{name} has no docstring"


# ---- the kernel= switch and mask="causal" -----------------------------------------------


@pytest.mark.parametrize("n,m", [(6, 6), (3, 8), (1, 5)])
@pytest.mark.parametrize("mask", [None, "causal"])
def test_flash_kernel_is_the_same_function(n, m, mask):
    from torch.nn.attention.bias import causal_lower_right

    g = torch.Generator().manual_seed(n * m)
    q, k, v = (torch.randn(2, 3, r, 8, generator=g) for r in (n, m, m))
    ref = scaled_dot_product_attention(q, k, v, mask)
    flash = scaled_dot_product_attention(q, k, v, mask, kernel="flash")
    torch.testing.assert_close(flash, ref, atol=1e-5, rtol=1e-5)
    bias = None if mask is None else causal_lower_right(n, m)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(ref, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n,m", [(6, 6), (3, 8), (8, 3), (1, 5), (0, 4), (4, 0)])
@pytest.mark.parametrize("mask", [None, "causal", "bool", "float"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_torch_kernel_is_the_same_function(n, m, mask, dtype):
    g = torch.Generator().manual_seed(n * 10 + m)
    q, k, v = (torch.randn(2, 3, r, 8, generator=g).to(dtype) for r in (n, m, m))
    if mask in ("bool", "float"):
        allowed = torch.rand(3, n, m, generator=g) < 0.6
        if n > 1:
            allowed[:, 0] = False  # a fully masked query: zeros, not NaN
        mask = allowed if mask == "bool" else torch.zeros(3, n, m).masked_fill(~allowed, -math.inf)
    if mask == "causal" and 0 in (n, m):  # no causal mask of an empty side, either kernel
        for kernel in ("reference", "torch"):
            with pytest.raises(ValueError, match="must be >= 1"):
                scaled_dot_product_attention(q, k, v, mask, kernel=kernel)
        return
    ref = scaled_dot_product_attention(q, k, v, mask)
    fast = scaled_dot_product_attention(q, k, v, mask, kernel="torch")
    assert fast.dtype == dtype and fast.shape == ref.shape and not fast.isnan().any()
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(fast, ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("scale", [0.0, -1.0, 0.3])
@pytest.mark.parametrize("mask", [None, "causal"])
def test_torch_kernel_takes_any_scale(scale, mask):
    # torch's causal CPU kernel gives NaN for a scale <= 0; the reference takes any finite one
    q, k, v = torch.randn(3, 2, 3, 9, 16, generator=torch.Generator().manual_seed(1)).unbind(0)
    ref = scaled_dot_product_attention(q, k, v, mask, scale=scale)
    fast = scaled_dot_product_attention(q, k, v, mask, scale=scale, kernel="torch")
    torch.testing.assert_close(fast, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("mask_dtype", [torch.float64, torch.float32, torch.float16])
def test_torch_kernel_takes_a_float_mask_of_another_dtype(dtype, mask_dtype):
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, r, 8, generator=g).to(dtype) for r in (4, 6, 6))
    bias = torch.randn(4, 6, generator=g).to(mask_dtype)
    bias[1] = -math.inf  # and a fully masked query
    ref = scaled_dot_product_attention(q, k, v, bias)
    fast = scaled_dot_product_attention(q, k, v, bias, kernel="torch")
    assert fast.dtype == dtype and torch.equal(fast[:, 1], torch.zeros_like(fast[:, 1]))
    tol = 2e-3 if dtype == torch.float16 else 1e-5
    torch.testing.assert_close(fast, ref, atol=tol, rtol=tol)


def test_torch_kernel_zeroes_an_empty_row_whatever_torch_does(monkeypatch):
    # Some of torch's backends (and older versions) give NaN for a query with no key: stand-in
    # for one that does, to show the guard acts, forward and backward.
    torch_sdpa = F.scaled_dot_product_attention

    def nan_on_empty_rows(q, k, v, attn_mask=None, **kwargs):
        out = torch_sdpa(q, k, v, attn_mask, **kwargs)
        if attn_mask is None:
            return out
        allowed = attn_mask if attn_mask.dtype == torch.bool else attn_mask > -math.inf
        return out.masked_fill(~allowed.any(-1, keepdim=True), math.nan)

    monkeypatch.setattr(F, "scaled_dot_product_attention", nan_on_empty_rows)
    q = torch.randn(2, 4, 8, requires_grad=True)
    allowed = torch.ones(4, 4, dtype=torch.bool).tril()
    allowed[2] = False
    for mask in (allowed, torch.zeros(4, 4).masked_fill(~allowed, -math.inf)):
        out = scaled_dot_product_attention(q, q, q, mask, kernel="torch")
        assert torch.equal(out[:, 2], torch.zeros(2, 8)) and not out.isnan().any()
        out.sum().backward()
        assert torch.isfinite(q.grad).all()
        torch.testing.assert_close(out, scaled_dot_product_attention(q, q, q, mask))
        q.grad = None


def test_torch_kernel_backward_matches_the_reference():
    g = torch.Generator().manual_seed(3)
    inputs = [torch.randn(2, r, 4, generator=g, dtype=torch.float64) for r in (5, 7, 7)]
    grads = []
    for kernel in ("reference", "torch"):
        q, k, v = (t.clone().requires_grad_() for t in inputs)
        scaled_dot_product_attention(q, k, v, "causal", kernel=kernel).pow(2).sum().backward()
        grads.append((q.grad, k.grad, v.grad))
    for ref, fast in zip(*grads):
        torch.testing.assert_close(fast, ref)


def test_torch_kernel_causal_self_attention_is_torch_itself():
    # n = m causal goes straight to torch's is_causal path: the very same numbers
    q, k, v = torch.randn(3, 2, 9, 16).unbind(0)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.equal(scaled_dot_product_attention(q, k, v, "causal", kernel="torch"), expected)
    with pytest.raises(ValueError, match="kernel='torch' returns no weights"):
        scaled_dot_product_attention(q, k, v, kernel="torch", return_weights=True)


def test_causal_string_is_the_bottom_right_causal_mask():
    from selfattn import causal_mask

    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 7, 4), torch.randn(2, 7, 5)
    out, w = scaled_dot_product_attention(q, k, v, "causal", return_weights=True)
    assert torch.equal(w > 0, causal_mask(3, 7, alignment="bottom_right").expand(2, 3, 7))
    torch.testing.assert_close(
        out, scaled_dot_product_attention(q, k, v, causal_mask(3, 7, alignment="bottom_right"))
    )


def test_kernel_and_mask_strings_are_checked():
    q = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match="kernel"):
        scaled_dot_product_attention(q, q, q, kernel="fast")
    with pytest.raises(ValueError, match="'causal'"):
        scaled_dot_product_attention(q, q, q, "upper")
    with pytest.raises(ValueError, match="kernel='flash'"):
        scaled_dot_product_attention(q, q, q, torch.ones(3, 3, dtype=torch.bool), kernel="flash")
    with pytest.raises(ValueError, match="kernel='flash'"):
        scaled_dot_product_attention(q, q, q, kernel="flash", return_weights=True)


def test_dropout_drops_weights_before_the_weighted_sum():
    q, k, v = torch.randn(2, 5, 4), torch.randn(2, 6, 4), torch.randn(2, 6, 3)
    torch.manual_seed(7)
    out, w = scaled_dot_product_attention(q, k, v, dropout=0.4, return_weights=True)
    torch.manual_seed(7)
    expected_w = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1)
    torch.testing.assert_close(w, expected_w)  # the weights returned are before dropout
    torch.testing.assert_close(out, F.dropout(expected_w, 0.4) @ v)
    assert not torch.allclose(out, expected_w @ v)
    with pytest.raises(ValueError, match="dropout"):
        scaled_dot_product_attention(q, k, v, dropout=1.0)
    with pytest.raises(ValueError, match="dropout"):
        scaled_dot_product_attention(q, k, v, dropout=0.1, kernel="flash")
