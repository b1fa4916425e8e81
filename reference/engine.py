"""The reference engine as seen by the falsifiers: the `engine` fixture's default.

Falsifiers never import reference modules directly; they go through an engine object so that another engine can
be swapped in (falsify gate --engine NAME). Each method imports its module lazily so that an engine lacking one
capability still serves the others.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any


class ReferenceEngine:
    name = "reference"
    # The capabilities contracts can `require` (contract-v1.schema.json, `requires`).
    capabilities = frozenset({"quant", "model", "generate", "prefill", "lanes", "sample", "trace", "gguf"})

    def supports(self, capability: str) -> str | None:
        """None when the capability is supported, else the reason it is not."""
        return None if capability in self.capabilities else f"reference engine has no {capability!r}"

    def q4_k(self) -> Any:
        from reference.q4k import Q4_K

        return Q4_K

    def tiny_model_path(self) -> Path:
        from reference.tiny import tiny_model

        return tiny_model(seed=0)

    def load_model(self, weights: str = "f32") -> Any:
        return _load_tiny(weights)

    def load_checkpoint(self, path: str | Path, weights: str = "f32") -> Any:
        """A model from an HF Qwen3.5 checkpoint directory (config.json + *.safetensors)."""
        from reference.model import load_model

        return load_model(path, weights=weights)

    def export_gguf(self, checkpoint: str | Path, out: str | Path, weights: str = "f32") -> Path:
        """The checkpoint written as a llama.cpp qwen35 GGUF (weights "f32" or "q4_k"), as reference.gguf_io does."""
        from reference.gguf_io import write_gguf

        return write_gguf(checkpoint, out, weights=weights)

    def trace(self, model: Any, tokens: Any, state: Any) -> dict[str, Any]:
        """One forward that also reports its insides: logits [T, vocab], every decoder layer's output
        [n_layers, T, hidden], and after the call each GDN layer's conv [conv_dim, K] and recurrent state."""
        return model.trace(tokens, state)

    def gdn_kernels(self) -> Any:
        """The Gated DeltaNet twins: `.naive_recurrent_gated_delta_rule` and `.chunk_gated_delta_rule`."""
        from reference import gdn

        return gdn

    def session(self, model: Any) -> Any:
        from reference.session import Session

        return Session(model)

    def cancel_token(self) -> Any:
        from reference.cancel import CancelToken

        return CancelToken

    def prefill(self, model: Any, state: Any, prompt: Any, **kw: Any) -> Any:
        from reference.prefill import Prefill

        return Prefill.open(model, state, prompt, **kw)

    def sampler(
        self, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None, seed: int = 0
    ) -> Any:
        from reference.sampling import Sampler

        return Sampler(temperature, top_k, seed, top_p)

    def greedy(self) -> Any:
        from reference.sampling import greedy

        return greedy

    def lane_host(self, model: Any, **kw: Any) -> Any:
        from reference.lanes import LaneHost

        return LaneHost(model, **kw)


@cache
def _load_tiny(weights: str) -> Any:
    from reference.model import load_model
    from reference.tiny import tiny_model

    return load_model(tiny_model(seed=0), weights=weights)
