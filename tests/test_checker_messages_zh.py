"""The checkers' own diagnoses speak Chinese after ``selfattn.set_language("zh")`` (issue 51).

One wrong answer per chapter's checkers: its failure message in English is as before, and in
Chinese it holds Chinese text and no English sentence (code identifiers, shapes and numbers
stay as they are: a run of three English words is what this test calls a sentence).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import selfattn
import torch
from selfattn.efficient.linear import linear_attention
from selfattn.exercises import (
    ch01,
    ch02,
    ch03,
    ch04,
    ch05,
    ch06,
    ch07,
    ch08,
    ch09,
    ch11,
    ch12,
    ch13,
    ch14,
)

#: Three English words in a row (``dim=0``, ``x[-1]``, ``math.log(n + 1, k)`` are not).
ENGLISH = re.compile(r"\b[A-Za-z]{2,}\b[ ,;:']+\b[A-Za-z]{2,}\b[ ,;:']+\b[A-Za-z]{2,}\b")
LABEL = re.compile(r"^[✅❌⏳] 练习 \d+\.\d+（.*?）：")
CJK = re.compile(r"[\u4e00-\u9fff]")


def _dim1(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1), dim=1) @ v


def _steps_unscaled(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = q @ k.T
    w = np.exp(s - s.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True) @ v


def _sines_then_cosines(n, d):
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
    return torch.cat([torch.sin(pos * omega), torch.cos(pos * omega)], dim=1)


def _z_not_decayed(S, z, q, k, v, gamma):
    phi_q, phi_k = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    S, z = gamma * S + torch.outer(phi_k, v), z + phi_k
    return (phi_q @ S) / (phi_q @ z + 1e-6), S, z


def _one_entry_off(ids, pad_id):
    B, n = ids.shape
    mask = (ids != pad_id).unsqueeze(1).expand(B, n, n).clone()
    mask[0, 0, 1] = False
    return mask


def _ring_keys_only():
    B, h, n, d, P, size = ch14.RING_BYTES_CASE
    return (P - 1) * B * h * (n // P) * d * size


#: (id, checker, wrong answer, a fragment of its English diagnosis)
CASES = [
    (
        "ch01-dilated",
        ch01.check_dilated_layers,
        lambda n, k: math.ceil(n / (k - 1)) if n else 0,
        "without dilation",
    ),
    (
        "ch01-dilated-float",
        ch01.check_dilated_layers,
        lambda n, k: math.ceil(math.log(n + 1, k)) if n else 0,
        "floating-point logarithm",
    ),
    ("ch01-dilated-plain", ch01.check_dilated_layers, lambda n, k: 7, "layers, got 7"),
    ("ch01-softmax", ch01.check_attention_weights_fixed, ch01.buggy_attention, "dim=0"),
    ("ch01-softmax-dim1", ch01.check_attention_weights_fixed, _dim1, "a batch of 2 sequences"),
    ("ch01-predict", ch01.check_predicted_layers, lambda: 100, "recurrent network"),
    ("ch01-predict-word", ch01.check_predicted_layers, lambda: "many", "your prediction"),
    (
        "ch01-accuracy-type",
        ch01.check_accuracy_by_distance,
        lambda p, t, d: [1.0],
        "expected a dict",
    ),
    (
        "ch01-accuracy-overall",
        ch01.check_accuracy_by_distance,
        lambda p, t, d: {int(x): float((p == t).float().mean()) for x in sorted(set(d.tolist()))},
        "accuracy over all examples",
    ),
    ("ch02-score", ch02.check_predicted_score, 7, "scaling step is missing"),
    ("ch02-score-embeddings", ch02.check_predicted_score, 3 / math.sqrt(2), "embeddings"),
    (
        "ch02-soft",
        ch02.check_soft_lookup,
        lambda q, k, v, t: torch.softmax(k @ q * t, -1) @ v,
        "multiplied by the temperature",
    ),
    (
        "ch02-soft-naive",
        ch02.check_soft_lookup,
        lambda q, k, v, t: (torch.exp(k @ q / t) / torch.exp(k @ q / t).sum()) @ v,
        "overflows",
    ),
    ("ch02-cross", ch02.check_cross_attention, ch02.buggy_cross_attention, "sqrt(d)"),
    (
        "ch02-share",
        ch02.check_antecedent_share,
        lambda w, i, a: w[:, i, a].mean(),
        "mixes sentences",
    ),
    ("ch03-steps", ch03.check_five_steps, _steps_unscaled, "not divided by sqrt(d_k)"),
    ("ch03-steps-type", ch03.check_stable_softmax, lambda x: x.numpy(), "return a torch.Tensor"),
    (
        "ch03-softmax",
        ch03.check_stable_softmax,
        lambda x: torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(-1, keepdim=True),
        "one maximum for the whole tensor",
    ),
    ("ch03-scale", ch03.check_scale_bug, ch03.buggy_attention_layer, "still multiplied"),
    ("ch03-variance", ch03.check_scaled_variance_prediction, 4.0, "variance of one component"),
    ("ch03-variance-other", ch03.check_scaled_variance_prediction, 0.3, "not the variance"),
    (
        "ch03-temperature",
        ch03.check_temperature,
        lambda q, k, v, t: selfattn.scaled_dot_product_attention(q, k, v, scale=1.0 / t),
        "1/sqrt(d_k) is gone",
    ),
    (
        "ch04-padding-flipped",
        ch04.check_padding_mask,
        lambda lengths, n: torch.arange(n)[None, :] >= torch.tensor(lengths)[:, None],
        "flipped",
    ),
    (
        "ch04-padding",
        ch04.check_padding_mask,
        lambda lengths, n: torch.arange(n)[None, :] <= torch.tensor(lengths)[:, None],
        "first pad",
    ),
    (
        "ch04-padding-dtype",
        ch04.check_padding_mask,
        lambda lengths, n: (torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]).int(),
        "return a bool mask",
    ),
    (
        "ch04-padding-other",
        ch04.check_padding_mask,
        lambda lengths, n: torch.zeros(len(lengths), n, dtype=torch.bool),
        "entries differ",
    ),
    (
        "ch04-window",
        ch04.check_sliding_window,
        lambda n, w: (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs() < w,
        "not causal",
    ),
    (
        "ch04-convention",
        ch04.check_mask_convention_bug,
        ch04.buggy_masked_attention,
        "still masks",
    ),
    ("ch04-decoding", ch04.check_decoding_bug, ch04.buggy_decoding_attention, "top-left"),
    ("ch04-pairs", ch04.check_allowed_pairs_prediction, 28, "padded queries"),
    ("ch04-pairs-other", ch04.check_allowed_pairs_prediction, 3, "not the count"),
    ("ch05-head", ch05.check_predicted_head, 18, "x.reshape(B, h, n, d_head)"),
    ("ch05-head-strided", ch05.check_predicted_head, 8, "strided split"),
    ("ch05-gqa", ch05.check_gqa_fixed, ch05.buggy_gqa_attention, "repeat tiles"),
    (
        "ch05-merge",
        ch05.check_merge_states,
        lambda oa, la, ob, lb: (oa + ob, la + lb),
        "without rescaling",
    ),
    ("ch05-heads", ch05.check_heads_fixed, ch05.buggy_heads, "the bug is still there"),
    (
        "ch05-cache",
        ch05.check_cached_attention_fixed,
        ch05.buggy_cached_attention,
        "right here only because",
    ),
    ("ch06-sinusoidal", ch06.check_sinusoidal, _sines_then_cosines, "all sines first"),
    (
        "ch06-alibi",
        ch06.check_alibi_slopes,
        lambda h: [2.0 ** (-8.0 * (i + 1) / h) for i in range(h)],
        "power-of-two formula",
    ),
    (
        "ch06-shift",
        ch06.check_shift_matrix,
        lambda k, d: torch.eye(d).roll(1, 0),
        "largest difference",
    ),
    ("ch07-tiles", ch07.check_causal_tiles_prediction, 10**6, "your prediction"),
    ("ch07-kind", ch07.check_tile_kind, lambda q0, q1, k0, k1: "full", "tiles wrong"),
    (
        "ch08-strided",
        ch08.check_strided_prediction,
        lambda: ch08.STRIDED_CASE[0] * (ch08.STRIDED_CASE[0] + 1) // 2,
        "full causal triangle",
    ),
    ("ch08-causal", ch08.check_causal_linear, linear_attention, "not causal any more"),
    ("ch08-step", ch08.check_decayed_step, _z_not_decayed, "z was not decayed"),
    ("ch08-step-type", ch08.check_linear_step, lambda S, z, q, k, v: 1.0, "return a tuple"),
    ("ch09-vit", ch09.check_vit_tokens, 36, "class token"),
    ("ch09-bert", ch09.check_bert_mask, ch09.buggy_attention_mask, "still causal"),
    ("ch09-bert-entry", ch09.check_bert_mask, _one_entry_off, "in sentence"),
    ("ch09-clip", ch09.check_clip_loss, lambda x: x.sum() * 0 + 5.0, "largest difference"),
    ("ch09-lm", ch09.check_lm_loss, lambda logits, ids: torch.ones(2), "return one number"),
    (
        "ch12-chunked",
        ch12.check_chunked_mask,
        lambda b, h, q, kv: q // ch12.CHUNK == kv // ch12.CHUNK,
        "not causal",
    ),
    ("ch12-chunked-dtype", ch12.check_chunked_mask, lambda b, h, q, kv: (kv <= q).float(), "bool"),
    (
        "ch12-dilated",
        ch12.check_dilated_mask,
        lambda b, h, q, kv: (kv <= q) & (kv % ch12.DILATION == 0),
        "multiple of DILATION",
    ),
    ("ch12-tiles", ch12.check_tiles_prediction, 10**5, "your prediction"),
    (
        "ch13-delta",
        ch13.check_delta_step,
        lambda s, k, v, b: s + b * torch.outer(k, v),
        "linear attention's write",
    ),
    (
        "ch13-gated",
        ch13.check_gated_step,
        lambda s, k, v, b, a: s + b * torch.outer(k, v - s.T @ k),
        "not decayed at all",
    ),
    ("ch14-ring", ch14.check_ring_bytes, _ring_keys_only, "keys only"),
    (
        "ch14-merge",
        ch14.check_merge,
        lambda oa, la, ob, lb: ((oa + ob) / 2, torch.logaddexp(la, lb)),
        "averaged",
    ),
    ("ch14-zigzag", ch14.check_zigzag_chunks, lambda P, r: [2 * r, 2 * r + 1], "mirror image"),
    ("ch14-zigzag-type", ch14.check_zigzag_chunks, lambda P, r: "two", "list of two"),
    ("ch14-ulysses", ch14.check_ulysses_limit, 32, "32 query heads"),
    (
        "ch11-absorbed",
        ch11.check_absorbed_scores,
        lambda q, w, c: (q @ w.transpose(-1, -2)) @ c.T,
        "W_UK transposed",
    ),
    (
        "ch11-absorbed-first",
        ch11.check_absorbed_scores,
        lambda q, w, c: (q @ w[:1]) @ c.T,
        "first head's W_UK",
    ),
    ("ch11-gqa", ch11.check_gqa_bytes, 12345, "your prediction"),
    ("ch11-softcap", ch11.check_softcap, lambda s, cap: torch.tanh(s / cap), "multiplied back"),
]


@pytest.fixture
def chinese():
    previous = selfattn.set_language("zh")
    yield
    selfattn.set_language(previous)


def _message(check, answer) -> str:
    result = check(answer)
    assert result.status == "failed", result
    return result.message


@pytest.mark.parametrize(
    ("check", "answer", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_wrong_answer_is_diagnosed_in_chinese(check, answer, fragment, chinese):
    selfattn.set_language("en")
    english = _message(check, answer)
    assert fragment in english
    selfattn.set_language("zh")
    # the diagnosis, after the exercise's name (whose translation is the book's business)
    text = LABEL.sub("", _message(check, answer))
    assert CJK.search(text), text
    assert not ENGLISH.search(text), (ENGLISH.search(text).group(), text)


def test_the_planted_mistakes_of_chapter_7_are_named_in_chinese(chinese):
    """PLANTED's texts stay English (the checkers' keys), and are said in Chinese."""
    for names in (
        ch07.online_attention_mistakes(),
        ch07.ds_tile_mistakes(),
        ch07.dkdv_pass_mistakes(),
    ):
        for name in names:
            assert CJK.search(name) and not ENGLISH.search(name), name


def test_the_planted_mistake_of_chapter_9_is_named_in_chinese(chinese):
    for name in ch09.lm_loss_mistakes():
        assert CJK.search(name) and not ENGLISH.search(name), name
