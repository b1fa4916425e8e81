"""Falsifier of contracts/engine-determinism-v1.yaml: the same forwards in fresh processes under 1, 2 and 3 BLAS
threads, and in the test process itself, must give the same bytes. The children run this file as a script and
load the engine the session tests (`--engine`) by name."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import falsify


def forward_digests(engine: Any) -> list[str]:
    """Per weights kind and prompt: sha256 of a prefill's and four decode steps' logits, and the state digest.
    150 tokens cross the 64-token chunk grid; decode steps are one-token forwards on the carried state."""
    out = []
    for weights in ("f32", "q4_k"):
        model = engine.load_model(weights=weights)
        for length in (75, 150):
            tokens = np.random.default_rng(length).integers(0, model.config.vocab_size, length + 4)
            state = model.new_state()
            logits = [model.forward(tokens[:length], state)]
            logits += [model.forward(tokens[t : t + 1], state) for t in range(length, length + 4)]
            digest = hashlib.sha256(b"".join(np.ascontiguousarray(x).tobytes() for x in logits)).hexdigest()
            out.append(f"{weights}-{length}: logits {digest} state {state.digest()}")
    return out


def child_digests(engine_spec: str, threads: int) -> list[str]:
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    done = subprocess.run(
        [sys.executable, __file__, engine_spec],
        env=env,
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"child under {threads} BLAS threads failed:\n{done.stderr[-3000:]}"
    return list(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.falsifies("FALSIFY-DET-001")
def test_bytes_do_not_depend_on_blas_threads(engine, request: pytest.FixtureRequest) -> None:
    # The engine as the plugin resolved it (--engine, FALSIFY_ENGINE, then [tool.falsify] engine): the option
    # alone is None when the engine comes from the configuration.
    core = request.config.pluginmanager.get_plugin("falsify-core")
    assert core is not None, "the falsify plugin is not active"
    spec = core.engine_spec()
    one = child_digests(spec, 1)
    for threads in (2, 3):
        other = child_digests(spec, threads)
        falsify.check("FALSIFY-DET-001", digests_a=one, digests_b=other, threads_a=1, threads_b=threads)
    # and this process, whatever thread count its environment gave it
    falsify.check(
        "FALSIFY-DET-001", digests_a=one, digests_b=forward_digests(engine), threads_a=1, threads_b=0
    )


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())  # the project under test (a mutant's scratch copy runs from its own root)
    from falsify.engines.loading import load_engine

    print(json.dumps(forward_digests(load_engine(sys.argv[1]))))
