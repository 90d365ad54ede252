"""Checkers for chapter 7's exercises (online softmax, FlashAttention's tiles and traffic).

The exercises, numbered by their place in :data:`EXERCISES` (the chapter's order), are of
three kinds. **Build** (``tile-kind``, :func:`check_tile_kind`); **find the bug**
(``online-bug``, :func:`check_online_attention`; ``ds``, :func:`check_ds_tile`;
``noncausal-bwd``, :func:`check_dkdv_pass`): the reader
gets a function with one planted mistake, and while the answer still computes what the
planted mistake computes the checker reports the exercise as not attempted yet; **predict,
then run** (``tiles``, :func:`check_causal_tiles_prediction`; ``io``,
:func:`check_bytes_read_prediction`). A wrong answer that equals a known mistake's result is
named with that mistake.
"""

from __future__ import annotations

import math

import torch

from ..efficient.io_model import tiled_attention_io
from ..i18n import _
from ._core import (
    Mismatch,
    NotAttempted,
    call_answer,
    checker,
    expect_close,
    expect_predicted,
    name_mistake,
)

__all__ = [
    "EXERCISES",
    "TILE_KINDS",
    "check_tile_kind",
    "tile_kind_mistakes",
    "check_online_attention",
    "online_attention_mistakes",
    "check_causal_tiles_prediction",
    "causal_tiles_mistakes",
    "check_bytes_read_prediction",
    "bytes_read_mistakes",
    "check_ds_tile",
    "ds_tile_mistakes",
    "check_dkdv_pass",
    "dkdv_pass_mistakes",
    "PLANTED",
    "CAUSAL_TILES_CASE",
    "BYTES_READ_CASE",
]

#: The labels of chapter 7's exercises (``ex-ch07-<label>``), in the chapter's order.
EXERCISES = ("tile-kind", "online-bug", "tiles", "io", "ds", "noncausal-bwd")

#: The mistake planted in each "find the bug" exercise (its checker's key for it).
PLANTED: dict[str, str] = {
    "online_attention": "the running output O is not rescaled by alpha when the max rises",
    "ds_tile": "rowsum of this tile's P o dP used for D (D sums over the whole row of keys)",
    "dkdv_pass": "the pass ignores causal: with causal=False it still computes the causal "
    "backward (Triton's fused-attention tutorial, triton-lang/triton #4541, #5660)",
}


# -- Build: what a causal pass does with each tile ---------------------------------------

#: The three things causal tiled attention can do with a tile (the answers of ``tile-kind``).
TILE_KINDS = ("skip", "full", "mask")

#: The grids of the tile-kind checker, as (n, block_q, block_k): every tile of each.
TILE_KIND_GRIDS = ((100, 32, 7), (37, 8, 5), (64, 16, 16), (10, 4, 6), (9, 3, 9), (1, 1, 1))


def _kind(skip: bool, full: bool) -> str:
    return "skip" if skip else "full" if full else "mask"


def _tile_rules() -> dict[str, object]:
    """The right rule ("right") and each named mistake's, as f(q0, q1, k0, k1, bq, bk)."""

    def right(q0, q1, k0, k1, bq, bk):  # the brute force: which pairs j <= i the tile holds
        i = torch.arange(q0, q1)[:, None]
        j = torch.arange(k0, k1)[None, :]
        allowed = j <= i
        return _kind(not bool(allowed.any()), bool(allowed.all()))

    return {
        "right": right,
        _(
            "a tile whose keys all come after its last query was not skipped: it contributes "
            "nothing"
        ): lambda q0, q1, k0, k1, bq, bk: _kind(k0 > q1, k1 - 1 <= q0),
        _(
            "a tile in which every query sees every key was given a mask: the first query "
            "already sees the tile's last key there"
        ): lambda q0, q1, k0, k1, bq, bk: _kind(k0 > q1 - 1, k1 <= q0),
        _(
            "a tile was called full although its first queries must not see its last keys: "
            "the earliest query of the block decides whether a tile is full"
        ): (lambda q0, q1, k0, k1, bq, bk: _kind(k0 > q1 - 1, k1 - 1 <= q1 - 1)),
        _(
            "a tile was skipped although its last queries see some of its keys: the latest "
            "query of the block decides whether a tile is skipped"
        ): (lambda q0, q1, k0, k1, bq, bk: _kind(k0 > q0, k1 - 1 <= q0)),
        _(
            "you compared block numbers: that is right only when query and key blocks have "
            "the same size"
        ): lambda q0, q1, k0, k1, bq, bk: _kind(k0 // bk > q0 // bq, k0 // bk < q0 // bq),
    }


def _tiles_of(n: int, bq: int, bk: int):
    for q0 in range(0, n, bq):
        for k0 in range(0, n, bk):
            yield q0, min(q0 + bq, n), k0, min(k0 + bk, n)


def tile_kind_mistakes() -> list[str]:
    """The mistakes :func:`check_tile_kind` names."""
    return [name for name in _tile_rules() if name != "right"]


def _read_kind(got, case: str) -> str:
    kind = got.strip().lower() if isinstance(got, str) else None
    if kind not in TILE_KINDS:
        raise Mismatch(
            _(
                "case {case}: return 'skip', 'full' or 'mask', got {got}",
                case=case,
                got=f"{got!r:.40}",
            )
        )
    return kind


@checker("tile-kind", "what a causal pass does with each tile")
def check_tile_kind(answer) -> None:
    """``answer(q_start, q_stop, k_start, k_stop)`` gets a tile of causal tiled attention,
    the queries ``q_start .. q_stop - 1`` against the keys ``k_start .. k_stop - 1`` (query
    ``i`` may attend to key ``j`` when ``j <= i``), and must say what the pass does with it:
    ``"skip"`` it, compute it in ``"full"`` with no mask, or apply a ``"mask"``. Every tile of
    several grids is asked, blocks of unequal sizes and short last blocks included; an answer
    that follows a known wrong rule on all of them is named."""
    rules = _tile_rules()
    right = rules.pop("right")
    asked = []  # (case, tile, block sizes, the reader's kind)
    for n, bq, bk in TILE_KIND_GRIDS:
        for q0, q1, k0, k1 in _tiles_of(n, bq, bk):
            case = _(
                "n={n}, queries {q0}..{value}, keys {k0}..{value2}",
                n=n,
                q0=q0,
                value=q1 - 1,
                k0=k0,
                value2=k1 - 1,
            )
            got = _read_kind(call_answer(answer, q0, q1, k0, k1), case)
            asked.append((case, (q0, q1, k0, k1, bq, bk), got))
    wrong = [(case, tile, got) for case, tile, got in asked if got != right(*tile)]
    if not wrong:
        return
    for name, rule in rules.items():
        if all(got == rule(*tile) for _, tile, got in asked):
            case = wrong[0][0]
            raise Mismatch(_("case {case}: {diagnosis}", case=case, diagnosis=name))
    case, tile, got = wrong[0]
    raise Mismatch(
        _(
            "case {case}: expected {value}, got {got} ({wrong} of {asked} tiles wrong)",
            case=case,
            value=f"{right(*tile)!r}",
            got=f"{got!r}",
            wrong=len(wrong),
            asked=len(asked),
        )
    )


# -- Find the bug: the online softmax of one query ---------------------------------------


def _online(s, v, block, mistake: str = "") -> torch.Tensor:
    """The recurrence of section 7.2, or one named way of getting its rescale wrong."""
    mu = torch.tensor(-math.inf, dtype=s.dtype)
    ell = torch.zeros((), dtype=s.dtype)
    o = torch.zeros(v.shape[-1], dtype=v.dtype)
    for start in range(0, len(s), block):
        s_b, v_b = s[start : start + block], v[start : start + block]
        mu_new = torch.maximum(mu, s_b.max())
        alpha = torch.exp(mu - mu_new)
        p = torch.exp(s_b - mu_new)
        ell = (1.0 if mistake == "l" else alpha) * ell + p.sum()
        if mistake == "o":  # the planted bug
            o = o + p @ v_b
        elif mistake == "inverse":
            o = torch.where(alpha > 0, 1 / alpha, 0.0) * o + p @ v_b
        elif mistake == "new too":
            o = alpha * (o + p @ v_b)
        else:
            o = alpha * o + p @ v_b
        mu = mu_new
    return o / ell


def _online_variants(s, v, block) -> dict[str, torch.Tensor]:
    return {
        "right": _online(s, v, block),
        PLANTED["online_attention"]: _online(s, v, block, "o"),
        _(
            "O is divided by alpha instead of multiplied (the FlashAttention-2 paper's typo): "
            "old contributions are inflated when the max rises"
        ): _online(s, v, block, "inverse"),
        _(
            "the new block was rescaled by alpha too, although p = exp(s - mu_new) is already "
            "relative to the new max"
        ): _online(s, v, block, "new too"),
        _("now l is not rescaled when the max rises, while O is"): _online(s, v, block, "l"),
    }


def online_attention_mistakes() -> list[str]:
    """The mistakes :func:`check_online_attention` names (the planted one included)."""
    s = torch.zeros(1, dtype=torch.float64)
    return [_(k) for k in _online_variants(s, torch.zeros(1, 1, dtype=s.dtype), 1) if k != "right"]


@checker("online-bug", "the online softmax of one query")
def check_online_attention(answer) -> None:
    """``answer(s, v, block)`` gets one query's scores ``s`` ``(m,)`` and the values ``v``
    ``(m, d_v)``, both float64, and must return softmax attention ``softmax(s) @ v``
    ``(d_v,)``, computed with the online softmax over blocks of ``block`` keys, to float64
    accuracy (1e-9; an answer right to float32's rounding only is told so). While the answer
    still computes what the planted bug computes, the exercise counts as not attempted."""
    g = torch.Generator().manual_seed(72)
    cases = []
    for m, block, bump in ((12, 4, (5, 9)), (10, 3, (4,)), (9, 9, ()), (7, 2, (2, 4, 6))):
        s = torch.randn(m, generator=g, dtype=torch.float64)
        for k, j in enumerate(bump, 1):  # larger scores later: the max rises mid-way
            s[j] += 2.0 * k
        v = torch.randn(m, 3, generator=g, dtype=torch.float64)
        cases.append((_("{m} keys in blocks of {block}", m=m, block=block), s, v, block))
    planted, outputs = True, []
    for case, s, v, block in cases:
        got = call_answer(answer, s, v, block)
        variants = _online_variants(s, v, block)
        outputs.append((case, got, variants))
        try:
            same = torch.allclose(
                torch.as_tensor(got, dtype=torch.float64),
                variants[PLANTED["online_attention"]],
                atol=1e-9,
                rtol=1e-9,
            )
        except (TypeError, ValueError, RuntimeError):
            same = False
        planted = planted and same
    if planted:
        raise NotAttempted()
    for case, got, variants in outputs:
        right = variants.pop("right")
        # the planted mistake's key is PLANTED's English text: said in the current language
        mistakes = {_(name): wrong for name, wrong in variants.items()}
        _expect_float64(got, right, mistakes, case=case)


def _expect_float64(got, right, mistakes: dict, *, case: str) -> None:
    """Compare a find-the-bug answer with ``right`` to float64 accuracy (1e-9).

    The inputs are float64, and every named mistake differs from the right answer by far more
    than float32's rounding. So an answer within float32's rounding of the right one (a
    largest difference of at most 1e-5 of the largest entry) is right but computed in float32
    somewhere, and is told so instead of being shown two numbers that print alike; a named
    mistake computed in float32 is named too.
    """
    try:
        g = torch.as_tensor(got).detach().to(torch.float64)
    except (TypeError, ValueError, RuntimeError):
        g = None
    if (
        g is not None
        and g.shape == right.shape
        and bool(torch.isfinite(g).all())
        and not torch.allclose(g, right, atol=1e-9, rtol=1e-9)
    ):
        diff = (g - right).abs().max().item() if g.numel() else 0.0
        scale = max(1.0, right.abs().max().item() if right.numel() else 0.0)
        if diff <= 1e-5 * scale:
            raise Mismatch(
                _(
                    "case {case}: correct to float32 precision (largest difference {value} of "
                    "the largest entry), but not to the 1e-9 this checker asks: somewhere your "
                    "code computes in float32, while the inputs are float64",
                    case=case,
                    value=f"{diff / scale:.0e}",
                )
            )
        name_mistake(g, mistakes, case=case, atol=1e-5 * scale, rtol=1e-5)
    expect_close(got, right, case=case, atol=1e-9, rtol=1e-9, mistakes=mistakes)


# -- Predict, then run: causal tiles ------------------------------------------------------

#: The sizes of the causal-tiles prediction (n, block_q, block_k).
CAUSAL_TILES_CASE = (1000, 128, 64)


def _tiles(n: int, bq: int, bk: int, causal: bool = True) -> int:
    # a query block needs the key blocks starting at or before its last query
    return sum(math.ceil((min(qs + bq, n) if causal else n) / bk) for qs in range(0, n, bq))


def _causal_tiles_variants() -> dict[str, int]:
    n, bq, bk = CAUSAL_TILES_CASE
    t_q = math.ceil(n / bq)
    return {
        "right": _tiles(n, bq, bk),
        _(
            "that is every tile: causal attention skips the tiles whose keys all come after "
            "the block's last query"
        ): _tiles(n, bq, bk, causal=False),
        _(
            "that is T(T+1)/2 with T the number of query blocks, the count for square blocks; "
            "here each query block spans two key blocks"
        ): t_q * (t_q + 1) // 2,
        _("that is exactly half of all tiles: the tiles on the diagonal are computed too"): (
            _tiles(n, bq, bk, causal=False) // 2
        ),
        _(
            "the last key block is short (n is not a multiple of 64) but it is still a tile: "
            "the count rounds the key blocks down"
        ): sum(min(qs + bq, n) // bk for qs in range(0, n, bq)),
    }


def causal_tiles_mistakes() -> list[str]:
    """The mistakes :func:`check_causal_tiles_prediction` names."""
    return [k for k in _causal_tiles_variants() if k != "right"]


@checker("tiles", "the tiles of a causal pass")
def check_causal_tiles_prediction(prediction) -> None:
    """``prediction``: how many (query block, key block) tiles causal tiled attention computes
    for ``n = 1000`` with query blocks of 128 and key blocks of 64 rows, skipping every tile
    whose keys all come after the last query of its block."""
    n, bq, bk = CAUSAL_TILES_CASE
    case = f"n={n}, block_q={bq}, block_k={bk}"
    expect_predicted(prediction, _causal_tiles_variants(), case=case)


# -- Predict, then run: bytes read by tiled attention -------------------------------------

#: The sizes of the bytes-read prediction (n, d, block_q, block_k, M, bytes per element).
BYTES_READ_CASE = (4096, 64, 96, 64, 65536, 2)


def _bytes_read_variants() -> dict[str, float]:
    n, d, bq, bk, M, size = BYTES_READ_CASE
    io = tiled_attention_io(n, d, M, blocks=(bq, bk))  # the simulation is the answer
    blocks = math.ceil(n / bq)
    return {
        "right": io.reads * size,
        _("that counts elements, not bytes: each fp16 element is 2 bytes"): io.reads,
        _("K and V are read once per query block, not once in all"): 3 * n * d * size,
        _("the last, short query block was left out, though it reads all of K and V too"): (
            n * d + (n // bq) * 2 * n * d
        )
        * size,
        _(
            "a fractional number of query blocks: blocks come whole, and the last, short one "
            "reads all of K and V too"
        ): (n * d + n / bq * 2 * n * d) * size,
        _("Q was left out, though it is read too"): blocks * 2 * n * d * size,
        _("that includes the writes (O and its log-sum-exp); the question asks for the reads"): (
            io.total * size
        ),
    }


def bytes_read_mistakes() -> list[str]:
    """The mistakes :func:`check_bytes_read_prediction` names."""
    return [k for k in _bytes_read_variants() if k != "right"]


@checker("io", "the bytes tiled attention reads")
def check_bytes_read_prediction(prediction) -> None:
    """``prediction``: the bytes tiled attention (FlashAttention-2's order) reads from slow
    memory for one head with ``n = 4096``, ``d = 64``, query blocks of 96 and key blocks of
    64 rows, in fp16; compared with :func:`~selfattn.efficient.io_model.tiled_attention_io`."""
    n, d, bq, bk, M, size = BYTES_READ_CASE
    case = f"n={n}, d={d}, blocks {bq}x{bk}, fp16"
    expect_predicted(prediction, _bytes_read_variants(), case=case, rtol=1e-9)


# -- Find the bug: one tile of the backward's dS ------------------------------------------


def _ds_variants(q_i, k_j, v_j, do_i, lse_i, d_i) -> dict[str, torch.Tensor]:
    """The right dS tile ("right") and each named mistake's, from the same inputs."""
    scale = q_i.shape[-1] ** -0.5
    s = q_i @ k_j.T * scale
    p = torch.exp(s - lse_i[:, None])
    dp = do_i @ v_j.T
    d = d_i[:, None]
    return {
        "right": p * (dp - d),
        PLANTED["ds_tile"]: p * (dp - (p * dp).sum(-1, keepdim=True)),
        _("S recomputed without the scale 1/sqrt(d)"): torch.exp(q_i @ k_j.T - lse_i[:, None])
        * (dp - d),
        _("rowsum(dP) used for D (D = rowsum(dO o O), a sum of P o dP)"): p
        * (dp - dp.sum(-1, keepdim=True)),
        _("P recomputed as a softmax over this tile only, not exp(S - L)"): torch.softmax(s, -1)
        * (dp - d),
        _("the factor P left out (dS = P o (dP - D))"): dp - d,
        _("D subtracted the wrong way round"): p * (d - dp),
    }


def ds_tile_mistakes() -> list[str]:
    """The names of the mistakes :func:`check_ds_tile` recognises (the planted one first)."""
    t = torch.zeros(1, 1, dtype=torch.float64)
    z = torch.zeros(1, dtype=torch.float64)
    return [_(name) for name in _ds_variants(t, t, t, t, z, z) if name != "right"]


@checker("ds", "one tile of the backward's dS")
def check_ds_tile(answer) -> None:
    """``answer(q_i, k_j, v_j, do_i, lse_i, d_i)`` gets one tile's inputs, a query block
    ``q_i`` and ``do_i`` ``(r, d)``, a key block ``k_j`` and ``v_j`` ``(c, d)``, and the rows'
    saved log-sum-exp ``lse_i`` and ``D_i = rowsum(dO o O)`` ``(r,)``, and must return the
    tile ``dS_ij = P_ij o (dP_ij - D_i)`` ``(r, c)``, with ``P_ij = exp(Q_i K_j^T / sqrt(d)
    - L_i)`` and ``dP_ij = dO_i V_j^T``. The inputs are float64 and the tile is compared to
    1e-9 (an answer right to float32's rounding only is told so). A wrong answer that
    matches a common mistake is
    named; while it still computes what the planted bug computes, the exercise counts as
    not attempted."""
    g = torch.Generator().manual_seed(75)
    results, planted = [], True
    for r, c, m, d, start in ((5, 6, 14, 8, 4), (3, 1, 9, 16, 8), (4, 7, 7, 4, 0)):
        q = torch.randn(r, d, generator=g, dtype=torch.float64)
        k = torch.randn(m, d, generator=g, dtype=torch.float64)
        v = torch.randn(m, d, generator=g, dtype=torch.float64)
        do = torch.randn(r, d, generator=g, dtype=torch.float64)
        s = q @ k.T / d**0.5
        lse = torch.logsumexp(s, -1)
        o = torch.softmax(s, -1) @ v
        d_row = (do * o).sum(-1)
        k_j, v_j = k[start : start + c], v[start : start + c]
        case = _(
            "{r} queries, keys {start}..{value} of {m}, d={d}",
            r=r,
            start=start,
            value=start + c - 1,
            m=m,
            d=d,
        )
        got = call_answer(answer, q, k_j, v_j, do, lse, d_row)
        variants = _ds_variants(q, k_j, v_j, do, lse, d_row)
        try:
            g_t = torch.as_tensor(got, dtype=torch.float64)
            same = g_t.shape == variants["right"].shape and torch.allclose(
                g_t, variants[PLANTED["ds_tile"]], atol=1e-9, rtol=1e-9
            )
        except (TypeError, ValueError, RuntimeError):
            same = False
        planted = planted and same
        results.append((case, got, variants))
    if planted:
        raise NotAttempted()
    for case, got, variants in results:
        right = variants.pop("right")
        mistakes = {
            _("looks like {name}", name=_(name)): wrong for name, wrong in variants.items()
        }
        _expect_float64(got, right, mistakes, case=case)


# -- Find the bug: the tutorial's non-causal backward ---------------------------------------


def _dkdv(q, k, v, do, lse, d_row, block, causal, mistake: str = ""):
    """The dK/dV pass, a key block at a time, or one named way of getting ``causal`` wrong.

    ``mistake``: "planted" (the causal pass whatever ``causal`` says: the query loop starts at
    the key block and the mask is always on; a loop from 0 with the mask on computes the
    same), "start" (the mask follows ``causal`` but the loop still starts at the key block),
    "no mask" (no mask ever), "scale" (dK without the softmax scale).
    """
    n, scale = q.shape[0], q.shape[-1] ** -0.5
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    masked = causal or mistake == "planted"
    if mistake == "no mask":
        masked = False
    for ks in range(0, n, block):
        k_j, v_j = k[ks : ks + block], v[ks : ks + block]
        first = ks if (causal or mistake in ("planted", "start")) else 0
        for qs in range(first, n, block):
            q_i, do_i = q[qs : qs + block], do[qs : qs + block]
            s = q_i @ k_j.T * scale
            if masked:
                rows = torch.arange(qs, qs + len(q_i))[:, None]
                cols = torch.arange(ks, ks + len(k_j))[None, :]
                s = s.masked_fill(cols > rows, -math.inf)
            p = torch.exp(s - lse[qs : qs + block, None])
            dv[ks : ks + block] += p.T @ do_i
            ds = p * (do_i @ v_j.T - d_row[qs : qs + block, None])
            dk[ks : ks + block] += ds.T @ q_i * (1.0 if mistake == "scale" else scale)
    return dk, dv


def _dkdv_variants(q, k, v, do, lse, d_row, block, causal) -> dict[str, tuple]:
    args = (q, k, v, do, lse, d_row, block, causal)
    return {
        "right": _dkdv(*args),
        PLANTED["dkdv_pass"]: _dkdv(*args, "planted"),
        _(
            "with causal=False the query blocks before each key block are still left out: "
            "their queries see these keys too"
        ): _dkdv(*args, "start"),
        _(
            "with causal=True no mask is applied: queries receive gradient from keys after them"
        ): _dkdv(*args, "no mask"),
        _("dK lacks the softmax scale 1/sqrt(d)"): _dkdv(*args, "scale"),
    }


def dkdv_pass_mistakes() -> list[str]:
    """The mistakes :func:`check_dkdv_pass` names (the planted one first)."""
    z = torch.zeros(1, 1, dtype=torch.float64)
    zr = torch.zeros(1, dtype=torch.float64)
    return [_(k) for k in _dkdv_variants(z, z, z, z, zr, zr, 1, False) if k != "right"]


#: The cases of the dK/dV checker: (n, d, block, causal).
DKDV_CASES = ((48, 8, 16, False), (37, 4, 8, False), (48, 8, 16, True), (20, 4, 7, True))


@checker("noncausal-bwd", "the tutorial's non-causal backward")
def check_dkdv_pass(answer) -> None:
    """``answer(q, k, v, do, lse, d_row, block, causal)`` gets one head's ``q``, ``k``,
    ``v``, ``do`` ``(n, d)`` (as many keys as queries), each row's saved log-sum-exp ``lse``
    and ``D = rowsum(dO o O)`` ``(n,)``, the block size and whether attention was causal, and
    must return ``(dk, dv)`` ``(n, d)`` each, the gradients of softmax attention with the
    scale ``1/sqrt(d)``, to float64 accuracy (1e-9). Causal and non-causal cases, lengths
    that are not multiples of the block. While the answer still computes what the planted
    bug computes, the exercise counts as not attempted; a wrong answer that matches a common
    mistake is named with its case."""
    g = torch.Generator().manual_seed(77)
    results, planted = [], True
    for n, d, block, causal in DKDV_CASES:
        q, k, v, do = (torch.randn(n, d, generator=g, dtype=torch.float64) for _ in range(4))
        s = q @ k.T / d**0.5
        if causal:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
        lse = torch.logsumexp(s, -1)
        d_row = (do * (torch.softmax(s, -1) @ v)).sum(-1)
        case = f"causal={causal}, n={n}, d={d}, block={block}"
        got = call_answer(answer, q, k, v, do, lse, d_row, block, causal)
        variants = _dkdv_variants(q, k, v, do, lse, d_row, block, causal)
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            raise Mismatch(
                _(
                    "case {case}: return (dk, dv), two tensors, got {type}",
                    case=case,
                    type=type(got).__name__,
                )
            )
        try:
            same = all(
                torch.allclose(torch.as_tensor(a, dtype=torch.float64), b, atol=1e-9, rtol=1e-9)
                for a, b in zip(got, variants[PLANTED["dkdv_pass"]])
            )
        except (TypeError, ValueError, RuntimeError):
            same = False
        planted = planted and same
        results.append((case, got, variants))
    if planted:
        raise NotAttempted()
    for case, got, variants in results:
        right = variants.pop("right")
        for i, name in enumerate(("dk", "dv")):
            mistakes = {
                f"{name}: {_(diagnosis)}": wrong[i]
                for diagnosis, wrong in variants.items()
                if not torch.allclose(wrong[i], right[i], atol=1e-9, rtol=1e-9)
            }
            _expect_float64(got[i], right[i], mistakes, case=case)
