"""Config and weights loading: every bad checkpoint gives a one-line named error naming the key or tensor."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from reference.config import Config, ConfigError
from reference.model import load_model
from reference.tiny import TINY_CONFIG, tiny_model
from reference.weights import WeightsError


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    """A writable copy of the tiny checkpoint."""
    target = tmp_path / "ckpt"
    shutil.copytree(tiny_model(0), target)
    return target


def edit_tensors(path: Path, change) -> None:
    tensors = load_file(str(path / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(path / "model.safetensors"))


def edit_config(path: Path, **changes) -> None:
    raw = json.loads((path / "config.json").read_text())
    raw.update(changes)
    (path / "config.json").write_text(json.dumps(raw))


def test_tiny_model_is_small_deterministic_and_cached(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FALSIFY_CACHE", str(tmp_path))
    path = tiny_model(0)
    assert path.parent == tmp_path and (path / "config.json").is_file()
    assert (path / "model.safetensors").stat().st_size < 5_000_000
    first = (path / "model.safetensors").read_bytes()
    assert tiny_model(0) == path  # reused
    shutil.rmtree(path)
    assert tiny_model(0) == path and (path / "model.safetensors").read_bytes() == first
    assert (tiny_model(1) / "model.safetensors").read_bytes() != first
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left behind


def test_tiny_config_shape() -> None:
    c = Config.from_file(tiny_model(0) / "config.json")
    assert c.layer_types.count("linear_attention") == 3 and c.layer_types.count("full_attention") == 1
    assert 64 <= c.hidden_size <= 256 and 256 <= c.vocab_size <= 512
    assert c.linear_num_value_heads > c.linear_num_key_heads  # value heads share key heads
    assert c.rotary_dim < c.head_dim  # partial RoPE


@pytest.mark.parametrize("prefix", ["model.", "model.language_model."])
def test_both_prefixes_load_the_same_model(ckpt: Path, prefix: str) -> None:
    def rename(t: dict) -> None:
        for key in [k for k in t if k.startswith("model.")]:
            t[prefix + key[len("model.") :]] = t.pop(key)

    edit_tensors(ckpt, rename)
    model, ref = load_model(ckpt, "f32"), load_model(tiny_model(0), "f32")
    toks = np.arange(20)
    assert np.array_equal(model.forward(toks, model.new_state()), ref.forward(toks, ref.new_state()))


def _nan_in_norm(t: dict) -> None:
    t["model.norm.weight"] = t["model.norm.weight"].copy()
    t["model.norm.weight"][3] = np.nan


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda t: t.pop("model.layers.2.linear_attn.A_log"),
            r"missing tensor 'layers\.2\.linear_attn\.A_log'",
        ),
        (
            lambda t: t.update({"model.layers.0.self_attn.q_proj.weight": np.zeros((2, 2), np.float32)}),
            r"unexpected tensor 'model\.layers\.0\.self_attn\.q_proj\.weight'",
        ),
        (
            lambda t: t.update({"transformer.wte.weight": np.zeros((2, 2), np.float32)}),
            r"'transformer\.wte\.weight' has none of the prefixes",
        ),
        (
            lambda t: t.update({"model.layers.1.mlp.up_proj.weight": np.zeros((256, 128), np.float16)}),
            r"'layers\.1\.mlp\.up_proj\.weight' has shape \[256, 128\], expected \[256, 256\]",
        ),
        (_nan_in_norm, r"'norm\.weight' holds NaN"),
        (
            lambda t: t.update({"model.norm.weight": t["model.norm.weight"].astype(np.int32)}),
            r"'model\.norm\.weight' has dtype I32",
        ),
    ],
    ids=["missing", "extra", "unknown-prefix", "misshapen", "non-finite", "unsupported-dtype"],
)
def test_tensor_errors(ckpt: Path, change, message: str) -> None:
    edit_tensors(ckpt, change)
    with pytest.raises(WeightsError, match=message):
        load_model(ckpt, "f32")


def test_truncated_file(ckpt: Path) -> None:
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError, match=r"model\.safetensors: not a readable safetensors file"):
        load_model(ckpt, "f32")


def test_no_weights_file(ckpt: Path) -> None:
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(WeightsError, match=r"no \*\.safetensors file"):
        load_model(ckpt, "f32")


def test_unknown_weights_kind(ckpt: Path) -> None:
    with pytest.raises(WeightsError, match="weights='q8_0'"):
        load_model(ckpt, "q8_0")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_size": None}, "missing key 'hidden_size'"),
        ({"hidden_size": "256"}, "key 'hidden_size' is '256', expected int"),
        ({"num_hidden_layers": 0}, "key 'num_hidden_layers' is 0, expected > 0"),
        ({"hidden_act": "gelu"}, "key 'hidden_act' is 'gelu'"),
        ({"model_type": "llama"}, "key 'model_type' is 'llama'"),
        (
            {"layer_types": ["linear_attention"] * 3},
            "key 'layer_types' must be a list of num_hidden_layers=4",
        ),
        ({"layer_types": ["linear_attention"] * 3 + ["sliding_attention"]}, r"key 'layer_types\[3\]'"),
        ({"num_key_value_heads": 3}, "not a multiple of num_key_value_heads"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6}}, "rope_type' is 'yarn'"),
        ({"rope_parameters": {"rope_type": "default", "rope_theta": -1}}, "key 'rope_theta' is -1"),
        ({"attention_bias": True}, "attention_bias"),
    ],
)
def test_config_errors(ckpt: Path, change: dict, message: str) -> None:
    edit_config(ckpt, **change)
    with pytest.raises(ConfigError, match=message):
        load_model(ckpt, "f32")


def test_config_not_json(ckpt: Path) -> None:
    (ckpt / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"config\.json: not readable JSON"):
        load_model(ckpt, "f32")


def test_multimodal_config_wraps_text_config() -> None:
    outer = {
        "model_type": "qwen3_5",
        "tie_word_embeddings": False,
        "text_config": {k: v for k, v in TINY_CONFIG.items() if k != "model_type"},
    }
    assert Config.from_dict(outer) == Config.from_dict(TINY_CONFIG)


def test_rope_theta_at_top_level_and_default_layer_types() -> None:
    raw = {k: v for k, v in TINY_CONFIG.items() if k not in ("rope_parameters", "layer_types")}
    c = Config.from_dict({**raw, "rope_theta": 5e5, "partial_rotary_factor": 0.5})
    assert c.rope_theta == 5e5 and c.rotary_dim == 32
    assert c.layer_types == ("linear_attention",) * 3 + ("full_attention",)  # full_attention_interval 4
