"""reference/gguf_io.py piece by piece: the metadata reader, the vocabulary, the atomic writer, odd tensor types.

Metadata files are written here with gguf-py's own GGUFWriter from the metadata llama.cpp's converter wrote for
the tiny checkpoint (tests/data/gguf/tiny-0-llamacpp-f32.json), then edited one key at a time; read_config must
give back what the checkpoint's config.json says. Tensor files are our f32/q4_k exports rewritten with gguf-py
(a Q4_K token embedding as llama.cpp's Q4_K_M files have, F16 tensors, a NaN).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from reference.config import Config, ConfigError  # noqa: E402
from reference.gguf_io import (  # noqa: E402
    _field,
    _from_gguf,
    _stored_q4k,
    _to_gguf,
    describe,
    read_config,
    read_gguf,
    vocab,
    write_gguf,
)
from reference.q4k import Q4_K  # noqa: E402
from reference.tiny import tiny_model  # noqa: E402
from reference.weights import StoredQ4K, WeightsError, read_tensors  # noqa: E402

GOLDEN = Path(__file__).parent / "data" / "gguf" / "tiny-0-llamacpp-f32.json"
V = gguf.GGUFValueType
BLOCK = 2 + 2 + 12 + 256 // 2  # bytes of one Q4_K super-block (d, dmin, scales, qs)


def tiny_config() -> Config:
    return Config.from_file(tiny_model(0) / "config.json")


# -- metadata: files written by gguf-py from llama.cpp's converter's keys --------------------------------------


def _vtype(value: Any) -> tuple[Any, Any]:
    """gguf-py's value type (and array element type) for a JSON value of the golden metadata."""
    if isinstance(value, list):
        return V.ARRAY, V.BOOL if value and isinstance(value[0], bool) else V.INT32
    if isinstance(value, bool):
        return V.BOOL, None
    if isinstance(value, int):
        return V.UINT32, None
    return (V.FLOAT32 if isinstance(value, float) else V.STRING), None


def meta_gguf(
    path: Path, *, drop: tuple[str, ...] = (), embd: tuple[int, ...] | None = (512, 256), **set_: Any
) -> Path:
    """A GGUF holding llama.cpp's converter's metadata for the tiny checkpoint, `drop`ped keys removed and
    `set_` keys (qwen35.<k> with '.' spelt '__') changed, and zero token_embd and output tensors of `embd` = (vocab, hidden)."""
    meta = dict(json.loads(GOLDEN.read_text())["metadata"])
    del meta["general.architecture"]  # GGUFWriter writes it
    for k, v in set_.items():
        meta[f"qwen35.{k.replace('__', '.')}"] = v
    w = gguf.GGUFWriter(str(path), "qwen35")
    for k, v in meta.items():
        if k in drop or f"qwen35.{k}" in drop:
            continue
        vtype, sub = _vtype(v)
        w.add_key_value(k, v, vtype, sub_type=sub)
    if embd is not None:  # and an untied output head, as the checkpoint has
        w.add_tensor("token_embd.weight", np.zeros(embd, np.float32))
        w.add_tensor("output.weight", np.zeros(embd, np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return path


def test_llama_cpps_metadata_reads_back_as_the_checkpoints_config(tmp_path: Path) -> None:
    config = read_config(meta_gguf(tmp_path / "m.gguf"))
    assert config == tiny_config()
    assert config.extra == {}  # every key read is one Config knows: nothing misspelt lands in extra
    assert config.layer_types == ("linear_attention",) * 3 + ("full_attention",)


def test_recurrent_layers_decide_the_layer_types_over_the_interval(tmp_path: Path) -> None:
    path = meta_gguf(tmp_path / "m.gguf", attention__recurrent_layers=[True, False, True, False])
    assert read_config(path).layer_types == ("linear_attention", "full_attention") * 2


@pytest.mark.parametrize(
    ("interval", "expected"),
    [
        (2, ("linear_attention", "full_attention") * 2),
        (None, ("linear_attention",) * 3 + ("full_attention",)),
    ],
)
def test_without_recurrent_layers_every_interval_th_layer_is_attention(
    tmp_path: Path, interval: int | None, expected: tuple[str, ...]
) -> None:
    drop: tuple[str, ...] = ("qwen35.attention.recurrent_layers",)
    if interval is None:  # Qwen3_5TextConfig's default full_attention_interval is 4
        drop += ("qwen35.full_attention_interval",)
        path = meta_gguf(tmp_path / "m.gguf", drop=drop)
    else:
        path = meta_gguf(tmp_path / "m.gguf", drop=drop, full_attention_interval=interval)
    assert read_config(path).layer_types == expected


def test_nextn_predict_layers_are_not_counted_as_model_layers(tmp_path: Path) -> None:
    # llama.cpp's block_count includes the multi-token-prediction blocks; the model runs the others
    path = meta_gguf(
        tmp_path / "m.gguf",
        block_count=5,
        nextn_predict_layers=1,
        attention__recurrent_layers=[True, True, True, False, False],
    )
    config = read_config(path)
    assert config.num_hidden_layers == 4 and config == tiny_config()


def test_per_layer_head_count_kv_takes_the_attention_layers_value(tmp_path: Path) -> None:
    path = meta_gguf(tmp_path / "m.gguf", attention__head_count_kv=[0, 0, 0, 2])
    assert read_config(path).num_key_value_heads == 2


def test_an_empty_per_layer_head_count_kv_is_a_config_error(tmp_path: Path) -> None:
    # GGUFWriter refuses to write an empty array: write [2], then cut its one item out of the bytes
    path = meta_gguf(tmp_path / "m.gguf", attention__head_count_kv=[2])
    data = path.read_bytes()
    key = b"qwen35.attention.head_count_kv"
    at = data.index(key) + len(key)
    assert struct.unpack_from("<IIQi", data, at) == (V.ARRAY, V.INT32, 1, 2)
    # the tensor infos end after output.weight's: name, n_dims, 2 dims, type, offset; the data follows, 32-aligned
    end = data.rindex(b"output.weight") + len(b"output.weight") + 4 + 2 * 8 + 4 + 8
    header = data[: at + 8] + struct.pack("<Q", 0) + data[at + 20 : end]
    path.write_bytes(header + bytes(-len(header) % 32) + data[end + -end % 32 :])
    reader = gguf.GGUFReader(path)  # a well-formed GGUF but for the empty array
    assert reader.fields[key.decode()].contents() == []
    assert [t.name for t in reader.tensors] == ["token_embd.weight", "output.weight"]
    with pytest.raises(ConfigError) as e:  # no head count at all: 0 heads, which Config names
        read_config(path)
    assert str(e.value) == f"{path}: key 'num_key_value_heads' is 0, expected > 0"


def test_strings_come_back_as_str(tmp_path: Path) -> None:
    path = meta_gguf(tmp_path / "m.gguf")
    reader = gguf.GGUFReader(path)
    arch = _field(reader, path, "general.architecture", kind=str)
    assert type(arch) is str and arch == "qwen35"


def test_a_single_layer_gguf_is_read(tmp_path: Path) -> None:
    path = meta_gguf(tmp_path / "m.gguf", block_count=1, attention__recurrent_layers=[False])
    config = read_config(path)
    assert config.num_hidden_layers == 1 and config.layer_types == ("full_attention",)


def test_as_many_layers_as_the_file_has_bytes_is_the_most_read(tmp_path: Path) -> None:
    # a layer needs at least a byte of weights: block_count up to the file's size passes this check
    drop = ("qwen35.attention.recurrent_layers",)
    size = meta_gguf(tmp_path / "m.gguf", drop=drop, embd=(32, 8)).stat().st_size
    path = meta_gguf(tmp_path / "m.gguf", drop=drop, embd=(32, 8), block_count=size)
    assert path.stat().st_size == size  # a u32 is a u32 whatever its value
    assert read_config(path).num_hidden_layers == size
    path = meta_gguf(tmp_path / "m.gguf", drop=drop, embd=(32, 8), block_count=size + 1)
    with pytest.raises(WeightsError) as e:
        read_config(path)
    assert str(e.value) == f"{path}: GGUF metadata key 'qwen35.block_count' gives {size + 1} layers"


def test_values_other_than_configs_defaults_come_through(tmp_path: Path) -> None:
    path = meta_gguf(
        tmp_path / "m.gguf",
        attention__key_length=32,
        attention__value_length=32,
        rope__dimension_count=16,
        ssm__conv_kernel=3,
        attention__layer_norm_rms_epsilon=1e-5,
        rope__freq_base=1e6,
        context_length=4096,
    )
    c = read_config(path)
    assert (c.head_dim, c.partial_rotary_factor, c.rotary_dim) == (32, 0.5, 16)
    assert c.linear_conv_kernel_dim == 3
    assert c.rms_norm_eps == 1e-5  # the float32 1e-5 read back as the decimal config.json would hold
    assert c.rope_theta == 1e6 and c.max_position_embeddings == 4096
    assert c.extra == {}


def test_rope_freq_base_defaults_to_10000(tmp_path: Path) -> None:
    path = meta_gguf(tmp_path / "m.gguf", drop=("qwen35.rope.freq_base",), rope__dimension_count=32)
    c = read_config(path)
    assert c.rope_theta == 10000.0 and c.partial_rotary_factor == 0.5


def test_a_missing_metadata_key_is_named_with_the_file(tmp_path: Path) -> None:
    path = meta_gguf(tmp_path / "m.gguf", drop=("qwen35.block_count",))
    with pytest.raises(
        WeightsError, match=re.escape(f"{path}: GGUF metadata key 'qwen35.block_count' is missing")
    ):
        read_config(path)


def test_a_gguf_without_metadata_or_tensors_is_named(tmp_path: Path) -> None:
    bare = tmp_path / "bare.gguf"
    bare.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 0))  # magic, version 3, 0 tensors, 0 keys
    msg = re.escape(f"{bare}: GGUF metadata key 'general.architecture' is missing")
    with pytest.raises(WeightsError, match=msg):
        read_config(bare)
    with pytest.raises(WeightsError, match=msg):
        read_gguf(bare)
    no_embd = meta_gguf(tmp_path / "no-embd.gguf", embd=None)
    with pytest.raises(WeightsError, match=re.escape(f"{no_embd}: tensor 'token_embd.weight' is missing")):
        read_config(no_embd)


def test_junk_is_not_a_readable_gguf(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGML" + bytes(60))
    with pytest.raises(WeightsError, match=re.escape(f"{junk}: not a readable GGUF file (")):
        read_config(junk)


def test_metadata_config_cannot_run_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    path = meta_gguf(tmp_path / "m.gguf", attention__head_count=3)
    with pytest.raises(ConfigError, match=re.escape(f"{path}: num_attention_heads=3 is not a multiple")):
        read_config(path)


def test_read_config_is_read_gguf_s_config(tmp_path: Path) -> None:
    out = write_gguf(tiny_model(0), tmp_path / "t.gguf")
    assert read_config(out) == read_gguf(out)[0] == tiny_config()


# -- the vocabulary -----------------------------------------------------------------------------------------


def test_vocab_spelt_out_for_261_tokens() -> None:
    tokens, scores, types = vocab(261)
    assert tokens[:4] == [b"<unk>", b"<s>", b"</s>", b"<0x00>"]
    assert tokens[13] == b"<0x0A>" and tokens[258] == b"<0xFF>"  # llama.cpp's SPM newline is <0x0A>
    assert tokens[259:] == ["\u2581t259".encode(), "\u2581t260".encode()] and len(tokens) == 261
    assert types == [2, 3, 3] + [6] * 256 + [1, 1]  # UNKNOWN, CONTROL x2, BYTE x256, NORMAL
    assert scores == [0.0] * 259 + [-0.0, -1.0] and len(scores) == 261


def test_vocab_needs_room_for_the_byte_tokens() -> None:
    assert len(vocab(259)[0]) == 259  # the smallest that fits, with no ▁t tokens
    with pytest.raises(
        ValueError, match=r"vocab: a byte-fallback vocabulary needs >= 259 tokens, the model has 258"
    ):
        vocab(258)


def test_the_written_vocabulary_is_what_gguf_py_reads(tmp_path: Path) -> None:
    reader = gguf.GGUFReader(write_gguf(tiny_model(0), tmp_path / "t.gguf"))
    tokens, scores, types = vocab(512)
    assert reader.fields["tokenizer.ggml.tokens"].contents() == [t.decode() for t in tokens]
    assert reader.fields["tokenizer.ggml.scores"].contents() == scores
    assert reader.fields["tokenizer.ggml.token_type"].contents() == types


# -- writing ------------------------------------------------------------------------------------------------


def test_name_is_the_checkpoint_dir_or_the_file_stem(tmp_path: Path) -> None:
    from_dir = describe(write_gguf(tiny_model(0), tmp_path / "a.gguf"))
    assert from_dir["metadata"]["general.name"] == tiny_model(0).name
    from_file = write_gguf(tiny_model(0) / "model.safetensors", tmp_path / "b.gguf")
    assert describe(from_file)["metadata"]["general.name"] == "model"
    assert read_gguf(from_file)[0] == tiny_config()  # config.json found beside the file


def test_a_dotted_checkpoint_dir_keeps_its_whole_name(tmp_path: Path) -> None:
    ckpt = tmp_path / "Qwen3.5-tiny.v1"  # a dir, not a file: no suffix to strip
    shutil.copytree(tiny_model(0), ckpt)
    assert describe(write_gguf(ckpt, tmp_path / "t.gguf"))["metadata"]["general.name"] == "Qwen3.5-tiny.v1"


def test_written_atomically_through_a_hidden_sibling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "t.gguf"
    seen: list[Path] = []
    writer: Any = gguf.GGUFWriter

    class Watched(writer):  # the real writer; it notes where it writes
        def __init__(self, path: Any, *args: Any, **kwargs: Any) -> None:
            seen.append(Path(path))
            assert not out.exists()  # nothing at `out` until the file is complete
            super().__init__(path, *args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFWriter", Watched)
    write_gguf(tiny_model(0), out)
    (tmp,) = seen
    assert tmp.parent == out.parent  # same directory: os.replace is a rename, atomic
    assert tmp.name.startswith(".t.gguf.") and tmp.name.endswith(".tmp")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.gguf"]


def test_a_missing_checkpoint_tensor_is_named_and_leaves_nothing(tmp_path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    shutil.copy(tiny_model(0) / "config.json", ckpt)
    tensors = load_file(str(tiny_model(0) / "model.safetensors"))
    del tensors["model.layers.1.linear_attn.A_log"]
    save_file(tensors, str(ckpt / "model.safetensors"))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(WeightsError, match=re.escape(f"{ckpt}: missing tensor 'layers.1.linear_attn.A_log'")):
        write_gguf(ckpt, out_dir / "t.gguf")
    assert list(out_dir.iterdir()) == []  # no half-written file, no temporary left behind


def test_key_and_value_head_dims_must_match(tmp_path: Path) -> None:
    raw = json.loads((tiny_model(0) / "config.json").read_text())
    raw["linear_value_head_dim"] = 32
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(raw))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "write_gguf: llama.cpp's qwen35 needs linear_key_head_dim == linear_value_head_dim (got 64 and 32)"
        ),
    ):
        write_gguf(ckpt, tmp_path / "x.gguf")


def test_an_unknown_transform_is_named() -> None:
    c, t = tiny_config(), np.zeros(4, np.float32)
    with pytest.raises(AssertionError, match="rot13"):
        _to_gguf(t, "rot13", c)
    with pytest.raises(AssertionError, match="rot13"):
        _from_gguf(t, "rot13", c)


def test_describe_leaves_out_gguf_internals_and_the_token_arrays(tmp_path: Path) -> None:
    meta = describe(write_gguf(tiny_model(0), tmp_path / "t.gguf"))["metadata"]
    assert not [k for k in meta if k.startswith("GGUF.")]  # GGUF.version, GGUF.tensor_count, GGUF.kv_count
    assert not [
        k
        for k in meta
        if k in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")
    ]
    assert meta["tokenizer.ggml.model"] == "llama" and meta["tokenizer.ggml.pre"] == "default"


# -- reading odd tensor types -------------------------------------------------------------------------------


def rewrite(src: Path, out: Path, edit: Callable[[str, np.ndarray], tuple[np.ndarray, Any] | None]) -> Path:
    """`src` copied with gguf-py, each tensor (name, float32 data) replaced by edit's (data, raw_dtype)."""
    reader = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(str(out), "qwen35")
    for k, f in reader.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == V.ARRAY else None
        w.add_key_value(k, f.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        data = np.array(t.data)
        new = edit(t.name, data)
        if new is None:
            w.add_tensor(t.name, data)
        else:  # raw_dtype None: gguf-py picks the type from the array's dtype
            w.add_tensor(t.name, new[0], raw_dtype=new[1])
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return out


def test_a_q4k_token_embedding_is_dequantized_not_kept(tmp_path: Path) -> None:
    # llama.cpp's Q4_K_M files quantize token_embd; the engine looks rows up, so it wants them dense
    f32 = write_gguf(tiny_model(0), tmp_path / "t.gguf")
    emb = read_tensors(tiny_model(0), tiny_config())["embed_tokens.weight"]
    blocks = Q4_K.quantize(emb)

    def q4k_embd(name: str, data: np.ndarray) -> tuple[np.ndarray, Any] | None:
        return (blocks, gguf.GGMLQuantizationType.Q4_K) if name == "token_embd.weight" else None

    path = rewrite(f32, tmp_path / "q4k-embd.gguf", q4k_embd)
    config, back = read_gguf(path)
    got = back["embed_tokens.weight"]
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == (512, 256)
    np.testing.assert_array_equal(got, gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q4_K))
    assert config.vocab_size == 512
    np.testing.assert_array_equal(back["norm.weight"], read_tensors(tiny_model(0), config)["norm.weight"])


def test_f16_tensors_come_back_as_float32(tmp_path: Path) -> None:
    f32 = write_gguf(tiny_model(0), tmp_path / "t.gguf")
    path = rewrite(
        f32, tmp_path / "f16.gguf", lambda n, d: (d.astype(np.float16), gguf.GGMLQuantizationType.F16)
    )
    assert {t["type"] for t in describe(path)["tensors"].values()} == {"F16"}
    config, back = read_gguf(path)
    original = read_tensors(tiny_model(0), config)
    for name, t in back.items():
        assert isinstance(t, np.ndarray) and t.dtype == np.float32 and t.shape == original[name].shape, name
        # out_proj's columns come back through a fancy index (a Fortran-order result): C order, as from a
        # checkpoint, so BLAS sees one layout whichever file the model came from (issue 24)
        assert t.flags.c_contiguous, name
    emb = original["embed_tokens.weight"]
    np.testing.assert_array_equal(back["embed_tokens.weight"], emb.astype(np.float16).astype(np.float32))


def test_a_nan_in_a_tensor_is_named(tmp_path: Path) -> None:
    f32 = write_gguf(tiny_model(0), tmp_path / "t.gguf")

    def nan(name: str, data: np.ndarray) -> tuple[np.ndarray, Any] | None:
        if name != "blk.2.ffn_down.weight":
            return None
        data = data.copy()
        data[3, 5] = np.nan
        return data, gguf.GGMLQuantizationType.F32

    path = rewrite(f32, tmp_path / "nan.gguf", nan)
    with pytest.raises(
        WeightsError, match=re.escape(f"{path}: tensor 'blk.2.ffn_down.weight' holds NaN or inf")
    ):
        read_gguf(path)


def test_a_tensor_type_gguf_py_cannot_dequantize_is_named(tmp_path: Path) -> None:
    f32 = write_gguf(tiny_model(0), tmp_path / "t.gguf")

    def f64(name: str, data: np.ndarray) -> tuple[np.ndarray, Any] | None:
        return (data.astype(np.float64), None) if name == "blk.0.ssm_a" else None

    path = rewrite(f32, tmp_path / "f64.gguf", f64)
    assert describe(path)["tensors"]["blk.0.ssm_a"]["type"] == "F64"
    with pytest.raises(
        WeightsError,
        match=re.escape(f"{path}: tensor 'blk.0.ssm_a' has ggml type F64, which gguf-py cannot dequantize"),
    ):
        read_gguf(path)


def test_stored_q4k_counts_columns_from_the_block_size() -> None:
    c = tiny_config()
    for n_blocks in (1, 5, 35):  # 35: (2 + 2 + 12 + 128) bytes per block, not 140
        q = np.random.default_rng(n_blocks).integers(0, 256, (3, n_blocks * BLOCK), dtype=np.uint8)
        s = _stored_q4k(q, "plain", c)
        assert isinstance(s, StoredQ4K) and type(s.cols) is int and s.cols == n_blocks * 256, n_blocks
        assert np.array_equal(s.q, q) and s.col_perm is None


def test_stored_q4k_refuses_a_transform_it_cannot_apply_to_blocks() -> None:
    q = np.zeros((512, BLOCK), np.uint8)
    with pytest.raises(
        WeightsError, match=r"a Q4_K tensor needing transform 'plus_one' cannot be kept as Q4_K"
    ):
        _stored_q4k(q, "plus_one", tiny_config())


def test_stored_q4k_rows_keep_their_width(tmp_path: Path) -> None:
    _, back = read_gguf(write_gguf(tiny_model(0), tmp_path / "q.gguf", weights="q4_k"))
    for name in ("layers.0.linear_attn.in_proj_z.weight", "layers.3.self_attn.q_proj.weight"):
        s = back[name]
        assert isinstance(s, StoredQ4K) and s.cols == 256 and s.q.shape[1] == BLOCK, name


# -- hostile files (issue #27): each a WeightsError or ConfigError naming the file and the field -----------------


def test_a_fifo_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "m.gguf"
    os.mkfifo(fifo)  # opening it would block until a writer came
    for read in (read_config, read_gguf):
        with pytest.raises(WeightsError) as e:
            read(fifo)
        assert str(e.value) == f"{fifo}: not a regular file"


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (
            struct.pack("<IQQ", 3, 0, 2**60),
            "metadata key count is 1152921504606846976, more than the 0 bytes left hold",
        ),
        (struct.pack("<IQQ", 3, 2**60, 0), "tensor count is 1152921504606846976, more than the file holds"),
        (
            struct.pack("<IQQQ", 3, 0, 1, 2**60) + b"abc",
            "metadata key count is 1, more than the 11 bytes left hold",
        ),
    ],
    ids=["keys", "tensors", "key-length"],
)
def test_counts_and_lengths_past_the_file_are_named(tmp_path: Path, header: bytes, message: str) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + header)
    with pytest.raises(WeightsError) as e:
        read_gguf(path)
    assert str(e.value) == f"{path}: GGUF header: {message}"


def test_a_truncated_metadata_section_is_named(tmp_path: Path) -> None:
    path = meta_gguf(tmp_path / "m.gguf")
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(
        WeightsError, match=re.escape(f"{path}: GGUF header: metadata key count is 28, more than")
    ):
        read_config(path)


def test_what_gguf_py_still_refuses_past_the_header_check_is_named(tmp_path: Path) -> None:
    path = meta_gguf(tmp_path / "m.gguf")
    data = path.read_bytes()
    at = (
        data.index(b"token_embd.weight") + len(b"token_embd.weight") + 4 + 8 + 8
    )  # n_dims, two dims: the type
    path.write_bytes(data[:at] + struct.pack("<I", 999) + data[at + 4 :])  # no ggml type 999
    with pytest.raises(WeightsError, match=re.escape(f"{path}: not a readable GGUF file (ValueError: ")):
        read_config(path)


def _offset_at(path: Path, tensor: str) -> int:
    """The file position of `tensor`'s data-offset field in the tensor-info section."""
    reader = gguf.GGUFReader(path)
    t = next(t for t in reader.tensors if t.name == tensor)
    return int(t.field.parts[-1].__array_interface__["data"][0] - reader.data.__array_interface__["data"][0])


def test_two_tensors_sharing_data_are_refused(tmp_path: Path) -> None:
    path = meta_gguf(tmp_path / "m.gguf")
    data = bytearray(path.read_bytes())
    at = _offset_at(path, "output.weight")
    data[at : at + 8] = struct.pack("<Q", 0)  # output.weight's data offset: token_embd.weight's own
    path.write_bytes(bytes(data))
    with pytest.raises(WeightsError) as e:
        read_config(path)
    assert (
        str(e.value) == f"{path}: tensors 'output.weight' and 'token_embd.weight' overlap in the file's data"
    )


def test_adjacent_tensors_do_not_overlap(tmp_path: Path) -> None:
    path = meta_gguf(tmp_path / "m.gguf", embd=(32, 8))  # 1,024 bytes each: the second starts where one ends
    reader = gguf.GGUFReader(path)
    spans = sorted((int(t.data_offset), int(t.n_bytes)) for t in reader.tensors)
    assert spans[0][0] + spans[0][1] == spans[1][0]
    assert read_config(path).vocab_size == 32  # ggml lists dims fastest first: (32, 8) is stored as [8, 32]


def test_an_architecture_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = meta_gguf(tmp_path / "m.gguf")
    data = path.read_bytes()
    at = data.index(b"general.architecture") + len(b"general.architecture") + 4 + 8  # type, length
    path.write_bytes(data[:at] + b"\xff\xfe" + data[at + 2 :])
    with pytest.raises(WeightsError) as e:
        read_config(path)
    assert (
        str(e.value)
        == f"{path}: GGUF metadata key 'general.architecture' cannot be read (UnicodeDecodeError)"
    )


@pytest.mark.parametrize(
    ("set_", "message"),
    [
        ({"block_count": "four"}, "GGUF metadata key 'qwen35.block_count' is 'four', expected int"),
        ({"block_count": True}, "GGUF metadata key 'qwen35.block_count' is True, expected int"),
        (
            {"attention__recurrent_layers": [1, 1, 1, 0]},
            "'qwen35.attention.recurrent_layers' is [1, 1, 1, 0], expected bool",
        ),
        (
            {"attention__layer_norm_rms_epsilon": 1},
            "'qwen35.attention.layer_norm_rms_epsilon' is 1, expected float",
        ),
        ({"rope__freq_base": 10000}, "GGUF metadata key 'qwen35.rope.freq_base' is 10000, expected float"),
        ({"block_count": 0}, "GGUF metadata key 'qwen35.block_count' gives 0 layers"),
        ({"block_count": 4_000_000_000}, "GGUF metadata key 'qwen35.block_count' gives 4000000000 layers"),
    ],
)
def test_a_metadata_value_of_the_wrong_kind_or_size_is_named(
    tmp_path: Path, set_: dict, message: str
) -> None:
    path = meta_gguf(tmp_path / "m.gguf", **set_)
    with pytest.raises(WeightsError) as e:
        read_config(path)
    assert str(e.value).startswith(f"{path}: ") and str(e.value).endswith(message), str(e.value)


@pytest.mark.parametrize(
    ("set_", "key"),
    [
        ({"attention__key_length": 0}, "head_dim"),
        ({"ssm__time_step_rank": 0}, "linear_value_head_dim"),
    ],
)
def test_a_zero_divisor_is_a_config_error_not_a_zero_division(tmp_path: Path, set_: dict, key: str) -> None:
    path = meta_gguf(tmp_path / "m.gguf", **set_)
    with pytest.raises(ConfigError, match=re.escape(f"{path}: key '{key}' is 0, expected > 0")):
        read_config(path)


def test_a_one_dim_token_embedding_is_named(tmp_path: Path) -> None:
    path = meta_gguf(tmp_path / "m.gguf", embd=(512,))
    with pytest.raises(WeightsError) as e:
        read_config(path)
    assert str(e.value) == f"{path}: tensor 'token_embd.weight' has 1 dims, not 2"


def _patch_after_key(path: Path, key: bytes, skip: int, value: bytes) -> None:
    """Overwrite the bytes `skip` bytes after metadata key `key`'s name with `value`."""
    data = path.read_bytes()
    at = data.index(key) + len(key) + skip
    path.write_bytes(data[:at] + value + data[at + len(value) :])


def test_an_array_count_past_the_file_is_named_before_gguf_py_walks_it(tmp_path: Path) -> None:
    path = meta_gguf(tmp_path / "m.gguf")
    _patch_after_key(path, b"qwen35.attention.recurrent_layers", 4 + 4, struct.pack("<Q", 2**40))
    with pytest.raises(WeightsError) as e:
        read_config(path)  # gguf-py would walk 2**40 items
    assert re.fullmatch(
        re.escape(f"{path}: GGUF header: metadata key ")
        + r"\d+ count is 1099511627776, more than the \d+ bytes left hold",
        str(e.value),
    ), str(e.value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d[:20], r"20 bytes, shorter than a GGUF header"),
        (
            lambda d: d[:16] + struct.pack("<Q", 2**40) + d[24:],
            r"metadata key count is 1099511627776, more than",
        ),
        (
            lambda d: d[:8] + struct.pack("<Q", 2**40) + d[16:],
            r"tensor count is 1099511627776, more than the file holds",
        ),
        (lambda d: d[: d.index(b"output.weight") + 5], r"tensor 1 name needs 13 bytes at offset \d+; 5 left"),
    ],
    ids=["short", "kv-count", "tensor-count", "cut"],
)
def test_the_header_check_names_counts_and_lengths(
    tmp_path: Path, edit: Callable[[bytes], bytes], message: str
) -> None:
    from reference.gguf_header import check_header

    path = meta_gguf(tmp_path / "m.gguf")
    path.write_bytes(edit(path.read_bytes()))
    with pytest.raises(WeightsError, match=re.escape(f"{path}: GGUF header: ") + ".*" + message):
        check_header(path)


def test_the_header_check_names_types_and_dims(tmp_path: Path) -> None:
    from reference.gguf_header import check_header

    path = meta_gguf(tmp_path / "m.gguf")
    check_header(path)  # a whole header: nothing to say
    original = path.read_bytes()
    _patch_after_key(path, b"qwen35.block_count", 0, struct.pack("<I", 13))  # value type 13 does not exist
    with pytest.raises(WeightsError, match=r"has unknown value type 13$"):
        check_header(path)
    path.write_bytes(original)
    _patch_after_key(
        path, b"qwen35.attention.recurrent_layers", 4, struct.pack("<I", 9)
    )  # an array of arrays
    with pytest.raises(WeightsError, match=r"is an array of arrays$"):
        check_header(path)
    path.write_bytes(original)
    _patch_after_key(path, b"token_embd.weight", 0, struct.pack("<I", 5))  # 5 dimensions
    with pytest.raises(WeightsError, match=r"tensor 0 has 5 dimensions \(at most 4\)$"):
        check_header(path)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGML" + bytes(60))
    check_header(junk)  # not GGUF at all: left to gguf-py, which names it
