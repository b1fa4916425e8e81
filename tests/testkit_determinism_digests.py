"""The digests FALSIFY-DET-001 compares (tests/test_determinism.py), and the child process that computes them under a
given BLAS thread count: `python tests/testkit_determinism_digests.py ENGINE` prints one JSON line. The child imports only
numpy and the engine (not pytest, not the contract loader): three of them start per gate run (issue #28)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any

import numpy as np

LENGTHS = (75, 150)  # prompt lengths of forward_digests


def _sha(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()


def product_digests(engine: Any) -> list[str]:
    """sha256 of unpinned float32 products x Wᵀ and W xᵀ at the engine's shapes (W: [out, in] over its hidden,
    intermediate and vocabulary sizes; x: the rows of each chunk forward_digests runs, and of a decode step), on
    whatever BLAS threads this process has."""
    c = engine.load_model(weights="f32").config
    sizes = sorted({int(getattr(c, n)) for n in ("hidden_size", "intermediate_size", "vocab_size")})
    chunk = int(c.chunk_size)
    rows = sorted({min(chunk, n - s) for n in LENGTHS for s in range(0, n, chunk)} | {1})
    rng = np.random.default_rng(0)
    out = []
    for m in sizes:
        for k in sizes:
            w = rng.standard_normal((m, k), dtype=np.float32)
            for n in rows:
                x = rng.standard_normal((n, k), dtype=np.float32)
                out.append(f"[{n},{k}]x[{m},{k}]T {_sha(x @ w.T)} {_sha(w @ x.T)}")
    return out


def forward_digests(engine: Any) -> list[str]:
    """Per weights kind and prompt: sha256 of a prefill's and four decode steps' logits, and the state digest.
    150 tokens cross the 64-token chunk grid; decode steps are one-token forwards on the carried state."""
    out = []
    for weights in ("f32", "q4_k"):
        model = engine.load_model(weights=weights)
        for length in LENGTHS:
            tokens = np.random.default_rng(length).integers(0, model.config.vocab_size, length + 4)
            state = model.new_state()
            logits = [model.forward(tokens[:length], state)]
            logits += [model.forward(tokens[t : t + 1], state) for t in range(length, length + 4)]
            digest = hashlib.sha256(b"".join(np.ascontiguousarray(x).tobytes() for x in logits)).hexdigest()
            out.append(f"{weights}-{length}: logits {digest} state {state.digest()}")
    return out


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())  # the project under test (a mutant's scratch copy runs from its own root)
    from falsify.engines.loading import load_engine

    loaded = load_engine(sys.argv[1])
    products = product_digests(loaded)  # before any forward: raw numpy at this process's thread count
    print(json.dumps({"products": products, "forwards": forward_digests(loaded)}))
