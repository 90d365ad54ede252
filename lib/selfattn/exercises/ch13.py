"""Checkers for chapter 13's exercises (the delta rule, its chunked form, SSD's mask).

In the chapter's order (:data:`EXERCISES`): ``delta-step`` (build, :func:`check_delta_step`),
``gated-step`` (build, :func:`check_gated_step`), ``chunk-decay`` (find the bug,
:func:`check_chunked` against :func:`chunked_buggy`), ``ssd-mask`` (build,
:func:`check_ssd_mask`) and ``predict-overwrite`` (predict, then run,
:func:`check_overwrite_prediction`). A wrong answer that is a mistake the checker
recognises is named.
"""

from __future__ import annotations

import math

import torch

from ..efficient.delta_rule import gated_delta_rule
from ..efficient.ssd import semiseparable_mask
from ..i18n import _
from ._core import call_answer, checker, expect_close, expect_predicted, expect_true

__all__ = [
    "EXERCISES",
    "check_delta_step",
    "delta_step_mistakes",
    "check_gated_step",
    "gated_step_mistakes",
    "chunked_buggy",
    "check_chunked",
    "check_ssd_mask",
    "ssd_mask_mistakes",
    "OVERWRITE_CASE",
    "check_overwrite_prediction",
]

#: The labels of chapter 13's exercises (``ex-ch13-<label>``), in the chapter's order.
EXERCISES = ("delta-step", "gated-step", "chunk-decay", "ssd-mask", "predict-overwrite")


def _cases(seed: int):
    g = torch.Generator().manual_seed(seed)
    for dk, dv in ((4, 4), (6, 3), (1, 2)):
        s = torch.randn(dk, dv, generator=g, dtype=torch.float64)
        k = torch.nn.functional.normalize(torch.randn(dk, generator=g, dtype=torch.float64), dim=0)
        v = torch.randn(dv, generator=g, dtype=torch.float64)
        beta = float(torch.rand(1, generator=g)) * 0.8 + 0.1
        alpha = float(torch.rand(1, generator=g)) * 0.8 + 0.1
        yield f"d_k={dk}, d_v={dv}", s, k, v, beta, alpha


# -- Build: one delta-rule step -----------------------------------------------------------


def _delta_variants(s, k, v, beta):
    read = s.T @ k
    return {
        "right": s + beta * torch.outer(k, v - read),
        _(
            "that is linear attention's write: the delta rule writes the difference between "
            "v and what the state already holds for k, S^T k"
        ): s + beta * torch.outer(k, v),
        _("the correction is not scaled by beta, the write strength"): s
        + torch.outer(k, v - read),
        _("the read uses S k instead of S^T k: the state is (d_k, d_v), a key indexes its rows"): (
            s + beta * torch.outer(k, v - (s @ k if s.shape[0] == s.shape[1] else read))
        ),
    }


def delta_step_mistakes() -> list[str]:
    """The mistakes :func:`check_delta_step` names."""
    z = torch.zeros(2, 2, dtype=torch.float64)
    return [m for m in _delta_variants(z, z[0], z[0], 0.5) if m != "right"]


@checker("delta-step", "one delta-rule step")
def check_delta_step(answer) -> None:
    """``answer(S, k, v, beta)`` returns ``S + beta k (v - S^T k)^T``: ``S`` ``(d_k, d_v)``,
    ``k`` ``(d_k,)``, ``v`` ``(d_v,)``, ``beta`` a float."""
    for case, s, k, v, beta, _gate in _cases(131):
        variants = _delta_variants(s, k, v, beta)
        right = variants.pop("right")
        mistakes = {m: w for m, w in variants.items() if not torch.allclose(w, right)}
        got = call_answer(answer, s, k, v, beta)
        expect_close(got, right, case=case, atol=1e-9, rtol=1e-9, mistakes=mistakes)


# -- Build: the gated step ----------------------------------------------------------------


def _gated_variants(s, k, v, beta, alpha):
    d = alpha * s
    return {
        "right": d + beta * torch.outer(k, v - d.T @ k),
        _(
            "the read uses the state before the decay: Gated DeltaNet decays S first, then reads "
            "and corrects the decayed state"
        ): d + beta * torch.outer(k, v - s.T @ k),
        _("the decay is applied after the write, so it also shrinks the new token's write"): (
            alpha * (s + beta * torch.outer(k, v - s.T @ k))
        ),
        _("the state is not decayed at all: alpha multiplies S before the write"): (
            s + beta * torch.outer(k, v - s.T @ k)
        ),
    }


def gated_step_mistakes() -> list[str]:
    """The mistakes :func:`check_gated_step` names."""
    z = torch.zeros(2, 2, dtype=torch.float64)
    return [m for m in _gated_variants(z, z[0], z[0], 0.5, 0.5) if m != "right"]


@checker("gated-step", "one gated delta-rule step")
def check_gated_step(answer) -> None:
    """``answer(S, k, v, beta, alpha)`` returns
    ``alpha S + beta k (v - alpha S^T k)^T``."""
    for case, s, k, v, beta, alpha in _cases(132):
        variants = _gated_variants(s, k, v, beta, alpha)
        right = variants.pop("right")
        mistakes = {m: w for m, w in variants.items() if not torch.allclose(w, right)}
        got = call_answer(answer, s, k, v, beta, alpha)
        expect_close(got, right, case=case, atol=1e-9, rtol=1e-9, mistakes=mistakes)


# -- Find the bug: the chunked form without the decay inside the chunk --------------------


def chunked_buggy(q, k, v, g, beta, chunk_size):
    """The chunked gated delta rule, ``(n, d)`` inputs, one head, ``scale = 1``: with a bug.

    It is right when ``g = 0`` and wrong otherwise.
    """
    n, dk = k.shape
    s = q.new_zeros(dk, v.shape[-1])
    outs = []
    for a in range(0, n, chunk_size):
        e = min(a + chunk_size, n)
        qc, kc, vc, gc, bc = q[a:e], k[a:e], v[a:e], g[a:e], beta[a:e]
        c = e - a
        cum = torch.zeros_like(gc)
        decay = (
            (cum[:, None] - cum[None, :])
            .masked_fill(~torch.ones(c, c, dtype=torch.bool).tril(), -math.inf)
            .exp()
        )
        gamma = cum.exp()
        a_mat = ((kc @ kc.T) * decay * bc[:, None]).tril(-1)
        t = torch.linalg.inv(torch.eye(c, dtype=q.dtype) + a_mat)
        u = t @ (bc[:, None] * vc) - t @ ((bc * gamma)[:, None] * kc) @ s
        outs.append((qc * gamma[:, None]) @ s + ((qc @ kc.T) * decay) @ u)
        s = s * gc.sum().exp() + (kc * (cum[-1] - cum).exp()[:, None]).T @ u
    return torch.cat(outs)


def _reference(q, k, v, g, beta):
    return gated_delta_rule(*(t[None, None] for t in (q, k, v, g, beta)), scale=1.0)[0, 0]


@checker("chunk-decay", "the decay inside a chunk")
def check_chunked(answer) -> None:
    """``answer(q, k, v, g, beta, chunk_size)``, ``(n, d)`` inputs, one head, scale 1, equals
    the gated delta rule (:func:`selfattn.efficient.delta_rule.gated_delta_rule`) on every case."""
    g_ = torch.Generator().manual_seed(133)
    for n, c in ((10, 4), (7, 7), (13, 5)):
        q, k = torch.randn(2, n, 4, generator=g_, dtype=torch.float64)
        k = torch.nn.functional.normalize(k, dim=-1)
        v = torch.randn(n, 3, generator=g_, dtype=torch.float64)
        g = -torch.rand(n, generator=g_, dtype=torch.float64)
        beta = torch.rand(n, generator=g_, dtype=torch.float64)
        right = _reference(q, k, v, g, beta)
        mistakes = {
            _("inside a chunk the decays are still treated as 1 (it matches the g = 0 answer)"): (
                chunked_buggy(q, k, v, g, beta, c)
            )
        }
        got = call_answer(answer, q, k, v, g, beta, c)
        expect_close(
            got, right, case=f"n={n}, chunk_size={c}", atol=1e-8, rtol=1e-8, mistakes=mistakes
        )


# -- Build: SSD's semiseparable mask -------------------------------------------------------


def _mask_variants(log_a):
    cum = log_a.cumsum(0)
    n = log_a.shape[0]
    lower = torch.ones(n, n, dtype=torch.bool).tril()
    diff = cum[:, None] - cum[None, :]
    return {
        "right": semiseparable_mask(log_a),
        _(
            "the product includes a_s too: L_ts multiplies the decays after s, a_{s+1} ... a_t, "
            "so the diagonal is 1"
        ): torch.where(lower, (diff + log_a[None, :]).exp(), 0.0),
        _("the entries above the diagonal must be 0 (causal)"): diff.exp(),
        _("every row uses the decay from the start, a_1 ... a_t: the product starts after s"): (
            torch.where(lower, cum[:, None].exp().expand(n, n), 0.0)
        ),
    }


def ssd_mask_mistakes() -> list[str]:
    """The mistakes :func:`check_ssd_mask` names."""
    return [m for m in _mask_variants(-torch.rand(3, dtype=torch.float64)) if m != "right"]


@checker("ssd-mask", "SSD's 1-semiseparable mask")
def check_ssd_mask(answer) -> None:
    """``answer(log_a)``, ``(n,)`` log-decays, returns ``L`` ``(n, n)``:
    ``L_ts = a_{s+1} ... a_t`` for ``s <= t`` (1 on the diagonal), 0 above."""
    g = torch.Generator().manual_seed(134)
    for n in (5, 9, 1):
        log_a = -torch.rand(n, generator=g, dtype=torch.float64) * 2
        variants = _mask_variants(log_a)
        right = variants.pop("right")
        mistakes = {m: w for m, w in variants.items() if not torch.allclose(w, right)}
        got = call_answer(answer, log_a)
        expect_close(got, right, case=f"n={n}", atol=1e-9, rtol=1e-9, mistakes=mistakes)


# -- Predict, then run: how many keys read back their latest value ------------------------

#: The numbers of orthonormal keys and of writes (keys 0..d-1 once, then keys 0..r-1 again
#: with new values).
OVERWRITE_CASE = (8, 12)


@checker("predict-overwrite", "what a delta-rule state reads back")
def check_overwrite_prediction(prediction) -> None:
    """How many of the ``d`` keys read back their latest value exactly from a delta-rule
    state (beta = 1) after the writes of :data:`OVERWRITE_CASE`."""
    d, writes = OVERWRITE_CASE
    expect_true(d <= writes, _("the case writes every key at least once"))
    expect_predicted(
        prediction,
        {
            "right": d,
            _(
                "that is what linear attention's sum gives (the keys written twice read the sum "
                "of their two values); the delta rule replaces the old value"
            ): 2 * d - writes,
            _("there are more writes than keys: a key written twice is one key"): writes,
        },
        case=_("{d} orthonormal keys, {writes} writes", d=d, writes=writes),
    )
