"""The model's hyper-parameters, read from a Hugging Face `config.json` (Qwen3_5TextConfig).

Follows transformers' `Qwen3_5TextConfig` field names and defaults (models/qwen3_5/configuration_qwen3_5.py). A
multimodal `Qwen3_5Config` is accepted through its `text_config`. Anything the engine cannot run raises
ConfigError naming the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LAYER_TYPES = ("linear_attention", "full_attention")
DEFAULT_CHUNK_SIZE = 64  # tokens per forward step; HF's torch_chunk_gated_delta_rule chunk is 64 as well
MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KiB


class ConfigError(ValueError):
    """A config.json the engine cannot run; the message names the file and key."""


def _distinct(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are distinct: readers disagree on a repeated key (Python keeps the last)."""
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ValueError("a key appears twice in one object")
    return value


@dataclass(frozen=True, slots=True)
class Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    linear_conv_kernel_dim: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    layer_types: tuple[str, ...]
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.25
    max_position_embeddings: int = 32768
    tie_word_embeddings: bool = False
    chunk_size: int = DEFAULT_CHUNK_SIZE
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def gdn_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == "linear_attention")

    @property
    def attn_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == "full_attention")

    @property
    def conv_dim(self) -> int:  # q | k | v channels of the GDN depthwise conv
        return 2 * self.linear_num_key_heads * self.linear_key_head_dim + self.value_dim

    @property
    def value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @classmethod
    def from_file(cls, path: str | Path) -> Config:
        path = Path(path)
        if path.exists() and not path.is_file():  # a FIFO would block the read, /dev/zero never end it
            raise ConfigError(f"{path}: not a regular file")
        try:
            with path.open("rb") as f:
                data = f.read(MAX_CONFIG_BYTES + 1)
        except FileNotFoundError:
            raise ConfigError(f"{path}: no config.json") from None
        except OSError as e:
            raise ConfigError(f"{path}: not readable JSON ({e})") from None
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: over {MAX_CONFIG_BYTES} bytes; not a config.json")
        try:
            raw = json.loads(data.decode(), object_pairs_hook=_distinct)
        except (
            ValueError,
            RecursionError,
        ) as e:  # UnicodeDecodeError, JSONDecodeError, ints past 4,300 digits
            raise ConfigError(f"{path}: not readable JSON ({e})") from None
        return cls.from_dict(raw, source=str(path))

    @classmethod
    def from_dict(cls, raw: Any, source: str = "config") -> Config:
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: top level is {type(raw).__name__}, expected an object")
        if isinstance(
            raw.get("text_config"), dict
        ):  # Qwen3_5Config (multimodal) wraps the text model's config
            raw = {"tie_word_embeddings": raw.get("tie_word_embeddings", False), **raw["text_config"]}
        return _parse(raw, source)


def _parse(raw: dict[str, Any], source: str) -> Config:
    def get(key: str, kind: type, default: Any = None, *, positive: bool = True) -> Any:
        value: Any = raw.get(key, default)
        if value is None:
            raise ConfigError(f"{source}: missing key {key!r}")
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        well_typed = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not well_typed:
            raise ConfigError(f"{source}: key {key!r} is {value!r}, expected {kind.__name__}")
        if positive and kind in (int, float) and not value > 0:
            raise ConfigError(f"{source}: key {key!r} is {value!r}, expected > 0")
        return value

    model_type = raw.get("model_type", "qwen3_5_text")
    if model_type not in ("qwen3_5_text", "qwen3_5"):
        raise ConfigError(f"{source}: key 'model_type' is {model_type!r}, expected 'qwen3_5_text'")
    if raw.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{source}: key 'hidden_act' is {raw['hidden_act']!r}; only 'silu' is supported")
    if raw.get("attention_bias", False):
        raise ConfigError(
            f"{source}: key 'attention_bias' is true; biased attention projections are not supported"
        )

    hidden = get("hidden_size", int)
    n_heads = get("num_attention_heads", int)
    n_layers = get("num_hidden_layers", int)
    kw: dict[str, Any] = dict(
        vocab_size=get("vocab_size", int),
        hidden_size=hidden,
        intermediate_size=get("intermediate_size", int),
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=get("num_key_value_heads", int),
        head_dim=get("head_dim", int, hidden // n_heads),
        linear_conv_kernel_dim=get("linear_conv_kernel_dim", int, 4),
        linear_key_head_dim=get("linear_key_head_dim", int, 128),
        linear_value_head_dim=get("linear_value_head_dim", int, 128),
        linear_num_key_heads=get("linear_num_key_heads", int, 16),
        linear_num_value_heads=get("linear_num_value_heads", int, 32),
        rms_norm_eps=get("rms_norm_eps", float, 1e-6),
        max_position_embeddings=get("max_position_embeddings", int, 32768),
        tie_word_embeddings=get("tie_word_embeddings", bool, False, positive=False),
        chunk_size=get("chunk_size", int, DEFAULT_CHUNK_SIZE),
    )

    # transformers >= 5 nests rope settings in rope_parameters; older configs keep rope_theta at the top level
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        raise ConfigError(f"{source}: key 'rope_parameters' is {rope!r}, expected an object")
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise ConfigError(
            f"{source}: key 'rope_parameters.rope_type' is {rope_type!r}; only 'default' is supported"
        )
    if rope.get("mrope_interleaved"):
        raise ConfigError(f"{source}: key 'rope_parameters.mrope_interleaved' is set; not supported")
    theta = rope.get("rope_theta", raw.get("rope_theta", 10000.0))
    factor = rope.get("partial_rotary_factor", raw.get("partial_rotary_factor", 0.25))
    for key, value in (("rope_theta", theta), ("partial_rotary_factor", factor)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ConfigError(f"{source}: key {key!r} is {value!r}, expected a number > 0")
    if factor > 1:
        raise ConfigError(f"{source}: key 'partial_rotary_factor' is {factor!r}, expected <= 1")
    kw["rope_theta"], kw["partial_rotary_factor"] = float(theta), float(factor)

    layer_types = raw.get("layer_types")
    if layer_types is None:  # same default as Qwen3_5TextConfig.__post_init__
        interval = get("full_attention_interval", int, 4)
        layer_types = [
            "linear_attention" if (i + 1) % interval else "full_attention" for i in range(n_layers)
        ]
    if not isinstance(layer_types, list) or len(layer_types) != n_layers:
        raise ConfigError(
            f"{source}: key 'layer_types' must be a list of num_hidden_layers={n_layers} entries"
        )
    for i, t in enumerate(layer_types):
        if t not in LAYER_TYPES:
            raise ConfigError(f"{source}: key 'layer_types[{i}]' is {t!r}, expected one of {LAYER_TYPES}")
    kw["layer_types"] = tuple(layer_types)

    if n_heads % kw["num_key_value_heads"]:
        raise ConfigError(f"{source}: num_attention_heads={n_heads} is not a multiple of num_key_value_heads")
    if kw["linear_num_value_heads"] % kw["linear_num_key_heads"]:
        raise ConfigError(f"{source}: linear_num_value_heads is not a multiple of linear_num_key_heads")
    rotary = int(kw["head_dim"] * factor)
    if rotary % 2:
        raise ConfigError(f"{source}: rotary dim head_dim * partial_rotary_factor = {rotary} must be even")
    known = set(kw) | {
        "rope_parameters",
        "rope_scaling",
        "rope_theta",
        "partial_rotary_factor",
        "full_attention_interval",
        "model_type",
        "hidden_act",
        "attention_bias",
    }
    return Config(**kw, extra={k: v for k, v in raw.items() if k not in known})
