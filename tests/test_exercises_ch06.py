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
        ch06.check_sinusoidal(lambda n, d: _sinusoidal(n, d, swap=True)), "still swapped"
    )
    assert failed_with(
        ch06.check_sinusoidal(lambda n, d: _sinusoidal(n, d, exponent=lambda i, d: i / d)),
        "the exponent runs over the pairs",
    )
    assert failed_with(
        ch06.check_sinusoidal(lambda n, d: _sinusoidal(n, d, halves=True)),
        "rotate-half arrangement",
    )
    # an unrelated wrong answer gets the plain comparison, not a diagnosis
    plain = ch06.check_sinusoidal(lambda n, d: _sinusoidal(n, d) + 0.1)
    assert failed_with(plain, "largest difference")
    assert ch06.check_sinusoidal(stub).status == "not attempted"


# ---- 6.2 shift matrix (build) -------------------------------------------------------------


def _shift(k, d, *, sign=1.0, use_k=True):
    M = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        a = (k if use_k else 1) * 10000.0 ** (-2 * i / d)
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(
            [[math.cos(a), sign * math.sin(a)], [-sign * math.sin(a), math.cos(a)]],
            dtype=torch.float64,
        )
    return M


def test_shift_matrix():
    assert ch06.check_shift_matrix(_shift).passed
    assert failed_with(
        ch06.check_shift_matrix(lambda k, d: _shift(k, d, sign=-1.0)), "which is M_-k"
    )
    assert failed_with(
        ch06.check_shift_matrix(lambda k, d: _shift(k, d, use_k=False)), "whatever k is"
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


# ---- 6.4 RoPE (build) ---------------------------------------------------------------------


def _rope(x, positions, *, sign=1.0, halves=False, exponent=lambda i, d: 2 * i / d):
    n, d = x.shape
    theta = torch.tensor([10000.0 ** (-exponent(i, d)) for i in range(d // 2)], dtype=x.dtype)
    angle = positions[:, None].to(x.dtype) * theta * sign
    cos, sin = torch.cos(angle), torch.sin(angle)
    if halves:
        a, b = x[:, : d // 2], x[:, d // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=1)
    out = x.clone()
    out[:, 0::2] = x[:, 0::2] * cos - x[:, 1::2] * sin
    out[:, 1::2] = x[:, 0::2] * sin + x[:, 1::2] * cos
    return out


def test_rope():
    assert ch06.check_rope(_rope).passed
    assert failed_with(ch06.check_rope(lambda x, p: _rope(x, p, sign=-1.0)), "clockwise")
    assert failed_with(ch06.check_rope(lambda x, p: _rope(x, p, halves=True)), "rotate-half")
    assert failed_with(
        ch06.check_rope(lambda x, p: _rope(x, p, exponent=lambda i, d: i / d)),
        "frequency index",
    )
    assert ch06.check_rope(stub).status == "not attempted"


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
        (320.0, "divides"),
        (25, "query alone"),
        (7, "largest"),
        (80 % (2 * math.pi), "without interpolation"),  # a mistake is named reduced too
        (25 - 2 * math.pi, "query alone"),
        (float("inf"), "largest"),
    ],
)
def test_interpolated_angle_mistakes(answer, text):
    assert failed_with(ch06.check_interpolated_angle(answer), text)


def test_interpolated_angle():
    assert ch06.check_interpolated_angle(20).passed
    assert ch06.check_interpolated_angle(80 / 4).passed
    # the same angle modulo 2 pi, as the chapter's next cell prints it (issue 30)
    assert ch06.check_interpolated_angle(20 % (2 * math.pi)).passed
    assert ch06.check_interpolated_angle(round(20 % (2 * math.pi), 4)).passed
    assert ch06.check_interpolated_angle(20 - 4 * math.pi).passed
    assert not ch06.check_interpolated_angle(20 % (2 * math.pi) + 0.01).passed
    assert ch06.check_interpolated_angle(None).status == "not attempted"
