"""A small training loop for the book's tiny models."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator

import torch

from ._checks import require_bool, require_int, require_module, require_number
from .runtime import show_progress

__all__ = ["train_loop"]


@contextlib.contextmanager
def _mode(model: torch.nn.Module, training: bool) -> Iterator[torch.nn.Module]:
    """``model`` in train (or eval) mode inside the block; every submodule's own mode after.

    The one way a helper switches a caller's model: ``token_accuracy(model.train(), ...)``
    leaves the model training, as it found it.
    """
    modes = [(m, m.training) for m in model.modules()]
    model.train(training)
    try:
        yield model
    finally:
        for m, was_training in modes:
            m.training = was_training


def _own_rng() -> contextlib.AbstractContextManager:
    """The global random state (CPU and every CUDA device) restored after the block: a helper
    that seeds its own run (``torch.manual_seed(seed)`` inside) leaves the caller's stream as
    it found it."""
    return torch.random.fork_rng(devices=list(range(torch.cuda.device_count())))


def _evaluates(fn: Callable) -> Callable:
    """Decorate a helper whose first argument is a model it runs in eval mode: the model's
    modes are restored on return (:func:`_mode`)."""

    @functools.wraps(fn)
    def wrapper(model, *args, **kwargs):
        require_module(model)
        with _mode(model, False):
            return fn(model, *args, **kwargs)

    return wrapper


def _keeps_rng(fn: Callable) -> Callable:
    """Decorate a helper that seeds its own run: it runs inside :func:`_own_rng`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _own_rng():
            return fn(*args, **kwargs)

    return wrapper


def train_loop(
    model: torch.nn.Module,
    batches: Callable[[int], Iterable] | Iterable,
    loss_fn: Callable,
    *,
    steps: int,
    lr: float = 1e-3,
    optimizer: torch.optim.Optimizer | None = None,
    clip: float | None = 1.0,
    progress: bool | None = None,
    desc: str = "training",
) -> list[float]:
    """Train ``model`` for ``steps`` steps and return the loss at every step.

    Args:
        model: the module to train (put it on its device first).
        batches: either a function ``step -> batch`` or an iterable of batches.
        loss_fn: ``(model, batch) -> scalar loss tensor``.
        steps: number of optimisation steps.
        lr: learning rate of the default Adam optimiser.
        optimizer: use this optimiser instead of Adam.
        clip: gradient-norm clipping (``None`` to disable).
        progress: draw a progress bar; by default only when ``SELFATTN_PROGRESS`` is not
            ``"0"`` (``make execute`` and nbval set it to 0, so committed outputs and
            stderr stay clean).
        desc: label of the progress bar.

    Returns:
        The list of per-step training losses (floats). The model trains in train mode and
        is left in the mode it was in (each submodule's own).
    """
    lr = require_number(lr, "lr", positive=True)
    if progress is not None:
        progress = require_bool(progress, "progress")
    require_module(model)
    steps = require_int(steps, "steps", 1)
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable (model, batch) -> loss, got {loss_fn!r:.60}")
    if clip is not None:
        clip = require_number(clip, "clip", positive=True)
    optimizer = optimizer or torch.optim.Adam(model.parameters(), lr=lr)
    progress = show_progress() if progress is None else progress
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=steps, desc=desc, leave=False)
    get_batch = batches if callable(batches) else iter(batches).__next__
    history: list[float] = []
    with _mode(model, True):
        for step in range(steps):
            batch = get_batch(step) if callable(batches) else get_batch()
            loss = loss_fn(model, batch)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss became {loss.item()} at step {step}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            history.append(loss.item())
            if bar is not None:
                bar.update(1)
                if step % 10 == 0:
                    bar.set_postfix(loss=f"{history[-1]:.4f}")
    if bar is not None:
        bar.close()
    return history
