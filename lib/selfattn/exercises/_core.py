"""The checker machinery shared by every chapter's exercises.

Three promises make a checker hard to fool and impossible to hang:

* :func:`call_answer` hands the reader's function **deep copies** of its arguments, so a
  function that modifies its inputs (zeroing a model's parameters, say) cannot change the
  objects the checker then computes the expected value from;
* it runs the reader's function under a **time limit** (5 seconds by default, changed
  with :func:`set_time_limit` or the ``SELFATTN_CHECK_TIME_LIMIT`` environment
  variable) and reports "took too long" instead of waiting forever;
* an exception raised by the reader's code is reported as the reader's, and an exception
  raised by the checker itself as the checker's fault, never the other way round.

Integers are compared exactly (:func:`expect_int`), floats with a stated tolerance
(:func:`expect_close`), and a "predict, then run" number is read (:func:`read_prediction`)
and judged (:func:`expect_predicted`) the same way in every chapter.

Exercise numbers are derived, never typed: a chapter's module ``selfattn.exercises.chNN``
lists its exercises' labels once, in the chapter's order (``EXERCISES``, the suffixes of the
``ex-chNN-...`` labels of the notebook's exercise directives), and each checker names its
exercise by label; ``exercise_number`` turns the module and the label into the number the
book shows (``"3.2"``).
"""

from __future__ import annotations

import copy
import functools
import linecache
import math
import numbers
import os
import re
import signal
import sys
import sysconfig
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..i18n import _, check_line, progress_line

PASSED, NOT_ATTEMPTED, FAILED = "passed", "not attempted", "failed"


def _limit_from_environment(default: float = 5.0) -> float:
    try:
        value = float(os.environ.get("SELFATTN_CHECK_TIME_LIMIT", default))
    except ValueError:
        return default
    return value if math.isfinite(value) and value > 0 else default


#: Seconds the reader's function may run in one call before the checker gives up on it.
TIME_LIMIT_S: float = _limit_from_environment()


def set_time_limit(seconds: float) -> float:
    """Set how long (in seconds, > 0) one call of the reader's function may take.

    Returns the previous limit, so a test can restore it.
    """
    global TIME_LIMIT_S
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise TypeError(f"seconds must be a number, got {type(seconds).__name__} {seconds!r}")
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"seconds must be a finite number > 0, got {seconds}")
    previous, TIME_LIMIT_S = TIME_LIMIT_S, float(seconds)
    return previous


class Mismatch(AssertionError):
    """Raised inside a checker when the answer is wrong; the message is shown to the reader."""


class NotAttempted(Exception):
    """Raised inside a checker when the answer is still the stub."""


class TookTooLong(Mismatch):
    """Raised by :func:`call_answer` when the reader's function exceeds the time limit."""


class AnswerRaised(Exception):
    """Raised by :func:`call_answer` when the reader's function raised; wraps that error."""

    def __init__(self, error: BaseException):
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


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


def _private_copy(obj):
    """A deep copy the reader's function may modify freely (the original stays pristine)."""
    try:
        return copy.deepcopy(obj)
    except Exception:
        # Non-leaf tensors (part of an autograd graph) refuse deepcopy: a clone keeps
        # the graph and still protects the values. Anything else that cannot be copied
        # (a generator, a lock) is passed as it is.
        if isinstance(obj, torch.Tensor):
            return obj.clone()
        if isinstance(obj, (list, tuple)):
            return type(obj)(_private_copy(o) for o in obj)
        if isinstance(obj, dict):
            return {k: _private_copy(v) for k, v in obj.items()}
        return obj


class _Calls(threading.local):
    # How many answers the running checker has received: tells a crash of the checker
    # before any answer (its own bug) from one while reading the reader's result.
    answered = 0


_calls = _Calls()


class _Alarm(BaseException):
    # A BaseException, so that a reader's ``except Exception`` cannot swallow the timeout.
    pass


def _run_with_time_limit(fn: Callable, limit: float):
    """Run ``fn()``; raise :class:`TookTooLong` when it takes more than ``limit`` seconds.

    In the main thread on Linux and macOS (a Jupyter kernel runs cells there) a SIGALRM
    timer interrupts the function. Elsewhere (another thread, Windows) the function runs
    in a daemon thread and the checker stops waiting for it; Python cannot kill a thread,
    so such a function may keep running in the background.
    """
    message = _(
        "your function took too long (more than {limit} s); does it loop forever? "
        "(the limit is selfattn.exercises.set_time_limit)",
        limit=f"{limit:g}",
    )
    use_signal = (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0  # nobody else's timer is running
    )
    if use_signal:

        def on_alarm(signum, frame):
            raise _Alarm()

        previous = signal.signal(signal.SIGALRM, on_alarm)
        try:
            signal.setitimer(signal.ITIMER_REAL, limit)
            try:
                return fn()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Alarm:
            raise TookTooLong(message) from None
        finally:
            signal.signal(signal.SIGALRM, previous)
    box: dict = {}
    grad = torch.is_grad_enabled()  # grad mode is per thread: carry the caller's over

    def target() -> None:
        try:
            with torch.set_grad_enabled(grad):
                box["out"] = fn()
        except BaseException as err:  # handed back to the checker's thread below
            box["err"] = err

    worker = threading.Thread(target=target, daemon=True, name="selfattn-answer")
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        raise TookTooLong(message)
    if "err" in box:
        raise box["err"]
    return box["out"]


def call_answer(answer: Callable, *args, **kwargs):
    """Call the reader's function on deep copies of the arguments, under the time limit.

    A stub (``NotImplementedError`` raised or ``None`` returned) raises
    :class:`NotAttempted`; an error raised by the reader's code comes back as
    :class:`AnswerRaised` (reported as the reader's, not the checker's, fault); running
    longer than the time limit (:func:`set_time_limit`) raises :class:`TookTooLong`.
    """
    if not callable(answer):
        raise Mismatch(
            _("expected a function, got {what}", what=f"{type(answer).__name__} {answer!r:.60}")
        )
    args, kwargs = _private_copy(args), _private_copy(kwargs)

    def run():
        try:
            return answer(*args, **kwargs)
        except NotImplementedError:
            raise NotAttempted() from None
        except (KeyboardInterrupt, _Alarm):
            raise
        except Exception as err:
            raise AnswerRaised(err) from err

    out = _run_with_time_limit(run, TIME_LIMIT_S)
    if out is None:
        raise NotAttempted()
    _calls.answered += 1
    return out


def _as_array(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=float)


def expect_shape(got, expected_shape, *, case: str) -> None:
    """Raise :class:`Mismatch` naming ``case`` unless ``got`` (tensor, array) has that shape."""
    shape = tuple(got.shape) if hasattr(got, "shape") else np.shape(got)
    if tuple(shape) != tuple(expected_shape):
        raise Mismatch(
            _(
                "case {case}: expected shape {expected}, got {got}",
                case=case,
                expected=tuple(expected_shape),
                got=tuple(shape),
            )
        )


def expect_int(got, expected: int, *, case: str) -> None:
    """An exact integer check: ``got`` must be an integer (int, NumPy or 0-d tensor integer,
    or a float with no fractional part) equal to ``expected``; ``expected + 0.9`` fails."""
    value = got
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise Mismatch(
                _(
                    "case {case}: expected one integer, got a tensor {shape}",
                    case=case,
                    shape=tuple(value.shape),
                )
            )
        value = value.item()
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise Mismatch(
            _(
                "case {case}: expected the integer {expected}, got {got}",
                case=case,
                expected=expected,
                got=f"{value!r:.60}",
            )
        )
    if isinstance(value, numbers.Integral):
        exact = int(value) == expected
    else:
        exact = math.isfinite(value) and float(value).is_integer() and int(value) == expected
    if not exact:
        raise Mismatch(
            _(
                "case {case}: expected {expected}, got {got}",
                case=case,
                expected=expected,
                got=repr(value),
            )
        )


def name_mistake(got, mistakes, *, case: str, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """Raise :class:`Mismatch` saying what went wrong if ``got`` equals a known wrong answer.

    ``mistakes`` maps a diagnosis ("your weights sum to 1 over the queries, not the keys") to
    the value that mistake produces on the same inputs. Nothing happens when ``got`` matches
    none of them (or is not array-like), so the caller goes on to its plain comparison.
    """
    try:
        g = _as_array(got)
    except Exception:
        return
    for diagnosis, wrong in mistakes.items():
        w = _as_array(wrong)
        if w.shape == g.shape and np.allclose(g, w, atol=atol, rtol=rtol, equal_nan=True):
            raise Mismatch(_("case {case}: {diagnosis}", case=case, diagnosis=diagnosis))


def expect_close(
    got,
    expected,
    *,
    case: str,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    mistakes: dict | None = None,
) -> None:
    """Shape, NaN and value check with a message naming the case and the largest difference.

    ``mistakes`` (optional) maps a diagnosis to the value a named mistake gives on the same
    inputs; a wrong answer equal to one of them is reported by its diagnosis (see
    :func:`name_mistake`) instead of by its largest difference. The right answer is checked
    first, so a mistake that happens to agree with it on this case is never blamed.
    """
    try:
        g = _as_array(got)
    except Exception:
        raise Mismatch(
            _(
                "case {case}: expected a tensor or array, got {what}",
                case=case,
                what=f"{type(got).__name__} {got!r:.60}",
            )
        ) from None
    e = _as_array(expected)
    if mistakes and not (g.shape == e.shape and np.allclose(g, e, atol=atol, rtol=rtol)):
        name_mistake(g, mistakes, case=case, atol=atol, rtol=rtol)
    if g.shape != e.shape:
        raise Mismatch(
            _(
                "case {case}: expected shape {expected}, got {got}",
                case=case,
                expected=e.shape,
                got=g.shape,
            )
        )
    if np.isnan(g).any() and not np.isnan(e).any():
        raise Mismatch(_("case {case}: your answer contains NaN, expected none", case=case))
    if not np.allclose(g, e, atol=atol, rtol=rtol, equal_nan=True):
        diff = np.abs(g - e)
        idx = np.unravel_index(np.nanargmax(diff), diff.shape) if diff.size else ()
        raise Mismatch(
            _(
                "case {case}: largest difference {diff} at index {index} "
                "(expected {expected}, got {got}; tolerance atol={atol}, rtol={rtol})",
                case=case,
                diff=f"{float(np.nanmax(diff)):.3g}",
                index=tuple(int(i) for i in idx),
                expected=f"{e[idx]:.6g}",
                got=f"{g[idx]:.6g}",
                atol=f"{atol:g}",
                rtol=f"{rtol:g}",
            )
        )


def expect_true(condition: bool, message: str) -> None:
    """Raise :class:`Mismatch` with ``message`` (naming the case) unless ``condition`` holds."""
    if not condition:
        raise Mismatch(message)


def read_prediction(prediction, what: str | None = None) -> float:
    """The number a "predict, then run" exercise's reader wrote down.

    ``prediction`` is the number itself or a function returning it (the checkers' usual
    form, called through :func:`call_answer`); a 0-d tensor or a one-element array is read as
    the number it holds. The stub's ``None`` or ``...`` raises :class:`NotAttempted`; anything
    that is not a real number (a bool, a string) raises :class:`Mismatch` starting with
    ``what`` (by default "your prediction", in the current language).
    """
    what = _("your prediction") if what is None else what
    value = call_answer(prediction) if callable(prediction) else prediction
    if value is None or value is ...:
        raise NotAttempted()
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    elif isinstance(value, np.ndarray) and value.size == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise Mismatch(
            _(
                "{what}: write a number, got {got}",
                what=what,
                got=f"{type(value).__name__} {value!r:.60}",
            )
        )
    return value


def _not_it(value, case: str) -> Mismatch:
    """The message for a wrong prediction that no named mistake explains: it never shows the
    right value (the reader sees it by running the next cell, after predicting)."""
    return Mismatch(
        _(
            "case {case}: your prediction {value} is not right, and it is none of the "
            "mistakes this checker knows; go over the reasoning again before running the "
            "next cell",
            case=case,
            value=repr(value),
        )
    )


def expect_predicted(prediction, variants: dict, *, case: str, rtol: float = 0.0) -> None:
    """Check a predicted count (read by :func:`read_prediction`) against the right one.

    ``variants`` maps ``"right"`` to the right integer and each diagnosis ("that counts the
    patches alone") to the number that mistake gives; a prediction equal to one of them
    (within ``rtol``) is reported by its diagnosis, any other wrong one as wrong, without the
    right value (the reader predicts before seeing it).
    """
    value = read_prediction(prediction)
    mistakes = dict(variants)
    right = mistakes.pop("right")
    if value != right:
        name_mistake(value, mistakes, case=case, atol=0, rtol=rtol)
    if not (math.isfinite(value) and float(value).is_integer()):
        raise Mismatch(
            _(
                "case {case}: your prediction {value} is not a whole number",
                case=case,
                value=repr(value),
            )
        )
    if int(value) != right:
        raise _not_it(value, case)


def expect_predicted_close(
    prediction, right: float, mistakes: dict, *, case: str, atol: float
) -> None:
    """Check a predicted real number (read by :func:`read_prediction`) to ``atol``.

    ``mistakes`` maps each diagnosis to the number that mistake gives; a prediction within
    ``atol`` of one is reported by its diagnosis, any other wrong one as wrong, without the
    right value.
    """
    value = read_prediction(prediction)
    if math.isfinite(value) and abs(value - right) <= atol:
        return
    name_mistake(value, mistakes, case=case, atol=atol, rtol=0)
    raise _not_it(value, case)


# A chapter's module, whose checkers are declared by label: selfattn.exercises.ch03 -> 3.
_CHAPTER_MODULE = re.compile(r"^selfattn\.exercises\.ch(\d\d)$")
# An explicit number, for a checker outside a chapter's module (a test, a reader's own).
_NUMBER = re.compile(r"^\d+\.\d+$")


def exercise_number(module: str, exercise: str) -> str:
    """The number the book gives an exercise, ``"<chapter>.<position>"`` (``"3.2"``).

    ``module`` is a chapter's module, ``selfattn.exercises.chNN`` (the chapter is ``NN``), and
    ``exercise`` the suffix of the exercise's label (``"softmax"`` for ``ex-ch03-softmax``).
    The position counts from 1 in the module's ``EXERCISES``, the labels in the chapter's
    order, as Sphinx numbers them; a checker that no exercise of the chapter uses is listed in
    ``EXTRA_EXERCISES`` and numbered after them. Outside a chapter's module (a test), the
    ``exercise`` given is a number and is returned as it is.

    Raises:
        ValueError: ``exercise`` is not a label of the chapter (a typing mistake in a
            checker's declaration), or a chapter's module has no ``EXERCISES`` yet.
    """
    found = _CHAPTER_MODULE.match(module)
    if found is None:
        if not _NUMBER.match(exercise):
            raise ValueError(
                f"outside a chapter's module (got {module!r}) a checker is declared by its "
                f"number, such as '0.1'; got {exercise!r}"
            )
        return exercise
    labels = getattr(sys.modules.get(module), "EXERCISES", None)
    if labels is None:
        raise ValueError(
            f"{module} declares no EXERCISES before its first checker: expected a tuple of "
            "the chapter's exercise labels, in the chapter's order"
        )
    order = (*labels, *getattr(sys.modules[module], "EXTRA_EXERCISES", ()))
    if exercise not in order:
        raise ValueError(
            f"{module}: unknown exercise label {exercise!r}; expected one of {order} "
            f"(ex-ch{found.group(1)}-<label> in the chapter)"
        )
    return f"{int(found.group(1))}.{order.index(exercise) + 1}"


def checker(exercise: str, title: str):
    """Turn ``check(answer)`` (raising Mismatch, NotAttempted) into a checker printing one line.

    ``exercise`` names the exercise: in a chapter's module its label (``"softmax"``), which
    ``exercise_number`` turns into the number the book shows, so the line reads
    ``Exercise 3.2 (stable softmax): passed``; elsewhere its number (``"0.1"``). The checker
    keeps both as its ``exercise`` and ``number`` attributes.

    Raises:
        ValueError: at import, when ``exercise`` is not one of the chapter's labels (see
            ``exercise_number``).
    """

    def decorate(check: Callable) -> Callable[..., CheckResult]:
        number = exercise_number(check.__module__, exercise)
        _TITLES.setdefault(check.__module__, {}).setdefault(exercise, title)
        label = f"Exercise {number} ({title})"

        def line(icon: str, message: str) -> str:  # in the language of the moment
            return check_line(icon, number, title, message)

        @functools.wraps(check)
        def run(answer, *args, **kwargs) -> CheckResult:
            _calls.answered = 0
            waiting = (label, NOT_ATTEMPTED)
            if answer is None:
                result = CheckResult(*waiting, line("⏳", _("not attempted yet")))
            else:
                try:
                    check(answer, *args, **kwargs)
                except NotAttempted:
                    result = CheckResult(*waiting, line("⏳", _("not attempted yet")))
                except Mismatch as err:
                    result = CheckResult(label, FAILED, line("❌", str(err)))
                except AnswerRaised as err:  # the reader's code crashed: say so, never raise
                    result = CheckResult(label, FAILED, line("❌", describe_error(err.error)))
                except Exception as err:  # the checker's own failure: never blame the reader
                    what = f"{type(err).__name__}: {err}"
                    if _calls.answered:
                        message = _(
                            "the checker failed while reading your function's result ({what}); "
                            "check the type and shape it returns (the checker should have "
                            "said this more clearly: this part is the checker's fault)",
                            what=what,
                        )
                    else:
                        message = _(
                            "the checker itself failed ({what}); this is a bug in the "
                            "checker, not in your answer",
                            what=what,
                        )
                    result = CheckResult(label, FAILED, line("❌", message))
                else:
                    result = CheckResult(label, PASSED, line("✅", _("passed")))
            print(result.message)
            if not _from_solution(answer, sys._getframe(1)):
                _RESULTS.setdefault(check.__module__, {})[exercise] = result.status
            return result

        # What the tests compare with the chapter: the label as declared, and its number.
        run.exercise, run.number = exercise, number
        return run

    return decorate


# ----------------------------------------------------------------------------- the reader's line


def _library_dirs() -> tuple[str, ...]:
    """Folders whose frames are not the reader's: this package, the stdlib, site-packages."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # selfattn/
    dirs = {here}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(os.path.abspath(path))
    return tuple(d.rstrip(os.sep) + os.sep for d in dirs)


def reader_frame(error: BaseException) -> traceback.FrameSummary | None:
    """The last frame of the reader's own code in ``error``'s traceback, or None.

    The reader's code is every frame outside this package, the standard library and the
    installed packages (torch, numpy): a notebook cell, or a file of the reader's. When the
    error is raised inside torch, say, the frame named is the reader's line that called it.
    """
    library = _library_dirs()
    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if not os.path.abspath(f.filename).startswith(library)]
    return mine[-1] if mine else None


def _where(frame: traceback.FrameSummary) -> str:
    name = os.path.basename(frame.filename)
    cell = "ipykernel" in frame.filename or frame.filename.startswith("<ipython-input")
    if cell:
        place = _("line {lineno} of your cell", lineno=frame.lineno)
    else:
        place = _("line {lineno} of {file}", lineno=frame.lineno, file=name)
    if frame.name and frame.name != "<module>":
        place += _(", in {function}", function=frame.name)
    line = (frame.line or "").strip()
    if len(line) > 60:
        line = line[:57] + "..."
    return f"{place}: {line}" if line else place


def describe_error(error: BaseException) -> str:
    """``your code raised ValueError: ... (at line 3 of your cell, in f: return x @ y)``."""
    text = _("your code raised {error}", error=f"{type(error).__name__}: {error}")
    frame = reader_frame(error)
    if frame is None:
        return text
    return text + "\n    " + _("at {place}", place=_where(frame))


# ----------------------------------------------------------------------------- progress

#: ``{module: {label: status}}``: the last result of each exercise's checker in this kernel,
#: for the reader's own answers (checks of a solution cell are not counted).
_RESULTS: dict[str, dict[str, str]] = {}
#: ``{module: {label: title}}``, as the checkers declare them.
_TITLES: dict[str, dict[str, str]] = {}
SOLUTION_MARK = "# @title Solution"


def _from_solution(answer, caller) -> bool:
    """Whether a check is of a solution: a ``..._solution`` function, or called from a solution
    cell (its first line is ``# @title Solution``, as every solution cell's is)."""
    if getattr(answer, "__name__", "").endswith("_solution"):
        return True
    try:
        lines = linecache.getlines(caller.f_code.co_filename)
    except Exception:
        return False
    return bool(lines) and lines[0].strip() == SOLUTION_MARK


_ICONS = {PASSED: "✅", FAILED: "❌", NOT_ATTEMPTED: "⏳"}


@dataclass
class Progress:
    """What :func:`progress` printed: ``{number: status}`` in the chapter's order."""

    chapter: int
    statuses: dict

    def _ipython_display_(self) -> None:
        pass


def progress(chapter: int, *, module=None):
    """Print the chapter's exercises with ✅ / ❌ / ⏳ from the checks run in this kernel.

    ✅ passed, ❌ the last check failed, ⏳ not attempted yet (or not checked yet). Checks of
    the book's solutions do not count: only the reader's own answers do.
    """
    import importlib

    if module is None:
        module = importlib.import_module(f"selfattn.exercises.ch{int(chapter):02d}")
    name = module.__name__
    labels = tuple(getattr(module, "EXERCISES", ()))
    results = _RESULTS.get(name, {})
    titles = _TITLES.get(name, {})
    head = _("Chapter {chapter}: your exercises, as checked in this kernel", chapter=int(chapter))
    statuses, lines = {}, [head]
    for label in labels:
        number = exercise_number(name, label)
        status = results.get(label, NOT_ATTEMPTED)
        statuses[number] = status
        title = titles.get(label, label)
        word = {PASSED: _("passed"), FAILED: _("failed"), NOT_ATTEMPTED: _("not attempted yet")}
        lines.append(progress_line(_ICONS[status], number, title, word[status]))
    done = sum(s == PASSED for s in statuses.values())
    lines.append(_("{done} of {total} passed", done=done, total=len(labels)))
    print("\n".join(lines))
    return Progress(int(chapter), statuses)
