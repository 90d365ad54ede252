"""Chapter 2's checkers accept the reference solutions, reject plausible mistakes, spot stubs."""

import math

import torch
from selfattn.exercises import ch02


def stub(*args):
    raise NotImplementedError


def test_predicted_score():
    assert ch02.check_predicted_score(4.95).passed
    assert ch02.check_predicted_score(7 / math.sqrt(2)).passed
    assert ch02.check_predicted_score(None).status == "not attempted"
    assert "divide it by sqrt(d_k)" in ch02.check_predicted_score(7).message
    assert "embeddings" in ch02.check_predicted_score(3 / math.sqrt(2)).message
    assert "swapped" in ch02.check_predicted_score(5 / math.sqrt(2)).message
    assert "divides by d_k = 2" in ch02.check_predicted_score(3.5).message
    other = ch02.check_predicted_score(4.0)
    assert other.status == "failed" and "is not right" in other.message
    assert "4.95" not in other.message  # the answer is not shown before it is predicted
    assert "expected a number" in ch02.check_predicted_score("4.95").message
    # the worked example: "it" attends most to "animal"
    q = ch02.WORKED_X @ ch02.WORKED_W_Q
    k = ch02.WORKED_X @ ch02.WORKED_W_K
    weights = torch.softmax(q @ k.T / math.sqrt(2), dim=-1)
    assert int(weights[2].argmax()) == ch02.WORKED_TOKENS.index("animal")


def test_soft_lookup():
    assert ch02.check_soft_lookup(lambda q, k, v, t: torch.softmax(k @ q / t, -1) @ v).passed
    result = ch02.check_soft_lookup(lambda q, k, v, t: torch.softmax(k @ q * t, -1) @ v)
    assert result.status == "failed" and "multiplied by the temperature" in result.message
    naive = lambda q, k, v, t: (torch.exp(k @ q / t) / torch.exp(k @ q / t).sum()) @ v  # noqa: E731
    result = ch02.check_soft_lookup(naive)  # overflows on large scores
    assert result.status == "failed" and "overflows" in result.message
    no_softmax = lambda q, k, v, t: ((k @ q / t) / (k @ q / t).sum()) @ v  # noqa: E731
    assert ch02.check_soft_lookup(no_softmax).status == "failed"
    assert ch02.check_soft_lookup(stub).status == "not attempted"


def test_cross_attention():
    def solution(x, c, wq, wk, wv):
        q, k, v = x @ wq, c @ wk, c @ wv
        return torch.softmax(q @ k.T / math.sqrt(k.shape[1]), -1) @ v

    def self_attention(x, c, wq, wk, wv):  # keys and values from x: self-, not cross-attention
        return solution(x, x, wq, wk, wv)

    def unscaled(x, c, wq, wk, wv):
        return torch.softmax((x @ wq) @ (c @ wk).T, -1) @ (c @ wv)

    def by_d_k(x, c, wq, wk, wv):
        return torch.softmax((x @ wq) @ (c @ wk).T / wk.shape[1], -1) @ (c @ wv)

    assert ch02.check_cross_attention(solution).passed
    assert ch02.check_cross_attention(ch02.cross_attention).passed
    assert ch02.check_cross_attention(self_attention).status == "failed"
    result = ch02.check_cross_attention(ch02.buggy_cross_attention)
    assert result.status == "failed" and "still scaled by sqrt(d)" in result.message
    result = ch02.check_cross_attention(unscaled)
    assert result.status == "failed" and "the scale is gone" in result.message
    result = ch02.check_cross_attention(by_d_k)
    assert result.status == "failed" and "divided by d_k" in result.message
    assert ch02.check_cross_attention(stub).status == "not attempted"


def test_antecedent_share():
    def solution(w, it, ante):
        return w[torch.arange(len(it)), it, ante].mean()

    def transposed(w, it, ante):  # weight from the noun to "it", not from "it" to the noun
        return w[torch.arange(len(it)), ante, it].mean()

    def all_rows(w, it, ante):
        return w[torch.arange(len(it)), :, ante].mean()

    assert ch02.check_antecedent_share(solution).passed
    result = ch02.check_antecedent_share(transposed)
    assert result.status == "failed" and "rows and columns swapped" in result.message
    result = ch02.check_antecedent_share(all_rows)
    assert result.status == "failed" and "over every query" in result.message
    assert ch02.check_antecedent_share(stub).status == "not attempted"


def test_chapter_uses_the_checkers_worked_example():
    """The checker of "predict: a score by hand" and the chapter's worked example agree."""
    import json

    from book import chapter

    path = chapter(2)
    source = "\n".join(
        "".join(c["source"])
        for c in json.loads(path.read_text())["cells"]
        if c["cell_type"] == "code"
    )

    def literal(t):
        return f"torch.tensor({t.tolist()!r})"

    for name, value in (
        ("X_hand", ch02.WORKED_X),
        ("W_Q", ch02.WORKED_W_Q),
        ("W_K", ch02.WORKED_W_K),
        ("W_V", ch02.WORKED_W_V),
    ):
        assert f"{name} = {literal(value)}" in source, name
    assert f"k_tired = {literal(ch02.TIRED_X)} @ W_K" in source
