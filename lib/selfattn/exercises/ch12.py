"""Checkers for chapter 12's exercises (mask_mod, score_mod, BlockMask, packing).

In the chapter's order (:data:`EXERCISES`, whose labels number them): ``chunked`` (build,
:func:`check_chunked_mask`), ``dilated`` (build, :func:`check_dilated_mask`), ``alibi-bug``
(find the bug, :func:`check_alibi_mod` against :func:`alibi_mod_buggy`), ``predict-tiles``
(predict, then run, :func:`check_tiles_prediction`) and ``predict-padding`` (predict, then
run, :func:`check_padding_prediction`). The checkers call the reader's ``mask_mod`` and
``score_mod`` on broadcast index grids, as FlexAttention's ``create_mask`` does, so they need
no FlexAttention themselves; where it is available, the ALiBi checker also runs the answer
through eager FlexAttention, which calls a ``score_mod`` on single indices. A wrong answer
that is a mistake the checker recognises is named.
"""

from __future__ import annotations

import math

import torch

from ..i18n import _
from ..positional import alibi_slopes
from ._core import Mismatch, NotAttempted, call_answer, checker, expect_close, expect_predicted

__all__ = [
    "EXERCISES",
    "CHUNK",
    "DILATION",
    "ALIBI_HEADS",
    "TILE_N",
    "TILE_BLOCK",
    "TILE_WINDOW",
    "DOC_LENGTHS",
    "check_chunked_mask",
    "chunked_mistakes",
    "check_dilated_mask",
    "dilated_mistakes",
    "alibi_mod_buggy",
    "check_alibi_mod",
    "alibi_mistakes",
    "check_tiles_prediction",
    "tiles_mistakes",
    "check_padding_prediction",
    "padding_mistakes",
]

#: The labels of chapter 12's exercises (``ex-ch12-<label>``), in the chapter's order.
EXERCISES = ("chunked", "dilated", "alibi-bug", "predict-tiles", "predict-padding")

CHUNK = 4  #: exercise 12.1's chunk size
DILATION = 3  #: exercise 12.2's dilation
ALIBI_HEADS = 4  #: exercise 12.3's heads
TILE_N, TILE_BLOCK, TILE_WINDOW = 1024, 128, 256  #: exercise 12.4's sizes
DOC_LENGTHS = (5, 3, 8, 2)  #: exercise 12.5's documents


def _grid(n: int, m: int, batch: int = 1, heads: int = 1):
    """Index grids ``(b, h, q_idx, kv_idx)`` broadcasting to ``(batch, heads, n, m)``."""
    b = torch.arange(batch)[:, None, None, None]
    h = torch.arange(heads)[None, :, None, None]
    q = torch.arange(n)[None, None, :, None]
    kv = torch.arange(m)[None, None, None, :]
    return b, h, q, kv


def _draw_mask(mask_mod, n: int, m: int) -> torch.Tensor:
    """The ``(n, m)`` bool matrix a reader's ``mask_mod`` draws."""
    got = call_answer(mask_mod, *_grid(n, m))
    if not isinstance(got, torch.Tensor):
        raise Mismatch(
            _("your mask_mod must return a bool tensor, got {type}", type=type(got).__name__)
        )
    if got.dtype != torch.bool:
        raise Mismatch(
            _(
                "your mask_mod must return a bool tensor (True = may attend), got {dtype}",
                dtype=got.dtype,
            )
        )
    return got.expand(1, 1, n, m)[0, 0]


def _expect_mask(got, expected, mistakes, *, case: str) -> None:
    expect_close(
        got.float(),
        expected.float(),
        case=case,
        atol=0,
        rtol=0,
        mistakes={k: v.float() for k, v in mistakes.items()},
    )


# -- Build: chunked attention --------------------------------------------------------------


def _chunked_variants(n: int) -> dict[str, torch.Tensor]:
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    same = i // CHUNK == j // CHUNK
    return {
        "right": same & (j <= i),
        _("the chunks are not causal: inside its chunk a token may not read later tokens"): same,
        _(
            "that is a sliding window of CHUNK keys: chunks restart at multiples of CHUNK, a "
            "window "
            "moves with the query"
        ): (i - j >= 0) & (i - j < CHUNK),
        _(
            "this lets a token see the chunk before its own too; chunked attention keeps each "
            "chunk to itself"
        ): (j <= i) & (i // CHUNK - j // CHUNK <= 1),
    }


def chunked_mistakes() -> list[str]:
    """The mistakes :func:`check_chunked_mask` names."""
    return [k for k in _chunked_variants(8) if k != "right"]


@checker("chunked", "a mask_mod for chunked attention")
def check_chunked_mask(answer) -> None:
    """``answer(b, h, q_idx, kv_idx)``: a ``mask_mod`` for causal chunked attention (Llama 4's
    local layers): query ``i`` sees key ``j`` when both lie in the same chunk of
    :data:`CHUNK` positions and ``j <= i``."""
    for n in (1, 7, 16):
        variants = _chunked_variants(n)
        right = variants.pop("right")
        _expect_mask(_draw_mask(answer, n, n), right, variants, case=f"n={n}, CHUNK={CHUNK}")


# -- Build: dilated attention --------------------------------------------------------------


def _dilated_variants(n: int) -> dict[str, torch.Tensor]:
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    causal = j <= i
    return {
        "right": causal & ((i - j) % DILATION == 0),
        _(
            "this keeps the keys whose index is a multiple of DILATION; the step is counted from "
            "the query, (q_idx - kv_idx) % DILATION == 0"
        ): causal & (j % DILATION == 0),
        _("this lets a query read later keys: dilated causal attention keeps kv_idx <= q_idx"): (
            (i - j) % DILATION == 0
        ),
        _("this keeps every key but the dilated ones (the test is inverted)"): causal
        & ((i - j) % DILATION != 0),
    }


def dilated_mistakes() -> list[str]:
    """The mistakes :func:`check_dilated_mask` names."""
    return [k for k in _dilated_variants(9) if k != "right"]


@checker("dilated", "a mask_mod for dilated attention")
def check_dilated_mask(answer) -> None:
    """``answer(b, h, q_idx, kv_idx)``: causal dilated attention, query ``i`` sees every
    :data:`DILATION`-th key counted back from itself: ``j <= i`` and ``(i - j) % DILATION ==
    0``."""
    for n in (1, 10, 13):
        variants = _dilated_variants(n)
        right = variants.pop("right")
        _expect_mask(_draw_mask(answer, n, n), right, variants, case=f"n={n}, DILATION={DILATION}")


# -- Find the bug: an ALiBi score_mod ------------------------------------------------------

_SLOPES = alibi_slopes(ALIBI_HEADS)


def alibi_mod_buggy(score, b, h, q_idx, kv_idx):
    """ALiBi as a ``score_mod`` for :data:`ALIBI_HEADS` heads, with a planted bug: the slope
    is read with the wrong index."""
    slopes = alibi_slopes(ALIBI_HEADS)
    return score - slopes[b] * (q_idx - kv_idx).abs()


def _alibi_variants(score, b, h, q, kv) -> dict[str, torch.Tensor]:
    dist = (q - kv).abs()
    return {
        "right": score - _SLOPES[h] * dist,
        _("the slope is still read by the batch index b: each head h has its own slope"): (
            score - _SLOPES[b] * dist
        ),
        _("the bias is added: ALiBi subtracts slope * distance, so far keys score lower"): (
            score + _SLOPES[h] * dist
        ),
        _("the distance has lost its absolute value: keys after the query get a bonus"): (
            score - _SLOPES[h] * (q - kv)
        ),
        _(
            "the score is dropped: a score_mod returns the score plus the bias, not the bias alone"
        ): (-_SLOPES[h] * dist).expand_as(score),
    }


def alibi_mistakes() -> list[str]:
    """The mistakes :func:`check_alibi_mod` names."""
    return [k for k in _alibi_variants(*_alibi_inputs(3, 4, 2)) if k != "right"]


def _alibi_inputs(n: int, m: int, batch: int):
    g = torch.Generator().manual_seed(12)
    score = torch.randn(batch, ALIBI_HEADS, n, m, generator=g)
    return (score, *_grid(n, m, batch, ALIBI_HEADS))


@checker("alibi-bug", "the ALiBi score_mod")
def check_alibi_mod(answer) -> None:
    """``answer(score, b, h, q_idx, kv_idx)`` must return ALiBi's biased score
    ``score - slope[h] * |q_idx - kv_idx|`` (slopes :func:`selfattn.positional.alibi_slopes`
    of :data:`ALIBI_HEADS`). While it computes what :func:`alibi_mod_buggy` computes, the
    exercise counts as not attempted."""
    cases = [(5, 5, 4), (3, 8, 2), (1, 1, 1)]
    planted, results = True, []
    for n, m, batch in cases:
        inputs = _alibi_inputs(n, m, batch)
        got = call_answer(answer, *inputs)
        try:
            same = torch.allclose(
                torch.as_tensor(got).expand_as(inputs[0]), alibi_mod_buggy(*inputs)
            )
        except (TypeError, ValueError, RuntimeError):
            same = False
        planted = planted and same
        results.append((inputs, got, f"n={n}, m={m}, batch={batch}"))
    if planted:
        raise NotAttempted()
    for inputs, got, case in results:
        variants = _alibi_variants(*inputs)
        right = variants.pop("right")
        if isinstance(got, torch.Tensor) and got.dim() == 4:
            got = got.expand_as(right)
        expect_close(got, right, case=case, atol=1e-6, rtol=1e-6, mistakes=variants)
    _alibi_through_flex(answer)


def _alibi_through_flex(answer) -> None:
    """FlexAttention calls a ``score_mod`` on scalar indices (under ``vmap``), not on grids:
    where it is available, run the answer through it (eager) and compare with dense attention
    given ALiBi's bias, so that an answer that works only on grids (``slopes.view(1, -1, 1, 1)``)
    is refused as FlexAttention would refuse it."""
    from .. import flex as fx  # lazy: the checkers need no FlexAttention to import

    if not fx.flex_available()[0]:
        return
    n, d = 6, 8
    g = torch.Generator().manual_seed(12)
    q, k, v = (torch.randn(2, ALIBI_HEADS, n, d, generator=g) for _ in range(3))
    try:
        with torch.no_grad():
            got = fx.flex(q, k, v, score_mod=answer)
    except Exception as err:  # noqa: BLE001 - whatever FlexAttention raised, the reader sees
        raise Mismatch(
            _(
                "FlexAttention could not run this score_mod: it calls it on single indices, not "
                "on grids, so use only elementwise operations on b, h, q_idx and kv_idx ({type}: "
                "{value})",
                type=type(err).__name__,
                value=str(err)[:80],
            )
        ) from None
    idx = torch.arange(n)
    bias = -_SLOPES[:, None, None] * (idx[:, None] - idx[None, :]).abs()
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d) + bias, dim=-1)
    expect_close(got, weights @ v, case=_("through FlexAttention"), atol=1e-5, rtol=1e-5)


# -- Predict, then run: the tiles of a BlockMask ----------------------------------------------


def _tiles_variants() -> dict[str, int]:
    nb = math.ceil(TILE_N / TILE_BLOCK)
    per_row = TILE_WINDOW // TILE_BLOCK + 1  # the diagonal tile and those the window reaches
    right = sum(min(a + 1, per_row) for a in range(nb))
    return {
        "right": right,
        _(
            "that gives every row of tiles the same count; the first rows have fewer tiles to "
            "their left"
        ): nb * per_row,
        _(
            "that counts window / block tiles per row: a window that starts inside a tile reaches "
            "one tile further"
        ): sum(min(a + 1, per_row - 1) for a in range(nb)),
        _("that is the whole causal triangle of tiles: the window leaves most of it empty"): (
            nb * (nb + 1) // 2
        ),
        _("that is every tile: a BlockMask skips the empty ones"): nb * nb,
    }


def tiles_mistakes() -> list[str]:
    """The mistakes :func:`check_tiles_prediction` names."""
    return [k for k in _tiles_variants() if k != "right"]


@checker("predict-tiles", "the tiles a window computes")
def check_tiles_prediction(prediction) -> None:
    """``prediction``: how many ``TILE_BLOCK x TILE_BLOCK`` tiles the BlockMask of a causal
    sliding window of :data:`TILE_WINDOW` keys computes at ``n =`` :data:`TILE_N`."""
    expect_predicted(
        prediction,
        _tiles_variants(),
        case=f"n={TILE_N}, block={TILE_BLOCK}, window={TILE_WINDOW}",
    )


# -- Predict, then run: padding's wasted positions -------------------------------------------


def _padding_variants() -> dict[str, int]:
    total, longest, docs = sum(DOC_LENGTHS), max(DOC_LENGTHS), len(DOC_LENGTHS)
    return {
        "right": docs * longest - total,
        _("that is every padded position, real tokens included; count only the padding"): (
            docs * longest
        ),
        _("that is the real tokens; the question asks for the padding around them"): total,
        _("that pads to the sum of the lengths: each row is padded to the longest document"): (
            docs * total - total
        ),
    }


def padding_mistakes() -> list[str]:
    """The mistakes :func:`check_padding_prediction` names."""
    return [k for k in _padding_variants() if k != "right"]


@checker("predict-padding", "positions padding wastes")
def check_padding_prediction(prediction) -> None:
    """``prediction``: how many padding positions a batch of the documents
    :data:`DOC_LENGTHS`, one per row, each padded to the longest, holds."""
    expect_predicted(
        prediction, _padding_variants(), case=_("documents {lengths}", lengths=DOC_LENGTHS)
    )
