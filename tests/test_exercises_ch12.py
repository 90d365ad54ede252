"""Chapter 12's checkers pass the right answers, name the likely mistakes, and see stubs."""

import pytest
import torch
from selfattn.exercises.ch12 import (
    ALIBI_HEADS,
    CHUNK,
    DILATION,
    alibi_mistakes,
    alibi_mod_buggy,
    check_alibi_mod,
    check_chunked_mask,
    check_dilated_mask,
    check_padding_prediction,
    check_tiles_prediction,
    chunked_mistakes,
    dilated_mistakes,
    padding_mistakes,
    tiles_mistakes,
)
from selfattn.positional import alibi_slopes


def stub(*args):
    raise NotImplementedError


def test_chunked():
    not_causal, window, previous = chunked_mistakes()
    assert check_chunked_mask(lambda b, h, q, kv: (q // CHUNK == kv // CHUNK) & (kv <= q)).passed
    assert check_chunked_mask(stub).status == "not attempted"
    assert not_causal in check_chunked_mask(lambda b, h, q, kv: q // CHUNK == kv // CHUNK).message
    assert (
        window in check_chunked_mask(lambda b, h, q, kv: (q - kv >= 0) & (q - kv < CHUNK)).message
    )
    wrong = lambda b, h, q, kv: (kv <= q) & (q // CHUNK - kv // CHUNK <= 1)  # noqa: E731
    assert previous in check_chunked_mask(wrong).message
    assert "bool" in check_chunked_mask(lambda b, h, q, kv: (kv <= q).float()).message


def test_dilated():
    by_index, not_causal, inverted = dilated_mistakes()
    right = lambda b, h, q, kv: (kv <= q) & ((q - kv) % DILATION == 0)  # noqa: E731
    assert check_dilated_mask(right).passed
    assert check_dilated_mask(stub).status == "not attempted"
    assert (
        by_index
        in check_dilated_mask(lambda b, h, q, kv: (kv <= q) & (kv % DILATION == 0)).message
    )
    assert not_causal in check_dilated_mask(lambda b, h, q, kv: (q - kv) % DILATION == 0).message
    wrong = lambda b, h, q, kv: (kv <= q) & ((q - kv) % DILATION != 0)  # noqa: E731
    assert inverted in check_dilated_mask(wrong).message


def test_alibi_bug():
    batch_index, added, no_abs, dropped = alibi_mistakes()
    slopes = alibi_slopes(ALIBI_HEADS)
    assert check_alibi_mod(lambda s, b, h, q, kv: s - slopes[h] * (q - kv).abs()).passed
    assert check_alibi_mod(stub).status == "not attempted"
    assert check_alibi_mod(alibi_mod_buggy).status == "not attempted"
    assert added in check_alibi_mod(lambda s, b, h, q, kv: s + slopes[h] * (q - kv).abs()).message
    assert no_abs in check_alibi_mod(lambda s, b, h, q, kv: s - slopes[h] * (q - kv)).message
    assert dropped in check_alibi_mod(lambda s, b, h, q, kv: -slopes[h] * (q - kv).abs()).message
    assert not check_alibi_mod(lambda s, b, h, q, kv: s).passed
    assert batch_index.startswith("the slope")


def test_alibi_answer_that_flex_refuses_is_refused():
    from selfattn import flex as fx

    if not fx.flex_available()[0]:
        pytest.skip("FlexAttention unavailable")
    slopes = alibi_slopes(ALIBI_HEADS)

    def grids_only(s, b, h, q, kv):  # right on grids, refused by FlexAttention's vmap
        return s - slopes.view(1, -1, 1, 1) * (q - kv).abs()

    result = check_alibi_mod(grids_only)
    assert not result.passed and "FlexAttention" in result.message


def test_predictions():
    assert check_tiles_prediction(21).passed
    assert check_tiles_prediction(None).status == "not attempted"
    same_rows, window_only, triangle, every = tiles_mistakes()
    assert same_rows in check_tiles_prediction(24).message
    assert window_only in check_tiles_prediction(15).message
    assert triangle in check_tiles_prediction(36).message
    assert every in check_tiles_prediction(64).message
    assert "21" not in check_tiles_prediction(20).message
    assert check_padding_prediction(14).passed
    assert check_padding_prediction(None).status == "not attempted"
    every_slot, real, to_sum = padding_mistakes()
    assert every_slot in check_padding_prediction(32).message
    assert real in check_padding_prediction(18).message
    assert to_sum in check_padding_prediction(54).message


def test_tiles_answer_is_what_flex_counts():
    import pytest
    from selfattn import flex as fx

    ok, why = fx.flex_available()
    if not ok:
        pytest.skip(why)
    bm = fx.block_mask(fx.sliding_window(256), 1024, block_size=128)
    assert round(fx.block_fraction(bm) * 64) == 21
    assert torch.equal(bm.to_dense()[0, 0].sum(), torch.tensor(21))
