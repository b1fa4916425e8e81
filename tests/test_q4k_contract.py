"""Falsifiers of contract q4k-superblock-v1 (contracts/q4k-superblock-v1.yaml).

Everything comes from the `engine` fixture (`Q4_K = engine.q4_k()`); the oracles are gguf-py (a test
dependency) and llama.cpp's own quantizer output committed in tests/data/q4k/golden.bin (see the
README there). The block decoder below is the test's own reading of struct block_q4_K (ggml-common.h).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import testkit_q4k_cases as cases  # tests/data/q4k/, on pytest's pythonpath
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import falsify

QK_K = 256
BLOCK_BYTES = 2 + 2 + 12 + QK_K // 2
DATA = Path(__file__).parent / "data" / "q4k"
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def Q4_K(engine: Any) -> Any:
    return engine.q4_k()


def decode_fields(blocks: np.ndarray) -> tuple[np.ndarray, ...]:
    """u8[B, 144] -> d, dmin f32[B], sc, m f32[B, 8], q f32[B, 256], in llama.cpp's layout."""
    B = blocks.shape[0]
    d = blocks[:, 0:2].copy().view("<f2")[:, 0].astype(np.float32)
    dmin = blocks[:, 2:4].copy().view("<f2")[:, 0].astype(np.float32)
    s = blocks[:, 4:16]
    sc = np.empty((B, 8), np.uint8)
    m = np.empty((B, 8), np.uint8)
    for j in range(8):  # get_scale_min_k4
        if j < 4:
            sc[:, j] = s[:, j] & 63
            m[:, j] = s[:, j + 4] & 63
        else:
            sc[:, j] = (s[:, j + 4] & 0xF) | ((s[:, j - 4] >> 6) << 4)
            m[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    qs = blocks[:, 16:]
    q = np.empty((B, QK_K), np.uint8)
    for c in range(4):  # dequantize_row_q4_K: 32 low nibbles, then the same 32 bytes' high nibbles
        q[:, 64 * c : 64 * c + 32] = qs[:, 32 * c : 32 * c + 32] & 0xF
        q[:, 64 * c + 32 : 64 * c + 64] = qs[:, 32 * c : 32 * c + 32] >> 4
    return d, dmin, sc.astype(np.float32), m.astype(np.float32), q.astype(np.float32)


def random_blocks(raw: bytes, n_blocks: int) -> np.ndarray:  # -> u8[n_blocks, 144] with finite d and dmin
    blocks = np.frombuffer(raw, np.uint8).reshape(n_blocks, BLOCK_BYTES).copy()
    # An fp16 with all exponent bits set is Inf/NaN: clear the exponent's top bit (byte 1 and 3, bit 6).
    blocks[:, 1] &= 0xBF
    blocks[:, 3] &= 0xBF
    return blocks


def product_error(Q4_K: Any, q: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """max |y - x @ dequantize(q).T (float64)| / sum_k (|d*sc*q_k| + |dmin*m|) * |x_k|, for x f32[n, cols]."""
    rows = q.shape[0]
    W = Q4_K.dequantize(q).astype(np.float64)
    d, dmin, sc, m, qv = decode_fields(q.reshape(-1, BLOCK_BYTES))
    dsc = np.repeat((d[:, None] * sc).astype(np.float64), 32, axis=1)  # [B, 256]
    dm = np.repeat((dmin[:, None] * m).astype(np.float64), 32, axis=1)
    terms = (np.abs(dsc * qv) + np.abs(dm)).reshape(rows, -1)
    ref = x.astype(np.float64) @ W.T
    magnitude = np.abs(x.astype(np.float64)) @ terms.T
    err = np.abs(y.astype(np.float64) - ref)
    return float(np.max(np.where(magnitude > 0, err / np.where(magnitude > 0, magnitude, 1.0), err)))


def gaussian(seed: int, rows: int, cols: int, sigma: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((rows, cols)) * sigma).astype(np.float32)


@pytest.mark.falsifies("FALSIFY-Q4K-001")
@SETTINGS
@given(rows=st.integers(1, 9), blocks_per_row=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_block_size(Q4_K: Any, rows: int, blocks_per_row: int, seed: int) -> None:
    x = gaussian(seed, rows, blocks_per_row * QK_K)
    q = Q4_K.quantize(x)
    deq = Q4_K.dequantize(q)
    falsify.check(
        "FALSIFY-Q4K-001",
        x_shape=list(x.shape),
        q_shape=list(q.shape),
        q_dtype=str(q.dtype),
        deq_shape=list(deq.shape),
        deq_dtype=str(deq.dtype),
        rows=rows,
        blocks_per_row=blocks_per_row,
    )


@pytest.mark.falsifies("FALSIFY-Q4K-002")
@SETTINGS
@given(data=st.data(), n_blocks=st.integers(1, 12))
def test_dequantize_formula(Q4_K: Any, data: st.DataObject, n_blocks: int) -> None:
    raw = data.draw(st.binary(min_size=n_blocks * BLOCK_BYTES, max_size=n_blocks * BLOCK_BYTES))
    blocks = random_blocks(raw, n_blocks)
    got = Q4_K.dequantize(blocks.reshape(1, -1)).reshape(n_blocks, QK_K)
    d, dmin, sc, m, q = decode_fields(blocks)
    dsc = np.repeat(d[:, None] * sc, 32, axis=1)  # float32 products, as the formula forms them
    dm = np.repeat(dmin[:, None] * m, 32, axis=1)
    want = dsc * q - dm
    mismatches = int((got.view(np.uint32) != want.view(np.uint32)).sum())
    falsify.check("FALSIFY-Q4K-002", formula_mismatches=mismatches, values=got.size, n_blocks=n_blocks)


@pytest.mark.falsifies("FALSIFY-Q4K-003")
@SETTINGS
@given(data=st.data(), n_blocks=falsify.strategies("FALSIFY-Q4K-003")["n_blocks"], quantized=st.booleans())
def test_dequantize_equals_gguf(Q4_K: Any, data: st.DataObject, n_blocks: int, quantized: bool) -> None:
    gguf = pytest.importorskip("gguf")
    if quantized:
        kind = data.draw(st.sampled_from(sorted(cases.CLASSES)))
        blocks = Q4_K.quantize(cases.blocks_of(kind, data.draw(st.integers(0, 2**32 - 1)), n_blocks))
    else:
        raw = data.draw(st.binary(min_size=n_blocks * BLOCK_BYTES, max_size=n_blocks * BLOCK_BYTES))
        blocks = random_blocks(raw, n_blocks)
    ours = Q4_K.dequantize(blocks.reshape(n_blocks, BLOCK_BYTES)).reshape(n_blocks, QK_K)
    ref = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q4_K).reshape(n_blocks, QK_K)
    bad, report = cases.mismatch_report(ours, ref.astype(np.float32))
    cases.check_blocks("FALSIFY-Q4K-003", report, bad_blocks=bad, blocks=n_blocks, n_blocks=n_blocks)


@pytest.mark.falsifies("FALSIFY-Q4K-004")
def test_quantize_equals_llama_cpp_golden(Q4_K: Any) -> None:
    """llama.cpp's bytes for 312 blocks of 13 data classes, made by tests/data/q4k/make_golden.py."""
    meta = json.loads((DATA / "golden.json").read_text())
    golden = np.frombuffer((DATA / "golden.bin").read_bytes(), np.uint8).reshape(-1, BLOCK_BYTES)
    inputs = []
    for case in meta["cases"]:
        x = cases.blocks_of(case["class"], case["seed"], case["blocks"])
        assert hashlib.sha256(x.tobytes()).hexdigest() == case["inputs_sha256"], (
            f"numpy's default_rng no longer regenerates the golden inputs of class {case['class']!r}; "
            "rerun tests/data/q4k/make_golden.py with ggml-python installed"
        )
        inputs.append(x)
    x = np.concatenate(inputs)
    ours = Q4_K.quantize(x).reshape(-1, BLOCK_BYTES)
    bad, report = cases.mismatch_report(ours, golden)
    cases.check_blocks("FALSIFY-Q4K-004", report, bad_blocks=bad, blocks=len(golden), n_blocks=len(golden))


def hard_cases() -> list[dict[str, Any]]:
    return json.loads((DATA / "golden.json").read_text())["hard_cases"]


@pytest.mark.falsifies("FALSIFY-Q4K-004")
@pytest.mark.parametrize("case", hard_cases(), ids=lambda c: c["class"])
def test_quantize_equals_llama_cpp_hard_cases(Q4_K: Any, case: dict[str, Any]) -> None:
    """llama.cpp's bytes for the hard cases (exact rounding ties, near-zero and huge scales, flat, sparse and
    two-valued sub-blocks, signed zeros); inputs stored in hard_inputs.bin, made by make_golden.py."""
    meta = json.loads((DATA / "golden.json").read_text())
    raw_x, raw_q = (DATA / "hard_inputs.bin").read_bytes(), (DATA / "hard.bin").read_bytes()
    assert hashlib.sha256(raw_x).hexdigest() == meta["hard_inputs_sha256"], "hard_inputs.bin was changed"
    assert hashlib.sha256(raw_q).hexdigest() == meta["hard_bytes_sha256"], "hard.bin was changed"
    start = sum(c["blocks"] for c in meta["hard_cases"][: meta["hard_cases"].index(case)])
    x = np.frombuffer(raw_x, "<f4").reshape(-1, QK_K)[start : start + case["blocks"]].astype(np.float32)
    golden = np.frombuffer(raw_q, np.uint8).reshape(-1, BLOCK_BYTES)[start : start + case["blocks"]]
    # the ties are really there: counted again here from llama.cpp's bytes, not taken from the json
    ties = int(cases.requant_ties(x, golden).sum())
    assert ties == case["requant_ties"], (case["class"], ties, case["requant_ties"])
    if case["class"] == "requant_ties":
        assert (cases.requant_ties(x, golden) > 0).all(), "a requant_ties block without a tie"
    ours = Q4_K.quantize(x).reshape(-1, BLOCK_BYTES)
    bad, report = cases.mismatch_report(ours, golden)
    cases.check_blocks("FALSIFY-Q4K-004", report, bad_blocks=bad, blocks=len(golden), n_blocks=len(golden))


@pytest.mark.falsifies("FALSIFY-Q4K-005")
@SETTINGS
@falsify.corner_examples("FALSIFY-Q4K-005", seed=5, kind="gaussian", log_scale=0.0)
@given(
    rows=st.integers(1, 70),  # random cases stay small; the corners (1100 rows, several row tiles) come first
    blocks_per_row=st.integers(1, 8),
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["gaussian", "heavy_tailed", "all_positive", "outliers"]),
    log_scale=st.floats(-6, 6),
)
def test_matvec_tolerance(
    Q4_K: Any, rows: int, blocks_per_row: int, seed: int, kind: str, log_scale: float
) -> None:
    cols = blocks_per_row * QK_K
    W = cases.blocks_of(kind, seed, rows * blocks_per_row).reshape(rows, cols)
    x = (np.random.default_rng(seed + 1).standard_normal(cols) * np.exp(log_scale)).astype(np.float32)
    q = Q4_K.quantize(W)
    y = Q4_K.matvec(q, x)
    assert y.shape == (rows,) and y.dtype == np.float32
    falsify.check(
        "FALSIFY-Q4K-005",
        err_ratio=product_error(Q4_K, q, x[None, :], y[None, :]),
        rows=rows,
        blocks_per_row=blocks_per_row,
    )


@pytest.mark.falsifies("FALSIFY-Q4K-006")
@SETTINGS
@given(
    n=st.sampled_from([1, 2, 7, 63, 64, 65, 70]),
    rows=st.sampled_from([1, 5, 63, 70]),
    blocks_per_row=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_matmul_tolerance(Q4_K: Any, n: int, rows: int, blocks_per_row: int, seed: int) -> None:
    cols = blocks_per_row * QK_K
    q = Q4_K.quantize(gaussian(seed, rows, cols))
    x = gaussian(seed + 1, n, cols, sigma=3.0)
    y = Q4_K.matmul(q, x)
    falsify.check(
        "FALSIFY-Q4K-006",
        out_shape=list(y.shape),
        err_ratio=product_error(Q4_K, q, x, y),
        n=n,
        rows=rows,
        blocks_per_row=blocks_per_row,
    )


@pytest.mark.falsifies("FALSIFY-Q4K-007")
@SETTINGS
@given(
    log10_sigma=st.floats(-2, 4),
    rows=st.integers(1, 6),
    blocks_per_row=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_round_trip_rmse(Q4_K: Any, log10_sigma: float, rows: int, blocks_per_row: int, seed: int) -> None:
    sigma = 10.0**log10_sigma
    x = gaussian(seed, rows, blocks_per_row * QK_K, sigma)
    back = Q4_K.dequantize(Q4_K.quantize(x)).astype(np.float64)
    rel_rmse = float(np.sqrt(np.mean((back - x) ** 2)) / np.sqrt(np.mean(x.astype(np.float64) ** 2)))
    falsify.check("FALSIFY-Q4K-007", rel_rmse=rel_rmse, sigma=sigma, rows=rows, blocks_per_row=blocks_per_row)


@pytest.mark.falsifies("FALSIFY-Q4K-008")
@pytest.mark.parametrize("rows", [1, 3, 6])
def test_zero_rows(Q4_K: Any, rows: int) -> None:
    x = gaussian(rows, 2 * rows, 3 * QK_K, sigma=5.0)
    x[::2] = 0.0  # zero rows interleaved with Gaussian ones
    q = Q4_K.quantize(x)
    back = Q4_K.dequantize(q)
    falsify.check(
        "FALSIFY-Q4K-008",
        nonzero_bytes=int(np.count_nonzero(q[::2])),
        max_abs=float(np.abs(back[::2]).max()),
        rows=rows,
    )


@pytest.mark.falsifies("FALSIFY-Q4K-009")
@pytest.mark.parametrize("c", [0.1, -0.1, 0.37, -1.0, 1.0, 3.14159, -42.5, 1000.0, -9999.0, 10000.0])
def test_constant_blocks(Q4_K: Any, c: float) -> None:
    # One constant block per row, beside rows of other constants and of noise, so no block borrows a scale.
    x = np.stack([np.full(QK_K, c), np.full(QK_K, -c / 3), np.linspace(-1, 1, QK_K)]).astype(np.float32)
    back = Q4_K.dequantize(Q4_K.quantize(x))
    distinct = max(len(np.unique(back[0])), len(np.unique(back[1])))
    rel_err = float(
        max(
            np.abs(back[0] - np.float32(c)).max() / abs(np.float32(c)),
            np.abs(back[1] - x[1, 0]).max() / abs(x[1, 0]),
        )
    )
    falsify.check("FALSIFY-Q4K-009", distinct=distinct, rel_err=rel_err, c=c)


def _bad_input(Q4_K: Any, case: str) -> tuple[Any, str]:
    """Run one bad call; returns (the exception or None, text its message must contain)."""
    good = gaussian(0, 3, 2 * QK_K)
    q = Q4_K.quantize(good)  # [3, 288]
    calls = {
        "cols": (lambda: Q4_K.quantize(gaussian(0, 3, 300)), "(3, 300)"),
        "bytes": (lambda: Q4_K.dequantize(q[:, :150]), "(3, 150)"),
        "dtype": (lambda: Q4_K.quantize(good.astype(np.float64)), "float64"),
        "nan": (
            lambda: Q4_K.quantize(np.where(np.arange(3)[:, None] == 2, np.nan, good).astype(np.float32)),
            "row 2",
        ),
        "inf": (
            lambda: Q4_K.matmul(
                q, np.where(np.arange(4)[:, None] == 1, np.inf, gaussian(1, 4, 2 * QK_K)).astype(np.float32)
            ),
            "row 1",
        ),
        "x_cols": (lambda: Q4_K.matvec(q, gaussian(0, 1, QK_K)[0]), "(3, 288)"),
    }
    call, where = calls[case]
    try:
        call()
    except Exception as exc:
        return exc, where
    return None, where


@pytest.mark.falsifies("FALSIFY-Q4K-010")
@pytest.mark.parametrize("case", ["cols", "bytes", "dtype", "nan", "inf", "x_cols"])
def test_bad_input(Q4_K: Any, case: str) -> None:
    exc, where = _bad_input(Q4_K, case)
    falsify.check(
        "FALSIFY-Q4K-010",
        error=type(exc).__name__ if exc else "none",
        names_where=exc is not None and where in str(exc),
        case=case,
    )


@pytest.mark.falsifies("FALSIFY-Q4K-011")
@SETTINGS
@given(
    rows=falsify.strategies("FALSIFY-Q4K-011")["rows"],
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(sorted(cases.CLASSES)),
)
def test_rows_independent(Q4_K: Any, rows: int, seed: int, kind: str) -> None:
    x = cases.blocks_of(kind, seed, rows * 2).reshape(rows, 2 * QK_K)
    whole = Q4_K.quantize(x)
    alone = all(np.array_equal(Q4_K.quantize(x[i : i + 1])[0], whole[i]) for i in range(rows))
    falsify.check("FALSIFY-Q4K-011", rows_alone_equal=alone, rows=rows)
