"""reference/weights.py piece by piece: the Linear kinds, read_tensors, load_weights, assemble, dense_state_dict.

Q4_K bytes are read back with gguf-py's own dequantize (an oracle no one here wrote); float tensors are compared
with the safetensors file they came from.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from reference.config import Config
from reference.q4k import Q4_K
from reference.tiny import TINY_CONFIG, write_tiny
from reference.weights import (
    PREFIXES,
    AttentionWeights,
    ColumnsPermuted,
    Dense,
    GDNWeights,
    Quantized,
    Rows,
    StoredQ4K,
    Weights,
    WeightsError,
    assemble,
    dense_state_dict,
    expected_shapes,
    load_weights,
    read_tensors,
)

gguf = pytest.importorskip("gguf")

CONFIG = Config.from_dict(TINY_CONFIG)


def gguf_dequantize(q: np.ndarray) -> np.ndarray:
    return gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q4_K)


def normal(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def close(got: np.ndarray, x: np.ndarray, w: np.ndarray) -> None:
    """got ≈ x @ w.T up to float32 rounding of the sums: |err| <= 1e-5 * sum |x||w| per entry."""
    want = x.astype(np.float64) @ w.astype(np.float64).T
    bound = 1e-5 * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T) + 1e-30
    ratio = np.abs(got - want) / bound
    assert got.dtype == np.float32 and got.shape == want.shape
    assert ratio.max() <= 1, (
        f"worst |err| / bound {ratio.max():.3g} at {np.unravel_index(ratio.argmax(), got.shape)}"
    )


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny")
    write_tiny(path, 0)
    return path


@pytest.fixture(scope="module")
def stored(ckpt: Path) -> dict[str, np.ndarray]:
    """The checkpoint's tensors as written, prefix stripped, float32."""
    raw = load_file(str(ckpt / "model.safetensors"))
    return {k.removeprefix("model."): v.astype(np.float32) for k, v in raw.items()}


class TestDense:
    def test_computes_x_wT_and_slices_views(self) -> None:
        w, x = normal(6, 10), normal(3, 10, seed=1)
        d = Dense(w)
        assert (d.kind, d.rows, d.cols) == ("f32", 6, 10) and d.dense() is w
        close(d(x), x, w)
        part = d.row_slice(2, 5)
        assert (part.rows, part.cols) == (3, 10) and np.shares_memory(part.w, w)
        assert np.array_equal(part.dense(), w[2:5])

    def test_holds_w_c_contiguous_whatever_layout_it_came_in(self) -> None:
        """A transposed W reaches BLAS with the other transpose flag, which OpenBLAS's SkylakeX kernels sum in
        another order (issue 24): Dense keeps its own C-contiguous copy, so both layouts give the same bytes."""
        w, x = normal(10, 6).T, normal(3, 10, seed=1)  # W: f32[6, 10], Fortran order
        d = Dense(w)
        assert not w.flags.c_contiguous and d.w.flags.c_contiguous and np.array_equal(d.w, w)
        same = Dense(np.ascontiguousarray(w))
        assert d(x).tobytes() == same(x).tobytes()
        assert d.row_slice(1, 4).w.flags.c_contiguous

    @pytest.mark.parametrize("w", [np.zeros(4, np.float32), np.zeros((2, 4)), np.zeros((2, 4), np.float16)])
    def test_only_2d_float32(self, w: np.ndarray) -> None:
        with pytest.raises(AssertionError):
            Dense(w)


class TestQuantized:
    def test_bytes_read_back_by_gguf(self) -> None:
        w, x = normal(5, 512), normal(3, 512, seed=1)
        qz = Quantized.of(w)
        assert (qz.kind, qz.rows, qz.cols) == ("q4_k", 5, 512)
        assert qz.q.dtype == np.uint8 and qz.q.shape == (5, 2 * (2 + 2 + 12 + 256 // 2))
        dense = qz.dense()
        assert dense.dtype == np.float32 and np.array_equal(dense, gguf_dequantize(qz.q))
        close(qz(x), x, dense)

    def test_row_slice(self) -> None:
        qz = Quantized.of(normal(6, 256))
        part = qz.row_slice(1, 4)
        assert (part.rows, part.cols) == (3, 256) and np.shares_memory(part.q, qz.q)
        assert np.array_equal(part.dense(), qz.dense()[1:4])


class TestColumnsPermuted:
    perm = np.array([3, 0, 4, 1, 2])

    @pytest.mark.parametrize("wrap", [Dense, lambda w: Dense(w).row_slice(0, 4)])
    def test_dense_inner(self, wrap: Any) -> None:
        w = normal(4, 5)
        stored = np.ascontiguousarray(w[:, self.perm])  # stored[:, j] = W[:, perm[j]]
        cp = ColumnsPermuted(wrap(stored), self.perm)
        assert (cp.kind, cp.rows, cp.cols) == ("f32", 4, 5)
        assert np.array_equal(cp.dense(), w)
        x = normal(2, 5, seed=3)
        close(cp(x), x, w)
        part = cp.row_slice(1, 3)
        assert type(part) is ColumnsPermuted and (part.rows, part.cols, part.kind) == (2, 5, "f32")
        assert np.array_equal(part.dense(), w[1:3])
        close(part(x), x, w[1:3])

    def test_quantized_inner(self) -> None:
        perm = np.random.default_rng(0).permutation(256)
        qz = Quantized.of(normal(3, 256))
        cp = ColumnsPermuted(qz, perm)
        assert (cp.kind, cp.rows, cp.cols) == ("q4_k", 3, 256)
        model_w = gguf_dequantize(qz.q)[:, np.argsort(perm)]  # W[:, perm[j]] = stored[:, j]
        assert np.array_equal(cp.dense(), model_w)
        assert np.array_equal(cp.row_slice(2, 3).dense(), model_w[2:3])

    def test_perm_must_cover_the_columns(self) -> None:
        with pytest.raises(AssertionError):
            ColumnsPermuted(Dense(normal(2, 4)), self.perm)


class TestRows:
    def test_mixed_parts(self) -> None:
        a, b, x = normal(2, 256), normal(3, 256, seed=1), normal(4, 256, seed=2)
        qb = Quantized.of(b)
        r = Rows([qb, Dense(a)])
        assert (r.kind, r.rows, r.cols) == ("f32+q4_k", 5, 256)
        dense = np.concatenate([gguf_dequantize(qb.q), a])
        assert np.array_equal(r.dense(), dense)
        close(r(x), x, dense)

    def test_one_kind_one_part(self) -> None:
        r = Rows([Dense(normal(2, 7))])
        assert (r.kind, r.rows, r.cols) == ("f32", 2, 7)
        assert Rows([Dense(normal(1, 7)), Dense(normal(2, 7))]).kind == "f32"


def refusal(directory: Path, tensors: dict[str, np.ndarray], config: Config = CONFIG) -> str:
    """The WeightsError read_tensors raises for a checkpoint of TENSORS saved as DIRECTORY/model.safetensors."""
    save_file(tensors, str(directory / "model.safetensors"))
    with pytest.raises(WeightsError) as e:
        read_tensors(directory, config)
    return str(e.value)


class TestReadTensors:
    def test_a_file_path_is_read_as_is(self, ckpt: Path, stored: dict[str, np.ndarray]) -> None:
        got = read_tensors(ckpt / "model.safetensors", CONFIG)
        assert got.keys() == stored.keys()
        assert all(got[k].dtype == np.float32 and np.array_equal(got[k], stored[k]) for k in got)
        assert all(got[k].flags.c_contiguous for k in got)  # the layout BLAS sees does not depend on the file

    def test_ignored_tensors_do_not_hide_later_ones(self, tmp_path: Path, stored) -> None:
        tensors = {"model." + k: v for k, v in stored.items()}
        tensors |= {"mtp.fc.weight": np.zeros((2, 2), np.float32), "nope.weight": np.zeros(2, np.float32)}
        assert refusal(tmp_path, tensors) == (
            f"{tmp_path / 'model.safetensors'}: tensor 'nope.weight' has none of the prefixes {PREFIXES}"
        )

    def test_ignored_prefixes_are_skipped(self, tmp_path: Path, stored) -> None:
        tensors = {"model.language_model." + k: v for k, v in stored.items()}
        tensors |= {
            "mtp.fc.weight": np.zeros(2, np.float32),
            "model.visual.patch.weight": np.zeros(2, np.float32),
        }
        save_file(tensors, str(tmp_path / "model.safetensors"))
        assert read_tensors(tmp_path, CONFIG).keys() == stored.keys()

    def test_a_tensor_in_two_shards(self, tmp_path: Path, stored) -> None:
        save_file({"model." + k: v for k, v in stored.items()}, str(tmp_path / "model-1.safetensors"))
        save_file({"model.norm.weight": stored["norm.weight"]}, str(tmp_path / "model-2.safetensors"))
        with pytest.raises(WeightsError) as e:
            read_tensors(tmp_path, CONFIG)
        assert str(e.value) == (
            f"{tmp_path / 'model-2.safetensors'}: tensor 'model.norm.weight' appears twice in the checkpoint"
        )

    def test_shards_are_merged(self, tmp_path: Path, stored) -> None:
        names = sorted(stored)
        save_file({"model." + k: stored[k] for k in names[:7]}, str(tmp_path / "model-1.safetensors"))
        save_file({"model." + k: stored[k] for k in names[7:]}, str(tmp_path / "model-2.safetensors"))
        assert read_tensors(tmp_path, CONFIG).keys() == stored.keys()

    def test_unreadable_file(self, tmp_path: Path) -> None:
        (tmp_path / "model.safetensors").symlink_to(tmp_path / "absent")
        with pytest.raises(WeightsError, match=r"^.*model\.safetensors: cannot read \(.+\)$"):
            read_tensors(tmp_path / "model.safetensors", CONFIG)

    def test_not_a_regular_file(self, tmp_path: Path) -> None:
        (tmp_path / "model.safetensors").mkdir()
        with pytest.raises(WeightsError) as e:
            read_tensors(tmp_path, CONFIG)
        assert str(e.value) == f"{tmp_path / 'model.safetensors'}: not a regular file"
        os.mkfifo(tmp_path / "fifo.safetensors")  # open() would block until a writer came
        with pytest.raises(WeightsError) as e:
            read_tensors(tmp_path / "fifo.safetensors", CONFIG)
        assert str(e.value) == f"{tmp_path / 'fifo.safetensors'}: not a regular file"

    def test_a_misshapen_tensor_is_refused_by_its_header(self, tmp_path: Path, stored) -> None:
        tensors = {"model." + k: v for k, v in stored.items()}
        tensors["model.norm.weight"] = np.zeros(255, np.float32)
        assert refusal(tmp_path, tensors) == (
            f"{tmp_path / 'model.safetensors'}: tensor 'norm.weight' has shape [255], expected [256]"
        )

    def test_an_untied_lm_head_is_checked_too(self, tmp_path: Path, stored) -> None:
        raw = {**TINY_CONFIG, "tie_word_embeddings": False}
        tensors = {"model." + k: v for k, v in stored.items()} | {
            "lm_head.weight": np.zeros((2, 3), np.float32)
        }
        assert refusal(tmp_path, tensors, Config.from_dict(raw)) == (
            f"{tmp_path / 'model.safetensors'}: tensor 'lm_head.weight' has shape [2, 3], expected [512, 256]"
        )

    def test_no_file(self, tmp_path: Path) -> None:
        with pytest.raises(WeightsError) as e:
            read_tensors(tmp_path, CONFIG)
        assert str(e.value) == f"{tmp_path}: no *.safetensors file"


class TestLoadWeights:
    def test_q4_k_is_the_default(self, ckpt: Path, stored) -> None:
        w = load_weights(ckpt, CONFIG)
        assert w.lm_head.kind == "q4_k" and w.layers[0].mlp.down_proj.kind == "q4_k"
        assert np.array_equal(w.lm_head.dense(), gguf_dequantize(Q4_K.quantize(stored["lm_head.weight"])))

    def test_tied_ignores_a_stored_lm_head(self, tmp_path: Path) -> None:
        raw = {**TINY_CONFIG, "tie_word_embeddings": True}
        write_tiny(tmp_path, 1, raw)
        tensors = load_file(str(tmp_path / "model.safetensors"))
        tensors["lm_head.weight"] = np.full(
            (3, 5), np.nan, np.float16
        )  # HF would not read it, whatever its shape
        save_file(tensors, str(tmp_path / "model.safetensors"))
        w = load_weights(tmp_path, Config.from_dict(raw), "f32")
        assert np.array_equal(w.lm_head.dense(), tensors["model.embed_tokens.weight"].astype(np.float32))

    def test_untied_without_an_lm_head_is_named_with_its_shape(self, tmp_path: Path) -> None:
        write_tiny(tmp_path, 1)  # untied, as TINY_CONFIG is
        tensors = load_file(str(tmp_path / "model.safetensors"))
        del tensors["lm_head.weight"]
        save_file(tensors, str(tmp_path / "model.safetensors"))
        with pytest.raises(WeightsError) as e:
            load_weights(tmp_path, CONFIG, "f32")
        assert str(e.value) == f"{tmp_path}: missing tensor 'lm_head.weight' (expected shape [512, 256])"


PROJECTIONS = {
    "linear_attention": ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"),
    "full_attention": ("q_proj", "k_proj", "v_proj", "o_proj"),
}


def projections(w: Any) -> dict[str, Any]:
    """HF name -> the Linear the engine holds for it, for every projection of every layer."""
    out = {"lm_head.weight": w.lm_head}
    for i, (layer, kind) in enumerate(zip(w.layers, CONFIG.layer_types, strict=True)):
        mixer = "linear_attn" if kind == "linear_attention" else "self_attn"
        out |= {f"layers.{i}.{mixer}.{n}.weight": getattr(layer.mixer, n) for n in PROJECTIONS[kind]}
        out |= {
            f"layers.{i}.mlp.{n}.weight": getattr(layer.mlp, n) for n in ("gate_proj", "up_proj", "down_proj")
        }
    return out


def gdn(w: Weights, i: int) -> GDNWeights:
    m = w.layers[i].mixer
    assert isinstance(m, GDNWeights)
    return m


def attn(w: Weights, i: int) -> AttentionWeights:
    m = w.layers[i].mixer
    assert isinstance(m, AttentionWeights)
    return m


class TestAssemble:
    def test_f32_every_view_is_its_tensor(self, stored) -> None:
        w = assemble(dict(stored), CONFIG, "f32")
        for name, lin in projections(w).items():
            assert type(lin) is Dense and np.array_equal(lin.dense(), stored[name]), name
        g, a = gdn(w, 0), attn(w, 3)
        p = "layers.0.linear_attn."
        assert np.array_equal(
            g.in_proj.dense(),
            np.concatenate([stored[p + f"in_proj_{n}.weight"] for n in ["qkv", "z", "b", "a"]]),
        )
        assert np.array_equal(g.conv1d, stored[p + "conv1d.weight"][:, 0, :]) and g.conv1d.flags.f_contiguous
        assert np.array_equal(
            a.qkv_proj.dense(), np.concatenate([a.q_proj.dense(), a.k_proj.dense(), a.v_proj.dense()])
        )
        mlp = w.layers[1].mlp
        assert np.array_equal(
            mlp.gate_up_proj.dense(), np.concatenate([mlp.gate_proj.dense(), mlp.up_proj.dense()])
        )

    def test_q4_k_views_are_the_quantized_rows(self, stored) -> None:
        w = assemble(dict(stored), CONFIG, "q4_k")
        for name, lin in projections(w).items():
            assert type(lin) is Quantized and lin.cols == 256, name
            assert np.array_equal(lin.dense(), gguf_dequantize(Q4_K.quantize(stored[name]))), name

    def test_narrow_projections_stay_dense(self) -> None:
        raw = {**TINY_CONFIG, "intermediate_size": 96}  # down_proj's input dim is not a multiple of 256
        c = Config.from_dict(raw)
        t = {k: normal(*s, seed=3) for k, s in expected_shapes(c).items()} | {
            "lm_head.weight": normal(512, 256)
        }
        w = assemble(t, c, "q4_k")
        assert type(w.layers[0].mlp.down_proj) is Dense and type(w.layers[0].mlp.up_proj) is Quantized

    def stored_q4k(self, stored: dict[str, np.ndarray], only: tuple[str, ...] = ()) -> dict[str, Any]:
        """`stored` with projections as GGUF Q4_K blocks (all of them, or the names ending in `only`)."""
        out: dict[str, Any] = dict(stored)
        for name, v in stored.items():
            if v.ndim == 2 and name != "embed_tokens.weight" and (not only or name.endswith(only)):
                out[name] = StoredQ4K(Q4_K.quantize(v), v.shape[1])
        return out

    def test_stored_q4k_kept_and_stacked(self, stored) -> None:
        t = self.stored_q4k(stored)
        w = assemble(t, CONFIG, "stored")
        for name, lin in projections(w).items():
            assert type(lin) is Quantized and lin.cols == 256, name
            assert np.array_equal(lin.dense(), gguf_dequantize(t[name].q)), name
        qkv = attn(w, 3).qkv_proj
        assert type(qkv) is Quantized and qkv.rows == (8 + 2 + 2) * 64 and qkv.cols == 256
        assert type(gdn(w, 0).in_proj) is Quantized and gdn(w, 0).in_proj.rows == 3 * 256 + 4 + 4

    def test_stored_q4k_dequantized_for_f32(self, stored) -> None:
        t = self.stored_q4k(stored)
        w = assemble(t, CONFIG, "f32")
        for name, lin in projections(w).items():
            assert type(lin) is Dense and np.array_equal(lin.dense(), gguf_dequantize(t[name].q)), name

    def test_mixed_storage_gives_rows(self, stored) -> None:
        t = self.stored_q4k(stored, only=("q_proj.weight",))
        w = assemble(t, CONFIG, "f32")
        assert attn(w, 3).qkv_proj.kind == "f32"
        a = attn(assemble(t, CONFIG, "stored"), 3)
        assert type(a.qkv_proj) is Rows and a.qkv_proj.kind == "f32+q4_k"
        assert type(a.q_proj) is Quantized and type(a.k_proj) is Dense
        assert np.array_equal(a.k_proj.dense(), stored["layers.3.self_attn.k_proj.weight"])

    def test_col_perm(self, stored) -> None:
        name = "layers.0.linear_attn.out_proj.weight"
        perm = np.random.default_rng(1).permutation(256)
        t = dict(stored)
        q = Q4_K.quantize(np.ascontiguousarray(stored[name][:, perm]))
        t[name] = StoredQ4K(q, 256, perm)
        model_w = gguf_dequantize(q)[:, np.argsort(perm)]
        f32 = gdn(assemble(t, CONFIG, "f32"), 0).out_proj
        assert type(f32) is Dense and np.array_equal(f32.dense(), model_w) and f32.w.flags.c_contiguous
        kept = gdn(assemble(t, CONFIG, "stored"), 0).out_proj
        assert type(kept) is ColumnsPermuted and kept.kind == "q4_k" and np.array_equal(kept.dense(), model_w)

    def test_blocks_where_a_float_belongs(self, stored) -> None:
        t: dict[str, Any] = dict(stored)
        t["norm.weight"] = StoredQ4K(np.zeros((1, 144), np.uint8), 256)
        with pytest.raises(WeightsError) as e:
            assemble(t, CONFIG, "stored")
        assert str(e.value) == "tensor 'norm.weight' must be float, not Q4_K blocks"

    def test_unknown_kind(self, stored) -> None:
        with pytest.raises(WeightsError) as e:
            assemble(stored, CONFIG, "q8_0")
        assert str(e.value) == "weights='q8_0': expected 'q4_k', 'f32' or 'stored'"


class TestDenseStateDict:
    def test_f32_gives_back_the_checkpoint(self, ckpt: Path) -> None:
        raw = load_file(str(ckpt / "model.safetensors"))
        out = dense_state_dict(load_weights(ckpt, CONFIG, "f32"), CONFIG)
        assert out.keys() == raw.keys()
        for k, v in raw.items():
            assert out[k].dtype == np.float32 and np.array_equal(out[k], v.astype(np.float32)), k

    def test_q4_k_gives_the_dequantized_projections(self, ckpt: Path, stored) -> None:
        out = dense_state_dict(load_weights(ckpt, CONFIG, "q4_k"), CONFIG)
        assert np.array_equal(
            out["model.layers.3.self_attn.k_proj.weight"],
            gguf_dequantize(Q4_K.quantize(stored["layers.3.self_attn.k_proj.weight"])),
        )
        assert np.array_equal(out["model.layers.2.linear_attn.A_log"], stored["layers.2.linear_attn.A_log"])

    def test_tied_has_no_lm_head(self, tmp_path: Path) -> None:
        raw = {**TINY_CONFIG, "tie_word_embeddings": True}
        write_tiny(tmp_path, 2, raw)
        c = Config.from_dict(raw)
        out = dense_state_dict(load_weights(tmp_path, c, "f32"), c)
        assert out.keys() == load_file(str(tmp_path / "model.safetensors")).keys()
        assert "lm_head.weight" not in out


def test_q4k_import_failure_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "reference.q4k", None)  # import raises ImportError
    with pytest.raises(WeightsError) as e:
        Quantized.of(normal(1, 256))
    assert str(e.value).startswith("weights='q4_k' needs reference.q4k.Q4_K, which cannot be imported (")
