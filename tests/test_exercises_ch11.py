"""Chapter 11's checkers pass the right answers, name the likely mistakes, and see stubs."""

import torch
from selfattn.exercises.ch11 import (
    absorbed_mistakes,
    check_absorbed_scores,
    check_gqa_bytes,
    check_mla_bytes,
    check_mla_keys,
    check_softcap,
    gqa_mistakes,
    mla_bytes_mistakes,
    mla_keys_buggy,
    mla_keys_mistakes,
    softcap_mistakes,
)
from selfattn.positional import apply_rope


def stub(*args):
    raise NotImplementedError


def test_absorbed_scores():
    transposed, first_head, scaled = absorbed_mistakes()
    assert check_absorbed_scores(lambda q, w, c: (q @ w) @ c.T).passed
    assert check_absorbed_scores(stub).status == "not attempted"
    assert (
        transposed
        in check_absorbed_scores(lambda q, w, c: (q @ w.transpose(-1, -2)) @ c.T).message
    )
    assert first_head in check_absorbed_scores(lambda q, w, c: (q @ w[:1]) @ c.T).message
    assert (
        scaled in check_absorbed_scores(lambda q, w, c: (q @ w) @ c.T / q.shape[-1] ** 0.5).message
    )
    assert not check_absorbed_scores(lambda q, w, c: torch.zeros(1)).passed
    up_projecting = check_absorbed_scores(
        lambda q, w, c: q @ torch.einsum("hdr,tr->htd", w, c).transpose(-1, -2)
    )
    assert not up_projecting.passed and "up-projected all t latents" in up_projecting.message


def keys(latent, k_rope, w_uk, positions, *, rotate_k=True, rotate_latent=False):
    if rotate_latent:
        latent = apply_rope(latent, positions)
    content = torch.einsum("hdr,tr->htd", w_uk, latent)
    kr = apply_rope(k_rope, positions) if rotate_k else k_rope
    return torch.cat([content, kr.expand(w_uk.shape[0], -1, -1)], -1)


def test_mla_keys():
    unrotated, latent_rotated = mla_keys_mistakes()
    assert check_mla_keys(keys).passed
    assert check_mla_keys(stub).status == "not attempted"
    assert check_mla_keys(mla_keys_buggy).status == "not attempted"  # the planted bug
    assert unrotated in check_mla_keys(lambda *a: keys(*a, rotate_k=False)).message
    assert latent_rotated in check_mla_keys(lambda *a: keys(*a, rotate_latent=True)).message


def test_planted_bug_breaks_absorption():
    """The planted bug's stated consequence: no folded query reproduces its scores, while the
    right keys' scores are reproduced by the query folded once, (W_UK^T q) . c."""
    g = torch.Generator().manual_seed(0)
    h, d, r, rd, t = 1, 4, 3, 2, 40
    lat = torch.randn(t, r, generator=g, dtype=torch.float64)
    kr = torch.randn(t, rd, generator=g, dtype=torch.float64)
    w = torch.randn(h, d, r, generator=g, dtype=torch.float64)
    q = torch.randn(d, generator=g, dtype=torch.float64)
    pos = torch.arange(t)
    for fn, absorbable in ((keys, True), (mla_keys_buggy, False)):
        scores = fn(lat, kr, w, pos)[0, :, :d] @ q  # the content scores
        best = torch.linalg.lstsq(lat, scores[:, None]).solution
        residual = (lat @ best)[:, 0] - scores
        assert (residual.abs().max() < 1e-9) == absorbable


def test_predictions():
    assert check_gqa_bytes(327680).passed
    assert check_gqa_bytes(None).status == "not attempted"
    keys_only, query_heads, one_layer, fp32 = gqa_mistakes()
    assert keys_only in check_gqa_bytes(163840).message
    assert query_heads in check_gqa_bytes(2621440).message
    assert one_layer in check_gqa_bytes(4096).message
    assert fp32 in check_gqa_bytes(655360).message
    assert "327680" not in check_gqa_bytes(5).message  # never gives the answer away
    assert check_mla_bytes(31104).passed
    assert check_mla_bytes(None).status == "not attempted"
    no_rope, twice, one, mha = mla_bytes_mistakes()
    assert no_rope in check_mla_bytes(27 * 512 * 2).message
    assert twice in check_mla_bytes(2 * 31104).message
    assert one in check_mla_bytes(1152).message
    assert mha in check_mla_bytes(27 * 16 * 320 * 2).message


def test_softcap():
    raw, unscaled, clip = softcap_mistakes()
    assert check_softcap(lambda s, c: c * torch.tanh(s / c)).passed
    assert check_softcap(stub).status == "not attempted"
    assert raw in check_softcap(lambda s, c: c * torch.tanh(s)).message
    assert unscaled in check_softcap(lambda s, c: torch.tanh(s / c)).message
    assert clip in check_softcap(lambda s, c: s.clamp(-c, c)).message
