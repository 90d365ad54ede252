"""Schematic diagrams for chapters 1-9: boxes, arrows and labelled matrices, drawn by code.

Every function takes the sizes it draws, so the shape labels ("Q (n × d_k) = 5 × 4") always
agree with the sizes a chapter uses, and returns a :class:`matplotlib.figure.Figure` with an
``alt`` attribute: one or two sentences saying what the picture shows, with the same numbers
(use it as the image's alt text). The figures are plain ``Figure`` objects, not pyplot
figures, so they never pile up in pyplot's registry; in Jupyter the returned figure is shown
once, as the cell's result.

==========  ===========================================================================
chapter     diagrams
==========  ===========================================================================
1           :func:`information_paths`
2           :func:`dot_product_softmax`
3           :func:`five_steps`
4           :func:`mask_grids`, :func:`cache_alignment`
5           :func:`multi_head`, :func:`grouped_query`, :func:`kv_cache`
6           :func:`rope_rotation`
7           :func:`flash_tiles`
8           :func:`sparse_patterns`, :func:`receptive_field_growth`
9           :func:`transformer_family`
14          :func:`ring_attention_steps`, :func:`all_to_all_heads`, :func:`zigzag_layout`
12          :func:`block_mask_tiles`
==========  ===========================================================================

Invalid sizes raise ``ValueError`` naming the argument, what it got and what it expected.

Every diagram is drawn in English. Another language is a pass over the finished figure:
``translate(fig, messages, font=...)`` swaps each label for its translation and draws it in
a CJK font (``cjk_font()``); ``labels(fig)`` lists the strings to translate. The Chinese
edition does this when it is built (``_ext/book_zh_widgets.py``), from the catalogs'
``diagram`` messages.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Arc, FancyArrowPatch, FancyBboxPatch, Rectangle

from ._checks import require_base, require_int, require_real

__all__ = [
    "PALETTE",
    "all_to_all_heads",
    "cache_alignment",
    "delta_rule_overwrite",
    "dot_product_softmax",
    "five_steps",
    "flash_tiles",
    "grouped_query",
    "information_paths",
    "kv_cache",
    "latent_cache",
    "block_mask_tiles",
    "mask_grids",
    "multi_head",
    "receptive_field_growth",
    "ring_attention_steps",
    "rope_rotation",
    "sparse_patterns",
    "transformer_family",
    "zigzag_layout",
]

#: The one palette of every diagram (a light fill per role, dark lines and text).
PALETTE: dict[str, str] = {
    "x": "#d6e4f0",
    "q": "#f6c89f",
    "k": "#b7dba3",
    "v": "#cdb9e3",
    "scores": "#f3e08c",
    "weights": "#f2a7a7",
    "out": "#9fd3e0",
    "allowed": "#5b8fc7",
    "masked": "#e4e4e4",
    "highlight": "#d1495b",
    "muted": "#9a9a9a",
    "line": "#333333",
    "slow": "#f4f1ea",
    "fast": "#fff4d6",
}
_HEAD_COLORS = [
    "#f6c89f",
    "#b7dba3",
    "#cdb9e3",
    "#9fd3e0",
    "#f3e08c",
    "#f2a7a7",
    "#d6e4f0",
    "#e0c9a6",
]
_FONT = 8.5
_FIGSIZE = (7.0, 3.0)
_TIMES = "\u00d7"


# ----------------------------------------------------------------------------- helpers
def _shape(name: str, symbols: str, *sizes: int) -> str:
    """The book's shape label: ``Q (n × d_k) = 5 × 4``."""
    dims = f" {_TIMES} ".join(str(s) for s in sizes)
    return f"{name} ({symbols}) = {dims}"


class _Diagram(Figure):
    """A Figure that Jupyter shows as a PNG even when no pyplot backend is set up."""

    alt: str = ""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=self.dpi, bbox_inches="tight")
        return buffer.getvalue()


def _figure(ncols: int = 1, size: tuple[float, float] = _FIGSIZE, xlim=(0, 14), ylim=(0, 6)):
    """A Figure with ``ncols`` blank axes in diagram coordinates (2 units per inch)."""
    fig = _Diagram(figsize=size, layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    for ax in axes:
        ax.set_xlim(*xlim)
        ax.set_ylim(*ylim)
        ax.set_axis_off()
    return fig, list(axes)


def _with_alt(fig: Figure, alt: str) -> Figure:
    """The figure, with ``alt`` (its alt text) attached as ``fig.alt``."""
    fig.alt = alt
    return fig


def _node(ax, x, y, color, size=11):
    """A round node (a marker, so it stays round whatever the axes' aspect)."""
    ax.plot(x, y, "o", ms=size, mfc=color, mec=PALETTE["line"], mew=0.7, zorder=3)


def _box(ax, x, y, w, h, text="", color=PALETTE["x"], *, fontsize=_FONT, **kw):
    ax.add_patch(
        FancyBboxPatch(
            (x, y),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor=color,
            edgecolor=PALETTE["line"],
            linewidth=0.8,
            **kw,
        )
    )
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, start, end, color=PALETTE["line"], *, lw=1.0, style="-|>", rad=0.0, **kw):
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle=style,
            mutation_scale=9,
            color=color,
            linewidth=lw,
            shrinkA=2,
            shrinkB=2,
            connectionstyle=f"arc3,rad={rad}",
            **kw,
        )
    )


def _matrix(ax, x, y, rows, cols, cell, color, *, grid=True, highlight_rows=()):
    """A rows × cols matrix glyph with its lower-left corner at (x, y); returns (w, h)."""
    w, h = cols * cell, rows * cell
    ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor=PALETTE["line"], lw=0.8))
    for r in highlight_rows:
        ax.add_patch(
            Rectangle(
                (x, y + h - (r + 1) * cell),
                w,
                cell,
                facecolor=PALETTE["highlight"],
                edgecolor=PALETTE["line"],
                lw=0.8,
                alpha=0.85,
            )
        )
    if grid and rows <= 24 and cols <= 24:
        for r in range(1, rows):
            ax.plot([x, x + w], [y + r * cell] * 2, color=PALETTE["line"], lw=0.25)
        for c in range(1, cols):
            ax.plot([x + c * cell] * 2, [y, y + h], color=PALETTE["line"], lw=0.25)
    return w, h


def _mask_image(ax, allowed: np.ndarray, title: str, *, show_inf: bool = True):
    """A boolean (n, m) mask on the score grid: allowed cells blue, masked grey (-inf)."""
    n, m = allowed.shape
    ax.set_xlim(-0.6, m + 0.1)
    ax.set_ylim(n + 0.1, -0.9)
    ax.set_aspect("equal")
    ax.set_axis_off()
    small = n <= 10 and m <= 10
    for i in range(n):
        for j in range(m):
            ok = bool(allowed[i, j])
            ax.add_patch(
                Rectangle(
                    (j, i),
                    1,
                    1,
                    facecolor=PALETTE["allowed"] if ok else PALETTE["masked"],
                    edgecolor="white",
                    lw=0.6 if small else 0.2,
                )
            )
            if small and show_inf and not ok:
                ax.text(j + 0.5, i + 0.5, "\u2212\u221e", ha="center", va="center", fontsize=6)
    ax.text(m / 2, -0.25, title, ha="center", va="bottom", fontsize=_FONT)
    if n <= 12:
        for i in range(n):
            ax.text(-0.15, i + 0.5, str(i), ha="right", va="center", fontsize=6)
    if m <= 12:
        for j in range(m):
            ax.text(j + 0.5, n + 0.05, str(j), ha="center", va="top", fontsize=6)


def _mask_panels(
    panels: Sequence[tuple[np.ndarray, str]], suptitle: str, *, show_inf: bool = True
) -> Figure:
    """A row of masks, one ``(allowed, title)`` panel each (see :func:`_mask_image`), under one
    title."""
    fig = _Diagram(figsize=_FIGSIZE, layout="constrained")
    for ax, (allowed, title) in zip(fig.subplots(1, len(panels)), panels):
        _mask_image(ax, allowed, title, show_inf=show_inf)
    fig.suptitle(suptitle, fontsize=_FONT)
    return fig


# ----------------------------------------------------------------------------- chapter 1
def _token_row(ax, n: int, y: float, color=PALETTE["x"], labels: bool = False) -> None:
    """``n`` token nodes along the row at height ``y``, labelled x1..xn below if asked."""
    for i in range(n):
        _node(ax, i, y, color)
        if labels:
            ax.text(i, y - 0.55, f"x{i + 1}", ha="center", va="top", fontsize=7)


def _recurrent_panel(ax, n: int, col) -> None:
    """A chain along the row: ``n - 1`` hand-overs from x1 to xn."""
    _token_row(ax, n, 1.0, labels=True)
    for i in range(n - 1):
        _arrow(ax, (i + 0.28, 1.0), (i + 0.72, 1.0), col)
    ax.text((n - 1) / 2, 3.9, "Recurrent", ha="center", fontsize=_FONT + 0.5, weight="bold")
    ax.text((n - 1) / 2, 3.2, f"n \u2212 1 = {n - 1} steps", ha="center", fontsize=_FONT)
    ax.text((n - 1) / 2, 2.6, f"from x1 to x{n}", ha="center", fontsize=_FONT)


def _convolution_panel(ax, n: int, k: int, layers: int, col) -> None:
    """The last output's cone through ``layers`` causal convolutions of width ``k``."""
    ax.set_ylim(-1.6, max(4.4, layers + 2.4))
    reach = {n - 1}
    rows = [sorted(reach)]
    for _ in range(layers):
        reach = {j for i in reach for j in range(max(0, i - k + 1), i + 1)}
        rows.append(sorted(reach))
    for level in range(layers + 1):
        _token_row(ax, n, float(level), labels=level == 0)
    for level in range(layers, 0, -1):
        for i in rows[layers - level]:
            for j in range(max(0, i - k + 1), i + 1):
                ax.plot([j, i], [level - 1 + 0.28, level - 0.28], color=col, lw=0.8)
    ax.text(
        (n - 1) / 2,
        layers + 1.1,
        f"Convolutions, width k = {k}\n\u2308(n \u2212 1)/(k \u2212 1)\u2309 = {layers} layers",
        ha="center",
        va="bottom",
        fontsize=_FONT,
    )


def _attention_panel(ax, n: int, col) -> None:
    """Self-attention: every pair joined in one step."""
    _token_row(ax, n, 0.0, labels=True)
    _token_row(ax, n, 2.0)
    for i in range(n):
        for j in range(n):
            ax.plot([j, i], [0.28, 1.72], color=col, lw=0.5, alpha=0.7)
    ax.text((n - 1) / 2, 3.9, "Self-attention", ha="center", fontsize=_FONT + 0.5, weight="bold")
    ax.text(
        (n - 1) / 2, 3.2, f"1 step, all {n}\u00b2 = {n * n} pairs", ha="center", fontsize=_FONT
    )


def _information_paths_alt(n: int, k: int, layers: int) -> str:
    """The alt text of :func:`information_paths`, with the figure's numbers."""
    return (
        f"Three ways to connect n = {n} tokens. Recurrent: a chain of arrows, "
        f"n \u2212 1 = {n - 1} steps from x1 to x{n}. "
        f"Convolutions of width k = {k}: \u2308(n \u2212 1)/(k \u2212 1)\u2309 = {layers} layers "
        f"the last output sees the first input, the reach growing by k \u2212 1 = {k - 1} "
        f"positions per layer. Self-attention: one layer of lines joining all {n * n} pairs, "
        "one step from every token to every token."
    )


def information_paths(n: int = 6, k: int = 3) -> Figure:
    """Chapter 1: how many steps information takes from the first token to the last.

    Three panels over ``n`` tokens: a recurrent chain (``n - 1`` hand-overs), a stack of
    causal convolutions of width ``k`` (``ceil((n - 1) / (k - 1))`` layers before the last
    output sees the first input: the reach grows linearly with depth), and self-attention
    (one step between every pair).

    Args:
        n: number of tokens, 2 to 12.
        k: convolution width, 2 to ``n``.

    Returns:
        The Figure; ``fig.alt`` describes it with the same numbers.
    """
    n = require_int(n, "n", 2, 12)
    k = require_int(k, "k", 2, n)
    layers = math.ceil((n - 1) / (k - 1))
    fig, axes = _figure(3, size=(7.0, 3.0), xlim=(-0.7, n - 0.3), ylim=(-1.6, 4.4))
    col = PALETTE["highlight"]
    _recurrent_panel(axes[0], n, col)
    _convolution_panel(axes[1], n, k, layers, col)
    _attention_panel(axes[2], n, col)
    return _with_alt(fig, _information_paths_alt(n, k, layers))


# ----------------------------------------------------------------------------- chapter 2
def _query_and_keys(query, keys, temperature) -> tuple[np.ndarray, np.ndarray]:
    """The checked query ``(2,)`` and keys ``(k, 2)`` of :func:`dot_product_softmax`."""
    q = np.asarray(require_real(query, "query"), dtype=float)
    if q.shape != (2,) or not np.isfinite(q).all() or not q.any():
        raise ValueError(f"query must be a finite, non-zero 2-D vector, got {query!r}")
    kk = np.asarray(require_real(keys, "keys"), dtype=float)
    if kk.ndim != 2 or kk.shape[1] != 2 or not 1 <= len(kk) <= 6 or not np.isfinite(kk).all():
        raise ValueError(f"keys must be 1 to 6 finite 2-D vectors, got shape {kk.shape}")
    if isinstance(temperature, bool) or not (
        isinstance(temperature, (int, float)) and temperature > 0 and math.isfinite(temperature)
    ):
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    return q, kk


def _draw_key_shadows(ax, q: np.ndarray, kk: np.ndarray) -> None:
    """The query and keys as arrows in the plane, each key dropped onto the query's line."""
    unit = q / np.linalg.norm(q)
    lim = 1.15 * max(np.abs(kk).max(), np.abs(q).max(), 1.0)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    ax.axhline(0, color=PALETTE["masked"], lw=0.6, zorder=0)
    ax.axvline(0, color=PALETTE["masked"], lw=0.6, zorder=0)
    ax.plot(*(np.outer([-lim * 2, lim * 2], unit).T), color=PALETTE["q"], lw=0.8, zorder=0)
    ax.tick_params(labelsize=7)
    _arrow(ax, (0, 0), tuple(q), PALETTE["highlight"], lw=2.0)
    ax.text(*(q * 1.06), "q", color=PALETTE["highlight"], fontsize=_FONT + 1, weight="bold")
    for j, key in enumerate(kk):
        color = _HEAD_COLORS[(j + 1) % len(_HEAD_COLORS)]
        _arrow(ax, (0, 0), tuple(key), PALETTE["line"], lw=1.2)
        foot = (key @ unit) * unit
        ax.plot([key[0], foot[0]], [key[1], foot[1]], ls="--", color=PALETTE["muted"], lw=0.8)
        ax.plot(*foot, "o", color=color, markeredgecolor=PALETTE["line"], ms=5)
        ax.text(*(key * 1.08), f"k{j + 1}", fontsize=_FONT, ha="center", va="center")
    ax.set_title("dot product = \u2016q\u2016 \u00d7 shadow of k on q", fontsize=_FONT)


def _draw_score_bars(bx, scores: np.ndarray, weights: np.ndarray, temperature: float) -> None:
    """Each key's score (yellow) beside its softmax weight (red), values printed on the bars."""
    idx = np.arange(len(scores))
    bx.bar(idx - 0.2, scores, 0.4, color=PALETTE["scores"], edgecolor=PALETTE["line"], lw=0.6)
    bx.bar(idx + 0.2, weights, 0.4, color=PALETTE["weights"], edgecolor=PALETTE["line"], lw=0.6)
    bx.axhline(0, color=PALETTE["line"], lw=0.6)
    for j in idx:
        bx.text(
            j - 0.2,
            scores[j],
            f"{scores[j]:.2f}",
            ha="center",
            va="bottom" if scores[j] >= 0 else "top",
            fontsize=7,
        )
        bx.text(j + 0.2, weights[j], f"{weights[j]:.2f}", ha="center", va="bottom", fontsize=7)
    bx.set_xticks(idx, [f"k{j + 1}" for j in idx], fontsize=_FONT)
    bx.tick_params(axis="y", labelsize=7)
    for side in ("top", "right"):
        bx.spines[side].set_visible(False)
    temp = "" if temperature == 1 else f" / {temperature:g}"
    bx.set_title(f"scores q\u00b7k (yellow) \u2192 softmax(scores{temp}) (red)", fontsize=_FONT)


def dot_product_softmax(
    query: Sequence[float] = (2.0, 1.0),
    keys: Sequence[Sequence[float]] = ((2.0, 0.5), (0.5, 2.0), (-1.5, 1.0)),
    temperature: float = 1.0,
) -> Figure:
    """Chapter 2: a query and keys as 2-D arrows, each score the key's projection on the query.

    Left: the query ``q`` and the keys ``k_j``; a dashed line drops each key onto the query's
    direction, and ``q · k_j = ‖q‖ × (signed length of that shadow)``. Right: the scores and
    the weights ``softmax(scores / temperature)`` as bars.

    Args:
        query: the 2-D query, not zero.
        keys: 1 to 6 two-dimensional keys.
        temperature: positive divisor of the scores before the softmax.

    Returns:
        The Figure; ``fig.alt`` names every score and weight.
    """
    q, kk = _query_and_keys(query, keys, temperature)
    scores = kk @ q
    z = scores / temperature
    weights = np.exp(z - z.max())
    weights /= weights.sum()

    fig = _Diagram(figsize=_FIGSIZE, layout="constrained")
    ax, bx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    _draw_key_shadows(ax, q, kk)
    _draw_score_bars(bx, scores, weights, temperature)
    pairs = "; ".join(
        f"k{j + 1}: score {scores[j]:.2f}, weight {weights[j]:.2f}" for j in range(len(kk))
    )
    alt = (
        f"Left: the query q = ({q[0]:g}, {q[1]:g}) and {len(kk)} keys drawn as arrows in the "
        "plane, each key dropped by a dashed line onto the direction of q; the dot product is "
        "the length of q times that shadow. Right: bars of the scores and of the softmax "
        f"weights{' at temperature ' + format(temperature, 'g') if temperature != 1 else ''}, "
        f"which sum to 1 ({pairs})."
    )
    return _with_alt(fig, alt)


# ----------------------------------------------------------------------------- chapter 3
def _drawn_length(count: int, cell: float) -> float:
    """The length of ``count`` cells of side ``cell``, never thinner than a visible 0.12."""
    return max(count * cell, 0.12)


def _scaled_matrix(ax, xc, yc, rows, cols, cell, color, name, label):
    """A ``rows × cols`` matrix centred at ``(xc, yc)``, ``cell`` units a cell, its name above
    and its shape label below; returns the right edge and the centre height."""
    h, w = _drawn_length(rows, cell), _drawn_length(cols, cell)
    x = xc - w / 2
    grid = rows <= 16 and cols <= 16
    _matrix(ax, x, yc - h / 2, rows, cols, h / rows, color, grid=False)
    if grid:
        for r in range(1, rows):
            ax.plot([x, x + w], [yc - h / 2 + r * h / rows] * 2, color="k", lw=0.25)
        for c in range(1, cols):
            ax.plot([x + c * w / cols] * 2, [yc - h / 2, yc + h / 2], color="k", lw=0.25)
    ax.text(x + w / 2, yc + h / 2 + 0.08, name, ha="center", va="bottom", fontsize=_FONT)
    ax.text(x + w / 2, yc - h / 2 - 0.08, label, ha="center", va="top", fontsize=7.5)
    return x + w, yc


#: where :func:`five_steps` puts its columns (x of each centre) and the flow's middle height
_FIVE_STEP_COLUMNS = {"X": 1.0, "QKV": 3.7, "S": 6.6, "A": 9.5, "O": 12.5}
_FIVE_STEP_MID = 3.3


def _draw_projection(ax, cell, n, d_model, d_k, d_v, labels) -> dict[str, tuple]:
    """Step 1: ``X`` and the arrows to ``Q``, ``K`` and ``V`` stacked in one column; returns
    the right edge and centre of each of Q, K and V."""
    centre, mid = _FIVE_STEP_COLUMNS, _FIVE_STEP_MID
    xr, _ = _scaled_matrix(
        ax, centre["X"], mid, n, d_model, cell, PALETTE["x"], "X: n tokens", labels["X"]
    )
    ys = {"Q": 5.5, "K": 3.3, "V": 1.1}
    left = centre["QKV"] - max(_drawn_length(d_k, cell), _drawn_length(d_v, cell)) / 2
    ends = {}
    for name, color, cols, formula in (
        ("Q", PALETTE["q"], d_k, "Q = X W_Q"),
        ("K", PALETTE["k"], d_k, "K = X W_K"),
        ("V", PALETTE["v"], d_v, "V = X W_V"),
    ):
        x0 = centre["QKV"] - _drawn_length(cols, cell) / 2
        _arrow(ax, (xr + 0.05, mid), (x0 - 0.05, ys[name]))
        ends[name] = _scaled_matrix(
            ax, centre["QKV"], ys[name], n, cols, cell, color, formula, labels[name]
        )
    ax.text((xr + left) / 2, 6.45, "1 project", ha="center", fontsize=_FONT, weight="bold")
    return ends


def _draw_score_softmax_mix(ax, cell, n, d_v, labels, ends) -> None:
    """Steps 2-5: Q and K into the scaled scores ``S``, the row softmax ``A``, and ``A V``."""
    centre, mid = _FIVE_STEP_COLUMNS, _FIVE_STEP_MID
    side_n = _drawn_length(n, cell)
    sx = centre["S"] - side_n / 2
    _arrow(ax, (ends["Q"][0] + 0.05, ends["Q"][1]), (sx - 0.05, mid + 0.2))
    _arrow(ax, (ends["K"][0] + 0.05, ends["K"][1]), (sx - 0.05, mid))
    ax.text(
        centre["S"] - 1.3, 6.45, "2 score, 3 scale", ha="center", fontsize=_FONT, weight="bold"
    )
    xs, _ = _scaled_matrix(
        ax, centre["S"], mid, n, n, cell, PALETTE["scores"], "S = QK\u1d40/\u221ad_k", labels["S"]
    )
    xa0 = centre["A"] - side_n / 2
    _arrow(ax, (xs + 0.05, mid), (xa0 - 0.05, mid))
    ax.text((xs + xa0) / 2, 6.45, "4 softmax", ha="center", fontsize=_FONT, weight="bold")
    ax.text((xs + xa0) / 2, mid + 0.1, "each row", ha="center", va="bottom", fontsize=7)
    xa, _ = _scaled_matrix(
        ax, centre["A"], mid, n, n, cell, PALETTE["weights"], "A = softmax(S)", labels["A"]
    )
    ox = centre["O"] - _drawn_length(d_v, cell) / 2
    _arrow(ax, (xa + 0.05, mid), (ox - 0.05, mid))
    _arrow(ax, (ends["V"][0] + 0.05, ends["V"][1]), (ox - 0.05, mid - 0.2), rad=0.15)
    ax.text((xa + ox) / 2, 6.45, "5 mix", ha="center", fontsize=_FONT, weight="bold")
    _scaled_matrix(ax, centre["O"], mid, n, d_v, cell, PALETTE["out"], "output = A V", labels["O"])


def five_steps(n: int = 5, d_model: int = 6, d_k: int = 4, d_v: int = 3) -> Figure:
    """Chapter 3: the five steps as a flow, each matrix drawn to scale with its shape.

    ``X (n × d)`` → project → ``Q (n × d_k)``, ``K (n × d_k)``, ``V (n × d_v)`` → score and
    scale → ``S = QKᵀ/√d_k (n × n)`` → softmax → ``A (n × n)`` → mix with V →
    ``output (n × d_v)``.

    Args:
        n: tokens, 1 to 64. d_model: the model width ``d``. d_k: query/key width.
        d_v: value width (each 1 to 4096).

    Returns:
        The Figure; ``fig.alt`` lists each step with its shape.
    """
    n = require_int(n, "n", 1, 64)
    d_model = require_int(d_model, "d_model", 1, 4096)
    d_k = require_int(d_k, "d_k", 1, 4096)
    d_v = require_int(d_v, "d_v", 1, 4096)
    fig, (ax,) = _figure(1, size=(7.0, 3.4), xlim=(0, 14), ylim=(0, 6.8))
    # one cell size for every matrix, so the widths and heights compare
    cell = max(min(1.1 / n, 1.25 / max(d_model, d_k, d_v, n)), 0.02)
    labels = {
        "X": _shape("X", "n \u00d7 d", n, d_model),
        "Q": _shape("Q", "n \u00d7 d_k", n, d_k),
        "K": _shape("K", "n \u00d7 d_k", n, d_k),
        "V": _shape("V", "n \u00d7 d_v", n, d_v),
        "S": _shape("S", "n \u00d7 n", n, n),
        "A": _shape("A", "n \u00d7 n", n, n),
        "O": _shape("output", "n \u00d7 d_v", n, d_v),
    }
    ends = _draw_projection(ax, cell, n, d_model, d_k, d_v, labels)
    _draw_score_softmax_mix(ax, cell, n, d_v, labels, ends)
    alt = (
        f"The five steps of self-attention as a flow of matrices drawn to scale. {labels['X']} "
        f"is projected (step 1) to {labels['Q']}, {labels['K']} and {labels['V']}. Q and K "
        f"give the scaled scores {labels['S']} (steps 2 and 3), a softmax along each row "
        f"gives the weights {labels['A']} (step 4), and A times V gives the {labels['O']} "
        "(step 5)."
    )
    return _with_alt(fig, alt)


# ----------------------------------------------------------------------------- chapter 4
def mask_grids(n: int = 5, length: int = 3) -> Figure:
    """Chapter 4: the causal and the padding mask drawn on the ``(n × n)`` score matrix.

    Three panels: causal (key ``j <= i``), padding (only the first ``length`` keys are real
    tokens), and both combined by a logical AND. Masked cells hold ``-inf`` before softmax.

    Args:
        n: sequence length, 2 to 16.
        length: real tokens of the padded sequence, 1 to ``n``.

    Returns:
        The Figure; ``fig.alt`` describes it with the same numbers.
    """
    n = require_int(n, "n", 2, 16)
    length = require_int(length, "length", 1, n)
    i, j = np.indices((n, n))
    causal = j <= i
    padding = np.broadcast_to(j < length, (n, n))
    grid_label = _shape("scores", "n \u00d7 n", n, n)
    fig = _mask_panels(
        [
            (causal, "causal: key j \u2264 query i"),
            (padding, f"padding: {length} real, {n - length} padded"),
            (causal & padding, "causal AND padding"),
        ],
        f"{grid_label}: rows = queries, columns = keys; grey = \u2212\u221e, weight 0",
    )
    alt = (
        f"Three {n} by {n} grids of scores (n \u00d7 n) = {n} \u00d7 {n}, rows queries and "
        "columns keys, blue where a query may attend and grey with minus infinity where it "
        f"may not. Causal: the lower triangle, key j \u2264 query i. Padding with {length} real "
        f"tokens: the last {n - length} key columns grey. Both combined: the lower triangle "
        f"without those columns."
    )
    return _with_alt(fig, alt)


def cache_alignment(n: int = 2, m: int = 6) -> Figure:
    """Chapter 4: top-left against bottom-right causal alignment of ``n`` queries on ``m`` keys.

    With a cache the ``n`` new queries are the *last* ``n`` positions: bottom-right lets query
    ``i`` see keys ``0 .. i + m - n`` (right for decoding); top-left (``is_causal=True`` in
    torch SDPA) lets it see only ``0 .. i``.

    Args:
        n: new queries, 1 to ``m``. m: keys (cached plus new), 1 to 16.

    Returns:
        The Figure; ``fig.alt`` describes it with the same numbers.
    """
    m = require_int(m, "m", 1, 16)
    n = require_int(n, "n", 1, m)
    i, j = np.indices((n, m))
    fig = _Diagram(figsize=(7.0, 2.6), layout="constrained")
    axes = fig.subplots(1, 2)
    _mask_image(axes[0], j <= i, "top-left (is_causal=True): query i sees 0..i")
    _mask_image(axes[1], j <= i + m - n, "bottom-right: query i sees 0..i + m \u2212 n")
    for ax in axes:
        ax.set_ylim(n + 1.1, -1.4)
        ax.annotate(
            "",
            xy=(0, n + 0.75),
            xytext=(m - n, n + 0.75),
            arrowprops={"arrowstyle": "|-|", "color": PALETTE["muted"], "lw": 0.8},
        )
        ax.text(
            (m - n) / 2,
            n + 0.8,
            f"cached: m \u2212 n = {m - n}",
            ha="center",
            va="top",
            fontsize=7,
        )
    grid_label = _shape("mask", "n \u00d7 m", n, m)
    fig.suptitle(
        f"{grid_label}: {n} new queries against {m} keys; "
        "only bottom-right matches the full causal pass",
        fontsize=_FONT,
    )
    alt = (
        f"Two causal masks, mask (n \u00d7 m) = {n} \u00d7 {m}, for {n} new queries "
        f"against {m} keys, m \u2212 n = {m - n} of them from the cache. "
        "Top-left, what is_causal=True does: query i sees keys "
        f"0 to i only, so the newest query misses {m - n} keys. Bottom-right: query i sees keys "
        f"0 to i + m \u2212 n, the last query sees all {m}, as decoding needs."
    )
    return _with_alt(fig, alt)


# ----------------------------------------------------------------------------- chapter 5
def _draw_head_lanes(ax, h: int, top: float, bottom: float, x0: float) -> None:
    """The projected features split into ``h`` coloured slices (the bar at ``x0``), each
    feeding its own head's lane: ``Q, K, V`` → softmax → an arrow towards the concatenation."""
    lane = (top - bottom) / h
    _box(ax, x0, bottom, 0.6, top - bottom, "", PALETTE["x"])
    for k in range(h):
        y0 = bottom + (h - 1 - k) * lane
        ax.add_patch(
            Rectangle(
                (x0, y0), 0.6, lane, facecolor=_HEAD_COLORS[k], edgecolor=PALETTE["line"], lw=0.6
            )
        )
        yc = y0 + lane / 2
        _arrow(ax, (x0 + 0.6, yc), (x0 + 1.4, yc))
        _box(
            ax,
            x0 + 1.4,
            yc - lane * 0.35,
            2.3,
            lane * 0.7,
            f"head {k + 1}: Q, K, V",
            _HEAD_COLORS[k],
            fontsize=7.5,
        )
        _arrow(ax, (x0 + 3.7, yc), (x0 + 4.4, yc))
        _box(
            ax,
            x0 + 4.4,
            yc - lane * 0.35,
            1.5,
            lane * 0.7,
            "softmax",
            PALETTE["weights"],
            fontsize=7.5,
        )
        _arrow(ax, (x0 + 5.9, yc), (x0 + 6.8, 3.0 + (yc - 3.0) * 0.5))


def _draw_concat_and_output(ax, n: int, d_model: int, h: int, lab_c: str, x0: float) -> None:
    """The head outputs stacked back into one ``(n × d)`` bar at ``x0``, then ``W_O`` and the
    output."""
    _box(ax, x0, 1.8, 0.5, 2.4, "", PALETTE["x"])
    for k in range(h):
        ax.add_patch(
            Rectangle(
                (x0, 1.8 + (h - 1 - k) * 2.4 / h),
                0.5,
                2.4 / h,
                facecolor=_HEAD_COLORS[k],
                edgecolor=PALETTE["line"],
                lw=0.6,
            )
        )
    ax.text(x0 + 0.25, 1.05, lab_c, ha="center", va="top", fontsize=7.5)
    ax.text(x0 + 0.25, 4.35, "concatenate", ha="center", va="bottom", fontsize=7.5)
    _arrow(ax, (x0 + 0.5, 3.0), (x0 + 1.3, 3.0))
    ax.text(x0 + 0.9, 3.1, "W_O", ha="center", va="bottom", fontsize=7.5)
    _box(
        ax,
        x0 + 1.3,
        2.3,
        2.2,
        1.4,
        "output\n(n \u00d7 d)" + f"\n= {n} \u00d7 {d_model}",
        PALETTE["out"],
    )


def multi_head(n: int = 5, d_model: int = 12, h: int = 3) -> Figure:
    """Chapter 5: project ``X`` with ``W_QKV``, split the projected features into ``h`` heads
    of ``d_head``, attend in parallel, concatenate.

    ``X (n × d)`` → ``W_QKV (d × 3d)`` → Q, K, V ``(n × 3d)``, each split into ``h`` slices
    ``(n × d_head)`` → one attention per head, weights ``(n × n)`` → outputs
    ``(n × d_head)`` → concatenated ``(n × d)`` → ``W_O`` → ``(n × d)``. The split is of the
    projected features, never of ``X``: every head sees all ``d`` input features.

    Args:
        n: tokens, 1 to 64. d_model: ``d``, divisible by ``h``. h: heads, 1 to 8.

    Returns:
        The Figure; ``fig.alt`` describes it with the same numbers.
    """
    n = require_int(n, "n", 1, 64)
    h = require_int(h, "h", 1, 8)
    d_model = require_int(d_model, "d_model", 1, 8192)
    if d_model % h:
        raise ValueError(f"d_model must be divisible by h = {h}, got d_model = {d_model}")
    d_head = d_model // h
    fig, (ax,) = _figure(1, size=(7.0, 3.3), xlim=(0, 15.4), ylim=(0, 6.6))
    top, bottom = 5.4, 0.6
    bar = 4.5  # x of the split bar: X, then W_QKV, then the split
    lab_x = _shape("X", "n \u00d7 d", n, d_model)
    lab_p = _shape("W_QKV", "d \u00d7 3d", d_model, 3 * d_model)
    lab_qkv = _shape("Q, K, V", "n \u00d7 3d", n, 3 * d_model)
    lab_h = _shape("head", "n \u00d7 d_head", n, d_head)
    lab_w = _shape("weights", "n \u00d7 n", n, n)
    lab_c = _shape("concat", "n \u00d7 d", n, d_model)
    lab_y = _shape("output", "n \u00d7 d", n, d_model)
    _box(ax, 0.1, 2.3, 1.6, 1.4, f"X\n(n \u00d7 d)\n= {n} \u00d7 {d_model}")
    _arrow(ax, (1.7, 3.0), (2.1, 3.0))
    _box(
        ax,
        2.1,
        2.2,
        1.9,
        1.6,
        f"W_QKV\n(d \u00d7 3d)\n= {d_model} \u00d7 {3 * d_model}",
        PALETTE["scores"],
        fontsize=7.5,
    )
    _arrow(ax, (4.0, 3.0), (bar, 3.0))
    ax.text(
        3.05,
        2.05,
        f"Q, K, V\n(n \u00d7 3d)\n= {n} \u00d7 {3 * d_model}",
        ha="center",
        va="top",
        fontsize=7.5,
    )
    _draw_head_lanes(ax, h, top, bottom, bar)
    ax.text(bar + 0.3, top + 0.15, f"split\nh = {h}", ha="center", va="bottom", fontsize=_FONT)
    ax.text(bar + 2.55, top + 0.15, lab_h, ha="center", va="bottom", fontsize=7.5)
    ax.text(bar + 5.15, top + 0.6, lab_w, ha="center", va="bottom", fontsize=7.5)
    _draw_concat_and_output(ax, n, d_model, h, lab_c, bar + 6.8)
    ax.text(
        7.7,
        0.05,
        f"the projected d = {d_model} features of Q, K and V split into "
        f"h \u00d7 d_head = {h} \u00d7 {d_head}; {lab_y}",
        ha="center",
        va="bottom",
        fontsize=_FONT,
    )
    alt = (
        f"Multi-head attention: the input {lab_x} is first projected by {lab_p} into "
        f"{lab_qkv}; then the projected d = {d_model} features of each of Q, K and V are "
        f"split into h = {h} heads of d_head = {d_head}, each a {lab_h}, so every head sees "
        f"all of X's features. Every head computes its own {lab_w} in parallel; the {h} head "
        f"outputs are concatenated back to {lab_c} and the projection W_O gives the {lab_y}."
    )
    return _with_alt(fig, alt)


def grouped_query(h: int = 8, h_kv: int = 2) -> Figure:
    """Chapter 5: grouped-query attention, ``h`` query heads sharing ``h_kv`` key/value heads.

    Each key/value head serves a group of ``h / h_kv`` consecutive query heads; ``h_kv = h``
    is multi-head attention and ``h_kv = 1`` multi-query attention.

    Args:
        h: query heads, 1 to 16. h_kv: key/value heads, a divisor of ``h``.

    Returns:
        The Figure; ``fig.alt`` describes it with the same numbers.
    """
    h = require_int(h, "h", 1, 16)
    h_kv = require_int(h_kv, "h_kv", 1, h)
    if h % h_kv:
        raise ValueError(f"h_kv must divide h = {h}, got h_kv = {h_kv}")
    group = h // h_kv
    fig, (ax,) = _figure(1, size=(7.0, 2.8), xlim=(0, 14), ylim=(0, 5.6))
    w = 12.0 / h
    qx = [1.0 + w * k + w / 2 for k in range(h)]
    for k in range(h):
        g = k // group
        _box(
            ax,
            qx[k] - w * 0.4,
            3.7,
            w * 0.8,
            0.8,
            f"Q{k + 1}" if h <= 12 else "",
            _HEAD_COLORS[g % len(_HEAD_COLORS)],
            fontsize=7.5,
        )
    wk = 12.0 / h_kv
    for g in range(h_kv):
        cx = 1.0 + wk * g + wk / 2
        half = min(wk * 0.4, 1.4)
        _box(
            ax,
            cx - half,
            0.9,
            2 * half,
            0.8,
            f"K{g + 1}, V{g + 1}" if h_kv <= 8 else "",
            _HEAD_COLORS[g % len(_HEAD_COLORS)],
            fontsize=7.5,
        )
        for k in range(g * group, (g + 1) * group):
            ax.plot([cx, qx[k]], [1.7, 3.7], color=PALETTE["line"], lw=0.7)
    ax.text(7.0, 4.75, f"h = {h} query heads", ha="center", va="bottom", fontsize=_FONT)
    kind = "multi-head" if h_kv == h else ("multi-query" if h_kv == 1 else "grouped-query")
    ax.text(
        7.0,
        0.15,
        f"h_kv = {h_kv} key/value heads, each shared by h / h_kv = {group} query heads "
        f"({kind}); the KV cache is h / h_kv = {group}\u00d7 smaller",
        ha="center",
        va="bottom",
        fontsize=_FONT,
    )
    alt = (
        f"{kind.capitalize()} attention ({kind}): a row of h = {h} query heads above a row "
        f"of h_kv = {h_kv} key/value heads; lines join each key/value head to the "
        f"h / h_kv = {group} consecutive query heads that share it, so the cache holds "
        f"{h_kv} key and value heads instead of {h}."
    )
    return _with_alt(fig, alt)


def kv_cache(prefill: int = 5, steps: int = 3, d_head: int = 16) -> Figure:
    """Chapter 5: the key cache growing by one row per decoded token.

    Panels for the prefill and each decoding step: the cached keys ``(t × d_head)``, the row
    added at that step highlighted; the values grow the same way.

    Args:
        prefill: positions cached by the prefill, 1 to 16.
        steps: decoding steps drawn, 1 to 4.
        d_head: key width, 1 to 64.

    Returns:
        The Figure; ``fig.alt`` describes it with the same numbers.
    """
    prefill = require_int(prefill, "prefill", 1, 16)
    steps = require_int(steps, "steps", 1, 4)
    d_head = require_int(d_head, "d_head", 1, 64)
    total = prefill + steps
    panels = steps + 1
    cell = min(4.2 / total, 2.6 / d_head)
    bottom = 5.1 - total * cell - 1.0
    height = min(3.2, max(1.6, (5.9 - bottom) / 2))
    fig, axes = _figure(panels, size=(7.0, height), xlim=(0, 3), ylim=(bottom, 5.9))
    for p, ax in enumerate(axes):
        t = prefill + p
        h = t * cell
        new = range(prefill) if p == 0 else [t - 1]
        _matrix(
            ax,
            0.2,
            5.1 - h,
            t,
            d_head,
            cell,
            PALETTE["k"],
            grid=d_head <= 24 and t <= 24,
            highlight_rows=new,
        )
        title = "prefill" if p == 0 else f"decode step {p}"
        ax.text(1.5, 5.35, title, ha="center", va="bottom", fontsize=_FONT, weight="bold")
        ax.text(
            1.5,
            4.95 - h,
            _shape("K", "t \u00d7 d_head", t, d_head),
            ha="center",
            va="top",
            fontsize=7,
        )
        ax.text(
            1.5,
            4.55 - h,
            "+ prompt" if p == 0 else "+ 1 row (red)",
            ha="center",
            va="top",
            fontsize=7,
            color=PALETTE["highlight"],
        )
    alt = (
        f"The key cache over {panels} moments: the prefill writes {prefill} rows of width "
        f"d_head = {d_head}, then each of {steps} decoding steps appends one row (in red), "
        f"from (t \u00d7 d_head) = {prefill} \u00d7 {d_head} to {total} \u00d7 {d_head}. "
        "Old rows are never recomputed; the value cache grows the same way."
    )
    return _with_alt(fig, alt)


# ----------------------------------------------------------------------------- chapter 6
def _draw_rotated_pair(ax, i: int, d: int, position: int, base: float, symbol: str) -> str:
    """Pair ``i`` on the unit circle, grey before and red after turning by ``position · θ_i``,
    the swept angle marked; returns the alt text's phrase for it."""
    start = 0.35  # the pair's angle before rotation, the same in every panel
    ax.set_aspect("equal")
    theta = base ** (-2 * i / d)
    angle = position * theta
    ax.add_patch(Arc((0, 0), 2, 2, color=PALETTE["masked"], lw=0.8))
    before = np.array([math.cos(start), math.sin(start)])
    after = np.array([math.cos(start + angle), math.sin(start + angle)])
    _arrow(ax, (0, 0), tuple(before), PALETTE["muted"], lw=1.5)
    _arrow(ax, (0, 0), tuple(after), PALETTE["highlight"], lw=1.8)
    sweep = math.degrees(angle) % 360
    if sweep > 0.5:
        ax.add_patch(
            Arc(
                (0, 0),
                0.7,
                0.7,
                theta1=math.degrees(start),
                theta2=math.degrees(start) + sweep,
                color=PALETTE["line"],
                lw=0.8,
            )
        )
    ax.text(
        0,
        1.42,
        f"pair {i}: dims {2 * i}, {2 * i + 1}",
        ha="center",
        va="top",
        fontsize=_FONT,
        weight="bold",
    )
    ax.text(0, -1.15, f"\u03b8_{i} = {theta:.3g}", ha="center", va="top", fontsize=7.5)
    ax.text(
        0,
        -1.5,
        f"{symbol}\u00b7\u03b8_{i} = {angle:.3g} rad",
        ha="center",
        va="top",
        fontsize=7.5,
    )
    return f"pair {i} turns by {symbol}\u00b7\u03b8_{i} = {angle:.3g} rad"


def rope_rotation(
    d: int = 8, position: int = 3, base: float = 10000.0, *, symbol: str = "p"
) -> Figure:
    """Chapter 6: RoPE turns pair ``i`` of a vector at position ``p`` by the angle ``p θ_i``.

    One panel per pair (up to four, spread over the ``d / 2`` pairs), ``θ_i = base^(-2i/d)``:
    the pair before rotation (grey) and after (red), with the angle. High-frequency pairs
    turn a lot, low-frequency pairs hardly at all.

    Args:
        d: even vector width, 2 to 4096. position: the position, 0 to 10**6.
        base: the frequency base (> 1). symbol: the letter the chapter uses for the position.

    Returns:
        The Figure; ``fig.alt`` names every angle.
    """
    d = require_int(d, "d", 2, 4096)
    if d % 2:
        raise ValueError(f"d must be even (pairs of dimensions), got {d}")
    position = require_int(position, "position", 0, 10**6)
    require_base(base)
    if not isinstance(symbol, str) or not symbol:
        raise ValueError(f"symbol must be a non-empty string, got {symbol!r}")
    pairs = d // 2
    shown = sorted(set(np.linspace(0, pairs - 1, min(pairs, 4)).round().astype(int).tolist()))
    fig, axes = _figure(len(shown), size=(7.0, 2.9), xlim=(-1.35, 1.35), ylim=(-1.9, 1.5))
    parts = [_draw_rotated_pair(ax, i, d, position, base, symbol) for ax, i in zip(axes, shown)]
    fig.suptitle(
        f"RoPE at position {symbol} = {position}, d = {d}: grey before, red after "
        f"rotation by {symbol}\u00b7\u03b8_i, \u03b8_i = {base:g}^(\u22122i/d)",
        fontsize=_FONT,
    )
    alt = (
        f"RoPE for a vector of d = {d} dimensions at position {symbol} = {position}: "
        f"{len(shown)} of its {pairs} pairs of dimensions drawn as arrows on a unit circle, grey "
        f"before and red after rotation by {symbol}\u00b7\u03b8_i with \u03b8_i = "
        f"{base:g}^(\u22122i/d); " + "; ".join(parts) + ". The lengths do not change."
    )
    return _with_alt(fig, alt)


# ----------------------------------------------------------------------------- chapter 7
def _draw_memories(ax) -> None:
    """The two memories as panels: slow (HBM) on the left, fast (SRAM) on the right."""
    ax.add_patch(
        Rectangle(
            (0.1, 0.1), 7.0, 6.3, facecolor=PALETTE["slow"], edgecolor=PALETTE["line"], lw=0.8
        )
    )
    ax.add_patch(
        Rectangle(
            (8.6, 0.1), 5.3, 6.3, facecolor=PALETTE["fast"], edgecolor=PALETTE["line"], lw=0.8
        )
    )
    ax.text(3.6, 6.5, "slow memory (HBM)", ha="center", va="bottom", fontsize=_FONT, weight="bold")
    ax.text(
        11.25,
        6.5,
        "fast memory (SRAM, M elements)",
        ha="center",
        va="bottom",
        fontsize=_FONT,
        weight="bold",
    )


def _draw_blocked_matrix(ax, x, rows, cols, cell, block, color, name, label, current):
    """A ``rows × cols`` matrix in HBM cut into blocks of ``block`` rows, block ``current``
    outlined in red; returns the point an arrow leaves from (its right edge, at that block)."""
    ytop = 5.9
    w, h = cols * cell, rows * cell
    ax.add_patch(
        Rectangle((x, ytop - h), w, h, facecolor=color, edgecolor=PALETTE["line"], lw=0.8)
    )
    for s in range(block, rows, block):
        ax.plot([x, x + w], [ytop - s * cell] * 2, color=PALETTE["line"], lw=0.9)
    lo, hi = current * block, min(rows, (current + 1) * block)
    ax.add_patch(
        Rectangle(
            (x, ytop - hi * cell),
            w,
            (hi - lo) * cell,
            facecolor="none",
            edgecolor=PALETTE["highlight"],
            lw=2.0,
        )
    )
    ax.text(x + w / 2, ytop + 0.05, name, ha="center", va="bottom", fontsize=_FONT)
    ax.text(x + w / 2, ytop - h - 0.1, label, ha="center", va="top", fontsize=6.5)
    return x + w, ytop - (lo + hi) / 2 * cell


def _draw_sram_tiles(ax, rows, ends) -> None:
    """What one step holds in SRAM, one labelled box a row, with the loads from HBM and the
    write-back of ``O_i``; ``ends`` are the arrow points of Q, K, V and O in HBM."""
    for y, text, color in rows:
        _box(ax, 8.85, y - 0.32, 4.8, 0.64, text, color, fontsize=7.5)
    q_end, k_end, v_end, o_end = ends
    _arrow(ax, q_end, (8.85, 5.5), PALETTE["highlight"], rad=-0.1)
    _arrow(ax, k_end, (8.85, 4.65), PALETTE["highlight"], rad=-0.08)
    _arrow(ax, v_end, (8.85, 4.5), PALETTE["highlight"], rad=0.05)
    _arrow(ax, (8.85, 1.8), o_end, PALETTE["line"], rad=0.1)
    ax.text(
        11.25, 0.95, "per row: running max \u03bc, running sum \u2113", ha="center", fontsize=7.5
    )
    ax.text(11.25, 0.35, "O_i / \u2113 written back after the last K_j", ha="center", fontsize=7.5)


def flash_tiles(
    n: int = 8, m: int = 8, d: int = 4, block_rows: int = 4, block_cols: int = 2
) -> Figure:
    """Chapter 7: FlashAttention's tiles moving between slow memory (HBM) and fast (SRAM).

    Left, in HBM: ``Q (n × d)``, ``K (m × d)``, ``V (m × d)`` and ``O (n × d)`` cut into
    blocks, the current query block ``i`` and key block ``j`` highlighted. Right, in SRAM:
    ``Q_i (B_r × d)``, ``K_j`` and ``V_j (B_c × d)``, the tile ``S_ij (B_r × B_c)``, the
    running max ``μ`` and sum ``ℓ`` per row, and the unnormalised ``O_i``. Only ``O``
    (and ``μ``, ``ℓ``) go back to HBM; ``S`` never does.

    Args:
        n: queries, m: keys (1 to 64 each), d: head size (1 to 16),
        block_rows: ``B_r``, 1 to ``n``; block_cols: ``B_c``, 1 to ``m``.

    Returns:
        The Figure; ``fig.alt`` describes it with the same numbers.
    """
    n = require_int(n, "n", 1, 64)
    m = require_int(m, "m", 1, 64)
    d = require_int(d, "d", 1, 16)
    br = require_int(block_rows, "block_rows", 1, n)
    bc = require_int(block_cols, "block_cols", 1, m)
    tr, tc = math.ceil(n / br), math.ceil(m / bc)
    fig, (ax,) = _figure(1, size=(7.0, 3.4), xlim=(0, 14), ylim=(0, 6.8))
    _draw_memories(ax)
    cell = min(4.6 / max(n, m), 1.2 / d)
    qi, kj = min(1, tr - 1), min(1, tc - 1)  # the second block of each, if there is one
    ends = [
        _draw_blocked_matrix(ax, x, rows, d, cell, b, color, name, f"{rows} \u00d7 {d}", cur)
        for x, rows, b, color, name, cur in (
            (0.5, n, br, PALETTE["q"], "Q", qi),
            (2.2, m, bc, PALETTE["k"], "K", kj),
            (3.9, m, bc, PALETTE["v"], "V", kj),
            (5.6, n, br, PALETTE["out"], "O", qi),
        )
    ]
    lab_q = _shape("Q", "n \u00d7 d", n, d)
    lab_k = _shape("K", "m \u00d7 d", m, d)
    lab_v = _shape("V", "m \u00d7 d", m, d)
    lab_o = _shape("O", "n \u00d7 d", n, d)
    lab_qi = _shape("Q_i", "B_r \u00d7 d", br, d)
    lab_kj = _shape("K_j, V_j", "B_c \u00d7 d", bc, d)
    lab_s = _shape("S_ij", "B_r \u00d7 B_c", br, bc)
    lab_ml = _shape("\u03bc, \u2113", "B_r", br)
    sram_rows = [
        (5.5, lab_qi, PALETTE["q"]),
        (4.6, lab_kj, PALETTE["k"]),
        (3.7, lab_s + ", never stored", PALETTE["scores"]),
        (2.8, lab_ml, PALETTE["weights"]),
        (1.9, _shape("O_i", "B_r \u00d7 d", br, d) + ", unnormalised", PALETTE["out"]),
    ]
    _draw_sram_tiles(ax, sram_rows, ends)
    ax.text(
        3.6,
        0.25,
        f"{lab_q}, {lab_k},\n{lab_v}, {lab_o};\n"
        f"T_r = {tr} query blocks \u00d7 T_c = {tc} key blocks",
        ha="center",
        fontsize=7,
    )
    alt = (
        f"FlashAttention's data movement. Slow memory (HBM) holds {lab_q}, {lab_k}, {lab_v} and "
        f"{lab_o}, cut into T_r = {tr} query blocks of B_r = {br} rows and T_c = {tc} key blocks "
        f"of B_c = {bc} rows. Arrows load one query block {lab_qi} and one key and value block "
        f"{lab_kj} into fast memory (SRAM), which also holds the score tile {lab_s}, never "
        f"written back, the running max and sum per row {lab_ml}, and the unnormalised "
        "output block, which goes back to HBM divided by \u2113 after the last key block."
    )
    return _with_alt(fig, alt)


# ----------------------------------------------------------------------------- chapter 8
def sparse_patterns(n: int = 16, window: int = 4, stride: int = 4, n_global: int = 1) -> Figure:
    """Chapter 8: sliding-window, strided and global sparse patterns as causal masks.

    Window: key ``j`` in ``i - window + 1 .. i``. Strided (the Sparse Transformer's two
    heads): ``i - j < stride`` or ``(i - j) % stride == 0``. Global: the window plus the first
    ``n_global`` tokens, which every query sees.

    Args:
        n: sequence length, 2 to 32. window, stride: 1 to ``n``.
        n_global: global tokens, 0 to ``n``.

    Returns:
        The Figure; ``fig.alt`` gives the number of kept entries of each pattern.
    """
    n = require_int(n, "n", 2, 32)
    window = require_int(window, "window", 1, n)
    stride = require_int(stride, "stride", 1, n)
    n_global = require_int(n_global, "n_global", 0, n)
    i, j = np.indices((n, n))
    diff = i - j
    causal = diff >= 0
    win = causal & (diff < window)
    strided = causal & ((diff < stride) | (diff % stride == 0))
    glob = win | (causal & (j < n_global))
    counts = [int(x.sum()) for x in (win, strided, glob)]
    full = n * (n + 1) // 2
    grid_label = _shape("mask", "n \u00d7 n", n, n)
    fig = _mask_panels(
        [
            (win, f"window {window}: {counts[0]} entries"),
            (strided, f"strided {stride}: {counts[1]} entries"),
            (glob, f"window + {n_global} global: {counts[2]}"),
        ],
        f"{grid_label}; the full causal triangle has {full} entries",
        show_inf=False,
    )
    # each pattern as the alt text describes it, closed by its count of kept entries
    what = [
        f"a sliding window of {window} (a band along the diagonal",
        f"the strided pattern with stride {stride} (the band plus every {stride}-th earlier "
        "position",
        f"the window plus {n_global} global token(s) that every query sees (a band plus the "
        "first column(s)",
    ]
    win_d, strided_d, glob_d = (f"{w}, {c} entries)" for w, c in zip(what, counts))
    alt = (
        f"Three causal sparse masks, mask (n \u00d7 n) = {n} \u00d7 {n}, blue where a query "
        f"may attend: {win_d}; {strided_d}; and {glob_d}, against {full} in the full causal "
        "triangle."
    )
    return _with_alt(fig, alt)


def receptive_field_growth(n: int = 12, window: int = 3, layers: int = 3) -> Figure:
    """Chapter 8: the last output's receptive field through stacked sliding-window layers.

    Layer ``L`` reads ``window`` positions of layer ``L - 1``, so the last output reaches
    ``L (window - 1) + 1`` inputs: the cone widens by ``window - 1`` positions per layer.

    Args:
        n: positions, 2 to 24. window: 2 to ``n``. layers: 1 to 6.

    Returns:
        The Figure; ``fig.alt`` gives the reach per layer.
    """
    n = require_int(n, "n", 2, 24)
    window = require_int(window, "window", 2, n)
    layers = require_int(layers, "layers", 1, 6)
    fig, (ax,) = _figure(1, size=(7.0, 3.0), xlim=(-3.6, n), ylim=(-0.6, layers + 1.0))
    reach = {n - 1}
    cones = [set(reach)]
    for _ in range(layers):
        reach = {k for i in reach for k in range(max(0, i - window + 1), i + 1)}
        cones.append(set(reach))
    sizes = []
    for level in range(layers + 1):
        active = cones[layers - level]
        for p in range(n):
            on = p in active
            _node(ax, p, level, PALETTE["highlight"] if on else PALETTE["x"], 8)
        if level == 0:
            label = f"inputs: {len(active)} reached"
        else:
            label = f"layer {level}"
        ax.text(-0.6, level, label, ha="right", va="center", fontsize=7.5)
        if level < layers:
            sizes.append(len(cones[layers - level]))
    # the window of the leftmost node of each layer: its first input is the farthest one,
    # w - 1 positions further back per layer
    for level in range(1, layers + 1):
        top = min(cones[layers - level])
        for k in range(max(0, top - window + 1), top + 1):
            ax.plot([k, top], [level - 1 + 0.22, level - 0.22], color=PALETTE["highlight"], lw=1)
    per_layer = [min(n, L * (window - 1) + 1) for L in range(1, layers + 1)]
    ax.text(
        (n - 1) / 2,
        layers + 0.45,
        f"window w = {window}: after L layers the last output reaches L(w \u2212 1) + 1 = "
        + ", ".join(str(r) for r in per_layer)
        + f" of n = {n} positions",
        ha="center",
        va="bottom",
        fontsize=_FONT,
    )
    alt = (
        f"{layers} stacked causal sliding-window layers over n = {n} positions, window "
        f"w = {window}. Red nodes and lines trace what the last output depends on: its cone "
        f"widens by w \u2212 1 = {window - 1} positions per layer, reaching "
        + ", ".join(str(r) for r in per_layer)
        + " positions after 1, 2, ... layers."
    )
    return _with_alt(fig, alt)


# ----------------------------------------------------------------------------- chapter 9
def _mask_square(ax, x, y, side, allowed: np.ndarray, *, diagonal: bool = False):
    """An (n, m) boolean mask as a square of side ``side`` with its lower-left corner at (x, y).

    Allowed cells blue, masked cells grey; with ``diagonal`` the diagonal is highlighted (the
    true pairs of a similarity matrix).
    """
    n, m = allowed.shape
    cell = side / max(n, m)
    for i in range(n):
        for j in range(m):
            color = PALETTE["allowed"] if allowed[i, j] else PALETTE["masked"]
            if diagonal and i == j:
                color = PALETTE["highlight"]
            ax.add_patch(
                Rectangle(
                    (x + j * cell, y + side - (i + 1) * cell),
                    cell,
                    cell,
                    facecolor=color,
                    edgecolor="white",
                    lw=0.4 if max(n, m) <= 12 else 0.2,
                )
            )


def _draw_vit_patches(ax, g: int, image_size: int) -> None:
    """ViT's input: the image cut into ``g × g`` patches, an arrow to its mask."""
    img = 1.0
    for r in range(g):
        for c in range(g):
            ax.add_patch(
                Rectangle(
                    (7.05 + c * img / g, 3.0 + img - (r + 1) * img / g),
                    img / g,
                    img / g,
                    facecolor=PALETTE["x"],
                    edgecolor=PALETTE["line"],
                    lw=0.4,
                )
            )
    ax.text(7.55, 2.9, f"{image_size} {_TIMES} {image_size}", ha="center", va="top", fontsize=6)
    _arrow(ax, (8.1, 3.5), (8.45, 3.5))


def _draw_clip_towers(ax, batch: int) -> None:
    """CLIP: an image and a text encoder feeding a ``B × B`` similarity matrix, true pairs
    on its diagonal."""
    _box(ax, 10.6, 4.0, 1.1, 0.55, "image enc.", PALETTE["q"], fontsize=6.5)
    _box(ax, 10.6, 2.6, 1.1, 0.55, "text enc.", PALETTE["k"], fontsize=6.5)
    _arrow(ax, (11.7, 4.27), (12.1, 3.9))
    _arrow(ax, (11.7, 2.87), (12.1, 3.2))
    _mask_square(ax, 12.15, 2.5, 1.75, np.ones((batch, batch), dtype=bool), diagonal=True)


def _draw_panel_captions(ax, panels) -> None:
    """Each model's title and token above its panel, its mask and shape label below."""
    for k, (title, token, mask_text, shape_label) in enumerate(panels):
        x0 = 3.5 * k
        ax.text(x0 + 1.75, 6.55, title, ha="center", va="top", fontsize=_FONT, weight="bold")
        ax.text(x0 + 1.75, 6.05, token, ha="center", va="top", fontsize=7)
        ax.text(x0 + 1.75, 1.75, mask_text, ha="center", va="top", fontsize=7)
        ax.text(x0 + 1.75, 1.3, shape_label, ha="center", va="top", fontsize=6.5)


def transformer_family(
    n: int = 5, padding: int = 1, image_size: int = 40, patch: int = 10, batch: int = 4
) -> Figure:
    """Chapter 9: BERT, GPT, ViT and CLIP as one block with different tokens and masks.

    Four panels, each the attention mask (blue: may attend) of one model: BERT's padding mask
    over ``n`` words, the last ``padding`` of them padding; GPT's causal triangle over ``n``
    characters; ViT's full mask over a class token and ``P = (image_size / patch)^2`` patches
    (the image drawn cut into its patches); CLIP's ``(B × B)`` similarity matrix of two
    encoders, true pairs on the diagonal. A bar below says that every model stacks the same
    pre-LayerNorm block.

    Args:
        n: tokens of the BERT and GPT panels, 2 to 12. padding: BERT's padding tokens, 0 to
        ``n - 1``. image_size: side in pixels, a multiple of ``patch``, with at most 6 patches
        per side. patch: patch side in pixels. batch: CLIP's batch ``B``, 2 to 8.

    Returns:
        The Figure; ``fig.alt`` describes it with the same numbers.
    """
    n = require_int(n, "n", 2, 12)
    padding = require_int(padding, "padding", 0, n - 1)
    patch = require_int(patch, "patch", 1)
    image_size = require_int(image_size, "image_size", patch)
    if image_size % patch or image_size // patch > 6:
        raise ValueError(
            f"image_size must be a multiple of patch = {patch} with at most 6 patches per side, "
            f"got image_size = {image_size}"
        )
    batch = require_int(batch, "batch", 2, 8)
    g = image_size // patch
    P = g * g
    fig, (ax,) = _figure(1, size=(7.0, 3.4), xlim=(0, 14), ylim=(0, 6.8))
    i, j = np.indices((n, n))
    lab_bert = _shape("mask", f"n {_TIMES} n", n, n)
    lab_gpt = _shape("mask", f"n {_TIMES} n", n, n)
    lab_vit = _shape("mask", f"(1+P) {_TIMES} (1+P)", 1 + P, 1 + P)
    lab_clip = _shape("similarity", f"B {_TIMES} B", batch, batch)
    lab_p = f"P = ({image_size} / {patch})\u00b2 = {P} patches"
    _draw_panel_captions(
        ax,
        [
            ("BERT: encoder", "a token = a word", f"padding: {padding} of {n} hidden", lab_bert),
            ("GPT: decoder", "a token = a character", "causal: i sees 0..i", lab_gpt),
            ("ViT: encoder", f"a token = a patch;\n{lab_p}", "none: all see all", lab_vit),
            ("CLIP: two encoders", "image and caption", "true pairs on the diagonal", lab_clip),
        ],
    )
    _mask_square(ax, 0.6, 2.4, 2.3, np.broadcast_to(j < n - padding, (n, n)))  # BERT: padding
    _mask_square(ax, 3.5 + 0.6, 2.4, 2.3, j <= i)  # GPT: causal
    _draw_vit_patches(ax, g, image_size)
    _mask_square(ax, 8.5, 2.35, 2.0, np.ones((1 + P, 1 + P), dtype=bool))  # ViT: full
    _draw_clip_towers(ax, batch)
    _box(
        ax,
        0.3,
        0.1,
        13.4,
        0.75,
        "every model: the same pre-LayerNorm block, x + MHA(LN(x)), then x + MLP(LN(x)), "
        "stacked L times",
        PALETTE["out"],
        fontsize=7.5,
    )
    alt = (
        "Four attention masks from one Transformer block, blue where a query may attend. "
        f"BERT (an encoder over words): {lab_bert}, every word sees every real word, and "
        f"the padding ({padding} of {n} tokens, the last columns) is hidden from every "
        f"query. GPT (a decoder over characters): {lab_gpt}, a lower triangle, position i "
        f"sees 0..i. ViT: a {image_size} {_TIMES} {image_size} image cut into {lab_p} plus "
        f"a class token, {lab_vit}, all blue. CLIP: an image encoder and a text encoder give "
        f"a {lab_clip} of cosine similarities, true pairs on the diagonal (red). A bar "
        "below: every model stacks the same pre-LayerNorm block."
    )
    return _with_alt(fig, alt)


def latent_cache(h: int = 4, d_head: int = 4, kv_rank: int = 8, rope_dim: int = 2) -> Figure:
    """Chapter 11: what one token leaves in one layer's cache, for MHA, GQA, MQA and MLA.

    One strip per design, one cell per cached number: multi-head attention caches ``h`` keys
    and ``h`` values of ``d_head`` numbers, grouped-query ``h / 2`` of each, multi-query one of
    each, and multi-head latent attention one latent of ``kv_rank`` numbers and one rotated key
    of ``rope_dim`` numbers, from which every head's key and value are computed.

    Args:
        h: heads, 2 to 8, even. d_head: 1 to 8. kv_rank: 1 to 32. rope_dim: 0 to 8.

    Returns:
        The Figure; ``fig.alt`` gives each design's count of cached numbers.
    """
    h = require_int(h, "h", 2, 8)
    if h % 2:
        raise ValueError(f"h must be even (grouped-query keeps h / 2 heads), got {h}")
    d_head = require_int(d_head, "d_head", 1, 8)
    kv_rank = require_int(kv_rank, "kv_rank", 1, 32)
    rope_dim = require_int(rope_dim, "rope_dim", 0, 8)
    rows = [
        ("MHA", [("K", h * d_head, PALETTE["k"]), ("V", h * d_head, PALETTE["v"])]),
        ("GQA", [("K", h // 2 * d_head, PALETTE["k"]), ("V", h // 2 * d_head, PALETTE["v"])]),
        ("MQA", [("K", d_head, PALETTE["k"]), ("V", d_head, PALETTE["v"])]),
        ("MLA", [("c", kv_rank, PALETTE["x"]), ("$k^R$", rope_dim, PALETTE["q"])]),
    ]
    counts = [sum(n for _, n, _ in parts) for _, parts in rows]
    cell = 10.0 / max(max(counts), 1)
    fig, (ax,) = _figure(1, size=(7.0, 2.8), xlim=(0, 14), ylim=(0, 5.6))
    for r, ((name, parts), count) in enumerate(zip(rows, counts)):
        y = 4.6 - 1.15 * r
        ax.text(0.2, y + 0.3, name, ha="left", va="center", fontsize=_FONT, weight="bold")
        x = 1.4
        for label, n, color in parts:
            if n:
                _matrix(ax, x, y, 1, n, cell, color, grid=cell > 0.12)
                if n * cell > 0.5:
                    ax.text(x + n * cell / 2, y + cell + 0.08, label, ha="center", fontsize=7)
            x += n * cell
        ax.text(x + 0.2, y + cell / 2, f"{count} numbers", va="center", fontsize=_FONT)
    ax.text(
        7.0,
        0.05,
        f"h = {h} heads, d_head = {d_head}; MLA: kv_rank = {kv_rank}, rope_dim = {rope_dim}, "
        "each head's key and value computed from c",
        ha="center",
        va="bottom",
        fontsize=_FONT,
    )
    alt = (
        f"Four strips of cells, one per design, each cell a number one token leaves in one "
        f"layer's cache (h = {h} heads, d_head = {d_head}): multi-head attention (MHA) caches "
        f"{counts[0]} numbers (h keys and h values), grouped-query (GQA) {counts[1]} numbers, "
        f"multi-query (MQA) {counts[2]} numbers, and multi-head latent attention (MLA) "
        f"{counts[3]} numbers: "
        f"one latent c of kv_rank = {kv_rank} numbers and one rotated key of "
        f"rope_dim = {rope_dim}, from which every head's key and value are computed."
    )
    return _with_alt(fig, alt)


# ----------------------------------------------------------------------------- chapter 12
def block_mask_tiles(n: int = 16, block: int = 4, window: int = 8) -> Figure:
    """Chapter 12: a causal sliding-window mask and the tiles FlexAttention's BlockMask keeps.

    Left, the token mask (key ``j`` visible to query ``i`` when ``0 <= i - j < window``);
    right, its ``block x block`` tiles: *full* (every pair visible, no mask applied),
    *partial* (computed, then masked) and *skipped* (no visible pair: never computed).

    Args:
        n: positions, 2 to 32. block: tile size, 1 to ``n``. window: 1 to ``n``.

    Returns:
        The Figure; ``fig.alt`` gives the count of each kind of tile.
    """
    n = require_int(n, "n", 2, 32)
    block = require_int(block, "block", 1, n)
    window = require_int(window, "window", 1, n)
    i, j = np.indices((n, n))
    allowed = (i - j >= 0) & (i - j < window)
    nb = math.ceil(n / block)
    kinds = np.zeros((nb, nb), dtype=int)  # 0 skipped, 1 partial, 2 full
    for a in range(nb):
        for b in range(nb):
            tile = allowed[a * block : (a + 1) * block, b * block : (b + 1) * block]
            kinds[a, b] = 2 if tile.all() else (1 if tile.any() else 0)
    counts = [int((kinds == k).sum()) for k in (2, 1, 0)]
    fig = _Diagram(figsize=_FIGSIZE, layout="constrained")
    left, right = fig.subplots(1, 2)
    _mask_image(left, allowed, f"mask (n {_TIMES} n) = {n} {_TIMES} {n}", show_inf=False)
    colors = {2: PALETTE["allowed"], 1: "#a9c6e8", 0: PALETTE["masked"]}
    names = {2: "full", 1: "partial", 0: "skip"}
    right.set_xlim(-0.6, nb + 0.1)
    right.set_ylim(nb + 0.1, -0.9)
    right.set_aspect("equal")
    right.set_axis_off()
    for a in range(nb):
        for b in range(nb):
            k = int(kinds[a, b])
            right.add_patch(
                Rectangle((b, a), 1, 1, facecolor=colors[k], edgecolor="white", lw=1.5)
            )
            right.text(b + 0.5, a + 0.5, names[k], ha="center", va="center", fontsize=7)
    right.text(
        nb / 2,
        -0.25,
        f"tiles ({block} {_TIMES} {block}): {counts[0]} full, {counts[1]} partial, "
        f"{counts[2]} skipped",
        ha="center",
        va="bottom",
        fontsize=_FONT,
    )
    fig.suptitle(f"A causal window of {window} and its BlockMask", fontsize=_FONT)
    alt = (
        f"Left, a causal sliding-window mask of {window} positions on {n} x {n} scores, a blue "
        f"band along the diagonal. Right, the same scores cut into {nb} x {nb} tiles of "
        f"{block} x {block}: {counts[0]} full tiles (computed without a mask), {counts[1]} "
        f"partial tiles (computed, then masked) and {counts[2]} tiles with no visible pair, "
        "which the compiled kernel skips."
    )
    return _with_alt(fig, alt)


# ----------------------------------------------------------------------------- chapter 14
def _rank_xy(r: int, P: int, cx: float, cy: float, radius: float) -> tuple[float, float]:
    angle = math.pi / 2 - 2 * math.pi * r / P  # rank 0 at the top, clockwise
    return cx + radius * 1.35 * math.cos(angle), cy + radius * math.sin(angle)


def ring_attention_steps(world_size: int = 4) -> Figure:
    """Chapter 14: ring attention, P ranks on a ring passing key/value blocks.

    Left: each rank keeps its queries ``Q_r`` and sends the key/value block it holds to the
    next rank at every step. Right: the table of which block each rank holds at each step
    (rank ``r`` holds block ``r - s`` at step ``s``): after ``P`` steps every query has met
    every block.

    Args:
        world_size: ``P``, 2 to 8.

    Returns:
        The Figure; ``fig.alt`` names the ranks, the sends and the table.
    """
    P = require_int(world_size, "world_size", 2, 8)
    fig, (ax,) = _figure()
    cx, cy, rad = 3.5, 3.0, 2.1
    for r in range(P):
        x, y = _rank_xy(r, P, cx, cy, rad)
        nx, ny = _rank_xy((r + 1) % P, P, cx, cy, rad)
        dx, dy = nx - x, ny - y
        f = min(0.35, 0.9 / math.hypot(dx, dy))  # start and end clear of the boxes
        _arrow(
            ax,
            (x + f * dx, y + f * dy),
            (nx - f * dx, ny - f * dy),
            rad=-0.2,
            lw=1.3,
            color=PALETTE["highlight"],
        )
    for r in range(P):
        x, y = _rank_xy(r, P, cx, cy, rad)
        _box(ax, x - 0.65, y - 0.35, 1.3, 0.7, f"rank {r}\nQ{r} + K,V", color=PALETTE["q"])
    ax.text(cx, cy, f"P = {P}\nsend K,V\nto rank + 1", ha="center", va="center", fontsize=_FONT)
    # the table: rows = steps, columns = ranks, entry = whose block
    x0, y0, cell = 7.6, 5.0, min(0.7, 4.2 / P)
    ax.text(
        x0 + P * cell / 2, y0 + 0.45, "block held (rank r, step s)", ha="center", fontsize=_FONT
    )
    for r in range(P):
        ax.text(x0 + (r + 0.5) * cell, y0 + 0.1, f"r{r}", ha="center", fontsize=7)
    for s in range(P):
        y = y0 - (s + 1) * cell
        ax.text(x0 - 0.1, y + cell / 2, f"s{s}", ha="right", va="center", fontsize=7)
        for r in range(P):
            src = (r - s) % P
            ax.add_patch(
                Rectangle(
                    (x0 + r * cell, y), cell, cell, facecolor=_HEAD_COLORS[src], edgecolor="white"
                )
            )
            ax.text(
                x0 + (r + 0.5) * cell,
                y + cell / 2,
                f"KV{src}",
                ha="center",
                va="center",
                fontsize=6,
            )
    ax.text(
        x0 + P * cell / 2,
        y0 - (P + 1) * cell,
        "every query meets every block",
        ha="center",
        fontsize=_FONT,
    )
    alt = (
        f"Ring attention over P = {P} ranks drawn on a ring: each rank r keeps its queries "
        f"Q_r and, at every step, sends the key/value block it holds to rank r + 1 (arrows "
        f"around the ring). A table of {P} steps by {P} ranks shows that at step s rank r "
        f"holds the block of rank r - s (mod {P}), so after {P} steps every query has met "
        f"every block."
    )
    return _with_alt(fig, alt)


def all_to_all_heads(world_size: int = 4, heads: int = 8) -> Figure:
    """Chapter 14: Ulysses' all-to-all, from sequence shards to head shards.

    Left: rank ``r`` holds positions shard ``r`` of all ``h`` heads. Right: after the
    all-to-all it holds all positions of ``h / P`` heads. Every rank sends ``P - 1`` of its
    ``P`` pieces away.

    Args:
        world_size: ``P``, 2 to 8. heads: ``h``, a multiple of ``P``, at most 16.

    Returns:
        The Figure; ``fig.alt`` gives the pieces each rank sends and keeps.
    """
    P = require_int(world_size, "world_size", 2, 8)
    h = require_int(heads, "heads", P, 16)
    if h % P:
        raise ValueError(f"heads must be a multiple of world_size={P}, got {h}")
    fig, (ax,) = _figure()
    cell = min(0.3, 2.6 / h)
    top = 5.2
    row_h = min(1.1, 4.6 / P)
    for side, x0 in (("before", 0.9), ("after", 8.3)):
        title = (
            "before: rank r has positions r, all heads"
            if side == "before"
            else "after: rank r has all positions, heads of r"
        )
        ax.text(x0 + 2.4, top + 0.45, title, ha="center", fontsize=_FONT)
        for r in range(P):
            y = top - (r + 1) * row_h
            ax.text(
                x0 - 0.1, y + row_h / 2 - 0.1, f"rank {r}", ha="right", va="center", fontsize=7
            )
            for j in range(P):  # piece j: positions j or heads j
                for i in range(h // P):
                    head = (j * (h // P) + i) if side == "before" else (r * (h // P) + i)
                    pos = r if side == "before" else j
                    ax.add_patch(
                        Rectangle(
                            (x0 + (j * (h // P) + i) * cell, y),
                            cell,
                            row_h * 0.6,
                            facecolor=_HEAD_COLORS[head // (h // P) % len(_HEAD_COLORS)],
                            edgecolor="white",
                            hatch="//" if pos % 2 else None,
                        )
                    )
    _arrow(ax, (0.9 + h * cell + 0.3, 3.0), (7.2, 3.0), lw=1.3)
    ax.text((0.9 + h * cell + 7.2) / 2 + 0.15, 3.25, "all-to-all", ha="center", fontsize=_FONT)
    ax.text(
        7.0,
        0.1,
        f"P = {P}, h = {h}: colour = head group, hatching = position shard; "
        f"each rank keeps 1 of {P} pieces and sends {P - 1}",
        ha="center",
        fontsize=_FONT,
    )
    alt = (
        f"Ulysses' all-to-all for P = {P} ranks and h = {h} heads. Before it, rank r holds "
        f"position shard r of all {h} heads, cut into {P} pieces of {h // P} heads; after "
        f"it, rank r holds all {P} position shards of its {h // P} heads. Each rank keeps 1 "
        f"of its {P} pieces and sends {P - 1}, one to each other rank."
    )
    return _with_alt(fig, alt)


def zigzag_layout(world_size: int = 4) -> Figure:
    """Chapter 14: who computes which causal blocks, contiguous against zigzag shards.

    The causal score matrix cut into ``2 P`` chunks each way; a block is coloured by the rank
    that owns its queries. Contiguous: rank ``r`` owns chunks ``2r, 2r + 1`` and computes
    ``4r + 3`` chunk blocks; zigzag: chunks ``r`` and ``2P - 1 - r``, ``2P + 1`` each.

    Args:
        world_size: ``P``, 2 to 8.

    Returns:
        The Figure; ``fig.alt`` gives each rank's number of blocks in both layouts.
    """
    P = require_int(world_size, "world_size", 2, 8)
    c = 2 * P
    fig = _Diagram(figsize=_FIGSIZE, layout="constrained")
    counts = {}
    for ax, layout in zip(fig.subplots(1, 2), ("contiguous", "zigzag")):
        owner = {}
        for r in range(P):
            chunks = [2 * r, 2 * r + 1] if layout == "contiguous" else [r, c - 1 - r]
            for a in chunks:
                owner[a] = r
        work = [0] * P
        ax.set_xlim(-0.3, c + 0.2)
        ax.set_ylim(c + 0.2, -1.2)
        ax.set_aspect("equal")
        ax.set_axis_off()
        for a in range(c):
            for b in range(c):
                on = b <= a
                if on:
                    work[owner[a]] += 1
                ax.add_patch(
                    Rectangle(
                        (b, a),
                        1,
                        1,
                        edgecolor="white",
                        lw=0.5,
                        facecolor=_HEAD_COLORS[owner[a]] if on else PALETTE["masked"],
                    )
                )
            ax.text(-0.1, a + 0.5, f"r{owner[a]}", ha="right", va="center", fontsize=6)
        counts[layout] = work
        ax.text(
            c / 2,
            -0.3,
            f"{layout}: blocks per rank {work}",
            ha="center",
            va="bottom",
            fontsize=_FONT,
        )
    fig.suptitle(f"causal attention, P = {P}, the sequence in {c} chunks", fontsize=_FONT)
    alt = (
        f"Two causal score matrices cut into {c} by {c} chunk blocks for P = {P} ranks, each "
        f"block coloured by the rank that owns its queries and grey above the diagonal. "
        f"Contiguous shards: the ranks compute {counts['contiguous']} blocks, the last "
        f"rank {max(counts['contiguous'])} against the first rank's "
        f"{min(counts['contiguous'])}. Zigzag shards (rank r holds chunks r and "
        f"{c - 1} - r): every rank computes {counts['zigzag'][0]} blocks."
    )
    return _with_alt(fig, alt)


def delta_rule_overwrite() -> Figure:
    """Chapter 13: linear attention adds a write to its state; the delta rule first reads what
    the state holds for the key and writes only the difference.

    Returns:
        The Figure; ``fig.alt`` describes the two rows.
    """
    fig, (ax,) = _figure(1, (7.0, 3.2), xlim=(0, 14), ylim=(0, 6.4))
    rows = [
        (
            4.4,
            "linear attention: add",
            [("S", PALETTE["out"]), ("+ k v\u1d40", PALETTE["v"])],
            "S + k v\u1d40",
        ),
        (
            1.2,
            "delta rule: overwrite",
            [
                ("S", PALETTE["out"]),
                ("read S\u1d40k", PALETTE["k"]),
                ("v \u2212 S\u1d40k", PALETTE["scores"]),
                ("+ \u03b2 k (\u00b7)\u1d40", PALETTE["v"]),
            ],
            "S + \u03b2 k (v \u2212 S\u1d40k)\u1d40",
        ),
    ]
    for y, title, steps, result in rows:
        ax.text(0.1, y + 1.25, title, fontsize=_FONT + 0.5, fontweight="bold")
        x = 0.1
        for text, color in steps:
            _box(ax, x, y, 2.1, 0.9, text, color)
            _arrow(ax, (x + 2.1, y + 0.45), (x + 2.6, y + 0.45))
            x += 2.6
        _box(ax, x, y, 3.0, 0.9, result, PALETTE["out"])
    ax.text(
        7.0,
        0.25,
        "a key written twice: the sum keeps both values; the delta rule keeps the newest",
        ha="center",
        fontsize=_FONT,
        color=PALETTE["muted"],
    )
    alt = (
        "Two rows of boxes. Top, linear attention: the state S plus k v transposed, so every "
        "write is added. Bottom, the delta rule: read what S holds for the key (S transposed "
        "times k), take the difference from v, and add beta k times that difference: the "
        "old value under the key is replaced by the new one."
    )
    return _with_alt(fig, alt)


# ----------------------------------------------------------------------------- languages
#: CJK fonts a Chinese diagram may be drawn with, the first one installed wins
#: (``fonts-wqy-zenhei`` is what the book's build installs).
CJK_FONTS = (
    "WenQuanYi Zen Hei",
    "Noto Sans CJK SC",
    "Source Han Sans SC",
    "Noto Sans SC",
    "SimHei",
    "Microsoft YaHei",
)


def cjk_font() -> str | None:
    """The first of :data:`CJK_FONTS` that matplotlib finds on this machine, or ``None``.

    matplotlib's font list is cached from its first run: a font installed since (the build
    installs one) is looked for among the system's font files and added.
    """
    from matplotlib import font_manager

    def found() -> str | None:
        installed = {f.name for f in font_manager.fontManager.ttflist}
        return next((name for name in CJK_FONTS if name in installed), None)

    if found() is None:
        for path in font_manager.findSystemFonts():
            if re.search(r"wqy|cjk|sourcehan|notosanssc|simhei|msyh", path.lower()):
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError):  # a file FreeType cannot read
                    continue
    return found()


def _texts(fig: Figure) -> list:
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def labels(fig: Figure) -> list[str]:
    """Every visible text a diagram draws, in drawing order, without repeats."""
    return list(dict.fromkeys(t.get_text() for t in _texts(fig)))


def translate(fig: Figure, messages, *, font: str | None = None) -> list[str]:
    """Redraw a diagram's words in another language; returns the labels left as they were.

    Every diagram function draws English, unchanged: a translation is a pass over the
    finished figure. Each visible text whose string is a key of ``messages`` (a mapping, or
    a function returning the translation or ``None``) takes its translation, and every text
    takes ``font`` first in its font family (a CJK font, see :func:`cjk_font`; the default
    family stays behind it for the glyphs it lacks). Labels with no English word (shapes,
    formulas, numbers) need no entry. The sizes and positions stay: the diagrams leave room
    for their English labels, which are wider than their Chinese translations.

    Args:
        fig: a figure returned by one of this module's functions.
        messages: English label -> translation.
        font: a font family name, or ``None`` to keep the fonts.

    Returns:
        The labels with English words that ``messages`` did not translate (kept as drawn).
    """
    from matplotlib import rcParams

    lookup = messages if callable(messages) else messages.get
    missing = []
    for text in _texts(fig):
        english = text.get_text()
        translation = lookup(english)
        if translation:
            text.set_text(translation)
        elif re.search(r"[A-Za-z]{2,}", re.sub(r"\$[^$]*\$", " ", english)):
            missing.append(english)
        if font is not None:
            text.set_fontfamily([font, *rcParams["font.family"]])
    return list(dict.fromkeys(missing))
