"""GGUF both ways for the Qwen3.5 hybrid: write a checkpoint in llama.cpp's `qwen35` layout, read one back.

llama.cpp does not store transformers' tensors as they are. Its converter (convert_hf_to_gguf.py, classes
Qwen3_5TextModel <- _LinearAttentionVReorderBase <- Qwen3NextModel) renames them, and changes five things:

    (1 + w) RMSNorm weights   stored as 1 + w (attn_norm, post_attention_norm, output_norm, attn_q/k_norm);
                              the Gated DeltaNet's own gated norm (ssm_norm) is stored as is
    A_log                     stored as ssm_a = -exp(A_log)
    dt_bias                   renamed ssm_dt.bias
    conv1d [C, 1, K]          squeezed to [C, K] (ggml shape {K, C})
    value heads               reordered from grouped by key head [k0: v0 v1 | k1: v0 v1] to tiled [v0: k0 k1 |
                              v1: k0 k1] when Hv != Hk: rows of in_proj_qkv's V part, in_proj_z, in_proj_b,
                              in_proj_a, the conv's V channels, dt_bias and A_log; columns of out_proj

`write_gguf` applies them in float32 (the converter computes in the stored dtype: on an fp16 checkpoint its
-exp(A_log) and 1 + w are rounded to fp16, which moves the tiny model's logits by ~3e-3; give it float32
weights). `read_gguf` undoes them and returns transformers-named float32 tensors, or Q4_K blocks left as stored,
for `reference.weights` to assemble. Q4_K quantizes each row on its own, so a row permutation moves whole rows
of blocks; out_proj's columns cannot be un-permuted inside Q4_K blocks, so that weight multiplies a permuted
input instead (`weights.ColumnsPermuted`), which is the same sum.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from reference.config import Config
from reference.gguf_header import check_header
from reference.weights import QK_K, StoredQ4K, WeightsError, expected_shapes

ARCH = "qwen35"
# llama.cpp's qwen35 loader requires rope.dimension_sections (interleaved MRoPE); with text positions every
# section rotates by the same position, so it is plain RoPE over rope.dimension_count dims. The converter
# writes this default when the checkpoint has no mrope_section.
MROPE_SECTIONS = [11, 11, 10, 0]
# gguf.LlamaFileType: ALL_F32 = 0, MOSTLY_Q4_K_S = 14 (our Q4_K export quantizes every projection to Q4_K).
FILE_TYPE = {"f32": 0, "q4_k": 14}
# gguf.GGMLQuantizationType
F32, F16, Q4_K_TYPE = 0, 1, 12
# gguf.TokenType for the vocabulary we write (SentencePiece-style "llama" tokenizer)
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


# -- names --------------------------------------------------------------------------------------------------


def layout(c: Config) -> list[tuple[str, str, str]]:
    """(transformers name without prefix, GGUF name, transform) for every tensor of the model, in file order.

    Transforms: plain, plus_one (RMSNorm 1 + w), neg_exp (A_log -> -exp), v_rows:<head dim> (value-head rows
    reordered), v_cols (value-head columns reordered), qkv (only the V rows reordered), conv (squeeze, V
    channels reordered)."""
    out = [("embed_tokens.weight", "token_embd.weight", "plain")]
    dv = c.linear_value_head_dim
    for i, kind in enumerate(c.layer_types):
        p, b = f"layers.{i}.", f"blk.{i}."
        out.append((p + "input_layernorm.weight", b + "attn_norm.weight", "plus_one"))
        if kind == "linear_attention":
            a = p + "linear_attn."
            out += [
                (a + "in_proj_qkv.weight", b + "attn_qkv.weight", "qkv"),
                (a + "in_proj_z.weight", b + "attn_gate.weight", f"v_rows:{dv}"),
                (a + "conv1d.weight", b + "ssm_conv1d.weight", "conv"),
                (a + "dt_bias", b + "ssm_dt.bias", "v_rows:1"),
                (a + "A_log", b + "ssm_a", "neg_exp"),
                (a + "in_proj_b.weight", b + "ssm_beta.weight", "v_rows:1"),
                (a + "in_proj_a.weight", b + "ssm_alpha.weight", "v_rows:1"),
                (a + "norm.weight", b + "ssm_norm.weight", "plain"),
                (a + "out_proj.weight", b + "ssm_out.weight", "v_cols"),
            ]
        else:
            a = p + "self_attn."
            out += [
                (a + "q_proj.weight", b + "attn_q.weight", "plain"),
                (a + "k_proj.weight", b + "attn_k.weight", "plain"),
                (a + "v_proj.weight", b + "attn_v.weight", "plain"),
                (a + "o_proj.weight", b + "attn_output.weight", "plain"),
                (a + "q_norm.weight", b + "attn_q_norm.weight", "plus_one"),
                (a + "k_norm.weight", b + "attn_k_norm.weight", "plus_one"),
            ]
        out += [
            (p + "post_attention_layernorm.weight", b + "post_attention_norm.weight", "plus_one"),
            (p + "mlp.gate_proj.weight", b + "ffn_gate.weight", "plain"),
            (p + "mlp.up_proj.weight", b + "ffn_up.weight", "plain"),
            (p + "mlp.down_proj.weight", b + "ffn_down.weight", "plain"),
        ]
    out.append(("norm.weight", "output_norm.weight", "plus_one"))
    if not c.tie_word_embeddings:
        out.append(("lm_head.weight", "output.weight", "plain"))
    return out


def tiled_heads(c: Config) -> np.ndarray:  # -> i64[Hv]
    """Stored value head p is transformers' value head tiled_heads(c)[p] (identity when Hv == Hk)."""
    hk, hv = c.linear_num_key_heads, c.linear_num_value_heads
    return np.arange(hv).reshape(hk, hv // hk).T.reshape(-1)


def _v_index(c: Config, head_dim: int) -> np.ndarray:  # -> i64[Hv * head_dim]
    """Stored row r of a value-head-major tensor is transformers' row _v_index(c, head_dim)[r]."""
    heads = tiled_heads(c)
    return (heads[:, None] * head_dim + np.arange(head_dim)).reshape(-1)


def _to_gguf(t: np.ndarray, transform: str, c: Config) -> np.ndarray:
    """One transformers float32 tensor in llama.cpp's stored form (float32 arithmetic)."""
    kd2 = 2 * c.linear_num_key_heads * c.linear_key_head_dim
    dv = c.linear_value_head_dim
    if transform == "plain":
        return t
    if transform == "plus_one":
        return np.float32(1.0) + t
    if transform == "neg_exp":
        return -np.exp(t)[_v_index(c, 1)]
    if transform.startswith("v_rows:"):
        return t[_v_index(c, int(transform.partition(":")[2]))]
    if transform == "v_cols":
        return t[:, _v_index(c, dv)]
    if transform == "qkv":
        return np.concatenate([t[:kd2], t[kd2:][_v_index(c, dv)]])
    if transform == "conv":  # [C, 1, K] -> [C, K]
        t = t[:, 0, :]
        return np.concatenate([t[:kd2], t[kd2:][_v_index(c, dv)]])
    raise AssertionError(transform)


def _from_gguf(t: np.ndarray, transform: str, c: Config) -> np.ndarray:
    """The inverse of _to_gguf on float32 values: a stored tensor back in transformers' form."""
    kd2 = 2 * c.linear_num_key_heads * c.linear_key_head_dim
    dv = c.linear_value_head_dim

    def unrows(x: np.ndarray, head_dim: int) -> np.ndarray:
        return x[np.argsort(_v_index(c, head_dim))]

    if transform == "plain":
        return t
    if transform == "plus_one":
        return t - np.float32(1.0)
    if transform == "neg_exp":
        return np.log(-unrows(t, 1))
    if transform.startswith("v_rows:"):
        return unrows(t, int(transform.partition(":")[2]))
    if transform == "v_cols":
        return t[:, np.argsort(_v_index(c, dv))]
    if transform == "qkv":
        return np.concatenate([t[:kd2], unrows(t[kd2:], dv)])
    if transform == "conv":
        return np.concatenate([t[:kd2], unrows(t[kd2:], dv)])[:, None, :]
    raise AssertionError(transform)


# -- writing ------------------------------------------------------------------------------------------------


def vocab(n: int) -> tuple[list[bytes], list[float], list[int]]:
    """A SentencePiece-style vocabulary of n tokens for a checkpoint that has none: <unk>, <s>, </s>, the 256
    byte tokens <0x00>..<0xFF> (llama.cpp's SPM vocab needs <0x0A> for its newline token), then ▁t<id>.
    Token ids are what the harness feeds; the strings only have to load."""
    if n < 3 + 256:
        raise ValueError(f"vocab: a byte-fallback vocabulary needs >= 259 tokens, the model has {n}")
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256
    tokens += [f"\u2581t{i}".encode() for i in range(len(tokens), n)]
    types += [NORMAL] * (n - len(types))
    scores = [0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(n - 259)]
    return tokens, scores, types


def write_gguf(checkpoint: str | Path, out: str | Path, weights: str = "f32") -> Path:
    """Write the transformers Qwen3.5 checkpoint at `checkpoint` as a llama.cpp `qwen35` GGUF at `out`.

    weights="f32": every tensor float32. weights="q4_k": every 2-D projection whose input dim is a multiple of
    256 as Q4_K blocks from reference.Q4_K.quantize (of the tensor as stored, i.e. after the value-head
    reorder); the token embedding, norms, conv kernel, ssm_a and ssm_dt stay float32. Written atomically."""
    import gguf

    from reference.weights import read_tensors

    if weights not in FILE_TYPE:
        raise ValueError(f"write_gguf: weights={weights!r}, expected 'f32' or 'q4_k'")
    checkpoint = Path(checkpoint)
    config = Config.from_file((checkpoint if checkpoint.is_dir() else checkpoint.parent) / "config.json")
    if config.linear_key_head_dim != config.linear_value_head_dim:
        raise ValueError(
            "write_gguf: llama.cpp's qwen35 needs linear_key_head_dim == linear_value_head_dim "
            f"(got {config.linear_key_head_dim} and {config.linear_value_head_dim})"
        )
    tensors = read_tensors(checkpoint, config)
    out = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        w = gguf.GGUFWriter(tmp, ARCH)
        _write_metadata(w, config, checkpoint.name if checkpoint.is_dir() else checkpoint.stem, weights)
        # in the order of the checkpoint's sorted tensor names, as llama.cpp's converter writes them
        for hf_name, gguf_name, transform in sorted(layout(config), key=lambda e: _full_name(e[0])):
            if hf_name not in tensors:
                raise WeightsError(f"{checkpoint}: missing tensor {hf_name!r}")
            t = np.ascontiguousarray(_to_gguf(tensors[hf_name], transform, config), dtype=np.float32)
            if (
                weights == "q4_k"
                and t.ndim == 2
                and t.shape[1] % QK_K == 0
                and gguf_name != "token_embd.weight"
            ):
                from reference.q4k import Q4_K

                w.add_tensor(gguf_name, Q4_K.quantize(t), raw_dtype=gguf.GGMLQuantizationType.Q4_K)
            else:
                w.add_tensor(gguf_name, t)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def _full_name(hf_name: str) -> str:
    return hf_name if hf_name == "lm_head.weight" else "model." + hf_name


def _write_metadata(w: Any, c: Config, name: str, weights: str) -> None:
    w.add_name(name)
    w.add_file_type(FILE_TYPE[weights])
    w.add_quantization_version(2)  # ggml's GGML_QNT_VERSION
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(c.rope_theta)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_ssm_conv_kernel(c.linear_conv_kernel_dim)
    w.add_ssm_state_size(c.linear_key_head_dim)
    w.add_ssm_group_count(c.linear_num_key_heads)
    w.add_ssm_time_step_rank(c.linear_num_value_heads)
    w.add_ssm_inner_size(c.value_dim)
    # gguf-py 0.19 on PyPI has no add_recurrent_layers; the key is what llama.cpp reads first
    w.add_array(f"{ARCH}.attention.recurrent_layers", [t == "linear_attention" for t in c.layer_types])
    w.add_full_attention_interval(int(c.extra.get("full_attention_interval", 4)))
    w.add_rope_dimension_count(c.rotary_dim)
    w.add_rope_dimension_sections(MROPE_SECTIONS)
    tokens, scores, types = vocab(c.vocab_size)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)  # no special-token ids: llama.cpp's SPM defaults (unk 0, bos 1, eos 2) are these


# -- reading ------------------------------------------------------------------------------------------------


def read_config(path: Path) -> Config:
    """The model's Config from a qwen35 GGUF's metadata (as transformers' config.json would say it)."""
    return _config(_reader(path), path)


def _reader(path: Path) -> Any:
    """gguf-py's reader over a regular file. A header it cannot parse (a count, length or offset past the end of
    the file, an unknown type) is a WeightsError naming the file, and so are two tensors sharing data bytes."""
    from gguf import GGUFReader

    if path.exists() and not path.is_file():  # a FIFO would block the open
        raise WeightsError(f"{path}: not a regular file")
    if path.exists():  # gguf-py walks whatever counts the header claims: check them against the file first
        check_header(path)
    try:
        reader = GGUFReader(path)
    except (OSError, ValueError, IndexError, KeyError, OverflowError, TypeError) as e:
        raise WeightsError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from None
    spans = sorted((int(t.data_offset), int(t.data_offset) + int(t.n_bytes), t.name) for t in reader.tensors)
    for (_, end, first), (start, _, second) in itertools.pairwise(spans):
        if start < end:
            raise WeightsError(f"{path}: tensors {first!r} and {second!r} overlap in the file's data")
    return reader


def _field(reader: Any, path: Path, key: str, default: Any = None, kind: type = int) -> Any:
    """A metadata value of `kind` (a list of them for an array key); a WeightsError naming the key otherwise."""
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise WeightsError(f"{path}: GGUF metadata key {key!r} is missing")
        return default
    try:
        value = field.contents()  # gguf-py decodes strings itself: str, never bytes
    except (ValueError, IndexError) as e:  # a string that is not UTF-8, an array cut short
        raise WeightsError(f"{path}: GGUF metadata key {key!r} cannot be read ({type(e).__name__})") from None
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(v, kind) and not (kind is int and isinstance(v, bool)) for v in items):
        raise WeightsError(f"{path}: GGUF metadata key {key!r} is {value!r:.80}, expected {kind.__name__}")
    return value


def _config(reader: Any, path: Path) -> Config:
    arch = _field(reader, path, "general.architecture", kind=str)
    if arch != ARCH:
        raise WeightsError(f"{path}: general.architecture is {arch!r}; the reference runs {ARCH!r} only")

    def key(k: str, default: Any = None, kind: type = int) -> Any:
        return _field(reader, path, f"{ARCH}.{k}", default, kind)

    n_layer = int(key("block_count")) - int(key("nextn_predict_layers", 0))
    if (
        not 0 < n_layer <= path.stat().st_size
    ):  # a layer needs bytes of weights: 2**60 layers is no GGUF's count
        raise WeightsError(f"{path}: GGUF metadata key 'qwen35.block_count' gives {n_layer} layers")
    recurrent = key("attention.recurrent_layers", [], bool)
    if recurrent:
        layer_types = ["linear_attention" if r else "full_attention" for r in recurrent[:n_layer]]
    else:
        interval = int(key("full_attention_interval", 4))
        layer_types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n_layer)]
    head_kv = key("attention.head_count_kv")
    if isinstance(head_kv, list):  # a per-layer array: take the attention layers' value
        head_kv = max(head_kv, default=0)
    head_dim = int(key("attention.key_length"))
    names = {t.name: t for t in reader.tensors}
    if "token_embd.weight" not in names:
        raise WeightsError(f"{path}: tensor 'token_embd.weight' is missing")
    if len(names["token_embd.weight"].shape) != 2:
        raise WeightsError(
            f"{path}: tensor 'token_embd.weight' has {len(names['token_embd.weight'].shape)} dims, not 2"
        )
    n_v = int(key("ssm.time_step_rank"))
    raw = {
        "model_type": "qwen3_5_text",
        "vocab_size": int(names["token_embd.weight"].shape[1]),
        "hidden_size": int(key("embedding_length")),
        "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": n_layer,
        "layer_types": layer_types,
        "num_attention_heads": int(key("attention.head_count")),
        "num_key_value_heads": int(head_kv),
        "head_dim": head_dim,
        "linear_conv_kernel_dim": int(key("ssm.conv_kernel")),
        "linear_key_head_dim": int(key("ssm.state_size")),
        "linear_value_head_dim": int(key("ssm.inner_size")) // n_v if n_v else 0,  # 0: Config names the key
        "linear_num_key_heads": int(key("ssm.group_count")),
        "linear_num_value_heads": n_v,
        # GGUF keeps it as float32: read back the shortest decimal that rounds to it (1e-06, as config.json says)
        "rms_norm_eps": float(str(np.float32(key("attention.layer_norm_rms_epsilon", kind=float)))),
        "max_position_embeddings": int(key("context_length")),
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": float(key("rope.freq_base", 10000.0, float)),
            "partial_rotary_factor": int(key("rope.dimension_count")) / head_dim if head_dim else 0.0,
        },
        "tie_word_embeddings": "output.weight" not in names,
    }
    return Config.from_dict(raw, source=str(path))


def read_gguf(path: str | Path, keep_q4k: bool = True) -> tuple[Config, dict[str, np.ndarray | StoredQ4K]]:
    """A qwen35 GGUF's Config and its tensors under transformers' names (no prefix), in transformers' form.

    F32 and F16 tensors come back as float32; Q4_K tensors as StoredQ4K (keep_q4k) or dequantized; any other
    ggml type is dequantized by gguf-py. Missing, misshapen or non-finite tensors, and tensors of a type gguf-py
    cannot dequantize (F64, integers), raise WeightsError."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    path = Path(path)
    reader = _reader(path)
    config = _config(reader, path)
    shapes = expected_shapes(config)
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, config.hidden_size)
    stored = {t.name: t for t in reader.tensors}
    out: dict[str, np.ndarray | StoredQ4K] = {}
    for hf_name, gguf_name, transform in layout(config):
        t = stored.get(gguf_name)
        if t is None:
            raise WeightsError(f"{path}: missing tensor {gguf_name!r} (transformers' {hf_name!r})")
        want = shapes[hf_name]
        dims = tuple(int(d) for d in reversed(t.shape))  # ggml lists dims fastest first
        want_stored = (want[0], want[2]) if transform == "conv" else want
        if dims != want_stored:
            raise WeightsError(
                f"{path}: tensor {gguf_name!r} has shape {list(dims)}, expected {list(want_stored)}"
            )
        kind = GGMLQuantizationType(int(t.tensor_type))
        if (
            kind == GGMLQuantizationType.Q4_K
            and keep_q4k
            and len(want) == 2
            and hf_name != "embed_tokens.weight"
        ):
            out[hf_name] = _stored_q4k(
                np.array(t.data, dtype=np.uint8).reshape(want[0], -1), transform, config
            )
            continue
        if kind in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            values = np.array(t.data, dtype=np.float32).reshape(dims)
        else:
            try:
                values = np.asarray(dequantize(np.asarray(t.data), kind), dtype=np.float32).reshape(dims)
            except NotImplementedError:  # gguf-py dequantizes float and block-quant types, not F64 or I8..I64
                raise WeightsError(
                    f"{path}: tensor {gguf_name!r} has ggml type {kind.name}, which gguf-py cannot dequantize"
                ) from None
        if not np.isfinite(values).all():
            raise WeightsError(f"{path}: tensor {gguf_name!r} holds NaN or inf")
        out[hf_name] = np.ascontiguousarray(_from_gguf(values, transform, config))  # v_cols: a strided copy
    return config, out


def _stored_q4k(q: np.ndarray, transform: str, c: Config) -> StoredQ4K:
    """Q4_K rows back in transformers' row order; out_proj keeps its stored columns and says how they map."""
    kd2 = 2 * c.linear_num_key_heads * c.linear_key_head_dim
    dv = c.linear_value_head_dim
    cols = q.shape[1] // (2 + 2 + 12 + QK_K // 2) * QK_K
    if transform.startswith("v_rows:"):
        q = q[np.argsort(_v_index(c, int(transform.partition(":")[2])))]
    elif transform == "qkv":
        q = np.concatenate([q[:kd2], q[kd2:][np.argsort(_v_index(c, dv))]])
    elif transform == "v_cols":
        return StoredQ4K(np.ascontiguousarray(q), cols, _v_index(c, dv))
    elif transform != "plain":
        raise WeightsError(f"a Q4_K tensor needing transform {transform!r} cannot be kept as Q4_K")
    return StoredQ4K(np.ascontiguousarray(q), cols)


def describe(path: str | Path) -> dict[str, Any]:
    """Metadata (without the token list) and every tensor's name, ggml shape and type: for reports and tests."""
    from gguf import GGMLQuantizationType, GGUFReader

    reader = GGUFReader(Path(path))
    meta: dict[str, Any] = {}
    for k, field in reader.fields.items():
        if k.startswith("GGUF.") or (k.startswith("tokenizer.ggml.") and field.types[0].name == "ARRAY"):
            continue
        value = field.contents()
        meta[k] = value.decode() if isinstance(value, bytes) else value
    tensors = {
        t.name: {"shape": [int(d) for d in t.shape], "type": GGMLQuantizationType(int(t.tensor_type)).name}
        for t in reader.tensors
    }
    return json.loads(json.dumps({"metadata": meta, "tensors": tensors}, default=str))
