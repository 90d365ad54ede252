"""Checkers for chapter 1, "Why self-attention".

In the chapter's order (:data:`EXERCISES`, whose labels number them):

* ``dilated`` (build) ``check_dilated_layers``: dilated width-``k`` convolution layers needed
  to connect tokens ``n`` apart.
* ``softmax-axis`` (find the bug) ``check_attention_weights_fixed``: attention with its
  softmax over the wrong axis (:func:`buggy_attention`), fixed.
* ``reach`` (build) ``check_reach_to_first``: ``|| d y[-1] / d x[0] ||`` with autograd.
* ``predict-layers`` (predict, then run) ``check_predicted_layers``: how many causal
  convolutions of alternating widths 3, 7, 3, 7, ... connect tokens 100 apart.
* ``accuracy`` (build) ``check_accuracy_by_distance``: accuracy per distance from predictions.

Each checker names the most likely wrong answers ("no dilation", "softmax over the
queries") instead of only reporting which case differs.
"""

from __future__ import annotations

import math

import torch

from ..gradient_reach import gradient_reach
from ..i18n import _
from ._core import (
    Mismatch,
    call_answer,
    checker,
    expect_close,
    expect_predicted,
    expect_true,
)

__all__ = [
    "EXERCISES",
    "check_dilated_layers",
    "check_attention_weights_fixed",
    "check_reach_to_first",
    "check_predicted_layers",
    "check_accuracy_by_distance",
    "buggy_attention",
    "attention",
    "PREDICT_N",
    "PREDICT_WIDTHS",
    "conv_layers_needed",
    "layers_for_widths",
    "widths_reach",
    "dilated_layers_needed",
    "accuracy_by_distance",
]

#: The labels of chapter 1's exercises (``ex-ch01-<label>``), in the chapter's order.
EXERCISES = ("dilated", "softmax-axis", "reach", "predict-layers", "accuracy")


def conv_layers_needed(n: int, k: int) -> int:
    """Layers of width-``k`` convolutions (stride 1, no dilation) before ``n`` sees position 0.

    Each layer widens the receptive field by ``k - 1`` tokens: after ``L`` layers it spans
    ``1 + L (k - 1)`` tokens, which must be at least ``n + 1``. So ``L = ceil(n / (k - 1))``.
    """
    if n < 0 or k < 2:
        raise ValueError(f"need n >= 0 and k >= 2, got n={n}, k={k}")
    return -(-n // (k - 1))


def dilated_layers_needed(n: int, k: int) -> int:
    """Layers of width-``k`` convolutions, dilations ``1, k, k^2, ...``, before ``n`` sees 0.

    After ``L`` such layers the receptive field spans ``k^L`` tokens, which must be at least
    ``n + 1``: the smallest such ``L`` (0 for ``n = 0``). Integer arithmetic, no logarithms.
    """
    if n < 0 or k < 2:
        raise ValueError(f"need n >= 0 and k >= 2, got n={n}, k={k}")
    layers, span = 0, 1
    while span < n + 1:
        layers, span = layers + 1, span * k
    return layers


def accuracy_by_distance(
    predictions: torch.Tensor, targets: torch.Tensor, distances: torch.Tensor
) -> dict[int, float]:
    """``{distance: accuracy}`` over the examples at each distance, distances in increasing order.

    All three arguments are ``(N,)`` tensors.
    """
    correct = (predictions == targets).float()
    return {
        int(dist): float(correct[distances == dist].mean()) for dist in torch.unique(distances)
    }


def _dilated_no_dilation(n: int, k: int) -> int:
    return conv_layers_needed(n, k)


def _dilated_span_n(n: int, k: int) -> int:
    # k**L >= n instead of k**L >= n + 1: forgets that the span counts position 0 too
    layers, span = 0, 1
    while span < n:
        layers, span = layers + 1, span * k
    return layers


def _dilated_float_log(n: int, k: int) -> int:
    # the answer the exercise forbids: a floating-point logarithm, wrong where it rounds up
    return math.ceil(math.log(n + 1, k)) if n else 0


def _dilated_mistakes() -> dict:
    # a function, not a constant: the diagnoses speak the language of the moment they are used
    return {
        _(
            "this is the count without dilation: your layers reach k - 1 positions further each, "
            "as if every layer read neighbouring inputs"
        ): _dilated_no_dilation,
        _(
            "one layer short where n is an exact power of k: your receptive field spans n tokens, "
            "and positions 0 to n are n + 1"
        ): _dilated_span_n,
        _(
            "a floating-point logarithm: math.log(n + 1, k) is not exact (math.log(125, 5) is "
            "3.0000000000000004), so its ceiling is one too many here; the exercise asks for "
            "integers only"
        ): _dilated_float_log,
    }


@checker("dilated", "dilated convolution layers")
def check_dilated_layers(answer):
    for n, k in (
        (1, 3),
        (2, 3),
        (3, 3),
        (8, 3),
        (9, 3),
        (26, 3),
        (27, 3),
        (100, 2),
        (0, 3),
        (1000, 10),
        (999, 10),
        (124, 5),  # math.log(125, 5) = 3.0000000000000004: a ceiling of it gives 4
    ):
        got = call_answer(answer, n, k)
        expected = dilated_layers_needed(n, k)
        if got != expected:
            for diagnosis, mistake in _dilated_mistakes().items():
                if got == mistake(n, k):
                    raise Mismatch(
                        _("case {case}: {diagnosis}", case=f"n={n}, k={k}", diagnosis=diagnosis)
                    )
            raise Mismatch(
                _(
                    "case {case}: expected {expected} layers, got {got}",
                    case=f"n={n}, k={k}",
                    expected=expected,
                    got=got,
                )
            )


def attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``softmax(queries @ keys^T) @ values``, the weights summing to 1 over the keys.

    Shapes: queries ``(..., n, d)``, keys ``(..., m, d)``, values ``(..., m, d_v)`` ->
    ``(..., n, d_v)``. No scaling: chapter 1's soft lookup, before chapter 3's ``1/sqrt(d)``.
    """
    scores = queries @ keys.transpose(-2, -1)  # (..., n, m): one row per query
    return torch.softmax(scores, dim=-1) @ values


def buggy_attention(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
) -> torch.Tensor:
    """The function of "find the bug: softmax over the wrong axis", with one planted bug.

    Same shapes as :func:`attention`. The exercise asks what is wrong with it and how to fix
    it; ``check_attention_weights_fixed`` checks a fixed version.
    """
    scores = queries @ keys.transpose(-2, -1)
    return torch.softmax(scores, dim=0) @ values


def _softmax_on(dim: int):
    def wrong(queries, keys, values):
        return torch.softmax(queries @ keys.transpose(-2, -1), dim=dim) @ values

    return wrong


@checker("softmax-axis", "softmax over the keys")
def check_attention_weights_fixed(answer):
    generator = torch.Generator().manual_seed(4)
    cases = {
        _("one sequence, n=3, m=5"): ((3, 4), (5, 4), (5, 2)),
        _("a batch of 2 sequences, n=4, m=4"): ((2, 4, 3), (2, 4, 3), (2, 4, 6)),
    }
    for case, shapes in cases.items():
        q, k, v = (torch.randn(*s, generator=generator) for s in shapes)
        got = call_answer(answer, q.clone(), k.clone(), v.clone())
        mistakes = {
            _(
                "the softmax still runs over dim=0: for one sequence that is the queries' "
                "axis (each column of weights sums to 1), for a batch the batch axis"
            ): _softmax_on(0)(q, k, v),
            _(
                "your softmax runs over dim=1, which is the keys' axis only without a batch "
                "dimension; with one it is the queries' axis, and each key's weights sum to "
                "1 instead of each query's"
            ): _softmax_on(1)(q, k, v),
        }
        expect_close(got, attention(q, k, v), case=case, mistakes=mistakes)


def _encoders():
    torch.manual_seed(0)
    rnn, lstm = torch.nn.RNN(3, 4, batch_first=True), torch.nn.LSTM(3, 4, batch_first=True)
    w = torch.randn(3, 3)
    attention = lambda x: torch.softmax(x @ w @ x.transpose(-2, -1), dim=-1) @ x  # noqa: E731
    return {"RNN": lambda x: rnn(x)[0], "LSTM": lambda x: lstm(x)[0], "attention": attention}


def _summed_reach(encoder, x: torch.Tensor) -> torch.Tensor:
    # the norm of the gradient of y[-1].sum(): the Jacobian's rows added up first
    x = x.clone().requires_grad_(True)
    encoder(x[None])[0, -1].sum().backward()
    return x.grad[0].norm().double()


@checker("reach", "gradient reach by autograd")
def check_reach_to_first(answer):
    generator = torch.Generator().manual_seed(1)
    for name, encoder in _encoders().items():
        for n in (1, 2, 6):
            x = torch.randn(n, 3, generator=generator)
            # Expected values first: the encoder is a closure over its modules, which a
            # function could change (zeroing their weights) while it runs.
            reach = gradient_reach(encoder, x)
            mistakes = {
                _(
                    "this is the norm of the gradient of y[-1].sum(), the Jacobian's rows "
                    "added up first (rows of opposite sign cancel in it)"
                ): (_summed_reach(encoder, x)),
            }
            if n > 1:  # for one token the first input is the last
                mistakes[
                    _("this is the reach to the last input x[-1], not to the first, x[0]")
                ] = reach[-1]
            got = call_answer(answer, encoder, x.clone())
            expect_close(
                torch.as_tensor(got, dtype=torch.float64).reshape(()),
                reach[0],
                case=f"{name}, n={n}",
                atol=1e-6,
                rtol=1e-4,
                mistakes=mistakes,
            )


#: The setting of the exercise "predict, then run" on layers for a distance of 100. Causal
#: convolutions whose widths repeat ``PREDICT_WIDTHS`` (3, 7, 3, 7, ...), stride 1, no
#: dilation, and tokens ``PREDICT_N`` apart.
PREDICT_N, PREDICT_WIDTHS = 100, (3, 7)


def layers_for_widths(n: int, widths: tuple[int, ...]) -> int:
    """Layers of causal convolutions, widths cycling through ``widths``, before ``n`` sees 0.

    A layer of width ``k`` reaches ``k - 1`` positions further back (chapter 1's
    receptive-field proposition, one layer at a time): the count of layers until the reach
    is at least ``n``.
    """
    if n < 0 or not widths or min(widths) < 2:
        raise ValueError(f"need n >= 0 and widths >= 2, got n={n}, widths={widths}")
    layers, reach = 0, 0
    while reach < n:
        reach += widths[layers % len(widths)] - 1
        layers += 1
    return layers


def widths_reach(n: int, widths: tuple[int, ...], layers: int, *, seed: int = 0) -> bool:
    """Whether output ``n`` of ``layers`` causal convolutions, widths cycling through
    ``widths``, depends on input 0: autograd's answer to :func:`layers_for_widths`.

    As :func:`selfattn.gradient_reach.conv_reach`, with one width per layer: random
    4-channel ``Conv1d`` layers with ``tanh`` between them, each padded on the left by its
    width minus 1 (causal, length ``n + 1``); the answer is whether the gradient of output
    ``n`` reaches input 0 at all.
    """
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 4, n + 1, generator=generator, requires_grad=True)
    h = x
    for layer in range(layers):
        k = widths[layer % len(widths)]
        weight = torch.randn(4, 4, k, generator=generator) / math.sqrt(4 * k)
        h = torch.tanh(torch.nn.functional.conv1d(torch.nn.functional.pad(h, (k - 1, 0)), weight))
    h[0, :, n].sum().backward()
    return bool(x.grad[0, :, 0].abs().sum() > 0)


@checker("predict-layers", "predict: layers for distance 100")
def check_predicted_layers(answer):
    n, widths = PREDICT_N, PREDICT_WIDTHS
    case = _("n={n}, widths {widths}, ...", n=n, widths=", ".join(map(str, widths)))
    first, second = widths
    mean = (first + second) // 2
    variants = {
        "right": layers_for_widths(n, widths),
        _(
            "that is the count for a stack of the average width {mean}; but the stack starts "
            "with width {first}, and the last layers decide: the average does not see which "
            "width comes last",
            mean=mean,
            first=first,
        ): (conv_layers_needed(n, mean)),
        _(
            "you let each layer of width k reach k positions further back; a width-k window "
            "holds the current position too"
        ): layers_for_widths(n, tuple(w + 1 for w in widths)),
        _("that counts pairs of layers, but the question asks for layers"): -(
            -n // (first + second - 2)
        ),
        _(
            "that is a stack of width {width} only; every other layer has width {other}",
            width=second,
            other=first,
        ): (conv_layers_needed(n, second)),
        _(
            "that is a stack of width {width} only; every other layer has width {other}",
            width=first,
            other=second,
        ): (conv_layers_needed(n, first)),
        _(
            "that is a recurrent network's path length, one step per token; a convolution "
            "layer of width k covers k - 1 new tokens at once"
        ): n,
    }
    expect_predicted(answer, variants, case=case)


def _accuracy_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # ten examples at distances 1, 5 and 20: one wrong at 5, three at 20
    generator = torch.Generator().manual_seed(2)
    distances = torch.tensor([5, 1, 5, 20, 1, 5, 20, 20, 20, 1])
    targets = torch.randint(4, (10,), generator=generator)
    predictions = targets.clone()
    predictions[[0, 3, 6, 8]] = (predictions[[0, 3, 6, 8]] + 1) % 4  # one wrong at 5, three at 20
    return predictions, targets, distances


def _expect_accuracy_keys(got, expected: dict[int, float]) -> None:
    # a dict whose keys are plain ints, the distances of the examples
    expect_true(
        isinstance(got, dict),
        _("expected a dict {{distance: accuracy}}, got {what}", what=type(got).__name__),
    )
    not_int = [k for k in got if not isinstance(k, int) or isinstance(k, bool)]
    expect_true(
        not not_int,
        _(
            "the keys must be plain ints; got a key of type {type} ({key}), which a dict "
            "lookup by the int distance does not find",
            type=type(not_int[0]).__name__,
            key=repr(not_int[0]),
        )
        if not_int
        else "",
    )
    keys = [int(k) for k in got]
    expect_true(
        sorted(keys) == list(expected),
        _(
            "expected the distances {expected} as keys, got {got}",
            expected=list(expected),
            got=keys,
        ),
    )


def _diagnose_accuracy(dist: int, value: float, acc: float, overall: float, in_group: float):
    """The Mismatch for a wrong accuracy ``value`` at ``dist``, naming the likely mistake."""
    if math.isclose(value, overall, abs_tol=1e-6):
        return Mismatch(
            _(
                "distance {dist}: {value} is the accuracy over all examples, at every distance",
                dist=dist,
                value=f"{value:.4g}",
            )
        )
    if math.isclose(value, acc * in_group, abs_tol=1e-6):
        return Mismatch(
            _(
                "distance {dist}: {value} divides the correct answers at this distance by all "
                "N examples",
                dist=dist,
                value=f"{value:.4g}",
            )
        )
    return Mismatch(
        _(
            "distance {dist}: expected accuracy {expected}, got {got}",
            dist=dist,
            expected=f"{acc:.4g}",
            got=f"{value:.4g}",
        )
    )


@checker("accuracy", "accuracy by distance")
def check_accuracy_by_distance(answer):
    predictions, targets, distances = _accuracy_case()
    got = call_answer(answer, predictions.clone(), targets.clone(), distances.clone())
    expected = accuracy_by_distance(predictions, targets, distances)
    _expect_accuracy_keys(got, expected)
    overall = float((predictions == targets).float().mean())
    for dist, acc in expected.items():
        value = float(got[dist])
        if not math.isclose(value, acc, abs_tol=1e-6):
            in_group = (distances == dist).float().mean().item()
            raise _diagnose_accuracy(dist, value, acc, overall, in_group)
