"""Chapter 5's checkers accept the reference solutions, reject plausible wrong answers,
and see stubs."""

from selfattn.exercises.ch05 import (
    check_cache_bytes,
    check_cross_projections,
    check_decode_mask,
    check_merge_heads,
    check_merge_states,
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


def test_merge_states():
    import torch

    def right(out_a, lse_a, out_b, lse_b):
        lse = torch.logaddexp(lse_a, lse_b)
        w_a = torch.exp(lse_a - lse).unsqueeze(-1)
        w_b = torch.exp(lse_b - lse).unsqueeze(-1)
        return w_a * out_a + w_b * out_b, lse

    def max_shift(out_a, lse_a, out_b, lse_b):  # the other correct way
        top = torch.maximum(lse_a, lse_b)
        e_a, e_b = torch.exp(lse_a - top), torch.exp(lse_b - top)
        total = e_a + e_b
        out = (e_a / total).unsqueeze(-1) * out_a + (e_b / total).unsqueeze(-1) * out_b
        return out, top + torch.log(total)

    def averaged(out_a, lse_a, out_b, lse_b):
        return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)

    def no_rescale(out_a, lse_a, out_b, lse_b):
        return out_a + out_b, torch.logaddexp(lse_a, lse_b)

    def not_divided(out_a, lse_a, out_b, lse_b):
        out = torch.exp(lse_a).unsqueeze(-1) * out_a + torch.exp(lse_b).unsqueeze(-1) * out_b
        return out, torch.logaddexp(lse_a, lse_b)

    def swapped(out_a, lse_a, out_b, lse_b):
        out, lse = right(out_a, lse_a, out_b, lse_b)
        w_a = torch.exp(lse_a - lse).unsqueeze(-1)
        w_b = torch.exp(lse_b - lse).unsqueeze(-1)
        return w_b * out_a + w_a * out_b, lse

    def lse_added(out_a, lse_a, out_b, lse_b):
        return right(out_a, lse_a, out_b, lse_b)[0], lse_a + lse_b

    def lse_max(out_a, lse_a, out_b, lse_b):
        return right(out_a, lse_a, out_b, lse_b)[0], torch.maximum(lse_a, lse_b)

    def naive_exp(out_a, lse_a, out_b, lse_b):  # overflows in float32 for large scores
        lse = torch.log(torch.exp(lse_a) + torch.exp(lse_b))
        w_a = torch.exp(lse_a - lse).unsqueeze(-1)
        w_b = torch.exp(lse_b - lse).unsqueeze(-1)
        return w_a * out_a + w_b * out_b, lse

    assert check_merge_states(right).passed
    assert check_merge_states(max_shift).passed
    for wrong, words in (
        (averaged, "you averaged the outputs"),
        (no_rescale, "you forgot to rescale by exp(lse_i - lse)"),
        (not_divided, "did not divide by the total"),
        (swapped, "you swapped the weights"),
        (lse_added, "not lse_a + lse_b"),
        (lse_max, "you kept the larger lse"),
        (naive_exp, "overflowed"),
    ):
        result = check_merge_states(wrong)
        assert not result and words in result.message, (wrong.__name__, result.message)
    assert check_merge_states(stub).status == "not attempted"


def test_decode_mask():
    import torch

    def right(n, m):
        return torch.ones(n, m, dtype=torch.bool).tril(m - n)

    def top_left(n, m):
        return torch.ones(n, m, dtype=torch.bool).tril()

    def inverted(n, m):
        return ~right(n, m)

    def blind_to_self(n, m):
        return torch.ones(n, m, dtype=torch.bool).tril(m - n - 1)

    def sees_next(n, m):
        return torch.ones(n, m, dtype=torch.bool).tril(m - n + 1)

    def all_visible(n, m):
        return torch.ones(n, m, dtype=torch.bool)

    def floats(n, m):
        return right(n, m).float()

    assert check_decode_mask(right).passed
    for wrong, words in (
        (top_left, "you aligned the causal mask top-left, so the new token cannot see"),
        (inverted, "marks the blocked keys"),
        (blind_to_self, "must see its own key"),
        (sees_next, "sees the key after its own position"),
        (all_visible, "must not see the later new ones"),
        (floats, "return a bool mask"),
    ):
        result = check_decode_mask(wrong)
        assert not result and words in result.message, (wrong.__name__, result.message)
    assert check_decode_mask(stub).status == "not attempted"


def _heads(x, layer, scale, dim=-1):
    import torch
    from selfattn import merge_heads, split_heads

    d, h = layer.d_model, layer.num_heads
    q, k, v = (split_heads(t, h) for t in layer.qkv(x).split(d, dim=-1))
    weights = torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=dim)
    return layer.out(merge_heads(weights @ v))


def test_fixed_scaling():
    from selfattn.exercises.ch05 import check_fixed_scaling

    def right(x, layer):
        return _heads(x, layer, (layer.d_model // layer.num_heads) ** -0.5)

    def bug_left_in(x, layer):
        return _heads(x, layer, layer.d_model**-0.5)

    def no_scale(x, layer):
        return _heads(x, layer, 1.0)

    def no_sqrt(x, layer):
        return _heads(x, layer, 1.0 / (layer.d_model // layer.num_heads))

    def over_queries(x, layer):
        return _heads(x, layer, (layer.d_model // layer.num_heads) ** -0.5, dim=-2)

    def via_layer(x, layer):  # the library's layer is a right answer too
        return layer(x)

    assert check_fixed_scaling(right).passed
    assert check_fixed_scaling(via_layer).passed
    for wrong, words in (
        (bug_left_in, "the planted bug is still there: the scores are divided by sqrt(d_model)"),
        (no_scale, "you removed the scaling altogether"),
        (no_sqrt, "not by its square root"),
        (over_queries, "your softmax runs over the queries"),
    ):
        result = check_fixed_scaling(wrong)
        assert not result and words in result.message, (wrong.__name__, result.message)
    assert check_fixed_scaling(stub).status == "not attempted"


def test_fixed_scaling_leaves_the_readers_rng_alone():
    import torch
    from selfattn.exercises.ch05 import check_fixed_scaling

    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    check_fixed_scaling(stub)
    assert torch.equal(torch.random.get_rng_state(), before)


def _decode(model, prompt, steps, *, prefill=True, fresh=False, cache=True):
    import torch

    seq = prompt
    caches = model.decoder.new_caches()
    new = prompt if prefill else prompt[:, -1:]
    for _ in range(steps):
        if fresh:
            caches = model.decoder.new_caches()
        if not cache:
            logits = model(seq)[:, -1]
        else:
            logits = model(new, caches=caches)[:, -1]
        nxt = logits.argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
        new = nxt
    return seq


def test_decode_loop():
    from selfattn.exercises.ch05 import check_decode_loop

    def right(model, prompt, steps):
        return _decode(model, prompt, steps)

    def no_prefill(model, prompt, steps):
        return _decode(model, prompt, steps, prefill=False)

    def fresh_cache(model, prompt, steps):
        import torch

        seq = prompt
        for _ in range(steps):
            caches = model.decoder.new_caches()
            new = seq[:, -1:] if seq.shape[1] > prompt.shape[1] else prompt
            nxt = model(new, caches=caches)[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
        return seq

    def recompute(model, prompt, steps):
        return _decode(model, prompt, steps, cache=False)

    def new_tokens_only(model, prompt, steps):
        return _decode(model, prompt, steps)[:, prompt.shape[1] :]

    assert check_decode_loop(right).passed
    for wrong, words in (
        (no_prefill, "you did not prefill"),
        (fresh_cache, "you made a new cache at every step"),
        (recompute, "you recomputed the prefix"),
        (new_tokens_only, "return the prompt followed by the"),
    ):
        result = check_decode_loop(wrong)
        assert not result and words in result.message, (wrong.__name__, result.message)
    assert check_decode_loop(stub).status == "not attempted"


def test_cache_prediction():
    import torch
    from selfattn.exercises.ch05 import check_cache_prediction, lm_cache_bytes

    right = 2 * 2 * 48 * (8 + 56 - 1) * 4
    assert lm_cache_bytes(2, 48, 8, 56, 4) == right
    assert check_cache_prediction(right).passed
    assert check_cache_prediction(float(right)).passed
    assert check_cache_prediction(torch.tensor(right)).passed
    for wrong, words in (
        (right // 2, "keys AND values"),
        (2 * 2 * 48 * 64 * 4, "one position too many"),
        (2 * 2 * 48 * 55 * 4, "you left out the prompt"),
        (2 * 2 * 48 * 56 * 4, "you counted only the generated tokens"),
        (right * 4, "too large by the number of heads"),
        (right * 8, "that is bits"),
        (right + 1, "times the size the caches hold"),
        ("48384", "write a number of bytes"),
    ):
        result = check_cache_prediction(wrong)
        assert not result and words in result.message, (wrong, result.message)
    assert check_cache_prediction(None).status == "not attempted"


def test_block_prediction():
    from selfattn.exercises.ch05 import check_block_prediction

    assert check_block_prediction(7 + 1 + 2).passed
    assert check_block_prediction(10.0).passed
    for wrong, words in (
        (6 + 1 + 1, "you rounded down"),
        (9, "you pooled the sequences"),  # ceil(133 / 16)
        (7 + 2 + 2, "one block too many"),
        (12, "is not it"),
        ("10", "write a number of blocks"),
    ):
        result = check_block_prediction(wrong)
        assert not result and words in result.message, (wrong, result.message)
    assert check_block_prediction(None).status == "not attempted"
