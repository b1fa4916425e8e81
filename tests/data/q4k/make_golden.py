"""Regenerate golden.bin / golden.json / hard.bin / hard_inputs.bin: llama.cpp's quantize_row_q4_K_ref bytes for a
fixed set of inputs.

    pip install ggml-python==0.0.45 && python tests/data/q4k/make_golden.py

The inputs of the 13 data classes are not stored: each is regenerated from numpy's default_rng(seed) by testkit_q4k_cases.py,
and golden.json keeps their sha256 so a test can tell a changed generator from a changed quantizer. The hard
cases' inputs are stored (hard_inputs.bin, float32 little-endian), since `requant_ties` is built with the C
quantizer itself.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
from pathlib import Path

import numpy as np
import testkit_q4k_cases as cases  # beside this script, so on the path when it runs

HERE = Path(__file__).parent
BLOCKS_PER_CLASS = 24
HARD_BLOCKS = {"requant_ties": 32}  # 16 for the other hard classes


def main() -> None:
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
    hard_entries, hard_x, hard_q = [], [], []
    for seed, kind in enumerate(cases.HARD_CLASSES, start=2000):
        blocks = HARD_BLOCKS.get(kind, 16)
        x = cases.hard_blocks_of(kind, seed, blocks, lambda v: cases.c_quantize(lib, v))
        q = cases.c_quantize(lib, x)
        assert np.isfinite(cases.c_dequantize(lib, q)).all(), f"{kind}: fp16 scales overflowed"
        ties = cases.requant_ties(x, q)
        hard_entries.append(
            {
                "class": kind,
                "seed": seed,
                "blocks": blocks,
                "blocks_with_requant_ties": int((ties > 0).sum()),
                "requant_ties": int(ties.sum()),
            }
        )
        hard_x.append(x)
        hard_q.append(q)
    hard_inputs = np.concatenate(hard_x).astype("<f4").tobytes()
    hard = np.concatenate(hard_q).tobytes()
    (HERE / "hard_inputs.bin").write_bytes(hard_inputs)
    (HERE / "hard.bin").write_bytes(hard)
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
        "hard_inputs_sha256": hashlib.sha256(hard_inputs).hexdigest(),
        "hard_bytes_sha256": hashlib.sha256(hard).hexdigest(),
        "hard_cases": hard_entries,
    }
    (HERE / "golden.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(
        f"wrote {len(data)} bytes, {len(data) // cases.BLOCK_BYTES} blocks; hard cases {len(hard) // cases.BLOCK_BYTES} blocks"
    )
    for e in hard_entries:
        print(f"  {e['class']}: {e['blocks']} blocks, {e['blocks_with_requant_ties']} with requant ties")


if __name__ == "__main__":
    main()
