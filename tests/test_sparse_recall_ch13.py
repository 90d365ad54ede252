"""Chapter 13's sparse recall models: NSA and DSA mixers in models.recall_stack."""

from __future__ import annotations

import pytest
import torch
from selfattn.data.mqar import mqar_batch
from selfattn.models.recall_stack import NSA_BLOCK, RecallStack, train_recall


@pytest.mark.parametrize("kind", ["nsa", "dsa"])
def test_sparse_mixers_select_tokens(kind):
    torch.manual_seed(0)
    net = RecallStack((kind,), d_model=16, tokens=16).eval()
    layer = net.blocks[0]["mix"].sparse
    if kind == "nsa":
        assert layer.num_selected * NSA_BLOCK == 16 and layer.window == 8
    else:
        assert layer.top_k == 16
    b = mqar_batch(2, 8, generator=torch.Generator().manual_seed(0))
    assert net(b.keys, b.values).shape == (2, 16, 64)


def test_dsa_trains_its_indexer_on_the_kl_loss_only():
    torch.manual_seed(0)
    net = RecallStack(("dsa",), d_model=16, tokens=2)
    mix = net.blocks[0]["mix"]
    b = mqar_batch(2, 8, generator=torch.Generator().manual_seed(0))
    net(b.keys, b.values).sum().backward()
    assert mix.sparse.index_q.weight.grad is None  # top-k passes no gradient
    assert mix.aux is not None and mix.aux.requires_grad
    net.zero_grad()
    mix.aux.backward()
    assert mix.sparse.index_q.weight.grad is not None
    assert mix.sparse.qkv.weight.grad is None  # the main attention is detached


def test_train_recall_records_the_tokens():
    r = train_recall("dsa", 4, steps=4, batch=4, d_model=16, eval_batch=8, tokens=2)
    assert r["tokens"] == 2 and 0 <= r["recall"] <= 1
    assert "tokens" not in train_recall("linear", 4, steps=2, batch=4, d_model=16, eval_batch=8)


def test_bad_tokens_are_refused():
    with pytest.raises(ValueError, match="tokens"):
        RecallStack(("nsa",), tokens=0)
    with pytest.raises(ValueError, match="mixers"):
        RecallStack(("sparse",))
