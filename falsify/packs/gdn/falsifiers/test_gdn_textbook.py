"""A third Gated DeltaNet, written here from the paper's recurrence, that both engine kernels must match.

Yang, Kautz, Hatamizadeh, "Gated Delta Networks" (arXiv 2412.06464), eq. (10), with the state S_t: [dv, dk]:

    S_t = S_{t-1} (α_t (I − β_t k_t k_tᵀ)) + β_t v_t k_tᵀ,        o_t = S_t q_t

with q_t, k_t L2-normalised (q also scaled by dk^-1/2, as Qwen3.5 does), β_t = σ(b_t) and the Mamba-2 gate
α_t = exp(−exp(A_log) · softplus(a_t + dt_bias)). Nothing here is imported from `reference/`: the heads, the gate
parameters A_log and dt_bias come from the tiny checkpoint's config.json and safetensors, read directly; the
twin runs in float64 with the matrices formed as the paper writes them (I − β k kᵀ), an operation order neither
engine kernel uses. The engine kernels are reached through `engine.gdn_kernels()` (the state there is [Hv, dk, dv],
the transpose of the paper's).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

import falsify
from falsify.untrusted import safefile

ODD_LENGTHS = [1, 63, 75, 150, 500]


def softplus(x: np.ndarray) -> np.ndarray:
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0)


def textbook_gated_delta_net(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, alpha: np.ndarray, beta: np.ndarray, S0: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """q, k: [T, Hk, dk] normalised; v: [T, Hv, dv]; alpha, beta: [T, Hv]; S0: [Hv, dv, dk] -> o [T, Hv, dv], S.

    Value head h reads key head h // (Hv / Hk) (Qwen3.5's grouped heads). Float64 throughout.
    """
    T, Hk, dk = k.shape
    Hv = v.shape[1]
    group = Hv // Hk
    S = S0.astype(np.float64).copy()
    o = np.zeros((T, Hv, v.shape[2]))
    eye = np.eye(dk)
    heads = np.arange(Hv) // group  # value head h reads key head h // group
    for t in range(T):  # every head at once: [Hv, ...] stacks of the per-head matrices
        kt, qt = k[t, heads].astype(np.float64), q[t, heads].astype(np.float64)  # [Hv, dk]
        vt = v[t].astype(np.float64)  # [Hv, dv]
        a, b = alpha[t].astype(np.float64)[:, None, None], beta[t].astype(np.float64)[:, None, None]
        S = S @ (a * (eye - b * (kt[:, :, None] * kt[:, None, :]))) + b * (vt[:, :, None] * kt[:, None, :])
        o[t] = (S @ qt[:, :, None])[:, :, 0]
    return o, S


def checkpoint_gates(path: Path, layer: int) -> tuple[dict, np.ndarray, np.ndarray]:
    """The config and (A_log, dt_bias) of GDN layer `layer` of an HF checkpoint, read without the engine."""
    from safetensors.numpy import load_file

    config = read_config(path)
    tensors = load_file(str(path / "model.safetensors"))
    prefix = f"model.layers.{layer}.linear_attn."
    return (
        config,
        tensors[prefix + "A_log"].astype(np.float64),
        tensors[prefix + "dt_bias"].astype(np.float64),
    )


def inputs(config: dict, A_log: np.ndarray, dt_bias: np.ndarray, length: int, seed: int):
    """Raw projections drawn at random, then normalised and gated here: q, k, v, alpha, beta (f64), S0 [Hv,dv,dk]."""
    Hk, Hv = config["linear_num_key_heads"], config["linear_num_value_heads"]
    dk, dv = config["linear_key_head_dim"], config["linear_value_head_dim"]
    rng = np.random.default_rng(seed)
    q_raw = rng.normal(size=(length, Hk, dk))
    k_raw = rng.normal(size=(length, Hk, dk))
    v = rng.normal(size=(length, Hv, dv))
    a = rng.normal(0.0, 2.0, (length, Hv))  # in_proj_a output: spans the softplus knee
    b = rng.normal(0.0, 2.0, (length, Hv))  # in_proj_b output
    q = q_raw / np.sqrt((q_raw**2).sum(-1, keepdims=True)) / np.sqrt(dk)
    k = k_raw / np.sqrt((k_raw**2).sum(-1, keepdims=True))
    alpha = np.exp(-np.exp(A_log) * softplus(a + dt_bias))
    beta = 1.0 / (1.0 + np.exp(-b))
    S0 = rng.normal(0.0, 0.5, (Hv, dv, dk))
    return q, k, v, alpha, beta, S0


@cache
def textbook_case(
    path: Path, layer: int, length: int
) -> tuple[dict, tuple[np.ndarray, ...], np.ndarray, np.ndarray]:
    """GDN layer `layer`'s config, inputs (q, k, v, alpha, beta, S0) and the twin's (o, S) on them, per process: they
    depend on neither the engine's kernel nor the test, and each kernel compares with the same ones (the twin's
    Python loop, run again per kernel, was 0.6 s CPU of the gate, issue #28). The arrays are read-only."""
    config, A_log, dt_bias = checkpoint_gates(path, layer)
    case = inputs(config, A_log, dt_bias, length, seed=100 * layer + length)
    o_ref, S_ref = textbook_gated_delta_net(*case)
    for x in (*case, o_ref, S_ref):
        x.setflags(write=False)
    return config, case, o_ref, S_ref


def read_config(path: Path) -> dict:
    """The checkpoint's config.json through falsify's file layer and bounded JSON reader: the engine's weights
    are its data, read as untrusted (a FIFO, /dev/zero or a 5,000-digit integer is a named error)."""
    return safefile.read_json(path / "config.json", limit=2**20, what="config.json")


@pytest.fixture(scope="module")
def tiny_path(engine) -> Path:
    return Path(engine.tiny_model_path())


def gdn_layers(path: Path) -> list[int]:
    types = read_config(path)["layer_types"]
    return [i for i, t in enumerate(types) if t == "linear_attention"]


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max(initial=0.0))


@pytest.mark.falsifies("FALSIFY-GDN-009")
@pytest.mark.parametrize("length", ODD_LENGTHS)
@pytest.mark.parametrize("kernel", ["recurrent", "chunked-64", "chunked-17"])
def test_kernels_match_textbook_twin(engine, tiny_path: Path, kernel: str, length: int) -> None:
    kernels = engine.gdn_kernels()
    layers = gdn_layers(tiny_path)
    assert layers, "the tiny model has no GDN layer"
    for layer in layers:
        config, (q, k, v, alpha, beta, S0), o_ref, S_ref = textbook_case(tiny_path, layer, length)
        f32 = [x.astype(np.float32) for x in (q, k, v, np.log(alpha), beta)]
        state = np.ascontiguousarray(S0.transpose(0, 2, 1)).astype(np.float32)  # engine layout [Hv, dk, dv]
        if kernel == "recurrent":
            chunk_size = 1
            o, S = kernels.naive_recurrent_gated_delta_rule(*f32, state)
        else:
            chunk_size = int(kernel.split("-")[1])
            o, S = kernels.chunk_gated_delta_rule(*f32, state, chunk_size=chunk_size)
        assert o.shape == o_ref.shape and S.shape == S_ref.transpose(0, 2, 1).shape
        falsify.check(
            "FALSIFY-GDN-009",
            out_diff=max_abs(o, o_ref),
            out_scale=float(np.abs(o_ref).max()),
            state_diff=max_abs(S, S_ref.transpose(0, 2, 1)),
            state_scale=float(np.abs(S_ref).max()),
            length=length,
            chunk_size=chunk_size,
            dk=config["linear_key_head_dim"],
            layer=layer,
        )


def test_textbook_twin_is_the_delta_rule() -> None:
    """The twin itself, on cases solvable by hand: with α = β = 1 a unit key's slot is overwritten by v."""
    k = np.zeros((1, 1, 2))
    k[0, 0, 0] = 1.0
    v = np.array([[[3.0, -2.0]]])
    S0 = np.array([[[5.0, 7.0], [1.0, 4.0]]])  # [Hv, dv, dk]
    _, S = textbook_gated_delta_net(k, k, v, np.ones((1, 1)), np.ones((1, 1)), S0)
    # column 0 (key direction e0) replaced by v; column 1 untouched
    np.testing.assert_array_equal(S[0], [[3.0, 7.0], [-2.0, 4.0]])
    # with β = 0 the state only decays, and the output reads it
    o, S = textbook_gated_delta_net(k, k, v, np.full((1, 1), 0.5), np.zeros((1, 1)), S0)
    np.testing.assert_array_equal(S[0], 0.5 * S0[0])
    np.testing.assert_array_equal(o[0, 0], [2.5, 0.5])
