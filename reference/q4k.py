"""Q4_K: llama.cpp's 4-bit k-quant, in numpy, bit-exact with ggml-quants.c.

A super-block holds QK_K = 256 values as 8 sub-blocks of 32; value = d * sc[j] * q - dmin * m[j], with d, dmin
fp16 and sc, m 6-bit. Layout (struct block_q4_K in ggml-common.h), 2 + 2 + 12 + QK_K // 2 = 144 bytes:

    bytes 0..1     d       fp16 super-block scale of the sub-block scales
    bytes 2..3     dmin    fp16 super-block scale of the sub-block mins
    bytes 4..15    scales  8 six-bit scales sc[0..7] and 8 six-bit mins m[0..7], packed as drawn above unpack_scales
    bytes 16..143  qs      256 four-bit quants: byte 32*c + l holds value 64*c + l in its low nibble and
                           value 64*c + 32 + l in its high nibble (c = 0..3, l = 0..31)

Every function works on all blocks at once. Float arithmetic is float32 in the C code's operation order; the
only loops are over the 21 steps of make_qkx2_quants and the 8 sub-blocks of a block. Where the C code sums the
32 elements of a sub-block left to right, one numpy reduction adds them row by row for every sub-block at once
(_seq_sum).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

QK_K = 256
K_SCALE_SIZE = 12
SUB = 32  # values per sub-block
N_SUB = QK_K // SUB
BLOCK_BYTES = 2 + 2 + K_SCALE_SIZE + QK_K // 2

# make_qkx2_quants arguments used by quantize_row_q4_K_ref: nmax 15, rmin -1, rdelta 0.1, nstep 20.
NMAX = 15
RMIN = np.float32(-1.0)
RDELTA = np.float32(0.1)
NSTEP = 20

# Sub-blocks quantized per tile: keeps the [32, tile] float32 work arrays (1 MiB each) near the cache.
QUANT_TILE = 8192
# Weights matmul widens to float32 at once (1 MiB): a tile of rows, never the whole matrix.
MATMUL_TILE_VALUES = 1 << 18
# The same for n > MATVEC_MAX_N rows of x (8 MiB): each tile is one BLAS call, and on shared cores OpenBLAS pays
# a thread hand-off per call (4096 x 4096 x 64 took 2.1 s in 64 calls, 0.48 s in 16, 0.40 s in 4).
MATMUL_GEMM_TILE_VALUES = 1 << 21
# Rows of x up to which matmul scales per-super-block dot products instead of the weights.
MATVEC_MAX_N = 4


def nearest_int(f: np.ndarray) -> np.ndarray:  # f32[...] -> i32[...]
    """Same as nearest_int in ggml-quants.c: add 1.5 * 2**23 and read the low mantissa bits.

    Round-half-to-even for |f| <= 4194303; outside that range it returns the C code's wrapped garbage.
    """
    assert f.dtype == np.float32
    bits = (f + np.float32(12582912.0)).view(np.int32)
    return (bits & 0x007FFFFF) - 0x00400000


def _level(f: np.ndarray) -> np.ndarray:  # f32[...] -> u8[...], overwriting f
    """MAX(0, MIN(15, nearest_int(f))) as uint8, for any float32 f (nearest_int's wrapped garbage included).

    nearest_int is the low 23 bits of f + 1.5 * 2**23, less 2**22: clipping those bits to 2**22 + [0, 15]
    leaves the level in their low byte.
    """
    f += np.float32(12582912.0)
    bits = f.view(np.int32)
    bits &= 0x007FFFFF
    np.clip(bits, 0x00400000, 0x0040000F, out=bits)
    return bits.astype(np.uint8)


def _seq_sum(a: np.ndarray) -> np.ndarray:  # [32, S] -> [S], S >= 2
    """Left-to-right float32 sum over axis 0, as the C loops `s += a[i]` add: ((a[0] + a[1]) + a[2]) + ...

    One call: numpy reduces the outer axis of a C-contiguous array of two or more columns one row at a time
    (its pairwise summation runs only along the contiguous axis, and a single column would be that axis), and
    initial=None starts from a[0] itself (the default starts from +0.0, which turns an all -0.0 sum into +0.0).
    tests/test_q4k_unit.py pins the order.
    """
    assert a.flags.c_contiguous and a.shape[1] >= 2
    return np.add.reduce(a, axis=0, initial=None)


def _round_clip(f: np.ndarray, bound: np.ndarray) -> np.ndarray:  # f32[32, S] -> f32[32, S], in place
    """MAX(0, MIN(nmax, nearest_int(f))) as float32, overwriting f.

    Adding and subtracting 1.5 * 2**23 rounds half to even exactly as nearest_int does while |f| <= 4194303;
    `bound` (>= max |f| per sub-block) says whether any sub-block leaves that range, where the C trick returns
    wrapped garbage that this path reproduces bit for bit through nearest_int.
    """
    if np.all(bound <= np.float32(4194303.0)):
        f += np.float32(12582912.0)
        f -= np.float32(12582912.0)
    else:
        f[...] = nearest_int(f)
    return np.clip(f, 0, NMAX, out=f)


def make_qkx2_quants(
    x: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Same as make_qkx2_quants(32, 15, x, weights, L, &the_min, Laux, -1, 0.1, 20, false) in ggml-quants.c.

    x, weights: f32[32, S] (one column per sub-block) -> scale f32[S], the_min f32[S], and the winning step's
    iscale and min f32[S] x 2, from which qkx2_levels makes its L (only the sub-blocks that keep L need it).
    """
    assert x.shape[0] == SUB and x.dtype == np.float32 and weights.dtype == np.float32
    ends = np.stack([x.min(axis=0), x.max(axis=0)])  # [2, S]: min and max of each sub-block
    xmin, vmax = ends
    buf = np.empty_like(x)
    laux = np.empty_like(x)
    wl = np.empty_like(x)
    sum_w = _seq_sum(weights)
    sum_x = _seq_sum(np.multiply(weights, x, out=buf))
    vmin = np.where(xmin > 0, np.float32(0.0), xmin)
    flat = vmax == vmin
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = np.float32(NMAX) / (vmax - vmin)
        scale = np.float32(1.0) / iscale
        best_error = _weighted_sq_error(
            x, weights, _quant_levels(x, vmin, iscale, ends, flat, laux), scale, vmin
        )
        # The C loop's state, a row each: the best error, its scale, the iscale and min its L came from (L is
        # recomputed from them once, not copied per step), and `min`, the best min so far that the next step
        # starts from. A step's candidates fill `cand` in the same order; one select takes the better ones.
        state = np.stack([best_error, scale, iscale, vmin, vmin])
        cand = np.empty_like(state)
        for step in range(NSTEP + 1):
            best_error, vmin = state[0], state[4]
            # (rmin + rdelta*is + nmax) / (max - min); `min` is the best min so far, as in the C loop.
            iscale = np.divide(RMIN + RDELTA * np.float32(step) + np.float32(NMAX), vmax - vmin, out=cand[2])
            Laux = _quant_levels(x, vmin, iscale, ends, flat, laux)
            wl = np.multiply(weights, Laux, out=wl)
            sum_l = _seq_sum(wl)
            sum_xl = _seq_sum(np.multiply(wl, x, out=buf))  # (w*l)*x[i], as C evaluates w*l*x[i]
            sum_l2 = _seq_sum(np.multiply(wl, Laux, out=wl))
            D = sum_w * sum_l2 - sum_l * sum_l
            this_scale = np.divide(sum_w * sum_xl - sum_x * sum_l, D, out=cand[1])
            this_min = np.divide(sum_l2 * sum_x - sum_l * sum_xl, D, out=cand[4])
            clamp = this_min > 0
            np.copyto(this_min, np.float32(0.0), where=clamp)
            np.copyto(this_scale, sum_xl / sum_l2, where=clamp)
            cand[0] = _weighted_sq_error(x, weights, Laux, this_scale, this_min)
            cand[3] = vmin
            better = (D > 0) & (cand[0] < best_error)
            state = np.where(better, cand, state)
    _, scale, best_iscale, best_vmin, vmin = state
    scale = np.where(flat, np.float32(0.0), scale)
    return scale, -vmin, best_iscale, best_vmin


def qkx2_levels(x: np.ndarray, vmin: np.ndarray, iscale: np.ndarray) -> np.ndarray:  # f32[32, k], f32[k] x 2
    """The L make_qkx2_quants returns, from the iscale and min of its winning step: u8[32, k].

    A flat sub-block (max == min) keeps its first iscale, 15 / 0 = inf, and nearest_int(0 * inf) is 0: the L = 0
    make_qkx2_quants returns early with. No sub-block is exempt from the range check here, so a NaN sends the
    levels down nearest_int's path.
    """
    ends = np.stack([x.min(axis=0), x.max(axis=0)])
    with np.errstate(invalid="ignore", over="ignore"):
        L = _quant_levels(x, vmin, iscale, ends, np.zeros(x.shape[1], dtype=bool), np.empty_like(x))
    return L.astype(np.uint8)


def _quant_levels(
    x: np.ndarray, vmin: np.ndarray, iscale: np.ndarray, ends: np.ndarray, flat: np.ndarray, out: np.ndarray
) -> np.ndarray:  # f32[32, S], f32[S] x 2, f32[2, S], bool[S] -> [32, S]
    """MAX(0, MIN(nmax, nearest_int(iscale*(x[i] - min)))) of make_qkx2_quants, into out; ends: [min x, max x]."""
    np.subtract(x, vmin, out=out)
    out *= iscale
    # iscale*(x - min) is monotone in x, so its values at the ends bound every element's magnitude. Flat
    # sub-blocks (max == min, iscale inf) are overwritten with L = 0 by the caller, as make_qkx2_quants returns
    # early for them.
    bound = np.abs(iscale * (ends - vmin))
    bound[:, flat] = 0
    return _round_clip(out, bound)


def _weighted_sq_error(
    x: np.ndarray, weights: np.ndarray, L: np.ndarray, scale: np.ndarray, vmin: np.ndarray
) -> np.ndarray:  # f32[32, S] x 3, f32[S] x 2 -> f32[S]
    """sum of w * diff*diff with diff = scale * L[i] + min - x[i], in make_qkx2_quants' order; overwrites L."""
    L *= scale
    L += vmin
    L -= x
    L *= L
    L *= weights
    return _seq_sum(L)


# The 12 scale bytes, sc = 6-bit scales, m = 6-bit mins, bit 7 on the left:
#
#   byte 0..3    sc[j+4]>>4 (2 bits) | sc[j]    (6 bits)     j = 0..3
#   byte 4..7    m[j+4]>>4  (2 bits) | m[j]     (6 bits)     j = 0..3
#   byte 8..11   m[j+4]&0xF (4 bits) | sc[j+4]&0xF (4 bits)  j = 0..3
#
# which is get_scale_min_k4 in ggml-quants.c.
def unpack_scales(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # u8[B, 12] -> sc, m u8[B, 8]
    assert scales.dtype == np.uint8 and scales.shape[-1] == K_SCALE_SIZE
    lo, mid, hi = scales[:, 0:4], scales[:, 4:8], scales[:, 8:12]
    sc = np.concatenate([lo & 0x3F, (hi & 0x0F) | ((lo >> 6) << 4)], axis=1)
    m = np.concatenate([mid & 0x3F, (hi >> 4) | ((mid >> 6) << 4)], axis=1)
    return sc, m


def pack_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:  # u8[B, 8], u8[B, 8] -> u8[B, 12]
    assert sc.dtype == np.uint8 and m.dtype == np.uint8
    lo = (sc[:, 0:4] & 0x3F) | ((sc[:, 4:8] >> 4) << 6)
    mid = (m[:, 0:4] & 0x3F) | ((m[:, 4:8] >> 4) << 6)
    hi = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    return np.concatenate([lo, mid, hi], axis=1)


def unpack_qs(qs: np.ndarray) -> np.ndarray:  # u8[B, 128] -> u8[B, 8, 32]
    """Sub-block 2c is the low nibbles of qs[32c : 32c+32], sub-block 2c+1 their high nibbles."""
    q = qs.reshape(-1, 4, 1, SUB)
    return np.concatenate([q & 0x0F, q >> 4], axis=2).reshape(-1, N_SUB, SUB)


def pack_qs(L: np.ndarray) -> np.ndarray:  # u8[B, 8, 32] -> u8[B, 128]
    L = L.reshape(-1, 4, 2, SUB)
    return (L[:, :, 0] | (L[:, :, 1] << 4)).reshape(-1, QK_K // 2)


def split_blocks(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """u8[B, 144] -> d f32[B], dmin f32[B], scales u8[B, 12], qs u8[B, 128]"""
    assert blocks.dtype == np.uint8 and blocks.shape[-1] == BLOCK_BYTES
    d = blocks[:, 0:2].copy().view(np.float16)[:, 0].astype(np.float32)
    dmin = blocks[:, 2:4].copy().view(np.float16)[:, 0].astype(np.float32)
    scales = blocks[:, 4 : 4 + K_SCALE_SIZE]
    qs = blocks[:, 4 + K_SCALE_SIZE :]
    return d, dmin, scales, qs


def sub_block_scales(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # u8[B, 144] -> f32[B, 8] x 2
    """d * sc[j] and dmin * m[j], the two floats dequantize_row_q4_K forms per sub-block."""
    d, dmin, scales, _ = split_blocks(blocks)
    sc, m = unpack_scales(scales)
    return d[:, None] * sc.astype(np.float32), dmin[:, None] * m.astype(np.float32)


def quantize_blocks(x: np.ndarray) -> np.ndarray:  # f32[B, 256] -> u8[B, 144]
    """Same bytes as quantize_row_q4_K_ref in ggml-quants.c (no importance matrix)."""
    B = x.shape[0]
    out = np.empty((B, BLOCK_BYTES), dtype=np.uint8)
    per_tile = max(1, QUANT_TILE // N_SUB)
    for start in range(0, B, per_tile):
        out[start : start + per_tile] = _quantize_tile(x[start : start + per_tile])
    return out


def _quantize_tile(x: np.ndarray) -> np.ndarray:  # f32[B, 256] -> u8[B, 144]
    B = x.shape[0]
    xs = np.ascontiguousarray(x.reshape(B * N_SUB, SUB).T)  # [32, S]: one column per sub-block
    sum_x2 = _seq_sum(xs * xs)
    av_x = np.sqrt(sum_x2 / np.float32(32.0))
    weights = np.abs(xs)
    weights += av_x  # av_x + fabsf(x[i])
    scales, mins, iscale, vmin = make_qkx2_quants(xs, weights)
    scales = scales.reshape(B, N_SUB)
    mins = mins.reshape(B, N_SUB)

    # `if (scale > max_scale) max_scale = scale;` from 0, kept as a strict-greater scan (it never yields -0).
    max_scale = np.zeros(B, dtype=np.float32)
    max_min = np.zeros(B, dtype=np.float32)
    for j in range(N_SUB):
        max_scale = np.where(scales[:, j] > max_scale, scales[:, j], max_scale)
        max_min = np.where(mins[:, j] > max_min, mins[:, j], max_min)
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, np.float32(63.0) / max_scale, np.float32(0.0))
        inv_min = np.where(max_min > 0, np.float32(63.0) / max_min, np.float32(0.0))
    # `uint8_t ls = nearest_int(...)` keeps the low 8 bits, then MIN(63, ls).
    ls = np.minimum(nearest_int(inv_scale[:, None] * scales) & 0xFF, 63).astype(np.uint8)
    lm = np.minimum(nearest_int(inv_min[:, None] * mins) & 0xFF, 63).astype(np.uint8)
    with np.errstate(over="ignore"):  # past fp16's 65504 the scales become inf; Q4_K.quantize rejects those
        d16 = (max_scale / np.float32(63.0)).astype(np.float16)
        dmin16 = (max_min / np.float32(63.0)).astype(np.float16)

    # Requantize against the rounded fp16 scales, one column per sub-block as in xs; a sub-block whose d*sc is 0
    # keeps make_qkx2_quants' L.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d = (d16.astype(np.float32)[:, None] * ls.astype(np.float32)).ravel()  # [S]
        dm = (dmin16.astype(np.float32)[:, None] * lm.astype(np.float32)).ravel()
        l = _level((xs + dm) / d)  # u8[32, S]
    keep = np.flatnonzero(d == 0)
    if keep.size:
        l[:, keep] = qkx2_levels(xs[:, keep], vmin[keep], iscale[keep])
    L = np.ascontiguousarray(l.T).reshape(B, N_SUB, SUB)

    out = np.empty((B, BLOCK_BYTES), dtype=np.uint8)
    out[:, 0:2] = d16.view(np.uint8).reshape(B, 2)
    out[:, 2:4] = dmin16.view(np.uint8).reshape(B, 2)
    out[:, 4 : 4 + K_SCALE_SIZE] = pack_scales(ls, lm)
    out[:, 4 + K_SCALE_SIZE :] = pack_qs(L)
    return out


def dequantize_blocks(blocks: np.ndarray) -> np.ndarray:  # u8[B, 144] -> f32[B, 256]
    """Same floats as dequantize_row_q4_K in ggml-quants.c: (d * sc) * q - (dmin * m)."""
    dsc, dm = sub_block_scales(blocks)
    q = unpack_qs(blocks[:, 4 + K_SCALE_SIZE :]).astype(np.float32)
    return (dsc[:, :, None] * q - dm[:, :, None]).reshape(-1, QK_K)


class Q4_K:
    """Q4_K weights: u8[rows, cols // 256 * 144], one row of super-blocks per matrix row."""

    block_size: ClassVar[int] = QK_K
    type_size: ClassVar[int] = BLOCK_BYTES

    @classmethod
    def quantize(cls, x: np.ndarray) -> np.ndarray:  # f32[rows, cols] -> u8[rows, cols // 256 * 144]
        x = _check_floats(x, "x", ndim=2)
        rows, cols = x.shape
        _check_cols(cols, f"x of shape {x.shape}")
        q = np.empty(
            (rows, cols // QK_K * BLOCK_BYTES), dtype=np.uint8
        )  # owns its bytes: matmul can cache it
        q.reshape(-1, BLOCK_BYTES)[...] = quantize_blocks(x.reshape(-1, QK_K))
        row = _first_nonfinite_row(q)
        if row is not None:
            raise ValueError(
                f"Q4_K.quantize: x of shape {x.shape} is too large for Q4_K's fp16 scales (d or "
                f"dmin overflows past 65504), first in row {row}: "
                f"max |x| {np.abs(x[row]).max():g}"
            )
        return q

    @classmethod
    def dequantize(cls, q: np.ndarray) -> np.ndarray:  # u8[rows, nb * 144] -> f32[rows, nb * 256]
        q = _check_blocks(q)
        rows = q.shape[0]
        return dequantize_blocks(q.reshape(-1, BLOCK_BYTES)).reshape(rows, -1)

    @classmethod
    def matvec(cls, q: np.ndarray, x: np.ndarray) -> np.ndarray:  # u8[rows, nb*144], f32[cols] -> f32[rows]
        x = _check_floats(x, "x", ndim=1)
        return cls.matmul(q, x[None, :])[0]

    @classmethod
    def matmul(cls, q: np.ndarray, x: np.ndarray) -> np.ndarray:  # u8[rows, nb*144], f32[n,cols] -> [n,rows]
        """x @ dequantize(q).T as sum_k (d * (sc*q)_k) x_k - sum_j (dmin*m_j) * sum(x_j), per row tile.

        d * (sc*q) is formed in float32 for MATMUL_TILE_VALUES weights at a time, never the whole matrix; the per-sub-block sums of x are formed
        once and shared by all rows. q keeps its unpacked form (int16 sc*q, float32 d and dmin*m: 2.1 bytes per
        weight) cached while it lives, up to CACHE_BYTES in all, and becomes read-only (see _unpacked); a q over
        writeable memory numpy does not own, or past the cap, is unpacked tile by tile on each call.
        """
        q = _check_blocks(q)
        x = _check_floats(x, "x", ndim=2)
        nb = q.shape[1] // BLOCK_BYTES
        if x.shape[1] != nb * QK_K:
            raise ValueError(
                f"Q4_K.matmul: x has {x.shape[1]} columns but the weights of shape {q.shape} "
                f"hold {nb * QK_K} per row"
            )
        return _matmul(q, x, _unpacked(q))

    @classmethod
    def clear_cache(cls) -> None:
        _CACHE.clear()


@dataclass(frozen=True, slots=True)
class Unpacked:
    """Rows of Q4_K weights unpacked for matmul."""

    scq: np.ndarray  # i16[rows, nb, 256]: sc[j] * q, exact (at most 63 * 15)
    d: np.ndarray  # f32[rows, nb]
    dm: np.ndarray  # f32[rows, nb * 8]: dmin * m[j], as dequantize_row_q4_K forms it

    @classmethod
    def of(cls, q: np.ndarray) -> Unpacked:  # u8[rows, nb * 144] -> Unpacked
        rows = q.shape[0]
        blocks = q.reshape(-1, BLOCK_BYTES)
        nb = blocks.shape[0] // rows
        d, dmin, scales, qs = split_blocks(blocks)
        sc, m = unpack_scales(scales)
        scq = unpack_qs(qs).astype(np.int16) * sc.astype(np.int16)[:, :, None]  # [rows*nb, 8, 32]
        return cls(
            scq=scq.reshape(rows, nb, QK_K),
            d=d.reshape(rows, nb),
            dm=(dmin[:, None] * m.astype(np.float32)).reshape(rows, nb * N_SUB),
        )

    def rows(self, r0: int, r1: int) -> Unpacked:
        return Unpacked(self.scq[r0:r1], self.d[r0:r1], self.dm[r0:r1])

    @property
    def nbytes(self) -> int:
        return self.scq.nbytes + self.d.nbytes + self.dm.nbytes


# id(q) -> (weak reference to q, its Unpacked); an entry leaves when its array is garbage collected.
_CACHE: dict[int, tuple[weakref.ref[np.ndarray], Unpacked]] = {}
CACHE_BYTES = 1 << 30


def _unpacked(q: np.ndarray) -> Unpacked | None:
    """The cached Unpacked of q, made on first use; None when q's memory may change under the cache or it is full.

    Caching needs q's bytes frozen. When q's memory belongs to numpy (q owns it, or is a view of an array that
    does), q and the arrays between it and the owner are made read-only here, so that a later write through them
    raises instead of silently disagreeing with the cache (other writeable views made earlier are not tracked:
    weights are not meant to change). Memory numpy does not own (np.frombuffer, a memory map) is cached only
    when the arrays over it are already read-only.
    """
    hit = _CACHE.get(id(q))
    if hit is not None and hit[0]() is q:
        return hit[1]
    chain = [q]
    while isinstance(chain[-1].base, np.ndarray):
        chain.append(chain[-1].base)
    if chain[-1].base is None:
        for a in reversed(chain):
            a.flags.writeable = False
    elif any(a.flags.writeable for a in chain):
        return None
    if sum(u.nbytes for _, u in _CACHE.values()) > CACHE_BYTES:
        return None
    u = Unpacked.of(q)
    key = id(q)

    def forget(_: weakref.ref[np.ndarray]) -> None:
        _CACHE.pop(key, None)

    _CACHE[key] = (weakref.ref(q, forget), u)
    return u


def _matmul(q: np.ndarray, x: np.ndarray, cached: Unpacked | None) -> np.ndarray:  # -> f32[n, rows]
    """q: u8[rows, nb*144], x: f32[n, nb*256]; cached: Unpacked of q or None.

    For a few rows of x the per-super-block dot products (sc*q)_b . x_b are scaled by d (a stacked matrix-vector
    product, no pass over the weights for d); for more rows d is folded into the weight tile, which then takes
    one matrix product (fewer, larger BLAS calls).
    """
    rows = q.shape[0]
    n, cols = x.shape
    nb = cols // QK_K
    xsum = x.reshape(n, nb * N_SUB, SUB).sum(axis=2)  # [n, nb*8]: sum(x) per sub-block, shared by all rows
    per_block = n <= MATVEC_MAX_N
    tile = max(1, (MATMUL_TILE_VALUES if per_block else MATMUL_GEMM_TILE_VALUES) // cols)
    w = np.empty((min(tile, rows), nb, QK_K), dtype=np.float32)
    xb = np.ascontiguousarray(x.reshape(n, nb, QK_K).transpose(1, 2, 0))  # [nb, 256, n]
    y = np.empty((n, rows), dtype=np.float32)
    for r0 in range(0, rows, tile):
        r1 = min(rows, r0 + tile)
        u = cached.rows(r0, r1) if cached is not None else Unpacked.of(q[r0:r1])
        wt = w[: r1 - r0]
        if per_block:
            np.copyto(wt, u.scq, casting="unsafe")
            g = np.matmul(wt.transpose(1, 0, 2), xb)  # [nb, R, n]: (sc*q)_b . x_b
            g *= u.d.T[:, :, None]
            yt = g.sum(axis=0).T
        else:
            np.multiply(u.scq, u.d[:, :, None], out=wt)  # d * (sc*q), widened and scaled in one pass
            # [R, cols] @ [cols, n] rather than x @ wt.T: OpenBLAS splits this orientation across its threads
            # far better when the cores are shared (measured 24 ms vs 171 ms for 256 x 4096 x 64).
            yt = (wt.reshape(r1 - r0, cols) @ x.T).T
        y[:, r0:r1] = yt - xsum @ u.dm.T
    return y


def _check_cols(cols: int, what: str) -> None:
    if cols % QK_K != 0 or cols == 0:
        raise ValueError(f"Q4_K: {what}: columns must be a positive multiple of {QK_K}, got {cols}")


def _check_floats(x: object, name: str, ndim: int) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise ValueError(f"Q4_K: {name} must be a numpy float32 array, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise ValueError(f"Q4_K: {name} must be float32, got {x.dtype} of shape {x.shape}")
    if x.ndim != ndim:
        raise ValueError(f"Q4_K: {name} must have {ndim} dimension(s), got shape {x.shape}")
    finite = np.isfinite(x)
    if not finite.all():
        bad = np.argwhere(~finite)[0]
        where = f"row {bad[0]}" if ndim == 2 else f"index {bad[0]}"
        raise ValueError(f"Q4_K: {name} of shape {x.shape} has NaN or Inf, first at {where}")
    return np.ascontiguousarray(x)


def _check_blocks(q: object) -> np.ndarray:
    if not isinstance(q, np.ndarray):
        raise ValueError(f"Q4_K: weights must be a numpy uint8 array, got {type(q).__name__}")
    if q.dtype != np.uint8:
        raise ValueError(f"Q4_K: weights must be uint8, got {q.dtype} of shape {q.shape}")
    if q.ndim != 2 or q.shape[1] % BLOCK_BYTES != 0 or q.shape[1] == 0:
        raise ValueError(f"Q4_K: weights must be [rows, n_blocks * {BLOCK_BYTES}] bytes, got shape {q.shape}")
    q = np.ascontiguousarray(q)
    row = _first_nonfinite_row(q)
    if row is not None:
        raise ValueError(f"Q4_K: weights of shape {q.shape} have a NaN or Inf d/dmin, first in row {row}")
    return q


def _first_nonfinite_row(q: np.ndarray) -> int | None:  # u8[rows, nb * 144] -> row index or None
    """A non-finite fp16 d or dmin makes every value of its block NaN or Inf."""
    heads = q.reshape(q.shape[0], -1, BLOCK_BYTES)[:, :, 0:4].copy().view(np.float16)
    finite = np.isfinite(heads).all(axis=(1, 2))
    return None if finite.all() else int(np.argmin(finite))
