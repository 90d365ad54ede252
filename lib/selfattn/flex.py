"""FlexAttention: the book's masks and biases as ``mask_mod`` and ``score_mod`` (chapter 12).

PyTorch's FlexAttention (``torch.nn.attention.flex_attention``, torch >= 2.6 here) computes

    O = softmax(score_mod(Q K^T * scale) restricted to mask_mod) V

where a *mask* is a function ``mask_mod(b, h, q_idx, kv_idx) -> bool`` (``True`` = may attend,
the book's convention) and a *bias* a function ``score_mod(score, b, h, q_idx, kv_idx)``. A
``BlockMask`` records which ``block_q x block_k`` tiles hold no visible pair at all; the
compiled kernel skips them, so sparsity becomes speed (chapter 8 computed every masked score).

The factories below return those functions for every mask and bias of the book, and each is
tested against the dense tensor the library already builds (:mod:`selfattn.masks`,
:mod:`selfattn.positional`, :mod:`selfattn.efficient.sparse`): :func:`dense_mask` draws a
``mask_mod`` as the ``(n, m)`` bool matrix. :func:`flex` runs the kernel (eager, or compiled
with ``compiled=True``); ``scaled_dot_product_attention(..., kernel="flex")`` and
``MultiHeadAttention(kernel="flex")`` run it behind the book's own signature. Packed sequences:
:func:`pack_documents` gives the document ids and per-document positions of documents laid end
to end in one row, and :func:`document` masks attention across their borders.

torch's FlexAttention is imported only inside the functions that run it, so ``import selfattn``
works on older torch; there they raise a ``RuntimeError`` saying what is missing.
"""

from __future__ import annotations

import functools
import shutil
import warnings
from collections.abc import Callable

import torch

from ._checks import (
    ALIGNMENTS,
    require_bool,
    require_choice,
    require_int,
    require_module,
    require_number,
    require_tensor,
)
from .attention import Kernel, register_kernel

__all__ = [
    "FLEX_MIN_TORCH",
    "flex_available",
    "causal",
    "padding",
    "prefix_lm",
    "sliding_window",
    "document",
    "bigbird",
    "sinks_window",
    "and_masks",
    "alibi",
    "t5_bias",
    "softcap",
    "dense_mask",
    "block_mask",
    "block_fraction",
    "flex",
    "pack_documents",
]

#: The oldest torch whose FlexAttention runs on the CPU (eager and compiled).
FLEX_MIN_TORCH = (2, 6)

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ScoreMod = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor
]


def _torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def flex_available(compiled: bool = False) -> tuple[bool, str]:
    """Whether FlexAttention runs here: ``(True, "")``, or ``(False, why not)``.

    Args:
        compiled: ask about the compiled kernel (on the CPU it needs a C++ compiler).
    """
    compiled = require_bool(compiled, "compiled")
    if _torch_version() < FLEX_MIN_TORCH:
        need = ".".join(map(str, FLEX_MIN_TORCH))
        return False, f"FlexAttention needs torch >= {need}, this is torch {torch.__version__}"
    if compiled and not torch.cuda.is_available():
        if not any(shutil.which(cc) for cc in ("c++", "g++", "clang++", "cl")):
            return False, "compiled FlexAttention on the CPU needs a C++ compiler; none found"
    return True, ""


def _require_flex(compiled: bool = False):
    ok, why = flex_available(compiled)
    if not ok:
        raise RuntimeError(why + "; use kernel='reference' (or 'torch') instead")
    from torch.nn.attention import flex_attention as fa

    return fa


# ---- masks: mask_mod(b, h, q_idx, kv_idx) -> bool ---------------------------------------


def causal(
    alignment: str = "bottom_right", *, n: int | None = None, m: int | None = None
) -> MaskMod:
    """Causal masking: query ``i`` sees keys ``j <= i + offset`` (chapter 4).

    Args:
        alignment: ``"bottom_right"`` (the default, as everywhere in the library: offset
            ``m - n``, the last query sees every key, the alignment for new queries against
            a cache) or ``"top_left"`` (offset 0, SDPA's ``is_causal``).
        n, m: numbers of queries and keys. Without them the mask is the square one
            (``n = m``, where both alignments agree), and :func:`dense_mask`,
            :func:`block_mask` and :func:`flex` refuse it for ``n != m`` rather than guess.

    Returns:
        A ``mask_mod``; its dense form is :func:`selfattn.masks.causal_mask`.
    """
    require_choice(alignment, "alignment", ALIGNMENTS)
    if (n is None) != (m is None):
        raise ValueError(f"causal() needs both n and m or neither, got n={n!r}, m={m!r}")
    offset = 0
    if alignment == "bottom_right" and n is not None:
        offset = require_int(m, "m", 1) - require_int(n, "n", 1)

    def causal_mod(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    causal_mod.square_only = n is None and alignment == "bottom_right"
    return causal_mod


def _require_fits(mask_mod: MaskMod, n: int, m: int) -> None:
    """A ``causal()`` built without ``n`` and ``m`` is the square mask: refuse ``n != m``."""
    if getattr(mask_mod, "square_only", False) and n != m:
        raise ValueError(
            f"causal() without n and m is the square mask (n = m), got n={n}, m={m}: pass "
            f"causal(n={n}, m={m}) (bottom-right) or causal('top_left')"
        )


def padding(lengths) -> MaskMod:
    """Key padding: in batch row ``b`` only the first ``lengths[b]`` keys are real (chapter 4).

    Args:
        lengths: ``(B,)`` integer lengths (a tensor or a list).

    Returns:
        A ``mask_mod``; its dense form is :func:`selfattn.masks.padding_mask`.
    """
    lengths = _int_vector(lengths, "lengths")

    def padding_mod(b, h, q_idx, kv_idx):
        return kv_idx < lengths[b]

    return padding_mod


def prefix_lm(prefix_length: int) -> MaskMod:
    """A prefix LM (T5, UniLM): the first ``prefix_length`` positions see each other both
    ways, the rest is causal: key ``j`` is visible to query ``i`` if ``j <= i`` or
    ``j < prefix_length``."""
    prefix_length = require_int(prefix_length, "prefix_length", 0)

    def prefix_lm_mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) | (kv_idx < prefix_length)

    return prefix_lm_mod


def sliding_window(window: int, *, causal: bool = True) -> MaskMod:
    """Local attention on ``window`` positions (chapter 8): ``|i - j| < window``, and
    ``j <= i`` with ``causal``; the dense form is :func:`selfattn.masks.sliding_window_mask`."""
    window = require_int(window, "window", 1)
    is_causal = require_bool(causal, "causal")

    def sliding_window_mod(b, h, q_idx, kv_idx):
        near = (q_idx - kv_idx).abs() < window
        return near & (kv_idx <= q_idx) if is_causal else near

    return sliding_window_mod


def document(doc_ids, *, causal: bool = True) -> MaskMod:
    """Packed sequences: a token sees only tokens of its own document (causally by default).

    Args:
        doc_ids: ``(L,)`` or ``(B, L)`` integer document id of each position of the packed
            row(s) (:func:`pack_documents` makes them); queries and keys share the row.
        causal: also forbid later positions.

    Returns:
        A ``mask_mod``: ``doc_ids[q_idx] == doc_ids[kv_idx]`` (and ``kv_idx <= q_idx``).
    """
    require_tensor(doc_ids, "doc_ids")
    if doc_ids.is_floating_point() or doc_ids.dtype == torch.bool or doc_ids.dim() not in (1, 2):
        raise TypeError(
            f"doc_ids must be an integer tensor (L,) or (B, L), got dtype {doc_ids.dtype} "
            f"shape {tuple(doc_ids.shape)}"
        )
    is_causal = require_bool(causal, "causal")
    ids = doc_ids if doc_ids.dim() == 2 else doc_ids[None]
    batched = doc_ids.dim() == 2

    def document_mod(b, h, q_idx, kv_idx):
        row = b if batched else 0
        same = ids[row, q_idx] == ids[row, kv_idx]
        return same & (kv_idx <= q_idx) if is_causal else same

    return document_mod


def bigbird(layout: torch.Tensor, block: int) -> MaskMod:
    """BigBird's global + window + random blocks (chapter 8) as a ``mask_mod``.

    Args:
        layout: bool ``(nb, nb)`` block layout (:func:`selfattn.efficient.sparse.bigbird_layout`
            draws the random blocks once, so the pattern is fixed).
        block: tokens per block.

    Returns:
        A ``mask_mod``: ``layout[q_idx // block, kv_idx // block]``; the dense form is
        :func:`selfattn.efficient.sparse.block_sparse_mask`.
    """
    require_tensor(layout, "layout")
    if layout.dtype != torch.bool or layout.dim() != 2:
        raise TypeError(f"layout must be a 2-D bool tensor, got {layout.dtype} {layout.shape}")
    block = require_int(block, "block", 1)

    def bigbird_mod(b, h, q_idx, kv_idx):
        return layout[q_idx // block, kv_idx // block]

    return bigbird_mod


def sinks_window(window: int, sinks: int) -> MaskMod:
    """StreamingLLM (chapter 8): a causal window that also keeps the first ``sinks`` keys;
    the dense form is :func:`selfattn.efficient.sparse.sink_window_mask`."""
    window = require_int(window, "window", 1)
    sinks = require_int(sinks, "sinks", 0)

    def sinks_window_mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (((q_idx - kv_idx) < window) | (kv_idx < sinks))

    return sinks_window_mod


def and_masks(*mask_mods: MaskMod) -> MaskMod:
    """The intersection of ``mask_mod`` functions: a pair is visible if every one allows it."""
    if not mask_mods or not all(callable(f) for f in mask_mods):
        raise TypeError("and_masks needs one or more mask_mod functions")

    def and_mod(b, h, q_idx, kv_idx):
        out = mask_mods[0](b, h, q_idx, kv_idx)
        for f in mask_mods[1:]:
            out = out & f(b, h, q_idx, kv_idx)
        return out

    and_mod.square_only = any(getattr(f, "square_only", False) for f in mask_mods)
    return and_mod


# ---- biases: score_mod(score, b, h, q_idx, kv_idx) -> score -----------------------------


def _offset(n, m) -> int:
    if n is None and m is None:
        return 0
    n, m = require_int(n, "n", 1), require_int(m, "m", 1)
    if m < n:
        raise ValueError(f"the queries are the last n of m positions: need m >= n, got {n}, {m}")
    return m - n


def alibi(num_heads: int, *, n: int | None = None, m: int | None = None) -> ScoreMod:
    """ALiBi (chapter 6): add ``-slope_h * |i + offset - j|`` to the scores.

    Args:
        num_heads: ``h``; the slopes are :func:`selfattn.positional.alibi_slopes`.
        n, m: with both, queries are the last ``n`` of ``m`` positions (offset ``m - n``),
            as in :func:`selfattn.positional.alibi_bias`; without them, offset 0.
    """
    from .positional import alibi_slopes

    slopes = alibi_slopes(num_heads)
    offset = _offset(n, m)

    def alibi_mod(score, b, h, q_idx, kv_idx):
        distance = (q_idx + offset - kv_idx).abs()
        return score - slopes[h] * distance

    return alibi_mod


def t5_bias(module: torch.nn.Module, *, n: int | None = None, m: int | None = None) -> ScoreMod:
    """T5's learned relative bias (chapter 6) from a
    :class:`selfattn.positional.RelativePositionBias`: add ``weight[bucket(j - i - offset), h]``.

    The buckets of every relative position the call can meet are computed once (a table
    indexed by ``j - i``), so the ``score_mod`` only looks them up.

    Args:
        module: the ``RelativePositionBias`` (its weights are read at call time).
        n, m: queries are the last ``n`` of ``m`` positions (offset ``m - n``), as the
            module's own ``forward(n, m)``; without them, offset 0 and ``n = m = 4096``
            at most.
    """
    from .positional import RelativePositionBias, relative_position_bucket

    require_module(module, "module")
    if not isinstance(module, RelativePositionBias):
        raise TypeError(f"module must be a RelativePositionBias, got {type(module).__name__}")
    offset = _offset(n, m)
    reach = (m if m is not None else 4096) + 1
    rel = torch.arange(-reach - offset, reach + 1, device=module.bias.weight.device)
    buckets = relative_position_bucket(
        rel,
        bidirectional=module.bidirectional,
        num_buckets=module.num_buckets,
        max_distance=module.max_distance,
    )
    first = -reach - offset
    weight = module.bias.weight

    def t5_mod(score, b, h, q_idx, kv_idx):
        bucket = buckets[kv_idx - q_idx - offset - first]
        return score + weight[bucket, h]

    return t5_mod


def softcap(cap: float) -> ScoreMod:
    """Gemma 2's soft-capping (chapter 11): ``cap * tanh(score / cap)`` keeps every score
    inside ``(-cap, cap)``."""
    cap = require_number(cap, "cap", positive=True)

    def softcap_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return softcap_mod


# ---- block masks ------------------------------------------------------------------------


def dense_mask(mask_mod: MaskMod, n: int, m: int | None = None, *, batch=None, heads=None):
    """The ``(n, m)`` bool matrix a ``mask_mod`` draws (``(B, h, n, m)`` with ``batch`` and
    ``heads``): torch's ``create_mask``, the picture to compare with the library's masks."""
    fa = _require_flex()
    n = require_int(n, "n", 1)
    m = n if m is None else require_int(m, "m", 1)
    _require_fits(mask_mod, n, m)
    with _quiet():
        dense = fa.create_mask(mask_mod, batch, heads, n, m, device="cpu")
    return dense if batch is not None or heads is not None else dense[0, 0]


def block_mask(
    mask_mod: MaskMod,
    n: int,
    m: int | None = None,
    *,
    batch: int | None = None,
    heads: int | None = None,
    block_size: int = 128,
    device=None,
):
    """torch's ``BlockMask`` of a ``mask_mod``: which ``block_size`` tiles hold a visible pair.

    Args:
        mask_mod: the mask; n, m: queries and keys (``m`` defaults to ``n``).
        batch, heads: sizes when the mask depends on ``b`` or ``h`` (``None``: shared).
        block_size: tile size ``block_q = block_k`` (need not divide ``n``).
        device: where the kernel will run.
    """
    fa = _require_flex()
    n = require_int(n, "n", 1)
    m = n if m is None else require_int(m, "m", 1)
    block_size = require_int(block_size, "block_size", 1)
    _require_fits(mask_mod, n, m)
    with _quiet():
        return fa.create_block_mask(
            mask_mod, batch, heads, n, m, device=device or "cpu", BLOCK_SIZE=block_size
        )


def block_fraction(bm) -> float:
    """The fraction of tiles a ``BlockMask`` computes (partial and full ones), in ``[0, 1]``."""
    return 1.0 - float(bm.sparsity()) / 100.0


# ---- the kernel -------------------------------------------------------------------------


class _quiet(warnings.catch_warnings):
    """Silences FlexAttention's "called without torch.compile()" and inductor's warnings."""

    def __enter__(self):
        out = super().__enter__()
        warnings.filterwarnings("ignore", message=".*flex_attention.*")
        warnings.filterwarnings("ignore", module=r"torch(\.|$)")
        return out


@functools.lru_cache(maxsize=1)
def _compiled_flex():
    fa = _require_flex(compiled=True)
    import logging

    for name in ("torch._inductor", "torch._dynamo"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return torch.compile(fa.flex_attention, dynamic=False)


def flex(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask_mod: MaskMod | None = None,
    score_mod: ScoreMod | None = None,
    block_mask=None,
    scale: float | None = None,
    compiled: bool = False,
) -> torch.Tensor:
    """FlexAttention: ``softmax(score_mod(q k^T * scale), masked by mask_mod) v``.

    Args:
        q: queries ``(B, h, n, d_k)``; k: keys ``(B, h, m, d_k)``; v: values ``(B, h, m, d_v)``.
        mask_mod: a mask (this module's factories); ignored when ``block_mask`` is given.
        score_mod: a bias (:func:`alibi`, :func:`t5_bias`, :func:`softcap`).
        block_mask: a prebuilt :func:`block_mask` (build it once, reuse it every call).
        scale: multiplies the scores; defaults to ``1 / sqrt(d_k)``.
        compiled: run the compiled kernel, which skips the empty tiles (the first call of each
            shape and mask function compiles: tens of seconds on a CPU); eager (the default)
            computes the full scores.

    Returns:
        ``(B, h, n, d_v)``; a query that may attend to no key gets zeros.
    """
    fa = _require_flex(require_bool(compiled, "compiled"))
    for name, t in (("q", q), ("k", k), ("v", v)):
        require_tensor(t, name)
        if t.dim() != 4 or not t.is_floating_point():
            raise ValueError(
                f"{name} must be a float tensor (B, h, L, d), got {t.dtype} {t.shape}"
            )
    if block_mask is None and mask_mod is not None:
        block_mask = _block_mask_for(mask_mod, q, k)
    scale = require_number(scale, "scale", allow_none=True)
    fn = _compiled_flex() if compiled else fa.flex_attention
    with _quiet():
        return fn(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)


def _block_mask_for(mask_mod: MaskMod, q: torch.Tensor, k: torch.Tensor):
    """The ``BlockMask`` of ``mask_mod`` for these queries and keys, on their device.

    Built with the real batch and head sizes: a mask that depends on ``b`` or ``h`` (padding,
    batched documents) evaluated at ``b = h = 0`` and broadcast would make the compiled kernel,
    which trusts the tiles, silently wrong for the other rows."""
    return block_mask(
        mask_mod,
        q.shape[-2],
        k.shape[-2],
        batch=q.shape[0],
        heads=q.shape[1],
        device=q.device,
    )


def _sdpa_flex(a) -> torch.Tensor:
    """``scaled_dot_product_attention(..., kernel="flex")``: the checked arguments as one
    FlexAttention call, batch dimensions flattened into ``B`` (one head)."""
    q, k, v = a.q, a.k, a.v
    n, m, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    if min(n, m, d_k) == 0:  # empty sizes: the conventions of the reference, no kernel needed
        from .attention import _torch_kernel

        return _torch_kernel(q, k, v, a.mask, a.scale, 0.0)
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    qf, kf, vf = (
        t.expand(*batch, *t.shape[-2:]).reshape(-1, 1, *t.shape[-2:]).float() for t in (q, k, v)
    )
    if not torch.is_grad_enabled():  # torch refuses inputs that require grad on the CPU
        qf, kf, vf = qf.detach(), kf.detach(), vf.detach()
    mask_mod = score_mod = None
    if a.causal:
        mask_mod = causal("bottom_right", n=n, m=m)
    elif a.mask is not None:
        mask = a.mask.expand(*batch, n, m).reshape(-1, n, m)
        visible = mask if mask.dtype == torch.bool else mask > float("-inf")

        def mask_mod(b, h, q_idx, kv_idx):
            return visible[b, q_idx, kv_idx]

        if mask.dtype != torch.bool:
            bias = mask.float().masked_fill(~visible, 0.0)

            def score_mod(score, b, h, q_idx, kv_idx):
                return score + bias[b, q_idx, kv_idx]

    bm = None
    if mask_mod is not None:
        bm = block_mask(
            mask_mod,
            n,
            m,
            batch=qf.shape[0] if a.mask is not None else None,
            device=qf.device,  # torch refuses a BlockMask on another device than q, k, v
        )
    fa = _require_flex()
    with _quiet():
        out = fa.flex_attention(qf, kf, vf, score_mod=score_mod, block_mask=bm, scale=a.scale)
    return out.reshape(*batch, n, d_v).to(a.dtype)


register_kernel(
    "flex",
    Kernel(_sdpa_flex, dropout=False, backward="gpu", causal="always", upcast_half=False),
)


# ---- packed sequences -------------------------------------------------------------------


def pack_documents(lengths) -> tuple[torch.Tensor, torch.Tensor]:
    """Documents of ``lengths`` laid end to end in one row: their ids and positions.

    Args:
        lengths: document lengths (ints >= 1).

    Returns:
        ``(doc_ids, positions)``, two ``torch.long`` tensors ``(sum(lengths),)``: the
        document of each slot (0, 0, 0, 1, 1, ...) and each token's position inside its
        own document (0, 1, 2, 0, 1, ...), for :func:`document` and per-document positions.
    """
    lengths = _int_vector(lengths, "lengths", minimum=1)
    doc_ids = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    positions = torch.arange(int(lengths.sum())) - starts[doc_ids]
    return doc_ids, positions


def _int_vector(values, name: str, minimum: int = 0) -> torch.Tensor:
    try:
        t = torch.as_tensor(values)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be a 1-D integer sequence, got {values!r}") from None
    if t.dim() != 1 or t.numel() == 0 or t.is_floating_point() or t.dtype == torch.bool:
        raise TypeError(
            f"{name} must be a non-empty 1-D integer sequence, got shape {tuple(t.shape)} "
            f"dtype {t.dtype}"
        )
    if (t < minimum).any():
        raise ValueError(f"every entry of {name} must be >= {minimum}, got {t.tolist()}")
    return t.long()
