"""Checkers for chapter 9's exercises (ViT, BERT, CLIP, GPT).

In the chapter's order (:data:`EXERCISES`, whose labels number them): ``vit-tokens``, predict
the tokens of a ViT; ``bert-mask``, find the bug in BERT's attention mask; ``patchify``,
build patches; ``clip``, build CLIP's loss; ``predict-copy``, predict the accuracy of
copying the input; ``lm-loss``, find the bug in a GPT's training loss. Not in the chapter
(:data:`EXTRA_EXERCISES`): ``pre-ln-block``, a pre-LN block. Each checker names the likely
mistakes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..data.images import patchify
from ..i18n import _
from ..models.transformer import TransformerBlock, clip_loss
from ._core import (
    Mismatch,
    NotAttempted,
    call_answer,
    checker,
    expect_close,
    expect_predicted,
    expect_true,
    name_mistake,
    read_prediction,
)

__all__ = [
    "EXERCISES",
    "EXTRA_EXERCISES",
    "VIT_TOKENS_CASE",
    "vit_tokens_mistakes",
    "check_vit_tokens",
    "buggy_attention_mask",
    "bert_mask_mistakes",
    "check_bert_mask",
    "patchify_mistakes",
    "check_patchify",
    "clip_loss_mistakes",
    "check_clip_loss",
    "COPY_CASE",
    "copy_accuracy_mistakes",
    "check_copy_accuracy",
    "buggy_lm_loss",
    "PLANTED_LM_LOSS",
    "lm_loss_mistakes",
    "check_lm_loss",
    "check_block_forward",
]

#: The labels of chapter 9's exercises (``ex-ch09-<label>``), in the chapter's order.
EXERCISES = ("vit-tokens", "bert-mask", "patchify", "clip", "predict-copy", "lm-loss")
#: Checkers that no exercise of the chapter uses, numbered after :data:`EXERCISES`.
EXTRA_EXERCISES = ("pre-ln-block",)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- Predict, then run: the tokens of a ViT ------------------------------------------------

#: The ViT of the prediction, as (image side, patch side) in pixels.
VIT_TOKENS_CASE = (48, 8)


def _vit_tokens_variants() -> dict[str, int]:
    size, p = VIT_TOKENS_CASE
    g = size // p
    return {
        "right": g * g + 1,
        _("that counts the patches alone: the class token is one more token"): g * g,
        _(
            "that counts the patches along one side, plus the class token: the image is a grid "
            "of patches in two directions"
        ): g + 1,
        _("that counts the patches along one side only, and leaves out the class token"): g,
        _(
            "that divides the pixels by the patch's side, not by its area ({p} x {p} pixels)", p=p
        ): (size * size // p + 1),
        _("the class token is one token, not an extra row and column of patches"): (g + 1) ** 2,
    }


def vit_tokens_mistakes() -> list[str]:
    """The mistakes :func:`check_vit_tokens` names."""
    return [k for k in _vit_tokens_variants() if k != "right"]


@checker("vit-tokens", "the tokens of a ViT")
def check_vit_tokens(prediction) -> None:
    """``prediction``: how many tokens the encoder of a MiniViT reads per image, for 48 x 48
    images cut into 8 x 8 patches (patch tokens plus the class token)."""
    size, p = VIT_TOKENS_CASE
    expect_predicted(
        prediction,
        _vit_tokens_variants(),
        case=_("image {size} x {size}, patch {p}", size=size, p=p),
    )


# -- Find the bug: BERT's attention mask --------------------------------------------------


def buggy_attention_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """BERT's attention mask with the planted bug of "BERT's attention mask": ``(B, n, n)``
    bool, ``True`` where query ``i`` may attend to key ``j``."""
    n = ids.shape[1]
    real = (ids != pad_id).unsqueeze(1)  # (B, 1, n): the keys that are words
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    return real & allowed


def _bert_mask_variants(ids: torch.Tensor, pad_id: int) -> dict[str, torch.Tensor]:
    B, n = ids.shape
    real = ids != pad_id
    right = real.unsqueeze(1).expand(B, n, n)
    tril = torch.ones(n, n, dtype=torch.bool).tril()
    return {
        "right": right,
        _(
            "still causal: query i sees only keys 0..i, so a blank cannot read the words on its "
            "right (that is GPT's mask; BERT reads both ways)"
        ): right & tril,
        _(
            "the padding is True: the book's convention is True = may attend, so the padding "
            "keys must be False"
        ): ~right,
        _rows_mistake(): real.unsqueeze(2).expand(B, n, n),
        _("a triangle the wrong way round (triu): query i sees only keys i..n-1"): (
            right & tril.T
        ),
        _(
            "no padding mask: every query may attend to every key, the padding keys too; they "
            "must be False"
        ): torch.ones(B, n, n, dtype=torch.bool),
    }


#: The mistake of :func:`_bert_mask_variants` that the real words' rows alone cannot tell from
#: "no padding mask" (both let every real word read every key): named only on whole masks.
def _rows_mistake() -> str:
    return _(
        "the padding is masked as queries (rows), not as keys (columns): real words still "
        "read the padding"
    )


def bert_mask_mistakes() -> list[str]:
    """The mistakes :func:`check_bert_mask` names, the planted one first."""
    return [k for k in _bert_mask_variants(torch.tensor([[3, 4, 0]]), 0) if k != "right"]


def _first_wrong_entry(got: torch.Tensor, right: torch.Tensor, real: torch.Tensor) -> str:
    """Where ``got`` first differs from ``right`` on a real word's row, in words."""
    b, i, j = (int(k) for k in ((got != right) & real.unsqueeze(2)).nonzero()[0])
    key = _("a word") if bool(real[b, j]) else _("padding")
    may = _("may") if bool(got[b, i, j]) else _("may not")
    return _(
        "in sentence {b}, the word at query {i} {may} attend to key {j} ({key}); a word "
        "must see every word, on either side, and no padding key",
        b=b,
        i=i,
        may=may,
        j=j,
        key=key,
    )


@checker("bert-mask", "BERT's attention mask")
def check_bert_mask(answer) -> None:
    """``answer(ids, pad_id)`` for ids ``(B, n)``: ``(B, n, n)`` bool (or ``(B, 1, n)``, which
    broadcasts to it), ``True`` where query ``i`` may attend to key ``j``: every real word, on
    either side, and never a padding key.

    Only the rows of real words are compared: no real word reads a padding query's output,
    and the library's attention gives a row with no ``True`` zero weights, never NaN, so the
    padding's own rows may hold anything."""
    cases = [
        (_("two sentences, one padded"), torch.tensor([[5, 6, 7, 8], [5, 9, 0, 0]]), 0),
        (_("no padding"), torch.tensor([[4, 5, 6]]), 0),
        (_("pad id 1, three sentences"), torch.tensor([[2, 3, 1], [4, 1, 1], [5, 6, 7]]), 1),
        (_("one word"), torch.tensor([[7]]), 0),
    ]
    for name, ids, pad_id in cases:
        got = call_answer(answer, ids.clone(), pad_id)
        expect_true(
            torch.is_tensor(got),
            _("case {name}: return a tensor, got {type}", name=name, type=type(got).__name__),
        )
        B, n = ids.shape
        if got.dim() == 3 and got.shape[0] == B and got.shape[1] in (1, n) and got.shape[2] == n:
            got = got.expand(B, n, n)  # a (B, 1, n) key mask is the same mask
        expect_true(
            tuple(got.shape) == (B, n, n),
            _(
                "case {name}: expected a mask of shape {value} (or {value2}), got {shape}",
                name=name,
                value=(B, n, n),
                value2=(B, 1, n),
                shape=tuple(got.shape),
            ),
        )
        got = got.detach().cpu().bool()
        real = ids != pad_id
        variants = _bert_mask_variants(ids, pad_id)
        right = variants.pop("right")
        if torch.equal(got[real], right[real]):
            continue  # every real word's row is right; the padding's rows are read by no one
        name_mistake(got, variants, case=name, atol=0, rtol=0)  # a whole known mistake
        on_real_rows = {k: v[real] for k, v in variants.items() if k != _rows_mistake()}
        name_mistake(got[real], on_real_rows, case=name, atol=0, rtol=0)
        raise Mismatch(
            _(
                "case {case}: {diagnosis}",
                case=name,
                diagnosis=_first_wrong_entry(got, right, real),
            )
        )


@checker("pre-ln-block", "a pre-LayerNorm block")
def check_block_forward(answer) -> None:
    """``answer(block, x)`` must return what ``block(x)`` returns for a
    :class:`~selfattn.models.transformer.TransformerBlock` (no mask): attention then MLP, each on a
    LayerNorm of the residual stream and added back to it."""
    for d, h, B, n, seed in ((16, 2, 2, 5, 0), (8, 1, 1, 1, 1), (24, 4, 3, 7, 2)):
        torch.manual_seed(seed)
        block = TransformerBlock(d, h).double().eval()
        with torch.no_grad():  # non-trivial LayerNorm gains, so forgetting a LayerNorm shows
            for ln in (block.ln1, block.ln2):
                ln.weight.uniform_(0.5, 1.5)
                ln.bias.uniform_(-0.5, 0.5)
        x = 3 * torch.randn(B, n, d, generator=_gen(seed), dtype=torch.float64)
        with torch.no_grad():
            got = call_answer(answer, block, x.clone())
            expect_close(got, block(x), case=f"d={d}, h={h}, B={B}, n={n}", atol=1e-9, rtol=1e-9)


def _patchify_variants(images: torch.Tensor, p: int) -> dict[str, torch.Tensor]:
    N, C, H, W = images.shape
    x = images.reshape(N, C, H // p, p, W // p, p)
    P = (H // p) * (W // p)
    return {
        _(
            "a plain reshape: the shape is right but each 'patch' holds pixels of several "
            "patches; split each axis into (patches, patch) and permute first"
        ): images.reshape(N, P, C * p * p),
        _(
            "your patches go column by column; the book's order is row by row (patch k is row "
            "k // (W / patch))"
        ): x.permute(0, 4, 2, 1, 3, 5).reshape(N, P, C * p * p),
        _(
            "each patch is flattened channel last (rows, columns, then channels); the book's "
            "layout is channel first"
        ): x.permute(0, 2, 4, 3, 5, 1).reshape(N, P, C * p * p),
    }


def patchify_mistakes() -> list[str]:
    """The mistakes :func:`check_patchify` names."""
    return list(_patchify_variants(torch.zeros(1, 2, 4, 4), 2))


@checker("patchify", "cut images into patches")
def check_patchify(answer) -> None:
    """``answer(images, patch)`` for ``images (N, C, H, W)``: ``(N, P, C * patch * patch)``.

    Patches row by row, each flattened channel-first (as :func:`selfattn.data.images.patchify`).
    """
    for N, C, H, W, p in ((2, 3, 8, 8, 4), (1, 2, 6, 9, 3), (3, 2, 4, 4, 4), (1, 3, 5, 5, 1)):
        images = torch.randn(N, C, H, W, generator=_gen(N * 7 + H + W + p), dtype=torch.float64)
        expect_close(
            call_answer(answer, images.clone(), p),
            patchify(images, p),
            case=f"images {(N, C, H, W)}, patch={p}",
            atol=0,
            rtol=0,
            mistakes=_patchify_variants(images, p),
        )


def _clip_variants(logits: torch.Tensor) -> dict[str, torch.Tensor]:
    labels = torch.arange(logits.shape[0])
    rows = F.cross_entropy(logits, labels)
    cols = F.cross_entropy(logits.T, labels)
    flat = -torch.log_softmax(logits.reshape(-1), 0).reshape(logits.shape).diagonal().mean()
    return {
        _(
            "only the image-to-text direction (rows); CLIP averages it with text-to-image "
            "(columns)"
        ): rows,
        _(
            "only the text-to-image direction (columns); CLIP averages it with image-to-text "
            "(rows)"
        ): cols,
        _("the sum of the two directions; CLIP takes their mean"): rows + cols,
        _("one softmax over the whole matrix; each row (and each column) is its own softmax"): (
            flat
        ),
    }


def clip_loss_mistakes() -> list[str]:
    """The mistakes :func:`check_clip_loss` names."""
    return list(_clip_variants(torch.randn(3, 3)))


@checker("clip", "CLIP's contrastive loss")
def check_clip_loss(answer) -> None:
    """``answer(logits)`` for ``(B, B)`` image-by-caption logits: the symmetric cross-entropy.

    The mean of the image->text and the text->image losses, true pairs on the diagonal.
    """
    cases = [
        (_("random B=4"), 3 * torch.randn(4, 4, generator=_gen(0), dtype=torch.float64)),
        ("B=1", torch.tensor([[2.5]], dtype=torch.float64)),
        (
            _("asymmetric B=3"),
            torch.tensor([[5.0, 0.0, 0.0], [4.0, 1.0, 0.0], [4.0, 0.0, 1.0]], dtype=torch.float64),
        ),
        (_("random B=9"), torch.randn(9, 9, generator=_gen(1), dtype=torch.float64)),
    ]
    for name, logits in cases:
        got = call_answer(answer, logits.clone())
        expect_true(
            torch.is_tensor(got) or isinstance(got, float),
            _("case {name}: return a scalar, got {type}", name=name, type=type(got).__name__),
        )
        variants = _clip_variants(logits)
        if name == "B=1":  # one pair: both directions are 0, every variant agrees
            variants = {}
        expect_close(
            torch.as_tensor(got, dtype=torch.float64).reshape(()),
            clip_loss(logits),
            case=name,
            atol=1e-9,
            rtol=1e-9,
            mistakes=variants,
        )


# -- Predict, then run: copying the input ------------------------------------------------

#: The share of hidden words that :func:`~selfattn.data.text.mask_tokens` leaves as they are
#: and replaces by a random word (of the ``V - 2`` real words), and the chapter's ``V``.
COPY_CASE = (0.1, 0.1, 49)


def _copy_variants() -> dict[str, float]:
    kept, random_share, V = COPY_CASE
    right = kept + random_share / (V - 2)
    return {
        "right": right,
        _(
            "the copier is right wherever the input still shows the hidden word, and BERT's "
            "corruption does not replace every hidden word"
        ): 0.0,
        _("a random replacement is almost never the hidden word itself"): kept + random_share,
        _(
            "that is the share of hidden words turned into <mask>, where copying is always wrong"
        ): 0.8,
        _("that is the share the copier gets wrong"): 1 - right,
        _(
            "that is the share of the words that are hidden, not the copier's accuracy on them"
        ): 0.15,
        _(
            "that is the accuracy over every position; the question asks about the hidden ones"
        ): 0.85 + 0.15 * kept,
        _("not every hidden word is still in the input"): 1.0,
    }


def copy_accuracy_mistakes() -> list[str]:
    """The mistakes :func:`check_copy_accuracy` names."""
    return [k for k in _copy_variants() if k != "right"]


@checker("predict-copy", "the accuracy of copying the input")
def check_copy_accuracy(prediction) -> None:
    """``prediction``: the accuracy, as a fraction, on the hidden words of a "model" that
    outputs at every position the word its input shows there, for MiniBERT's test sentences
    corrupted by :func:`~selfattn.data.text.mask_tokens`. A prediction within 0.02 of the
    expected share passes (the measured one varies with the sample)."""
    case = _("copying the input, hidden words only")
    value = read_prediction(prediction)
    if not math.isfinite(value) or not 0 <= value <= 1:
        raise Mismatch(
            _(
                "case {case}: write the accuracy as a fraction between 0 and 1 (50% is 0.5), got "
                "{value}",
                case=case,
                value=f"{value!r}",
            )
        )
    variants = _copy_variants()
    right = variants.pop("right")
    if abs(value - right) <= 0.02:
        return
    name_mistake(value, variants, case=case, atol=0.01, rtol=0)
    raise Mismatch(
        _(
            "case {case}: your prediction {value} is not right, and it is none of the mistakes "
            "this checker knows; go over what mask_tokens does to a hidden word",
            case=case,
            value=f"{value:g}",
        )
    )


# -- Find the bug: the next-token loss ----------------------------------------------------


def buggy_lm_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The training loss of a GPT with the planted bug of "the next-token loss": ``logits
    (B, n, V)`` of the model run on ``ids (B, n)``; returns a scalar."""
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), ids.reshape(-1))


def _lm_loss_variants(logits: torch.Tensor, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The right loss ("right") and each named mistake's, on the same inputs."""
    V = logits.shape[-1]

    def ce(lg, tg, reduction="mean"):
        return F.cross_entropy(lg.reshape(-1, V), tg.reshape(-1), reduction=reduction)

    variants = {
        "right": ce(logits[:, :-1], ids[:, 1:]),
        PLANTED_LM_LOSS: ce(logits, ids),
        _("each position is now scored on the token before it, not the one after it"): ce(
            logits[:, 1:], ids[:, :-1]
        ),
        _("a sum over the positions, not their mean: the loss would grow with the batch"): ce(
            logits[:, :-1], ids[:, 1:], "sum"
        ),
    }
    return variants


#: The mistake planted in :func:`buggy_lm_loss` (its checker's key for it).
PLANTED_LM_LOSS = (
    "every position is scored on its own input token, which the causal mask lets it see"
)


def lm_loss_mistakes() -> list[str]:
    """The mistakes :func:`check_lm_loss` names, the planted one first."""
    lg = torch.zeros(1, 4, 3, dtype=torch.float64)
    variants = _lm_loss_variants(lg, torch.zeros(1, 4, dtype=torch.long))
    return [_(k) for k in variants if k != "right"]


@checker("lm-loss", "the next-token loss")
def check_lm_loss(answer) -> None:
    """``answer(logits, ids)`` gets a GPT's logits ``(B, n, V)`` for the token ids ``(B, n)``
    it read and must return the training loss of a language model, a scalar: the mean
    cross-entropy of predicting, at every position that has a next token, that token. While
    the answer still computes what :func:`buggy_lm_loss` computes, the exercise counts as not
    attempted, as the book's other find-the-bug exercises do."""
    cases = []
    for B, n, V, seed in ((2, 6, 5, 0), (1, 2, 7, 1), (3, 5, 4, 2), (2, 9, 11, 3)):
        g = _gen(90 + seed)
        logits = 2 * torch.randn(B, n, V, generator=g, dtype=torch.float64)
        ids = torch.randint(0, V, (B, n), generator=g)
        cases.append((f"B={B}, n={n}, V={V}", logits, ids))
    results, planted = [], True
    for case, logits, ids in cases:
        got = call_answer(answer, logits, ids)
        variants = _lm_loss_variants(logits, ids)
        try:
            value = torch.as_tensor(got, dtype=torch.float64)
            same = value.numel() == 1 and torch.allclose(
                value.reshape(()), variants[PLANTED_LM_LOSS], atol=1e-9, rtol=1e-9
            )
        except (TypeError, ValueError, RuntimeError):
            same = False
        planted = planted and same
        results.append((case, got, variants))
    if planted:
        raise NotAttempted()
    for case, got, variants in results:
        right = variants.pop("right")
        expect_true(
            (torch.is_tensor(got) and got.numel() == 1) or isinstance(got, float),
            _(
                "case {case}: return one number (a scalar tensor), got {value}",
                case=case,
                value=_shape_or_type(got),
            ),
        )
        expect_close(
            torch.as_tensor(got, dtype=torch.float64).reshape(()),
            right,
            case=case,
            atol=1e-9,
            rtol=1e-9,
            # the planted mistake's key is PLANTED_LM_LOSS's English: said in the language
            mistakes={_(k): v for k, v in variants.items()},
        )


def _shape_or_type(value) -> str:
    return str(tuple(value.shape)) if torch.is_tensor(value) else type(value).__name__
