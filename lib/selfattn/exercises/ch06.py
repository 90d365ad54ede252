"""Checkers for chapter 6, "Positional encodings".

In the chapter's order (:data:`EXERCISES`, whose labels number them):

* ``sinusoidal`` :func:`check_sinusoidal` (find the bug): the sinusoidal encoding ``(n, d)``
  of section 6.2; while the answer still computes what the chapter's planted bug computes,
  the exercise counts as not attempted.
* ``shift`` :func:`check_shift_matrix` (build): the ``d x d`` matrix that shifts the
  sinusoidal encoding stored in another layout (all sines, then all cosines) by ``k``.
* ``alibi`` :func:`check_alibi_slopes` (build): ALiBi's per-head slopes, including head counts
  that are not powers of two.
* ``rope`` :func:`check_rope` (find the bug): rotary position embedding in bfloat16,
  against :func:`rope_buggy`.
* ``predict-score`` :func:`check_shifted_score` (predict): the RoPE score after moving both
  positions.
* ``predict-pi`` :func:`check_interpolated_angle` (predict): an angle under position
  interpolation.

Each compares the reader's answer with the library's (:mod:`selfattn.positional`) and, when
the answer is one of the likely mistakes, says which mistake it is.
"""

from __future__ import annotations

import math
import numbers

import torch

from ..i18n import _
from ..positional import (
    alibi_slopes,
    apply_rope,
    sinusoidal_encoding,
    sinusoidal_shift_matrix,
)
from ._core import (
    Mismatch,
    NotAttempted,
    call_answer,
    checker,
    expect_close,
    expect_predicted_close,
    expect_true,
)

__all__ = [
    "EXERCISES",
    "check_sinusoidal",
    "PLANTED_SINUSOIDAL",
    "check_shift_matrix",
    "check_alibi_slopes",
    "check_rope",
    "rope_buggy",
    "PLANTED_ROPE",
    "ROPE_CASES",
    "shifted_score_setup",
    "check_shifted_score",
    "check_interpolated_angle",
]

#: The labels of chapter 6's exercises (``ex-ch06-<label>``), in the chapter's order.
EXERCISES = ("sinusoidal", "shift", "alibi", "rope", "predict-score", "predict-pi")


def _tensor(got, case: str) -> torch.Tensor:
    if not isinstance(got, torch.Tensor):
        try:
            got = torch.as_tensor(got)
        except Exception:
            raise Mismatch(
                _("case {case}: expected a tensor, got {type}", case=case, type=type(got).__name__)
            ) from None
    return got.double()


def _number(got, case: str) -> float:
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        got = got.item()
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        raise Mismatch(
            _(
                "case {case}: expected a number, got {type} {got}",
                case=case,
                type=type(got).__name__,
                got=f"{got!r:.40}",
            )
        )
    return float(got)


def _pe(n: int, d: int, *, swap=False, exponent=2, halves=False) -> torch.Tensor:
    """The sinusoidal encoding, or one of its likely mistakes."""
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-exponent * torch.arange(d // 2, dtype=torch.float64) / d)
    s, c = torch.sin(pos * omega), torch.cos(pos * omega)
    if swap:
        s, c = c, s
    if halves:
        return torch.cat([s, c], dim=1)
    return torch.stack([s, c], dim=-1).flatten(1)


#: The symptom of the mistake planted in the chapter's ``sinusoidal_buggy`` (its checker's
#: key for it): it states what the reader's output shows, not what it should be.
PLANTED_SINUSOIDAL = (
    "the planted mistake is still there: your row for position 0 is the same as "
    "sinusoidal_buggy's (compare it with what the exercise says every pair should read there)"
)


@checker("sinusoidal", "sinusoidal encoding, fixed")
def check_sinusoidal(answer):
    """``answer(n, d)`` -> the sinusoidal encoding ``PE`` ``(n, d)`` of section 6.2, base
    10000. While the answer still computes what the chapter's planted bug computes, on every
    case, the exercise counts as not attempted, as in the book's other find-the-bug
    exercises."""
    cases, planted = [], True
    for n, d in ((1, 2), (4, 2), (10, 8), (7, 6), (50, 64)):
        case = f"n={n}, d={d}"
        got = _tensor(call_answer(answer, n, d), case)
        wrong = _pe(n, d, swap=True)
        planted = (
            planted and got.shape == wrong.shape and torch.allclose(got, wrong, atol=1e-12, rtol=0)
        )
        cases.append((case, n, d, got))
    if planted:
        raise NotAttempted()
    for case, n, d, got in cases:
        expect_close(
            got,
            sinusoidal_encoding(n, d, dtype=torch.float64),
            case=case,
            mistakes={
                _(PLANTED_SINUSOIDAL): _pe(n, d, swap=True),
                _(
                    "omega_i = 10000^(-i/d): the exponent steps once per column, so the slowest "
                    "pair turns at 10000^(-1/2), far faster than the paper's"
                ): _pe(n, d, exponent=1),
                _(
                    "all sines first, then all cosines: that is the rotate-half arrangement, a "
                    "permutation of the paper's columns"
                ): _pe(n, d, halves=True),
            },
        )


def _halves(d: int) -> torch.Tensor:
    """The columns of the interleaved encoding in the halves layout (all sines, then cosines)."""
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def _shift(k: int, d: int, *, interleaved=False, back=False, one_step=False) -> torch.Tensor:
    """``M_k`` for the halves layout, or one of the likely mistakes."""
    m = sinusoidal_shift_matrix(-k if back else 1 if one_step else k, d, dtype=torch.float64)
    if interleaved:
        return m
    perm = _halves(d)
    return m[perm][:, perm]


@checker("shift", "the shift in another layout")
def check_shift_matrix(answer):
    """``answer(k, d)`` -> ``(d, d)`` matrix ``M`` with ``H[pos + k] = M @ H[pos]`` (base 10000).

    ``H[pos]`` is the sinusoidal encoding in the halves layout: the ``d / 2`` sines
    ``sin(pos omega_i)`` first, then the ``d / 2`` cosines, ``omega_i = 10000^(-2i/d)``.
    """
    for k, d in ((1, 4), (3, 8), (0, 4), (-2, 6), (10, 16)):
        case = f"k={k}, d={d}"
        got = _tensor(call_answer(answer, k, d), case)
        expected = _shift(k, d)
        mistakes = {
            _(
                "that is M_k of section 6.2, for the interleaved layout: here the sines come "
                "first and the cosines after them, so each pair is split across the two "
                "halves"
            ): _shift(k, d, interleaved=True),
            _(
                "your matrix moves back by k: it takes H[pos + k] to H[pos] (M_k transposed is "
                "M_-k: did you build it for row vectors?)"
            ): _shift(k, d, back=True),
            _("your matrix shifts by one position whatever k is"): _shift(k, d, one_step=True),
        }
        expect_close(
            got,
            expected,
            case=case,
            mistakes={m: v for m, v in mistakes.items() if not torch.allclose(v, expected)},
        )


def _pow2_slopes(h: int, *, start_at_one=False) -> torch.Tensor:
    first = 0 if start_at_one else 1
    return torch.tensor([2.0 ** (-8.0 * (i + first) / h) for i in range(h)], dtype=torch.float64)


@checker("alibi", "ALiBi slopes")
def check_alibi_slopes(answer):
    """``answer(h)`` -> the ``h`` slopes of Press et al. (2022), a sequence or tensor ``(h,)``."""
    for h in (1, 2, 4, 8, 16, 3, 5, 6, 12, 20):
        case = f"num_heads={h}"
        got = _tensor(call_answer(answer, h), case).flatten()
        expect_close(
            got,
            alibi_slopes(h).double(),
            case=case,
            atol=1e-6,
            rtol=1e-5,
            mistakes={
                _(
                    "you used the power-of-two formula 2^(-8(i+1)/h) for every h: right for "
                    "1, 2, 4, 8, ... heads, not for the other counts"
                ): (_pow2_slopes(h)),
                _("your first slope is 2^0 = 1, one step above the paper's first"): _pow2_slopes(
                    h, start_at_one=True
                ),
            },
        )


def rope_buggy(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """RoPE of ``x (n, d)`` at integer ``positions (n,)``, with the planted bug of "RoPE in
    bfloat16": right in float32 and at the first positions, wrong further on."""
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    angle = positions[:, None].to(x.dtype) * theta  # (n, d/2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    even, odd = x[:, 0::2], x[:, 1::2]
    out = torch.empty_like(x)
    out[:, 0::2] = even * cos - odd * sin
    out[:, 1::2] = even * sin + odd * cos
    return out


def _rope_low(x, positions, *, theta_low=False, positions_low=False) -> torch.Tensor:
    """RoPE with the angles in float32 but one ingredient rounded to ``x``'s dtype first."""
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=x.dtype if theta_low else torch.float32) / d)
    pos = positions.to(x.dtype) if positions_low else positions
    angle = pos[:, None].to(torch.float32) * theta.to(torch.float32)
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    out = torch.empty_like(x)
    out[:, 0::2] = x[:, 0::2] * cos - x[:, 1::2] * sin
    out[:, 1::2] = x[:, 0::2] * sin + x[:, 1::2] * cos
    return out


#: The cases of "RoPE in bfloat16", as (dtype, d, positions); the tolerance is a few
#: roundings of the dtype, relative to the largest entry of x.
ROPE_CASES = (
    (torch.bfloat16, 8, list(range(8))),
    (torch.bfloat16, 64, [10, 20, 50, 100]),
    (torch.bfloat16, 64, [300, 1000, 2049, 4097, 8191]),
    (torch.float16, 16, [5, 700, 3000]),
    (torch.float32, 32, [0, 100, 8191]),
)
_ROPE_TOLERANCE = {torch.bfloat16: 2.0**-6, torch.float16: 2.0**-9, torch.float32: 2.0**-10}

#: The mistake planted in :func:`rope_buggy` (its checker's key for it).
PLANTED_ROPE = "the angles are still computed in the input's own precision"


def _rope_answers(answer) -> tuple[list, bool]:
    """The answer's RoPE of every case as ``(case, x, positions, got)``, and whether it
    computed exactly what :func:`rope_buggy` computes in every case (the bug left in)."""
    g = torch.Generator().manual_seed(6)
    results, planted = [], True
    for dtype, d, positions in ROPE_CASES:
        x = torch.randn(len(positions), d, generator=g, dtype=torch.float64).to(dtype)
        pos = torch.tensor(positions)
        case = _(
            "{dtype}, d={d}, positions {first}..{last}",
            dtype=str(dtype)[6:],
            d=d,
            first=positions[0],
            last=positions[-1],
        )
        got = call_answer(answer, x, pos)
        try:
            same = torch.equal(torch.as_tensor(got), rope_buggy(x, pos))
        except (TypeError, ValueError, RuntimeError):
            same = False
        planted = planted and same
        results.append((case, x, pos, got))
    return results, planted


def _rope_mistakes(x, pos, expected: torch.Tensor, atol: float) -> dict:
    """The likely wrong RoPEs of ``x`` at ``pos``, by diagnosis: those that differ from
    ``expected`` by more than ``atol`` (a mistake the dtype hides here is not one)."""
    x64 = x.double()
    d = x.shape[-1]
    mistakes = {
        _(PLANTED_ROPE): rope_buggy(x, pos),
        _(
            "the frequencies theta_i are still rounded to the input's precision: at large "
            "positions a tiny error in theta_i is a large error in the angle"
        ): _rope_low(x, pos, theta_low=True),
        _(
            "the positions went through the input's precision, which cannot hold every "
            "large integer"
        ): _rope_low(x, pos, positions_low=True),
        _("you rotate clockwise, by -p theta_i: that is R_-p, not the paper's R_p"): (
            apply_rope(x64, -pos)
        ),
        _(
            "you paired dimension i with i + d/2 (the rotate-half layout), which is not this "
            "RoPE's pairing"
        ): apply_rope(x64, pos, layout="half"),
        _("theta_i = 10000^(-i/d): the frequencies step once per dimension, not once per pair"): (
            apply_rope(x64, pos, frequencies=10000.0 ** (-torch.arange(d // 2) / d))
        ),
    }
    return {
        name: wrong.double()
        for name, wrong in mistakes.items()
        if (wrong.double() - expected).abs().max() > atol
    }


def _expect_rope(case: str, x, pos, got) -> None:
    """``got`` must be RoPE of ``x`` at ``pos`` in ``x``'s dtype, within a few roundings."""
    expect_true(
        torch.is_tensor(got) and got.dtype == x.dtype,
        _(
            "case {case}: return a tensor of x's dtype ({dtype}), got {value}",
            case=case,
            dtype=x.dtype,
            value=got.dtype if torch.is_tensor(got) else type(got).__name__,
        ),
    )
    x64 = x.double()
    atol = _ROPE_TOLERANCE[x.dtype] * x64.abs().max().item()
    expected = apply_rope(x64, pos)
    mistakes = _rope_mistakes(x, pos, expected, atol)
    expect_close(got.double(), expected, case=case, atol=atol, rtol=0, mistakes=mistakes)


@checker("rope", "RoPE in bfloat16")
def check_rope(answer):
    """``answer(x, positions)`` must return RoPE of ``x (n, d)`` (adjacent pairs,
    counter-clockwise, ``theta_i = 10000^(-2i/d)``) at the integer ``positions (n,)``, in
    ``x``'s dtype, as accurate as that dtype allows: ``x`` is bfloat16, float16 or float32,
    and the positions reach 8191. While the answer still computes what :func:`rope_buggy`
    computes, the exercise counts as not attempted, as in the book's other find-the-bug
    exercises."""
    results, planted = _rope_answers(answer)
    if planted:
        raise NotAttempted()
    for case, x, pos, got in results:
        _expect_rope(case, x, pos, got)


def shifted_score_setup() -> tuple[torch.Tensor, torch.Tensor]:
    """The query and key ``(1, 8)`` of "the RoPE score after a shift" (fixed by a seed)."""
    g = torch.Generator().manual_seed(65)
    q, k = torch.randn(2, 1, 8, generator=g, dtype=torch.float64)
    return q, k


def _score(m: int, n: int) -> float:
    q, k = shifted_score_setup()
    return (apply_rope(q, torch.tensor([m])) * apply_rope(k, torch.tensor([n]))).sum().item()


@checker("predict-score", "the RoPE score after a shift")
def check_shifted_score(answer):
    """``answer``: the predicted score of ``q`` at position 105 against ``k`` at 103."""
    case = _("q at position 105, k at position 103")
    q, k = shifted_score_setup()
    expect_predicted_close(
        _number(answer, case),
        _score(105, 103),
        {
            _(
                "that is score(3, 5), the query 2 positions *before* the key: here the query is "
                "2 positions after it, and RoPE's score is not symmetric in the offset"
            ): _score(3, 5),
            _(
                "that is q . k without any rotation: the rotations cancel only when both "
                "positions are equal; here the offset is 2"
            ): (q * k).sum().item(),
        },
        case=case,
        atol=1e-3,
    )


def _same_angle(a: float, b: float, atol: float = 1e-3) -> bool:
    """Whether the angles ``a`` and ``b`` (radians) agree modulo 2π, to ``atol``."""
    return math.isfinite(a - b) and abs(math.remainder(a - b, 2 * math.pi)) <= atol


@checker("predict-pi", "position interpolation")
def check_interpolated_angle(answer):
    """``answer``: the angle (radians) by which the query at 100 is turned relative to the
    key at 20 in pair 0 under PI, s = 4: the query's angle minus the key's.

    An angle is a turn: any answer equal to the right one modulo 2π passes (the chapter's
    next cell prints it reduced to [0, 2π)), and a named mistake is recognised reduced too.
    The key's angle minus the query's (the angle of the theorem's ``R_(n-m)``, a defensible
    reading with the opposite sign) is named as a sign mistake.
    """
    case = _("pair 0, query at 100, key at 20, factor 4")
    expected = (100 - 20) / 4
    mistakes = {
        _("that is the angle without interpolation, as if the factor s = 4 did nothing"): 80.0,
        _("you multiplied the positions by the factor s = 4"): 320.0,
        _(
            "that is the angle of the query alone: the score depends on the difference of the "
            "two angles, not on the query's alone"
        ): 100 / 4,
        _(
            "the sign is the other way round: that is the key's angle minus the query's, the "
            "angle of R_(n-m) in the score"
        ): -expected,
    }
    got = _number(answer, case)
    # the same turn as the answer, or as a named mistake, is judged as that value
    for angle in (expected, *mistakes.values()):
        if _same_angle(got, angle):
            got = angle
            break
    expect_predicted_close(got, expected, mistakes, case=case, atol=1e-3)
