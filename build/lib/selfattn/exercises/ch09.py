"""Checkers for chapter 9's exercises.

The pre-LN block, patches, CLIP's loss, masked accuracy, and cached decoding.

Each checker runs the reader's answer on several cases, edge cases included,
and prints one line: passed, not attempted yet, or the first case that failed
with expected vs got. None of them raises.
"""

from __future__ import annotations

import torch

from ..data.images import patchify
from ..models.transformer import MiniGPT, TransformerBlock, clip_loss
from ._core import call_answer, checker, expect_close, expect_true

__all__ = [
    "check_block_forward",
    "check_patchify",
    "check_clip_loss",
    "check_masked_accuracy",
    "check_greedy_cached",
]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@checker("9.1", "a pre-LayerNorm block")
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


@checker("9.2", "cut images into patches")
def check_patchify(answer) -> None:
    """``answer(images, patch)`` for ``images (N, C, H, W)``: ``(N, P, C * patch * patch)``.

    Patches row by row, each flattened channel-first (as :func:`selfattn.data.images.patchify`).
    """
    for N, C, H, W, p in ((2, 3, 8, 8, 4), (1, 1, 6, 9, 3), (3, 2, 4, 4, 4), (1, 3, 5, 5, 1)):
        images = torch.randn(N, C, H, W, generator=_gen(N * 7 + H + W + p), dtype=torch.float64)
        expect_close(
            call_answer(answer, images.clone(), p),
            patchify(images, p),
            case=f"images {(N, C, H, W)}, patch={p}",
            atol=0,
            rtol=0,
        )


@checker("9.3", "CLIP's contrastive loss")
def check_clip_loss(answer) -> None:
    """``answer(logits)`` for ``(B, B)`` image-by-caption logits: the symmetric cross-entropy.

    The mean of the image->text and the text->image losses, true pairs on the diagonal.
    """
    cases = [
        ("random B=4", 3 * torch.randn(4, 4, generator=_gen(0), dtype=torch.float64)),
        ("B=1", torch.tensor([[2.5]], dtype=torch.float64)),
        (
            "asymmetric B=3",
            torch.tensor([[5.0, 0.0, 0.0], [4.0, 1.0, 0.0], [4.0, 0.0, 1.0]], dtype=torch.float64),
        ),
        ("random B=9", torch.randn(9, 9, generator=_gen(1), dtype=torch.float64)),
    ]
    for name, logits in cases:
        got = call_answer(answer, logits.clone())
        expect_true(
            torch.is_tensor(got) or isinstance(got, float),
            f"case {name}: return a scalar, got {type(got).__name__}",
        )
        expect_close(
            torch.as_tensor(got, dtype=torch.float64).reshape(()),
            clip_loss(logits),
            case=name,
            atol=1e-9,
            rtol=1e-9,
        )


@checker("9.4", "accuracy on the masked words")
def check_masked_accuracy(answer) -> None:
    """``answer(logits, targets)`` with logits ``(B, n, V)`` and targets ``(B, n)`` (``-100`` where
    nothing is predicted) must return the fraction of predicted positions whose arg-max is right,
    as a Python float."""
    g = _gen(3)
    logits = torch.randn(3, 6, 5, generator=g)
    targets = torch.full((3, 6), -100)
    targets[0, 1], targets[1, 4], targets[2, 0], targets[2, 5] = 2, 0, 4, 1
    # make exactly two of the four predicted positions right, and many unpredicted ones "right" too
    logits[0, 1, 2] = 10.0
    logits[2, 5, 1] = 10.0
    logits[1, 4] = torch.tensor([-5.0, 3.0, 0.0, 0.0, 0.0])
    logits[2, 0] = torch.tensor([0.0, 0.0, 0.0, 9.0, -1.0])
    logits[:, :, 0] += torch.where(
        targets == -100, 20.0, 0.0
    )  # padding/unpicked positions predict 0
    cases = [("4 picked positions, 2 right", logits, targets, 0.5)]
    all_right = torch.zeros(2, 3, 4)
    all_right[..., 3] = 1.0
    t2 = torch.tensor([[3, -100, 3], [-100, -100, 3]])
    cases.append(("every picked position right", all_right, t2, 1.0))
    t3 = torch.tensor([[0, 1, -100], [2, -100, -100]])
    cases.append(("none right", all_right, t3, 0.0))
    for name, lg, tg, expected in cases:
        got = call_answer(answer, lg.clone(), tg.clone())
        expect_true(
            isinstance(got, (float, int)) or (torch.is_tensor(got) and got.numel() == 1),
            f"case {name}: return one number, got {type(got).__name__}",
        )
        got = float(got)
        expect_true(abs(got - expected) < 1e-9, f"case {name}: expected {expected}, got {got:.4g}")


def _shape_or_type(value) -> str:
    return str(tuple(value.shape)) if torch.is_tensor(value) else type(value).__name__


@checker("9.5", "greedy decoding with a KV cache")
def check_greedy_cached(answer) -> None:
    """``answer(model, ids, steps)``: ``ids (B, p)`` continued greedily by ``steps`` tokens.

    With a KV cache (prefill the prompt once, then feed one token per step), returning
    ``(B, p + steps)`` ids. Every call after the first must feed the model one token (that is
    what the cache is for).
    """
    for seed, B, p, steps in ((0, 1, 3, 6), (1, 2, 1, 5), (2, 3, 4, 1)):
        torch.manual_seed(seed)
        model = MiniGPT(7, d_model=16, num_heads=2, num_layers=2, max_len=16).eval()
        ids = torch.randint(0, 7, (B, p), generator=_gen(seed))
        expected = model.generate(ids, steps, greedy=True)
        lengths = []

        # record the length of every input the model is given (bound now: one list per case)
        def count(module, args, kwargs, lengths=lengths):
            ids_in = args[0] if args else kwargs.get("ids")
            lengths.append(
                ids_in.shape[1] if torch.is_tensor(ids_in) and ids_in.dim() == 2 else -1
            )

        hook = model.register_forward_pre_hook(count, with_kwargs=True)
        try:
            got = call_answer(answer, model, ids.clone(), steps)
        finally:
            hook.remove()
        case = f"B={B}, prompt length {p}, {steps} steps"
        expect_true(
            torch.is_tensor(got) and tuple(got.shape) == (B, p + steps),
            f"case {case}: expected ids of shape {(B, p + steps)}, got {_shape_or_type(got)}",
        )
        expect_true(
            torch.equal(got.long(), expected),
            f"case {case}: expected {expected.tolist()}, got {got.tolist()}",
        )
        expect_true(
            len(lengths) <= steps + 1 and all(n == 1 for n in lengths[1:]),
            f"case {case}: the model was called {len(lengths)} times with inputs of lengths "
            f"{lengths}; with a cache the prompt goes in once and every later call feeds one "
            "token",
        )
