"""A small generated English corpus for the language-model demos (chapter 9).

Nothing is downloaded: the text comes from a tiny grammar with rules a model can
discover, some of which need context from *both* sides of a word (what BERT's
bidirectional attention is for) and some over a distance (what attention is for):

* each subject does only some things (a *bird* never *chases*), and each verb takes
  only some objects (one *eats* a fish, *sees* a star): a masked verb is pinned down
  by the subject on its left *and* the object on its right;
* the verb agrees in number with its subject (*the cat chases*, *the cats chase*);
* an optional clause refers back to the subject with a pronoun that agrees in
  number (*... because it is tired* / *... because they are tired*), the "it" of
  the source article's example, several words after the noun it refers to;
* adjectives are drawn at random, so no model can predict them better than chance:
  a built-in ceiling that keeps the reported accuracy honest.

Words are tokens for the masked-language model (:func:`word_vocab`); characters
are tokens for the character-level GPT (:func:`char_vocab`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from .._checks import require_int, require_tensor
from .vocab import Vocab

__all__ = [
    "SUBJECT_VERBS",
    "VERB_OBJECTS",
    "ADJECTIVES",
    "MASK",
    "generate_sentences",
    "is_grammatical",
    "corpus",
    "word_vocab",
    "char_vocab",
    "encode_sentences",
    "mask_tokens",
    "char_windows",
]

#: subject (singular, plural) -> the verbs it may use
SUBJECT_VERBS: dict[tuple[str, str], tuple[str, ...]] = {
    ("cat", "cats"): ("chase", "see", "eat"),
    ("dog", "dogs"): ("chase", "find", "follow"),
    ("bird", "birds"): ("see", "eat", "follow"),
    ("fox", "foxes"): ("chase", "eat", "find"),
    ("child", "children"): ("see", "find", "follow"),
}
#: verb (plural form, singular form) -> the objects it may take
VERB_OBJECTS: dict[tuple[str, str], tuple[str, ...]] = {
    ("chase", "chases"): ("mouse", "ball", "rabbit"),
    ("see", "sees"): ("star", "river", "tree"),
    ("eat", "eats"): ("fish", "apple", "seed"),
    ("follow", "follows"): ("road", "river", "boat"),
    ("find", "finds"): ("ball", "key", "apple"),
}
#: adjectives, drawn at random so that no model can predict them (a built-in ceiling)
ADJECTIVES: tuple[str, ...] = ("small", "big", "red", "old", "quick")
_STATES = ("hungry", "tired", "happy")
_FUNCTION_WORDS = ("the", "because", "it", "is", "they", "are", ".")
#: the token that replaces masked words in the masked-language-model task
MASK = "<mask>"


def _verb_forms() -> dict[str, tuple[str, str]]:
    return {plural: (plural, singular) for plural, singular in VERB_OBJECTS}


def generate_sentences(n: int, *, seed: int = 0, clause_prob: float = 0.5) -> list[str]:
    """``n`` sentences from the grammar, words separated by single spaces, ending in ``" ."``.

    Example: ``"the small cats chase the ball because they are tired ."``.
    Deterministic given ``seed``.
    """
    n = require_int(n, "n", 1)
    if not 0.0 <= clause_prob <= 1.0:
        raise ValueError(f"clause_prob must lie in [0, 1], got {clause_prob}")
    rng = random.Random(seed)
    forms = _verb_forms()
    subjects = list(SUBJECT_VERBS)
    out = []
    for _ in range(n):
        subject = rng.choice(subjects)
        plural = rng.random() < 0.5
        verb_plural, verb_singular = forms[rng.choice(SUBJECT_VERBS[subject])]
        obj = rng.choice(VERB_OBJECTS[(verb_plural, verb_singular)])
        words = ["the"]
        if rng.random() < 0.5:
            words.append(rng.choice(ADJECTIVES))
        words += [
            subject[1] if plural else subject[0],
            verb_plural if plural else verb_singular,
            "the",
        ]
        if rng.random() < 0.5:
            words.append(rng.choice(ADJECTIVES))
        words.append(obj)
        if rng.random() < clause_prob:
            words += [
                "because",
                "they" if plural else "it",
                "are" if plural else "is",
                rng.choice(_STATES),
            ]
        words.append(".")
        out.append(" ".join(words))
    return out


def is_grammatical(sentence: str) -> bool:
    """Whether ``sentence`` (space-separated words) is one the grammar of
    :func:`generate_sentences` can produce."""
    if not isinstance(sentence, str):
        raise TypeError(f"sentence must be a str, got {type(sentence).__name__} {sentence!r}")
    w = sentence.split()
    if len(w) < 6 or w[0] != "the" or w[-1] != ".":
        return False
    forms = {form: key for key in VERB_OBJECTS for form in key}
    i = 2 if w[1] in ADJECTIVES else 1
    subject = next(((key, w[i] == key[1]) for key in SUBJECT_VERBS if w[i] in key), None)
    if subject is None or len(w) < i + 4:
        return False
    (key, plural), verb = subject, w[i + 1]
    if (
        verb not in forms
        or forms[verb][0] not in SUBJECT_VERBS[key]
        or verb != forms[verb][0 if plural else 1]
    ):
        return False
    if w[i + 2] != "the":
        return False
    j = i + 4 if w[i + 3] in ADJECTIVES else i + 3
    if j >= len(w) or w[j] not in VERB_OBJECTS[forms[verb]]:
        return False
    rest = w[j + 1 :]
    if rest == ["."]:
        return True
    clause = ["because", "they", "are"] if plural else ["because", "it", "is"]
    return len(rest) == 5 and rest[:3] == clause and rest[3] in _STATES and rest[4] == "."


def corpus(n_sentences: int = 4000, *, seed: int = 0) -> str:
    """The character-level corpus: ``n_sentences`` sentences, one per line (about 40 characters
    each)."""
    return "\n".join(generate_sentences(n_sentences, seed=seed)) + "\n"


def word_vocab() -> Vocab:
    """Every word the grammar can produce, with ``<pad>`` (id 0) and :data:`MASK` (id 1) first."""
    words = set(_FUNCTION_WORDS) | set(ADJECTIVES) | set(_STATES)
    for sing, plur in SUBJECT_VERBS:
        words |= {sing, plur}
    for (plural, singular), objects in VERB_OBJECTS.items():
        words |= {plural, singular, *objects}
    return Vocab([MASK, *sorted(words)])


def char_vocab(text: str | None = None) -> Vocab:
    """Characters of ``text`` (default: every character the grammar uses), sorted; no padding
    token."""
    if text is None:
        text = "\n" + " ".join(word_vocab().itos[2:])
    return Vocab(sorted(set(text)), pad=None)


def encode_sentences(sentences: Sequence[str], vocab: Vocab, *, max_len: int | None = None):
    """Word ids, right-padded with ``vocab.pad_id``.

    Args:
        sentences: ``B`` strings of space-separated words.
        vocab: a word vocabulary with a padding token (:func:`word_vocab`).
        max_len: pad to this length (default: the longest sentence).

    Returns:
        ``(ids, lengths)``: ``ids`` a long tensor ``(B, max_len)``, ``lengths`` ``(B,)``.
    """
    if not isinstance(vocab, Vocab):
        raise TypeError(f"vocab must be a selfattn.data.vocab.Vocab, got {type(vocab).__name__}")
    if isinstance(sentences, str) or not all(isinstance(t, str) for t in sentences):
        raise TypeError(f"sentences must be a sequence of str, got {sentences!r:.80}")
    if vocab.pad_id is None:
        raise ValueError(
            "encode_sentences needs a vocabulary with a padding token, got one with pad=None"
        )
    tokens = [s.split() for s in sentences]
    if not tokens:
        raise ValueError("encode_sentences got no sentences")
    longest = max(len(t) for t in tokens)
    max_len = longest if max_len is None else max_len
    if max_len < longest:
        raise ValueError(
            f"max_len={max_len} is shorter than the longest sentence ({longest} words)"
        )
    ids = torch.full((len(tokens), max_len), vocab.pad_id, dtype=torch.long)
    for i, t in enumerate(tokens):
        ids[i, : len(t)] = vocab.encode(t)
    return ids, torch.tensor([len(t) for t in tokens], dtype=torch.long)


def mask_tokens(
    ids: torch.Tensor,
    lengths: torch.Tensor,
    *,
    mask_id: int,
    vocab_size: int,
    prob: float = 0.15,
    first_id: int = 2,
    generator: torch.Generator | None = None,
):
    """BERT's corruption: pick ~``prob`` of the real tokens (at least one per sentence) to predict.

    Of the picked tokens 80% become ``mask_id``, 10% a random word, 10% stay as they are
    (so the model cannot tell the predicted positions apart by their input alone).

    Args:
        ids: ``(B, L)`` word ids; positions ``>= lengths`` are padding and never picked.
        lengths: ``(B,)`` true lengths (each >= 1).
        mask_id: id of :data:`MASK`.
        vocab_size: random replacements are drawn from ``first_id .. vocab_size - 1``.
        prob: fraction of real tokens to pick.
        first_id: first id of a real word (skips ``<pad>`` and ``<mask>``).
        generator: torch random generator, for reproducibility.

    Returns:
        ``(inputs, targets)``, both ``(B, L)``: ``targets`` holds the original id at picked
        positions and ``-100`` (ignored by ``cross_entropy``) everywhere else.
    """
    if ids.dim() != 2 or lengths.shape != ids.shape[:1]:
        raise ValueError(
            f"ids must be (B, L) and lengths (B,), "
            f"got {tuple(ids.shape)} and {tuple(lengths.shape)}"
        )
    if (lengths < 1).any() or (lengths > ids.shape[1]).any():
        raise ValueError(f"every length must lie in 1..{ids.shape[1]}, got {lengths.tolist()}")
    if not 0.0 < prob <= 1.0:
        raise ValueError(f"prob must lie in (0, 1], got {prob}")
    B, L = ids.shape
    real = torch.arange(L)[None, :] < lengths[:, None]
    u = torch.rand(B, L, generator=generator)
    picked = (u < prob) & real
    # At least one prediction per sentence: force the real position with the smallest draw.
    forced = torch.where(real, u, torch.full_like(u, 2.0)).argmin(dim=1)
    picked[torch.arange(B), forced] = True
    action = torch.rand(B, L, generator=generator)
    random_words = torch.randint(first_id, vocab_size, (B, L), generator=generator)
    inputs = ids.clone()
    inputs[picked & (action < 0.8)] = mask_id
    swap = picked & (action >= 0.8) & (action < 0.9)
    inputs[swap] = random_words[swap]
    targets = torch.where(picked, ids, torch.full_like(ids, -100))
    return inputs, targets


def char_windows(
    data: torch.Tensor,
    block_size: int,
    batch_size: int,
    *,
    generator: torch.Generator | None = None,
):
    """Random windows of a 1-D id tensor for next-character prediction.

    Returns:
        ``(x, y)``, both ``(batch_size, block_size)`` long tensors, ``y`` = ``x`` shifted left by
        one.
    """
    require_tensor(data, "data")
    block_size = require_int(block_size, "block_size", 1)
    batch_size = require_int(batch_size, "batch_size", 1)
    if data.dim() != 1:
        raise ValueError(f"data must be a 1-D tensor of ids, got shape {tuple(data.shape)}")
    if len(data) <= block_size:
        raise ValueError(f"data has {len(data)} ids, needs more than block_size={block_size}")
    starts = torch.randint(0, len(data) - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size)
    x = data[starts[:, None] + offsets]
    y = data[starts[:, None] + offsets + 1]
    return x, y
