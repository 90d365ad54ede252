"""Self-checking exercises: one checker per exercise, one module per chapter.

A checker takes the reader's function or value, runs it on several cases
(edge cases included) and prints exactly one line:

* ``✅ Exercise 3.1 (...): passed`` (chapter 3's first exercise, for example)
* ``⏳ Exercise 3.1 (...): not attempted yet``, when the answer is ``None`` or the
  stub raises ``NotImplementedError`` / returns ``None``;
* ``❌ Exercise 3.1 (...): <which case, expected vs got>``.

The reader's function gets deep copies of its arguments and runs under a time limit
(:func:`set_time_limit`); a crash of the checker itself is reported as the checker's.
Checkers never raise, so a notebook whose exercises are untouched still runs
clean. They return a :class:`CheckResult` (used by the tests) that displays
nothing by itself, so the line is not printed twice.

Writing a checker: a chapter's module ``selfattn.exercises.chNN`` lists the labels of its
exercises once, in the chapter's order (``ex-ch03-softmax`` is ``"softmax"``), and each
checker names its exercise by label; the number printed (``3.2`` in this example) is the
chapter's number and the label's place in ``EXERCISES``, as the book numbers the exercise::

    EXERCISES = ("five-steps", "softmax", "scale-bug", "predict-variance", "temperature")


    @checker("softmax", "stable softmax")
    def check_softmax(answer):
        for name, x in cases:
            expect_close(answer(x.clone()), reference(x), case=name)

``progress(3)`` (the last code cell of each chapter) lists the chapter's exercises with
✅ / ❌ / ⏳ from the checks of the reader's answers run in this kernel.

Outside a chapter's module (a test, say) a checker is declared by its number instead,
``@checker("0.1", "double it")``.
"""

from ._core import (
    AnswerRaised,
    CheckResult,
    Mismatch,
    NotAttempted,
    TookTooLong,
    call_answer,
    checker,
    expect_close,
    expect_int,
    expect_shape,
    expect_true,
    name_mistake,
    progress,
    set_time_limit,
)

__all__ = [
    "AnswerRaised",
    "CheckResult",
    "Mismatch",
    "NotAttempted",
    "TookTooLong",
    "call_answer",
    "checker",
    "expect_close",
    "expect_int",
    "expect_shape",
    "expect_true",
    "name_mistake",
    "progress",
    "set_time_limit",
]
