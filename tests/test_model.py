"""Model API and its building blocks, each against a deliberately naive formulation written here."""

from __future__ import annotations

import numpy as np
import pytest

from reference.attention import apply_rope, causal_attention, inverse_frequencies, rms_norm, rope_cos_sin
from reference.gdn import causal_conv1d, expand_heads, gdn_gate, l2norm
from reference.model import load_model
from reference.tiny import tiny_model


@pytest.fixture(scope="module")
def model():
    return load_model(tiny_model(0), weights="f32")


def test_forward_shapes_dtype_and_positions(model) -> None:
    state = model.new_state()
    logits = model.forward(list(range(10)), state)
    assert logits.shape == (10, model.config.vocab_size) and logits.dtype == np.float32
    assert np.isfinite(logits).all() and state.pos == 10
    empty = model.forward([], state)
    assert empty.shape == (0, model.config.vocab_size) and state.pos == 10


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        ([[1, 2]], "1-D sequence"),
        ([1.5, 2.0], "integer ids"),
        ([1, 2, -1], "token id -1 at position 2"),
        ([0, 512], "token id 512 at position 1"),
    ],
)
def test_bad_tokens_are_named(model, tokens, message: str) -> None:
    state = model.new_state()
    model.forward([3, 4], state)
    before = state.to_bytes()
    with pytest.raises(ValueError, match=message):
        model.forward(tokens, state)
    assert state.to_bytes() == before


def test_position_limit(model) -> None:
    state = model.new_state()
    state.pos = model.config.max_position_embeddings - 1  # pretend: the check runs before any compute
    with pytest.raises(ValueError, match="exceed max_position_embeddings"):
        model.forward([1, 2], state)


def test_state_of_another_model_is_rejected(model, tmp_path) -> None:
    from reference.tiny import TINY_CONFIG, write_tiny

    write_tiny(tmp_path, 0, {**TINY_CONFIG, "layer_types": ["linear_attention"] * 2 + ["full_attention"] * 2})
    other = load_model(tmp_path, "f32")
    with pytest.raises(ValueError, match="another layout"):
        model.forward([1], other.new_state())
    with pytest.raises(ValueError, match="StreamState"):
        model.forward([1], object())


def test_the_recurrent_state_remembers(model) -> None:
    """Slow decay: the first token still moves logits 300 tokens later (HF's init would forget it at once)."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 512, 300)
    other = tokens.copy()
    other[0] = (other[0] + 1) % 512
    a, b = model.new_state(), model.new_state()
    model.forward(tokens, a)
    model.forward(other, b)
    layer0 = np.abs(a.recurrent[0] - b.recurrent[0]).max() / np.abs(a.recurrent[0]).max()
    assert layer0 > 1e-3  # the first GDN layer sees token 0 only through its recurrent state by now
    decays = model.gdn_decays(tokens)
    assert decays.shape == (3, 300, model.config.linear_num_value_heads)
    assert np.median(decays) > 0.95


def test_rms_norm_is_zero_centred() -> None:
    x = np.random.default_rng(0).normal(size=(3, 8)).astype(np.float32)
    w = np.full(8, 0.5, np.float32)
    expected = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, -1, keepdims=True) + 1e-6) * 1.5
    assert np.allclose(rms_norm(x, w, 1e-6), expected, rtol=1e-6, atol=1e-6)


def test_rope_rotates_pairs_i_and_i_plus_half_and_keeps_the_rest() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 2, 16)).astype(np.float32)
    r, theta = 8, 100.0
    cos, sin = rope_cos_sin(np.arange(10, 15), r, theta)
    got = apply_rope(x, cos, sin)
    assert np.array_equal(got[..., r:], x[..., r:])
    for t in range(5):
        for i in range(r // 2):
            angle = (10 + t) * theta ** (-2 * i / r)
            c, s = np.cos(angle), np.sin(angle)
            a, b = x[t, :, i], x[t, :, i + r // 2]
            assert np.allclose(got[t, :, i], a * c - b * s, atol=1e-4)
            assert np.allclose(got[t, :, i + r // 2], b * c + a * s, atol=1e-4)


def test_rope_inverse_frequencies_are_made_once_and_read_only() -> None:
    inv = inverse_frequencies(8, 100.0)
    assert inv is inverse_frequencies(8, 100.0) and not inv.flags.writeable
    assert inv.dtype == np.float32 and np.allclose(inv, 100.0 ** (-np.arange(0, 8, 2) / 8), rtol=1e-6)


def test_attention_is_causal_gqa_softmax() -> None:
    rng = np.random.default_rng(2)
    start, T, nh, nkv, hd = 3, 4, 4, 2, 8
    q = rng.normal(size=(T, nh, hd)).astype(np.float32)
    k = rng.normal(size=(start + T, nkv, hd)).astype(np.float32)
    v = rng.normal(size=(start + T, nkv, hd)).astype(np.float32)
    got = causal_attention(q, k, v, start)
    for t in range(T):
        for h in range(nh):
            g = h // (nh // nkv)
            s = k[: start + t + 1, g] @ q[t, h] / np.sqrt(hd)
            p = np.exp(s - s.max())
            assert np.allclose(got[t, h], (p / p.sum()) @ v[: start + t + 1, g], atol=1e-5)
    # the mask covers the last T keys only: keys that are not exactly positions 0 .. start+T-1 are refused, not
    # masked wrongly (a decode step, T = 1, with one key too many once broadcast its mask over it)
    for extra in (1, -1):
        n = start + T + extra
        with pytest.raises(AssertionError):
            causal_attention(q, k[:1].repeat(n, axis=0), v[:1].repeat(n, axis=0), start)
        with pytest.raises(AssertionError):
            causal_attention(q[:1], k[: start + 1 + extra], v[: start + 1 + extra], start)


def test_conv_state_holds_the_last_k_inputs() -> None:
    rng = np.random.default_rng(3)
    D, K, T = 5, 4, 9
    x = rng.normal(size=(T, D)).astype(np.float32)
    w = rng.normal(size=(D, K)).astype(np.float32)
    y, state = causal_conv1d(x, np.zeros((D, K), np.float32), w)
    padded = np.concatenate([np.zeros((K - 1, D), np.float32), x])
    for t in range(T):
        assert np.allclose(y[t], (padded[t : t + K] * w.T).sum(0), atol=1e-5)
    assert np.array_equal(state, x[-K:].T)
    y1, s1 = causal_conv1d(x[:6], np.zeros((D, K), np.float32), w)  # the same in two calls
    y2, s2 = causal_conv1d(x[6:], s1, w)
    assert np.allclose(np.concatenate([y1, y2]), y, atol=1e-6) and np.array_equal(s2, state)


def test_value_heads_read_key_heads_in_blocks() -> None:
    k = np.arange(2 * 3).reshape(1, 2, 3).astype(np.float32)  # Hk = 2
    expanded = expand_heads(k, 4)  # Hv = 4: heads 0, 1 read key head 0; heads 2, 3 read key head 1
    assert [int(expanded[0, h, 0]) for h in range(4)] == [0, 0, 3, 3]


def test_gate_and_l2norm() -> None:
    a = np.array([[-100.0, 0.0, 100.0]], np.float32)
    g = gdn_gate(np.log(np.array([0.5, 0.5, 0.5], np.float32)), a, np.zeros(3, np.float32))
    assert np.allclose(g, [[0.0, -0.5 * np.log(2), -50.0]], atol=1e-5)
    x = np.array([[3.0, 4.0], [0.0, 0.0]], np.float32)
    assert np.allclose(l2norm(x), [[0.6, 0.8], [0.0, 0.0]], atol=1e-6)
