"""Chapter 8's checkers pass the right answers, name the likely mistakes, and see stubs."""

import torch
import torch.nn.functional as F
from selfattn.efficient.linear import linear_attention
from selfattn.exercises.ch08 import (
    HALF_WEIGHT_CASE,
    STRIDED_CASE,
    causal_linear_buggy,
    causal_linear_mistakes,
    check_causal_linear,
    check_decayed_step,
    check_half_weight,
    check_linear_step,
    check_rolling_cache,
    check_strided_prediction,
    decayed_step_mistakes,
    half_weight_mistakes,
    rolling_cache_mistakes,
    strided_mistakes,
)


def stub(*args):
    raise NotImplementedError


def phi(x):
    return F.elu(x) + 1


def window_step(k_buf, v_buf, t, q, k, v, *, slot=None, all_slots=False, read_first=False):
    """One step of a rolling cache (right by default, or with one named mistake)."""
    w = k_buf.shape[0]
    out = None
    if read_first:
        n = min(t, w)
        out = (
            torch.softmax(k_buf[:n] @ q / q.shape[-1] ** 0.5, -1) @ v_buf[:n]
            if n
            else torch.zeros(v.shape[0], dtype=v.dtype)
        )
    i = t % w if slot is None else slot(t, w)
    k_buf[i], v_buf[i] = k, v
    if out is None:
        n = w if all_slots else min(t + 1, w)
        out = torch.softmax(k_buf[:n] @ q / q.shape[-1] ** 0.5, -1) @ v_buf[:n]
    return out, k_buf, v_buf


def test_rolling_cache_right_and_named_mistakes():
    empty, own, stuck, unscaled = rolling_cache_mistakes()
    assert check_rolling_cache(window_step).passed

    # any order of the slots is right, as long as the oldest entry is the one replaced
    def from_the_end(k_buf, v_buf, t, q, k, v):  # slots filled from the last one down
        w = k_buf.shape[0]
        k_buf[(w - 1 - t) % w], v_buf[(w - 1 - t) % w] = k, v
        n = min(t + 1, w)
        s = k_buf[w - n :] @ q / q.shape[-1] ** 0.5
        return torch.softmax(s, -1) @ v_buf[w - n :], k_buf, v_buf

    assert check_rolling_cache(from_the_end).passed
    assert check_rolling_cache(stub).status == "not attempted"
    assert empty in check_rolling_cache(lambda *a: window_step(*a, all_slots=True)).message
    assert own in check_rolling_cache(lambda *a: window_step(*a, read_first=True)).message
    stuck_slot = check_rolling_cache(lambda *a: window_step(*a, slot=lambda t, w: min(t, w - 1)))
    assert stuck in stuck_slot.message

    def no_scale(k_buf, v_buf, t, q, k, v):
        return window_step(k_buf, v_buf, t, q * k.shape[0] ** 0.5, k, v)

    assert unscaled in check_rolling_cache(no_scale).message


def test_rolling_cache_keeps_its_size_and_cannot_see_the_future():
    def growing(k_buf, v_buf, t, q, k, v):
        return window_step(torch.cat([k_buf, k[None]]), torch.cat([v_buf, v[None]]), t, q, k, v)

    result = check_rolling_cache(growing)
    assert not result and "keeps its size" in result.message
    assert "return a tuple" in check_rolling_cache(lambda *a: a[3]).message
    assert not check_rolling_cache(lambda kb, vb, t, q, k, v: (v, kb, vb))
    assert not check_rolling_cache(lambda kb, vb, t, q, k, v: (v, "k", "v"))


def test_rolling_cache_checks_what_the_buffers_hold():
    # a shifting buffer (the oldest row dropped, the newest appended) is right too
    def shifting(k_buf, v_buf, t, q, k, v):
        w = k_buf.shape[0]
        if t >= w:
            k_buf, v_buf = k_buf.roll(-1, 0), v_buf.roll(-1, 0)
        i = min(t, w - 1)
        k_buf[i], v_buf[i] = k, v
        n = min(t + 1, w)
        return torch.softmax(k_buf[:n] @ q / q.shape[-1] ** 0.5, -1) @ v_buf[:n], k_buf, v_buf

    assert check_rolling_cache(shifting).passed

    # the right outputs from a history kept outside the buffers, which stay zeros
    history = []

    def elsewhere(k_buf, v_buf, t, q, k, v):
        if t == 0:
            history.clear()
        history.append((k, v))
        w = k_buf.shape[0]
        keys = torch.stack([kk for kk, _ in history[-w:]])
        values = torch.stack([vv for _, vv in history[-w:]])
        out = torch.softmax(keys @ q / q.shape[-1] ** 0.5, -1) @ values
        return out, k_buf, v_buf

    result = check_rolling_cache(elsewhere)
    assert not result and "must hold the keys" in result.message

    def keys_only(k_buf, v_buf, t, q, k, v):  # the values kept elsewhere
        out, k_buf, _ = window_step(k_buf, v_buf.clone(), t, q, k, v)
        return out, k_buf, v_buf

    result = check_rolling_cache(keys_only)
    assert not result and "must hold the values" in result.message

    def unpaired(k_buf, v_buf, t, q, k, v):  # values written from the other end
        out, k_buf, v_full = window_step(k_buf, v_buf.clone(), t, q, k, v)
        w = k_buf.shape[0]
        if t < w:
            v_buf[w - 1 - t] = v
        else:
            v_buf = v_full.flip(0)
        return out, k_buf, v_buf

    result = check_rolling_cache(unpaired)
    assert not result and "in different slots" in result.message

    def junk_in_the_free_slots(k_buf, v_buf, t, q, k, v):
        out, k_buf, v_buf = window_step(k_buf, v_buf, t, q, k, v)
        w = k_buf.shape[0]
        if t + 1 < w:
            k_buf[t + 1 :] = 1.0
        return out, k_buf, v_buf

    result = check_rolling_cache(junk_in_the_free_slots)
    assert not result and "must still hold zeros" in result.message


def test_strided_prediction_right_and_named_mistakes():
    n, s = STRIDED_CASE
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    right = int(((j <= i) & (((i - j) < s) | ((i - j) % s == 0))).sum())
    assert check_strided_prediction(right).passed
    assert check_strided_prediction(None).status == "not attempted"
    local_only, twice, triangle, strided_only = strided_mistakes()
    local = sum(min(r + 1, s) for r in range(n))
    strided = sum(r // s + 1 for r in range(n))
    assert local_only in check_strided_prediction(local).message
    assert twice in check_strided_prediction(local + strided).message
    assert triangle in check_strided_prediction(n * (n + 1) // 2).message
    assert strided_only in check_strided_prediction(strided).message
    assert "is not right" in check_strided_prediction(right + 1).message
    assert str(right) not in check_strided_prediction(right + 1).message


def causal_right(q, k, v):
    fq, fk = phi(q), phi(k)
    kv = fk.unsqueeze(-1) * v.unsqueeze(-2)
    s, z = kv.cumsum(-3), fk.cumsum(-2)
    return (fq.unsqueeze(-2) @ s).squeeze(-2) / ((fq * z).sum(-1, keepdim=True) + 1e-6)


def test_causal_linear_right_and_named_mistakes():
    assert check_causal_linear(causal_right).passed
    assert check_causal_linear(stub).status == "not attempted"
    not_causal, unnormalised = causal_linear_mistakes()
    # the untouched exercise runs the planted bug: not attempted, as in chapter 7 (issue 30)
    assert check_causal_linear(causal_linear_buggy).status == "not attempted"

    def half_fixed(q, k, v):  # the bug fixed on 2-D inputs only: no longer "not attempted"
        out = causal_linear_buggy(q, k, v)
        return linear_attention(q, k, v, causal=True) if q.dim() == 2 else out

    assert check_causal_linear(half_fixed).status == "failed"

    def everything(q, k, v):
        fq, fk = phi(q), phi(k)
        return (fq @ (fk.transpose(-2, -1) @ v)) / (
            (fq * fk.sum(-2).unsqueeze(-2)).sum(-1, keepdim=True) + 1e-6
        )

    def no_normaliser(q, k, v):
        return (phi(q) @ phi(k).transpose(-2, -1)).tril() @ v

    # the eps of 1e-6 moves the outputs by about 1e-6 relative to them: an answer that
    # leaves it out is right (it once failed with "expected -1.31997, got -1.31997")
    def no_eps(q, k, v):
        fq, fk = phi(q), phi(k)
        s, z = (fk.unsqueeze(-1) * v.unsqueeze(-2)).cumsum(-3), fk.cumsum(-2)
        return (fq.unsqueeze(-2) @ s).squeeze(-2) / (fq * z).sum(-1, keepdim=True)

    assert check_causal_linear(no_eps).passed

    def big_eps(q, k, v):  # eps = 1e-3 moves them by about 1e-3: wrong
        fq, fk = phi(q), phi(k)
        s, z = (fk.unsqueeze(-1) * v.unsqueeze(-2)).cumsum(-3), fk.cumsum(-2)
        return (fq.unsqueeze(-2) @ s).squeeze(-2) / ((fq * z).sum(-1, keepdim=True) + 1e-3)

    assert check_causal_linear(big_eps).status == "failed"
    assert not_causal in check_causal_linear(everything).message
    assert unnormalised in check_causal_linear(no_normaliser).message
    assert not check_causal_linear(lambda q, k, v: F.scaled_dot_product_attention(q, k, v))


def step_right(S, z, q, k, v, gamma):
    S = gamma * S + torch.outer(phi(k), v)
    z = gamma * z + phi(k)
    return (phi(q) @ S) / (phi(q) @ z + 1e-6), S, z


def test_decayed_step_right_and_named_mistakes():
    assert check_decayed_step(step_right).passed
    assert check_decayed_step(stub).status == "not attempted"
    late, read_first, z_not_decayed = decayed_step_mistakes()

    def decay_after(S, z, q, k, v, gamma):
        S, z = gamma * (S + torch.outer(phi(k), v)), gamma * (z + phi(k))
        return (phi(q) @ S) / (phi(q) @ z + 1e-6), S, z

    def read_before(S, z, q, k, v, gamma):
        out = (phi(q) @ (gamma * S)) / (phi(q) @ (gamma * z) + 1e-6)
        return out, gamma * S + torch.outer(phi(k), v), gamma * z + phi(k)

    def z_forgets_nothing(S, z, q, k, v, gamma):
        S, z = gamma * S + torch.outer(phi(k), v), z + phi(k)
        return (phi(q) @ S) / (phi(q) @ z + 1e-6), S, z

    assert late in check_decayed_step(decay_after).message
    assert read_first in check_decayed_step(read_before).message
    assert z_not_decayed in check_decayed_step(z_forgets_nothing).message
    assert not check_decayed_step(lambda S, z, q, k, v, g: (v, S, z))


def test_linear_step_without_decay():
    assert check_linear_step(lambda S, z, q, k, v: step_right(S, z, q, k, v, 1.0)).passed
    assert not check_linear_step(lambda S, z, q, k, v: step_right(S, z, q, k, v, 0.5))
    assert check_linear_step(stub).status == "not attempted"


def test_half_weight_prediction():
    gamma, n = HALF_WEIGHT_CASE
    # the newest m tokens hold 1 - gamma**m of the weight (the tail beyond n is negligible)
    right = next(m for m in range(1, n) if 1 - gamma**m >= 0.5)
    assert check_half_weight(right).passed
    assert check_half_weight(float(right)).passed
    assert check_half_weight(torch.tensor(right)).passed
    assert check_half_weight(None).status == "not attempted"
    mean_age, one_short, half_mean, half_all = half_weight_mistakes()
    for value, name in (
        (10, mean_age),
        (right - 1, one_short),
        (5, half_mean),
        (n // 2, half_all),
    ):
        result = check_half_weight(value)
        assert not result and name in result.message
    assert not check_half_weight(right + 1)
    assert not check_half_weight(right + 0.5)
    assert not check_half_weight("7")
