"""Regenerate golden.bin / golden.json: llama.cpp's quantize_row_q4_K_ref bytes for a fixed set of inputs.

    pip install ggml-python==0.0.45 && python tests/data/q4k/make_golden.py

The inputs are not stored: each class is regenerated from numpy's default_rng(seed) by cases.py, and
golden.json keeps their sha256 so a test can tell a changed generator from a changed quantizer.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
BLOCKS_PER_CLASS = 24


def load_cases():
    spec = importlib.util.spec_from_file_location("q4k_cases", HERE / "cases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    cases = load_cases()
    lib = cases.ggml_base()
    entries, chunks = [], []
    for seed, kind in enumerate(cases.CLASSES, start=1000):
        x = cases.blocks_of(kind, seed, BLOCKS_PER_CLASS)
        q = cases.c_quantize(lib, x)
        entries.append(
            {
                "class": kind,
                "seed": seed,
                "blocks": BLOCKS_PER_CLASS,
                "inputs_sha256": hashlib.sha256(x.tobytes()).hexdigest(),
            }
        )
        chunks.append(q)
    data = np.concatenate(chunks).tobytes()
    (HERE / "golden.bin").write_bytes(data)
    meta = {
        "made_by": "tests/data/q4k/make_golden.py",
        "oracle": "quantize_row_q4_K_ref from libggml-base.so of ggml-python",
        "ggml_python_version": importlib.metadata.version("ggml-python"),
        "numpy_version": np.__version__,
        "block_bytes": cases.BLOCK_BYTES,
        "bytes_sha256": hashlib.sha256(data).hexdigest(),
        "cases": entries,
    }
    (HERE / "golden.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {len(data)} bytes, {len(data) // cases.BLOCK_BYTES} blocks")


if __name__ == "__main__":
    main()
