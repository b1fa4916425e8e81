"""Gated full attention of Qwen3.5 (transformers' Qwen3_5Attention) in numpy, over a paged KV cache.

q_proj gives a query and an output gate per head; q_norm/k_norm are (1 + w) RMSNorms over head_dim; RoPE rotates
only the first head_dim · partial_rotary_factor dims (rotate_half layout); GQA, causal softmax in float32; the
output is multiplied by sigmoid(gate) before o_proj.
"""

from __future__ import annotations

import functools

import numpy as np

from reference.config import Config
from reference.gdn import sigmoid
from reference.state import StreamState
from reference.weights import AttentionWeights


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:  # [..., d], [d] -> [..., d]
    """Qwen3_5RMSNorm: zero-centred weight, x · rsqrt(mean x² + eps) · (1 + w)."""
    return scaled_rms_norm(x, np.float32(1) + weight, eps)


def scaled_rms_norm(x: np.ndarray, scale: np.ndarray, eps: float) -> np.ndarray:  # [..., d], [d] -> [..., d]
    """x · rsqrt(mean x² + eps) · scale: rms_norm with its 1 + w made once, with the weights (reference/weights.py)."""
    # np.add.reduce is what .sum() and .mean() call, without their Python frames (60,000 calls a gate run)
    mean_sq = np.add.reduce(x * x, -1, keepdims=True) / np.float32(x.shape[-1])
    return x / np.sqrt(mean_sq + np.float32(eps)) * scale


@functools.cache
def inverse_frequencies(rotary_dim: int, theta: float) -> np.ndarray:  # -> [rotary_dim / 2], read-only
    """1 / theta^(2i / rotary_dim), float32 as HF computes it: made once per (rotary_dim, theta), not per call."""
    inv_freq = np.float32(1) / np.float32(theta) ** (
        np.arange(0, rotary_dim, 2, dtype=np.float32) / rotary_dim
    )
    inv_freq.flags.writeable = False
    return inv_freq


def rope_cos_sin(positions: np.ndarray, rotary_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin: [T, rotary_dim], frequencies repeated twice (rotate_half layout), float32 as HF computes them."""
    freqs = positions.astype(np.float32)[:, None] * inverse_frequencies(rotary_dim, theta)[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


def apply_rope(
    x: np.ndarray, cos: np.ndarray, sin: np.ndarray
) -> np.ndarray:  # [T, H, hd], [T, r] -> [T, H, hd]
    r = cos.shape[-1]
    rot, rest = x[..., :r], x[..., r:]
    half = r // 2
    rotated = np.concatenate([-rot[..., half:], rot[..., :half]], axis=-1)  # rotate_half
    out = rot * cos[:, None, :] + rotated * sin[:, None, :]
    return np.concatenate([out, rest], axis=-1)


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, start: int) -> np.ndarray:
    """q: [T, nh, hd] at positions start .. start+T-1; k, v: [start+T, nkv, hd] -> [T, nh, hd]."""
    T, nh, hd = q.shape
    nkv = k.shape[1]
    assert k.shape[0] == start + T, (k.shape, start, T)  # the mask below covers only the last T keys
    qg = q.reshape(T, nkv, nh // nkv, hd).transpose(
        1, 2, 0, 3
    )  # [nkv, rep, T, hd]: head h uses kv head h // rep
    scores = (qg @ k.transpose(1, 2, 0)[:, None]) * np.float32(hd**-0.5)  # [nkv, rep, T, S]
    # every query sees the keys before `start`; only the last T keys, this call's own, are masked in part
    visible = np.arange(T)[None, :] <= np.arange(T)[:, None]  # [T, T]
    scores[..., start:] = np.where(visible, scores[..., start:], -np.inf)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    probs = scores / scores.sum(-1, keepdims=True)
    out = probs @ v.transpose(1, 0, 2)[:, None]  # [nkv, rep, T, hd]
    return out.transpose(2, 0, 1, 3).reshape(T, nh, hd)


def gated_attention(
    w: AttentionWeights, c: Config, x: np.ndarray, state: StreamState, slot: int
) -> np.ndarray:
    """One attention mixer over a chunk at positions state.pos ..; writes its K/V into the state's pages.

    x: [T, hidden] -> [T, hidden]; `slot` is this layer's index among the attention layers.
    """
    T, nh, nkv, hd = len(x), c.num_attention_heads, c.num_key_value_heads, c.head_dim
    proj = w.qkv_proj(x)  # [T, nh 2hd | nkv hd | nkv hd]: q_proj, k_proj, v_proj
    k0, v0 = nh * 2 * hd, nh * 2 * hd + nkv * hd
    qg = proj[:, :k0].reshape(T, nh, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:].reshape(T, nh * hd)
    q = scaled_rms_norm(q, w.q_scale, c.rms_norm_eps)
    k = scaled_rms_norm(proj[:, k0:v0].reshape(T, nkv, hd), w.k_scale, c.rms_norm_eps)
    v = proj[:, v0:].reshape(T, nkv, hd)
    cos, sin = rope_cos_sin(np.arange(state.pos, state.pos + T), c.rotary_dim, c.rope_theta)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    state.write_kv(slot, state.pos, k, v)
    keys, values = state.read_kv(slot, state.pos + T)
    out = causal_attention(q, keys, values, state.pos).reshape(T, nh * hd)
    return w.o_proj(out * sigmoid(gate))
