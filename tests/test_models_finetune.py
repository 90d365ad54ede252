"""selfattn.models.finetune: the grammaticality task, the causal BERT, fine-tuning, probes and
the separate matching head of chapter 9."""

from __future__ import annotations

import pytest
import torch
from selfattn.data.images import caption_vocab, make_shapes
from selfattn.data.text import encode_sentences, generate_sentences, is_grammatical, word_vocab
from selfattn.models import MiniBERT, MiniCLIP
from selfattn.models.finetune import (
    CORRUPTIONS,
    CausalMiniBERT,
    MatchHead,
    SentenceClassifier,
    context_probes,
    finetune_run,
    grammar_task,
    match_sources,
    pretrain_mlm,
)

WV = word_vocab()


def small_bert(cls=MiniBERT, seed=0):
    torch.manual_seed(seed)
    return cls(len(WV), d_model=16, num_heads=2, num_layers=1, max_len=16, pad_id=WV.pad_id)


def test_grammar_task_labels_match_the_grammar():
    sentences, labels, kinds = grammar_task(400, seed=3)
    assert labels.sum().item() == 200  # half grammatical
    for s, y, k in zip(sentences, labels.tolist(), kinds):
        assert is_grammatical(s) == bool(y), (s, k)
        assert (k == "grammatical") == bool(y)
    assert set(kinds) == {"grammatical", *CORRUPTIONS}
    again = grammar_task(400, seed=3)
    assert again[0] == sentences and torch.equal(again[1], labels)
    assert grammar_task(400, seed=4)[0] != sentences


def test_pronoun_corruption_is_locally_fine():
    sentences, _, kinds = grammar_task(400, seed=5)
    for s, k in zip(sentences, kinds):
        if k == "pronoun":  # the clause itself is well formed: only the subject contradicts it
            assert "because it is" in s or "because they are" in s


def test_causal_bert_reads_only_the_left():
    ids, _ = encode_sentences(["the cats eat the fish because they are hungry ."], WV)
    changed = ids.clone()
    changed[0, 5] = WV.stoi["apple"]  # change a word in the middle
    for cls, causal in ((CausalMiniBERT, True), (MiniBERT, False)):
        model = small_bert(cls).eval()
        with torch.no_grad():
            a, b = model(ids), model(changed)
        left_same = torch.allclose(a[0, :5], b[0, :5], atol=1e-6)
        assert left_same == causal
    mask = CausalMiniBERT(len(WV), pad_id=0).padding_mask(torch.tensor([[3, 4, 0]]))
    expected = torch.tensor([[[1, 0, 0], [1, 1, 0], [1, 1, 0]]], dtype=torch.bool)
    assert torch.equal(mask, expected)


def test_classifier_ignores_padding():
    model = SentenceClassifier(small_bert(), 2).eval()
    ids, _ = encode_sentences(["the dog finds the key ."], WV)
    padded = torch.full((1, 12), WV.pad_id)
    padded[0, : ids.shape[1]] = ids[0]
    with torch.no_grad():
        assert torch.allclose(model(ids), model(padded), atol=1e-5)
    assert model(padded).shape == (1, 2)
    with pytest.raises(TypeError, match="bert"):
        SentenceClassifier("not a model", 2)


def test_finetune_run_leaves_the_pretrained_model_alone():
    ids, lengths = encode_sentences(generate_sentences(64, seed=1), WV, max_len=16)
    bert = small_bert()
    losses = pretrain_mlm(bert, ids, lengths, WV, steps=3, batch_size=8)
    assert len(losses) == 3
    before = {k: v.clone() for k, v in bert.state_dict().items()}
    s, y, _ = grammar_task(40, seed=2)
    x, _ = encode_sentences(s, WV, max_len=16)
    out = finetune_run(bert, x[:20], y[:20], x[20:], y[20:], WV, steps=2, batch_size=4)
    assert 0.0 <= out["accuracy"] <= 1.0 and len(out["losses"]) == 2
    assert all(torch.equal(before[k], v) for k, v in bert.state_dict().items())
    scratch = finetune_run(None, x[:20], y[:20], x[20:], y[20:], WV, steps=2, batch_size=4)
    assert 0.0 <= scratch["accuracy"] <= 1.0
    with pytest.raises(ValueError, match="same length"):
        finetune_run(None, x[:20], y[:10], x, y, WV, steps=1)


def test_context_probes_kinds():
    result = context_probes(small_bert(), generate_sentences(30, seed=7), WV)
    assert set(result) == {"subject number", "verb", "pronoun"}
    assert all(0.0 <= v <= 1.0 for v in result.values())


def test_match_head_equals_miniclip_match():
    cv = caption_vocab()
    torch.manual_seed(0)
    clip = MiniCLIP(len(cv), image_size=24, patch=6, d_model=16, num_heads=2, num_layers=1,
                    max_text_len=8, pad_id=cv.pad_id).eval()  # fmt: skip
    head = MatchHead(16, 2)
    head.ln.load_state_dict(clip.ln_cross.state_dict())
    head.cross.load_state_dict(clip.cross.state_dict())
    head.head.load_state_dict(clip.match_head.state_dict())
    images = make_shapes(3, image_size=24, seed=0).images
    ids, _ = encode_sentences(["a big red square", "a small blue cross", "a red"], cv)
    with torch.no_grad():
        expected, w_expected = clip.match(images, ids, return_weights=True)
        words, real, patches = match_sources(clip, images, ids, words="encoder",
                                             patches="encoder")  # fmt: skip
        got, w_got = head(words, real, patches, return_weights=True)
    assert torch.allclose(got, expected, atol=1e-6)
    assert torch.allclose(w_got, w_expected, atol=1e-6)
    w, r, p = match_sources(clip, images, ids, words="embedding", patches="embedding")
    assert w.shape == (3, ids.shape[1], 16) and p.shape == (3, 16, 16)
    assert torch.equal(r, ids != cv.pad_id)
    with pytest.raises(ValueError, match="words and patches"):
        match_sources(clip, images, ids, words="middle", patches="encoder")
