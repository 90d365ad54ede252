"""Chapter 3's scale study: the fourth cell of its 2x2 design is what it says it is.

The fourth model (``FOURTH``) pairs the unscaled model's saturated start with the scaled
model's steps on the scores; the study records it at the chapter's d_k over every seed.
"""

import math

import ch03_scale_study as study
import pytest
import torch
from selfattn import load_recorded


@pytest.fixture(scope="module")
def ns():
    return study.chapter_namespace()


def _scores_and_step(ns, condition, d_k):
    torch.manual_seed(0)
    model = ns["make_model"](condition, d_k)
    batch = ns["key_value_recall"](64, generator=torch.Generator().manual_seed(0))
    att = model.attention
    x = model.tokens(batch.keys, batch.values, batch.query).detach()

    def scores():
        return att.w_q(x) @ att.w_k(x).transpose(-2, -1) * att.scale

    before = scores()
    torch.nn.functional.cross_entropy(
        model(batch.keys, batch.values, batch.query), batch.target
    ).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    ns["make_optimizer"](model, condition, d_k).step()
    with torch.no_grad():
        return before.detach(), (scores() - before).abs().mean().item()


def test_fourth_cell_has_the_saturated_start_and_the_scaled_step(ns):
    d_k = ns["D_K"]
    start = {}
    moved = {}
    for c in ("scaled", "unscaled", ns["FOURTH"]):
        start[c], moved[c] = _scores_and_step(ns, c, d_k)
    assert torch.equal(start[ns["FOURTH"]], start["unscaled"])  # the saturated start
    assert 0.5 < moved[ns["FOURTH"]] / moved["scaled"] < 2  # the scaled model's step
    assert moved["unscaled"] / moved["scaled"] > math.sqrt(d_k) / 2


def test_fourth_cell_slows_only_w_q_and_w_k(ns):
    torch.manual_seed(0)
    model = ns["make_model"](ns["FOURTH"], 64)
    groups = ns["make_optimizer"](model, ns["FOURTH"], 64).param_groups
    slow = {id(p) for g in groups if g["lr"] == ns["LR"] / 8 for p in g["params"]}
    att = model.attention
    assert slow == {id(att.w_q.weight), id(att.w_k.weight)}
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


def test_the_study_records_the_fourth_cell_on_every_seed(ns):
    recorded = load_recorded("ch03_scale_study")
    assert recorded["config"]["fourth"] == ns["FOURTH"]
    for seed in recorded["config"]["seeds"]:
        run = recorded["runs"][f"{ns['D_K']}/{ns['FOURTH']}/{seed}"]
        assert len(run["losses"]) == recorded["config"]["steps"]
