"""The tiny recurrent classifiers and the gradient-reach measurement."""

import pytest
import torch
from long_range_training import long_range_accuracy
from selfattn.gradient_reach import gradient_reach
from selfattn.models import RecurrentClassifier


@pytest.mark.parametrize("cell", ["lstm", "rnn"])
def test_shapes_and_that_it_reads_the_whole_sequence(cell):
    model = RecurrentClassifier(10, 4, d_embed=8, d_hidden=12, cell=cell)
    ids = torch.randint(1, 10, (3, 6))
    assert model(ids).shape == (3, 4)
    changed = ids.clone()
    changed[:, 0] = (ids[:, 0] % 9) + 1  # a different first token changes the answer
    assert not torch.allclose(model(ids), model(changed))


def test_parameter_count_of_the_lstm_is_the_formula():
    model = RecurrentClassifier(10, 4, d_embed=8, d_hidden=12)
    lstm = 4 * (12 * (8 + 12) + 2 * 12)  # four gates, input + recurrent weights, two biases each
    assert sum(p.numel() for p in model.parameters()) == 10 * 8 + lstm + 12 * 4 + 4


def test_lstm_learns_to_remember_the_first_token_at_short_distance():
    accuracy = long_range_accuracy(
        lambda vocab: RecurrentClassifier(vocab, 4, d_embed=8, d_hidden=16),
        (1, 3),
        lr=1e-2,
        eval_length=3,
        eval_seed=9,
    )
    assert accuracy > 0.95


def test_errors():
    with pytest.raises(ValueError, match="cell must be 'lstm' or 'rnn', got 'gru'"):
        RecurrentClassifier(5, 2, cell="gru")
    with pytest.raises(ValueError, match="d_hidden must be >= 1, got 0"):
        RecurrentClassifier(5, 2, d_hidden=0)
    with pytest.raises(TypeError, match="d_embed must be an int, got float 8.0"):
        RecurrentClassifier(5, 2, d_embed=8.0)
    with pytest.raises(
        TypeError, match=r"long tensor of shape \(B, n\), got Tensor torch.float32 \(2, 3\)"
    ):
        RecurrentClassifier(5, 2)(torch.zeros(2, 3))


def test_gradient_reach_matches_the_jacobian():
    torch.manual_seed(0)
    rnn = torch.nn.RNN(3, 4, batch_first=True)
    encoder = lambda x: rnn(x)[0]  # noqa: E731
    x = torch.randn(5, 3)
    jac = torch.autograd.functional.jacobian(lambda inp: encoder(inp[None])[0, -1], x)  # (4, 5, 3)
    expected = jac.pow(2).sum(dim=(0, 2)).sqrt()
    torch.testing.assert_close(gradient_reach(encoder, x), expected, atol=1e-6, rtol=1e-5)
    # a causal recurrent model: only the last input can reach the first output, and
    # the last output depends on every input
    assert (gradient_reach(encoder, x) > 0).all()


def test_gradient_reach_of_an_identity_and_errors():
    x = torch.randn(4, 2)
    torch.testing.assert_close(
        gradient_reach(lambda t: t, x), torch.tensor([0.0, 0.0, 0.0, 2**0.5])
    )
    with pytest.raises(
        ValueError, match=r"float tensor of shape \(n, d_in\), got Tensor torch.int64 \(4,\)"
    ):
        gradient_reach(lambda t: t, torch.arange(4))
