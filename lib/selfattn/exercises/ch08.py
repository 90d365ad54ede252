"""Checkers for chapter 8's exercises (windowed decoding, sparse patterns, linear attention).

In the chapter's order (:data:`EXERCISES`, whose labels number them): ``rolling`` (build,
:func:`check_rolling_cache`), ``strided`` (predict, then run, :func:`check_strided_prediction`),
``prefix`` (find the bug, :func:`check_causal_linear` against :func:`causal_linear_buggy`)
and ``predict-half`` (predict, then run, :func:`check_half_weight`). Not in the chapter
(:data:`EXTRA_EXERCISES`): ``decay``, a decoding step with a decay gate
(:func:`check_decayed_step`, and its ungated form :func:`check_linear_step`). A wrong
answer that is a mistake the checker recognises is named.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..efficient.linear import LinearAttentionState, linear_attention, linear_attention_step
from ..efficient.sparse import strided_mask
from ..i18n import _
from ._core import (
    Mismatch,
    NotAttempted,
    call_answer,
    checker,
    expect_close,
    expect_predicted,
    expect_true,
)

__all__ = [
    "EXERCISES",
    "ROLLING_CASES",
    "check_rolling_cache",
    "rolling_cache_mistakes",
    "STRIDED_CASE",
    "check_strided_prediction",
    "strided_mistakes",
    "causal_linear_buggy",
    "check_causal_linear",
    "causal_linear_mistakes",
    "EXTRA_EXERCISES",
    "HALF_WEIGHT_CASE",
    "check_half_weight",
    "half_weight_mistakes",
    "check_decayed_step",
    "decayed_step_mistakes",
    "check_linear_step",
]

#: The labels of chapter 8's exercises (``ex-ch08-<label>``), in the chapter's order.
EXERCISES = ("rolling", "strided", "prefix", "predict-half")
#: Checkers that no exercise of the chapter uses, numbered after :data:`EXERCISES`.
EXTRA_EXERCISES = ("decay",)


def _phi(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1


# -- Build: a rolling cache for sliding-window decoding ----------------------------------

#: The decoding runs of the rolling-cache checker, as (window, steps, d, d_v).
ROLLING_CASES = ((4, 11, 8, 3), (1, 4, 4, 2), (3, 3, 4, 4), (5, 13, 6, 2))


def _attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: bool = True):
    """Softmax attention of one query over ``keys (m, d)``; zeros when there is no key."""
    if keys.shape[0] == 0:
        return torch.zeros(values.shape[-1], dtype=values.dtype)
    s = keys @ q / (q.shape[-1] ** 0.5 if scale else 1.0)
    return torch.softmax(s, -1) @ values


def _rolling_variants(q, ks, vs, t: int, w: int) -> dict[str, torch.Tensor]:
    """The right output of step ``t`` ("right") and each named mistake's, from the history."""
    lo = max(0, t - w + 1)
    qt = q[t]
    empty = w - 1 - t  # the slots not filled yet, at the first steps
    zk, zv = ks.new_zeros(max(empty, 0), ks.shape[1]), vs.new_zeros(max(empty, 0), vs.shape[1])
    kept = [*range(w - 1), t] if t >= w else list(range(t + 1))
    return {
        "right": _attend(qt, ks[lo : t + 1], vs[lo : t + 1]),
        _(
            "at the first steps the buffer's unused slots took part in the softmax: a slot "
            "holding zeros still gets a weight"
        ): _attend(qt, torch.cat([ks[lo : t + 1], zk]), torch.cat([vs[lo : t + 1], zv])),
        _("the output left out the token's own key and value: a causal query sees itself"): (
            _attend(qt, ks[max(0, t - w) : t], vs[max(0, t - w) : t])
        ),
        _("once the buffer was full, the entry replaced was not the oldest one"): _attend(
            qt, ks[kept], vs[kept]
        ),
        _("the scores are not scaled as everywhere in this book"): _attend(
            qt, ks[lo : t + 1], vs[lo : t + 1], scale=False
        ),
    }


def rolling_cache_mistakes() -> list[str]:
    """The mistakes :func:`check_rolling_cache` names."""
    x = torch.zeros(3, 2, dtype=torch.float64)
    return [k for k in _rolling_variants(x, x, x, 2, 2) if k != "right"]


def _missing_row(rows: torch.Tensor, buf: torch.Tensor) -> int | None:
    """The first row of ``rows`` that no slot of ``buf`` holds (``None`` if all are there).

    Rows are matched as a multiset: each slot holds at most one of them, in any order."""
    free = torch.ones(buf.shape[0], dtype=torch.bool)
    for j, row in enumerate(rows):
        hits = free & torch.isclose(buf, row, atol=1e-9, rtol=1e-9).all(-1)
        if not hits.any():
            return j
        free[int(hits.nonzero()[0])] = False
    return None


def _check_window_held(k_buf, v_buf, ks, vs, t: int, case: str) -> None:
    """After step ``t`` the buffers hold the keys and values of the last ``min(t + 1, w)``
    tokens, token by token in one slot (the slots in any order), and zeros in the others:
    the buffers are the cache, not a decoration beside a history kept elsewhere."""
    w = k_buf.shape[0]
    lo = max(0, t - w + 1)
    held = (
        _("token {t}", t=t)
        if lo == t
        else _("the last {count} tokens ({lo} to {t})", count=t + 1 - lo, lo=lo, t=t)
    )
    for buf, rows, what, one in (
        (k_buf, ks, _("keys"), _("key")),
        (v_buf, vs, _("values"), _("value")),
    ):
        j = _missing_row(rows[lo : t + 1], buf)
        expect_true(
            j is None,
            _(
                "case {case}: the returned buffers must hold the {what} of {held}, in any slot "
                "order; token {value}'s {value2} is in none of the slots. The next step reads "
                "only what the buffers hold",
                case=case,
                what=what,
                held=held,
                value=lo + (j or 0),
                value2=one,
            ),
        )
    pairs = torch.cat([k_buf, v_buf], -1)
    j = _missing_row(torch.cat([ks[lo : t + 1], vs[lo : t + 1]], -1), pairs)
    expect_true(
        j is None,
        _(
            "case {case}: token {value}'s key and value are in different slots: keep each "
            "token's key and value in the same slot",
            case=case,
            value=lo + (j or 0),
        ),
    )
    extra = pairs.abs().sum(-1) > 0
    expect_true(
        int(extra.sum()) == t + 1 - lo,
        _(
            "case {case}: the buffers hold more than the keys and values of {held}: the other "
            "slots must still hold zeros",
            case=case,
            held=held,
        ),
    )


def _buffer(got, shape, case: str) -> torch.Tensor:
    if not (torch.is_tensor(got) and tuple(got.shape) == shape):
        found = tuple(got.shape) if torch.is_tensor(got) else type(got).__name__
        raise Mismatch(
            _(
                "case {case}: return each buffer as a tensor of shape {shape}, got {found}: a "
                "rolling cache keeps its size",
                case=case,
                shape=shape,
                found=found,
            )
        )
    return got.detach().to(torch.float64)


@checker("rolling", "a rolling cache for a sliding window")
def check_rolling_cache(answer) -> None:
    """``answer(k_buf, v_buf, t, q_t, k_t, v_t)`` is one decoding step of causal sliding-window
    attention whose window is the buffers' length: ``k_buf (window, d)`` and ``v_buf (window,
    d_v)`` hold what the earlier steps left there (zeros before the first step), ``t`` counts
    the steps from 0 and ``q_t, k_t (d,)``, ``v_t (d_v,)`` are token ``t``'s. It must return
    ``(out_t, k_buf, v_buf)``: the token's attention output over the last ``window`` tokens
    (itself included, scores scaled by ``1 / sqrt(d)``) and the buffers for the next step,
    still of the same shape. The checker runs whole sequences, feeding each step the buffers
    the previous one returned, and compares every output with attention over the window. After
    every step the buffers must hold the keys and values of the tokens in the window, each
    token's key and value in one slot (the slots in any order), and zeros in the other
    slots."""
    g = torch.Generator().manual_seed(81)
    for w, steps, d, dv in ROLLING_CASES:
        q = 2 * torch.randn(steps, d, generator=g, dtype=torch.float64)
        ks = torch.randn(steps, d, generator=g, dtype=torch.float64)
        vs = torch.randn(steps, dv, generator=g, dtype=torch.float64)
        k_buf = torch.zeros(w, d, dtype=torch.float64)
        v_buf = torch.zeros(w, dv, dtype=torch.float64)
        for t in range(steps):
            case = _("window={w}, step t={t}", w=w, t=t)
            got = call_answer(answer, k_buf, v_buf, t, q[t], ks[t], vs[t])
            expect_true(
                isinstance(got, (tuple, list)) and len(got) == 3,
                _("case {case}: return a tuple (out_t, k_buf, v_buf)", case=case),
            )
            variants = _rolling_variants(q, ks, vs, t, w)
            right = variants.pop("right")
            mistakes = {
                k: v for k, v in variants.items() if not torch.allclose(v, right, atol=1e-9)
            }
            expect_close(got[0], right, case=case, atol=1e-9, rtol=1e-9, mistakes=mistakes)
            k_buf = _buffer(got[1], (w, d), case)
            v_buf = _buffer(got[2], (w, dv), case)
            _check_window_held(k_buf, v_buf, ks, vs, t, case)


# -- Predict, then run: the entries of a strided pattern ---------------------------------

#: The strided-pattern prediction, as (n, stride), causal.
STRIDED_CASE = (20, 4)


def _strided_variants() -> dict[str, int]:
    n, s = STRIDED_CASE
    local = sum(min(i + 1, s) for i in range(n))
    strided = sum(i // s + 1 for i in range(n))
    return {
        "right": int(strided_mask(n, s).sum()),
        _(
            "that counts the local head only (the last 4 positions); the strided head adds every "
            "4th position further back"
        ): local,
        _(
            "that counts the diagonal twice: j = i is in both the local and the strided head, "
            "and the union holds it once"
        ): local + strided,
        _("that is the full causal triangle n (n + 1) / 2, not a sparse pattern"): n
        * (n + 1)
        // 2,
        _(
            "that counts the strided head only; the local head adds the 3 positions just before "
            "each query"
        ): strided,
    }


def strided_mistakes() -> list[str]:
    """The mistakes :func:`check_strided_prediction` names."""
    return [k for k in _strided_variants() if k != "right"]


@checker("strided", "the entries of a strided pattern")
def check_strided_prediction(prediction) -> None:
    """``prediction``: how many True entries ``strided_mask(20, 4)`` has (causal: the union of
    the local head, ``i - j < 4``, and the strided head, ``(i - j) % 4 == 0``, for ``j <= i``)."""
    expect_predicted(prediction, _strided_variants(), case=_("n=20, stride=4"))


# -- Find the bug: causal linear attention with prefix sums -------------------------------


def causal_linear_buggy(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal linear attention with prefix sums, phi = elu + 1, with one planted bug.

    Shapes: q, k ``(..., n, d)``, v ``(..., n, d_v)`` -> ``(..., n, d_v)``.
    """
    fq, fk = _phi(q), _phi(k)
    kv = fk.unsqueeze(-1) * v.unsqueeze(-2)  # (..., n, d, d_v): phi(k_j) v_j^T
    # S_i and z_i: the sums over the keys before token i
    s = torch.cat([torch.zeros_like(kv[..., :1, :, :]), kv.cumsum(-3)[..., :-1, :, :]], -3)
    z = torch.cat([torch.zeros_like(fk[..., :1, :]), fk.cumsum(-2)[..., :-1, :]], -2)
    num = (fq.unsqueeze(-2) @ s).squeeze(-2)
    return num / ((fq * z).sum(-1, keepdim=True) + 1e-6)


def _causal_variants(q, k, v) -> dict[str, torch.Tensor]:
    fq, fk = _phi(q), _phi(k)
    a = fq @ fk.transpose(-2, -1)
    return {
        _("not causal any more: every query sums over all n keys, its future ones included"): (
            linear_attention(q, k, v)
        ),
        _("the normaliser is missing: the weights of a query do not sum to 1"): (a.tril() @ v),
    }


def causal_linear_mistakes() -> list[str]:
    """The mistakes :func:`check_causal_linear` names."""
    q = torch.randn(3, 2)
    return list(_causal_variants(q, q, q))


#: The relative tolerance of :func:`check_causal_linear`. The ``eps = 1e-6`` in the
#: denominator moves an output by ``eps / (phi(q_i) . z_i)`` relative to it, up to about
#: 1.1e-6 on the checker's inputs (whose smallest denominator is about 0.9); an answer that
#: leaves ``eps`` out or puts it elsewhere passes, and every named mistake is off by far more.
_PREFIX_RTOL = 1e-5


@checker("prefix", "causal linear attention with prefix sums")
def check_causal_linear(answer) -> None:
    """``answer(q, k, v)`` must return causal linear attention, phi = elu + 1, eps = 1e-6:
    ``out_i = phi(q_i) S_i / (phi(q_i) . z_i + eps)`` with ``S_i = sum_{j <= i} phi(k_j) v_j^T``
    and ``z_i = sum_{j <= i} phi(k_j)``. While the answer still computes what the planted bug
    (:func:`causal_linear_buggy`) computes, the exercise counts as not attempted, as the
    book's other find-the-bug exercises do. The outputs are compared to a relative tolerance
    of 1e-5, loose enough for an answer without ``eps`` or with it elsewhere."""
    g = torch.Generator().manual_seed(8)
    cases, planted = [], True
    for shape, dv in (((6, 4), 3), ((1, 8), 2), ((2, 3, 7, 4), 5)):
        q, k = (torch.randn(*shape, generator=g, dtype=torch.float64) for _ in range(2))
        v = torch.randn(*shape[:-1], dv, generator=g, dtype=torch.float64)
        got = call_answer(answer, q, k, v)
        cases.append((q, k, v, got))
        try:
            same = torch.allclose(
                torch.as_tensor(got, dtype=torch.float64),
                causal_linear_buggy(q, k, v),
                atol=1e-9,
                rtol=_PREFIX_RTOL,
            )
        except (TypeError, ValueError, RuntimeError):
            same = False
        planted = planted and same
    if planted:
        raise NotAttempted()
    for q, k, v, got in cases:
        case = f"q {tuple(q.shape)}"
        expected = linear_attention(q, k, v, causal=True)
        mistakes = {
            name: wrong
            for name, wrong in _causal_variants(q, k, v).items()
            if not torch.allclose(wrong, expected, atol=1e-9, rtol=_PREFIX_RTOL)
        }
        expect_close(got, expected, case=case, atol=1e-9, rtol=_PREFIX_RTOL, mistakes=mistakes)


# -- Predict, then run: how far back a decay remembers ------------------------------------

#: The half-weight prediction, as (fixed decay gamma, tokens read).
HALF_WEIGHT_CASE = (0.9, 1000)


def _half_weight_variants() -> dict[str, int]:
    gamma, n = HALF_WEIGHT_CASE
    weight = gamma ** torch.arange(n, dtype=torch.float64)  # the newest token first
    share = weight.cumsum(0) / weight.sum()
    right = int((share < 0.5).sum()) + 1
    return {
        "right": right,
        _(
            "that is 1 / (1 - gamma), the usual horizon of a decay; the weight has a long tail, "
            "so "
            "fewer tokens hold half of it"
        ): round(1 / (1 - gamma)),
        _("that many of the newest tokens hold a little less than half of the weight"): right - 1,
        _("that is half of 1 / (1 - gamma), a guess the geometric weights do not support"): round(
            0.5 / (1 - gamma)
        ),
        _("that is half of all the tokens: the decay puts most of the weight on the newest"): n
        // 2,
    }


def half_weight_mistakes() -> list[str]:
    """The mistakes :func:`check_half_weight` names."""
    return [k for k in _half_weight_variants() if k != "right"]


@checker("predict-half", "how far back a decay remembers")
def check_half_weight(prediction) -> None:
    """``prediction``: the smallest number of the newest tokens that hold at least half of the
    output's weight, for decayed linear attention with the fixed decay ``gamma = 0.9`` reading
    1000 tokens whose keys are all equal (so the decay alone sets the weights)."""
    gamma, n = HALF_WEIGHT_CASE
    expect_predicted(
        prediction, _half_weight_variants(), case=_("gamma={gamma}, {n} tokens", gamma=gamma, n=n)
    )


# -- Build: one decoding step with a decay gate --------------------------------------------


def _step_variants(s, z, q, k, v, gamma) -> dict[str, tuple]:
    fq, fk = _phi(q), _phi(k)

    def read(s_new, z_new):
        return (fq @ s_new) / (fq @ z_new + 1e-6)

    write = torch.outer(fk, v)
    right_s, right_z = gamma * s + write, gamma * z + fk
    late_s, late_z = gamma * (s + write), gamma * (z + fk)
    return {
        "right": (read(right_s, right_z), right_s, right_z),
        _(
            "you decayed after writing token t: its own key and value entered the state below "
            "full weight"
        ): (read(late_s, late_z), late_s, late_z),
        _("you read the output before absorbing token t: it misses its own key and value"): (
            read(gamma * s, gamma * z),
            right_s,
            right_z,
        ),
        _("z was not decayed as S was, so the weights no longer sum to 1"): (
            read(right_s, z + fk),
            right_s,
            z + fk,
        ),
    }


def decayed_step_mistakes() -> list[str]:
    """The mistakes :func:`check_decayed_step` names."""
    x = torch.ones(2, dtype=torch.float64)
    return [
        k for k in _step_variants(torch.ones(2, 2, dtype=x.dtype), x, x, x, x, 0.5) if k != "right"
    ]


@checker("decay", "a decoding step with a decay gate")
def check_decayed_step(answer) -> None:
    """``answer(S, z, q_t, k_t, v_t, gamma)`` with state ``S (d, d_v)``, ``z (d,)``, the new
    token's ``q_t, k_t (d,)``, ``v_t (d_v,)`` and a gate ``gamma`` in (0, 1] must return
    ``(out_t, S_new, z_new)``: ``S_new = gamma S + phi(k_t) v_t^T``, ``z_new = gamma z +
    phi(k_t)``, ``out_t = phi(q_t) S_new / (phi(q_t) . z_new + 1e-6)``, phi = elu + 1."""
    g = torch.Generator().manual_seed(9)
    d, dv = 4, 3
    state = LinearAttentionState.empty((), d, dv, dtype=torch.float64)
    for t, gamma in enumerate((0.9, 0.5, 1.0, 0.25, 0.7)):
        q, k = (torch.randn(d, generator=g, dtype=torch.float64) for _ in range(2))
        v = torch.randn(dv, generator=g, dtype=torch.float64)
        got = call_answer(answer, state.s.clone(), state.z.clone(), q, k, v, gamma)
        expect_true(
            isinstance(got, (tuple, list)) and len(got) == 3,
            _("step {t}: return a tuple (out_t, S_new, z_new)", t=t),
        )
        variants = _step_variants(state.s, state.z, q, k, v, gamma)
        right = variants.pop("right")
        for part, name in enumerate(("out_t", "S_new", "z_new")):
            mistakes = {
                diagnosis: wrong[part]
                for diagnosis, wrong in variants.items()
                if not torch.allclose(wrong[part], right[part], atol=1e-9, rtol=1e-7)
            }
            expect_close(
                got[part],
                right[part],
                case=_("step {t} (gamma={gamma}): {name}", t=t, gamma=gamma, name=name),
                atol=1e-9,
                rtol=1e-7,
                mistakes=mistakes,
            )
        _out, state = linear_attention_step(state, q, k, v, decay=gamma)


@checker("decay", "a step of causal linear attention, without decay")
def check_linear_step(answer) -> None:
    """``answer(S, z, q_t, k_t, v_t)``: :func:`check_decayed_step` with ``gamma = 1``, returning
    ``(out_t, S_new, z_new)``."""
    g = torch.Generator().manual_seed(9)
    d, dv = 4, 3
    state = LinearAttentionState.empty((), d, dv, dtype=torch.float64)
    for t in range(5):
        q, k = (torch.randn(d, generator=g, dtype=torch.float64) for _ in range(2))
        v = torch.randn(dv, generator=g, dtype=torch.float64)
        got = call_answer(answer, state.s.clone(), state.z.clone(), q, k, v)
        expect_true(
            isinstance(got, (tuple, list)) and len(got) == 3,
            _("step {t}: return a tuple (out_t, S_new, z_new)", t=t),
        )
        out, state = linear_attention_step(state, q, k, v)
        expect_close(
            got[0], out, case=_("step {t}: {name}", t=t, name="out_t"), atol=1e-9, rtol=1e-7
        )
        expect_close(
            got[1], state.s, case=_("step {t}: {name}", t=t, name="S_new"), atol=1e-9, rtol=1e-7
        )
        expect_close(
            got[2], state.z, case=_("step {t}: {name}", t=t, name="z_new"), atol=1e-9, rtol=1e-7
        )
