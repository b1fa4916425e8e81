"""reference/attention.py: softmax stability, and each attention layer reading only its own KV pages."""

from __future__ import annotations

import numpy as np
import pytest

from reference.attention import causal_attention, gated_attention
from reference.state import PagePool, StreamState
from reference.tiny import TINY_CONFIG, write_tiny
from reference.weights import AttentionWeights


def softmax_attention(q, k, v, start):  # float64, one (t, h) at a time, max-shifted per row
    T, nh, hd = q.shape
    rep = nh // k.shape[1]
    out = np.zeros(q.shape)
    for t in range(T):
        for h in range(nh):
            s = k[: start + t + 1, h // rep].astype(np.float64) @ q[t, h].astype(np.float64) / np.sqrt(hd)
            p = np.exp(s - s.max())
            out[t, h] = p / p.sum() @ v[: start + t + 1, h // rep]
    return out


def test_softmax_survives_huge_logits_in_one_head_and_small_ones_in_another() -> None:
    """Head 0's scores reach the hundreds (exp overflows float32 past 88) unless shifted by their row's max; head 1's
    are O(1) and must not be shifted by head 0's max (exp(-900) underflows to 0 and the row becomes 0/0)."""
    rng = np.random.default_rng(0)
    start, T, nh, nkv, hd = 2, 3, 2, 2, 4
    q = rng.normal(size=(T, nh, hd)).astype(np.float32)
    k = rng.normal(size=(start + T, nkv, hd)).astype(np.float32)
    v = rng.normal(size=(start + T, nkv, hd)).astype(np.float32)
    q[:, 0] = 30.0  # head 0: scores = 30 * 30 * sum(sign) / sqrt(4), in {-900, 0, 900, 1800}
    k[:, 0] = 30.0 * np.sign(k[:, 0])
    k[:, 0, 0] = 30.0  # so sum(sign) is one of -2, 0, 2, 4
    got = causal_attention(q, k, v, start)
    want = softmax_attention(q, k, v, start)
    assert np.isfinite(got).all(), got
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def two_attention_layers(tmp_path_factory):
    from reference.model import load_model

    raw = {
        **TINY_CONFIG,
        "vocab_size": 32,
        "hidden_size": 32,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "layer_types": ["full_attention", "full_attention"],
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
    }
    path = tmp_path_factory.mktemp("attn2")
    write_tiny(path, 3, raw)
    return load_model(path, "f32")


def test_a_layer_reads_only_its_own_kv(two_attention_layers) -> None:
    """Attention layer slot 1 over a pool of 2 attention layers, with junk in slot 0's K/V, computes exactly what
    the same layer computes alone in a 1-layer pool."""
    model = two_attention_layers
    c = model.config
    w = model.weights.layers[1].mixer
    assert isinstance(w, AttentionWeights)
    x = np.random.default_rng(1).normal(size=(5, c.hidden_size)).astype(np.float32)
    shared = model.new_state(model.new_pool(pages=4, page_size=2))
    shared.reserve(5)
    junk = np.full((5, c.num_key_value_heads, c.head_dim), 7.0, np.float32)
    shared.write_kv(0, 0, junk, -junk)
    alone = StreamState(PagePool(4, 2, 1, c.num_key_value_heads, c.head_dim), [], [])
    alone.reserve(5)
    got = gated_attention(w, c, x, shared, 1)
    want = gated_attention(w, c, x, alone, 0)
    assert np.array_equal(got, want)
    k_shared, _ = shared.read_kv(1, 5)
    k_alone, _ = alone.read_kv(0, 5)
    assert np.array_equal(k_shared, k_alone)
    assert np.array_equal(shared.read_kv(0, 5)[0], junk)  # slot 0 was not written over
