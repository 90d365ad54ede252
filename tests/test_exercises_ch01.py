"""Chapter 1's checkers accept the reference solutions, reject plausible mistakes, spot stubs."""

import math

import torch
from selfattn.exercises import ch01
from selfattn.gradient_reach import gradient_reach


def stub(*args):
    raise NotImplementedError


def test_dilated_layers():
    def solution(n, k):
        layers = 0
        while k**layers < n + 1:
            layers += 1
        return layers

    assert ch01.check_dilated_layers(solution).passed
    assert ch01.check_dilated_layers(ch01.dilated_layers_needed).passed
    assert (
        ch01.check_dilated_layers(lambda n, k: math.ceil(n / (k - 1))).status == "failed"
    )  # no dilation
    assert (
        ch01.check_dilated_layers(lambda n, k: math.ceil(math.log(n, k)) if n > 1 else n).status
        == "failed"
    )  # k^L >= n
    assert (
        ch01.check_dilated_layers(lambda n, k: int(math.log(n + 1, k)) if n else 0).status
        == "failed"
    )  # rounded down
    assert ch01.check_dilated_layers(stub).status == "not attempted"


def test_rnn_bound():
    def solution(rnn, distance):
        spectral = lambda w: torch.linalg.matrix_norm(w.detach(), ord=2)  # noqa: E731
        return spectral(rnn.weight_ih_l0) * spectral(rnn.weight_hh_l0) ** distance

    def frobenius(rnn, distance):
        return rnn.weight_ih_l0.detach().norm() * rnn.weight_hh_l0.detach().norm() ** distance

    def one_more_step(rnn, distance):
        return solution(rnn, distance + 1)

    assert ch01.check_rnn_bound(solution).passed
    assert ch01.check_rnn_bound(frobenius).status == "failed"
    assert ch01.check_rnn_bound(one_more_step).status == "failed"
    assert (
        ch01.check_rnn_bound(lambda rnn, distance: solution(rnn, 1) ** distance).status == "failed"
    )
    assert ch01.check_rnn_bound(stub).status == "not attempted"


def test_reach_to_first():
    def solution(encoder, x):
        x = x.clone().requires_grad_(True)
        y_last = encoder(x[None])[0, -1]
        rows = [
            torch.autograd.grad(y_last[j], x, retain_graph=True)[0][0]
            for j in range(y_last.shape[0])
        ]
        return torch.stack(rows).norm()

    def summed(encoder, x):  # gradient of the sum of the outputs, not the Jacobian's norm
        x = x.clone().requires_grad_(True)
        encoder(x[None])[0, -1].sum().backward()
        return x.grad[0].norm()

    def wrong_end(encoder, x):  # reach to the last input instead of the first
        return gradient_reach(encoder, x)[-1]

    assert ch01.check_reach_to_first(solution).passed
    assert ch01.check_reach_to_first(lambda encoder, x: gradient_reach(encoder, x)[0]).passed
    assert ch01.check_reach_to_first(summed).status == "failed"
    assert ch01.check_reach_to_first(wrong_end).status == "failed"
    assert ch01.check_reach_to_first(stub).status == "not attempted"


def test_accuracy_by_distance():
    def solution(predictions, targets, distances):
        return {
            int(d): float((predictions == targets)[distances == d].float().mean())
            for d in distances.unique()
        }

    def overall(predictions, targets, distances):
        acc = float((predictions == targets).float().mean())
        return {int(d): acc for d in distances.unique()}

    def over_all_examples(
        predictions, targets, distances
    ):  # divides by N instead of the group size
        return {
            int(d): float(((predictions == targets) & (distances == d)).float().mean())
            for d in distances.unique()
        }

    assert ch01.check_accuracy_by_distance(solution).passed
    assert ch01.check_accuracy_by_distance(overall).status == "failed"
    assert ch01.check_accuracy_by_distance(over_all_examples).status == "failed"
    assert ch01.check_accuracy_by_distance(lambda p, t, d: [0.5]).status == "failed"
    assert ch01.check_accuracy_by_distance(stub).status == "not attempted"


def test_reference_helpers_and_errors():
    import pytest

    assert ch01.conv_layers_needed(0, 3) == 0 and ch01.conv_layers_needed(10, 3) == 5
    assert [ch01.dilated_layers_needed(n, 3) for n in (0, 1, 2, 3, 8, 9)] == [0, 1, 1, 2, 2, 3]
    rnn = torch.nn.RNN(2, 2)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(torch.eye(2) * 2)
        rnn.weight_hh_l0.copy_(torch.diag(torch.tensor([0.5, -3.0])))
    assert math.isclose(ch01.rnn_reach_bound(rnn, 2), 2 * 9)
    with pytest.raises(ValueError, match="need n >= 0 and k >= 2, got n=4, k=1"):
        ch01.conv_layers_needed(4, 1)
    with pytest.raises(ValueError, match="need n >= 0 and k >= 2, got n=-1, k=3"):
        ch01.dilated_layers_needed(-1, 3)
