"""PagePool and StreamState: paging, copy, release, deterministic serialisation."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from reference.model import load_model
from reference.state import PagePool, PoolExhausted
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
    with pytest.raises(ValueError, match="n_pages"):
        PagePool(bad, 4, 1, 1, 1)


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
    assert pool.counts() == (7, 3, 10)
    state.release()
    state.release()
    assert pool.counts() == (10, 0, 10)
    with pytest.raises(ValueError, match="after release"):
        model.forward(tokens(1), state)
    with pytest.raises(ValueError, match="after release"):
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


def test_foreign_pool_is_rejected(model) -> None:
    with pytest.raises(ValueError, match="pool pages hold"):
        model.new_state(PagePool(4, 16, n_attn_layers=2, n_kv_heads=2, head_dim=64))
