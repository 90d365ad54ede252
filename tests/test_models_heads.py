"""The prev/first lookup task and the tiny model whose heads divide the work (chapter 5)."""

import pytest
import torch
from selfattn import train_loop
from selfattn.data import IGNORE_INDEX, prev_first_lookup
from selfattn.models import LookupHeadsModel, lookup_loss


def test_lookup_targets():
    b = prev_first_lookup(4, 6, 5, generator=torch.Generator().manual_seed(0))
    assert b.tokens.shape == b.prev.shape == b.first.shape == (4, 6)
    assert (b.prev[:, 0] == IGNORE_INDEX).all() and (b.first[:, 0] == IGNORE_INDEX).all()
    assert torch.equal(b.prev[:, 1:], b.tokens[:, :-1])
    assert torch.equal(b.first[:, 1:], b.tokens[:, :1].expand(4, 5))
    assert b.tokens.max() < 5
    again = prev_first_lookup(4, 6, 5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again.tokens, b.tokens)
    with pytest.raises(ValueError, match="n >= 2"):
        prev_first_lookup(4, 1)


def test_two_heads_learn_the_two_lookups():
    torch.manual_seed(0)
    model = LookupHeadsModel(num_heads=2)
    g = torch.Generator().manual_seed(1)
    train_loop(
        model,
        lambda step: prev_first_lookup(64, generator=g),
        lookup_loss,
        steps=300,
        lr=3e-3,
        clip=None,
    )
    test = prev_first_lookup(256, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        prev_logits, first_logits, w = model(test.tokens)
    assert (prev_logits.argmax(-1) == test.prev)[:, 1:].float().mean() > 0.95
    assert (first_logits.argmax(-1) == test.first)[:, 1:].float().mean() > 0.95
    assert w.shape == (256, 2, 12, 12)
    # one head looks at the previous position, the other at position 0 (queries i >= 2, where they
    # differ)
    mean = w.mean(0)
    prev_w = torch.stack([mean[:, i, i - 1] for i in range(2, 12)], -1).mean(-1)  # (h,)
    first_w = mean[:, 2:, 0].mean(-1)
    assert prev_w.max() > 0.8 and first_w.max() > 0.8
    assert prev_w.argmax() != first_w.argmax()


def test_model_bad_input():
    model = LookupHeadsModel(max_len=4)
    with pytest.raises(ValueError, match="max_len=4"):
        model(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="long"):
        model(torch.zeros(1, 3))
