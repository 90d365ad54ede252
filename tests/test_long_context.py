"""The key-value retrieval task, the retrieval model and the RoPE-scaling study (chapter 6)."""

import pytest
import torch
from selfattn.data.order_tasks import (
    IGNORE_INDEX,
    KeyValueRetrievalTask,
    key_value_retrieval_batch,
)
from selfattn.models.long_context import (
    RetrievalModel,
    retrieval_accuracy,
    rope_scaling_run,
    rope_scaling_study,
)
from selfattn.positional import RopeScaling


def test_retrieval_batch_targets_are_the_stored_values():
    keys, values, targets = key_value_retrieval_batch(5, 20, num_queries=4, seed=3)
    assert keys.shape == values.shape == targets.shape == (5, 20)
    for b in range(5):
        stored = dict(zip(keys[b, :16].tolist(), values[b, :16].tolist()))
        assert len(stored) == 16  # distinct keys
        assert (targets[b, :16] == IGNORE_INDEX).all() and (values[b, 16:] == 16).all()
        for key, target in zip(keys[b, 16:].tolist(), targets[b, 16:].tolist()):
            assert stored[key] == target
    again = key_value_retrieval_batch(5, 20, num_queries=4, seed=3)
    assert all(torch.equal(a, b) for a, b in zip((keys, values, targets), again))


def test_retrieval_task_train_and_test_streams_differ_and_repeat():
    task = KeyValueRetrievalTask(seed=1)
    b0 = task.train_batches(4, 12)(0)
    assert torch.equal(b0[0], task.train_batches(4, 12)(0)[0])
    assert not torch.equal(b0[0], task.train_batches(4, 12)(1)[0])
    assert not torch.equal(task.test_set(4, 12)[0], b0[0])
    assert "seed=1" in repr(task)


@pytest.mark.parametrize(
    "kwargs, exc, msg",
    [
        (dict(batch_size=2, n=200), ValueError, "num_keys"),
        (dict(batch_size=2, n=8), ValueError, "n must be"),
        (dict(batch_size=2, n=20.0), TypeError, "n must be an int"),
    ],
)
def test_retrieval_batch_bad_input(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        key_value_retrieval_batch(**kwargs)


def test_retrieval_model_shapes_causality_and_rope_swap():
    torch.manual_seed(0)
    model = RetrievalModel(encoding="rope").eval()
    keys, values, _ = key_value_retrieval_batch(2, 16, seed=0)
    logits = model(keys, values)
    assert logits.shape == (2, 16, 16)
    # causal: changing the last position does not change the others
    keys2 = keys.clone()
    keys2[:, -1] = (keys2[:, -1] + 1) % 128
    assert torch.allclose(model(keys2, values)[:, :-1], logits[:, :-1], atol=1e-6)
    # a factor-1 scaling is the model as trained; a real one changes the answer
    model.set_rope_scaling(RopeScaling("linear", 1.0))
    assert torch.allclose(model(keys, values), logits, atol=1e-6)
    model.set_rope_scaling(RopeScaling("linear", 4.0))
    assert not torch.allclose(model(keys, values), logits, atol=1e-4)
    with pytest.raises(ValueError, match="encoding='rope'"):
        RetrievalModel(encoding="none").set_rope_scaling(None)
    with pytest.raises(ValueError, match="encoding"):
        RetrievalModel(encoding="alibi")
    with pytest.raises(ValueError, match="same shape"):
        model(keys, values[:, :-1])
    with pytest.raises(TypeError, match="keys"):
        model(keys.float(), values)


def test_retrieval_accuracy_counts_only_queries():
    class Oracle(torch.nn.Module):
        def __init__(self, answer):
            super().__init__()
            self.answer = answer

        def forward(self, keys, values):
            return torch.nn.functional.one_hot(self.answer.clamp(min=0), 16).float()

    keys, values, targets = key_value_retrieval_batch(3, 20, seed=0)
    assert retrieval_accuracy(Oracle(targets), keys, values, targets) == 1.0
    wrong = torch.where(targets >= 0, (targets + 1) % 16, targets)
    assert retrieval_accuracy(Oracle(wrong), keys, values, targets) == 0.0


def test_scaling_run_learns_and_study_is_json_ready():
    out = rope_scaling_run(0, n_train=16, factors=(1, 2), steps=150, num_test=50)
    assert set(out) == {"rope", "pi", "ntk", "yarn", "none", "sinusoidal"}
    assert set(out["rope"]) == {"16", "32"}
    # at the training length every scaling is the trained model itself
    assert out["pi"]["16"] == out["ntk"]["16"] == out["yarn"]["16"] == out["rope"]["16"]
    assert out["none"]["16"] > 0.5  # learned, far above chance (1/16)
    study = rope_scaling_study(
        [0], n_train=16, factors=(1, 2), steps=150, num_test=50, methods=("rope", "pi")
    )
    assert study["seeds"] == [0] and study["runs"]["pi"]["0"] == out["pi"]
    assert study["settings"]["factors"] == [1, 2] and study["settings"]["steps"] == 150
    with pytest.raises(ValueError, match="methods"):
        rope_scaling_run(0, methods=("alibi",))
    with pytest.raises(ValueError, match="at least one seed"):
        rope_scaling_study([])
