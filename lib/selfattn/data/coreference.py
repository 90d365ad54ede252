"""What does "it" refer to? A synthetic family of coreference sentences (chapter 2).

Each sentence has the shape of the articles' example, "The animal didn't cross the
street because it was too tired": one animal, one place, the pronoun ``it`` and an
adjective. The adjective decides the antecedent: ``tired`` can only describe the
animal, ``wide`` only the place. Two templates put the animal first or second, so
the position of a noun does not give the answer away:

* ``the {animal} didn't cross the {place} because it was too {adjective}``
* ``the {place} didn't suit the {animal} because it was too {adjective}``

Every template has 11 tokens: the nouns sit at positions 1 and 5, ``it`` at 7.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from ._examples import Examples
from .vocab import Vocab

__all__ = ["CorefTask", "CorefExample", "CorefSplit"]

ANIMALS = ("animal", "dog", "cat", "horse", "fox", "bird")
PLACES = ("street", "river", "road", "bridge", "field", "hill")
ANIMAL_ADJECTIVES = ("tired", "hungry", "scared", "sleepy")
PLACE_ADJECTIVES = ("wide", "wet", "steep", "busy")
TEMPLATES = (
    ("the {animal} didn't cross the {place} because it was too {adjective}", "animal_first"),
    ("the {place} didn't suit the {animal} because it was too {adjective}", "place_first"),
)


@dataclass(frozen=True)
class CorefExample:
    """One sentence with its answer.

    Attributes:
        tokens: the sentence, one string per token.
        antecedent: the noun ``it`` refers to.
        antecedent_position: index of that noun in ``tokens``.
        other_position: index of the other noun.
        it_position: index of ``it``.
        adjective: the adjective that decides.
    """

    tokens: tuple[str, ...]
    antecedent: str
    antecedent_position: int
    other_position: int
    it_position: int
    adjective: str

    @property
    def text(self) -> str:
        """The sentence as one string."""
        return " ".join(self.tokens)


@dataclass
class CorefSplit(Examples):
    """A set of encoded sentences, ready for a model; ``len()`` counts them, ``to(device)``
    moves the tensors.

    Attributes:
        ids: ``(B, n)`` long token ids.
        targets: ``(B,)`` long, the antecedent's class (index into :attr:`CorefTask.nouns`).
        it_position: ``(B,)`` long, where ``it`` is.
        antecedent_position: ``(B,)`` long, where the correct noun is.
        other_position: ``(B,)`` long, where the other noun is.
        examples: the :class:`CorefExample` objects, in the same order.
    """

    ids: torch.Tensor
    targets: torch.Tensor
    it_position: torch.Tensor
    antecedent_position: torch.Tensor
    other_position: torch.Tensor
    examples: list[CorefExample]


class CorefTask:
    """All sentences of the family, a vocabulary, and a split by held-out noun/adjective pairs.

    Attributes:
        nouns: the answer classes, animals then places.
        adjectives: animal adjectives then place adjectives.
        vocab: ``selfattn.data.Vocab`` of every word (``<pad>`` is id 0).

    Example:
        >>> task = CorefTask()
        >>> ex = task.example(0, "dog", "river", "wide"); ex.text, ex.antecedent
        ("the dog didn't cross the river because it was too wide", 'river')
    """

    animals = ANIMALS
    places = PLACES
    animal_adjectives = ANIMAL_ADJECTIVES
    place_adjectives = PLACE_ADJECTIVES
    templates = TEMPLATES

    def __init__(self):
        self.nouns: list[str] = list(ANIMALS + PLACES)
        self.adjectives: list[str] = list(ANIMAL_ADJECTIVES + PLACE_ADJECTIVES)
        words: list[str] = []
        for template, _ in TEMPLATES:
            for w in template.split():
                if not w.startswith("{") and w not in words:
                    words.append(w)
        self.vocab = Vocab(words + self.nouns + self.adjectives)

    @property
    def num_classes(self) -> int:
        """Number of answer classes (the nouns)."""
        return len(self.nouns)

    def example(self, template: int, animal: str, place: str, adjective: str) -> CorefExample:
        """The sentence of ``template`` (0 or 1) with these words, and its answer."""
        if template not in range(len(TEMPLATES)):
            raise ValueError(f"template must be in 0..{len(TEMPLATES) - 1}, got {template!r}")
        for word, allowed, what in (
            (animal, ANIMALS, "animal"),
            (place, PLACES, "place"),
            (adjective, self.adjectives, "adjective"),
        ):
            if word not in allowed:
                raise ValueError(f"{what} must be one of {list(allowed)}, got {word!r}")
        text, _ = TEMPLATES[template]
        tokens = tuple(text.format(animal=animal, place=place, adjective=adjective).split())
        animal_pos, place_pos = tokens.index(animal), tokens.index(place)
        refers_to_animal = adjective in ANIMAL_ADJECTIVES
        return CorefExample(
            tokens=tokens,
            antecedent=animal if refers_to_animal else place,
            antecedent_position=animal_pos if refers_to_animal else place_pos,
            other_position=place_pos if refers_to_animal else animal_pos,
            it_position=tokens.index("it"),
            adjective=adjective,
        )

    def all_examples(self) -> list[CorefExample]:
        """Every sentence of the family (2 templates x 6 animals x 6 places x 8 adjectives =
        576)."""
        return [
            self.example(t, a, p, adj)
            for t, a, p, adj in itertools.product(
                range(len(TEMPLATES)), ANIMALS, PLACES, self.adjectives
            )
        ]

    def pairs(self) -> list[tuple[str, str]]:
        """Every (antecedent noun, adjective) combination that occurs (6x4 + 6x4 = 48)."""
        return [(a, adj) for a in ANIMALS for adj in ANIMAL_ADJECTIVES] + [
            (p, adj) for p in PLACES for adj in PLACE_ADJECTIVES
        ]

    def split(self, held_out: float = 0.25, *, seed: int = 0) -> tuple[CorefSplit, CorefSplit]:
        """Train and test sets that share no (antecedent, adjective) pair.

        A random ``held_out`` fraction of :meth:`pairs` (chosen by ``seed``) goes to the
        test set with every sentence that contains it, so the test asks about noun and
        adjective combinations the model has never seen together. Every noun and every
        adjective still occurs in training (the split is redrawn until it does).

        Returns:
            ``(train, test)`` :class:`CorefSplit` objects.
        """
        if not 0.0 < held_out < 1.0:
            raise ValueError(f"held_out must be a fraction in (0, 1), got {held_out!r}")
        pairs = self.pairs()
        k = max(1, round(held_out * len(pairs)))
        generator = torch.Generator().manual_seed(seed)
        examples = self.all_examples()
        for _ in range(100):
            order = torch.randperm(len(pairs), generator=generator).tolist()
            test_pairs = {pairs[i] for i in order[:k]}
            train = [e for e in examples if (e.antecedent, e.adjective) not in test_pairs]
            test = [e for e in examples if (e.antecedent, e.adjective) in test_pairs]
            seen_nouns = {e.antecedent for e in train}
            seen_adjectives = {e.adjective for e in train}
            if seen_nouns == set(self.nouns) and seen_adjectives == set(self.adjectives):
                return self.encode_examples(train), self.encode_examples(test)
        raise ValueError(
            f"held_out={held_out} leaves some noun or adjective without training pairs"
        )

    def encode_examples(self, examples: list[CorefExample]) -> CorefSplit:
        """Encode examples (all of one length) into a :class:`CorefSplit`."""
        if not examples:
            raise ValueError("need at least one example")
        lengths = {len(e.tokens) for e in examples}
        if len(lengths) != 1:
            raise ValueError(f"examples must share one length, got lengths {sorted(lengths)}")
        return CorefSplit(
            ids=torch.stack([self.vocab.encode(list(e.tokens)) for e in examples]),
            targets=torch.tensor([self.nouns.index(e.antecedent) for e in examples]),
            it_position=torch.tensor([e.it_position for e in examples]),
            antecedent_position=torch.tensor([e.antecedent_position for e in examples]),
            other_position=torch.tensor([e.other_position for e in examples]),
            examples=list(examples),
        )

    def encode(self, tokens: list[str]) -> torch.Tensor:
        """Tokens ``(n,)`` -> ids ``(n,)``."""
        return self.vocab.encode(tokens)

    def decode(self, ids) -> list[str]:
        """Ids ``(n,)`` -> tokens."""
        return self.vocab.decode(ids)
