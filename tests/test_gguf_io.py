"""GGUF both ways (reference/gguf_io.py): the tiny checkpoint written in llama.cpp's qwen35 layout and read back.

Oracles no one here wrote: gguf-py's GGUFReader reads what we wrote (names, shapes, types, metadata), gguf-py's
dequantize reads our Q4_K blocks, and tests/data/gguf/tiny-0-llamacpp-f32.json is what llama.cpp's own converter
(convert_hf_to_gguf.py of the llama.cpp vendored in the llama-cpp-python 0.3.36 sdist) wrote for the same
checkpoint: its metadata, tensor names, shapes, types and each tensor's sha256. The live comparison of logits
against llama.cpp itself is in tests/test_llamacpp_engine.py (marker llamacpp).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from reference.config import Config  # noqa: E402
from reference.gguf_io import _to_gguf, describe, layout, read_gguf, tiled_heads, write_gguf  # noqa: E402
from reference.model import load_model  # noqa: E402
from reference.q4k import Q4_K  # noqa: E402
from reference.tiny import tiny_model, write_tiny  # noqa: E402
from reference.weights import GDNWeights, StoredQ4K, WeightsError, read_tensors  # noqa: E402

GOLDEN = Path(__file__).parent / "data" / "gguf" / "tiny-0-llamacpp-f32.json"
PROMPT = np.random.default_rng(7).integers(0, 512, 150)  # odd length: two chunks of 64 and one of 22


@pytest.fixture()
def exported(tmp_path: Path) -> dict[str, Path]:
    out = tmp_path
    return {w: write_gguf(tiny_model(0), out / f"tiny-0-{w}.gguf", weights=w) for w in ("f32", "q4_k")}


def test_value_heads_are_tiled_as_llama_cpp_broadcasts_them() -> None:
    c = Config.from_file(tiny_model(0) / "config.json")  # Hk = 2, Hv = 4: grouped [k0v0 k0v1 k1v0 k1v1]
    assert tiled_heads(c).tolist() == [0, 2, 1, 3]  # tiled: [k0v0 k1v0 k0v1 k1v1]


def test_f32_export_reads_back_to_the_same_tensors_and_logits(exported: dict[str, Path]) -> None:
    path = tiny_model(0)
    c = Config.from_file(path / "config.json")
    original = read_tensors(path, c)
    config, back = read_gguf(exported["f32"])
    assert config == c  # every field the engine runs on, rebuilt from the GGUF metadata
    assert sorted(back) == sorted(original)
    for name, t in original.items():
        got = back[name]
        assert isinstance(got, np.ndarray) and got.shape == t.shape, name
        if name.endswith("A_log"):  # log(-(-exp(x))) in float32: within an ulp or two of x
            np.testing.assert_allclose(got, t, rtol=3e-7, atol=0, err_msg=name)
        else:  # +1 then -1 on values in [-0.5, 1] is exact (Sterbenz); the rest are permutations
            np.testing.assert_array_equal(got, t, err_msg=name)
    ref = load_model(path, "f32")
    ours = load_model(exported["f32"])
    a, b = ref.forward(PROMPT, ref.new_state()), ours.forward(PROMPT, ours.new_state())
    err = float(np.abs(a - b).max())
    print(f"f32 GGUF vs checkpoint, max-abs logit diff {err:.3g} (|logits| <= {np.abs(a).max():.3g})")
    assert err <= 1e-6


def test_what_gguf_py_reads_from_our_file(exported: dict[str, Path]) -> None:
    reader = gguf.GGUFReader(exported["f32"])
    fields = {k: f.contents() for k, f in reader.fields.items()}
    assert fields["general.architecture"] == "qwen35"
    assert fields["qwen35.attention.recurrent_layers"] == [True, True, True, False]
    assert fields["qwen35.rope.dimension_count"] == 16 and fields["qwen35.ssm.time_step_rank"] == 4
    assert len(fields["tokenizer.ggml.tokens"]) == 512 and fields["tokenizer.ggml.tokens"][10] == "<0x07>"
    names = [t.name for t in reader.tensors]
    # the order of the checkpoint's sorted names (lm_head, model.embed_tokens, model.layers.0.input_layernorm,
    # ...linear_attn.A_log, ...), as llama.cpp's converter writes them
    assert names[:5] == [
        "output.weight",
        "token_embd.weight",
        "blk.0.attn_norm.weight",
        "blk.0.ssm_a",
        "blk.0.ssm_conv1d.weight",
    ]
    shapes = {t.name: [int(d) for d in t.shape] for t in reader.tensors}
    assert shapes["blk.0.ssm_conv1d.weight"] == [4, 512]  # ggml order: kernel fastest
    assert shapes["blk.3.attn_q.weight"] == [256, 512]  # query and gate per head, as transformers stores them
    assert all(int(t.tensor_type) == 0 for t in reader.tensors)  # F32


def test_q4k_export_blocks_are_reference_q4k_bit_for_bit_and_gguf_py_reads_them(
    exported: dict[str, Path],
) -> None:
    path = tiny_model(0)
    c = Config.from_file(path / "config.json")
    original = read_tensors(path, c)
    stored = {t.name: t for t in gguf.GGUFReader(exported["q4_k"]).tensors}
    n_q4k = 0
    for hf_name, name, transform in layout(c):
        t = stored[name]
        expected = np.ascontiguousarray(_to_gguf(original[hf_name], transform, c), dtype=np.float32)
        if t.tensor_type == gguf.GGMLQuantizationType.Q4_K:
            n_q4k += 1
            blocks = np.array(t.data, dtype=np.uint8).reshape(expected.shape[0], -1)
            assert np.array_equal(blocks, Q4_K.quantize(expected)), name
            np.testing.assert_array_equal(
                gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q4_K), Q4_K.dequantize(blocks)
            )
        else:
            assert name == "token_embd.weight" or expected.ndim == 1 or expected.shape[1] % 256, name
            np.testing.assert_array_equal(np.array(t.data).reshape(expected.shape), expected)
    assert n_q4k == 3 * (5 + 3) + (4 + 3) + 1  # GDN qkv gate beta alpha out, attention q k v o, MLPs, output


def test_q4k_export_runs_like_the_reference_q4k_model(exported: dict[str, Path]) -> None:
    """Same logits within the HF oracle's 1e-4: the blocks differ only in out_proj, which llama.cpp quantizes
    after reordering its columns (so other values share a super-block)."""
    ref = load_model(tiny_model(0), "q4_k")
    ours = load_model(exported["q4_k"])  # "stored": Q4_K blocks as the file has them
    a, b = ref.forward(PROMPT, ref.new_state()), ours.forward(PROMPT, ours.new_state())
    dense = load_model(exported["q4_k"], "f32")  # the same blocks dequantized: dense matmul
    d = dense.forward(PROMPT, dense.new_state())
    print(
        f"Q4_K GGUF vs reference q4_k {np.abs(a - b).max():.3g}; stored vs dequantized {np.abs(b - d).max():.3g}"
    )
    assert np.abs(a - b).max() <= 1e-4 and np.abs(b - d).max() <= 1e-4
    gdn = ours.weights.layers[0].mixer
    assert isinstance(gdn, GDNWeights)
    assert type(gdn.out_proj).__name__ == "ColumnsPermuted" and gdn.in_proj.kind == "q4_k"


def test_a_tied_model_and_value_heads_equal_to_key_heads_round_trip(tmp_path: Path) -> None:
    from reference.tiny import TINY_CONFIG

    raw = dict(TINY_CONFIG, tie_word_embeddings=True, linear_num_value_heads=2)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    write_tiny(ckpt, seed=3, raw_config=raw)
    out = write_gguf(ckpt, tmp_path / "tied.gguf")
    assert "output.weight" not in describe(out)["tensors"]
    ref, ours = load_model(ckpt, "f32"), load_model(out)
    assert ours.config.tie_word_embeddings and ours.config.linear_num_value_heads == 2
    np.testing.assert_allclose(
        ours.forward(PROMPT[:70], ours.new_state()),
        ref.forward(PROMPT[:70], ref.new_state()),
        rtol=0,
        atol=1e-6,
    )


def test_our_export_has_llama_cpp_converters_names_shapes_metadata_and_bytes(
    exported: dict[str, Path],
) -> None:
    """Against the committed record of llama.cpp's converter on the same checkpoint (float32 copy, --no-mtp)."""
    golden = json.loads(GOLDEN.read_text())
    ckpt = hashlib.sha256((tiny_model(0) / "model.safetensors").read_bytes()).hexdigest()
    assert ckpt in golden["provenance"]["checkpoint"], (
        "the tiny checkpoint changed: re-record the golden file"
    )
    ours = describe(exported["f32"])
    assert list(ours["tensors"]) == list(golden["tensors"])  # names, in file order
    for name, g in golden["tensors"].items():
        assert ours["tensors"][name]["shape"] == g["shape"] and ours["tensors"][name]["type"] == g["type"], (
            name
        )
    for key, value in golden["metadata"].items():
        if key in golden["metadata_not_compared"]:
            continue
        assert ours["metadata"].get(key) == value, key
    reader = gguf.GGUFReader(exported["f32"])
    differ = []
    for t in reader.tensors:
        data = np.array(t.data, dtype="<f4")
        if hashlib.sha256(data.tobytes()).hexdigest() != golden["tensors"][t.name]["sha256"]:
            differ.append(t.name)
            stats = golden["tensors"][t.name].get("values")
            assert stats is not None, (
                f"{t.name}: bytes differ from llama.cpp's converter and no values recorded"
            )
            np.testing.assert_allclose(data.reshape(-1), np.array(stats, np.float32), rtol=3e-7, atol=0)
    # torch's and numpy's float32 exp may round differently: only -exp(A_log) is allowed to differ, by an ulp
    assert all(n.endswith("ssm_a") for n in differ), differ


def test_bad_gguf_files_raise_one_named_error(exported: dict[str, Path], tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(WeightsError, match=r"junk\.gguf: not a readable GGUF file"):
        load_model(junk)
    other = tmp_path / "llama.gguf"
    w = gguf.GGUFWriter(str(other), "llama")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(
        WeightsError, match=r"general\.architecture is 'llama'; the reference runs 'qwen35' only"
    ):
        load_model(other)
    with pytest.raises(WeightsError, match="weights='q8'"):
        load_model(exported["f32"], "q8")
    with pytest.raises(ValueError, match="weights='bf16'"):
        write_gguf(tiny_model(0), tmp_path / "x.gguf", weights="bf16")


def test_a_missing_or_misshapen_tensor_is_named(tmp_path: Path) -> None:
    path = tiny_model(0)
    c = Config.from_file(path / "config.json")
    tensors = read_tensors(path, c)

    def rewrite(drop: str = "", reshape: str = "") -> Path:
        out = tmp_path / f"edit-{drop or reshape}.gguf"
        w = gguf.GGUFWriter(str(out), "qwen35")
        src = gguf.GGUFReader(write_gguf(path, tmp_path / "base.gguf"))
        for k, f in src.fields.items():
            if k.startswith("GGUF.") or k == "general.architecture":
                continue
            vtype = f.types[0]
            if vtype == gguf.GGUFValueType.ARRAY:
                w.add_key_value(k, f.contents(), vtype, sub_type=f.types[-1])
            else:
                w.add_key_value(k, f.contents(), vtype)
        for t in src.tensors:
            if t.name == drop:
                continue
            data = np.array(t.data)
            w.add_tensor(t.name, data[..., :-1].copy() if t.name == reshape else data)
        w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
        return out

    assert tensors  # the checkpoint read fine
    with pytest.raises(
        WeightsError, match=r"missing tensor 'blk.1.ssm_a' \(transformers' 'layers.1.linear_attn.A_log'\)"
    ):
        load_model(rewrite(drop="blk.1.ssm_a"))
    with pytest.raises(
        WeightsError, match=r"tensor 'blk.2.ffn_up.weight' has shape \[256, 255\], expected \[256, 256\]"
    ):
        load_model(rewrite(reshape="blk.2.ffn_up.weight"))


def test_stored_q4k_keeps_rows_in_transformers_order(exported: dict[str, Path]) -> None:
    config, back = read_gguf(exported["q4_k"])
    z = back["layers.0.linear_attn.in_proj_z.weight"]
    assert isinstance(z, StoredQ4K) and z.col_perm is None
    original = read_tensors(tiny_model(0), config)["layers.0.linear_attn.in_proj_z.weight"]
    assert np.array_equal(z.q, Q4_K.quantize(original))  # a row permutation moves whole rows of blocks
    out = back["layers.0.linear_attn.out_proj.weight"]
    assert isinstance(out, StoredQ4K) and out.col_perm is not None
    assert sorted(out.col_perm.tolist()) == list(range(256))


def test_a_copy_of_the_checkpoint_without_config_is_refused(tmp_path: Path) -> None:
    ckpt = tmp_path / "c"
    shutil.copytree(tiny_model(0), ckpt)
    (ckpt / "config.json").unlink()
    with pytest.raises(Exception, match=r"no config\.json"):
        write_gguf(ckpt, tmp_path / "x.gguf")
