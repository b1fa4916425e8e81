"""PagePool and StreamState: paging, copy, release, deterministic serialisation."""

from __future__ import annotations

import hashlib
import re
import struct

import numpy as np
import pytest

from reference.model import load_model
from reference.state import PagePool, PoolExhausted, StreamState
from reference.tiny import tiny_model


@pytest.fixture(scope="module")
def model():
    return load_model(tiny_model(0), weights="f32")


def tokens(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 512, n)


def test_pool_alloc_free_counts() -> None:
    pool = PagePool(3, 4, n_attn_layers=1, n_kv_heads=2, head_dim=8)
    assert pool.counts() == (3, 0, 3)
    assert [pool.alloc() for _ in range(3)] == [0, 1, 2]  # lowest id first: deterministic page tables
    with pytest.raises(PoolExhausted, match="3 pages"):
        pool.alloc()
    pool.free(1)
    assert pool.counts() == (1, 2, 3)
    with pytest.raises(ValueError, match="page 1 is not in use"):
        pool.free(1)
    assert pool.alloc() == 1


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_pool_rejects_bad_sizes(bad) -> None:
    with pytest.raises(ValueError, match=re.escape(f"PagePool: n_pages must be an int >= 1, got {bad!r}")):
        PagePool(bad, 4, 1, 1, 1)
    with pytest.raises(ValueError, match=re.escape(f"PagePool: page_size must be an int >= 1, got {bad!r}")):
        PagePool(4, bad, 1, 1, 1)


def test_growing_keeps_page_ids_and_their_content() -> None:
    """A growable pool doubles: existing pages keep their id and bytes, the new ids follow them."""
    pool = PagePool(2, 2, n_attn_layers=1, n_kv_heads=1, head_dim=3, growable=True)
    state = StreamState(pool, [], [])
    state.reserve(4)
    k = np.arange(12, dtype=np.float32).reshape(4, 1, 3)
    state.write_kv(0, 0, k, -k)
    assert state.pages == [0, 1] and pool.counts() == (0, 2, 2)
    state.reserve(5)  # a third page: the pool doubles to 4
    assert state.pages == [0, 1, 2] and pool.counts() == (1, 3, 4)
    assert pool.k.shape == (4, 1, 2, 1, 3)
    np.testing.assert_array_equal(pool.k[0, 0], k[:2])
    np.testing.assert_array_equal(pool.v[1, 0], -k[2:])
    np.testing.assert_array_equal(pool.k[2:], 0.0)
    kk, vv = state.read_kv(0, 4)
    np.testing.assert_array_equal(kk, k)
    np.testing.assert_array_equal(vv, -k)


def test_growable_pool_keeps_content(model) -> None:
    state = model.new_state()  # private pool starts small and doubles
    logits = model.forward(tokens(150), state)
    shared = model.new_pool(pages=64, page_size=16)
    other = model.new_state(shared)
    assert np.array_equal(model.forward(tokens(150), other), logits)
    assert other.to_bytes() == state.to_bytes()


def test_page_ids_never_reach_the_bytes(model) -> None:
    pool = model.new_pool(pages=32, page_size=8)
    blocker = model.new_state(pool)
    model.forward(tokens(20, seed=1), blocker)  # takes the low page ids
    a, b = model.new_state(pool), model.new_state()
    model.forward(tokens(75), a)
    model.forward(tokens(75), b)
    assert a.pages != b.pages[: len(a.pages)]
    assert a.to_bytes() == b.to_bytes()
    assert a.digest() == hashlib.sha256(b.to_bytes()).hexdigest()


def test_page_size_does_not_change_results(model) -> None:
    ref_state = model.new_state()
    ref = model.forward(tokens(75), ref_state)
    for page_size in (1, 7, 64, 128):
        state = model.new_state(model.new_pool(pages=80, page_size=page_size))
        assert np.array_equal(model.forward(tokens(75), state), ref), page_size
        assert state.to_bytes() == ref_state.to_bytes()


def test_copy_is_deep_and_continues_identically(model) -> None:
    pool = model.new_pool(pages=40, page_size=16)
    state = model.new_state(pool)
    model.forward(tokens(70), state)
    twin = state.copy()
    assert twin.digest() == state.digest() and twin.pos == 70
    assert set(twin.pages).isdisjoint(state.pages)
    a = model.forward(tokens(30, seed=2), state)
    assert twin.pos == 70  # advancing the original leaves the copy alone
    b = model.forward(tokens(30, seed=2), twin)
    assert np.array_equal(a, b) and twin.digest() == state.digest()


def test_release_returns_pages_and_blocks_reuse(model) -> None:
    pool = model.new_pool(pages=10, page_size=16)
    state = model.new_state(pool)
    model.forward(tokens(40), state)
    assert pool.counts() == (7, 3, 10) and state.released is False
    state.release()
    assert state.pages == [] and state.released is True
    state.release()
    assert pool.counts() == (10, 0, 10)
    used_after_release = "^" + re.escape("StreamState: used after release()") + "$"
    with pytest.raises(ValueError, match=used_after_release):
        model.forward(tokens(1), state)
    with pytest.raises(ValueError, match=used_after_release):
        state.to_bytes()


def test_pool_exhaustion_leaves_state_untouched(model) -> None:
    pool = model.new_pool(pages=4, page_size=16)
    state = model.new_state(pool)
    model.forward(tokens(40), state)
    before = state.to_bytes()
    with pytest.raises(PoolExhausted):
        model.forward(tokens(40, seed=3), state)  # needs 5 pages in all, the pool has 4
    assert state.to_bytes() == before and pool.counts() == (1, 3, 4)


def test_serialisation_is_a_function_of_content(model) -> None:
    a, b = model.new_state(), model.new_state()
    model.forward(tokens(33), a)
    model.forward(tokens(33), b)
    assert a.to_bytes() == b.to_bytes()
    model.forward(tokens(1, seed=5), a)
    model.forward(tokens(1, seed=6), b)
    assert a.digest() != b.digest()
    fresh = model.new_state().to_bytes()
    assert fresh[:4] == b"FSST" and len(fresh) < len(a.to_bytes())


def test_copy_of_a_state_with_pages_reserved_ahead(model) -> None:
    """A lane reserves its whole budget up front (reference/lanes.py): copy() covers what was consumed."""
    pool = model.new_pool(pages=12, page_size=16)
    state = model.new_state(pool)
    state.reserve(100)  # 7 pages, none written yet
    model.forward(tokens(20), state)
    twin = state.copy()
    assert twin.pos == 20 and len(twin.pages) == 2 and len(state.pages) == 7
    assert twin.to_bytes() == state.to_bytes()


def test_bytes_layout_is_header_then_little_endian_f32_arrays() -> None:
    """Parse to_bytes() back by hand: "<4sIQIII" header, then each array's float32 LE bytes, nothing between;
    with two attention layers, layer 1's K/V are its own."""
    pool = PagePool(3, 2, n_attn_layers=2, n_kv_heads=1, head_dim=2)
    conv = [np.arange(6, dtype=np.float32).reshape(3, 2)]
    rec = [np.full((1, 2, 2), 0.5, np.float32)]
    state = StreamState(pool, conv, rec)
    state.reserve(3)
    k0 = np.arange(6, dtype=np.float32).reshape(3, 1, 2)
    state.write_kv(0, 0, k0, k0 + 100)
    state.write_kv(1, 0, k0 + 200, k0 + 300)
    state.pos = 3
    data = state.to_bytes()
    header = struct.calcsize("<4sIQIII")
    assert struct.unpack_from("<4sIQIII", data) == (b"FSST", 1, 3, 2, 1, 1)
    floats = np.frombuffer(data[header:], "<f4")
    want = np.concatenate(
        [k0.ravel(), k0.ravel() + 100, k0.ravel() + 200, k0.ravel() + 300, conv[0].ravel(), rec[0].ravel()]
    )
    np.testing.assert_array_equal(floats, want)
    assert [a.shape for a in state.arrays()] == [(3, 1, 2)] * 4 + [(3, 2), (1, 2, 2)]
    assert state.digest() == hashlib.sha256(data).hexdigest()


def test_foreign_pool_is_rejected(model) -> None:
    with pytest.raises(ValueError, match="pool pages hold"):
        model.new_state(PagePool(4, 16, n_attn_layers=2, n_kv_heads=2, head_dim=64))
