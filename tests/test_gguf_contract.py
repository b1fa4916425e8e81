"""Falsifiers of contract gguf-qwen35-v1 (contracts/gguf-qwen35-v1.yaml): the engine's GGUF export of the tiny
checkpoint against llama.cpp's converter (the committed record tests/data/gguf/tiny-0-llamacpp-f32.json), against
the shapes config.json states, and read back.

Everything is read with gguf-py (llama.cpp's own Python package), not with the engine's reader, except the model
FALSIFY-GGUF-001 loads back through the engine (`load_checkpoint`). The expected metadata is computed here from
config.json; every formula lives in the YAML.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import falsify

gguf = pytest.importorskip("gguf")

GOLDEN = Path(__file__).parent / "data" / "gguf" / "tiny-0-llamacpp-f32.json"
PROMPT = np.random.default_rng(7).integers(0, 512, 150)  # odd length: two chunks of 64 and one of 22
QK_K, BLOCK_BYTES = 256, 2 + 2 + 12 + 128  # block_q4_K: d, dmin, scales, qs


@pytest.fixture(scope="module")
def exports(engine: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("gguf")
    ckpt = Path(engine.tiny_model_path())
    return {w: Path(engine.export_gguf(ckpt, out / f"tiny-0-{w}.gguf", weights=w)) for w in ("f32", "q4_k")}


def fields(path: Path) -> dict[str, Any]:
    reader = gguf.GGUFReader(path)
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


@pytest.mark.falsifies("FALSIFY-GGUF-001")
def test_the_f32_export_reads_back_to_the_checkpoints_model(engine: Any, exports: dict[str, Path]) -> None:
    ckpt = engine.load_checkpoint(Path(engine.tiny_model_path()), weights="f32")
    back = engine.load_checkpoint(exports["f32"], weights="f32")
    a = np.asarray(ckpt.forward(PROMPT, ckpt.new_state()), np.float64)
    b = np.asarray(back.forward(PROMPT, back.new_state()), np.float64)
    falsify.check("FALSIFY-GGUF-001", max_abs_diff=float(np.abs(a - b).max()), tokens=len(PROMPT))


@pytest.mark.falsifies("FALSIFY-GGUF-002")
def test_the_f32_export_is_llama_cpps_converters_file(engine: Any, exports: dict[str, Path]) -> None:
    golden = json.loads(GOLDEN.read_text())
    ckpt = hashlib.sha256((Path(engine.tiny_model_path()) / "model.safetensors").read_bytes()).hexdigest()
    assert ckpt in golden["provenance"]["checkpoint"], (
        "the tiny checkpoint changed: re-record the golden file"
    )
    reader = gguf.GGUFReader(exports["f32"])
    ours = {t.name: t for t in reader.tensors}
    meta = fields(exports["f32"])
    shape_type = [
        name
        for name, g in golden["tensors"].items()
        if name not in ours
        or [int(d) for d in ours[name].shape] != g["shape"]
        or ours[name].tensor_type.name != g["type"]
    ]
    metadata = [
        key
        for key, value in golden["metadata"].items()
        if key not in golden["metadata_not_compared"] and _plain(meta.get(key)) != value
    ]
    differ, ssm_a_err = [], 0.0
    for name, t in ours.items():
        data = np.asarray(t.data, dtype="<f4").reshape(-1)
        g = golden["tensors"].get(name)
        if g is None or hashlib.sha256(data.tobytes()).hexdigest() == g["sha256"]:
            continue
        if name.endswith("ssm_a") and g.get("values") is not None:
            want = np.asarray(g["values"], np.float32)
            ssm_a_err = max(ssm_a_err, float(np.max(np.abs(data - want) / np.abs(want))))
        else:
            differ.append(name)
    falsify.check(
        "FALSIFY-GGUF-002",
        names_in_order=[t.name for t in reader.tensors] == list(golden["tensors"]),
        tensors=len(ours),
        shape_type_mismatches=len(shape_type),
        metadata_mismatches=len(metadata),
        bytes_differ=len(differ),
        differing=shape_type + metadata + differ,
        ssm_a_rel_err=ssm_a_err,
    )


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, list) else value


@pytest.mark.falsifies("FALSIFY-GGUF-003")
@pytest.mark.parametrize("weights", ["f32", "q4_k"])
def test_the_metadata_states_the_checkpoints_shapes(
    engine: Any, exports: dict[str, Path], weights: str
) -> None:
    c = json.loads((Path(engine.tiny_model_path()) / "config.json").read_text())
    rope = c.get("rope_parameters") or {}
    a = "qwen35."
    expected = [
        [a + "rope.dimension_count", int(c["head_dim"] * rope.get("partial_rotary_factor", 1.0))],
        [a + "attention.key_length", c["head_dim"]],
        [a + "attention.value_length", c["head_dim"]],
        [a + "attention.layer_norm_rms_epsilon", float(np.float32(c["rms_norm_eps"]))],
        [a + "attention.head_count", c["num_attention_heads"]],
        [a + "attention.head_count_kv", c["num_key_value_heads"]],
        [a + "block_count", c["num_hidden_layers"]],
        [a + "embedding_length", c["hidden_size"]],
        [a + "feed_forward_length", c["intermediate_size"]],
        [a + "ssm.conv_kernel", c["linear_conv_kernel_dim"]],
        [a + "ssm.state_size", c["linear_key_head_dim"]],
        [a + "ssm.group_count", c["linear_num_key_heads"]],
        [a + "ssm.time_step_rank", c["linear_num_value_heads"]],
        [a + "ssm.inner_size", c["linear_num_value_heads"] * c["linear_value_head_dim"]],
        [a + "attention.recurrent_layers", [t == "linear_attention" for t in c["layer_types"]]],
    ]
    meta = fields(exports[weights])
    written = [[key, _plain(meta.get(key))] for key, _ in expected]
    falsify.check("FALSIFY-GGUF-003", written=written, expected=expected, weights=weights)


@pytest.mark.falsifies("FALSIFY-GGUF-004")
def test_q4k_tensors_hold_the_f32_exports_tensors_in_its_layout(exports: dict[str, Path]) -> None:
    dense = {t.name: t for t in gguf.GGUFReader(exports["f32"]).tensors}
    quantized = [
        t for t in gguf.GGUFReader(exports["q4_k"]).tensors if t.tensor_type == gguf.GGMLQuantizationType.Q4_K
    ]
    mismatches, worst = [], 0.0
    for t in quantized:
        ref = dense.get(t.name)
        # gguf-py's shape is ggml's ne (innermost first); the f32 tensor's numpy data is [rows, cols]
        want = None if ref is None else np.asarray(ref.data, np.float32)
        rows_cols = [int(d) for d in reversed(t.shape)]
        if want is None or list(want.shape) != rows_cols or int(t.n_bytes) != want.size // QK_K * BLOCK_BYTES:
            mismatches.append(t.name)
            continue
        got = gguf.quants.dequantize(np.asarray(t.data), gguf.GGMLQuantizationType.Q4_K).reshape(want.shape)
        rmse = float(
            np.sqrt(np.mean((got.astype(np.float64) - want) ** 2))
            / np.sqrt(np.mean(want.astype(np.float64) ** 2))
        )
        worst = max(worst, rmse)
    falsify.check(
        "FALSIFY-GGUF-004",
        q4k_tensors=len(quantized),
        layout_mismatches=len(mismatches),
        worst_rel_rmse=worst,
    )


Q4K_PROMPT = np.random.default_rng(5).integers(0, 512, 75)  # a chunk of 64 and one of 11


@pytest.fixture(scope="module")
def checkpoint_q4k_logits(engine: Any) -> np.ndarray:
    """The checkpoint's logits over Q4K_PROMPT, its projections quantized to Q4_K at load (once a module)."""
    ref = engine.load_checkpoint(Path(engine.tiny_model_path()), weights="q4_k")
    return np.asarray(ref.forward(Q4K_PROMPT, ref.new_state()), np.float64)


@pytest.mark.falsifies("FALSIFY-GGUF-005")
@pytest.mark.parametrize("weights", ["stored", "f32"])
def test_the_q4k_export_reads_back_to_the_checkpoints_q4k_model(
    engine: Any, exports: dict[str, Path], checkpoint_q4k_logits: np.ndarray, weights: str
) -> None:
    config = json.loads((Path(engine.tiny_model_path()) / "config.json").read_text())
    back = engine.load_checkpoint(exports["q4_k"], weights=weights)
    got = np.asarray(back.forward(Q4K_PROMPT, back.new_state()), np.float64)
    n_red = max(  # hf-golden-v1's N
        config["hidden_size"],
        config["intermediate_size"],
        config["linear_num_value_heads"] * config["linear_value_head_dim"],
        config["num_attention_heads"] * config["head_dim"],
        len(Q4K_PROMPT),
    )
    falsify.check(
        "FALSIFY-GGUF-005",
        max_abs_diff=float(np.abs(got - checkpoint_q4k_logits).max()),
        logit_scale=float(np.abs(checkpoint_q4k_logits).max()),
        n_red=n_red,
        n_layers=int(config["num_hidden_layers"]),
        tokens=len(Q4K_PROMPT),
        weights=weights,
    )
