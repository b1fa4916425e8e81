"""Weights of a Qwen3.5 text model, read from HF `*.safetensors` and checked tensor by tensor against the Config.

Tensor names are transformers' (Qwen3_5ForCausalLM): `model.layers.{i}.linear_attn.in_proj_qkv.weight`, ...;
the multimodal checkpoint prefix `model.language_model.` is accepted too. 2-D projections become Q4_K at load
(weights="q4_k") when their input dim is a multiple of 256 (Q4_K's super-block), else stay float32; the
embedding table, norms, conv kernel, A_log and dt_bias always stay float32. weights="f32" keeps every projection
dense, which is what the HF oracle comparison uses.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from reference.config import Config

PREFIXES = ("model.language_model.", "model.")
IGNORED = ("mtp.", "model.visual.")  # HF ignores these too (_keys_to_ignore_on_load_unexpected)
DTYPES = {"F32": np.float32, "F16": np.float16}
QK_K = 256  # Q4_K super-block: a row is quantized in runs of 256 values


class WeightsError(ValueError):
    """A weights file the engine cannot load; the message names the file and tensor."""


class Dense:
    """y = x Wᵀ with W: f32[rows, cols], held C-contiguous: a transposed or strided W reaches BLAS with another
    transpose flag, which some OpenBLAS kernels (SkylakeX) sum in another order (issue 24)."""

    kind = "f32"

    def __init__(self, w: np.ndarray) -> None:
        assert w.dtype == np.float32 and w.ndim == 2, (w.dtype, w.shape)
        self.w = np.ascontiguousarray(w)
        self.rows, self.cols = w.shape

    def __call__(self, x: np.ndarray) -> np.ndarray:  # [n, cols] -> [n, rows]
        return x @ self.w.T

    def dense(self) -> np.ndarray:
        return self.w

    def row_slice(self, start: int, stop: int) -> Dense:  # a view: no copy
        return Dense(self.w[start:stop])


class Quantized:
    """y = x Wᵀ with W stored as Q4_K rows: q u8[rows, cols // 256 * 144]."""

    kind = "q4_k"

    def __init__(self, q: np.ndarray, cols: int) -> None:
        self._q4k = _q4k()
        self.q = q
        self.rows, self.cols = q.shape[0], cols

    @classmethod
    def of(cls, w: np.ndarray) -> Quantized:
        return cls(_q4k().quantize(w), w.shape[1])

    def __call__(self, x: np.ndarray) -> np.ndarray:  # [n, cols] -> [n, rows]
        return np.asarray(self._q4k.matmul(self.q, x), dtype=np.float32)

    def dense(self) -> np.ndarray:
        return np.asarray(self._q4k.dequantize(self.q), dtype=np.float32)

    def row_slice(self, start: int, stop: int) -> Quantized:  # Q4_K quantizes rows independently: a view
        return Quantized(self.q[start:stop], self.cols)


class ColumnsPermuted:
    """y = x Wᵀ for a weight stored with its columns permuted: stored[:, j] = W[:, col_perm[j]], so
    x Wᵀ = x[:, col_perm] storedᵀ (a GGUF's out_proj, whose value-head columns llama.cpp reorders)."""

    def __init__(self, inner: Dense | Quantized, col_perm: np.ndarray) -> None:
        assert col_perm.shape == (inner.cols,), (col_perm.shape, inner.cols)
        self.inner, self.col_perm = inner, col_perm
        self.kind = inner.kind
        self.rows, self.cols = inner.rows, inner.cols

    def __call__(self, x: np.ndarray) -> np.ndarray:  # [n, cols] -> [n, rows]
        return self.inner(np.ascontiguousarray(x[:, self.col_perm]))

    def dense(self) -> np.ndarray:
        return self.inner.dense()[:, np.argsort(self.col_perm)]

    def row_slice(self, start: int, stop: int) -> ColumnsPermuted:
        return ColumnsPermuted(self.inner.row_slice(start, stop), self.col_perm)


class Rows:
    """Weights of one input stacked by rows whose parts are stored differently (a GGUF that quantized some
    and not others): one call per part, outputs side by side."""

    def __init__(self, parts: list[Any]) -> None:
        self.parts = parts
        self.kind = "+".join(sorted({p.kind for p in parts}))
        self.rows, self.cols = sum(p.rows for p in parts), parts[0].cols

    def __call__(self, x: np.ndarray) -> np.ndarray:  # [n, cols] -> [n, rows]
        return np.concatenate([p(x) for p in self.parts], axis=1)

    def dense(self) -> np.ndarray:
        return np.concatenate([p.dense() for p in self.parts])


Linear = Dense | Quantized | ColumnsPermuted | Rows


@dataclass(frozen=True, slots=True)
class StoredQ4K:
    """A Q4_K weight as a GGUF stores it: q u8[rows, cols // 256 * 144]; with `col_perm`, the stored columns
    are the model's columns in that order (stored[:, j] = W[:, col_perm[j]])."""

    q: np.ndarray
    cols: int
    col_perm: np.ndarray | None = None


@dataclass(slots=True)
class GDNWeights:  # Qwen3_5GatedDeltaNet
    in_proj_qkv: Linear  # [2 Hk dk + Hv dv, hidden]
    in_proj_z: Linear  # [Hv dv, hidden]
    in_proj_b: Linear  # [Hv, hidden]
    in_proj_a: Linear  # [Hv, hidden]
    conv1d: np.ndarray  # f32[conv_dim, K] (HF's [conv_dim, 1, K] squeezed), column-major
    dt_bias: np.ndarray  # f32[Hv]
    A_log: np.ndarray  # f32[Hv]
    norm: np.ndarray  # f32[dv], gated RMSNorm weight used as is
    out_proj: Linear  # [hidden, Hv dv]
    in_proj: (
        Linear  # the four in_proj_* stacked by rows (qkv | z | b | a): one matmul; the fields above are views
    )


@dataclass(slots=True)
class AttentionWeights:  # Qwen3_5Attention
    q_proj: Linear  # [n_heads * head_dim * 2, hidden]: per head, query then gate
    k_proj: Linear  # [n_kv_heads * head_dim, hidden]
    v_proj: Linear  # [n_kv_heads * head_dim, hidden]
    o_proj: Linear  # [hidden, n_heads * head_dim]
    q_norm: np.ndarray  # f32[head_dim], (1 + w) RMSNorm
    k_norm: np.ndarray  # f32[head_dim]
    qkv_proj: Linear  # q_proj | k_proj | v_proj stacked by rows: one matmul; the fields above are views
    q_scale: np.ndarray = field(init=False)  # 1 + q_norm, the factor the RMSNorm multiplies by, made once
    k_scale: np.ndarray = field(init=False)  # 1 + k_norm

    def __post_init__(self) -> None:
        self.q_scale, self.k_scale = np.float32(1) + self.q_norm, np.float32(1) + self.k_norm


@dataclass(slots=True)
class MLPWeights:  # Qwen3_5MLP
    gate_proj: Linear  # [intermediate, hidden]
    up_proj: Linear  # [intermediate, hidden]
    down_proj: Linear  # [hidden, intermediate]
    gate_up_proj: Linear  # gate_proj | up_proj stacked by rows: one matmul; the fields above are views


@dataclass(slots=True)
class LayerWeights:  # Qwen3_5DecoderLayer
    input_layernorm: np.ndarray  # f32[hidden]
    post_attention_layernorm: np.ndarray  # f32[hidden]
    mixer: GDNWeights | AttentionWeights
    mlp: MLPWeights
    input_scale: np.ndarray = field(init=False)  # 1 + input_layernorm, made once
    post_attention_scale: np.ndarray = field(init=False)  # 1 + post_attention_layernorm

    def __post_init__(self) -> None:
        self.input_scale = np.float32(1) + self.input_layernorm
        self.post_attention_scale = np.float32(1) + self.post_attention_layernorm


@dataclass(slots=True)
class Weights:
    embed_tokens: np.ndarray  # f32[vocab, hidden]
    layers: list[LayerWeights]
    norm: np.ndarray  # f32[hidden]
    lm_head: Linear  # [vocab, hidden]
    norm_scale: np.ndarray = field(init=False)  # 1 + norm, made once

    def __post_init__(self) -> None:
        self.norm_scale = np.float32(1) + self.norm


def expected_shapes(c: Config) -> dict[str, tuple[int, ...]]:
    """Every tensor name (without prefix) the model needs, with its shape."""
    h, kd = c.hidden_size, c.linear_num_key_heads * c.linear_key_head_dim
    shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (c.vocab_size, h), "norm.weight": (h,)}
    for i, kind in enumerate(c.layer_types):
        p = f"layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "mlp.gate_proj.weight": (c.intermediate_size, h),
            p + "mlp.up_proj.weight": (c.intermediate_size, h),
            p + "mlp.down_proj.weight": (h, c.intermediate_size),
        }
        if kind == "linear_attention":
            a, hv = p + "linear_attn.", c.linear_num_value_heads
            shapes |= {
                a + "in_proj_qkv.weight": (2 * kd + c.value_dim, h),
                a + "in_proj_z.weight": (c.value_dim, h),
                a + "in_proj_b.weight": (hv, h),
                a + "in_proj_a.weight": (hv, h),
                a + "conv1d.weight": (c.conv_dim, 1, c.linear_conv_kernel_dim),
                a + "dt_bias": (hv,),
                a + "A_log": (hv,),
                a + "norm.weight": (c.linear_value_head_dim,),
                a + "out_proj.weight": (h, c.value_dim),
            }
        else:
            a, hd = p + "self_attn.", c.head_dim
            shapes |= {
                a + "q_proj.weight": (c.num_attention_heads * hd * 2, h),
                a + "k_proj.weight": (c.num_key_value_heads * hd, h),
                a + "v_proj.weight": (c.num_key_value_heads * hd, h),
                a + "o_proj.weight": (h, c.num_attention_heads * hd),
                a + "q_norm.weight": (hd,),
                a + "k_norm.weight": (hd,),
            }
    return shapes


def read_tensors(path: Path, config: Config) -> dict[str, np.ndarray]:
    """All tensors of the checkpoint at `path` (dir or file), names stripped of their prefix, as float32."""
    from safetensors import SafetensorError, safe_open

    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files:
        raise WeightsError(f"{path}: no *.safetensors file")
    expected = expected_shapes(config)
    if not config.tie_word_embeddings:  # tied: a stored lm_head is ignored (as HF does), whatever its shape
        expected["lm_head.weight"] = (config.vocab_size, config.hidden_size)
    tensors: dict[str, np.ndarray] = {}
    for file in files:
        if file.exists() and not file.is_file():  # a FIFO would block the open
            raise WeightsError(f"{file}: not a regular file")
        try:
            with safe_open(str(file), framework="numpy") as f:
                for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    name = _strip(key)
                    if name is None:
                        continue
                    if not name:
                        raise WeightsError(f"{file}: tensor {key!r} has none of the prefixes {PREFIXES}")
                    if name in tensors:
                        raise WeightsError(f"{file}: tensor {key!r} appears twice in the checkpoint")
                    if name not in expected and name != "lm_head.weight":
                        raise WeightsError(
                            f"{file}: unexpected tensor {key!r} (not part of this config's model)"
                        )
                    dtype = f.get_slice(key).get_dtype()
                    if dtype not in DTYPES:
                        raise WeightsError(
                            f"{file}: tensor {key!r} has dtype {dtype}; supported: {sorted(DTYPES)}"
                        )
                    shape = tuple(f.get_slice(key).get_shape())
                    if (
                        name in expected and shape != expected[name]
                    ):  # before a byte is read: a huge one never is
                        raise WeightsError(
                            f"{file}: tensor {name!r} has shape {list(shape)}, expected {list(expected[name])}"
                        )
                    tensors[name] = np.ascontiguousarray(f.get_tensor(key), dtype=np.float32)
        except SafetensorError as e:
            raise WeightsError(f"{file}: not a readable safetensors file ({e})") from None
        except OSError as e:
            raise WeightsError(f"{file}: cannot read ({e})") from None
    return tensors


def load_weights(path: Path, config: Config, weights: str = "q4_k") -> Weights:
    if weights not in ("q4_k", "f32"):
        raise WeightsError(f"weights={weights!r}: expected 'q4_k' or 'f32'")
    tensors = read_tensors(path, config)
    expected = expected_shapes(config)
    if not config.tie_word_embeddings:
        expected["lm_head.weight"] = (config.vocab_size, config.hidden_size)
    elif "lm_head.weight" in tensors:  # tied: HF ignores a stored lm_head as well
        del tensors["lm_head.weight"]
    for name, shape in expected.items():
        if name not in tensors:
            raise WeightsError(f"{path}: missing tensor {name!r} (expected shape {list(shape)})")
        if not np.isfinite(tensors[name]).all():
            raise WeightsError(f"{path}: tensor {name!r} holds NaN or inf")
    return assemble(tensors, config, weights)


def assemble(t: Mapping[str, np.ndarray | StoredQ4K], c: Config, weights: str) -> Weights:
    """Weights from transformers-named tensors (float32, or Q4_K blocks as a GGUF stored them).

    weights="f32": every projection dense (stored Q4_K dequantized); "q4_k": float projections whose input dim
    is a multiple of 256 quantized, stored Q4_K kept; "stored": float projections dense, stored Q4_K kept."""
    if weights not in ("q4_k", "f32", "stored"):
        raise WeightsError(f"weights={weights!r}: expected 'q4_k', 'f32' or 'stored'")

    def linear(name: str) -> Linear:
        return _linear(t[name], weights)

    def array(name: str) -> np.ndarray:  # norms, conv kernel, A_log, dt_bias, the embedding table
        value = t[name]
        if not isinstance(value, np.ndarray):
            raise WeightsError(f"tensor {name!r} must be float, not Q4_K blocks")
        return value

    def stacked(*names: str) -> tuple[Linear, ...]:
        """One Linear over the rows of all `names` (same input), then a row view per name."""
        parts = [t[n] for n in names]
        floats = [p for p in parts if isinstance(p, np.ndarray)]
        whole: Dense | Quantized
        if len(floats) == len(parts):
            whole = _linear(np.concatenate(floats), weights)  # type: ignore[assignment]
            bounds = np.cumsum([0, *(p.shape[0] for p in floats)])
            return whole, *(whole.row_slice(int(a), int(b)) for a, b in itertools.pairwise(bounds))
        linears = [_linear(p, weights) for p in parts]
        quantized = [x for x in linears if type(x) is Quantized]
        if len(quantized) == len(linears):  # Q4_K rows are independent: one matmul over all
            whole = Quantized(np.concatenate([x.q for x in quantized]), linears[0].cols)
            bounds = np.cumsum([0, *(x.rows for x in quantized)])
            return whole, *(whole.row_slice(int(a), int(b)) for a, b in itertools.pairwise(bounds))
        return Rows(linears), *linears

    layers = []
    for i, kind in enumerate(c.layer_types):
        p = f"layers.{i}."
        mixer: GDNWeights | AttentionWeights
        if kind == "linear_attention":
            a = p + "linear_attn."
            in_proj, qkv, z, b, a_ = stacked(*(a + f"in_proj_{n}.weight" for n in ("qkv", "z", "b", "a")))
            mixer = GDNWeights(
                in_proj_qkv=qkv,
                in_proj_z=z,
                in_proj_b=b,
                in_proj_a=a_,
                # column-major: causal_conv1d multiplies by one tap's column weight[:, j] at a time, a
                # contiguous vector this way (numpy's vector loop; a strided column is ~2x slower at 64 tokens)
                conv1d=np.asfortranarray(array(a + "conv1d.weight")[:, 0, :]),
                dt_bias=array(a + "dt_bias"),
                A_log=array(a + "A_log"),
                norm=array(a + "norm.weight"),
                out_proj=linear(a + "out_proj.weight"),
                in_proj=in_proj,
            )
        else:
            a = p + "self_attn."
            qkv_proj, q, k, v = stacked(a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight")
            mixer = AttentionWeights(
                q_proj=q,
                k_proj=k,
                v_proj=v,
                o_proj=linear(a + "o_proj.weight"),
                q_norm=array(a + "q_norm.weight"),
                k_norm=array(a + "k_norm.weight"),
                qkv_proj=qkv_proj,
            )
        gate_up, gate, up = stacked(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight")
        mlp = MLPWeights(
            gate_proj=gate, up_proj=up, down_proj=linear(p + "mlp.down_proj.weight"), gate_up_proj=gate_up
        )
        layers.append(
            LayerWeights(
                input_layernorm=array(p + "input_layernorm.weight"),
                post_attention_layernorm=array(p + "post_attention_layernorm.weight"),
                mixer=mixer,
                mlp=mlp,
            )
        )
    head = "embed_tokens.weight" if c.tie_word_embeddings else "lm_head.weight"
    return Weights(
        embed_tokens=array("embed_tokens.weight"),
        layers=layers,
        norm=array("norm.weight"),
        lm_head=linear(head),
    )


def dense_state_dict(w: Weights, c: Config) -> dict[str, np.ndarray]:
    """HF-named float32 tensors of `w` as the engine computes with them (Q4_K projections dequantized).

    Lets the oracle run HF transformers on exactly our (dequantized) weights.
    """
    out: dict[str, np.ndarray] = {"model.embed_tokens.weight": w.embed_tokens, "model.norm.weight": w.norm}
    if not c.tie_word_embeddings:
        out["lm_head.weight"] = w.lm_head.dense()
    for i, layer in enumerate(w.layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = layer.input_layernorm
        out[p + "post_attention_layernorm.weight"] = layer.post_attention_layernorm
        for name in ("gate_proj", "up_proj", "down_proj"):
            out[p + f"mlp.{name}.weight"] = getattr(layer.mlp, name).dense()
        m = layer.mixer
        fields: dict[str, Any]
        if isinstance(m, GDNWeights):
            p += "linear_attn."
            fields = {
                f"{n}.weight": getattr(m, n).dense()
                for n in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj")
            }
            fields |= {
                "conv1d.weight": m.conv1d[:, None, :],
                "dt_bias": m.dt_bias,
                "A_log": m.A_log,
                "norm.weight": m.norm,
            }
        else:
            p += "self_attn."
            fields = {f"{n}.weight": getattr(m, n).dense() for n in ("q_proj", "k_proj", "v_proj", "o_proj")}
            fields |= {"q_norm.weight": m.q_norm, "k_norm.weight": m.k_norm}
        out |= {p + k: v for k, v in fields.items()}
    return out


def _linear(w: np.ndarray | StoredQ4K, weights: str) -> Linear:
    if isinstance(w, StoredQ4K):
        if weights == "f32":
            dense = np.asarray(_q4k().dequantize(w.q), dtype=np.float32)
            return Dense(
                dense if w.col_perm is None else np.ascontiguousarray(dense[:, np.argsort(w.col_perm)])
            )
        q = Quantized(w.q, w.cols)
        return q if w.col_perm is None else ColumnsPermuted(q, w.col_perm)
    return Quantized.of(w) if weights == "q4_k" and w.shape[1] % QK_K == 0 else Dense(w)


def _strip(key: str) -> str | None:
    if key == "lm_head.weight":
        return key
    if key.startswith(IGNORED):
        return None
    for prefix in PREFIXES:
        if key.startswith(prefix):
            return key[len(prefix) :]
    return ""  # no known prefix: read_tensors reports it with the file name


def _q4k() -> Any:
    try:
        from reference.q4k import Q4_K
    except ImportError as e:
        raise WeightsError(
            f"weights='q4_k' needs reference.q4k.Q4_K, which cannot be imported ({e})"
        ) from None
    return Q4_K
