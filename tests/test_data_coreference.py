"""The coreference sentences: grammar of the family, answers, the held-out split, errors."""

import pytest
import torch
from selfattn.data import CorefTask


def test_the_articles_sentence_and_its_answer():
    task = CorefTask()
    ex = task.example(0, "animal", "street", "tired")
    assert ex.text == "the animal didn't cross the street because it was too tired"
    assert ex.antecedent == "animal" and ex.tokens[ex.antecedent_position] == "animal"
    wide = task.example(0, "animal", "street", "wide")
    assert wide.antecedent == "street" and wide.tokens[wide.other_position] == "animal"
    second = task.example(1, "dog", "river", "hungry")
    assert second.text == "the river didn't suit the dog because it was too hungry"
    assert second.antecedent_position == 5 and second.it_position == 7


def test_every_sentence_is_consistent():
    task = CorefTask()
    examples = task.all_examples()
    assert len(examples) == 2 * 6 * 6 * 8 == len({e.text for e in examples})
    for e in examples:
        assert len(e.tokens) == 11 and e.tokens[e.it_position] == "it"
        assert {e.antecedent_position, e.other_position} == {1, 5}
        assert e.tokens[e.antecedent_position] == e.antecedent
        animal_adjective = e.adjective in task.animal_adjectives
        assert (e.antecedent in task.animals) == animal_adjective
    # the answer is in position 1 exactly half the time: position alone does not decide
    assert sum(e.antecedent_position == 1 for e in examples) == len(examples) // 2


def test_split_holds_out_whole_pairs_and_is_deterministic():
    task = CorefTask()
    train, test = task.split(0.25, seed=0)
    assert len(train) + len(test) == 576 and len(test) == 12 * 12
    train_pairs = {(e.antecedent, e.adjective) for e in train.examples}
    test_pairs = {(e.antecedent, e.adjective) for e in test.examples}
    assert not train_pairs & test_pairs and len(test_pairs) == 12
    assert {e.antecedent for e in train.examples} == set(task.nouns)
    again = task.split(0.25, seed=0)[1]
    assert torch.equal(again.ids, test.ids)
    assert not torch.equal(task.split(0.25, seed=1)[1].ids, test.ids)


def test_encoded_split_matches_the_examples():
    task = CorefTask()
    _, test = task.split(seed=2)
    assert test.ids.shape == (len(test), 11) and test.ids.dtype == torch.long
    for i in (0, 17, len(test) - 1):
        e = test.examples[i]
        assert task.decode(test.ids[i]) == list(e.tokens)
        assert task.nouns[test.targets[i]] == e.antecedent
        assert test.ids[i, test.antecedent_position[i]] == task.vocab.stoi[e.antecedent]
        assert test.it_position[i] == 7
    assert torch.equal(task.encode(list(test.examples[0].tokens)), test.ids[0])


def test_errors():
    task = CorefTask()
    with pytest.raises(ValueError, match="animal must be one of .* got 'street'"):
        task.example(0, "street", "river", "wide")
    with pytest.raises(ValueError, match="template must be in 0..1, got 2"):
        task.example(2, "dog", "river", "wide")
    with pytest.raises(ValueError, match=r"held_out must be a fraction in \(0, 1\), got 1.5"):
        task.split(1.5)
    with pytest.raises(ValueError, match="need at least one example"):
        task.encode_examples([])
