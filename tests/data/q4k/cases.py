"""Q4_K test inputs by data class, and llama.cpp's own Q4_K code reached through ggml-python.

Shared by tests/test_q4k_contract.py, tests/test_q4k_oracle.py, make_golden.py and benchmarks/q4k.py (loaded
by file path; tests/ is not a package). Every input is regenerable from (class, seed, blocks) with numpy's
default_rng.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np

QK_K = 256
BLOCK_BYTES = 2 + 2 + 12 + QK_K // 2


def _gaussian(rng: np.random.Generator, b: int) -> np.ndarray:
    return rng.standard_normal((b, QK_K))


def _row_scaled(rng: np.random.Generator, b: int) -> np.ndarray:
    # Each block its own scale across 8 decades, as weight rows of very different norms.
    return rng.standard_normal((b, QK_K)) * np.exp(rng.uniform(-9, 9, (b, 1)))


def _heavy_tailed(rng: np.random.Generator, b: int) -> np.ndarray:
    return np.clip(rng.standard_cauchy((b, QK_K)), -1e4, 1e4)


def _outliers(rng: np.random.Generator, b: int) -> np.ndarray:
    x = rng.standard_normal((b, QK_K)) * 0.02
    hit = rng.random((b, QK_K)) < 0.01
    return np.where(hit, rng.standard_normal((b, QK_K)) * 20, x)


def _all_positive(rng: np.random.Generator, b: int) -> np.ndarray:
    return rng.uniform(0.5, 3.0, (b, QK_K))


def _all_negative(rng: np.random.Generator, b: int) -> np.ndarray:
    return -rng.exponential(1.0, (b, QK_K))


def _tiny(rng: np.random.Generator, b: int) -> np.ndarray:
    # fp16 d and dmin fall into subnormals or to zero here.
    return rng.standard_normal((b, QK_K)) * 1e-6


def _half_zero_subblocks(rng: np.random.Generator, b: int) -> np.ndarray:
    x = rng.standard_normal((b, 8, 32))
    x[rng.random((b, 8)) < 0.5] = 0.0
    return x.reshape(b, QK_K)


def _integer_valued(rng: np.random.Generator, b: int) -> np.ndarray:
    return rng.integers(-8, 8, (b, QK_K)).astype(np.float64)


def _zero(rng: np.random.Generator, b: int) -> np.ndarray:
    return np.zeros((b, QK_K))


def _constant(rng: np.random.Generator, b: int) -> np.ndarray:
    c = rng.standard_normal((b, 1)) * np.exp(rng.uniform(-5, 5, (b, 1)))
    return np.repeat(c, QK_K, axis=1)


def _constant_subblocks(rng: np.random.Generator, b: int) -> np.ndarray:
    return np.repeat(rng.standard_normal((b, 8, 1)), 32, axis=2).reshape(b, QK_K)


def _sparse(rng: np.random.Generator, b: int) -> np.ndarray:
    return np.where(rng.random((b, QK_K)) < 0.05, rng.standard_normal((b, QK_K)), 0.0)


CLASSES = {
    "gaussian": _gaussian,
    "row_scaled": _row_scaled,
    "heavy_tailed": _heavy_tailed,
    "outliers": _outliers,
    "all_positive": _all_positive,
    "all_negative": _all_negative,
    "tiny": _tiny,
    "half_zero_subblocks": _half_zero_subblocks,
    "integer_valued": _integer_valued,
    "zero": _zero,
    "constant": _constant,
    "constant_subblocks": _constant_subblocks,
    "sparse": _sparse,
}


def blocks_of(kind: str, seed: int, blocks: int) -> np.ndarray:  # -> f32[blocks, 256]
    """The inputs of one data class: f32[blocks, 256], from numpy's default_rng(seed)."""
    return CLASSES[kind](np.random.default_rng(seed), blocks).astype(np.float32)


def ggml_base() -> Any:
    """libggml-base of the installed ggml-python, its two Q4_K row functions typed; ImportError if absent."""
    import ggml  # ggml-python; builds llama.cpp's ggml from its sdist

    path = Path(ggml.__file__).parent / "lib" / "libggml-base.so"
    lib = ctypes.CDLL(str(path))
    for name in ("quantize_row_q4_K_ref", "dequantize_row_q4_K"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        getattr(lib, name).restype = None
    return lib


def c_quantize(lib: Any, x: np.ndarray) -> np.ndarray:  # f32[B, 256] -> u8[B, 144]
    """quantize_row_q4_K_ref over all of x, one call."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    assert x.shape[-1] % QK_K == 0
    out = np.empty((x.size // QK_K, BLOCK_BYTES), dtype=np.uint8)
    lib.quantize_row_q4_K_ref(x.ctypes.data, out.ctypes.data, x.size)
    return out


def c_dequantize(lib: Any, q: np.ndarray) -> np.ndarray:  # u8[B, 144] -> f32[B, 256]
    q = np.ascontiguousarray(q, dtype=np.uint8)
    out = np.empty((q.size // BLOCK_BYTES, QK_K), dtype=np.float32)
    lib.dequantize_row_q4_K(q.ctypes.data, out.ctypes.data, out.size)
    return out


def mismatch_report(got: np.ndarray, ref: np.ndarray) -> tuple[int, str]:  # u8 or f32 [B, n] x 2
    """(bad blocks, "N bad blocks (x%), worst block i: got ... vs reference ..."), comparing bit patterns."""
    g = got.reshape(got.shape[0], -1).view(np.uint8)
    r = ref.reshape(ref.shape[0], -1).view(np.uint8)
    bad_bytes = (g != r).sum(axis=1)
    bad = int((bad_bytes > 0).sum())
    if bad == 0:
        return 0, f"0 bad blocks of {g.shape[0]}"
    worst = int(np.argmax(bad_bytes))
    cols = np.flatnonzero(g[worst] != r[worst])[:8]
    return bad, (
        f"{bad} bad blocks ({100 * bad / g.shape[0]:.2f}%) of {g.shape[0]}, worst block {worst} "
        f"({bad_bytes[worst]} bytes differ, first at {cols.tolist()}): "
        f"got {g[worst][cols].tolist()} vs reference {r[worst][cols].tolist()}"
    )


def check_blocks(prediction_id: str, report: str, **observed: Any) -> None:
    """falsify.check, with the mismatch report attached to a violation (the formula shows only the counts)."""
    import falsify

    __tracebackhide__ = True
    try:
        falsify.check(prediction_id, report=report, **observed)
    except AssertionError as exc:
        exc.add_note(report)
        raise
