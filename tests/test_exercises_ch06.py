"""Chapter 6's checkers: the reference solutions pass, the stub is "not attempted", and each
likely mistake is named by its diagnosis."""

import math

import pytest
import torch
from selfattn.exercises import ch06
from selfattn.positional import apply_rope


def stub(*args):
    raise NotImplementedError


def failed_with(result, text):
    return result.status == "failed" and text in result.message


# ---- 6.1 sinusoidal (find the bug) --------------------------------------------------------


def _sinusoidal(n, d, *, swap=False, exponent=lambda i, d: 2 * i / d, halves=False):
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    omega = torch.tensor(
        [10000.0 ** (-exponent(i, d)) for i in range(d // 2)], dtype=torch.float64
    )
    s, c = torch.sin(pos * omega), torch.cos(pos * omega)
    if swap:
        s, c = c, s
    if halves:
        return torch.cat([s, c], dim=1)
    pe = torch.empty(n, d, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = s, c
    return pe


def test_sinusoidal():
    assert ch06.check_sinusoidal(_sinusoidal).passed
    assert ch06.check_sinusoidal(lambda n, d: _sinusoidal(n, d).float().numpy()).passed
    assert failed_with(
        ch06.check_sinusoidal(lambda n, d: _sinusoidal(n, d, swap=True).float()),
        ch06.PLANTED_SINUSOIDAL,
    )
    assert failed_with(
        ch06.check_sinusoidal(lambda n, d: _sinusoidal(n, d, exponent=lambda i, d: i / d)),
        "the exponent steps once per column",
    )
    assert failed_with(
        ch06.check_sinusoidal(lambda n, d: _sinusoidal(n, d, halves=True)),
        "rotate-half arrangement",
    )
    # an unrelated wrong answer gets the plain comparison, not a diagnosis
    plain = ch06.check_sinusoidal(lambda n, d: _sinusoidal(n, d) + 0.1)
    assert failed_with(plain, "largest difference")
    assert ch06.check_sinusoidal(stub).status == "not attempted"


def _sinusoidal_buggy(n, d):
    """The chapter's planted bug, as the notebook's sinusoidal_buggy writes it."""
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(n, d, dtype=torch.float64)
    pe[:, 0::2] = torch.cos(pos * omega)
    pe[:, 1::2] = torch.sin(pos * omega)
    return pe


def test_sinusoidal_the_planted_bug_is_not_attempted():
    # the untouched planted bug counts as not attempted, as in 6.4, 7.2 and 7.5
    assert ch06.check_sinusoidal(_sinusoidal_buggy).status == "not attempted"
    assert ch06.check_sinusoidal(lambda n, d: _sinusoidal(n, d, swap=True)).status == (
        "not attempted"
    )

    # fixed for some sizes only: named by its symptom, without the expected values
    def half_fixed(n, d):
        return _sinusoidal(n, d) if d == 64 else _sinusoidal_buggy(n, d)

    result = ch06.check_sinusoidal(half_fixed)
    assert failed_with(result, ch06.PLANTED_SINUSOIDAL), result.message
    assert "sin" not in ch06.PLANTED_SINUSOIDAL.replace("sinusoidal_buggy", "")
    assert "cos" not in ch06.PLANTED_SINUSOIDAL
    assert not any(ch.isdigit() for ch in ch06.PLANTED_SINUSOIDAL.replace("position 0", ""))


# ---- 6.2 shift matrix in the halves layout (build) -----------------------------------------


def _halves_shift(k, d, *, sign=1.0, use_k=True):
    """M with H[pos + k] = M H[pos], H = all sines then all cosines (written out, 2 x 2 at a
    time across the two halves)."""
    h = d // 2
    M = torch.zeros(d, d, dtype=torch.float64)
    for i in range(h):
        b = sign * (k if use_k else 1) * 10000.0 ** (-2 * i / d)
        M[i, i], M[i, h + i] = math.cos(b), math.sin(b)
        M[h + i, i], M[h + i, h + i] = -math.sin(b), math.cos(b)
    return M


def _halves_pe(n, d):
    return torch.cat(
        [_sinusoidal(n, d)[:, 0::2], _sinusoidal(n, d)[:, 1::2]], dim=1
    )  # (n, d): sines, then cosines


def test_halves_shift_is_the_shift():
    # the reference really shifts the halves layout (independent of the checker's code)
    pe = _halves_pe(40, 8)
    for k in (1, 3, -2):
        M = _halves_shift(k, 8)
        lo, hi = max(0, -k), min(40, 40 - k)
        assert torch.allclose(pe[lo:hi] @ M.T, pe[lo + k : hi + k], atol=1e-12)


def test_shift_matrix():
    assert ch06.check_shift_matrix(_halves_shift).passed
    assert ch06.check_shift_matrix(lambda k, d: _halves_shift(k, d).tolist()).passed
    interleaved = ch06.sinusoidal_shift_matrix
    assert failed_with(
        ch06.check_shift_matrix(lambda k, d: interleaved(k, d, dtype=torch.float64)),
        "interleaved layout",
    )
    assert failed_with(
        ch06.check_shift_matrix(lambda k, d: _halves_shift(k, d, sign=-1.0)), "moves back"
    )
    transposed = ch06.check_shift_matrix(lambda k, d: _halves_shift(k, d).T)
    assert failed_with(transposed, "moves back") and "row vectors" in transposed.message
    assert failed_with(
        ch06.check_shift_matrix(lambda k, d: _halves_shift(k, d, use_k=False)), "whatever k is"
    )
    assert failed_with(ch06.check_shift_matrix(lambda k, d: torch.eye(d)), "largest difference")
    assert ch06.check_shift_matrix(stub).status == "not attempted"


# ---- 6.3 ALiBi slopes (build) -------------------------------------------------------------


def _slopes(h):
    def pow2(h):
        return [2.0 ** (-8.0 * (i + 1) / h) for i in range(h)]

    p = 2 ** int(math.log2(h))
    return pow2(p) + pow2(2 * p)[0::2][: h - p]


def test_alibi_slopes():
    assert ch06.check_alibi_slopes(_slopes).passed
    assert ch06.check_alibi_slopes(lambda h: torch.tensor(_slopes(h))).passed
    assert failed_with(
        ch06.check_alibi_slopes(lambda h: [2.0 ** (-8.0 * (i + 1) / h) for i in range(h)]),
        "power-of-two formula",
    )
    assert failed_with(
        ch06.check_alibi_slopes(lambda h: [2.0 ** (-8.0 * i / h) for i in range(h)]),
        "first slope is 2^0",
    )
    # rounding h up to a power of two and keeping the first h slopes: no diagnosis, still wrong
    assert (
        ch06.check_alibi_slopes(lambda h: _slopes(2 ** math.ceil(math.log2(h)))[:h]).status
        == "failed"
    )
    assert ch06.check_alibi_slopes(stub).status == "not attempted"


# ---- 6.4 RoPE in bfloat16 (find the bug) --------------------------------------------------


def _rope(x, positions, *, angle_dtype=torch.float64, sign=1.0, halves=False, slow=False):
    """RoPE with the angles in ``angle_dtype``, cos and sin cast to x's dtype."""
    d = x.shape[-1]
    step = 1 if slow else 2
    theta = 10000.0 ** (-step * torch.arange(d // 2, dtype=angle_dtype) / d)
    angle = sign * positions[:, None].to(angle_dtype) * theta
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    if halves:
        a, b = x[:, : d // 2], x[:, d // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=1)
    out = x.clone()
    out[:, 0::2] = x[:, 0::2] * cos - x[:, 1::2] * sin
    out[:, 1::2] = x[:, 0::2] * sin + x[:, 1::2] * cos
    return out


def test_rope_fixed_passes():
    assert ch06.check_rope(_rope).passed
    assert ch06.check_rope(lambda x, p: _rope(x, p, angle_dtype=torch.float32)).passed
    assert ch06.check_rope(lambda x, p: apply_rope(x, p)).passed


def test_rope_the_planted_bug_is_not_attempted_and_real():
    assert ch06.check_rope(ch06.rope_buggy).status == "not attempted"
    assert ch06.check_rope(stub).status == "not attempted"
    # the bug is invisible in float32 and at the first positions, large further on
    x = torch.randn(3, 64, dtype=torch.float64)
    for dtype, positions, small in (
        (torch.float32, [0, 100, 8191], True),
        (torch.bfloat16, [0, 3, 7], True),
        (torch.bfloat16, [1000, 4097, 8191], False),
    ):
        pos = torch.tensor(positions)
        xl = x.to(dtype)
        err = (ch06.rope_buggy(xl, pos).double() - apply_rope(xl.double(), pos)).abs().max()
        assert (err < 0.05) == small, (dtype, positions, err)


def test_rope_names_the_mistakes():
    def low(theta=False, positions=False):
        def rope(x, p):
            d = x.shape[-1]
            th = torch.arange(0, d, 2, dtype=x.dtype if theta else torch.float32)
            th = (10000.0 ** (-th / d)).float()
            pp = (p.to(x.dtype) if positions else p).float()
            angle = pp[:, None] * th
            c, s = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
            out = x.clone()
            out[:, 0::2] = x[:, 0::2] * c - x[:, 1::2] * s
            out[:, 1::2] = x[:, 0::2] * s + x[:, 1::2] * c
            return out

        return rope

    assert failed_with(ch06.check_rope(low(theta=True)), "frequencies")
    assert failed_with(ch06.check_rope(low(positions=True)), "positions went through")
    assert failed_with(ch06.check_rope(lambda x, p: _rope(x, p, sign=-1.0)), "clockwise")
    assert failed_with(ch06.check_rope(lambda x, p: _rope(x, p, halves=True)), "rotate-half")
    assert failed_with(
        ch06.check_rope(lambda x, p: _rope(x, p, slow=True)), "once per dimension, not once per"
    )
    assert failed_with(ch06.check_rope(lambda x, p: _rope(x, p).float()), "x's dtype")
    assert failed_with(ch06.check_rope(lambda x, p: x), "largest difference")
    assert not ch06.check_rope(lambda x, p: "rope")


# ---- 6.5, 6.6 predictions -----------------------------------------------------------------


def _score(m, n):
    q, k = ch06.shifted_score_setup()
    return (apply_rope(q, torch.tensor([m])) * apply_rope(k, torch.tensor([n]))).sum().item()


def test_shifted_score():
    assert ch06.check_shifted_score(_score(5, 3)).passed
    assert ch06.check_shifted_score(round(_score(5, 3), 4)).passed
    assert ch06.check_shifted_score(torch.tensor(_score(5, 3))).passed
    assert abs(_score(5, 3) - _score(3, 5)) > 0.1  # the two named answers differ
    assert failed_with(ch06.check_shifted_score(_score(3, 5)), "not symmetric")
    q, k = ch06.shifted_score_setup()
    assert failed_with(ch06.check_shifted_score((q * k).sum().item()), "without any rotation")
    assert failed_with(ch06.check_shifted_score("1.2"), "expected a number")
    assert ch06.check_shifted_score(None).status == "not attempted"


@pytest.mark.parametrize(
    "answer, text",
    [
        (80, "without interpolation"),
        (320.0, "multiplied the positions"),
        (25, "query alone"),
        (7, "is not right"),
        (80 % (2 * math.pi), "without interpolation"),  # a mistake is named reduced too
        (25 - 2 * math.pi, "query alone"),
        (float("inf"), "is not right"),
        # the key's angle minus the query's: the theorem's R_(n-m), named as a sign mistake
        (-20, "sign is the other way round"),
        (-20 % (2 * math.pi), "sign is the other way round"),
        (-20 + 4 * math.pi, "sign is the other way round"),
    ],
)
def test_interpolated_angle_mistakes(answer, text):
    result = ch06.check_interpolated_angle(answer)
    assert failed_with(result, text), result.message
    # never the answer (the case's own "key at 20" is data the task states)
    verdict = result.message.split("factor 4: ", 1)[1].replace(f"{float(answer)!r}", "")
    assert "20" not in verdict and "1.15" not in verdict


def test_interpolated_angle():
    assert ch06.check_interpolated_angle(20).passed
    assert ch06.check_interpolated_angle(80 / 4).passed
    # the same angle modulo 2 pi, as the chapter's next cell prints it (issue 30)
    assert ch06.check_interpolated_angle(20 % (2 * math.pi)).passed
    assert ch06.check_interpolated_angle(round(20 % (2 * math.pi), 4)).passed
    assert ch06.check_interpolated_angle(20 - 4 * math.pi).passed
    assert not ch06.check_interpolated_angle(20 % (2 * math.pi) + 0.01).passed
    assert ch06.check_interpolated_angle(None).status == "not attempted"


def test_order_check_names_the_causal_mask():
    """Issue 45: "without an encoding, order cannot matter" contradicted section 6.1's causal
    mask caveat: with a causal mask and no encoding, permuting the tokens changes more than
    the order of the outputs. The check's stem and feedback say "and without a causal mask"."""
    from selfattn import quizzes, scaled_dot_product_attention

    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 4, generator=g, dtype=torch.float64)
    perm = torch.tensor([3, 0, 4, 1, 2])
    plain = scaled_dot_product_attention(x, x, x)
    assert torch.allclose(scaled_dot_product_attention(x[perm], x[perm], x[perm]), plain[perm])
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    masked = scaled_dot_product_attention(x, x, x, causal)
    permuted = scaled_dot_product_attention(x[perm], x[perm], x[perm], causal)
    assert not torch.allclose(permuted, masked[perm])  # order matters through the mask
    item = quizzes.check(6, "order")["questions"][0]
    assert "causal mask" in item["question"]["en"] and "因果掩码" in item["question"]["zh"]
    for answer in item["answers"]:
        text = answer["feedback"]["en"]
        if "order cannot matter" in text:
            assert "without a causal mask" in text
