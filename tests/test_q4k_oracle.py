"""Q4_K against llama.cpp's C code itself, through ggml-python (`pip install ggml-python` builds ggml from
its sdist). Marked `oracle`: run with `tox -e oracle` or `pytest -m oracle tests/test_q4k_oracle.py`. Bound to
FALSIFY-Q4K-012, which `requires: [oracle:ggml]`: without ggml-python the gate reports it NOT APPLICABLE by name.

13 data classes x 2,400 blocks = 31,200 blocks quantized by both quantize_row_q4_K_ref and the engine, plus 9 hard
classes x 800 blocks (tests/data/q4k/testkit_q4k_cases.py, HARD_CLASSES).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import testkit_q4k_cases as cases  # tests/data/q4k/, on pytest's pythonpath

pytestmark = pytest.mark.oracle

QK_K = 256
BLOCK_BYTES = 2 + 2 + 12 + QK_K // 2
BLOCKS_PER_CLASS = 2400


@pytest.fixture(scope="module")
def lib() -> Any:
    pytest.importorskip("ggml", reason="ggml-python is not installed (pip install ggml-python)")
    return cases.ggml_base()


@pytest.fixture(scope="module")
def Q4_K(engine: Any) -> Any:
    return engine.q4_k()


@pytest.mark.falsifies("FALSIFY-Q4K-012")
@pytest.mark.parametrize("kind", sorted(cases.CLASSES))
def test_quantize_equals_c(lib: Any, Q4_K: Any, kind: str) -> None:
    x = cases.blocks_of(kind, 20_000 + sorted(cases.CLASSES).index(kind), BLOCKS_PER_CLASS)
    ref = cases.c_quantize(lib, x)
    # 8 blocks per row, so rows of several blocks and the engine's tiling are exercised too.
    ours = Q4_K.quantize(x.reshape(-1, 8 * QK_K)).reshape(-1, BLOCK_BYTES)
    bad, report = cases.mismatch_report(ours, ref)
    cases.check_blocks("FALSIFY-Q4K-012", report, bad_blocks=bad, blocks=len(ref), n_blocks=len(ref))


@pytest.mark.falsifies("FALSIFY-Q4K-012")
@pytest.mark.parametrize("kind", list(cases.HARD_CLASSES))
def test_quantize_equals_c_on_hard_cases(lib: Any, Q4_K: Any, kind: str) -> None:
    """The hard classes (exact ties, near-zero and huge scales, flat and sparse sub-blocks), freshly made."""
    seed = 30_000 + list(cases.HARD_CLASSES).index(kind)
    x = cases.hard_blocks_of(kind, seed, 800, lambda v: cases.c_quantize(lib, v))
    ref = cases.c_quantize(lib, x)
    ours = Q4_K.quantize(x.reshape(-1, 8 * QK_K)).reshape(-1, BLOCK_BYTES)
    bad, report = cases.mismatch_report(ours, ref)
    cases.check_blocks("FALSIFY-Q4K-012", report, bad_blocks=bad, blocks=len(ref), n_blocks=len(ref))


@pytest.mark.falsifies("FALSIFY-Q4K-012")
@pytest.mark.parametrize("kind", ["gaussian", "row_scaled", "tiny", "random_bytes"])
def test_dequantize_equals_c(lib: Any, Q4_K: Any, kind: str) -> None:
    """dequantize_row_q4_K is the C twin of gguf-py's decoder; both must agree with the engine."""
    rng = np.random.default_rng(7)
    if kind == "random_bytes":
        q = rng.integers(0, 256, (4000, BLOCK_BYTES), dtype=np.uint8)
        q[:, 1] &= 0xBF  # keep fp16 d and dmin finite
        q[:, 3] &= 0xBF
    else:
        q = cases.c_quantize(lib, cases.blocks_of(kind, 7, 4000))
    ref = cases.c_dequantize(lib, q)
    ours = Q4_K.dequantize(q.reshape(-1, 8 * BLOCK_BYTES)).reshape(-1, QK_K)
    bad, report = cases.mismatch_report(ours, ref)
    cases.check_blocks("FALSIFY-Q4K-012", report, bad_blocks=bad, blocks=len(q), n_blocks=len(q))
