"""The long-range task: layout of the sequences, answers, determinism, errors."""

import pytest
import torch
from selfattn.data import LongRangeTask


def test_layout_and_answer_is_the_first_token():
    task = LongRangeTask(5)
    ids, y = task.batch(7, 64, seed=0)
    assert ids.shape == (64, 9) and y.shape == (64,) and ids.dtype == y.dtype == torch.long
    assert (ids[:, -1] == task.query_id).all()
    assert (ids[:, :-1] >= 1).all() and (ids[:, :-1] <= 5).all()  # symbols only, no pad, no '?'
    assert torch.equal(task.symbol_ids(y), ids[:, 0])
    assert (y >= 0).all() and (y < task.num_classes).all()
    assert set(task.decode(ids[0])[:-1]) <= set(task.symbols) and task.decode(ids[0])[-1] == "?"


def test_distance_zero_and_encode_decode_roundtrip():
    task = LongRangeTask(3)
    ids, y = task.batch(0, 4, seed=1)
    assert ids.shape == (4, 2)
    tokens = task.decode(ids[2])
    assert torch.equal(task.encode(tokens), ids[2]) and tokens[0] == task.symbols[y[2]]


def test_deterministic_given_a_seed_and_distractors_vary():
    task = LongRangeTask(8)
    a, b = task.batch(20, 16, seed=3), task.batch(20, 16, seed=3)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], task.batch(20, 16, seed=4)[0])
    # every symbol occurs among the distractors: the key cannot be found by what it is
    assert set(a[0][:, 1:-1].unique().tolist()) == set(range(1, 9))


def test_sampler_stream_is_reproducible_and_covers_the_range():
    task = LongRangeTask(4)
    s1, s2 = task.sampler((2, 5), 8, seed=0), task.sampler((2, 5), 8, seed=0)
    lengths = set()
    for step in range(40):
        (i1, y1), (i2, y2) = s1(step), s2(step)
        assert torch.equal(i1, i2) and torch.equal(y1, y2)
        lengths.add(i1.shape[1] - 2)
    assert lengths == {2, 3, 4, 5}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(distance=-1, batch_size=2), "distance must be >= 0, got -1"),
        (dict(distance=2.5, batch_size=2), "distance must be an int, got float 2.5"),
        (dict(distance=2, batch_size=0), "batch_size must be >= 1, got 0"),
        (
            dict(distance=2, batch_size=2, seed=1, generator=torch.Generator()),
            "seed or generator, not both",
        ),
    ],
)
def test_bad_batch_arguments(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        LongRangeTask(4).batch(**kwargs)


def test_bad_constructor_and_sampler():
    with pytest.raises(ValueError, match="n_symbols must be between 2 and 26, got 1"):
        LongRangeTask(1)
    with pytest.raises(ValueError, match=r"distances must be \(lo, hi\)"):
        LongRangeTask(4).sampler((5, 2), 8)
