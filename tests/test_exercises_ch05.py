"""Chapter 5's checkers accept the reference solutions, reject plausible wrong answers,
and see stubs."""

import torch
from selfattn import merge_heads, scaled_dot_product_attention, split_heads
from selfattn.exercises.ch05 import (
    PREDICT_HEAD_HEADS,
    PREDICT_HEAD_INDEX,
    PREDICT_HEAD_SHAPE,
    buggy_cached_attention,
    buggy_gqa_attention,
    buggy_heads,
    check_cache_bytes,
    check_cached_attention_fixed,
    check_cross_projections,
    check_gqa_fixed,
    check_heads_fixed,
    check_merge_states,
    check_param_count,
    check_predicted_head,
)
from selfattn.masks import causal_mask


def stub(*args):
    raise NotImplementedError


def test_predicted_head():
    x = torch.arange(24.0).reshape(PREDICT_HEAD_SHAPE)
    right = split_heads(x, PREDICT_HEAD_HEADS)[PREDICT_HEAD_INDEX].item()
    assert right == 10  # head 2 holds features 4-5; position 1 starts at 6
    assert check_predicted_head(right).passed
    assert check_predicted_head(lambda: 10.0).passed
    assert check_predicted_head(torch.tensor(10)).passed
    for wrong, words in (
        (18, "x.reshape(B, h, n, d_head)"),
        (8, "strided split"),
        (14, "head and position swapped"),
        (10.5, "is not a whole number"),
        ("10", "write a number"),
    ):
        result = check_predicted_head(wrong)
        assert not result and words in result.message, (wrong, result.message)
    assert check_predicted_head(None).status == "not attempted"


def _gqa_right(q, k, v):
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    return scaled_dot_product_attention(q, k, v)


def test_gqa_fixed():
    def expand(q, k, v):  # a right answer without copying the heads
        B, h, n, dh = q.shape
        h_kv = k.shape[1]
        k, v = (
            t[:, :, None].expand(B, h_kv, h // h_kv, *t.shape[2:]).reshape(B, h, -1, dh)
            for t in (k, v)
        )
        return scaled_dot_product_attention(q, k, v)

    def first_kv_only(q, k, v):
        return _gqa_right(q, k[:, :1].expand_as(k), v[:, :1].expand_as(v))

    assert check_gqa_fixed(_gqa_right).passed
    assert check_gqa_fixed(expand).passed
    result = check_gqa_fixed(buggy_gqa_attention)
    assert not result and "the bug is still there: repeat tiles" in result.message
    assert "h_kv=2" in result.message  # h_kv = 1 and h_kv = h passed: the bug hides there
    assert not check_gqa_fixed(first_kv_only)
    assert check_gqa_fixed(stub).status == "not attempted"


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
        (no_rescale, "without rescaling them"),
        (not_divided, "do not sum to 1"),
        (swapped, "you swapped the weights"),
        (lse_added, "added the two log-sum-exps"),
        (lse_max, "you kept the larger lse"),
        (naive_exp, "overflowed"),
    ):
        result = check_merge_states(wrong)
        assert not result and words in result.message, (wrong.__name__, result.message)
    assert check_merge_states(stub).status == "not attempted"


def _by_hand(x, layer, scale=None, merge=True):
    B, n, d = x.shape
    h = layer.num_heads
    q, k, v = (split_heads(t, h) for t in layer.qkv(x).split(d, dim=-1))
    scale = (d // h) ** -0.5 if scale is None else scale
    out = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1) @ v
    return layer.out(merge_heads(out) if merge else out.reshape(B, n, d))


def test_heads_fixed():
    def right(x, layer):
        return _by_hand(x, layer)

    def via_layer(x, layer):  # the library's layer is a right answer too
        return layer(x)

    def scale_d_model(x, layer):
        return _by_hand(x, layer, scale=layer.d_model**-0.5)

    def no_out_projection(x, layer):
        B, n, d = x.shape
        q, k, v = (split_heads(t, layer.num_heads) for t in layer.qkv(x).split(d, -1))
        return merge_heads(scaled_dot_product_attention(q, k, v))

    def zeroes_the_layer(x, layer):  # mutating the layer cannot fool the checker
        with torch.no_grad():
            for p in layer.parameters():
                p.zero_()
        return layer(x)

    assert check_heads_fixed(right).passed
    assert check_heads_fixed(via_layer).passed
    result = check_heads_fixed(buggy_heads)
    assert not result and "the bug is still there" in result.message
    assert "h=3" in result.message  # the h = 1 case passed: the bug hides there
    result = check_heads_fixed(scale_d_model)
    assert not result and "the scale changed" in result.message
    assert not check_heads_fixed(no_out_projection)
    assert not check_heads_fixed(zeroes_the_layer)
    assert check_heads_fixed(stub).status == "not attempted"


def test_heads_fixed_leaves_the_readers_rng_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    check_heads_fixed(stub)
    assert torch.equal(torch.random.get_rng_state(), before)


def _step(q_new, k_new, v_new, k_cache, v_cache, *, new_first=False, top_left=False):
    k = torch.cat([k_new, k_cache] if new_first else [k_cache, k_new], dim=-2)
    v = torch.cat([v_new, v_cache] if new_first else [v_cache, v_new], dim=-2)
    align = "top_left" if top_left else "bottom_right"
    mask = causal_mask(q_new.shape[-2], k.shape[-2], alignment=align)
    return scaled_dot_product_attention(q_new, k, v, mask), k, v


def test_cached_attention_fixed():
    def right(*args):
        return _step(*args)

    def top_left(*args):
        return _step(*args, top_left=True)

    def new_first_right_cache(*args):  # the cache fixed, the attention not
        out = _step(*args, new_first=True)[0]
        return (out, *_step(*args)[1:])

    def two_values(*args):
        return _step(*args)[:2]

    def clears_the_cache(q_new, k_new, v_new, k_cache, v_cache):
        # emptying the caller's cache in place cannot change what the checker expects
        out = _step(q_new, k_new, v_new, k_cache, v_cache)
        k_cache.zero_()
        return out

    assert check_cached_attention_fixed(right).passed
    assert check_cached_attention_fixed(clears_the_cache).passed
    result = check_cached_attention_fixed(buggy_cached_attention)
    # one new token: its query sees every key, so only the returned cache shows the bug
    assert not result and "the output is right here only because" in result.message
    result = check_cached_attention_fixed(new_first_right_cache)
    assert not result and "still put before the cached ones" in result.message
    result = check_cached_attention_fixed(top_left)
    assert not result and "aligned top-left" in result.message
    result = check_cached_attention_fixed(two_values)
    assert not result and "return a tuple (out, k, v)" in result.message
    assert check_cached_attention_fixed(stub).status == "not attempted"


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


def test_decode_loop_names_the_whole_sequence_fed_again():
    """Issue 45: feeding the whole sequence again into the cache surfaced as the model's own
    position ValueError; the checker names the mistake (and not the fix)."""
    import torch
    from selfattn.exercises.ch05 import check_decode_loop

    def whole_sequence(model, prompt, steps):
        caches = model.decoder.new_caches()
        seq = prompt
        for _ in range(steps):
            nxt = model(seq, caches=caches)[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
        return seq

    result = check_decode_loop(whole_sequence)
    assert not result and "whole sequence went into the model again" in result.message, (
        result.message
    )
    assert "ValueError" in result.message or "cached twice" in result.message
    assert "feed only" not in result.message  # the mistake, not the change
