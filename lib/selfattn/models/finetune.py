"""Pre-training then fine-tuning, a causal BERT, and cross-attention probes (chapter 9).

Three experiments of chapter 9 that measure what the chapter's models only claim:

* **pre-training then fine-tuning** (预训练 + 微调): a
  :class:`~selfattn.models.transformer.MiniBERT` pre-trained on masked words, then
  fine-tuned on a small labelled task from the same generated language
  (:func:`grammar_task`: is this sentence grammatical?), against the same architecture
  trained on the labelled sentences alone (:func:`finetune_run`);
* **why bidirectional attention matters**: :class:`CausalMiniBERT`, the same encoder with a
  causal mask added, trained on the same masked words and asked about blanks whose answer sits
  to their right (:func:`context_probes`);
* **where cross-attention looks**: :class:`MatchHead`, the image-text matching layer of
  :class:`~selfattn.models.transformer.MiniCLIP` as a separate module, so that its queries
  and keys can be taken from before or after each encoder (:func:`match_sources`).

Shapes: ``B`` batch, ``n`` words, ``d`` = ``d_model``, ``V`` vocabulary, ``P`` patches.
"""

from __future__ import annotations

import copy
import random

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import require_bool, require_int, require_module, require_number, require_tensor
from ..data.text import (
    ADJECTIVES,
    SUBJECT_VERBS,
    VERB_OBJECTS,
    generate_sentences,
    is_grammatical,
    mask_tokens,
)
from ..data.vocab import Vocab
from ..multihead import MultiHeadAttention
from ..train import _evaluates, _keeps_rng, _mode, train_loop
from .transformer import MiniBERT, _cross_match, _masked_mean, mlm_loss

__all__ = [
    "CORRUPTIONS",
    "grammar_task",
    "CausalMiniBERT",
    "SentenceClassifier",
    "pretrain_mlm",
    "finetune_run",
    "context_probes",
    "MatchHead",
    "SOURCES",
    "match_sources",
]

#: the ways :func:`grammar_task` breaks a sentence, each changing one or two words
CORRUPTIONS: tuple[str, ...] = ("agreement", "verb", "object", "pronoun")


def _corrupt(words: list[str], kind: str, rng: random.Random) -> list[str] | None:
    """One ungrammatical variant of a grammatical sentence, or None if ``kind`` does not apply."""
    w = list(words)
    i = 2 if w[1] in ADJECTIVES else 1  # the subject
    forms = {form: key for key in VERB_OBJECTS for form in key}
    verb_key = forms[w[i + 1]]
    plural = w[i + 1] == verb_key[0]
    j = i + 4 if w[i + 3] in ADJECTIVES else i + 3  # the object
    if kind == "agreement":  # the verb's number no longer matches the subject's
        w[i + 1] = verb_key[1] if plural else verb_key[0]
    elif kind == "verb":  # a verb this subject never does, in the right number
        subject = next(key for key in SUBJECT_VERBS if w[i] in key)
        wrong = [v for v in VERB_OBJECTS if v[0] not in SUBJECT_VERBS[subject]]
        w[i + 1] = rng.choice(wrong)[0 if plural else 1]
    elif kind == "object":  # an object this verb never takes
        objects = sorted({o for objs in VERB_OBJECTS.values() for o in objs})
        w[j] = rng.choice([o for o in objects if o not in VERB_OBJECTS[verb_key]])
    elif kind == "pronoun":  # "because it is" <-> "because they are": fine locally, wrong subject
        if "because" not in w:
            return None
        k = w.index("because")
        w[k + 1 : k + 3] = ["it", "is"] if plural else ["they", "are"]
    else:
        raise ValueError(f"kind must be one of {CORRUPTIONS}, got {kind!r}")
    return w


def grammar_task(n: int, *, seed: int = 0) -> tuple[list[str], torch.Tensor, list[str]]:
    """A labelled task from the generated language: is the sentence grammatical?

    Half of the ``n`` sentences come from :func:`~selfattn.data.text.generate_sentences`
    unchanged (label 1); the other half are broken in one of the :data:`CORRUPTIONS` ways
    (label 0): the verb's number flipped, a verb the subject never does, an object the verb
    never takes, or the pronoun clause switched to the other number ("because they are" after a
    single fox). Every corruption keeps each word pair locally plausible, so telling them apart
    needs the sentence's structure: which word is the subject, what the verb allows.

    Returns:
        ``(sentences, labels (n,) long, kinds)`` where ``kinds[k]`` is ``"grammatical"`` or the
        corruption used. Deterministic given ``seed``; the order is shuffled.
    """
    n = require_int(n, "n", 2)
    seed = require_int(seed, "seed", None)
    rng = random.Random(seed)
    source = generate_sentences(2 * n, seed=seed)
    out: list[tuple[str, int, str]] = []
    for k, sentence in enumerate(source[:n]):
        if k % 2 == 0:
            out.append((sentence, 1, "grammatical"))
            continue
        words = sentence.split()
        kinds = [c for c in CORRUPTIONS if c != "pronoun" or "because" in words]
        kind = rng.choice(kinds)
        broken = " ".join(_corrupt(words, kind, rng))
        if is_grammatical(broken):  # cannot happen with this grammar; kept as a guard
            raise AssertionError(f"corruption {kind!r} left {broken!r} grammatical")
        out.append((broken, 0, kind))
    rng.shuffle(out)
    sentences, labels, kinds = zip(*out)
    return list(sentences), torch.tensor(labels), list(kinds)


class CausalMiniBERT(MiniBERT):
    """:class:`~selfattn.models.transformer.MiniBERT` with a causal mask added to its padding mask.

    Position ``i`` attends only to real positions ``0..i``, so a blank is filled from its left
    context alone: the control that shows what BERT's bidirectional attention is for.
    Same arguments as :class:`~selfattn.models.transformer.MiniBERT`.
    """

    def padding_mask(self, ids: torch.Tensor) -> torch.Tensor:
        """``(B, n, n)`` bool: ``True`` where query ``i`` may attend to key ``j`` (real, ``j <=
        i``)."""
        n = ids.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool, device=ids.device).tril()
        return super().padding_mask(ids) & causal


class SentenceClassifier(nn.Module):
    """A MiniBERT encoder and a linear head on the mean of its outputs at the real words.

    Args:
        bert: the encoder (its ``embed`` and ``encoder`` are used, its word head is not).
        num_classes: labels.

    ``forward(ids (B, n))`` returns logits ``(B, num_classes)``.
    """

    def __init__(self, bert: MiniBERT, num_classes: int = 2):
        super().__init__()
        require_module(bert, "bert")
        num_classes = require_int(num_classes, "num_classes", 1)
        self.bert = bert
        d = bert.head.in_features
        self.head = nn.Linear(d, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids ``(B, n)`` -> logits ``(B, num_classes)``."""
        require_tensor(ids, "ids")
        x = self.bert.encoder(self.bert.embed(ids), mask=self.bert.padding_mask(ids))
        return self.head(_masked_mean(x, ids != self.bert.pad_id))


def _bert(vocab: Vocab, seed: int, *, causal: bool = False, max_len: int = 16) -> MiniBERT:
    torch.manual_seed(seed)
    cls = CausalMiniBERT if causal else MiniBERT
    return cls(len(vocab), d_model=64, num_heads=4, num_layers=2, max_len=max_len,
               pad_id=vocab.pad_id)  # fmt: skip


def pretrain_mlm(
    model: MiniBERT,
    ids: torch.Tensor,
    lengths: torch.Tensor,
    vocab: Vocab,
    *,
    steps: int = 400,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> list[float]:
    """Train ``model`` on BERT's masked words (the chapter's recipe); returns the losses.

    Args:
        ids: ``(N, n)`` sentences as word ids, ``lengths (N,)``; vocab: their vocabulary.
        seed: the batches' and the corruption's random stream.
    """
    lr = require_number(lr, "lr", positive=True)
    g = torch.Generator().manual_seed(seed)
    mask_id = vocab.stoi["<mask>"]

    def batch(step):
        idx = torch.randint(0, len(ids), (batch_size,), generator=g)
        inp, tgt = mask_tokens(ids[idx], lengths[idx], mask_id=mask_id,
                               vocab_size=len(vocab), generator=g)  # fmt: skip
        return inp.to(device), tgt.to(device)

    return train_loop(model, batch, lambda m, b: mlm_loss(m(b[0]), b[1]), steps=steps, lr=lr)


@torch.no_grad()
def _accuracy(model: nn.Module, ids: torch.Tensor, labels: torch.Tensor, device) -> float:
    with _mode(model, False):
        pred = model(ids.to(device)).argmax(-1).cpu()
    return (pred == labels).float().mean().item()


@_keeps_rng
def finetune_run(
    pretrained: MiniBERT | None,
    train_ids: torch.Tensor,
    train_labels: torch.Tensor,
    test_ids: torch.Tensor,
    test_labels: torch.Tensor,
    vocab: Vocab,
    *,
    steps: int = 150,
    batch_size: int = 32,
    lr: float = 1e-3,
    seed: int = 0,
    max_len: int = 16,
    device: torch.device | str = "cpu",
) -> dict:
    """Fine-tune a copy of ``pretrained`` (or, with ``None``, a fresh MiniBERT of the same size:
    "from scratch") on the labelled sentences; return its test accuracy.

    ``max_len`` is the position table of a fresh model (a pre-trained one keeps its own).
    Both arms get the same steps, batches (drawn with replacement from the ``len(train_ids)``
    labelled sentences), learning rate and head initialisation, so the only difference is
    the starting point of the encoder.

    Returns:
        ``{"accuracy": float, "train_accuracy": float, "losses": [...]}``.
    """
    lr = require_number(lr, "lr", positive=True)
    require_tensor(train_ids, "train_ids")
    if len(train_ids) != len(train_labels):
        raise ValueError(
            f"train_ids and train_labels must have the same length, got {len(train_ids)} and "
            f"{len(train_labels)}"
        )
    if pretrained is None:
        bert = _bert(vocab, 10_000 + seed, max_len=max_len)
    else:
        require_module(pretrained, "pretrained")
        bert = copy.deepcopy(pretrained)
    torch.manual_seed(20_000 + seed)  # the head starts the same in both arms
    model = SentenceClassifier(bert, 2).to(device)
    g = torch.Generator().manual_seed(30_000 + seed)

    def batch(step):
        idx = torch.randint(0, len(train_ids), (batch_size,), generator=g)
        return train_ids[idx].to(device), train_labels[idx].to(device)

    losses = train_loop(
        model, batch, lambda m, b: F.cross_entropy(m(b[0]), b[1]), steps=steps, lr=lr
    )
    return {
        "accuracy": _accuracy(model, test_ids, test_labels, device),
        "train_accuracy": _accuracy(model, train_ids, train_labels, device),
        "losses": losses,
    }


@torch.no_grad()
@_evaluates
def context_probes(model: MiniBERT, sentences: list[str], vocab: Vocab) -> dict[str, float]:
    """Blank one word per sentence and score the model's top guess, for three kinds of blank.

    * ``"subject number"``: the subject hidden; right if the guess is a subject noun of the
      right number, which only the verb on the **right** reveals ("the <mask> chase ...").
    * ``"verb"``: the verb hidden; right if the guess is the exact verb. Its number comes from
      the left (the subject), but which of the subject's verbs it is, only the object on the
      **right** says.
    * ``"pronoun"``: "it" / "they" hidden; the subject on the **left** decides (a control a
      left-to-right model can pass).

    Returns:
        ``{kind: accuracy}`` over the sentences where that kind of blank exists.
    """
    mask_id = vocab.stoi["<mask>"]
    singular = {s for s, _ in SUBJECT_VERBS}
    plural = {p for _, p in SUBJECT_VERBS}
    hits: dict[str, list[bool]] = {"subject number": [], "verb": [], "pronoun": []}
    device = next(model.parameters()).device
    rows, answers = [], []
    for s in sentences:
        w = s.split()
        i = 2 if w[1] in ADJECTIVES else 1
        blanks = [("subject number", i), ("verb", i + 1)]
        if "because" in w:
            blanks.append(("pronoun", w.index("because") + 1))
        for kind, pos in blanks:
            masked = list(w)
            masked[pos] = "<mask>"
            rows.append((masked, pos))
            answers.append((kind, w[pos]))
    width = max(len(m) for m, _ in rows)
    ids = torch.full((len(rows), width), vocab.pad_id, dtype=torch.long)
    for r, (masked, _) in enumerate(rows):
        ids[r, : len(masked)] = vocab.encode(masked)
    guesses = []
    for start in range(0, len(rows), 512):
        logits = model(ids[start : start + 512].to(device)).cpu()
        for r in range(logits.shape[0]):
            pos = rows[start + r][1]
            guesses.append(vocab.itos[int(logits[r, pos].argmax())])
    assert all(ids[r, p] == mask_id for r, (_, p) in enumerate(rows))
    for (kind, truth), guess in zip(answers, guesses):
        if kind == "subject number":
            group = plural if truth in plural else singular
            hits[kind].append(guess in group)
        else:
            hits[kind].append(guess == truth)
    return {k: sum(v) / len(v) for k, v in hits.items() if v}


class MatchHead(nn.Module):
    """Image-text matching by cross-attention, as in
    :meth:`~selfattn.models.transformer.MiniCLIP.match`.

    Each word (query) attends over the patches (keys and values) through a LayerNorm and a
    :class:`~selfattn.multihead.MultiHeadAttention`; the result is added to the word, the
    real words are averaged, and a linear head gives one logit (> 0: "the caption describes
    the image"). A separate module so that the words and the patches can be taken from
    anywhere (:func:`match_sources`).

    Args: d_model, num_heads: the width and heads of the cross-attention.
    """

    def __init__(self, d_model: int = 64, num_heads: int = 4):
        super().__init__()
        self.ln = nn.LayerNorm(d_model)
        self.cross = MultiHeadAttention(d_model, num_heads)
        self.head = nn.Linear(d_model, 1)

    def forward(
        self,
        words: torch.Tensor,
        real: torch.Tensor,
        patches: torch.Tensor,
        *,
        return_weights: bool = False,
    ):
        """words ``(B, L, d)``, real ``(B, L)`` bool, patches ``(B, P, d)`` -> logits ``(B,)``
        (and the weights ``(B, h, L, P)``)."""
        return_weights = require_bool(return_weights, "return_weights")
        logit, weights = _cross_match(self.ln, self.cross, self.head, words, real, patches)
        return (logit, weights) if return_weights else logit


#: where :func:`match_sources` takes the words and the patches from
SOURCES: tuple[str, ...] = ("encoder", "embedding")


@torch.no_grad()
def match_sources(clip, images: torch.Tensor, ids: torch.Tensor, *, words: str, patches: str):
    """The queries and keys of a :class:`MatchHead`, from after or before each encoder.

    Args:
        clip: a trained :class:`~selfattn.models.transformer.MiniCLIP` (read, never changed).
        images: ``(B, C, H, W)``; ids: captions ``(B, L)``.
        words: ``"encoder"`` (the text encoder's outputs, as ``MiniCLIP.match`` uses) or
            ``"embedding"`` (word + position embeddings: each word only itself).
        patches: ``"encoder"`` (the image encoder's patch outputs) or ``"embedding"`` (the
            patch embeddings + positions, before any attention between patches).

    Returns:
        ``(words (B, L, d), real (B, L), patches (B, P, d))``.
    """
    if words not in SOURCES or patches not in SOURCES:
        raise ValueError(
            f"words and patches must each be one of {SOURCES}, got {words!r} and {patches!r}"
        )
    if words == "encoder":
        w, real = clip.text_tokens(ids)
    else:
        w, real = clip.text_embed(ids), ids != clip.pad_id
    if patches == "encoder":
        p = clip.image_tokens(images)[:, 1:]
    else:
        p = clip.image_embed(images)[:, 1:]
    return w, real, p
