"""Chapter 9's checkers: the reference solutions pass, plausible wrong answers and stubs do not."""

import torch
import torch.nn.functional as F
from selfattn.data.text import encode_sentences, generate_sentences, mask_tokens, word_vocab
from selfattn.exercises.ch09 import (
    COPY_CASE,
    PLANTED_LM_LOSS,
    bert_mask_mistakes,
    buggy_attention_mask,
    buggy_lm_loss,
    check_bert_mask,
    check_block_forward,
    check_clip_loss,
    check_copy_accuracy,
    check_lm_loss,
    check_patchify,
    check_vit_tokens,
    clip_loss_mistakes,
    copy_accuracy_mistakes,
    lm_loss_mistakes,
    patchify_mistakes,
    vit_tokens_mistakes,
)


def stub(*args):
    raise NotImplementedError


def failed_with(result, text):
    return result.status == "failed" and text in result.message


def test_vit_tokens_prediction():
    assert check_vit_tokens(37).passed
    assert check_vit_tokens(37.0).passed
    assert check_vit_tokens(torch.tensor(37)).passed
    assert check_vit_tokens(None).status == "not attempted"
    wrong = {36: 0, 7: 1, 6: 2, 289: 3, 49: 4}
    names = vit_tokens_mistakes()
    assert len(names) == len(wrong)
    for value, k in wrong.items():
        assert failed_with(check_vit_tokens(value), names[k]), value
    assert failed_with(check_vit_tokens(38), "38 is not right")
    assert failed_with(check_vit_tokens("37"), "write a number")


def test_bert_mask_find_the_bug():
    def right(ids, pad_id):
        B, n = ids.shape
        return (ids != pad_id).unsqueeze(1).expand(B, n, n)

    def key_mask_only(ids, pad_id):  # (B, 1, n) broadcasts to the same mask
        return (ids != pad_id).unsqueeze(1)

    def flipped(ids, pad_id):
        return ~right(ids, pad_id)

    def rows(ids, pad_id):
        B, n = ids.shape
        return (ids != pad_id).unsqueeze(2).expand(B, n, n)

    def triu(ids, pad_id):
        n = ids.shape[1]
        return right(ids, pad_id) & torch.ones(n, n, dtype=torch.bool).triu()

    def no_padding_mask(ids, pad_id):
        B, n = ids.shape
        return torch.ones(B, n, n, dtype=torch.bool)

    assert check_bert_mask(right).passed
    assert check_bert_mask(key_mask_only).passed
    names = bert_mask_mistakes()
    answers = (buggy_attention_mask, flipped, rows, triu, no_padding_mask)
    assert len(names) == len(answers)
    for answer, name in zip(answers, names):
        assert failed_with(check_bert_mask(answer), name), name
    assert "still causal" in names[0]  # the planted bug is diagnosed first
    assert check_bert_mask(stub).status == "not attempted"


def test_bert_mask_leaves_the_padding_rows_free():
    """Only the real words' rows matter: no real word reads a padding query's output, and a row
    with no True gives zero weights, not NaN (the padded sentence's logits are the same)."""

    def pairwise(ids, pad_id):  # the padding's rows hidden as well: right too
        real = ids != pad_id
        return real[:, :, None] & real[:, None, :]

    def padding_rows_all_true(ids, pad_id):
        B, n = ids.shape
        real = ids != pad_id
        return real.unsqueeze(1).expand(B, n, n) | ~real.unsqueeze(2)

    assert check_bert_mask(pairwise).passed
    assert check_bert_mask(padding_rows_all_true).passed

    def pairwise_causal(ids, pad_id):  # the planted bug, on the real words' rows
        n = ids.shape[1]
        return pairwise(ids, pad_id) & torch.ones(n, n, dtype=torch.bool).tril()

    assert failed_with(check_bert_mask(pairwise_causal), bert_mask_mistakes()[0])

    def one_padding_key_seen(ids, pad_id):  # a real query may read one padding key
        mask = pairwise(ids, pad_id).clone()
        real = ids != pad_id
        for b in range(ids.shape[0]):
            pads = (~real[b]).nonzero().flatten()
            if len(pads):
                mask[b, 0, pads[0]] = True
        return mask

    result = check_bert_mask(one_padding_key_seen)
    assert failed_with(result, "the word at query 0 may attend to key 2 (padding)"), result
    assert "largest difference" not in result.message

    def real_rows_blind(ids, pad_id):  # the real words see nothing
        B, n = ids.shape
        return torch.zeros(B, n, n, dtype=torch.bool)

    assert failed_with(check_bert_mask(real_rows_blind), "may not attend to key 0 (a word)")
    assert failed_with(check_bert_mask(lambda ids, pad_id: ids != pad_id), "shape")

    # the pairwise mask gives MiniBERT the same logits at the real words, and no NaN
    from selfattn.models import MiniBERT

    torch.manual_seed(0)
    model = MiniBERT(12, d_model=16, num_heads=2, num_layers=2, max_len=8, pad_id=0).eval()
    ids = torch.tensor([[5, 6, 7, 8], [5, 9, 0, 0]])
    real = ids != 0
    with torch.no_grad():
        emb = model.embed(ids)
        by_keys = model.head(model.encoder(emb, mask=real.unsqueeze(1)))
        by_pairs = model.head(model.encoder(emb, mask=pairwise(ids, 0)))
    assert not by_pairs.isnan().any()
    assert torch.allclose(by_pairs[real], by_keys[real], atol=1e-6)


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

    def column_order(images, p):
        N, C, H, W = images.shape
        x = images.reshape(N, C, H // p, p, W // p, p).permute(0, 4, 2, 1, 3, 5)
        return x.reshape(N, (H // p) * (W // p), C * p * p)

    assert check_patchify(right).passed
    assert check_patchify(unfold).passed  # the same layout, another route
    names = patchify_mistakes()
    for answer, name in zip((plain_reshape, column_order, channel_last), names):
        assert failed_with(check_patchify(answer), name), answer.__name__
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

    def columns_only(logits):
        return F.cross_entropy(logits.T, torch.arange(len(logits)))

    assert check_clip_loss(right).passed
    names = clip_loss_mistakes()
    answers = (one_direction, columns_only, sum_not_mean, softmax_whole_matrix)
    for wrong, name in zip(answers, names):
        assert failed_with(check_clip_loss(wrong), name), wrong.__name__
    assert check_clip_loss(stub).status == "not attempted"


def _copy_accuracy():
    """Measured: the copier's accuracy on the hidden words of the chapter's test sentences."""
    wv = word_vocab()
    ids, lengths = encode_sentences(generate_sentences(1000, seed=2), wv)
    inputs, targets = mask_tokens(
        ids,
        lengths,
        mask_id=wv.stoi["<mask>"],
        vocab_size=len(wv),
        generator=torch.Generator().manual_seed(2),
    )
    picked = targets != -100
    return (inputs == targets)[picked].float().mean().item()


def test_copy_accuracy_prediction():
    measured = _copy_accuracy()
    assert COPY_CASE[2] == len(word_vocab())
    assert check_copy_accuracy(measured).passed  # the chapter's measurement passes
    assert check_copy_accuracy(round(measured, 2)).passed
    assert check_copy_accuracy(torch.tensor(0.1)).passed
    assert check_copy_accuracy(None).status == "not attempted"
    names = copy_accuracy_mistakes()
    named = (0.0, 0.2, 0.8, 0.9, 0.15, 0.865, 1.0)
    assert len(names) == len(named)
    for value, name in zip(named, names):
        assert failed_with(check_copy_accuracy(value), name), value
    assert failed_with(check_copy_accuracy(0.5), "none of the mistakes")
    assert failed_with(check_copy_accuracy(10), "between 0 and 1")
    assert failed_with(check_copy_accuracy(float("nan")), "between 0 and 1")
    assert not check_copy_accuracy("0.1")


def _lm_loss(logits, ids):
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))


def test_lm_loss_passes_the_fix_and_treats_the_planted_bug_as_not_attempted():
    assert check_lm_loss(_lm_loss).passed
    assert check_lm_loss(
        lambda lg, ids: F.cross_entropy(lg[:, :-1].transpose(1, 2), ids[:, 1:])
    ).passed
    assert check_lm_loss(lambda lg, ids: _lm_loss(lg, ids).item()).passed
    assert check_lm_loss(buggy_lm_loss).status == "not attempted"
    assert check_lm_loss(stub).status == "not attempted"
    assert lm_loss_mistakes()[0] == PLANTED_LM_LOSS


def test_lm_loss_names_the_mistakes():
    _, backwards, summed = lm_loss_mistakes()
    V = lambda lg: lg.shape[-1]  # noqa: E731
    previous = check_lm_loss(
        lambda lg, ids: F.cross_entropy(lg[:, 1:].reshape(-1, V(lg)), ids[:, :-1].reshape(-1))
    )
    assert failed_with(previous, backwards)
    total = check_lm_loss(
        lambda lg, ids: F.cross_entropy(
            lg[:, :-1].reshape(-1, V(lg)), ids[:, 1:].reshape(-1), reduction="sum"
        )
    )
    assert failed_with(total, summed)

    def planted_on_short_sequences_only(lg, ids):  # the planted bug, named when partly kept
        return buggy_lm_loss(lg, ids) if lg.shape[1] > 5 else _lm_loss(lg, ids)

    assert failed_with(check_lm_loss(planted_on_short_sequences_only), PLANTED_LM_LOSS)
    # the axes confused: an error from torch, reported at the reader's line
    assert failed_with(
        check_lm_loss(lambda lg, ids: F.cross_entropy(lg[:, :-1], ids[:, 1:])), "raised"
    )
    assert failed_with(check_lm_loss(lambda lg, ids: lg.sum(-1)), "one number")
    assert failed_with(
        check_lm_loss(lambda lg, ids: _lm_loss(lg, ids) + 0.1), "largest difference"
    )
