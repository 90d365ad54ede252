"""selfattn.diagrams: every diagram runs, labels the shapes it is given, has alt text."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure
from selfattn import diagrams as D

X = "\u00d7"


def texts(fig: Figure) -> str:
    """Every string drawn on the figure: figure texts, titles, axes texts, tick labels."""
    parts = [t.get_text() for t in fig.texts]
    if fig._suptitle is not None:
        parts.append(fig._suptitle.get_text())
    for ax in fig.axes:
        parts.append(ax.get_title())
        parts += [t.get_text() for t in ax.texts]
        parts += [t.get_text() for t in ax.get_xticklabels()]
    return "\n".join(parts)


def shape(name, symbols, *sizes):
    return f"{name} ({symbols}) = " + f" {X} ".join(str(s) for s in sizes)


# (function, kwargs, strings the figure and its alt text must both contain)
CASES = [
    (D.information_paths, {"n": 6, "k": 3}, ["n \u2212 1 = 5 steps", "= 3 layers"]),
    (D.information_paths, {"n": 9, "k": 2}, ["n \u2212 1 = 8 steps", "= 8 layers"]),
    (D.dot_product_softmax, {}, ["4.50", "0.82"]),
    (D.dot_product_softmax, {"query": (0.0, 1.0), "keys": ((1.0, 2.0),)}, ["2.00", "1.00"]),
    (
        D.five_steps,
        {"n": 5, "d_model": 6, "d_k": 4, "d_v": 3},
        [
            shape("X", f"n {X} d", 5, 6),
            shape("Q", f"n {X} d_k", 5, 4),
            shape("K", f"n {X} d_k", 5, 4),
            shape("V", f"n {X} d_v", 5, 3),
            shape("S", f"n {X} n", 5, 5),
            shape("A", f"n {X} n", 5, 5),
            shape("output", f"n {X} d_v", 5, 3),
        ],
    ),
    (
        D.five_steps,
        {"n": 7, "d_model": 512, "d_k": 64, "d_v": 32},
        [shape("Q", f"n {X} d_k", 7, 64), shape("output", f"n {X} d_v", 7, 32)],
    ),
    (D.mask_grids, {"n": 5, "length": 3}, [shape("scores", f"n {X} n", 5, 5), "3 real"]),
    (D.mask_grids, {"n": 8, "length": 8}, [shape("scores", f"n {X} n", 8, 8), "8 real"]),
    (D.cache_alignment, {"n": 2, "m": 6}, [shape("mask", f"n {X} m", 2, 6), "m \u2212 n = 4"]),
    (D.cache_alignment, {"n": 1, "m": 9}, [shape("mask", f"n {X} m", 1, 9), "m \u2212 n = 8"]),
    (
        D.multi_head,
        {"n": 5, "d_model": 12, "h": 3},
        [
            shape("head", f"n {X} d_head", 5, 4),
            shape("concat", f"n {X} d", 5, 12),
            "W_QKV",
            f"(d {X} 3d)",
            f"= 12 {X} 36",
            f"= 5 {X} 36",
        ],
    ),
    (
        D.multi_head,
        {"n": 4, "d_model": 64, "h": 8},
        [shape("head", f"n {X} d_head", 4, 8), shape("weights", f"n {X} n", 4, 4)],
    ),
    (D.grouped_query, {"h": 8, "h_kv": 2}, ["h = 8 query heads", "h_kv = 2", "= 4"]),
    (D.grouped_query, {"h": 4, "h_kv": 1}, ["h = 4 query heads", "h_kv = 1", "multi-query"]),
    (D.kv_cache, {"prefill": 5, "steps": 3, "d_head": 16}, [f"5 {X} 16", f"8 {X} 16"]),
    (D.kv_cache, {"prefill": 2, "steps": 1, "d_head": 4}, [f"2 {X} 4", f"3 {X} 4"]),
    (D.rope_rotation, {"d": 8, "position": 3}, ["p = 3", "d = 8", "= 0.3 rad"]),
    (D.rope_rotation, {"d": 64, "position": 5, "symbol": "m"}, ["m = 5", "d = 64", "= 5 rad"]),
    (
        D.flash_tiles,
        {},
        [
            shape("Q", f"n {X} d", 8, 4),
            shape("V", f"m {X} d", 8, 4),
            shape("S_ij", f"B_r {X} B_c", 4, 2),
            "\u03bc, \u2113 (B_r) = 4",
        ],
    ),
    (
        D.flash_tiles,
        {"n": 12, "m": 20, "d": 8, "block_rows": 3, "block_cols": 5},
        [shape("K", f"m {X} d", 20, 8), "T_r = 4", "T_c = 4", shape("Q_i", f"B_r {X} d", 3, 8)],
    ),
    (D.sparse_patterns, {}, [shape("mask", f"n {X} n", 16, 16), "136", "58"]),
    (
        D.sparse_patterns,
        {"n": 10, "window": 2, "stride": 3, "n_global": 2},
        [shape("mask", f"n {X} n", 10, 10), "55", "19"],
    ),
    (D.receptive_field_growth, {}, ["3, 5, 7", "n = 12"]),
    (D.receptive_field_growth, {"n": 20, "window": 4, "layers": 2}, ["4, 7", "n = 20"]),
    (
        D.transformer_family,
        {},
        [
            shape("mask", f"n {X} n", 5, 5),
            "P = (40 / 10)\u00b2 = 16 patches",
            shape("mask", f"(1+P) {X} (1+P)", 17, 17),
            shape("similarity", f"B {X} B", 4, 4),
            "1 of 5",
        ],
    ),
    (
        D.transformer_family,
        {"n": 8, "padding": 3, "image_size": 24, "patch": 4, "batch": 6},
        [
            shape("mask", f"n {X} n", 8, 8),
            "P = (24 / 4)\u00b2 = 36 patches",
            shape("mask", f"(1+P) {X} (1+P)", 37, 37),
            shape("similarity", f"B {X} B", 6, 6),
            "3 of 8",
        ],
    ),
    (D.latent_cache, {}, ["32 numbers", "16 numbers", "8 numbers", "10 numbers"]),
    (D.latent_cache, {"h": 8, "d_head": 8, "kv_rank": 16, "rope_dim": 4}, ["128 numbers"]),
    (D.ring_attention_steps, {}, ["P = 4"]),
    (D.ring_attention_steps, {"world_size": 2}, ["P = 2"]),
    (D.all_to_all_heads, {}, ["sends 3"]),
    (D.all_to_all_heads, {"world_size": 2, "heads": 6}, ["sends 1"]),
    (D.zigzag_layout, {}, ["[3, 7, 11, 15]"]),
    (D.zigzag_layout, {"world_size": 2}, ["[3, 7]"]),
    (D.block_mask_tiles, {}, ["3 full", "6 partial", "causal"]),
    (D.block_mask_tiles, {"n": 8, "block": 2, "window": 3}, ["0 full", "7 partial"]),
    (D.delta_rule_overwrite, {}, ["linear attention", "delta rule"]),
]


@pytest.mark.parametrize(
    ("func", "kwargs", "expected"), CASES, ids=lambda c: getattr(c, "__name__", None)
)
def test_diagram_labels_its_sizes(func, kwargs, expected):
    before = plt.get_fignums()
    fig = func(**kwargs)
    try:
        assert isinstance(fig, Figure)
        drawn = texts(fig)
        for label in expected:
            assert label in drawn, f"{label!r} not drawn by {func.__name__}"
            assert label in fig.alt, f"{label!r} not in the alt text of {func.__name__}"
        assert len(fig.alt) > 80
        w, h = fig.get_size_inches()
        assert w == 7.0 and 1.5 <= h <= 3.5
    finally:
        assert plt.get_fignums() == before  # no pyplot figure left open


def test_multi_head_projects_before_it_splits():
    # X -> W_QKV -> split: the heads share out the projected features, not X's.
    fig = D.multi_head(n=5, d_model=12, h=3)
    (ax,) = fig.axes

    def x_of(start):
        return next(t.get_position()[0] for t in ax.texts if t.get_text().startswith(start))

    assert x_of("X\n") < x_of("W_QKV") < x_of("split") < x_of("head 1:")
    assert "projected" in fig.alt and fig.alt.index("W_QKV") < fig.alt.index("split")


def test_every_public_diagram_is_tested():
    tested = {func.__name__ for func, _, _ in CASES}
    assert tested == set(D.__all__) - {"PALETTE"}


@pytest.mark.parametrize(
    ("func", "kwargs", "name"),
    [
        (D.information_paths, {"n": 1}, "n"),
        (D.information_paths, {"n": 5, "k": 6}, "k"),
        (D.dot_product_softmax, {"query": (0.0, 0.0)}, "query"),
        (D.dot_product_softmax, {"keys": ((1.0, 2.0, 3.0),)}, "keys"),
        (D.dot_product_softmax, {"temperature": 0.0}, "temperature"),
        (D.five_steps, {"n": 0}, "n"),
        (D.five_steps, {"d_k": 2.5}, "d_k"),
        (D.five_steps, {"d_model": True}, "d_model"),
        (D.mask_grids, {"n": 4, "length": 5}, "length"),
        (D.cache_alignment, {"n": 7, "m": 6}, "n"),
        (D.multi_head, {"d_model": 10, "h": 3}, "d_model"),
        (D.grouped_query, {"h": 8, "h_kv": 3}, "h_kv"),
        (D.kv_cache, {"steps": 0}, "steps"),
        (D.rope_rotation, {"d": 7}, "d"),
        (D.rope_rotation, {"position": -1}, "position"),
        (D.rope_rotation, {"base": 1.0}, "base"),
        (D.flash_tiles, {"n": 4, "block_rows": 5}, "block_rows"),
        (D.sparse_patterns, {"window": 0}, "window"),
        (D.receptive_field_growth, {"layers": 7}, "layers"),
        (D.transformer_family, {"n": 1}, "n"),
        (D.transformer_family, {"n": 4, "padding": 4}, "padding"),
        (D.transformer_family, {"image_size": 40, "patch": 3}, "image_size"),
        (D.transformer_family, {"image_size": 80, "patch": 10}, "image_size"),
        (D.transformer_family, {"batch": 1}, "batch"),
        (D.block_mask_tiles, {"n": 1}, "n"),
        (D.block_mask_tiles, {"n": 8, "block": 9}, "block"),
        (D.block_mask_tiles, {"n": 8, "window": 0}, "window"),
    ],
)
def test_invalid_sizes_raise_naming_the_argument(func, kwargs, name):
    with pytest.raises((ValueError, TypeError), match=rf"^{name} "):
        func(**kwargs)


def test_jupyter_shows_the_figure_as_png_without_pyplot():
    fig = D.five_steps()
    png = fig._repr_png_()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert fig.alt.startswith("The five steps")
