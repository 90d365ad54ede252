"""OrderModel (chapter 6's experiment model) and the shifted-copy task."""

import json

import numpy as np
import pytest
import torch
from selfattn.data import IGNORE_INDEX, ShiftedCopyTask, shifted_copy_batch
from selfattn.models import (
    ENCODINGS,
    OrderModel,
    extrapolation_run,
    extrapolation_study,
    steps_to_loss,
    token_accuracy,
    train_order_model,
)


@pytest.fixture(autouse=True)
def _one_thread():
    # Tiny matrices: extra threads only add contention (the chapters run on one thread too).
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---- the task -----------------------------------------------------------------------


def test_shifted_copy_targets_and_determinism():
    x, y = shifted_copy_batch(5, 9, shift=3, vocab_size=10, seed=4)
    assert x.shape == y.shape == (5, 9) and x.dtype == y.dtype == torch.long
    assert (y[:, :3] == IGNORE_INDEX).all() and torch.equal(y[:, 3:], x[:, :6])
    assert x.min() >= 1 and x.max() <= 9  # id 0 is never drawn
    x2, _ = shifted_copy_batch(5, 9, shift=3, vocab_size=10, seed=4)
    assert torch.equal(x, x2)
    state = torch.random.get_rng_state()
    task = ShiftedCopyTask(shift=2, vocab_size=8, seed=1)
    assert torch.equal(task.train_batches(4, 6)(7)[0], task.train_batches(4, 6)(7)[0])
    assert not torch.equal(task.train_batches(4, 6)(7)[0], task.train_batches(4, 6)(8)[0])
    assert not torch.equal(task.test_set(4, 6)[0], task.train_batches(4, 6)(0)[0])
    assert torch.equal(torch.random.get_rng_state(), state)  # the global generator is untouched


@pytest.mark.parametrize(
    "kwargs,exc,msg",
    [
        ({"n": 3, "shift": 3}, ValueError, "n must exceed shift"),
        ({"n": 5, "shift": -1}, ValueError, "shift must be >= 0"),
        ({"n": 5.0, "shift": 1}, TypeError, "n must be an int, got float"),
        ({"n": 5, "shift": 1, "vocab_size": 2}, ValueError, "vocab_size must be >= 3"),
    ],
)
def test_shifted_copy_bad_input(kwargs, exc, msg):
    kwargs = {"vocab_size": 8, **kwargs}
    with pytest.raises(exc, match=msg):
        shifted_copy_batch(2, **kwargs)


# ---- the model ----------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_every_encoding_gives_logits_and_causal_weights(encoding):
    torch.manual_seed(0)
    model = OrderModel(11, encoding=encoding, d_model=16, num_heads=2, max_len=12)
    tokens = torch.randint(1, 11, (3, 7))
    logits, weights = model(tokens, return_weights=True)
    assert logits.shape == (3, 7, 11) and torch.isfinite(logits).all()
    assert len(weights) == 2 and weights[0].shape == (3, 2, 7, 7)
    assert torch.allclose(weights[0].sum(-1), torch.ones(3, 2, 7), atol=1e-6)
    assert (weights[0].triu(1) == 0).all()  # causal: no weight on later tokens


def test_without_positions_and_mask_the_model_is_permutation_equivariant():
    torch.manual_seed(0)
    tokens = torch.randint(1, 11, (2, 9))
    perm = torch.randperm(9)
    for encoding, equivariant in [
        ("none", True),
        ("sinusoidal", False),
        ("learned", False),
        ("alibi", False),
        ("relative", False),
        ("rope", False),
    ]:
        model = OrderModel(11, encoding=encoding, d_model=16, num_heads=2, causal=False)
        if encoding == "relative":
            torch.nn.init.normal_(model.rel.bias.weight)  # it starts at zero, i.e. as "none"
        with torch.no_grad():
            a, b = model(tokens)[:, perm], model(tokens[:, perm])
        assert torch.allclose(a, b, atol=1e-5) == equivariant, encoding


def test_model_bad_input():
    with pytest.raises(ValueError, match="encoding must be one of"):
        OrderModel(10, encoding="absolute")
    with pytest.raises(ValueError, match="heads of even size"):
        OrderModel(10, d_model=12, num_heads=4)
    with pytest.raises(
        TypeError,
        match=r"tokens must be a torch.long tensor of shape \(B, n\), got a tensor of shape \(4,",
    ):
        OrderModel(10)(torch.arange(4))
    with pytest.raises(ValueError, match="do not fit the table of max_len=8"):
        OrderModel(10, encoding="learned", max_len=8)(torch.ones(1, 9, dtype=torch.long))


def test_training_learns_the_shift_and_accuracy_counts_only_scored_positions():
    task = ShiftedCopyTask(shift=1, vocab_size=8, seed=0)
    model, losses = train_order_model(
        "rope", task, n_train=8, steps=150, d_model=16, num_heads=2, lr=1e-2
    )
    x, y = task.test_set(200, 8)
    acc = token_accuracy(model, x, y)
    per_position = token_accuracy(model, x, y, per_position=True)
    assert losses[-1] < 0.2 * losses[0] and acc > 0.9
    assert torch.isnan(per_position[0]) and abs(per_position[1:].mean().item() - acc) < 1e-6


# ---- chapter 6's experiment over seeds ---------------------------------------------


def _steps_to_loss_oracle(losses, threshold, window):
    # the chapter's original formula: a "valid" moving average, first index below
    smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
    below = np.flatnonzero(smooth < threshold)
    return int(below[0]) + window if below.size else None


def test_steps_to_loss_matches_the_moving_average():
    rng = np.random.default_rng(0)
    for _ in range(20):
        losses = np.exp(-np.linspace(0, 6, 300) + 0.3 * rng.standard_normal(300))
        for threshold, window in ((0.1, 20), (0.5, 1), (0.01, 7), (1e-9, 20)):
            expected = _steps_to_loss_oracle(losses, threshold, window)
            assert steps_to_loss(losses.tolist(), threshold, window=window) == expected
    assert steps_to_loss([1.0] * 30, 0.5) is None
    assert steps_to_loss([0.0] * 20, 0.1) == 20  # the earliest possible step is the window
    assert steps_to_loss([0.0] * 19, 0.1) is None  # shorter than one window
    with pytest.raises(ValueError, match="window must be >= 1, got 0"):
        steps_to_loss([1.0], 0.1, window=0)


def test_extrapolation_run_is_seeded_and_its_metrics_are_the_model_s():
    kwargs = dict(n_train=8, n_test=12, steps=4, num_test=16)
    model, losses, metrics = extrapolation_run("sinusoidal", 3, **kwargs)
    _, losses_again, metrics_again = extrapolation_run("sinusoidal", 3, **kwargs)
    _, losses_other, _ = extrapolation_run("sinusoidal", 4, **kwargs)
    assert losses == losses_again
    positions, positions_again = metrics.pop("per_position"), metrics_again.pop("per_position")
    assert metrics == metrics_again
    np.testing.assert_array_equal(positions, positions_again)  # NaN where nothing is scored
    assert losses != losses_other  # another seed: other weights and batches
    task = ShiftedCopyTask(shift=3, vocab_size=16, seed=3)
    x, y = task.test_set(16, 12)
    assert metrics["acc_long"] == token_accuracy(model, x, y)
    assert metrics["acc_short"] == token_accuracy(model, *task.test_set(16, 8))
    per_position = token_accuracy(model, x, y, per_position=True)
    assert metrics["acc_beyond"] == pytest.approx(per_position[8:].mean().item())
    assert len(positions) == 12 and len(losses) == 4 and np.isnan(positions[:3]).all()
    assert metrics["steps_to_loss01"] == steps_to_loss(losses, 0.1)


def test_extrapolation_run_bad_input():
    with pytest.raises(TypeError, match="seed must be an int, got float"):
        extrapolation_run("rope", 1.0)
    with pytest.raises(ValueError, match="n_test must exceed n_train=16, got 16"):
        extrapolation_run("rope", 0, n_test=16)
    with pytest.raises(ValueError, match="encoding must be one of"):
        extrapolation_run("absolute", 0, steps=1, num_test=2)


def test_extrapolation_study_collects_every_encoding_and_seed():
    study = extrapolation_study(
        [0, 1], encodings=("none", "rope"), n_train=8, n_test=10, steps=2, num_test=4
    )
    assert study["seeds"] == [0, 1] and set(study["runs"]) == {"none", "rope"}
    assert study["settings"]["steps"] == 2 and study["settings"]["lr"] == 3e-3
    _, _, direct = extrapolation_run("rope", 1, n_train=8, n_test=10, steps=2, num_test=4)
    row = study["runs"]["rope"]["1"]
    assert set(row) == {"acc_short", "acc_long", "acc_beyond", "steps_to_loss01"}
    assert row["acc_long"] == round(direct["acc_long"], 4)
    json.dumps(study)  # JSON-ready, as the recorded table is
    with pytest.raises(ValueError, match="seeds must name at least one seed"):
        extrapolation_study([])


# ---- the device argument ------------------------------------------------------------


def test_device_cpu_gives_the_default_results_exactly():
    kwargs = dict(n_train=8, n_test=12, steps=5, num_test=16)
    model, losses, metrics = extrapolation_run("relative", 2, **kwargs)
    for device in ("cpu", torch.device("cpu")):
        model_d, losses_d, metrics_d = extrapolation_run("relative", 2, device=device, **kwargs)
        assert losses_d == losses
        positions, positions_d = metrics.pop("per_position"), metrics_d.pop("per_position")
        np.testing.assert_array_equal(positions_d, positions)  # NaN where nothing is scored
        assert metrics_d == metrics and all(isinstance(v, list) for v in (losses_d, positions_d))
        metrics["per_position"] = positions
        state, state_d = model.state_dict(), model_d.state_dict()
        assert all(torch.equal(state[k], state_d[k]) for k in state)
        assert {p.device.type for p in model_d.parameters()} == {"cpu"}
    task = ShiftedCopyTask(shift=1, vocab_size=8, seed=0)
    budget = dict(n_train=8, steps=5, d_model=16, num_heads=2)
    _, losses = train_order_model("rope", task, **budget)
    _, losses_d = train_order_model("rope", task, device="cpu", **budget)
    assert losses_d == losses
    study_kwargs = dict(encodings=("rope",), n_train=8, n_test=10, steps=2, num_test=4)
    study = extrapolation_study([0], **study_kwargs)
    study_d = extrapolation_study([0], device="cpu", **study_kwargs)
    assert study_d == study and "device" not in study_d["settings"]  # the machine is no setting


def test_a_bad_device_raises_before_training():
    task = ShiftedCopyTask(shift=1, vocab_size=8, seed=0)
    with pytest.raises(ValueError, match="device must name a torch device.*got 'gpu0'"):
        extrapolation_run("rope", 0, steps=1, num_test=2, device="gpu0")
    with pytest.raises(ValueError, match="device must name a torch device.*got 'cpux'"):
        train_order_model("rope", task, n_train=8, steps=1, device="cpux")
    with pytest.raises(
        TypeError, match="device must be a torch.device, a string or None, got int"
    ):
        extrapolation_study([0], device=0, steps=1, num_test=2)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="this machine has no CUDA GPU"):
            extrapolation_run("rope", 0, steps=1, num_test=2, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_model_trains_on_the_gpu_and_the_metrics_come_back_as_numbers():
    kwargs = dict(n_train=8, n_test=12, steps=20, num_test=16)
    model, losses, metrics = extrapolation_run("rope", 0, device="cuda", **kwargs)
    _, losses_cpu, metrics_cpu = extrapolation_run("rope", 0, **kwargs)
    assert {p.device.type for p in model.parameters()} == {"cuda"}
    assert all(isinstance(v, float) for v in (*losses, metrics["acc_long"]))
    np.testing.assert_allclose(losses, losses_cpu, rtol=1e-3, atol=1e-4)
