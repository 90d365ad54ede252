"""Chapter 14's checkers pass the right answers, name the likely mistakes, and see stubs."""

import torch
from selfattn.efficient.decoding import merge_attention_states
from selfattn.exercises.ch14 import (
    EXERCISES,
    RING_BYTES_CASE,
    check_merge,
    check_ring_bytes,
    check_ulysses_limit,
    check_zigzag_chunks,
    check_zigzag_work,
    merge_buggy,
    merge_mistakes,
    ring_bytes_mistakes,
    ulysses_mistakes,
    zigzag_mistakes,
    zigzag_work_mistakes,
)


def stub(*args):
    raise NotImplementedError


def test_labels():
    assert EXERCISES == ("ring-bytes", "merge", "zigzag", "zigzag-work", "ulysses-limit")


def test_ring_bytes():
    B, h, n, d, P, size = RING_BYTES_CASE
    block = B * h * (n // P) * d * size
    assert check_ring_bytes(2 * (P - 1) * block).passed
    assert check_ring_bytes(None).status == "not attempted"
    keys_only, p_sends, four, whole, one_head = ring_bytes_mistakes()
    assert keys_only in check_ring_bytes((P - 1) * block).message
    assert p_sends in check_ring_bytes(2 * P * block).message
    assert four in check_ring_bytes(4 * (P - 1) * block).message
    assert whole in check_ring_bytes(2 * (P - 1) * block * P).message
    assert one_head in check_ring_bytes(2 * (P - 1) * block // h).message
    assert "not right" in check_ring_bytes(12345).message


def test_merge():
    def right(oa, la, ob, lb):
        return merge_attention_states(oa, la, ob, lb)

    def by_hand(oa, la, ob, lb):
        lse = torch.logaddexp(la, lb)
        ref = torch.where(torch.isfinite(lse), lse, 0.0)
        return (
            torch.exp(la - ref)[..., None] * oa + torch.exp(lb - ref)[..., None] * ob,
            lse,
        )

    def no_guard(oa, la, ob, lb):  # NaN on rows that saw no key
        lse = torch.logaddexp(la, lb)
        return (
            torch.exp(la - lse)[..., None] * oa + torch.exp(lb - lse)[..., None] * ob,
            lse,
        )

    assert check_merge(right).passed
    assert check_merge(by_hand).passed
    assert "exp(-inf - (-inf)) is NaN" in check_merge(no_guard).message
    assert check_merge(merge_buggy).status == "not attempted"
    assert check_merge(stub).status == "not attempted"
    averaged, one_side, unnormalised, swapped = merge_mistakes()

    def avg(oa, la, ob, lb):
        return (oa + ob) / 2, torch.logaddexp(la, lb)

    def one(oa, la, ob, lb):
        lse = torch.logaddexp(la, lb)
        return torch.exp(la - lse)[..., None] * oa + ob, lse

    def swap(oa, la, ob, lb):
        lse = torch.logaddexp(la, lb)
        return torch.exp(lb - lse)[..., None] * oa + torch.exp(la - lse)[..., None] * ob, lse

    def raw(oa, la, ob, lb):
        return la.exp()[..., None] * oa + lb.exp()[..., None] * ob, torch.logaddexp(la, lb)

    assert averaged in check_merge(avg).message
    assert one_side in check_merge(one).message
    assert swapped in check_merge(swap).message
    assert unnormalised in check_merge(raw).message

    def bad_lse(oa, la, ob, lb):
        return by_hand(oa, la, ob, lb)[0], torch.maximum(la, lb)

    assert "(lse)" in check_merge(bad_lse).message


def test_zigzag():
    assert check_zigzag_chunks(lambda r, P: [r, 2 * P - 1 - r]).passed
    assert check_zigzag_chunks(stub).status == "not attempted"
    assert check_zigzag_chunks(lambda r, P: None).status == "not attempted"
    contiguous, off_by_one, striped, reversed_ = zigzag_mistakes()
    assert contiguous in check_zigzag_chunks(lambda r, P: [2 * r, 2 * r + 1]).message
    assert off_by_one in check_zigzag_chunks(lambda r, P: [r, 2 * P - r]).message
    assert striped in check_zigzag_chunks(lambda r, P: [r, r + P]).message
    assert reversed_ in check_zigzag_chunks(lambda r, P: [2 * P - 1 - r, r]).message
    assert "mirror image" in check_zigzag_chunks(lambda r, P: [r, r]).message
    assert "return a list" in check_zigzag_chunks(lambda r, P: "ab").message


def test_zigzag_work():
    assert check_zigzag_work(9).passed
    assert check_zigzag_work(None).status == "not attempted"
    every, no_diagonal, average = zigzag_work_mistakes()
    assert every in check_zigzag_work(16).message
    assert no_diagonal in check_zigzag_work(7).message
    assert average in check_zigzag_work(10).message


def test_ulysses_limit():
    assert check_ulysses_limit(8).passed
    assert check_ulysses_limit(None).status == "not attempted"
    query_heads, group, partial = ulysses_mistakes()
    assert query_heads in check_ulysses_limit(32).message
    assert group in check_ulysses_limit(4).message
    assert partial in check_ulysses_limit(16).message
