"""The second golden checkpoint: a seeded Qwen3.5 text config unlike the tiny model, written here without the engine.

Loaded by file path from tests/test_hf_golden.py and make_hf_golden.py (tests/ is not a package). The tensor names and
shapes follow transformers' Qwen3_5ForCausalLM as read from its modeling file, independently of
reference/weights.py; HF's loader is asked for missing and unexpected keys when the golden data is made, so a
wrong name fails there rather than being silently re-initialised.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

VARIANT_SEED = 7

# Differs from the tiny model in every axis the engine maps: tied embeddings, one key head per value head group
# of 3, dk != dv, conv kernel 3, attention first, MQA, half-rotary at another theta, another eps and chunking.
VARIANT_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3_5ForCausalLM"],
    "model_type": "qwen3_5_text",
    "vocab_size": 256,
    "hidden_size": 128,
    "intermediate_size": 192,
    "num_hidden_layers": 3,
    "layer_types": ["full_attention", "linear_attention", "linear_attention"],
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "linear_conv_kernel_dim": 3,
    "linear_key_head_dim": 32,
    "linear_value_head_dim": 48,
    "linear_num_key_heads": 1,
    "linear_num_value_heads": 3,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 4096,
    "rope_parameters": {"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5},
    "tie_word_embeddings": True,
    "attention_bias": False,
    "dtype": "float32",
}


def shapes(c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """HF tensor name -> shape for a Qwen3_5ForCausalLM text config (lm_head only when untied)."""
    h, inter = c["hidden_size"], c["intermediate_size"]
    hk, hv, dk, dv = (
        c["linear_num_key_heads"],
        c["linear_num_value_heads"],
        c["linear_key_head_dim"],
        c["linear_value_head_dim"],
    )
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    out: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (c["vocab_size"], h),
        "model.norm.weight": (h,),
    }
    if not c["tie_word_embeddings"]:
        out["lm_head.weight"] = (c["vocab_size"], h)
    for i, kind in enumerate(c["layer_types"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = (h,)
        out[p + "post_attention_layernorm.weight"] = (h,)
        out[p + "mlp.gate_proj.weight"] = (inter, h)
        out[p + "mlp.up_proj.weight"] = (inter, h)
        out[p + "mlp.down_proj.weight"] = (h, inter)
        if kind == "linear_attention":
            a, conv = p + "linear_attn.", 2 * hk * dk + hv * dv
            out[a + "in_proj_qkv.weight"] = (conv, h)
            out[a + "in_proj_z.weight"] = (hv * dv, h)
            out[a + "in_proj_b.weight"] = (hv, h)
            out[a + "in_proj_a.weight"] = (hv, h)
            out[a + "conv1d.weight"] = (conv, 1, c["linear_conv_kernel_dim"])
            out[a + "dt_bias"] = (hv,)
            out[a + "A_log"] = (hv,)
            out[a + "norm.weight"] = (dv,)
            out[a + "out_proj.weight"] = (h, hv * dv)
        else:
            a = p + "self_attn."
            out[a + "q_proj.weight"] = (2 * nh * hd, h)  # query and output gate per head
            out[a + "k_proj.weight"] = (nkv * hd, h)
            out[a + "v_proj.weight"] = (nkv * hd, h)
            out[a + "o_proj.weight"] = (h, nh * hd)
            out[a + "q_norm.weight"] = (hd,)
            out[a + "k_norm.weight"] = (hd,)
    return out


def tensors(c: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    """Seeded float32 weights, drawn in sorted-name order, scaled so activations stay O(1) through the stack and the
    GDN decay sits near 0.9 .. 0.999 (the state carries information across the whole prompt)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in sorted(shapes(c).items()):
        if name.endswith("A_log"):
            value = np.log(rng.uniform(0.005, 0.1, shape))
        elif name.endswith("dt_bias"):
            value = rng.normal(0.0, 0.5, shape)
        elif name.endswith("linear_attn.norm.weight"):  # gated RMSNorm: weight used as is
            value = 1.0 + rng.normal(0.0, 0.1, shape)
        elif len(shape) == 1:  # (1 + w) RMSNorms
            value = rng.normal(0.0, 0.1, shape)
        elif name.endswith("conv1d.weight"):
            value = rng.normal(0.0, shape[-1] ** -0.5, shape)
        elif name == "model.embed_tokens.weight":  # tied: it is the lm_head too
            value = rng.normal(0.0, shape[1] ** -0.5 if c["tie_word_embeddings"] else 1.0, shape)
        else:
            value = rng.normal(0.0, shape[1] ** -0.5, shape)
        out[name] = value.astype(np.float32)
    return out


def write_checkpoint(directory: Path, c: dict[str, Any] = VARIANT_CONFIG, seed: int = VARIANT_SEED) -> Path:
    """config.json + model.safetensors (float16 storage, one metadata key, so the bytes are reproducible)."""
    from safetensors.numpy import save_file

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(c, indent=2) + "\n")
    weights = {k: v.astype(np.float16) for k, v in tensors(c, seed).items()}
    save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory
