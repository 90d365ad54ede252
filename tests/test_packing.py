"""selfattn.packing: packed and padded layouts give every document the same outputs."""

import pytest
import torch
from selfattn.packing import PackedLM, make_documents, packed_batch, padded_batch, train_lm


def _per_document(layout, logits, docs):
    """Each document's logits, found by its targets' positions in the layout."""
    out, flat_ids = [], layout.ids.reshape(-1)
    flat_pos, flat = layout.positions.reshape(-1), logits.reshape(-1, logits.shape[-1])
    used = torch.zeros_like(flat_ids, dtype=torch.bool)
    for doc in docs:
        for start in range(len(flat_ids) - len(doc) + 1):
            span = slice(start, start + len(doc))
            if (
                not used[span].any()
                and torch.equal(flat_ids[span], doc)
                and torch.equal(flat_pos[span], torch.arange(len(doc)))
            ):
                used[span] = True
                out.append(flat[span])
                break
        else:
            raise AssertionError("document not found in the layout")
    return out


def test_packed_and_padded_give_each_document_the_same_logits():
    docs, vocab = make_documents(9, seed=3)
    torch.manual_seed(0)
    model = PackedLM(vocab, max_len=64).eval()
    with torch.no_grad():
        padded, packed = padded_batch(docs), packed_batch(docs)
        for a, b in zip(
            _per_document(padded, model(padded), docs), _per_document(packed, model(packed), docs)
        ):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(model.loss(padded), model.loss(packed), atol=1e-5, rtol=1e-5)
    assert padded.real == packed.real == sum(len(d) for d in docs)
    assert packed.wasted < padded.wasted
    assert packed.mask.shape[-1] == max(len(d) for d in docs)


def test_packed_rows_and_refusals():
    docs = [torch.arange(5), torch.arange(3), torch.arange(2)]
    layout = packed_batch(docs, row_length=5)
    assert layout.ids.shape == (2, 5) and layout.real == 10 and layout.wasted == 0.0
    assert layout.positions.tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 0, 1]]
    with pytest.raises(ValueError, match="row_length"):
        packed_batch(docs, row_length=4)
    with pytest.raises(ValueError, match="layout"):
        train_lm("zipped", docs, docs, 5)


def test_training_packed_and_padded_ends_at_the_same_loss():
    docs, vocab = make_documents(40, seed=1)
    runs = [
        train_lm(x, docs[:32], docs[32:], vocab, steps=3, batch_docs=8)
        for x in ("padded", "packed")
    ]
    assert abs(runs[0]["eval_loss"] - runs[1]["eval_loss"]) < 1e-4
    assert runs[1]["wasted"] < runs[0]["wasted"]
