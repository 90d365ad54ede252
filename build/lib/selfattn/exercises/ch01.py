"""Checkers for chapter 1, "Why self-attention".

* 1.1 ``check_dilated_layers``: dilated width-``k`` convolution layers needed to connect
  tokens ``n`` apart.
* 1.2 ``check_rnn_bound``: the bound ``||W_ih|| ||W_hh||^t`` on an RNN's gradient reach.
* 1.3 ``check_reach_to_first``: ``|| d y[-1] / d x[0] ||`` with autograd.
* 1.4 ``check_accuracy_by_distance``: accuracy per distance from predictions.
"""

from __future__ import annotations

import math

import torch

from ..gradient_reach import gradient_reach
from ._core import Mismatch, call_answer, checker, expect_close, expect_true

__all__ = [
    "check_dilated_layers",
    "check_rnn_bound",
    "check_reach_to_first",
    "check_accuracy_by_distance",
    "conv_layers_needed",
    "dilated_layers_needed",
    "rnn_reach_bound",
    "accuracy_by_distance",
]


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


def rnn_reach_bound(rnn: torch.nn.RNN, distance: int) -> float:
    """``||W_ih||_2 * ||W_hh||_2 ** distance``: a tanh RNN's bound on ``||d h_t / d x_{t-s}||_2``.

    Spectral norms (largest singular values) of the input and recurrent weights of a
    one-layer ``nn.RNN``; ``s`` is ``distance``.
    """
    w_ih = torch.linalg.matrix_norm(rnn.weight_ih_l0.detach().double(), ord=2)
    w_hh = torch.linalg.matrix_norm(rnn.weight_hh_l0.detach().double(), ord=2)
    return float(w_ih * w_hh**distance)


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


@checker("1.1", "dilated convolution layers")
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
    ):
        got = call_answer(answer, n, k)
        expected = dilated_layers_needed(n, k)
        if got != expected:
            raise Mismatch(f"case n={n}, k={k}: expected {expected} layers, got {got}")


@checker("1.2", "the RNN gradient bound")
def check_rnn_bound(answer):
    torch.manual_seed(3)
    for d_in, d_hidden in ((3, 4), (5, 2)):
        rnn = torch.nn.RNN(d_in, d_hidden, batch_first=True)
        with torch.no_grad():
            rnn.weight_hh_l0.mul_(3.0)  # a recurrent norm above 1, so every exponent shows
        for distance in (0, 1, 5):
            got = call_answer(answer, rnn, distance)
            expected = rnn_reach_bound(rnn, distance)
            expect_close(
                torch.as_tensor(float(got), dtype=torch.float64),
                torch.tensor(expected),
                case=f"d_in={d_in}, d_hidden={d_hidden}, distance={distance}",
                atol=1e-8,
                rtol=1e-4,
            )


def _encoders():
    torch.manual_seed(0)
    rnn, lstm = torch.nn.RNN(3, 4, batch_first=True), torch.nn.LSTM(3, 4, batch_first=True)
    w = torch.randn(3, 3)
    attention = lambda x: torch.softmax(x @ w @ x.transpose(-2, -1), dim=-1) @ x  # noqa: E731
    return {"RNN": lambda x: rnn(x)[0], "LSTM": lambda x: lstm(x)[0], "attention": attention}


@checker("1.3", "gradient reach by autograd")
def check_reach_to_first(answer):
    generator = torch.Generator().manual_seed(1)
    for name, encoder in _encoders().items():
        for n in (1, 2, 6):
            x = torch.randn(n, 3, generator=generator)
            got = call_answer(answer, encoder, x.clone())
            expected = gradient_reach(encoder, x)[0]
            expect_close(
                torch.as_tensor(got, dtype=torch.float64).reshape(()),
                expected,
                case=f"{name}, n={n}",
                atol=1e-6,
                rtol=1e-4,
            )


@checker("1.4", "accuracy by distance")
def check_accuracy_by_distance(answer):
    generator = torch.Generator().manual_seed(2)
    distances = torch.tensor([5, 1, 5, 20, 1, 5, 20, 20, 20, 1])
    targets = torch.randint(4, (10,), generator=generator)
    predictions = targets.clone()
    predictions[[0, 3, 6, 8]] = (predictions[[0, 3, 6, 8]] + 1) % 4  # one wrong at 5, three at 20
    got = call_answer(answer, predictions.clone(), targets.clone(), distances.clone())
    expected = accuracy_by_distance(predictions, targets, distances)
    expect_true(
        isinstance(got, dict), f"expected a dict {{distance: accuracy}}, got {type(got).__name__}"
    )
    keys = [int(k) for k in got]
    expect_true(
        sorted(keys) == list(expected),
        f"expected the distances {list(expected)} as keys, got {keys}",
    )
    for dist, acc in expected.items():
        value = got.get(dist, got.get(torch.tensor(dist)))
        value = float(value) if value is not None else float("nan")
        if not math.isclose(value, acc, abs_tol=1e-6):
            raise Mismatch(f"distance {dist}: expected accuracy {acc:.4g}, got {value:.4g}")
