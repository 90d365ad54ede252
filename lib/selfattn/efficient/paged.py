"""A paged KV cache: vLLM's PagedAttention idea (Kwon et al., 2023) in plain PyTorch.

A server decodes many sequences at once, and none knows in advance how long it will get.
A contiguous cache must reserve room for ``max_len`` positions per sequence up front;
whatever a sequence does not use is wasted. A **paged** cache instead cuts the memory into
fixed-size **blocks** of ``block_size`` positions (pages, as in virtual memory): a sequence
takes a new block only when its last one is full, and a per-sequence **block table** lists
its blocks in order, wherever they lie in the pool. A sequence then wastes at most
``block_size - 1`` slots, in its last block, and finished sequences hand their blocks back
to the free list for others.

* :class:`PagedKVCache` holds the pools ``k_pool``/``v_pool`` of shape
  ``(num_blocks, h_kv, block_size, d_head)``, the free list, and one block table and
  length per sequence. Position ``p`` of a sequence lives in block ``table[p // block_size]``,
  slot ``p % block_size``.
* :func:`paged_attention` is attention for the newest ``n`` queries of a batch of
  sequences that **gathers** their keys and values through the block tables: the result
  equals attention over each sequence's contiguous cache (tested against
  :class:`~selfattn.multihead.KVCache` and torch SDPA).
* :func:`allocation_slots` counts the cache slots a batch of sequences of given lengths
  reserves contiguously (``max_len`` each) and paged (whole blocks), the numbers behind
  the waste that paging removes.

Example::

    cache = PagedKVCache(num_blocks=64, block_size=16, num_kv_heads=4, d_head=32)
    a, b = cache.add_sequence(), cache.add_sequence()
    cache.append(a, k_a, v_a)          # k_a, v_a: (h_kv, n_a, d_head), the prompt of a
    cache.append(b, k_b, v_b)
    out = paged_attention(q, cache, [a, b])   # q: (2, h, 1, d_head), one new query each
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence

import torch
from torch import nn

from .._checks import require_bool, require_float, require_int, require_tensor
from ..attention import scaled_dot_product_attention

__all__ = ["PagedKVCache", "paged_attention", "allocation_slots"]


class PagedKVCache:
    """Keys and values of many sequences in fixed-size blocks, found through block tables.

    Args:
        num_blocks: blocks in the pool (the memory reserved once, for all sequences).
        block_size: positions per block.
        num_kv_heads: key/value heads ``h_kv`` of the layer (with GQA fewer than its query
            heads).
        d_head: width of one head's keys and values.
        dtype: the pool's dtype.
        device: the pool's device (default: the CPU).

    Attributes:
        k_pool: ``(num_blocks, h_kv, block_size, d_head)``, the keys of every block.
        v_pool: the values, shaped like ``k_pool``.

    One cache serves one layer, like :class:`~selfattn.multihead.KVCache`; a model keeps
    one per layer with the same sequence ids. Pass the layer as ``layer=`` to
    :meth:`append` and :func:`paged_attention`: the cache then belongs to the first layer
    that appends to it, and while any sequence holds a position it refuses another layer
    (a second layer's keys would join the first layer's positions, and attention would read
    both) with a ValueError that says what to do. Freeing every sequence (or
    :meth:`reset`) releases it.

    Raises:
        TypeError: an argument of the wrong type (a size that is not an int, a bad dtype).
        ValueError: a size below 1.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        d_head: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ):
        num_blocks = require_int(num_blocks, "num_blocks", 1)
        self.block_size = require_int(block_size, "block_size", 1)
        self.num_kv_heads = require_int(num_kv_heads, "num_kv_heads", 1)
        self.d_head = require_int(d_head, "d_head", 1)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        shape = (num_blocks, self.num_kv_heads, self.block_size, self.d_head)
        self.k_pool = torch.zeros(shape, dtype=dtype, device=device)
        self.v_pool = torch.zeros(shape, dtype=dtype, device=device)
        # Reversed, so that pop() hands out the lowest free block first (readable tables).
        self._free = list(range(num_blocks - 1, -1, -1))
        self._tables: dict[int, list[int]] = {}
        self._lengths: dict[int, int] = {}
        self._next_id = 0
        self._owner: weakref.ref | None = None  # the layer that filled it (layer= calls)

    def __repr__(self) -> str:
        return (
            f"PagedKVCache(blocks={self.num_blocks} of {self.block_size} positions, "
            f"free={self.num_free_blocks}, sequences={len(self._tables)})"
        )

    @property
    def num_blocks(self) -> int:
        """Blocks in the pool, used or free."""
        return self.k_pool.shape[0]

    @property
    def num_free_blocks(self) -> int:
        """Blocks no sequence holds."""
        return len(self._free)

    @property
    def sequences(self) -> list[int]:
        """The ids of the live sequences, in the order they were added."""
        return list(self._tables)

    @property
    def block_nbytes(self) -> int:
        """Bytes of one block, keys and values together."""
        k = self.k_pool
        return 2 * k[0].numel() * k.element_size()

    def reset(self) -> None:
        """Free every sequence and forget the layer that filled the cache."""
        for seq in self.sequences:
            self.free_sequence(seq)
        self._owner = None

    def _claim(self, layer: nn.Module | None) -> None:
        """Refuse ``layer`` if another layer's positions are cached; else it owns the cache."""
        if layer is None:
            return
        if not isinstance(layer, nn.Module):
            raise TypeError(f"layer must be an nn.Module (the attention layer), got {layer!r}")
        owner = None if self._owner is None else self._owner()
        if owner is not None and owner is not layer and any(self._lengths.values()):
            raise ValueError(
                "this PagedKVCache holds the keys and values of another attention layer "
                "(each layer needs its own cache, with the same sequence ids): give this "
                "layer its own PagedKVCache, or call cache.reset() to start over"
            )
        self._owner = weakref.ref(layer)

    def _seq(self, seq: int) -> int:
        if isinstance(seq, bool) or not isinstance(seq, int) or seq not in self._tables:
            raise ValueError(
                f"seq must be the id of a live sequence {self.sequences}, got {seq!r}"
            )
        return seq

    def add_sequence(self) -> int:
        """Start an empty sequence (it holds no block yet); returns its id."""
        seq = self._next_id
        self._next_id += 1
        self._tables[seq], self._lengths[seq] = [], 0
        return seq

    def free_sequence(self, seq: int) -> None:
        """Forget a sequence and return its blocks to the free list."""
        seq = self._seq(seq)
        self._free.extend(reversed(self._tables.pop(seq)))
        del self._lengths[seq]

    def length(self, seq: int) -> int:
        """Number of cached positions of ``seq``."""
        return self._lengths[self._seq(seq)]

    def block_table(self, seq: int) -> list[int]:
        """The pool indices of ``seq``'s blocks, in position order (a copy)."""
        return list(self._tables[self._seq(seq)])

    def append(
        self, seq: int, k: torch.Tensor, v: torch.Tensor, *, layer: nn.Module | None = None
    ) -> None:
        """Write the keys and values of ``seq``'s next positions, taking blocks as needed.

        Args:
            seq: a sequence id from :meth:`add_sequence`.
            k: new keys ``(h_kv, n_new, d_head)``.
            v: new values, shaped like ``k``.
            layer: the attention layer whose keys these are; the cache refuses a second
                layer while it holds positions (``None``: not checked).

        Raises:
            ValueError: an unknown ``seq``, shapes that do not match the pool, another
                layer's cache.
            TypeError: non-float tensors, a dtype other than the pool's.
            RuntimeError: not enough free blocks (nothing is written then).
        """
        seq = self._seq(seq)
        require_float(k, "k")
        require_float(v, "v")
        want = (self.num_kv_heads, self.d_head)
        if k.dim() != 3 or k.shape != v.shape or (k.shape[0], k.shape[2]) != want:
            raise ValueError(
                f"k and v must both have shape (h_kv={want[0]}, n_new, d_head={want[1]}), "
                f"got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        if k.dtype != self.k_pool.dtype or v.dtype != self.k_pool.dtype:
            raise TypeError(f"k and v must be {self.k_pool.dtype}, got {k.dtype} and {v.dtype}")
        self._claim(layer)
        start, n_new = self._lengths[seq], k.shape[1]
        table, bs = self._tables[seq], self.block_size
        needed = math.ceil((start + n_new) / bs) - len(table)
        if needed > len(self._free):
            raise RuntimeError(
                f"out of blocks: sequence {seq} needs {needed} more, {len(self._free)} free "
                f"of {self.num_blocks}"
            )
        table.extend(self._free.pop() for _ in range(needed))
        pos = start
        while pos < start + n_new:  # one copy per block touched
            block, slot = table[pos // bs], pos % bs
            take = min(bs - slot, start + n_new - pos)
            src = slice(pos - start, pos - start + take)
            self.k_pool[block, :, slot : slot + take] = k[:, src]
            self.v_pool[block, :, slot : slot + take] = v[:, src]
            pos += take
        self._lengths[seq] = start + n_new

    def gather(self, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``seq``'s keys and values as contiguous tensors ``(h_kv, t, d_head)``."""
        seq = self._seq(seq)
        table = torch.tensor(self._tables[seq], dtype=torch.long, device=self.k_pool.device)
        t = self._lengths[seq]

        def read(pool: torch.Tensor) -> torch.Tensor:
            # (blocks, h, bs, d) -> (h, blocks * bs, d), then the first t positions
            return pool[table].transpose(0, 1).flatten(1, 2)[:, :t]

        return read(self.k_pool), read(self.v_pool)

    def batch_tables(self, seqs: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Block tables padded to one width ``(B, max_blocks)`` and lengths ``(B,)``.

        Padding entries point at block 0; the lengths say which positions are real.
        """
        seqs = [self._seq(s) for s in seqs]
        if not seqs:
            raise ValueError("seqs must name at least one sequence")
        width = max(1, max(len(self._tables[s]) for s in seqs))
        tables = torch.zeros(len(seqs), width, dtype=torch.long)
        for row, s in enumerate(seqs):
            tables[row, : len(self._tables[s])] = torch.tensor(self._tables[s], dtype=torch.long)
        lengths = torch.tensor([self._lengths[s] for s in seqs], dtype=torch.long)
        device = self.k_pool.device
        return tables.to(device), lengths.to(device)


def _require_paged_args(q, cache, seqs, layer) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`paged_attention`'s checks; returns the sequences' block tables and lengths."""
    require_tensor(q, "q")
    require_float(q, "q")
    if not isinstance(cache, PagedKVCache):
        raise TypeError(f"cache must be a PagedKVCache, got {type(cache).__name__}")
    if q.dim() != 4 or q.shape[-1] != cache.d_head:
        raise ValueError(
            f"q must have shape (B, h, n, d_head={cache.d_head}), got {tuple(q.shape)}"
        )
    if q.dtype != cache.k_pool.dtype:
        raise TypeError(f"q is {q.dtype} but the cache holds {cache.k_pool.dtype}")
    cache._claim(layer)
    batch, h, n, _ = q.shape
    seqs = list(seqs)
    if len(seqs) != batch:
        raise ValueError(f"seqs must name B={batch} sequences (one per row of q), got {seqs}")
    if h % cache.num_kv_heads:
        raise ValueError(
            f"q's {h} heads must be a multiple of the cache's num_kv_heads={cache.num_kv_heads}"
        )
    tables, lengths = cache.batch_tables(seqs)
    if bool((lengths < n).any()):
        raise ValueError(
            f"every sequence must hold the n={n} new positions already, lengths {lengths.tolist()}"
        )
    return tables, lengths


def paged_attention(
    q: torch.Tensor,
    cache: PagedKVCache,
    seqs: Sequence[int],
    *,
    causal: bool = True,
    scale: float | None = None,
    layer: nn.Module | None = None,
) -> torch.Tensor:
    """Attention of each sequence's newest ``n`` queries over its cached keys, read in blocks.

    The keys and values of every sequence are gathered from the pool through its block
    table, ``(B, h_kv, max_blocks * block_size, d_head)``; positions past a sequence's
    length are masked out, and with ``causal`` new query ``i`` of sequence ``b`` (position
    ``i + len_b - n``) sees keys ``0 .. i + len_b - n`` (the bottom-right alignment of
    decoding). Query head ``j`` reads key/value head ``j // (h / h_kv)`` (grouped-query
    attention, torch SDPA's ``enable_gqa`` layout).

    Args:
        q: queries ``(B, h, n, d_head)``: the last ``n`` positions of each sequence, whose
            keys and values were already appended to ``cache``.
        cache: the layer's :class:`PagedKVCache`.
        seqs: ``B`` sequence ids, the batch order of ``q``.
        causal: mask the new queries causally among themselves (irrelevant for ``n = 1``).
        scale: multiplies the scores; default ``1 / sqrt(d_head)``.
        layer: the attention layer asking; refused when ``cache`` holds another layer's
            keys and values (``None``: not checked).

    Returns:
        ``(B, h, n, d_head)``: equal to attention over each sequence's contiguous cache.

    Raises:
        TypeError: ``q`` not a float tensor or not of the pool's dtype, ``cache`` not a
            :class:`PagedKVCache`.
        ValueError: shapes that disagree with the cache, a sequence shorter than ``n``,
            an unknown sequence id, a cache filled by another layer.
    """
    causal = require_bool(causal, "causal")
    tables, lengths = _require_paged_args(q, cache, seqs, layer)
    h, n = q.shape[1], q.shape[2]

    def read(pool: torch.Tensor) -> torch.Tensor:
        # pool[tables]: (B, blocks, h_kv, bs, d) -> (B, h_kv, blocks * bs, d)
        return pool[tables].transpose(1, 2).flatten(2, 3)

    k, v = read(cache.k_pool), read(cache.v_pool)
    group = h // cache.num_kv_heads
    if group > 1:  # each key/value head serves `group` consecutive query heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    j = torch.arange(k.shape[2], device=q.device)  # key positions (B, 1, 1, m) below
    mask = j < lengths[:, None]  # (B, m): real positions only
    mask = mask[:, None, None, :]
    if causal:
        i = torch.arange(n, device=q.device)[:, None]  # new query i is position i + len - n
        mask = mask & (j <= i + (lengths - n)[:, None, None, None])
    return scaled_dot_product_attention(q, k, v, mask, scale=scale)


def allocation_slots(lengths: Sequence[int], *, max_len: int, block_size: int) -> dict[str, int]:
    """Cache slots (positions) for sequences of the given lengths, three ways.

    Returns:
        A dict of slot counts. ``used`` is the sum of the lengths (what the tokens fill),
        ``contiguous`` is ``len(lengths) * max_len`` (a cache reserving ``max_len`` per
        sequence), and ``paged`` is the sum of ``ceil(length / block_size) * block_size``
        (whole blocks). Multiply by ``2 x h_kv x d_head x bytes`` (and layers) for bytes.

    Raises:
        ValueError: a length below 0 or above ``max_len``, ``block_size`` or ``max_len``
            below 1.
    """
    max_len = require_int(max_len, "max_len", 1)
    block_size = require_int(block_size, "block_size", 1)
    lengths = [require_int(n, "lengths", 0) for n in lengths]
    if any(n > max_len for n in lengths):
        raise ValueError(f"lengths must not exceed max_len={max_len}, got max {max(lengths)}")
    return {
        "used": sum(lengths),
        "contiguous": len(lengths) * max_len,
        "paged": sum(math.ceil(n / block_size) * block_size for n in lengths),
    }
