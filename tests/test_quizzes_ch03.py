"""Chapter 3's concept checks agree with what the chapter measures (issue 45)."""

import json
from pathlib import Path

QUIZ = Path(__file__).resolve().parents[1] / "lib" / "selfattn" / "quizzes" / "ch03.json"


def _check(check_id: str) -> dict:
    data = json.loads(QUIZ.read_text(encoding="utf-8"))
    return next(c for c in data["checks"] if c["id"] == check_id)


def test_saturation_feedback_does_not_say_little_gradient_reaches_w_q():
    """Section 3.4 measures a gradient on W_Q about 9 times larger without the scale; the
    correct answer's feedback said "so little gradient reaches W_q and W_k"."""
    for question in _check("saturation")["questions"]:
        for answer in question["answers"]:
            if answer.get("correct"):
                en = answer["feedback"]["en"]
                assert "little gradient reaches W_q" not in en
                assert "larger" in en and "W_q" in en, en
                assert "更大" in answer["feedback"]["zh"]
