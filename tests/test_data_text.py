import pytest
import torch
from selfattn.data.text import (
    ADJECTIVES,
    MASK,
    SUBJECT_VERBS,
    VERB_OBJECTS,
    char_vocab,
    char_windows,
    corpus,
    encode_sentences,
    generate_sentences,
    is_grammatical,
    mask_tokens,
    word_vocab,
)


def test_sentences_are_deterministic_and_follow_the_grammar():
    a, b = generate_sentences(300, seed=4), generate_sentences(300, seed=4)
    assert a == b and a != generate_sentences(300, seed=5)
    verbs = {form: plural for plural, singular in VERB_OBJECTS for form in (plural, singular)}
    for s in a:
        w = s.split()
        assert w[0] == "the" and w[-1] == "."
        i = 2 if w[1] in ADJECTIVES else 1
        subject, verb = w[i], w[i + 1]
        (sing, plur), allowed = next((k, v) for k, v in SUBJECT_VERBS.items() if subject in k)
        plural = subject == plur
        assert verbs[verb] in allowed, s
        # number agreement: plural subjects take the plural (base) verb form
        assert (verb == verbs[verb]) == plural, s
        j = i + 3 if w[i + 3] not in ADJECTIVES else i + 4
        obj = w[j]
        assert obj in VERB_OBJECTS[next(k for k in VERB_OBJECTS if verb in k)], s
        if "because" in w:
            k = w.index("because")
            assert w[k + 1 : k + 3] == (["they", "are"] if plural else ["it", "is"]), s


def test_vocabularies_cover_the_corpus():
    v = word_vocab()
    assert v.itos[:2] == ["<pad>", MASK]
    sentences = generate_sentences(500, seed=1)
    for s in sentences:
        v.encode(s.split())  # raises KeyError on an unknown word
    text = corpus(500, seed=1)
    cv = char_vocab()
    assert set(text) <= set(cv.itos) and cv.pad_id is None
    assert "".join(cv.decode(cv.encode(list(text)))) == text


def test_encode_sentences_pads_and_checks():
    v = word_vocab()
    ids, lengths = encode_sentences(
        ["the cat sees the star .", "the dog finds the key because it is happy ."], v
    )
    assert ids.shape == (2, 10) and lengths.tolist() == [6, 10]
    assert (ids[0, 6:] == v.pad_id).all() and (ids[1] != v.pad_id).all()
    ids2, _ = encode_sentences(["the cat sees the star ."], v, max_len=12)
    assert ids2.shape == (1, 12)
    with pytest.raises(ValueError, match="max_len=3 is shorter"):
        encode_sentences(["the cat sees the star ."], v, max_len=3)


def test_mask_tokens_never_touches_padding_and_picks_at_least_one():
    v = word_vocab()
    ids, lengths = encode_sentences(generate_sentences(400, seed=2), v)
    g = torch.Generator().manual_seed(0)
    inputs, targets = mask_tokens(ids, lengths, mask_id=1, vocab_size=len(v), generator=g)
    real = torch.arange(ids.shape[1])[None] < lengths[:, None]
    picked = targets != -100
    assert not (picked & ~real).any()
    assert picked.any(dim=1).all()
    assert torch.equal(targets[picked], ids[picked])
    assert torch.equal(inputs[~picked], ids[~picked])  # only picked positions change
    frac_masked = (inputs[picked] == 1).float().mean().item()
    assert 0.7 < frac_masked < 0.9  # 80% of the picked tokens become <mask>
    assert 0.12 < picked[real].float().mean().item() < 0.25  # ~15%, plus the forced ones
    with pytest.raises(ValueError, match="lengths"):
        mask_tokens(ids, lengths[:3], mask_id=1, vocab_size=len(v))


def test_char_windows_are_shifted_by_one():
    data = torch.arange(100)
    x, y = char_windows(data, 10, 4, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 10)
    assert torch.equal(y, x + 1)
    with pytest.raises(ValueError, match="block_size"):
        char_windows(torch.arange(5), 10, 2)
    with pytest.raises(ValueError, match="1-D"):
        char_windows(torch.zeros(3, 40, dtype=torch.long), 10, 2)


def test_bad_arguments():
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        generate_sentences(0)
    with pytest.raises(ValueError, match="clause_prob"):
        generate_sentences(3, clause_prob=2.0)


def test_is_grammatical():
    assert all(is_grammatical(s) for s in generate_sentences(500, seed=9))
    for bad in (
        "the cat chase the mouse .",
        "the cats chases the mouse .",
        "the bird chases the ball .",
        "the cat eats the star .",
        "the dog finds the key because they are happy .",
        "the dog finds the key because it is",
        "the the dog finds the key .",
        "",
        "the dog .",
    ):
        assert not is_grammatical(bad), bad
