"""Chapter 5's checkers accept the reference solutions, reject plausible wrong answers,
and see stubs."""

from selfattn.exercises.ch05 import (
    check_cache_bytes,
    check_cross_projections,
    check_merge_heads,
    check_param_count,
    check_split_heads,
)


def stub(*args):
    raise NotImplementedError


def test_split_heads():
    def right(x, h):
        B, n, d = x.shape
        return x.reshape(B, n, h, d // h).transpose(1, 2)

    def no_transpose(x, h):  # right shape, wrong contents
        B, n, d = x.shape
        return x.reshape(B, h, n, d // h)

    def strided(x, h):  # head j takes every h-th feature
        B, n, d = x.shape
        return x.reshape(B, n, d // h, h).permute(0, 3, 1, 2)

    assert check_split_heads(right).passed
    assert not check_split_heads(no_transpose)
    assert not check_split_heads(strided)
    assert check_split_heads(stub).status == "not attempted"


def test_merge_heads():
    def right(x):
        B, h, n, dh = x.shape
        return x.transpose(1, 2).reshape(B, n, h * dh)

    def no_transpose(x):
        B, h, n, dh = x.shape
        return x.reshape(B, n, h * dh)

    def average(x):
        return x.mean(1)

    assert check_merge_heads(right).passed
    assert not check_merge_heads(no_transpose)
    assert not check_merge_heads(average)
    assert check_merge_heads(stub).status == "not attempted"


def test_cross_projections():
    def right(x, ctx, w, b):
        d = x.shape[-1]
        return (
            x @ w[:d].T + b[:d],
            ctx @ w[d : 2 * d].T + b[d : 2 * d],
            ctx @ w[2 * d :].T + b[2 * d :],
        )

    def self_attention(x, ctx, w, b):  # keys and values from x
        return (x @ w.T + b).chunk(3, dim=-1)

    def no_transpose(x, ctx, w, b):
        d = x.shape[-1]
        return x @ w[:d] + b[:d], ctx @ w[d : 2 * d] + b[d : 2 * d], ctx @ w[2 * d :] + b[2 * d :]

    def k_v_swapped(x, ctx, w, b):
        q, k, v = right(x, ctx, w, b)
        return q, v, k

    assert check_cross_projections(right).passed
    for wrong in (self_attention, no_transpose, k_v_swapped):
        assert not check_cross_projections(wrong), wrong.__name__
    assert check_cross_projections(stub).status == "not attempted"


def test_cache_bytes():
    def right(layers, heads, d_head, n, nbytes, batch):
        return 2 * layers * heads * d_head * n * nbytes * batch

    def keys_only(layers, heads, d_head, n, nbytes, batch):
        return layers * heads * d_head * n * nbytes * batch

    def no_batch(layers, heads, d_head, n, nbytes, batch):
        return 2 * layers * heads * d_head * n * nbytes

    assert check_cache_bytes(right).passed
    assert not check_cache_bytes(keys_only)
    assert not check_cache_bytes(no_batch)
    assert check_cache_bytes(stub).status == "not attempted"


def test_param_count():
    def right(d, h, bias):
        return 4 * d * d + (4 * d if bias else 0)

    def per_head(d, h, bias):  # counts d x d projections per head
        return 4 * h * d * d + (4 * d if bias else 0)

    def no_output_projection(d, h, bias):
        return 3 * d * d + (3 * d if bias else 0)

    assert check_param_count(right).passed
    assert not check_param_count(per_head)
    assert not check_param_count(no_output_projection)
    assert check_param_count(stub).status == "not attempted"
