"""The checker machinery shared by every chapter's exercises."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

PASSED, NOT_ATTEMPTED, FAILED = "passed", "not attempted", "failed"


class Mismatch(AssertionError):
    """Raised inside a checker when the answer is wrong; the message is shown to the reader."""


class NotAttempted(Exception):
    """Raised inside a checker when the answer is still the stub."""


@dataclass
class CheckResult:
    """What a checker concluded. ``bool(result)`` is true only when it passed."""

    exercise: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def __bool__(self) -> bool:
        return self.passed

    def _ipython_display_(self) -> None:
        # The checker already printed its one line; showing the result again
        # (when the check is a cell's last expression) would print it twice.
        pass


def call_answer(answer: Callable, *args, **kwargs):
    """Call the reader's function; a stub (NotImplementedError or ``None`` returned) means not attempted."""
    try:
        out = answer(*args, **kwargs)
    except NotImplementedError:
        raise NotAttempted() from None
    if out is None:
        raise NotAttempted()
    return out


def _as_array(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=float)


def expect_shape(got, expected_shape, *, case: str) -> None:
    """Raise :class:`Mismatch` naming ``case`` unless ``got`` (tensor or array) has ``expected_shape``."""
    shape = tuple(got.shape) if hasattr(got, "shape") else np.shape(got)
    if tuple(shape) != tuple(expected_shape):
        raise Mismatch(f"case {case}: expected shape {tuple(expected_shape)}, got {tuple(shape)}")


def expect_close(got, expected, *, case: str, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """Shape, NaN and value check with a message naming the case and the largest difference."""
    g, e = _as_array(got), _as_array(expected)
    if g.shape != e.shape:
        raise Mismatch(f"case {case}: expected shape {e.shape}, got {g.shape}")
    if np.isnan(g).any() and not np.isnan(e).any():
        raise Mismatch(f"case {case}: your answer contains NaN, expected none")
    if not np.allclose(g, e, atol=atol, rtol=rtol, equal_nan=True):
        diff = np.abs(g - e)
        idx = np.unravel_index(np.nanargmax(diff), diff.shape) if diff.size else ()
        raise Mismatch(
            f"case {case}: largest difference {float(np.nanmax(diff)):.3g} at index {tuple(int(i) for i in idx)} "
            f"(expected {e[idx]:.6g}, got {g[idx]:.6g}; tolerance atol={atol:g}, rtol={rtol:g})"
        )


def expect_true(condition: bool, message: str) -> None:
    """Raise :class:`Mismatch` with ``message`` (which should name the case) unless ``condition`` holds."""
    if not condition:
        raise Mismatch(message)


def checker(number: str, title: str):
    """Turn ``check(answer)`` (which raises Mismatch / NotAttempted) into a checker that prints one line."""

    def decorate(check: Callable) -> Callable[..., CheckResult]:
        label = f"Exercise {number} ({title})"

        @functools.wraps(check)
        def run(answer, *args, **kwargs) -> CheckResult:
            if answer is None:
                result = CheckResult(label, NOT_ATTEMPTED, f"⏳ {label}: not attempted yet")
            else:
                try:
                    check(answer, *args, **kwargs)
                except NotAttempted:
                    result = CheckResult(label, NOT_ATTEMPTED, f"⏳ {label}: not attempted yet")
                except Mismatch as err:
                    result = CheckResult(label, FAILED, f"❌ {label}: {err}")
                except Exception as err:  # the reader's code crashed: say where, never raise
                    result = CheckResult(
                        label, FAILED, f"❌ {label}: your code raised {type(err).__name__}: {err}"
                    )
                else:
                    result = CheckResult(label, PASSED, f"✅ {label}: passed")
            print(result.message)
            return result

        return run

    return decorate
