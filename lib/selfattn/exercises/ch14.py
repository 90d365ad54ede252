"""Checkers for chapter 14's exercises (attention across devices).

In the chapter's order (:data:`EXERCISES`, whose labels number them): ``ring-bytes``
(predict, then run, :func:`check_ring_bytes`), ``merge`` (find the bug,
:func:`check_merge` against :func:`merge_buggy`), ``zigzag`` (build,
:func:`check_zigzag_chunks`), ``zigzag-work`` (predict, then run,
:func:`check_zigzag_work`) and ``ulysses-limit`` (predict, then run,
:func:`check_ulysses_limit`). A wrong answer that is a mistake the checker recognises is
named, without handing over the fix.
"""

from __future__ import annotations

import torch

from ..distributed import chunk_ids, ring_bytes, ring_work
from ..efficient.decoding import merge_attention_states, partial_attention
from ..i18n import _
from ._core import Mismatch, NotAttempted, call_answer, checker, expect_close, expect_predicted

__all__ = [
    "EXERCISES",
    "RING_BYTES_CASE",
    "check_ring_bytes",
    "ring_bytes_mistakes",
    "merge_buggy",
    "check_merge",
    "merge_mistakes",
    "check_zigzag_chunks",
    "zigzag_mistakes",
    "ZIGZAG_WORK_CASE",
    "check_zigzag_work",
    "zigzag_work_mistakes",
    "ULYSSES_CASE",
    "check_ulysses_limit",
    "ulysses_mistakes",
]

#: The labels of chapter 14's exercises (``ex-ch14-<label>``), in the chapter's order.
EXERCISES = ("ring-bytes", "merge", "zigzag", "zigzag-work", "ulysses-limit")

# -- Predict, then run: the bytes a rank sends in ring attention -------------------------

#: The case as (batch, heads, n, d_head, P, bytes per number), bfloat16 keys and values.
RING_BYTES_CASE = (1, 8, 32768, 128, 8, 2)


def _ring_bytes_variants() -> dict[str, int]:
    B, h, n, d, P, size = RING_BYTES_CASE
    right = ring_bytes(n, d, P, batch=B, heads=h, bytes_per=size)
    block = B * h * (n // P) * d * size  # one K (or one V) block
    return {
        "right": right,
        _("that counts the keys only; every step sends the values too"): right // 2,
        _("that counts P sends; the block a rank starts with needs no send, so P - 1"): (
            2 * P * block
        ),
        _("that counts 4 bytes a number; bfloat16 takes 2"): right * 2,
        _(
            "that sends the whole sequence's keys and values at every step, not one rank's "
            "block of n / P positions"
        ): 2 * (P - 1) * B * h * n * d * size,
        _("that counts one head; every head's keys and values travel"): right // h,
    }


def ring_bytes_mistakes() -> list[str]:
    """The mistakes :func:`check_ring_bytes` names."""
    return [k for k in _ring_bytes_variants() if k != "right"]


@checker("ring-bytes", "the bytes a rank sends in ring attention")
def check_ring_bytes(prediction) -> None:
    """``prediction``: bytes one rank sends in one ring-attention forward pass, for
    :data:`RING_BYTES_CASE` (batch 1, 8 key/value heads, n = 32768, d_head = 128, P = 8,
    bfloat16 keys and values)."""
    B, h, n, d, P, size = RING_BYTES_CASE
    expect_predicted(prediction, _ring_bytes_variants(), case=f"n={n}, h={h}, P={P}")


# -- Find the bug: merging two partial attention results ---------------------------------


def merge_buggy(out_a, lse_a, out_b, lse_b):
    """Merge two partial attention results (outputs normalised over their own keys, and their
    log-sum-exps), with one planted bug. Shapes: out ``(..., n, d_v)``, lse ``(..., n)``."""
    lse = torch.logaddexp(lse_a, lse_b)
    out = out_a + out_b  # the two partial outputs, combined
    return out, lse


def _merge_variants(out_a, lse_a, out_b, lse_b) -> dict[str, torch.Tensor]:
    right, _lse = merge_attention_states(out_a, lse_a, out_b, lse_b)
    lse = torch.logaddexp(lse_a, lse_b)
    w_a, w_b = torch.exp(lse_a - lse)[..., None], torch.exp(lse_b - lse)[..., None]
    return {
        "right": right,
        _(
            "the partial outputs are averaged with equal weights; each must weigh its share of "
            "the softmax mass, exp(L_a - L) and exp(L_b - L)"
        ): (out_a + out_b) / 2,
        _("only one of the two outputs is rescaled; both carry their own normalisation"): (
            w_a * out_a + out_b
        ),
        _("the weights are exp(L_a) and exp(L_b) without dividing by the total exp(L)"): (
            torch.exp(lse_a)[..., None] * out_a + torch.exp(lse_b)[..., None] * out_b
        ),
        _("the weights are swapped: part a's output must be scaled by part a's share"): (
            w_b * out_a + w_a * out_b
        ),
    }


def merge_mistakes() -> list[str]:
    """The mistakes :func:`check_merge` names."""
    x = torch.zeros(2, 3, dtype=torch.float64)
    return [k for k in _merge_variants(x, x[:, 0], x, x[:, 0]) if k != "right"]


@checker("merge", "merging two partial results")
def check_merge(answer) -> None:
    """``answer(out_a, lse_a, out_b, lse_b)`` must return ``(out, lse)``: attention over the
    keys of both parts, from each part's attention output (normalised over its own keys) and
    row log-sum-exp. Compared with attention over all the keys at once, in float64. While
    the answer still computes what the planted bug (:func:`merge_buggy`) computes, the
    exercise counts as not attempted."""
    g = torch.Generator().manual_seed(14)
    planted = True
    cases = []
    for n, m_a, m_b, dv in ((3, 4, 5, 2), (1, 1, 1, 1), (4, 6, 2, 3)):
        q = 2 * torch.randn(n, 4, generator=g, dtype=torch.float64)
        k = torch.randn(m_a + m_b, 4, generator=g, dtype=torch.float64)
        v = torch.randn(m_a + m_b, dv, generator=g, dtype=torch.float64)
        oa, la = partial_attention(q, k[:m_a], v[:m_a])
        ob, lb = partial_attention(q, k[m_a:], v[m_a:])
        got = call_answer(answer, oa, la, ob, lb)
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            raise Mismatch(
                _(
                    "case n={n}: return a tuple (out, lse), got {type}",
                    n=n,
                    type=type(got).__name__,
                )
            )
        cases.append((q, k, v, oa, la, ob, lb, got))
        bug = merge_buggy(oa, la, ob, lb)[0]
        planted &= torch.is_tensor(got[0]) and torch.allclose(
            got[0].to(torch.float64), bug, atol=1e-9
        )
    if planted:
        raise NotAttempted
    for q, k, _v, oa, la, ob, lb, got in cases:
        variants = _merge_variants(oa, la, ob, lb)
        right = variants.pop("right")
        mistakes = {d: x for d, x in variants.items() if not torch.allclose(x, right, atol=1e-9)}
        case = _("{value} queries, {value2} keys", value=q.shape[0], value2=k.shape[0])
        expect_close(got[0], right, case=case, atol=1e-9, rtol=1e-9, mistakes=mistakes)
        expect_close(got[1], torch.logaddexp(la, lb), case=f"{case} (lse)", atol=1e-9, rtol=1e-9)
    # Rows that saw no key yet, the ring's empty state: both log-sum-exps are -inf and both
    # outputs zero; the merge must give zeros and -inf, never NaN.
    empty = torch.full((2,), float("-inf"), dtype=torch.float64)
    zeros = torch.zeros(2, 3, dtype=torch.float64)
    got = call_answer(answer, zeros, empty, zeros, empty)
    case = _("2 rows that saw no key (both log-sum-exps -inf)")
    if not (isinstance(got, (tuple, list)) and len(got) == 2 and torch.is_tensor(got[0])):
        raise Mismatch(_("case {case}: return a tuple (out, lse) of tensors", case=case))
    if torch.isnan(got[0]).any():
        raise Mismatch(
            _(
                "case {case}: both parts saw no key, and exp(-inf - (-inf)) is NaN; shift by a "
                "finite reference: torch.where(torch.isfinite(lse), lse, 0.0)",
                case=case,
            )
        )
    expect_close(got[0], zeros, case=case, atol=1e-12, rtol=0)


# -- Build: the zigzag layout -------------------------------------------------------------


def _zigzag_variants(rank: int, P: int) -> dict[str, list[int]]:
    return {
        "right": chunk_ids(rank, P, "zigzag"),
        _(
            "that is the contiguous layout in 2P chunks (chunks 2r and 2r + 1): the last rank "
            "still holds the two most expensive chunks"
        ): [2 * rank, 2 * rank + 1],
        _("the second chunk is off by one: of 2P chunks numbered from 0 the last is 2P - 1"): [
            rank,
            2 * P - rank,
        ],
        _(
            "that is a striped layout (chunks r and r + P): rank 0 holds the start of each half "
            "and the last rank the end of each half, so the last rank still does the most work"
        ): [
            rank,
            rank + P,
        ],
        _("the right chunks in decreasing order; return them in increasing order"): [
            2 * P - 1 - rank,
            rank,
        ],
    }


def zigzag_mistakes() -> list[str]:
    """The mistakes :func:`check_zigzag_chunks` names."""
    return [k for k in _zigzag_variants(0, 2) if k != "right"]


@checker("zigzag", "the zigzag layout")
def check_zigzag_chunks(answer) -> None:
    """``answer(rank, P)`` must return the list of the two chunk numbers (of the ``2 P``
    chunks of the sequence, numbered from 0) that rank ``rank`` holds in the zigzag layout,
    in increasing order."""
    for P in (2, 4, 8, 3):
        for rank in range(P):
            got = call_answer(answer, rank, P)
            if got is None:
                raise NotAttempted
            try:
                got_list = [int(c) for c in got]
            except (TypeError, ValueError):
                raise Mismatch(
                    _(
                        "case P={P}, rank={rank}: return a list of two chunk numbers, got {type} "
                        "{got}",
                        P=P,
                        rank=rank,
                        type=type(got).__name__,
                        got=f"{got!r:.40}",
                    )
                ) from None
            variants = _zigzag_variants(rank, P)
            right = variants.pop("right")
            if got_list == right:
                continue
            for diagnosis, wrong in variants.items():
                if wrong != right and got_list == wrong:
                    raise Mismatch(
                        _(
                            "case {case}: {diagnosis}",
                            case=f"P={P}, rank={rank}",
                            diagnosis=diagnosis,
                        )
                    )
            raise Mismatch(
                _(
                    "case P={P}, rank={rank}: got chunks {got_list}; each rank holds one chunk "
                    "from the first half and its mirror image from the second, so that every "
                    "rank's queries see as many keys in all",
                    P=P,
                    rank=rank,
                    got_list=got_list,
                )
            )


# -- Predict, then run: the work of one rank with zigzag shards ---------------------------

#: The zigzag-work prediction's case as (P, causal).
ZIGZAG_WORK_CASE = (4, True)


def _zigzag_work_variants() -> dict[str, int]:
    P, _n = ZIGZAG_WORK_CASE
    right = round(ring_work(P, "zigzag")[0] * 4)  # in chunk blocks of (n / 2P)^2
    return {
        "right": right,
        _("that counts every block of the two query chunks, masked or not (2 x 2P)"): 4 * P,
        _("that leaves out the two diagonal blocks, which are computed with a mask"): right - 2,
        _(
            "that is the average over ranks with contiguous shards, each rank's diagonal block "
            "counted whole as the ring computes it, not zigzag's count"
        ): (sum(4 * w for w in ring_work(P, "contiguous")) // P),
    }


def zigzag_work_mistakes() -> list[str]:
    """The mistakes :func:`check_zigzag_work` names."""
    return [k for k in _zigzag_work_variants() if k != "right"]


@checker("zigzag-work", "the work of one rank with zigzag shards")
def check_zigzag_work(prediction) -> None:
    """``prediction``: how many chunk blocks (of ``(n / 2P)^2`` scores; a diagonal block, computed
    with a mask, counts whole) rank 0 computes in causal ring attention with zigzag shards and
    ``P = 4``: the sequence is cut into 8 chunks and rank 0 holds chunks 0 and 7."""
    P, _n = ZIGZAG_WORK_CASE
    expect_predicted(prediction, _zigzag_work_variants(), case=_("P={P}, zigzag, causal", P=P))


# -- Predict, then run: Ulysses' limit on P -------------------------------------------------

#: A grouped-query model's attention as (query heads, key/value heads).
ULYSSES_CASE = (32, 8)


def _ulysses_variants() -> dict[str, int]:
    h, h_kv = ULYSSES_CASE
    return {
        "right": h_kv,
        _(
            "that divides the 32 query heads, but each rank also needs whole key/value heads, and "
            "there are only 8"
        ): h,
        _("that is the group size (query heads per key/value head), not a limit on the ranks"): (
            h // h_kv
        ),
        _("that would leave a rank with part of a head: Ulysses splits whole heads"): 2 * h_kv,
    }


def ulysses_mistakes() -> list[str]:
    """The mistakes :func:`check_ulysses_limit` names."""
    return [k for k in _ulysses_variants() if k != "right"]


@checker("ulysses-limit", "Ulysses' limit on P")
def check_ulysses_limit(prediction) -> None:
    """``prediction``: the largest number of ranks ``P`` over which Ulysses can split a layer
    with 32 query heads and 8 key/value heads (grouped-query attention), without replicating
    any head."""
    h, h_kv = ULYSSES_CASE
    expect_predicted(prediction, _ulysses_variants(), case=f"h={h}, h_kv={h_kv}")
