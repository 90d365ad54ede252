"""A tiny classifier trained on the long-range task, shared by the model tests.

Not a test module: ``tests/`` is on ``sys.path`` (it holds ``conftest.py``).
"""

import torch
from selfattn import train_loop
from selfattn.data import LongRangeTask


def long_range_accuracy(make_model, lengths, *, lr, eval_length, eval_seed, steps=300):
    """Train ``make_model(vocab_size)`` (4 classes) on ``lengths``; accuracy at ``eval_length``."""
    torch.manual_seed(0)
    torch.set_num_threads(1)  # tiny model: extra threads only add contention
    task = LongRangeTask(4)
    model = make_model(len(task.vocab))
    train_loop(
        model,
        task.sampler(lengths, 32, seed=0),
        lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]),
        steps=steps,
        lr=lr,
        progress=False,
    )
    ids, y = task.batch(eval_length, 200, seed=eval_seed)
    return float((model(ids).argmax(-1) == y).float().mean())
