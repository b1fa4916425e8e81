"""Unit tests of reference/q4k.py internals: rounding, packing, tiling. The contract's falsifiers are in
tests/test_q4k_contract.py; these pin the pieces they rest on."""

from __future__ import annotations

import numpy as np
import pytest

from reference import q4k
from reference.q4k import Q4_K


def test_nearest_int_rounds_half_to_even() -> None:
    f = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 7.5, 14.5, 15.5], np.float32)
    assert q4k.nearest_int(f).tolist() == [0, 2, 2, 0, -2, -2, 0, 8, 14, 16]


def test_nearest_int_wraps_like_c_outside_its_range() -> None:
    # 5e6 + 1.5 * 2**23 has exponent 24, so the low 23 bits hold (5e6 + 12582912 - 2**24) / 2; C returns that
    # minus 2**22, a negative number, not 5e6.
    want = (5_000_000 + 12_582_912 - 2**24) // 2 - 2**22
    assert q4k.nearest_int(np.array([5e6], np.float32)).tolist() == [want]


@pytest.mark.parametrize("use_bound", [True, False])
def test_round_clip_paths_agree(use_bound: bool) -> None:
    rng = np.random.default_rng(0)
    f = np.concatenate([rng.uniform(-20, 40, 5000), np.arange(-20, 40, 0.5)]).astype(np.float32)[None, :]
    want = np.clip(q4k.nearest_int(f), 0, q4k.NMAX).astype(np.float32)
    bound = np.float32(100.0) if use_bound else np.float32(5e6)  # the second forces the bit-trick path
    got = q4k._round_clip(f.copy(), np.array([bound]))
    assert np.array_equal(got, want)


@pytest.mark.parametrize("cols", [2, 3, 8, 64, 2048, 6208])
def test_seq_sum_adds_left_to_right(cols: int) -> None:
    # 1 followed by 31 halves of its ulp: left to right each addition ties back to 1.0; any other grouping
    # (pairwise, unrolled accumulators, right to left) adds two of them first and ends above 1.
    a = np.full((q4k.SUB, cols), 2.0**-24, np.float32)
    a[0] = 1.0
    a[:, 1] = -0.0  # a sum of -0.0 stays -0.0 in C (s = x[0], then s += x[i])
    want = np.ones(cols, np.float32)
    want[1] = -0.0
    got = q4k._seq_sum(a)
    assert got.dtype == np.float32 and got.tobytes() == want.tobytes()
    rng = np.random.default_rng(cols)
    b = (rng.standard_normal((q4k.SUB, cols)) * 10.0 ** rng.integers(-6, 7, (q4k.SUB, cols))).astype(
        np.float32
    )
    s = b[0].copy()
    for row in b[1:]:
        s += row
    assert q4k._seq_sum(b).tobytes() == s.tobytes()


def test_seq_sum_refuses_what_it_cannot_add_in_order() -> None:
    with pytest.raises(AssertionError):  # one column: numpy would sum it pairwise
        q4k._seq_sum(np.ones((q4k.SUB, 1), np.float32))
    with pytest.raises(AssertionError):
        q4k._seq_sum(np.ones((8, q4k.SUB), np.float32).T)


def test_level_is_clipped_nearest_int_for_any_float() -> None:
    finite = [
        0.5,
        1.5,
        2.5,
        14.5,
        15.5,
        16.0,
        -0.5,
        -0.0,
        0.49999997,
        7.4,
        1e3,
        -1e3,
        5e6,
        -5e6,
        3e9,
        1e38,
        -1e38,
    ]
    f = np.array([*finite, np.inf, -np.inf, np.nan], np.float32)
    want = np.clip(q4k.nearest_int(f), 0, q4k.NMAX).astype(np.uint8)
    assert want.tolist()[:6] == [0, 2, 2, 14, 15, 15]  # ties to even, clipped
    got = q4k._level(f.copy())
    assert got.dtype == np.uint8 and got.tolist() == want.tolist()


def test_qkx2_levels() -> None:
    # Columns: a ramp; an all-negative one; flat ones (negative, zero), whose iscale make_qkx2_quants leaves at
    # 15 / 0 = inf; a constant positive one (not flat: its min is clamped to 0); a ramp of subnormals whose span
    # makes iscale overflow to inf, so nearest_int's wrapped result (0), not 15, is its level.
    x = np.stack(
        [
            np.linspace(-1, 2, q4k.SUB),
            -np.linspace(1, 3, q4k.SUB),
            np.full(q4k.SUB, -2.0),
            np.zeros(q4k.SUB),
            np.full(q4k.SUB, 1.0),
            np.linspace(0, 1e-40, q4k.SUB),
        ],
        axis=1,
    ).astype(np.float32)
    vmin = np.array([-1.0, -3.0, -2.0, 0.0, 0.0, 0.0], np.float32)
    iscale = np.array([5.0, 7.5, np.inf, np.inf, 15.0, np.inf], np.float32)
    with np.errstate(invalid="ignore"):
        want = np.clip(q4k.nearest_int((x - vmin) * iscale), 0, q4k.NMAX).astype(np.uint8)
    got = q4k.qkx2_levels(x, vmin, iscale)
    assert got.dtype == np.uint8 and np.array_equal(got, want)
    assert got[:, 0].tolist() == [min(15, round(v)) for v in (x[:, 0] + 1) * 5]
    assert (got[:, 2:4] == 0).all() and (got[:, 4] == 15).all() and (got[:, 5] == 0).all()


@pytest.mark.parametrize(
    ("lo", "hi", "vmin", "iscale"),
    [
        (0.0, 1.0, 0.0, 15.0),  # in range: the add-and-subtract path
        (-1.0, 1.0, 0.5, 1e7),  # iscale*(x - min) far below -4194303 at the low end
        (-0.4, 0.38, 0.03, 1e7),  # just below it at the low end only: x + min would stay in range
        (3.0, 5.0, 0.0, 1e7),  # far above it: iscale / (x - min) would stay in range
    ],
)
def test_quant_levels_range_check(lo: float, hi: float, vmin: float, iscale: float) -> None:
    # Out of nearest_int's range C returns wrapped garbage, not the clipped rounding; a flat column beside (iscale
    # inf, its levels unused by every caller) is left out of the check.
    x = np.stack([np.linspace(lo, hi, q4k.SUB), np.full(q4k.SUB, -3.0)], axis=1).astype(np.float32)
    ends = np.stack([x.min(axis=0), x.max(axis=0)])
    vmins = np.array([vmin, -3.0], np.float32)
    iscales = np.array([iscale, np.inf], np.float32)
    with np.errstate(invalid="ignore"):
        f = (x[:, 0] - vmins[0]) * iscales[0]
        got = q4k._quant_levels(x, vmins, iscales, ends, np.array([False, True]), np.empty_like(x))
    want = np.clip(q4k.nearest_int(f), 0, q4k.NMAX)
    assert np.array_equal(got[:, 0], want)
    in_range = bool(np.abs(f).max() <= 4194303)
    assert np.array_equal(want, np.clip(np.rint(f), 0, q4k.NMAX)) == in_range


def test_scales_pack_round_trip() -> None:
    sc = np.arange(64, dtype=np.uint8).reshape(8, 8)
    m = (63 - np.arange(64, dtype=np.uint8)).reshape(8, 8)
    packed = q4k.pack_scales(sc, m)
    assert packed.shape == (8, q4k.K_SCALE_SIZE)
    got_sc, got_m = q4k.unpack_scales(packed)
    assert np.array_equal(got_sc, sc) and np.array_equal(got_m, m)


def test_qs_pack_round_trip() -> None:
    L = np.random.default_rng(1).integers(0, 16, (5, 8, 32), dtype=np.uint8)
    assert np.array_equal(q4k.unpack_qs(q4k.pack_qs(L)), L)


def test_quantize_tiles_do_not_change_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(2).standard_normal((7, 3 * 256)).astype(np.float32)
    whole = Q4_K.quantize(x)
    monkeypatch.setattr(q4k, "QUANT_TILE", 24)  # 3 blocks per tile: 21 blocks in 7 tiles
    assert np.array_equal(Q4_K.quantize(x), whole)


@pytest.mark.parametrize("tile_rows", [1, 3, 64])
@pytest.mark.parametrize("cached", [True, False])
@pytest.mark.parametrize("n", [1, 5])  # the per-super-block path and the weight-tile path
def test_matmul_row_tiles(monkeypatch: pytest.MonkeyPatch, tile_rows: int, cached: bool, n: int) -> None:
    rng = np.random.default_rng(3)
    q = Q4_K.quantize(rng.standard_normal((10, 512)).astype(np.float32))
    if not cached:
        q = np.frombuffer(bytearray(q.tobytes()), np.uint8).reshape(
            q.shape
        )  # writeable, not numpy's: no cache
    x = rng.standard_normal((n, 512)).astype(np.float32)
    monkeypatch.setattr(q4k, "MATMUL_TILE_VALUES", tile_rows * 512)
    monkeypatch.setattr(q4k, "MATMUL_GEMM_TILE_VALUES", tile_rows * 512)
    y = Q4_K.matmul(q, x)
    assert (q4k._unpacked(q) is not None) == cached
    ref = x.astype(np.float64) @ Q4_K.dequantize(q).astype(np.float64).T
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-4)


def test_matmul_cache_freezes_views_and_their_owner() -> None:
    owner = Q4_K.quantize(np.random.default_rng(5).standard_normal((6, 256)).astype(np.float32))
    rows = owner[2:5]
    Q4_K.matvec(rows, np.ones(256, np.float32))
    assert q4k._unpacked(rows) is not None
    assert not rows.flags.writeable and not owner.flags.writeable


def test_matmul_cache_freezes_and_forgets_its_array() -> None:
    q = Q4_K.quantize(np.random.default_rng(4).standard_normal((4, 256)).astype(np.float32))
    Q4_K.matvec(q, np.ones(256, np.float32))
    assert not q.flags.writeable  # a write would otherwise disagree with the cached unpacked form
    with pytest.raises(ValueError):
        q[0, 0] = 1
    key = id(q)
    assert key in q4k._CACHE
    del q
    assert key not in q4k._CACHE


def test_quantize_rejects_fp16_overflow() -> None:
    x = np.ones((3, 256), np.float32)
    x[1, 7] = 1e9  # d = max_scale / 63 overflows fp16's 65504
    with pytest.raises(ValueError, match=r"\(3, 256\).*row 1"):
        Q4_K.quantize(x)


def test_rejects_non_arrays_and_wrong_rank() -> None:
    with pytest.raises(ValueError, match="numpy float32 array, got list"):
        Q4_K.quantize([[0.0] * 256])  # type: ignore[arg-type]  # the wrong type is the test
    with pytest.raises(ValueError, match=r"2 dimension\(s\), got shape \(256,\)"):
        Q4_K.quantize(np.zeros(256, np.float32))
    with pytest.raises(ValueError, match="uint8, got int8"):
        Q4_K.dequantize(np.zeros((1, 144), np.int8))


def test_internal_checks_refuse_wrong_dtype_and_width() -> None:
    # The block helpers assert the layout they unpack; a wrong dtype or width never reaches the bit twiddling.
    with pytest.raises(AssertionError):
        q4k.unpack_scales(np.zeros((2, q4k.K_SCALE_SIZE), np.int8))
    with pytest.raises(AssertionError):
        q4k.unpack_scales(np.zeros((2, q4k.K_SCALE_SIZE + 1), np.uint8))
    with pytest.raises(AssertionError):
        q4k.split_blocks(np.zeros((2, q4k.BLOCK_BYTES), np.int8))
    with pytest.raises(AssertionError):
        q4k.split_blocks(np.zeros((2, q4k.BLOCK_BYTES + 1), np.uint8))
    with pytest.raises(AssertionError):
        q4k.pack_scales(np.zeros((2, 8), np.uint8), np.zeros((2, 8), np.int8))
    with pytest.raises(AssertionError):
        q4k.pack_scales(np.zeros((2, 8), np.int8), np.zeros((2, 8), np.uint8))
    x = np.zeros((q4k.SUB, 3), np.float32)
    with pytest.raises(AssertionError):
        q4k.make_qkx2_quants(x.astype(np.float64), x)
    with pytest.raises(AssertionError):
        q4k.make_qkx2_quants(x, x.astype(np.float64))
    with pytest.raises(AssertionError):
        q4k.make_qkx2_quants(np.zeros((q4k.SUB + 1, 3), np.float32), np.zeros((q4k.SUB + 1, 3), np.float32))


def test_bad_weights_and_inputs_are_named() -> None:
    q = Q4_K.quantize(np.ones((3, 2 * 256), np.float32))  # [3, 288]
    with pytest.raises(ValueError, match="weights must be a numpy uint8 array, got list"):
        Q4_K.dequantize([[0] * 144])  # type: ignore[arg-type]  # the wrong type is the test
    with pytest.raises(ValueError, match=r"\[rows, n_blocks \* 144\] bytes, got shape \(3, 0\)"):
        Q4_K.dequantize(np.zeros((3, 0), np.uint8))
    with pytest.raises(ValueError, match=r"\[rows, n_blocks \* 144\] bytes, got shape \(288,\)"):
        Q4_K.dequantize(np.zeros(288, np.uint8))
    bad = q.copy()
    bad[2, 1] = 0x7C  # fp16 d of row 2's first block: exponent all ones, an Inf
    with pytest.raises(ValueError, match=r"\(3, 288\) have a NaN or Inf d/dmin, first in row 2"):
        Q4_K.dequantize(bad)
    with pytest.raises(
        ValueError, match=r"x has 256 columns but the weights of shape \(3, 288\) hold 512 per row"
    ):
        Q4_K.matmul(q, np.ones((1, 256), np.float32))
    with pytest.raises(ValueError, match=r"Q4_K: x must be float32, got float64"):
        Q4_K.matvec(q, np.ones(512))
    with pytest.raises(ValueError, match=r"Q4_K: x must be float32, got float64"):
        Q4_K.matmul(q, np.ones((2, 512)))


def test_matmul_unpacks_a_cached_array_once(monkeypatch: pytest.MonkeyPatch) -> None:
    q = Q4_K.quantize(np.random.default_rng(6).standard_normal((4, 512)).astype(np.float32))
    calls: list[tuple[int, ...]] = []
    unpack = q4k.Unpacked.of

    def counted(cls: type, a: np.ndarray) -> q4k.Unpacked:
        calls.append(a.shape)
        return unpack(a)

    monkeypatch.setattr(q4k.Unpacked, "of", classmethod(counted))
    Q4_K.matvec(q, np.ones(512, np.float32))
    Q4_K.matmul(q, np.ones((7, 512), np.float32))
    assert calls == [(4, 288)]  # the second call found the first one's unpacked form
    assert q4k._unpacked(q) is q4k._unpacked(q)
