"""Helpers restore the state they change (robustness review, round 2): a model's train/eval
mode (every submodule's own), grad mode, the default dtype and the global random stream."""

import pytest
import torch
from selfattn.data import mqar
from selfattn.data.order_tasks import KeyValueRetrievalTask, ShiftedCopyTask
from selfattn.data.vocab import Vocab
from selfattn.models import MiniBERT, MiniGPT, finetune, long_context
from selfattn.models import positional as mpos
from selfattn.train import train_loop


def _modes(model):
    return [m.training for m in model.modules()]


def _mixed(model):
    """Train mode at the top, one submodule in eval mode: a restore must keep both."""
    model.train()
    next(m for m in model.modules() if m is not model).eval()
    return _modes(model)


def _order_model():
    return mpos.OrderModel(16, d_model=8, num_heads=2, num_layers=1, max_len=16)


def test_token_accuracy_restores_the_models_modes_and_grad_mode():
    model = _order_model()
    before = _mixed(model)
    x, y = ShiftedCopyTask(seed=0).test_set(4, 8)
    with torch.enable_grad():
        mpos.token_accuracy(model, x, y)
        mpos.token_accuracy(model, x, y, per_position=True)
        assert torch.is_grad_enabled()
    assert _modes(model) == before
    model.eval()
    mpos.token_accuracy(model, x, y)
    assert not model.training


def test_retrieval_accuracy_restores_the_models_modes():
    model = long_context.RetrievalModel(d_model=8, num_heads=2)
    task = KeyValueRetrievalTask(seed=0)
    before = _mixed(model)
    long_context.retrieval_accuracy(model, *task.test_set(2, 16))
    assert _modes(model) == before


def test_context_probes_restores_the_models_modes():
    vocab = Vocab("the cat cats sat sit because it they <mask>".split())
    model = MiniBERT(len(vocab), d_model=8, num_heads=2, num_layers=1, max_len=16)
    before = _mixed(model)
    finetune.context_probes(model, ["the cat sat because it sat"], vocab)
    assert _modes(model) == before


def test_generate_restores_the_models_modes():
    model = MiniGPT(10, d_model=8, num_heads=2, num_layers=1, max_len=16)
    before = _mixed(model)
    model.generate(torch.randint(0, 10, (1, 3)), 2, greedy=True)
    assert _modes(model) == before


@pytest.mark.parametrize("start_training", [True, False])
def test_train_loop_trains_in_train_mode_and_leaves_the_mode_it_found(start_training):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.0))
    model.train(start_training)
    seen = []

    def loss(m, batch):
        seen.append(m.training)
        return m(batch).pow(2).mean()

    train_loop(model, [torch.randn(3, 2)] * 2, loss, steps=2, progress=False)
    assert seen == [True, True]
    assert _modes(model) == [start_training] * 3


def _rng_unchanged(call):
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    dtype = torch.get_default_dtype()
    call()
    assert torch.get_default_dtype() == dtype
    assert torch.equal(torch.rand(3), expected), "the global random stream moved"


def test_train_order_model_restores_the_random_stream_and_returns_an_eval_model():
    def call():
        model, _ = mpos.train_order_model(
            "rope",
            ShiftedCopyTask(seed=0),
            n_train=8,
            steps=1,
            d_model=8,
            num_heads=2,
            num_layers=1,
            max_len=16,
        )
        assert not model.training

    _rng_unchanged(call)


def test_extrapolation_run_restores_the_random_stream():
    _rng_unchanged(lambda: mpos.extrapolation_run("rope", 0, n_train=8, n_test=12, steps=1,
                                                  num_test=4))  # fmt: skip


def test_train_mqar_restores_the_random_stream():
    _rng_unchanged(lambda: mqar.train_mqar("softmax", 2, steps=1, batch=4, d_model=16,
                                           eval_batch=4))  # fmt: skip


def test_finetune_run_restores_the_random_stream():
    vocab = Vocab("a b c d".split())
    ids = torch.randint(1, len(vocab), (8, 4))
    labels = torch.randint(0, 2, (8,))
    _rng_unchanged(lambda: finetune.finetune_run(None, ids, labels, ids, labels, vocab, steps=1,
                                                 batch_size=4, max_len=8))  # fmt: skip


def test_rope_scaling_run_restores_the_random_stream():
    kw = dict(factors=(1,), methods=("none",), steps=1, num_test=4, d_model=8)
    _rng_unchanged(lambda: long_context.rope_scaling_run(0, **kw))
