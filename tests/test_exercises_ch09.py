"""Chapter 9's checkers: the reference solutions pass, plausible wrong answers and stubs do not."""

import torch
import torch.nn.functional as F
from selfattn.exercises.ch09 import (
    check_block_forward,
    check_clip_loss,
    check_greedy_cached,
    check_masked_accuracy,
    check_patchify,
)


def stub(*args):
    raise NotImplementedError


def test_block_forward():
    def right(block, x):
        x = x + block.attn(block.ln1(x))
        return x + block.mlp(block.ln2(x))

    def post_ln(block, x):  # the original Transformer's order: add, then normalise
        x = block.ln1(x + block.attn(x))
        return block.ln2(x + block.mlp(x))

    def no_residual(block, x):
        x = block.attn(block.ln1(x))
        return x + block.mlp(block.ln2(x))

    def one_layernorm(block, x):
        x = x + block.attn(block.ln1(x))
        return x + block.mlp(block.ln1(x))

    assert check_block_forward(right).passed
    assert not check_block_forward(post_ln)
    assert not check_block_forward(no_residual)
    assert not check_block_forward(one_layernorm)
    assert check_block_forward(stub).status == "not attempted"


def test_patchify():
    def right(images, p):
        N, C, H, W = images.shape
        x = images.reshape(N, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(N, (H // p) * (W // p), C * p * p)

    def unfold(images, p):  # F.unfold gives (N, C*p*p, P): the same numbers, transposed
        return F.unfold(images, p, stride=p).transpose(1, 2)

    def plain_reshape(images, p):  # right shape, wrong pixels
        N, C, H, W = images.shape
        return images.reshape(N, (H // p) * (W // p), C * p * p)

    def channel_last(images, p):
        N, C, H, W = images.shape
        x = images.reshape(N, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1)
        return x.reshape(N, (H // p) * (W // p), C * p * p)

    assert check_patchify(right).passed
    assert check_patchify(unfold).passed  # the same layout, another route
    assert not check_patchify(plain_reshape)
    assert not check_patchify(channel_last)
    assert check_patchify(stub).status == "not attempted"


def test_clip_loss():
    def right(logits):
        labels = torch.arange(len(logits))
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2

    def one_direction(logits):
        return F.cross_entropy(logits, torch.arange(len(logits)))

    def sum_not_mean(logits):
        labels = torch.arange(len(logits))
        return F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)

    def softmax_whole_matrix(logits):
        return -torch.log_softmax(logits.flatten(), 0).reshape(logits.shape).diagonal().mean()

    assert check_clip_loss(right).passed
    for wrong in (one_direction, sum_not_mean, softmax_whole_matrix):
        assert not check_clip_loss(wrong), wrong.__name__
    assert check_clip_loss(stub).status == "not attempted"


def test_masked_accuracy():
    def right(logits, targets):
        picked = targets != -100
        return (logits.argmax(-1)[picked] == targets[picked]).float().mean().item()

    def counts_everything(logits, targets):
        return (logits.argmax(-1) == targets).float().mean().item()

    def count_not_fraction(logits, targets):
        picked = targets != -100
        return (logits.argmax(-1)[picked] == targets[picked]).sum().item()

    def drops_ignore_but_keeps_zero_targets(logits, targets):  # treats target id 0 as padding
        picked = targets > 0
        return (logits.argmax(-1)[picked] == targets[picked]).float().mean().item()

    assert check_masked_accuracy(right).passed
    assert not check_masked_accuracy(counts_everything)
    assert not check_masked_accuracy(count_not_fraction)
    assert not check_masked_accuracy(drops_ignore_but_keeps_zero_targets)
    assert check_masked_accuracy(stub).status == "not attempted"


def test_greedy_cached():
    def right(model, ids, steps):
        caches = model.decoder.new_caches()
        seq, new = ids, ids
        for _ in range(steps):
            nxt = model(new, caches=caches)[:, -1].argmax(-1, keepdim=True)
            seq, new = torch.cat([seq, nxt], 1), nxt
        return seq

    def no_cache(model, ids, steps):  # right tokens, but re-runs the whole sequence every step
        seq = ids
        for _ in range(steps):
            seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], 1)
        return seq

    def feeds_whole_sequence_into_cache(model, ids, steps):  # positions and keys pile up twice
        caches = model.decoder.new_caches()
        seq = ids
        for _ in range(steps):
            seq = torch.cat(
                [
                    seq,
                    model(seq[:, -1:] if seq.shape[1] > ids.shape[1] else seq, caches=caches)[
                        :, 0
                    ].argmax(-1, keepdim=True),
                ],
                1,
            )
        return seq

    def returns_only_new(model, ids, steps):
        return right(model, ids, steps)[:, ids.shape[1] :]

    assert check_greedy_cached(right).passed
    assert not check_greedy_cached(no_cache)
    assert not check_greedy_cached(feeds_whole_sequence_into_cache)
    assert not check_greedy_cached(returns_only_new)
    assert check_greedy_cached(stub).status == "not attempted"
