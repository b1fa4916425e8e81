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


# Hard cases: where a port of quantize_row_q4_K_ref goes wrong. Their inputs are stored (hard_inputs.bin), not
# regenerated: `requant_ties` is built around the C quantizer's own scales, so it needs the oracle to be rebuilt.


def _fp16_scales(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # u8[B, 144] -> f32[B, 8] x 2
    """d * sc[j] and dmin * m[j] as dequantize_row_q4_K forms them (get_scale_min_k4), read from the C bytes."""
    d = q[:, 0:2].copy().view("<f2")[:, 0].astype(np.float32)
    dmin = q[:, 2:4].copy().view("<f2")[:, 0].astype(np.float32)
    s = q[:, 4:16]
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    m = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return d[:, None] * sc.astype(np.float32), dmin[:, None] * m.astype(np.float32)


def requant_ties(x: np.ndarray, q: np.ndarray) -> np.ndarray:  # f32[B, 256], u8[B, 144] -> int[B]
    """Per block, the elements whose requantization (x + dm) / d lands exactly on k + 0.5 (k = 0..14), where
    llama.cpp's nearest_int rounds half to even."""
    d, dm = _fp16_scales(q)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (x.reshape(-1, 8, 32) + dm[:, :, None]) / d[:, :, None]
        tie = (d[:, :, None] > 0) & (r < 15) & (r - np.floor(r) == np.float32(0.5))
    return tie.reshape(len(x), -1).sum(axis=1)


def _requant_ties(rng: np.random.Generator, b: int, quantize: Any) -> np.ndarray:
    """Elements placed exactly on (k + 0.5) * d of the C quantizer's own sub-block scale d.

    One Gaussian sub-block fixes the block's d and dmin; the seven others are positive with a narrow spread, so
    their fitted min clamps to 0 (dm = 0 exactly) and their 6-bit scale ratio is far from a rounding edge.
    Moving a few of their elements onto ties then leaves d unchanged, so the ties survive requantization.
    """
    x = np.empty((b, 8, 32), np.float32)
    x[:, 0] = rng.standard_normal((b, 32)) * 2.0
    x[:, 1:] = rng.uniform(0.5, 2.0, (b, 7, 1)) + rng.uniform(0.3, 1.0, (b, 7, 1)) * rng.random((b, 7, 32))
    order = rng.permuted(np.tile(np.arange(8), (b, 1)), axis=1)
    x = np.take_along_axis(x, order[:, :, None], axis=1)
    for _ in range(2):
        d, dm = _fp16_scales(quantize(x.reshape(b, QK_K)))
        for i, j in zip(*np.nonzero((dm == 0) & (d > 0)), strict=True):
            row = x[i, j]
            ends = {int(np.argmin(row)), int(np.argmax(row))}
            for e in [e for e in range(32) if e not in ends][::5]:
                k = int(np.floor(row[e] / d[i, j]))
                if 0 <= k <= 14:
                    row[e] = np.float32(k + 0.5) * d[i, j]  # exact: d has at most 17 significant bits
    return x.reshape(b, QK_K)


def _scale_ratio_ties(rng: np.random.Generator, b: int, quantize: Any) -> np.ndarray:
    """Sub-blocks exactly on a grid (L * s - m, L = 0..15), with 63 * s_j / s_max at a half-integer, so the 6-bit
    scale nearest_int(inv_scale * scale) meets exact ties when the fitted scales come out exact."""
    L = rng.integers(0, 16, (b, 8, 32)).astype(np.float64)
    L[:, :, 0], L[:, :, 1] = 0, 15
    s_max = 63 * 2.0 ** rng.integers(-3, 3, (b, 1, 1))
    s = np.minimum(s_max * (2 * rng.integers(1, 64, (b, 8, 1)) + 1) / 126, s_max)
    s[:, 0] = s_max[:, 0]
    m = np.where(rng.random((b, 8, 1)) < 0.5, 0.0, s * rng.integers(1, 8, (b, 8, 1)))
    return (L * s - m).reshape(b, QK_K)


def _near_zero(rng: np.random.Generator, b: int, quantize: Any) -> np.ndarray:
    # 1e-9 .. 1e-3: d and dmin fall to fp16 subnormals or to zero, sc and m lose their meaning
    return rng.standard_normal((b, QK_K)) * 10.0 ** rng.uniform(-9, -3, (b, 1))


def _mixed_magnitude(rng: np.random.Generator, b: int, quantize: Any) -> np.ndarray:
    # one loud sub-block, seven near-silent: their 6-bit scales round to 0, so d * sc == 0 and they keep
    # make_qkx2_quants' levels instead of being requantized
    x = rng.standard_normal((b, 8, 32)) * 10.0 ** rng.uniform(-7, -3, (b, 8, 1))
    x[np.arange(b), rng.integers(0, 8, b)] *= 10.0 ** rng.uniform(3, 9, (b, 1))
    return x.reshape(b, QK_K)


def _huge(rng: np.random.Generator, b: int, quantize: Any) -> np.ndarray:
    # fp16 d or dmin near the top of their range (65504 * 63 per 6-bit step), still finite: Gaussian up to ~4e6,
    # all-positive up to 5.5e7 (d near 63 000), all-negative down to -4.0e6 (dmin near 63 000)
    kind = rng.integers(0, 3, (b, 1))
    gauss = rng.standard_normal((b, QK_K)) * 10.0 ** rng.uniform(3, 5.9, (b, 1))
    pos = rng.uniform(0, 5.5e7, (b, QK_K))
    neg = -rng.uniform(0, 4.0e6, (b, QK_K))
    return np.where(kind == 0, gauss, np.where(kind == 1, pos, neg))


def _constant_subblocks_signed(rng: np.random.Generator, b: int, quantize: Any) -> np.ndarray:
    # every sub-block flat (max == min): positive (min clamps to 0), negative, zero, at different magnitudes
    c = rng.standard_normal((b, 8, 1)) * 10.0 ** rng.uniform(-3, 3, (b, 8, 1))
    c[rng.random((b, 8, 1)) < 0.25] = 0.0
    return np.repeat(c, 32, axis=2).reshape(b, QK_K)


def _one_hot(rng: np.random.Generator, b: int, quantize: Any) -> np.ndarray:
    # a single non-zero per block (half the blocks) or per sub-block, either sign
    x = np.zeros((b, 8, 32))
    one = rng.random(b) < 0.5
    vals = rng.standard_normal((b, 8)) * 10.0 ** rng.uniform(-2, 2, (b, 1))
    pos = rng.integers(0, 32, (b, 8))
    for i in range(b):
        for j in range(1 if one[i] else 8):
            x[i, (rng.integers(0, 8) if one[i] else j), pos[i, j]] = vals[i, j]
    return x.reshape(b, QK_K)


def _two_valued(rng: np.random.Generator, b: int, quantize: Any) -> np.ndarray:
    lo, hi = np.sort(rng.standard_normal((2, b, 8, 1)), axis=0)
    return np.where(rng.random((b, 8, 32)) < 0.5, lo, hi).reshape(b, QK_K)


def _signed_zeros(rng: np.random.Generator, b: int, quantize: Any) -> np.ndarray:
    # +0.0 and -0.0 mixed with a few small values: the max/min scans and the sign of the min must follow C
    x = np.where(rng.random((b, QK_K)) < 0.5, -0.0, 0.0)
    few = rng.random((b, QK_K)) < 0.03
    return np.where(few, rng.standard_normal((b, QK_K)) * 1e-2, x)


HARD_CLASSES = {
    "requant_ties": _requant_ties,
    "scale_ratio_ties": _scale_ratio_ties,
    "near_zero": _near_zero,
    "mixed_magnitude": _mixed_magnitude,
    "huge": _huge,
    "constant_subblocks_signed": _constant_subblocks_signed,
    "one_hot": _one_hot,
    "two_valued": _two_valued,
    "signed_zeros": _signed_zeros,
}


def hard_blocks_of(kind: str, seed: int, blocks: int, quantize: Any) -> np.ndarray:  # -> f32[blocks, 256]
    """The inputs of one hard class; `quantize` is the oracle's f32[B, 256] -> u8[B, 144] (requant_ties uses it)."""
    return HARD_CLASSES[kind](np.random.default_rng(seed), blocks, quantize).astype(np.float32)


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
