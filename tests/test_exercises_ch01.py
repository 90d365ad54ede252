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

    def span_n(n, k):  # k^L >= n: one layer short at exact powers
        layers = 0
        while k**layers < n:
            layers += 1
        return layers

    assert ch01.check_dilated_layers(solution).passed
    assert ch01.check_dilated_layers(ch01.dilated_layers_needed).passed
    no_dilation = ch01.check_dilated_layers(lambda n, k: math.ceil(n / (k - 1)))
    assert no_dilation.status == "failed" and "without dilation" in no_dilation.message
    short = ch01.check_dilated_layers(span_n)
    assert short.status == "failed" and "positions 0 to n are n + 1" in short.message
    assert (
        ch01.check_dilated_layers(lambda n, k: int(math.log(n + 1, k)) if n else 0).status
        == "failed"
    )  # rounded down
    assert ch01.check_dilated_layers(stub).status == "not attempted"


def test_dilated_layers_rejects_the_floating_point_logarithm():
    """Issue 45: the forbidden math.ceil(math.log(n + 1, k)) passed every case before."""
    assert math.log(125, 5) > 3  # the failing case: 3.0000000000000004
    result = ch01.check_dilated_layers(lambda n, k: math.ceil(math.log(n + 1, k)) if n else 0)
    assert result.status == "failed", result.message
    assert "n=124, k=5" in result.message and "floating-point logarithm" in result.message


def test_attention_weights_fixed():
    def fixed(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v

    def dim1(q, k, v):  # right for one sequence, wrong for a batch
        return torch.softmax(q @ k.transpose(-2, -1), dim=1) @ v

    assert ch01.check_attention_weights_fixed(fixed).passed
    assert ch01.check_attention_weights_fixed(ch01.attention).passed
    bug = ch01.check_attention_weights_fixed(ch01.buggy_attention)
    assert bug.status == "failed" and "still runs over dim=0" in bug.message
    half = ch01.check_attention_weights_fixed(dim1)
    assert half.status == "failed" and "runs over dim=1" in half.message
    assert "dim=-1" not in half.message  # names the mistake, not the fix (issue 45)
    assert "a batch of 2" in half.message
    # the buggy weights: for one sequence each column sums to 1, not each row
    q, k = torch.randn(3, 4), torch.randn(5, 4)
    w = ch01.buggy_attention(q, k, torch.eye(5))
    torch.testing.assert_close(w.sum(0), torch.ones(5))
    assert not torch.allclose(w.sum(1), torch.ones(3))
    assert ch01.check_attention_weights_fixed(stub).status == "not attempted"


def test_predicted_layers():
    assert ch01.check_predicted_layers(26).passed
    assert ch01.check_predicted_layers(26.0).passed
    assert ch01.check_predicted_layers(None).status == "not attempted"
    for wrong, words in (
        (25, "the average width 5; but the stack starts with width 3"),
        (20, "a width-k window holds the current position too"),
        (13, "counts pairs of layers"),
        (17, "a stack of width 7 only"),
        (50, "a stack of width 3 only"),
        (100, "recurrent network"),
        (27, "is not right"),
    ):
        result = ch01.check_predicted_layers(wrong)
        assert result.status == "failed" and words in result.message, (wrong, result.message)
        assert "98 < 100" not in result.message  # no worked answer (issue 45)


def test_the_layer_count_is_what_autograd_measures():
    n, widths = ch01.PREDICT_N, ch01.PREDICT_WIDTHS
    right = ch01.layers_for_widths(n, widths)
    assert right == 26
    assert not ch01.widths_reach(n, widths, right - 1)
    assert ch01.widths_reach(n, widths, right)
    # the order matters: starting with the wide layer, one layer fewer does it
    assert ch01.layers_for_widths(n, widths[::-1]) == 25
    assert ch01.widths_reach(n, widths[::-1], 25)
    # one width: the receptive-field proposition
    for k in (2, 3, 5):
        assert ch01.layers_for_widths(n, (k,)) == ch01.conv_layers_needed(n, k)


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
    result = ch01.check_reach_to_first(summed)
    assert result.status == "failed" and "y[-1].sum()" in result.message
    result = ch01.check_reach_to_first(wrong_end)
    assert result.status == "failed" and "reach to the last input" in result.message
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
    result = ch01.check_accuracy_by_distance(overall)
    assert result.status == "failed" and "accuracy over all examples" in result.message
    result = ch01.check_accuracy_by_distance(over_all_examples)
    assert result.status == "failed" and "by all N examples" in result.message
    assert ch01.check_accuracy_by_distance(lambda p, t, d: [0.5]).status == "failed"
    assert ch01.check_accuracy_by_distance(stub).status == "not attempted"


def test_accuracy_by_distance_with_tensor_keys():
    """Issue 45: tensor keys got "expected ..., got nan"; the checker names the keys' type."""

    def tensor_keys(predictions, targets, distances):
        correct = (predictions == targets).float()
        return {d: correct[distances == d].mean().item() for d in torch.unique(distances)}

    result = ch01.check_accuracy_by_distance(tensor_keys)
    assert result.status == "failed"
    assert "plain ints" in result.message and "Tensor" in result.message, result.message
    assert "nan" not in result.message
