"""Per-stream state, kept apart from the weights: paged attention KV, GDN conv state, GDN recurrent state.

A `PagePool` owns fixed-size pages of attention K/V for every attention layer at once, as vLLM's block manager
does; a `StreamState` owns a page table into one pool plus the conv and recurrent state of every GDN layer.
Position p of a stream lives in page `pages[p // page_size]`, slot `p % page_size`.
"""

from __future__ import annotations

import hashlib
import heapq
import struct

import numpy as np

STATE_MAGIC = b"FSST"
STATE_VERSION = 1


class PoolExhausted(RuntimeError):
    """No free page is left in a fixed-size PagePool."""


class PagePool:
    """Fixed-size pages of attention K/V shared by streams.

    k, v: f32[n_pages, n_attn_layers, page_size, n_kv_heads, head_dim]. `alloc` hands out the lowest free id, so
    a run's page ids are deterministic. A growable pool (the private pool of `Model.new_state()`) doubles instead
    of raising PoolExhausted.
    """

    def __init__(
        self,
        n_pages: int,
        page_size: int,
        n_attn_layers: int,
        n_kv_heads: int,
        head_dim: int,
        *,
        growable: bool = False,
    ) -> None:
        for name, value in (("n_pages", n_pages), ("page_size", page_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"PagePool: {name} must be an int >= 1, got {value!r}")
        self.page_size = page_size
        self.growable = growable
        shape = (n_pages, n_attn_layers, page_size, n_kv_heads, head_dim)
        self.k = np.zeros(shape, np.float32)
        self.v = np.zeros(shape, np.float32)
        self._free = list(range(n_pages))  # a heap: alloc takes the lowest id
        self._used: set[int] = set()

    @property
    def n_pages(self) -> int:
        return int(self.k.shape[0])

    @property
    def page_shape(self) -> tuple[int, ...]:  # (n_attn_layers, page_size, n_kv_heads, head_dim)
        return tuple(self.k.shape[1:])

    def alloc(self) -> int:
        if not self._free:
            if not self.growable:
                raise PoolExhausted(
                    f"PagePool: all {self.n_pages} pages of {self.page_size} tokens are in use"
                )
            self._grow()
        page = heapq.heappop(self._free)
        self._used.add(page)
        return page

    def free(self, page_id: int) -> None:
        if page_id not in self._used:
            raise ValueError(f"PagePool: page {page_id!r} is not in use (double free or foreign id)")
        self._used.remove(page_id)
        heapq.heappush(self._free, page_id)

    def counts(self) -> tuple[int, int, int]:
        """(free, used, total) pages."""
        return len(self._free), len(self._used), self.n_pages

    def _grow(self) -> None:
        old = self.n_pages
        self.k = np.concatenate([self.k, np.zeros_like(self.k)])  # np.pad took 15x as long
        self.v = np.concatenate([self.v, np.zeros_like(self.v)])
        for page in range(old, 2 * old):
            heapq.heappush(self._free, page)


class StreamState:
    """Everything one stream carries between forward calls.

    pos: tokens consumed so far
    pages: page table, list of page ids in `pool` covering positions [0, pos)
    conv: per GDN layer f32[conv_dim, K], the last K inputs of the depthwise conv (HF's conv_states layout)
    recurrent: per GDN layer f32[Hv, dk, dv]
    """

    def __init__(self, pool: PagePool, conv: list[np.ndarray], recurrent: list[np.ndarray]) -> None:
        self.pool = pool
        self.pos = 0
        self.pages: list[int] = []
        self.conv = conv
        self.recurrent = recurrent
        self.released = False

    def reserve(self, n_positions: int) -> None:
        """Make the page table cover positions [0, n_positions); on PoolExhausted nothing is kept."""
        self._check_live()
        needed = -(-n_positions // self.pool.page_size) - len(self.pages)
        fresh: list[int] = []
        try:
            for _ in range(needed):
                fresh.append(self.pool.alloc())
        except PoolExhausted:
            for page in fresh:
                self.pool.free(page)
            raise
        self.pages.extend(fresh)

    def write_kv(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """Store k, v: [T, n_kv_heads, head_dim] of attention layer slot `layer` at positions start .. start+T-1."""
        size = self.pool.page_size
        t = 0
        while t < len(k):
            p = start + t
            page, slot = self.pages[p // size], p % size
            n = min(size - slot, len(k) - t)
            self.pool.k[page, layer, slot : slot + n] = k[t : t + n]
            self.pool.v[page, layer, slot : slot + n] = v[t : t + n]
            t += n

    def read_kv(self, layer: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """K, V of attention layer slot `layer` at positions [0, end): [end, n_kv_heads, head_dim] each."""
        n_pages = -(-end // self.pool.page_size)
        table = self.pages[:n_pages]
        k = self.pool.k[table, layer].reshape(-1, *self.pool.k.shape[3:])[:end]
        v = self.pool.v[table, layer].reshape(-1, *self.pool.v.shape[3:])[:end]
        return k, v

    def copy(self) -> StreamState:
        """Deep copy on fresh pages of the same pool."""
        self._check_live()
        other = StreamState(self.pool, [c.copy() for c in self.conv], [s.copy() for s in self.recurrent])
        other.reserve(self.pos)
        for src, dst in zip(self.pages, other.pages, strict=False):
            self.pool.k[dst] = self.pool.k[src]
            self.pool.v[dst] = self.pool.v[src]
        other.pos = self.pos
        return other

    def release(self) -> None:
        """Return every page to the pool; the state cannot be used afterwards. Releasing twice is a no-op."""
        if self.released:
            return
        for page in self.pages:
            self.pool.free(page)
        self.pages = []
        self.released = True

    def to_bytes(self) -> bytes:
        """Deterministic serialisation: header, the KV of positions < pos in page-table order, conv, recurrent.

        Page ids never appear, so two streams with equal content but different pages serialise equally.
        """
        arrays = self.arrays()
        header = struct.pack(
            "<4sIQIII",
            STATE_MAGIC,
            STATE_VERSION,
            self.pos,
            self.pool.page_shape[0],
            len(self.conv),
            len(self.recurrent),
        )
        return header + b"".join(_le_f32(a) for a in arrays)

    def arrays(self) -> list[np.ndarray]:
        """The tensors to_bytes() serialises, in its order: per attention layer K then V [pos, n_kv_heads,
        head_dim], then every conv state [conv_dim, K], then every recurrent state [Hv, dk, dv]."""
        self._check_live()
        out: list[np.ndarray] = []
        for layer in range(self.pool.page_shape[0]):
            out += self.read_kv(layer, self.pos)
        return out + list(self.conv) + list(self.recurrent)

    def digest(self) -> str:
        """sha256 hex of to_bytes()."""
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def _check_live(self) -> None:
        if self.released:
            raise ValueError("StreamState: used after release()")


def _le_f32(x: np.ndarray) -> bytes:
    assert x.dtype == np.float32, x.dtype
    return np.ascontiguousarray(x, dtype="<f4").tobytes()
