"""A concept check's texts reach the page as HTML (jupyterquiz sets them with innerHTML), so a
word in angle brackets, such as a ``<mask>`` token, is taken for a tag and vanishes from the
question or answer the reader sees (and the browser test cannot find the button)."""

import json
import re
from pathlib import Path

import pytest

QUIZZES = sorted((Path(__file__).resolve().parent.parent / "lib/selfattn/quizzes").glob("*.json"))
TAG = re.compile(r"<\s*/?[A-Za-z][^<>]*>")


def _texts(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _texts(value)
    elif isinstance(node, list):
        for value in node:
            yield from _texts(value)


@pytest.mark.parametrize("path", QUIZZES, ids=lambda p: p.stem)
def test_no_text_looks_like_an_html_tag(path):
    found = [t for t in _texts(json.loads(path.read_text(encoding="utf-8"))) if TAG.search(t)]
    assert not found, f"{path.name}: text an HTML renderer would take for a tag: {found[:3]}"


def test_the_pattern_catches_a_token_in_angle_brackets():
    assert TAG.search("80% become <mask>, 10% a random word")
    assert not TAG.search("a temperature T > 1, or T < 1")
