"""The embedded default model: a deterministic tiny Qwen3.5-style checkpoint made from a seed.

HF layout (config.json + model.safetensors, float16 storage, ~4 MB): hidden 256, 4 layers (3 Gated DeltaNet +
1 gated attention), vocab 512. Every 2-D projection has an input dim that is a multiple of 256, so all of them
quantize to Q4_K. Unlike HF's init (A ~ U(0.01, 16), which forgets within a token) A_log is drawn so the
per-token decay exp(g) sits around 0.9 .. 0.9995: the recurrent state carries information across hundreds of
tokens, and a state bug shows in the logits. Written once per (seed, version) into the cache dir, atomically.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from reference.config import Config
from reference.weights import expected_shapes

TINY_VERSION = 1  # bump whenever the generator below changes: the cache dir name carries it

TINY_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3_5ForCausalLM"],
    "model_type": "qwen3_5_text",
    "vocab_size": 512,
    "hidden_size": 256,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 16384,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    "tie_word_embeddings": False,
    "attention_bias": False,
    "dtype": "float32",
}


def cache_dir() -> Path:
    root = os.environ.get("FALSIFY_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "falsify"


def tiny_model(seed: int = 0) -> Path:
    """Directory of the tiny model for `seed`, generating it on first use."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"tiny_model: seed must be an int >= 0, got {seed!r}")
    target = cache_dir() / f"tiny-{seed}-v{TINY_VERSION}"
    if _complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tiny-{seed}-", dir=target.parent))
    try:
        write_tiny(tmp, seed)
        if target.exists() and not _complete(target):  # a file deleted by hand: rename cannot replace it
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.rename(tmp, target)  # atomic; fails if another process got there first
        except OSError:
            if not _complete(target):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _complete(directory: Path) -> bool:
    return (directory / "config.json").is_file() and (directory / "model.safetensors").is_file()


def write_tiny(directory: Path, seed: int, raw_config: dict[str, Any] | None = None) -> None:
    """Write config.json + model.safetensors for `seed` (TINY_CONFIG unless another HF config dict is given)."""
    from safetensors.numpy import save_file

    raw_config = TINY_CONFIG if raw_config is None else raw_config
    config = Config.from_dict(raw_config, source="raw_config")
    (directory / "config.json").write_text(json.dumps(raw_config, indent=2) + "\n")
    tensors = tiny_tensors(config, seed)
    # one metadata key only: safetensors writes metadata in hash order, and the file's bytes must be reproducible
    save_file(
        {k: v.astype(np.float16) for k, v in tensors.items()},
        str(directory / "model.safetensors"),
        metadata={"format": "pt"},
    )


def tiny_tensors(config: Config, seed: int) -> dict[str, np.ndarray]:
    """HF-named float32 tensors; projections ~ N(0, 1/fan_in) so activations stay O(1) through the stack."""
    rng = np.random.default_rng(seed)
    shapes = expected_shapes(config)
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, config.hidden_size)
    out: dict[str, np.ndarray] = {}
    for name in sorted(shapes):  # sorted: the draw order must not depend on dict order
        shape = shapes[name]
        if name.endswith("A_log"):  # A ∈ [0.002, 0.05]: decay exp(−A·softplus(·)) ≈ 0.9 .. 0.9995
            value = np.log(rng.uniform(0.002, 0.05, shape))
        elif name.endswith("dt_bias"):
            value = rng.normal(0.0, 0.5, shape)
        elif name.endswith("linear_attn.norm.weight"):  # gated norm: weight used as is
            value = 1.0 + rng.normal(0.0, 0.1, shape)
        elif len(shape) == 1:  # (1 + w) RMSNorms
            value = rng.normal(0.0, 0.1, shape)
        elif name.endswith("conv1d.weight"):
            value = rng.normal(0.0, shape[-1] ** -0.5, shape)
        elif name == "embed_tokens.weight":  # tied, it is the lm_head too: keep logits O(1)
            value = rng.normal(0.0, shape[1] ** -0.5 if config.tie_word_embeddings else 1.0, shape)
        else:
            value = rng.normal(0.0, shape[1] ** -0.5, shape)
        key = name if name == "lm_head.weight" else "model." + name
        out[key] = value.astype(np.float32)
    return out
