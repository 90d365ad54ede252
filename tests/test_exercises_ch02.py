"""Chapter 2's checkers accept the reference solutions, reject plausible mistakes, spot stubs."""

import math

import torch
from selfattn.exercises import ch02


def stub(*args):
    raise NotImplementedError


def test_hard_lookup():
    assert ch02.check_hard_lookup(lambda q, k, v: v[(k @ q).argmax()]).passed
    assert ch02.check_hard_lookup(lambda q, k, v: v[(k @ q).argmin()]).status == "failed"
    assert (
        ch02.check_hard_lookup(lambda q, k, v: k[(k @ q).argmax()]).status == "failed"
    )  # returned the key
    # nearest key by distance is not the largest dot product when key norms differ
    assert (
        ch02.check_hard_lookup(lambda q, k, v: v[(k - q).norm(dim=-1).argmin()]).status == "failed"
    )
    assert ch02.check_hard_lookup(stub).status == "not attempted"


def test_soft_lookup():
    assert ch02.check_soft_lookup(lambda q, k, v, t: torch.softmax(k @ q / t, -1) @ v).passed
    assert (
        ch02.check_soft_lookup(lambda q, k, v, t: torch.softmax(k @ q * t, -1) @ v).status
        == "failed"
    )
    naive = lambda q, k, v, t: (torch.exp(k @ q / t) / torch.exp(k @ q / t).sum()) @ v  # noqa: E731
    assert ch02.check_soft_lookup(naive).status == "failed"  # overflows on large scores
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

    assert ch02.check_cross_attention(solution).passed
    assert ch02.check_cross_attention(self_attention).status == "failed"
    assert ch02.check_cross_attention(unscaled).status == "failed"
    assert ch02.check_cross_attention(stub).status == "not attempted"


def test_antecedent_share():
    def solution(w, it, ante):
        return w[torch.arange(len(it)), it, ante].mean()

    def transposed(w, it, ante):  # weight from the noun to "it", not from "it" to the noun
        return w[torch.arange(len(it)), ante, it].mean()

    def all_rows(w, it, ante):
        return w[torch.arange(len(it)), :, ante].mean()

    assert ch02.check_antecedent_share(solution).passed
    assert ch02.check_antecedent_share(transposed).status == "failed"
    assert ch02.check_antecedent_share(all_rows).status == "failed"
    assert ch02.check_antecedent_share(stub).status == "not attempted"
