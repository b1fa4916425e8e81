"""reference/gdn.py against the Gated DeltaNet recurrence written out here as the paper states it, in float64.

Yang, Kautz, Hatamizadeh, "Gated Delta Networks" (arXiv 2412.06464), eq. (10), state S_t: [dv, dk]:

    S_t = S_{t-1} (α_t (I − β_t k_t k_tᵀ)) + β_t v_t k_tᵀ,        o_t = S_t q_t

(the same twin as falsify/packs/gdn/falsifiers/test_gdn_textbook.py, which mutmut's copy of the tree cannot run).
Tolerances follow contracts/hf-golden-v1.yaml's error model: a float32 recurrence over T tokens through a chunked
solve of C tokens is off by at most about (dk + C) T eps32 of the values' magnitude.
"""

from __future__ import annotations

import numpy as np
import pytest

import reference.gdn as gdn
from reference.config import Config
from reference.gdn import (
    causal_conv1d,
    chunk_gated_delta_rule,
    gated_delta_net,
    gated_rms_norm,
    l2norm,
    naive_recurrent_gated_delta_rule,
    sigmoid,
    silu,
    softplus,
)
from reference.tiny import TINY_CONFIG
from reference.weights import GDNWeights

EPS32 = 2.0**-23
HK, HV, DK, DV = 1, 3, 8, 6  # value heads 0..2 all read key head 0; dv < T, so T and dv cannot be confused


def textbook(q, k, v, alpha, beta, S0):  # [T,Hk,dk] x2, [T,Hv,dv], [T,Hv] x2, [Hv,dv,dk] -> o [T,Hv,dv], S
    group = v.shape[1] // k.shape[1]
    S = S0.astype(np.float64).copy()
    o = np.zeros(v.shape)
    eye = np.eye(k.shape[2])
    for t in range(len(v)):
        for h in range(v.shape[1]):
            kt, qt = k[t, h // group].astype(np.float64), q[t, h // group].astype(np.float64)
            a, b = float(alpha[t, h]), float(beta[t, h])
            S[h] = S[h] @ (a * (eye - b * np.outer(kt, kt))) + b * np.outer(v[t, h].astype(np.float64), kt)
            o[t, h] = S[h] @ qt
    return o, S


def inputs(T: int, seed: int):
    """q, k unit (q scaled by dk^-1/2), v, log-decay g, beta, state [Hv, dk, dv]: float32 as the model feeds them."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(T, HK, DK))
    k = rng.normal(size=(T, HK, DK))
    q = q / np.linalg.norm(q, axis=-1, keepdims=True) * DK**-0.5
    k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.normal(size=(T, HV, DV))
    g = -rng.uniform(0.0, 0.3, (T, HV))
    beta = rng.uniform(0.0, 1.0, (T, HV))
    state = rng.normal(size=(HV, DK, DV))
    return tuple(x.astype(np.float32) for x in (q, k, v, g, beta, state))


def close(got: np.ndarray, want: np.ndarray, terms: int, what: str) -> None:
    diff = float(np.abs(got.astype(np.float64) - want).max())
    bound = EPS32 * terms * float(np.abs(want).max())
    assert diff <= bound, f"{what}: max |diff| {diff:.3g} > bound {bound:.3g} (ratio {diff / bound:.2f})"


@pytest.mark.parametrize("T", [1, 2, 7, 63, 75, 150])
@pytest.mark.parametrize("kernel", ["recurrent", "chunked-64", "chunked-5", "chunked-default"])
def test_kernels_match_the_paper(kernel: str, T: int) -> None:
    q, k, v, g, beta, state = inputs(T, seed=T)
    o_ref, S_ref = textbook(q, k, v, np.exp(g.astype(np.float64)), beta, state.transpose(0, 2, 1))
    before = state.copy()
    if kernel == "recurrent":
        o, S = naive_recurrent_gated_delta_rule(q, k, v, g, beta, state)
        C = 1
    elif kernel == "chunked-default":  # 64, as HF's torch_chunk_gated_delta_rule
        o, S = chunk_gated_delta_rule(q, k, v, g, beta, state)
        C = 64
    else:
        C = int(kernel.split("-")[1])
        o, S = chunk_gated_delta_rule(q, k, v, g, beta, state, chunk_size=C)
    assert o.shape == (T, HV, DV) and S.shape == (HV, DK, DV)
    assert o.dtype == S.dtype == np.float32
    assert np.array_equal(state, before), "the input state must not be modified"
    close(o, o_ref, (DK + C) * T, f"{kernel} output, T={T}")
    close(S, S_ref.transpose(0, 2, 1), (DK + C) * T, f"{kernel} state, T={T}")


def test_delta_rule_by_hand() -> None:
    """α = β = 1 and a unit key e0: the state's row for e0 is overwritten by v, the rest kept; o reads it back."""
    q = np.zeros((1, 1, 2), np.float32)
    q[0, 0, 0] = 1.0
    k = q.copy()
    v = np.array([[[3.0, -2.0]]], np.float32)
    S0 = np.array([[[5.0, 7.0], [1.0, 4.0]]], np.float32)  # [Hv, dk, dv]
    for C in (1, 64):
        o, S = chunk_gated_delta_rule(
            q, k, v, np.zeros((1, 1), np.float32), np.ones((1, 1), np.float32), S0, C
        )
        np.testing.assert_array_equal(S[0], [[3.0, -2.0], [1.0, 4.0]])
        np.testing.assert_array_equal(o[0, 0], [3.0, -2.0])
    # β = 0: the state only decays by exp(g) = 1/2
    o, S = naive_recurrent_gated_delta_rule(
        q, k, v, np.full((1, 1), -np.log(2), np.float32), np.zeros((1, 1), np.float32), S0
    )
    np.testing.assert_allclose(S[0], 0.5 * S0[0], rtol=1e-6)
    np.testing.assert_allclose(o[0, 0], [2.5, 3.5], rtol=1e-6)


@pytest.mark.parametrize("kernel", ["recurrent", "chunked"])
def test_kernels_compute_in_float32_whatever_they_are_given(kernel: str) -> None:
    """Inputs are cast to float32 at entry (float64 ones too): the state a stream carries stays f32[Hv, dk, dv]."""
    f32 = inputs(20, seed=3)
    f64 = tuple(x.astype(np.float64) for x in f32)
    run = naive_recurrent_gated_delta_rule if kernel == "recurrent" else chunk_gated_delta_rule
    o64, S64 = run(*f64)
    o32, S32 = run(*f32)
    assert o64.dtype == S64.dtype == np.float32
    assert np.array_equal(o64, o32) and np.array_equal(S64, S32)


def test_default_chunk_is_64() -> None:
    q, k, v, g, beta, state = inputs(150, seed=4)
    o, S = chunk_gated_delta_rule(q, k, v, g, beta, state)
    o64, S64 = chunk_gated_delta_rule(q, k, v, g, beta, state, chunk_size=64)
    assert np.array_equal(o, o64) and np.array_equal(S, S64)


def test_scalar_functions_against_float64_formulas() -> None:
    x = np.array([-200.0, -30.0, -1.5, 0.0, 0.25, 3.0, 30.0, 200.0], np.float32)
    x64 = x.astype(np.float64)
    sp = softplus(x)
    assert sp.dtype == np.float32 and np.isfinite(sp).all()
    np.testing.assert_allclose(sp, np.logaddexp(0.0, x64), rtol=1e-6, atol=1e-30)
    sg = sigmoid(x)
    assert sg.dtype == np.float32
    np.testing.assert_allclose(sg, 1.0 / (1.0 + np.exp(-x64)), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(silu(x), x64 / (1.0 + np.exp(-x64)), rtol=1e-6, atol=1e-6)


def test_norms_put_eps_where_hf_does() -> None:
    """Tiny inputs, where eps dominates: l2norm eps 1e-6 inside the sqrt of Σx²; gated norm eps inside mean x²."""
    x = np.full((2, 4), 1e-4, np.float32)
    x[1] *= 100
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(l2norm(x), x64 / np.sqrt((x64**2).sum(-1, keepdims=True) + 1e-6), rtol=1e-5)
    z = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)
    w = np.array([0.5, 1.0, 1.5, 2.0], np.float32)
    want = (
        w * x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-5) * (z / (1 + np.exp(-z.astype(np.float64))))
    )
    np.testing.assert_allclose(gated_rms_norm(x, z, w, 1e-5), want, rtol=1e-5)


def test_conv_is_float32_and_matches_the_sum() -> None:
    rng = np.random.default_rng(5)
    D, K, T = 3, 4, 2  # fewer tokens than the kernel: the state supplies the older inputs
    x = rng.normal(size=(T, D)).astype(np.float32)
    w = rng.normal(size=(D, K)).astype(np.float32)
    old = rng.normal(size=(D, K)).astype(np.float32)
    y, state = causal_conv1d(x, old, w)
    assert y.dtype == state.dtype == np.float32 and y.shape == (T, D) and state.shape == (D, K)
    history = np.concatenate([old.T, x]).astype(np.float64)  # inputs oldest first
    for t in range(T):
        want = sum(w[:, j] * history[K + t - (K - 1) + j] for j in range(K))
        np.testing.assert_allclose(y[t], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(state, history[-K:].T.astype(np.float32))


@pytest.fixture(scope="module")
def small_gdn(tmp_path_factory) -> tuple[GDNWeights, Config]:
    """One GDN layer of a seeded checkpoint with the kernel heads above and chunk_size 4."""
    from reference.model import load_model
    from reference.tiny import write_tiny

    raw = {
        **TINY_CONFIG,
        "vocab_size": 16,
        "hidden_size": 16,
        "intermediate_size": 16,
        "num_hidden_layers": 1,
        "layer_types": ["linear_attention"],
        "linear_conv_kernel_dim": 3,
        "linear_key_head_dim": DK,
        "linear_value_head_dim": DV,
        "linear_num_key_heads": HK,
        "linear_num_value_heads": HV,
        "chunk_size": 4,
    }
    path = tmp_path_factory.mktemp("gdn1")
    write_tiny(path, 6, raw)
    model = load_model(path, "f32")
    mixer = model.weights.layers[0].mixer
    assert isinstance(mixer, GDNWeights)
    return mixer, model.config


def test_decode_steps_run_the_recurrent_kernel_and_chunks_the_chunked_one(small_gdn, monkeypatch) -> None:
    """As HF's Qwen3_5GatedDeltaNet: seq_len 1 takes the recurrent form; longer chunks the chunked form, cut at
    the config's chunk_size."""
    w, c = small_gdn
    calls: list[tuple[str, int, int | None]] = []

    def spy(name, real):
        def run(q, k, v, g, beta, state, chunk_size=None):
            calls.append((name, len(v), chunk_size))
            return (
                real(q, k, v, g, beta, state)
                if chunk_size is None
                else real(q, k, v, g, beta, state, chunk_size)
            )

        return run

    monkeypatch.setattr(
        gdn, "naive_recurrent_gated_delta_rule", spy("recurrent", naive_recurrent_gated_delta_rule)
    )
    monkeypatch.setattr(gdn, "chunk_gated_delta_rule", spy("chunked", chunk_gated_delta_rule))
    x = np.random.default_rng(7).normal(size=(10, 16)).astype(np.float32)
    conv = np.zeros((c.conv_dim, 3), np.float32)
    rec = np.zeros((HV, DK, DV), np.float32)
    for T in (1, 2, 10):
        gated_delta_net(w, c, x[:T], conv, rec)
    assert calls == [("recurrent", 1, None), ("chunked", 2, 4), ("chunked", 10, 4)]


@pytest.mark.parametrize("unit", [True, False], ids=["unit", "any-diagonal"])
@pytest.mark.parametrize("C", [1, 2, 3, 5, 16, 37, 63, 64])
def test_lower_inverse_is_the_inverse(C: int, unit: bool) -> None:
    """The chunk's T⁻¹ (unit diagonal), and any lower triangular one's, at every chunk length (the last chunk is
    cut short): exact zeros above the diagonal, the diagonal's reciprocals on it, and within the componentwise
    bound of a triangular inverse (Higham, Accuracy and Stability of Numerical Algorithms, ch. 14):
    |X̂ − X| <= C u |X| |T| |X|, u = 2⁻²⁴, plus the same bound at 2⁻⁵³ for X, the float64 inverse it is compared
    with. Above the diagonal T is ignored."""
    rng = np.random.default_rng(C)
    k = rng.normal(size=(HV, C, DK))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    beta = rng.uniform(0.0, 1.0, (HV, C, 1))
    diagonal = np.ones((HV, C)) if unit else rng.uniform(0.5, 2.0, (HV, C))
    T = np.tril((beta * k) @ k.transpose(0, 2, 1), -1) + diagonal[:, :, None] * np.eye(C)
    T = T.astype(np.float32)
    got = gdn.lower_inverse(T + np.triu(rng.normal(size=T.shape), 1).astype(np.float32))
    assert got.shape == T.shape and got.dtype == np.float32 and got.flags.c_contiguous
    assert np.array_equal(np.triu(got, 1), np.zeros_like(got)), "nonzero above the diagonal"
    want = np.float32(1) / diagonal.astype(np.float32)
    assert np.array_equal(np.diagonal(got, axis1=1, axis2=2), want), "a diagonal other than 1 / T's"
    X = np.tril(np.linalg.inv(T.astype(np.float64)))  # LU's pivoting leaves ~1e-16 above the diagonal
    bound = C * (2.0**-24 + 2.0**-53) * (np.abs(X) @ np.abs(T.astype(np.float64)) @ np.abs(X))
    excess = np.abs(got - X) - bound
    assert excess.max() <= 0, f"C={C}: |X̂ - X| over the bound by {excess.max():.3g}"
