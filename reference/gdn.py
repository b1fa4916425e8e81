"""Gated DeltaNet, the linear-attention mixer of Qwen3.5 (transformers' Qwen3_5GatedDeltaNet), in numpy.

Per value head, with a recurrent state S: [dk, dv] kept in float32,

    S ← S · exp(g_t)
    S ← S + k_t ⊗ β_t (v_t − Sᵀ k_t)        (the delta rule: write only what S does not already predict)
    o_t = Sᵀ q_t

Two twins compute it: `naive_recurrent_gated_delta_rule` (token by token, the slow reference) and
`chunk_gated_delta_rule` (the WY/UT form of flash-linear-attention and HF's torch_chunk_gated_delta_rule, which
the model runs). The chunked form cuts the last chunk short instead of zero-padding it, so padding can never
reach the state (HF transformers issue #46873 was padding leaking into the chunked state).
"""

from __future__ import annotations

import numpy as np

from reference.config import Config
from reference.weights import GDNWeights

HALF, ONE = np.float32(0.5), np.float32(1)  # numpy scalars: a Python float costs each operation a conversion


def sigmoid(x: np.ndarray) -> np.ndarray:
    return HALF * (ONE + np.tanh(HALF * x))  # tanh form never overflows; float32 in, float32 out (no copy)


def silu(x: np.ndarray) -> np.ndarray:
    return x * sigmoid(x)


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(np.float32(0), x)


def l2norm(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:  # [..., d] -> [..., d]
    # same as l2norm in modeling_qwen3_5; np.add.reduce is .sum() without its Python frames
    return x / np.sqrt(np.add.reduce(x * x, -1, keepdims=True) + np.float32(eps))


def gdn_gate(
    A_log: np.ndarray, a: np.ndarray, dt_bias: np.ndarray
) -> np.ndarray:  # [Hv], [T, Hv], [Hv] -> [T, Hv]
    """Log-decay g = −exp(A_log) · softplus(a + dt_bias); the state is multiplied by exp(g) ∈ (0, 1]."""
    return -np.exp(A_log) * softplus(a + dt_bias)


def expand_heads(x: np.ndarray, n_heads: int) -> np.ndarray:  # [T, Hk, d] -> [T, Hv, d]
    """Value head h reads key head h // (Hv / Hk), as torch.repeat_interleave(dim=2) in HF's kernels."""
    return np.repeat(x, n_heads // x.shape[1], axis=1)


def naive_recurrent_gated_delta_rule(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray, state: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """q, k: [T, Hk, dk]; v: [T, Hv, dv]; g, beta: [T, Hv]; state: [Hv, dk, dv] -> o [T, Hv, dv], state.

    q arrives normalised and scaled; the input state is not modified.
    """
    q, k, v, g, beta, S = (np.asarray(x, dtype=np.float32) for x in (q, k, v, g, beta, state))
    n_v = v.shape[1]
    q, k = expand_heads(q, n_v), expand_heads(k, n_v)
    o = np.empty(v.shape, np.float32)
    for t in range(len(v)):
        S = S * np.exp(g[t])[:, None, None]
        kv_mem = (k[t][:, None, :] @ S)[:, 0]  # Sᵀ k: [Hv, dv]
        delta = beta[t][:, None] * (v[t] - kv_mem)
        S = S + k[t][:, :, None] * delta[:, None, :]
        o[t] = (q[t][:, None, :] @ S)[:, 0]
    return o, S


def chunk_gated_delta_rule(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    g: np.ndarray,
    beta: np.ndarray,
    state: np.ndarray,
    chunk_size: int = 64,
) -> tuple[np.ndarray, np.ndarray]:
    """Same contract as naive_recurrent_gated_delta_rule, computed `chunk_size` tokens at a time.

    Within a chunk of C tokens (per head, Γ_i = Σ_{s≤i} g_s, D_ij = exp(Γ_i − Γ_j) for j ≤ i else 0):
    T = I + strictly_lower((β k) kᵀ ∘ D) is unit lower triangular and
    v_new = T⁻¹(β v) − T⁻¹(β k ∘ exp Γ) S;  o = (q ∘ exp Γ) S + (q kᵀ ∘ D) v_new;
    S ← exp(Γ_C) S + (k ∘ exp(Γ_C − Γ))ᵀ v_new.
    """
    q, k, v, g, beta, S = (np.asarray(x, dtype=np.float32) for x in (q, k, v, g, beta, state))
    n_v = v.shape[1]
    # heads first: [Hv, T, d]
    q, k = (expand_heads(x, n_v).transpose(1, 0, 2) for x in (q, k))
    v, g, beta = v.transpose(1, 0, 2), g.T, beta.T
    o = np.empty(v.shape, np.float32)
    for s in range(0, v.shape[1], chunk_size):
        e = min(s + chunk_size, v.shape[1])  # the last chunk is cut short, never padded
        o[:, s:e], S = _chunk(q[:, s:e], k[:, s:e], v[:, s:e], g[:, s:e], beta[:, s:e], S)
    return o.transpose(1, 0, 2), S


def _chunk(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray, S: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One chunk, heads first: q, k: [H, C, dk]; v: [H, C, dv]; g, beta: [H, C]; S: [H, dk, dv]."""
    C = v.shape[1]
    gc = np.cumsum(g, axis=1)  # Γ: [H, C]
    lower = np.arange(C)[:, None] >= np.arange(C)  # [C, C]: j <= i
    # mask before exp: above the diagonal Γ_i − Γ_j > 0 could overflow
    D = np.exp(np.where(lower, gc[:, :, None] - gc[:, None, :], -np.inf))  # [H, C, C]
    k_beta = k * beta[:, :, None]
    T = (k_beta @ k.transpose(0, 2, 1)) * D  # lower_inverse reads only its strictly lower part and diagonal,
    T.reshape(len(T), C * C)[:, :: C + 1] = 1  # set here through a view: T = I + strictly_lower((β k) kᵀ ∘ D)
    decay = np.exp(gc)[:, :, None]  # [H, C, 1]
    rhs = np.concatenate([v * beta[:, :, None], k_beta * decay], axis=2)
    solved = lower_inverse(T) @ rhs
    u, w = solved[:, :, : v.shape[2]], solved[:, :, v.shape[2] :]
    v_new = u - w @ S  # [H, C, dv]
    o = (q * decay) @ S + ((q @ k.transpose(0, 2, 1)) * D) @ v_new
    decay_to_end = np.exp(gc[:, -1:] - gc)[:, :, None]  # [H, C, 1]
    S = S * np.exp(gc[:, -1])[:, None, None] + (k * decay_to_end).transpose(0, 2, 1) @ v_new
    return o, S


def lower_inverse(T: np.ndarray) -> np.ndarray:  # [H, C, C] -> [H, C, C]
    """Inverse of lower triangular matrices by doubling, as flash-linear-attention's solve_tril: a block
    [[A, 0], [B, D]] has the inverse [[A⁻¹, 0], [−D⁻¹ B A⁻¹, D⁻¹]], so from the diagonal's reciprocals up,
    log2(C) rounds of batched products build it (a third of np.linalg.solve's time for the chunk's T at C = 64,
    where LU pivoting finds nothing to do). T sits in the top-left corner of an identity of the next power of two:
    a block lower triangular matrix's inverse has the inverse of its top-left block in its top-left corner."""
    H, C, _ = T.shape
    levels = (C - 1).bit_length()
    P = 1 << levels
    full = np.eye(P, dtype=np.float32)[None].repeat(H, axis=0)  # [H, P, P]
    full[:, :C, :C] = T
    inv = np.eye(P, dtype=np.float32) / np.diagonal(full, axis1=1, axis2=2)[:, :, None]  # the 1x1 blocks
    for b in (1 << level for level in range(levels)):  # a bounded loop: no mutant of it can hang
        # the diagonal blocks of size 2b, each [[A, 0], [B, D]], as views [H, P / 2b, 2b, 2b]
        iv, tv = diagonal_blocks(inv, 2 * b), diagonal_blocks(full, 2 * b)
        iv[:, :, b:, :b] = -(iv[:, :, b:, b:] @ (tv[:, :, b:, :b] @ iv[:, :, :b, :b]))
    return np.ascontiguousarray(inv[:, :C, :C])


def diagonal_blocks(x: np.ndarray, size: int) -> np.ndarray:  # [H, P, P] -> [H, P / size, size, size], a view
    """Each matrix's diagonal blocks as a writable view, no copy: block n is x[:, ns : (n + 1)s, ns : (n + 1)s].
    np.ndarray over x's buffer checks the strides against the buffer's size (as_strided would not, at 5x the cost)."""
    H, P, _ = x.shape
    row, col = x.strides[1:]
    return np.ndarray((H, P // size, size, size), x.dtype, x, 0, (x.strides[0], size * (row + col), row, col))


def causal_conv1d(x: np.ndarray, conv_state: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depthwise causal conv, no bias. x: [T, D]; conv_state: [D, K] last K inputs; weight: [D, K] -> [T, D], state.

    Same as causal_conv1d_update in modeling_qwen3_5: output t sees inputs t−K+1 .. t, older ones from the state.
    """
    K = weight.shape[1]
    full = np.concatenate([conv_state.T, x], axis=0)  # [K + T, D]
    T = len(x)
    y = full[1 : 1 + T] * weight[:, 0]
    for j in range(1, K):
        y += full[1 + j : 1 + j + T] * weight[:, j]
    return y, np.ascontiguousarray(full[-K:].T)


def gated_rms_norm(x: np.ndarray, z: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """Qwen3_5RMSNormGated: RMSNorm over the last dim, weight used as is, times silu(z). [..., dv] -> [..., dv]."""
    x = x / np.sqrt(np.add.reduce(x * x, -1, keepdims=True) / np.float32(x.shape[-1]) + np.float32(eps))
    return weight * x * silu(z)


def gated_delta_net(
    w: GDNWeights,
    c: Config,
    x: np.ndarray,
    conv_state: np.ndarray,
    recurrent_state: np.ndarray,
    decays: list[np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One GDN mixer over a chunk. x: [T, hidden] -> out [T, hidden], conv_state [D, K], recurrent [Hv, dk, dv].

    `decays`, when given, receives this chunk's per-token decay exp(g): [T, Hv] (a probe for the contract).
    """
    T = len(x)
    hk, dk, hv, dv = (
        c.linear_num_key_heads,
        c.linear_key_head_dim,
        c.linear_num_value_heads,
        c.linear_value_head_dim,
    )
    proj = w.in_proj(x)  # [T, conv_dim | Hv dv | Hv | Hv]: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a
    z0, b0, a0 = c.conv_dim, c.conv_dim + hv * dv, c.conv_dim + hv * dv + hv
    mixed, conv_state = causal_conv1d(proj[:, :z0], conv_state, w.conv1d)
    mixed = silu(mixed)
    qk = l2norm(mixed[:, : 2 * hk * dk].reshape(T, 2 * hk, dk))  # q heads then k heads, each normalised alone
    q = qk[:, :hk] * np.float32(dk**-0.5)
    k = qk[:, hk:]
    v = mixed[:, 2 * hk * dk :].reshape(T, hv, dv)
    beta = sigmoid(proj[:, b0:a0])
    g = gdn_gate(w.A_log, proj[:, a0:], w.dt_bias)
    if decays is not None:
        decays.append(np.exp(g))
    if T == 1:  # a decode step: the recurrent form, as HF's Qwen3_5GatedDeltaNet does for seq_len == 1
        o, recurrent_state = naive_recurrent_gated_delta_rule(q, k, v, g, beta, recurrent_state)
    else:
        o, recurrent_state = chunk_gated_delta_rule(
            q, k, v, g, beta, recurrent_state, chunk_size=c.chunk_size
        )
    z = proj[:, z0:b0].reshape(T, hv, dv)
    o = gated_rms_norm(o, z, w.norm, c.rms_norm_eps)
    return w.out_proj(o.reshape(T, hv * dv)), conv_state, recurrent_state
