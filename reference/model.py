"""The Qwen3.5-style hybrid decoder (transformers' Qwen3_5ForCausalLM, text only): Config + Weights, no state.

Each layer is x += mixer(rms_norm(x)); x += mlp(rms_norm(x)), the mixer being Gated DeltaNet or gated attention
as `layer_types` says. `forward(tokens, state)` serves prefill chunks and decode steps alike: it runs the whole
layer stack over `chunk_size` tokens at a time, chunks aligned to the call's first token, so a forward split
across calls at those cuts computes exactly what one call computes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from reference.attention import gated_attention, scaled_rms_norm
from reference.blas import one_blas_thread
from reference.config import Config
from reference.gdn import gated_delta_net, silu
from reference.state import PagePool, StreamState
from reference.weights import GDNWeights, MLPWeights, Weights, assemble, dense_state_dict, load_weights

DEFAULT_PAGE_SIZE = 16  # tokens per KV page


def mlp(w: MLPWeights, x: np.ndarray) -> np.ndarray:  # [T, hidden] -> [T, hidden], dense SwiGLU
    gate_up = w.gate_up_proj(x)  # [T, 2 intermediate]: gate_proj | up_proj
    n = w.gate_proj.rows
    return w.down_proj(silu(gate_up[:, :n]) * gate_up[:, n:])


class Model:
    def __init__(self, config: Config, weights: Weights, path: Path | None = None, kind: str = "f32") -> None:
        self.config = config
        self.weights = weights
        self.path = path
        self.kind = kind  # "f32" or "q4_k"

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Model({self.path}, weights={self.kind!r}, layers={''.join(t[0] for t in c.layer_types)}, "
            f"hidden={c.hidden_size}, vocab={c.vocab_size})"
        )

    def new_pool(self, pages: int, page_size: int = DEFAULT_PAGE_SIZE) -> PagePool:
        c = self.config
        return PagePool(pages, page_size, len(c.attn_layers), c.num_key_value_heads, c.head_dim)

    def new_state(self, pool: PagePool | None = None) -> StreamState:
        c = self.config
        if pool is None:
            pool = PagePool(
                4, DEFAULT_PAGE_SIZE, len(c.attn_layers), c.num_key_value_heads, c.head_dim, growable=True
            )
        elif pool.page_shape[0] != len(c.attn_layers) or pool.page_shape[2:] != (
            c.num_key_value_heads,
            c.head_dim,
        ):
            raise ValueError(
                f"new_state: pool pages hold {pool.page_shape} (layers, page_size, kv heads, head_dim), "
                f"model needs ({len(c.attn_layers)}, *, {c.num_key_value_heads}, {c.head_dim})"
            )
        n = len(c.gdn_layers)
        conv = [np.zeros((c.conv_dim, c.linear_conv_kernel_dim), np.float32) for _ in range(n)]
        recurrent = [
            np.zeros((c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim), np.float32)
            for _ in range(n)
        ]
        return StreamState(pool, conv, recurrent)

    def forward(self, tokens: Any, state: StreamState) -> np.ndarray:
        """Logits f32[len(tokens), vocab] of every token; advances `state` by len(tokens) positions.

        Bad input (token id out of range, too many positions, a foreign or released state) raises ValueError
        before the state is touched; PoolExhausted leaves it untouched too.
        """
        ids = self._check_tokens(tokens)
        self._check_state(state, len(ids))
        c = self.config
        logits = np.empty((len(ids), c.vocab_size), np.float32)
        if not len(ids):
            return logits
        state.reserve(state.pos + len(ids))
        for s in range(0, len(ids), c.chunk_size):
            logits[s : s + c.chunk_size] = self._chunk(ids[s : s + c.chunk_size], state)
        return logits

    def trace(self, tokens: Any, state: StreamState) -> dict[str, np.ndarray]:
        """forward(tokens, state) that also returns its insides, for comparison with another implementation:

        logits f32[T, vocab]; hidden f32[n_layers, T, hidden], each decoder layer's output (the residual stream
        after it, before the final norm); conv f32[n_gdn, conv_dim, K] and recurrent f32[n_gdn, Hv, dk, dv],
        each GDN layer's state after the call.
        """
        ids = self._check_tokens(tokens)
        self._check_state(state, len(ids))
        c = self.config
        logits = np.empty((len(ids), c.vocab_size), np.float32)
        hidden = np.empty((c.num_hidden_layers, len(ids), c.hidden_size), np.float32)
        if len(ids):
            state.reserve(state.pos + len(ids))
        for s in range(0, len(ids), c.chunk_size):
            layers: list[np.ndarray] = []
            logits[s : s + c.chunk_size] = self._chunk(ids[s : s + c.chunk_size], state, hidden=layers)
            hidden[:, s : s + c.chunk_size] = np.stack(layers)
        shape_c = (c.conv_dim, c.linear_conv_kernel_dim)
        shape_r = (c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim)
        return {
            "logits": logits,
            "hidden": hidden,
            "conv": np.stack(state.conv) if c.gdn_layers else np.zeros((0, *shape_c), np.float32),
            "recurrent": np.stack(state.recurrent) if c.gdn_layers else np.zeros((0, *shape_r), np.float32),
        }

    def gdn_decays(self, tokens: Any) -> np.ndarray:
        """Per-token decay exp(g) of every GDN layer over a fresh run of `tokens`: f32[n_gdn_layers, T, Hv]."""
        ids = self._check_tokens(tokens)
        state = self.new_state()
        self._check_state(state, len(ids))
        state.reserve(len(ids))
        probe: list[np.ndarray] = []
        for s in range(0, len(ids), self.config.chunk_size):
            self._chunk(ids[s : s + self.config.chunk_size], state, probe)
        n, hv = len(self.config.gdn_layers), self.config.linear_num_value_heads
        if not n:
            return np.zeros((0, len(ids), hv), np.float32)
        return np.stack([np.concatenate(probe[i::n]) for i in range(n)])

    def dense_state_dict(self) -> dict[str, np.ndarray]:
        """HF-named float32 tensors this model computes with (Q4_K projections dequantized), for oracles."""
        return dense_state_dict(self.weights, self.config)

    def _chunk(
        self,
        ids: np.ndarray,
        state: StreamState,
        probe: list[np.ndarray] | None = None,
        hidden: list[np.ndarray] | None = None,
    ) -> np.ndarray:
        """The whole layer stack over one chunk: ids [T] -> logits [T, vocab]; advances state.pos by T.

        `hidden`, when given, receives each layer's output [T, hidden] (a probe for oracles). BLAS runs on one
        thread throughout (reference/blas.py): the bytes must not depend on the thread count."""
        with one_blas_thread():
            return self._layers(ids, state, probe, hidden)

    def _layers(
        self,
        ids: np.ndarray,
        state: StreamState,
        probe: list[np.ndarray] | None,
        hidden: list[np.ndarray] | None,
    ) -> np.ndarray:
        c, w = self.config, self.weights
        x = w.embed_tokens[ids]  # [T, hidden]
        gdn_slot = attn_slot = 0
        for layer in w.layers:
            h = scaled_rms_norm(x, layer.input_scale, c.rms_norm_eps)
            if isinstance(layer.mixer, GDNWeights):
                h, state.conv[gdn_slot], state.recurrent[gdn_slot] = gated_delta_net(
                    layer.mixer, c, h, state.conv[gdn_slot], state.recurrent[gdn_slot], probe
                )
                gdn_slot += 1
            else:
                h = gated_attention(layer.mixer, c, h, state, attn_slot)
                attn_slot += 1
            x = x + h
            x = x + mlp(layer.mlp, scaled_rms_norm(x, layer.post_attention_scale, c.rms_norm_eps))
            if hidden is not None:
                hidden.append(x)
        state.pos += len(ids)
        return w.lm_head(scaled_rms_norm(x, w.norm_scale, c.rms_norm_eps))

    def _check_tokens(self, tokens: Any) -> np.ndarray:
        arr = np.asarray(tokens)
        if arr.ndim != 1:
            raise ValueError(f"forward: tokens must be a 1-D sequence of ids, got shape {arr.shape}")
        # np.issubdtype(arr.dtype, np.integer)'s own test, without its Python frames (a call per decode step)
        if arr.size and not issubclass(arr.dtype.type, np.integer):
            raise ValueError(f"forward: tokens must be integer ids, got dtype {arr.dtype}")
        ids = arr.astype(np.int64)
        bad = np.flatnonzero((ids < 0) | (ids >= self.config.vocab_size))
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"forward: token id {int(ids[i])} at position {i} is outside the vocabulary "
                f"[0, {self.config.vocab_size})"
            )
        return ids

    def _check_state(self, state: StreamState, n: int) -> None:
        c = self.config
        if not isinstance(state, StreamState):
            raise ValueError(
                f"forward: state must be a StreamState from new_state(), got {type(state).__name__}"
            )
        state._check_live()
        if len(state.conv) != len(c.gdn_layers) or any(
            s.shape != (c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim)
            for s in state.recurrent
        ):
            raise ValueError("forward: state was made by a model with another layout")
        if state.pos + n > c.max_position_embeddings:
            raise ValueError(
                f"forward: {state.pos} + {n} tokens exceed max_position_embeddings="
                f"{c.max_position_embeddings}"
            )


def load_model(path: str | Path, weights: str | None = None) -> Model:
    """Load an HF Qwen3.5 text checkpoint directory (config.json + *.safetensors), or a llama.cpp `qwen35`
    GGUF file (`*.gguf`, reference/gguf_io.py).

    weights: "q4_k" (the default for a checkpoint) quantizes every projection whose input dim is a multiple
    of 256 to Q4_K at load; "f32" keeps all dense; "stored" (the default for a GGUF) runs each tensor as the
    file stores it: Q4_K blocks through Q4_K.matmul, anything else dequantized to float32."""
    path = Path(path)
    if path.suffix == ".gguf":
        from reference.gguf_io import read_gguf

        weights = "stored" if weights is None else weights
        config, tensors = read_gguf(path)
        return Model(config, assemble(tensors, config, weights), path, weights)
    weights = "q4_k" if weights is None else weights
    config = Config.from_file(path / "config.json" if path.is_dir() else path.parent / "config.json")
    return Model(config, load_weights(path, config, weights), path, weights)
