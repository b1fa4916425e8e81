"""Falsifier of FALSIFY-Q4K-013 (contracts/q4k-superblock-v1.yaml): Q4_K products on blocks held in memory numpy
does not own (np.frombuffer over a writeable bytearray, as a reader over a file or socket buffer hands them out),
over several row tiles, before and after new blocks are written into that buffer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_q4k_contract import QK_K, gaussian, product_error

import falsify


@pytest.fixture(scope="module")
def Q4_K(engine: Any) -> Any:
    return engine.q4_k()


@pytest.mark.falsifies("FALSIFY-Q4K-013")
@pytest.mark.parametrize(
    ("rows", "blocks_per_row"), [(1100, 1), (205, 5)]
)  # Q4K-005's several-row-tiles corners
def test_products_on_borrowed_writeable_blocks_follow_their_bytes(
    Q4_K: Any, rows: int, blocks_per_row: int
) -> None:
    cols = blocks_per_row * QK_K
    first, second = (Q4_K.quantize(gaussian(seed, rows, cols)) for seed in (31, 32))
    buffer = bytearray(first.tobytes())
    q = np.frombuffer(buffer, np.uint8).reshape(first.shape)  # writeable, and numpy does not own it
    x = np.random.default_rng(33).standard_normal(cols).astype(np.float32)
    before = Q4_K.matvec(q, x)
    buffer[:] = second.tobytes()  # the same array object, new blocks
    after = Q4_K.matvec(q, x)
    falsify.check(
        "FALSIFY-Q4K-013",
        err_ratio=product_error(Q4_K, first, x[None, :], before[None, :]),
        err_ratio_after=product_error(Q4_K, second, x[None, :], after[None, :]),
        rows=rows,
        blocks_per_row=blocks_per_row,
    )
