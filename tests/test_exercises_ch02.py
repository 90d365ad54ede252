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
    assert "scaling step is missing" in ch02.check_predicted_score(7).message
    assert "sqrt" not in ch02.check_predicted_score(7).message  # names the slip, not the fix
    assert "embeddings" in ch02.check_predicted_score(3 / math.sqrt(2)).message
    assert "swapped" in ch02.check_predicted_score(5 / math.sqrt(2)).message
    assert "divides the raw score by d_k = 2" in ch02.check_predicted_score(3.5).message
    other = ch02.check_predicted_score(4.0)
    assert other.status == "failed" and "is not right" in other.message
    assert "4.95" not in other.message  # the answer is not shown before it is predicted
    assert "write a number" in ch02.check_predicted_score("4.95").message
    # a 0-d tensor is a number here, as in chapter 3's checker (issue 45)
    assert ch02.check_predicted_score(torch.tensor(7 / math.sqrt(2))).passed
    assert "scaling step" in ch02.check_predicted_score(torch.tensor(7.0)).message
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
    assert "sqrt(d_k)" not in result.message  # the mistake, not the change
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

    def fancy(w, it, ante):  # a slice and two index tensors: a (B, B) table, sentences mixed
        return w[:, it, ante].mean()

    def fancy_rows(w, it, ante):
        return w[torch.arange(len(it)), it][:, ante].mean()

    for slip in (fancy, fancy_rows):
        result = ch02.check_antecedent_share(slip)
        assert result.status == "failed" and "mixes sentences" in result.message, slip
    assert ch02.check_antecedent_share(stub).status == "not attempted"


def test_chapter_uses_the_checkers_worked_example():
    """The checker of "predict: a score by hand" and the chapter's worked example agree."""
    import json

    from tools.book import chapter

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


def test_why_three_does_not_claim_a_token_always_scores_itself_highest():
    """Issue 45: the concept check "why-three" said X Xᵀ "scores each token highest against
    itself"; a longer token can outscore a token's own score (x_i . x_j > |x_i|^2)."""
    from selfattn import quizzes

    x = torch.tensor([[1.0, 0.0], [3.0, 1.0]])
    scores = x @ x.T
    assert scores[0, 1] > scores[0, 0]  # token 0 scores token 1 above itself
    right = next(
        a for a in quizzes.check(2, "why-three")["questions"][0]["answers"] if a["correct"]
    )
    assert "highest against itself" not in right["answer"]["en"]
    assert "often" in right["answer"]["en"] and "往往" in right["answer"]["zh"]
