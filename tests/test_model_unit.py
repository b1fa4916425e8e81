"""reference/model.py against a Qwen3.5 forward written out here in float64 from the checkpoint's HF-named tensors.

The HF golden data (tests/test_hf_golden.py) pins the engine to transformers on two layouts with one attention
layer each. The textbook forward below covers what they cannot: three attention layers and two GDN layers
interleaved, so every layer's KV pages and GDN state must land in its own slot. It reads the safetensors file
directly (no reference/ code) and follows transformers' Qwen3_5 modeling: (1 + w) RMSNorms, per-head query|gate
split of q_proj, half-split RoPE on the first head_dim · partial_rotary_factor dims, sigmoid output gate, the GDN
conv -> silu -> l2norm -> delta rule (the paper's form) -> gated RMSNorm, SwiGLU MLP. Tolerances use
contracts/hf-golden-v1.yaml's error model (eps32 N (layer + 1), plus (dk + 64) T for recurrent states).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest

from reference.config import Config
from reference.model import Model, load_model
from reference.tiny import TINY_CONFIG, tiny_model, write_tiny

EPS32 = 2.0**-23
MIXED = {
    **TINY_CONFIG,
    "vocab_size": 40,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 5,
    "layer_types": [
        "full_attention",
        "linear_attention",
        "full_attention",
        "linear_attention",
        "full_attention",
    ],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "linear_conv_kernel_dim": 3,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 6,
    "linear_num_key_heads": 1,
    "linear_num_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 40,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 0.5},
    "tie_word_embeddings": True,
    "chunk_size": 8,
}
ATTENTION_ONLY = {**MIXED, "num_hidden_layers": 2, "layer_types": ["full_attention"] * 2}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mixed")
    write_tiny(path, 11, MIXED)
    return path


@pytest.fixture(scope="module")
def attention_only(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("attention-only")
    write_tiny(path, 12, ATTENTION_ONLY)
    return path


# -- the textbook forward ----------------------------------------------------------------------------------------


def tensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return {k: v.astype(np.float64) for k, v in load_file(str(path / "model.safetensors")).items()}


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def rms_norm(x, w, eps):  # Qwen3_5RMSNorm: x / sqrt(mean x^2 + eps) * (1 + w)
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * (1.0 + w)


def attention_layer(t, p, c, h):
    T, nh, nkv, hd = len(h), c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    eps = c["rms_norm_eps"]
    qg = (h @ t[p + "q_proj.weight"].T).reshape(T, nh, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:].reshape(T, nh * hd)
    k = (h @ t[p + "k_proj.weight"].T).reshape(T, nkv, hd)
    v = (h @ t[p + "v_proj.weight"].T).reshape(T, nkv, hd)
    q, k = rms_norm(q, t[p + "q_norm.weight"], eps), rms_norm(k, t[p + "k_norm.weight"], eps)
    rope = c["rope_parameters"]
    r = int(hd * rope["partial_rotary_factor"])
    angle = np.arange(T)[:, None] * rope["rope_theta"] ** (-np.arange(0, r, 2) / r)  # [T, r/2]
    cos, sin = np.cos(angle)[:, None], np.sin(angle)[:, None]

    def rotate(x):  # the pair (i, i + r/2) turns by angle i
        a, b = x[..., : r // 2], x[..., r // 2 : r]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin, x[..., r:]], axis=-1)

    q, k = rotate(q), rotate(k)
    out = np.zeros((T, nh, hd))
    for i in range(T):
        for head in range(nh):
            kv = head // (nh // nkv)
            s = k[: i + 1, kv] @ q[i, head] / np.sqrt(hd)
            p_ = np.exp(s - s.max())
            out[i, head] = p_ / p_.sum() @ v[: i + 1, kv]
    return (out.reshape(T, nh * hd) * sigmoid(gate)) @ t[p + "o_proj.weight"].T, k, v


def gdn_layer(t, p, c, h):
    T = len(h)
    hk, hv, dk, dv = (
        c[f"linear_{n}"] for n in ("num_key_heads", "num_value_heads", "key_head_dim", "value_head_dim")
    )
    K = c["linear_conv_kernel_dim"]
    qkv = h @ t[p + "in_proj_qkv.weight"].T  # [T, D]
    w = t[p + "conv1d.weight"][:, 0, :]  # [D, K]
    history = np.concatenate([np.zeros((K, qkv.shape[1])), qkv])  # zeros before the first token
    conv = np.stack([sum(w[:, j] * history[1 + i + j] for j in range(K)) for i in range(T)])
    mixed = conv * sigmoid(conv)
    q = mixed[:, : hk * dk].reshape(T, hk, dk)
    k = mixed[:, hk * dk : 2 * hk * dk].reshape(T, hk, dk)
    v = mixed[:, 2 * hk * dk :].reshape(T, hv, dv)
    q = q / np.sqrt((q**2).sum(-1, keepdims=True) + 1e-6) / np.sqrt(dk)
    k = k / np.sqrt((k**2).sum(-1, keepdims=True) + 1e-6)
    beta = sigmoid(h @ t[p + "in_proj_b.weight"].T)
    a = h @ t[p + "in_proj_a.weight"].T + t[p + "dt_bias"]
    alpha = np.exp(-np.exp(t[p + "A_log"]) * np.logaddexp(0.0, a))  # [T, Hv]
    S = np.zeros((hv, dv, dk))  # the paper's layout
    o = np.zeros((T, hv, dv))
    for i in range(T):
        for head in range(hv):
            kt, qt = k[i, head // (hv // hk)], q[i, head // (hv // hk)]
            S[head] = alpha[i, head] * S[head] @ (np.eye(dk) - beta[i, head] * np.outer(kt, kt))
            S[head] += beta[i, head] * np.outer(v[i, head], kt)
            o[i, head] = S[head] @ qt
    z = (h @ t[p + "in_proj_z.weight"].T).reshape(T, hv, dv)
    o = (
        t[p + "norm.weight"]
        * o
        / np.sqrt((o**2).mean(-1, keepdims=True) + c["rms_norm_eps"])
        * z
        * sigmoid(z)
    )
    return o.reshape(T, hv * dv) @ t[p + "out_proj.weight"].T, history[-K:].T, S, alpha


def textbook_forward(path: Path, ids: np.ndarray) -> dict[str, list[np.ndarray]]:
    import json

    c = json.loads((path / "config.json").read_text())
    t = tensors(path)
    eps = c["rms_norm_eps"]
    x = t["model.embed_tokens.weight"][ids]
    out: dict[str, list[np.ndarray]] = {k: [] for k in ("hidden", "conv", "recurrent", "decay", "k", "v")}
    for i, kind in enumerate(c["layer_types"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, t[p + "input_layernorm.weight"], eps)
        if kind == "linear_attention":
            h, conv, S, alpha = gdn_layer(t, p + "linear_attn.", c, h)
            out["conv"].append(conv)
            out["recurrent"].append(S.transpose(0, 2, 1))  # the engine keeps [Hv, dk, dv]
            out["decay"].append(alpha)
        else:
            h, k, v = attention_layer(t, p + "self_attn.", c, h)
            out["k"].append(k)
            out["v"].append(v)
        x = x + h
        h = rms_norm(x, t[p + "post_attention_layernorm.weight"], eps)
        gate, up = h @ t[p + "mlp.gate_proj.weight"].T, h @ t[p + "mlp.up_proj.weight"].T
        x = x + (gate * sigmoid(gate) * up) @ t[p + "mlp.down_proj.weight"].T
        out["hidden"].append(x)
    head = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    out["logits"] = [rms_norm(x, t["model.norm.weight"], eps) @ head.T]
    return out


def within(got: np.ndarray, want: np.ndarray, terms: float, what: str) -> None:
    assert got.shape == want.shape, f"{what}: engine {got.shape} vs textbook {want.shape}"
    diff = float(np.abs(got.astype(np.float64) - want).max())
    bound = EPS32 * terms * float(np.abs(want).max())
    assert diff <= bound, f"{what}: max |diff| {diff:.3g} > bound {bound:.3g} (ratio {diff / bound:.2f})"


def test_textbook_forward_by_hand_cases() -> None:
    """The textbook's own pieces on cases solvable by hand."""
    np.testing.assert_allclose(
        rms_norm(np.array([3.0, 4.0]), np.array([0.0, 1.0]), 0.0), [3 / 12.5**0.5, 8 / 12.5**0.5]
    )
    assert sigmoid(0.0) == 0.5


@pytest.mark.parametrize("cuts", [[], [10, 21, 22]], ids=["one-call", "calls-10-11-1-1"])
def test_mixed_layers_match_the_textbook(mixed: Path, cuts: list[int]) -> None:
    """23 tokens, in one call or four (two of them decode steps), over 5 layers (3 attention, 2 GDN) with
    chunk_size 8: logits, each layer's output, each GDN layer's conv/recurrent state and each attention layer's
    K/V pages match the textbook's, layer i's in slot i."""
    model = load_model(mixed, "f32")
    c = model.config
    ids = np.random.default_rng(5).integers(0, c.vocab_size, 23)
    want = textbook_forward(mixed, ids)
    state = model.new_state(model.new_pool(pages=8, page_size=4))
    calls = [model.trace(ids[a:b], state) for a, b in itertools.pairwise([0, *cuts, len(ids)])]
    for call in calls:
        assert call["logits"].dtype == call["hidden"].dtype == np.float32
        assert call["conv"].dtype == call["recurrent"].dtype == np.float32
    n_red = max(c.hidden_size, c.intermediate_size, 2 * 6, 4 * 8, len(ids))
    hidden = np.concatenate([call["hidden"] for call in calls], axis=1)
    assert hidden.shape == (5, 23, 32)
    for layer in range(5):
        within(hidden[layer], want["hidden"][layer], n_red * (layer + 1), f"layer {layer} output")
    logits = np.concatenate([call["logits"] for call in calls])
    within(logits, want["logits"][0], n_red * 6, "logits")
    assert state.pos == 23
    for slot, layer in enumerate(c.gdn_layers):
        within(
            calls[-1]["conv"][slot], want["conv"][slot], n_red * (layer + 1), f"conv state of layer {layer}"
        )
        terms = n_red * (layer + 1) + (8 + 64) * 23
        within(
            calls[-1]["recurrent"][slot], want["recurrent"][slot], terms, f"recurrent state of layer {layer}"
        )
        assert np.array_equal(state.conv[slot], calls[-1]["conv"][slot])
    for slot, layer in enumerate(c.attn_layers):
        k, v = state.read_kv(slot, 23)
        within(k, want["k"][slot], n_red * (layer + 1), f"K pages of layer {layer}")
        within(v, want["v"][slot], n_red * (layer + 1), f"V pages of layer {layer}")
    decays = model.gdn_decays(ids)
    assert decays.shape == (2, 23, 2) and decays.dtype == np.float32
    for slot in range(2):
        within(decays[slot], want["decay"][slot], n_red, f"decays of GDN slot {slot}")


def test_forward_equals_trace_logits(mixed: Path) -> None:
    model = load_model(mixed, "f32")
    ids = [1, 5, 9, 2, 33, 7, 7, 0, 39, 4, 12]
    a, b = model.new_state(), model.new_state()
    assert np.array_equal(model.forward(ids, a), model.trace(ids, b)["logits"])
    assert a.to_bytes() == b.to_bytes()


def test_a_model_without_gdn_layers(attention_only: Path) -> None:
    """Empty GDN outputs keep the documented shapes: conv [0, conv_dim, K], recurrent [0, Hv, dk, dv], decays
    [0, T, Hv], all float32."""
    model = load_model(attention_only, "f32")
    c = model.config
    state = model.new_state()
    out = model.trace([3, 1, 4, 1, 5], state)
    assert out["logits"].shape == (5, 40) and out["hidden"].shape == (2, 5, 32)
    assert out["conv"].shape == (0, c.conv_dim, 3) and out["conv"].dtype == np.float32
    assert out["recurrent"].shape == (0, 2, 8, 6) and out["recurrent"].dtype == np.float32
    decays = model.gdn_decays([3, 1, 4])
    assert decays.shape == (0, 3, 2) and decays.dtype == np.float32
    want = textbook_forward(attention_only, np.array([3, 1, 4, 1, 5]))
    within(out["logits"], want["logits"][0], 48 * 3, "logits")


# -- the API around the forward ---------------------------------------------------------------------------------


def test_repr_path_and_kind(mixed: Path) -> None:
    model = load_model(mixed, "f32")
    assert model.path == mixed and model.kind == "f32"
    assert repr(model) == f"Model({mixed}, weights='f32', layers=flflf, hidden=32, vocab=40)"
    bare = Model(model.config, model.weights)
    assert bare.path is None and bare.kind == "f32"
    assert repr(bare) == "Model(None, weights='f32', layers=flflf, hidden=32, vocab=40)"


def test_a_checkpoint_loads_as_q4_k_by_default_from_its_directory_or_its_weights_file() -> None:
    from reference.weights import Quantized

    path = tiny_model(0)
    model = load_model(path)
    assert model.kind == "q4_k" and model.path == path
    assert isinstance(model.weights.layers[0].mlp.down_proj, Quantized)
    by_file = load_model(path / "model.safetensors", "f32")
    assert by_file.kind == "f32" and by_file.path == path / "model.safetensors"
    assert by_file.config == Config.from_file(path / "config.json")
    ids = [5, 6, 7]
    assert np.array_equal(
        by_file.forward(ids, by_file.new_state()), load_model(path, "f32").forward(ids, by_file.new_state())
    )


def test_a_gguf_loads_as_stored(tmp_path: Path) -> None:
    from reference.gguf_io import write_gguf

    gguf = write_gguf(tiny_model(0), tmp_path / "tiny.gguf")
    model = load_model(gguf)
    assert model.kind == "stored" and model.path == gguf
    assert repr(model) == f"Model({gguf}, weights='stored', layers=lllf, hidden=256, vocab=512)"
    as_f32 = load_model(gguf, "f32")
    assert as_f32.kind == "f32" and as_f32.path == gguf
    ids = [2, 3, 5, 7]
    ours = load_model(tiny_model(0), "f32")
    np.testing.assert_array_equal(model.forward(ids, model.new_state()), ours.forward(ids, ours.new_state()))


def test_dense_state_dict_is_the_checkpoint(mixed: Path) -> None:
    """An f32 model computes with the stored tensors as they are (float16 storage, widened exactly)."""
    model = load_model(mixed, "f32")
    stored = tensors(mixed)
    dense = model.dense_state_dict()
    assert set(dense) == set(stored)
    for name, value in stored.items():
        assert dense[name].dtype == np.float32, name
        np.testing.assert_array_equal(dense[name], value, err_msg=name)


def test_private_pool_starts_at_4_pages_of_16_and_doubles(mixed: Path) -> None:
    model = load_model(mixed, "f32")
    state = model.new_state()
    assert state.pool.counts() == (4, 0, 4) and state.pool.page_size == 16
    assert state.pool.page_shape == (3, 16, 2, 8)
    assert [c.shape for c in state.conv] == [(2 * 1 * 8 + 2 * 6, 3)] * 2  # q | k | v channels
    assert [r.shape for r in state.recurrent] == [(2, 8, 6)] * 2
    model.forward(np.arange(39) % 40, state)  # 3 pages
    assert state.pool.counts() == (1, 3, 4)
    state.release()
    other = model.new_state()
    model.forward(np.arange(40) % 40, other)
    assert other.pool.counts() == (1, 3, 4)


def test_position_limit_is_inclusive(mixed: Path) -> None:
    model = load_model(mixed, "f32")  # max_position_embeddings = 40
    state = model.new_state()
    model.forward(np.arange(39) % 40, state)
    with pytest.raises(
        ValueError, match="^" + re.escape("forward: 39 + 2 tokens exceed max_position_embeddings=40")
    ):
        model.forward([1, 2], state)
    assert model.forward([1], state).shape == (1, 40) and state.pos == 40


def test_state_errors_name_the_problem(mixed: Path, attention_only: Path) -> None:
    model = load_model(mixed, "f32")
    with pytest.raises(
        ValueError,
        match="^" + re.escape("forward: state must be a StreamState from new_state(), got dict") + "$",
    ):
        model.forward([1], {})  # type: ignore[arg-type]  # the wrong type is the point
    other = load_model(attention_only, "f32").new_state()
    with pytest.raises(ValueError, match=r"^forward: state was made by a model with another layout$"):
        model.forward([1], other)
