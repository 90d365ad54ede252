"""Chapter 6's checkers: the reference solutions pass, plausible mistakes and the stub do not."""

import math

import torch
from selfattn.exercises import ch06


def stub(*args):
    raise NotImplementedError


# ---- 6.1 sinusoidal -------------------------------------------------------------------


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
    assert ch06.check_sinusoidal(
        lambda n, d: _sinusoidal(n, d).float().numpy()
    ).passed  # numpy is fine too
    assert ch06.check_sinusoidal(lambda n, d: _sinusoidal(n, d, swap=True)).status == "failed"
    assert (
        ch06.check_sinusoidal(lambda n, d: _sinusoidal(n, d, exponent=lambda i, d: i / d)).status
        == "failed"
    )
    assert (
        ch06.check_sinusoidal(lambda n, d: _sinusoidal(n, d, halves=True)).status == "failed"
    )  # sin | cos halves
    assert ch06.check_sinusoidal(stub).status == "not attempted"


# ---- 6.2 shift matrix -----------------------------------------------------------------


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
    assert (
        ch06.check_shift_matrix(lambda k, d: _shift(k, d, sign=-1.0)).status == "failed"
    )  # the transpose: M_{-k}
    assert (
        ch06.check_shift_matrix(lambda k, d: _shift(k, d, use_k=False)).status == "failed"
    )  # always one step
    assert ch06.check_shift_matrix(lambda k, d: torch.eye(d)).status == "failed"
    assert ch06.check_shift_matrix(stub).status == "not attempted"


# ---- 6.3 ALiBi slopes -----------------------------------------------------------------


def _slopes(h):
    def pow2(h):
        return [2.0 ** (-8.0 * (i + 1) / h) for i in range(h)]

    p = 2 ** int(math.log2(h))
    return pow2(p) + pow2(2 * p)[0::2][: h - p]


def test_alibi_slopes():
    assert ch06.check_alibi_slopes(_slopes).passed
    assert ch06.check_alibi_slopes(lambda h: torch.tensor(_slopes(h))).passed
    # the power-of-two formula used for every h: right for 1, 2, 4, ... but not for 3, 5, 6, 12
    assert (
        ch06.check_alibi_slopes(lambda h: [2.0 ** (-8.0 * (i + 1) / h) for i in range(h)]).status
        == "failed"
    )
    assert (
        ch06.check_alibi_slopes(lambda h: [2.0 ** (-8.0 * i / h) for i in range(h)]).status
        == "failed"
    )  # starts at 1
    # rounding h up to a power of two and keeping the first h slopes
    assert (
        ch06.check_alibi_slopes(lambda h: _slopes(2 ** math.ceil(math.log2(h)))[:h]).status
        == "failed"
    )
    assert ch06.check_alibi_slopes(stub).status == "not attempted"


# ---- 6.4 RoPE -------------------------------------------------------------------------


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
    assert (
        ch06.check_rope(lambda x, p: _rope(x, p, sign=-1.0)).status == "failed"
    )  # rotates the wrong way
    assert (
        ch06.check_rope(lambda x, p: _rope(x, p, halves=True)).status == "failed"
    )  # GPT-NeoX layout, not the paper's
    assert (
        ch06.check_rope(lambda x, p: _rope(x, p, exponent=lambda i, d: i / d)).status == "failed"
    )
    assert ch06.check_rope(stub).status == "not attempted"
