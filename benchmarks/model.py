"""Model speed on the embedded tiny model: prefill time vs prompt length, GDN-layer prefill cost, decode tokens/s.

For each prompt length L (256 ... 8192) and each weights kind: the median wall time of one forward over the
whole prompt (chunks of config.chunk_size), and of one Gated DeltaNet layer alone over L tokens in the same
chunks. GDN cost per token should stay flat as L grows (linear prefill); whole-model cost per token grows with L
through the one attention layer. Decode: one-token forwards after a prompt of C tokens, median ms per token.
Everything runs in one process, side by side; JSON on stdout (and to --out). Wall and CPU (process) time are
both reported: on a machine shared with other jobs, wall time mostly measures the wait for a core.

    python benchmarks/model.py [--lengths 256 512 ... 8192] [--weights f32 q4_k] [--repeats 3] [--out FILE]

BLAS runs single-threaded (OPENBLAS_NUM_THREADS=1 unless already set): the machine's cores are shared, and a
multi-threaded BLAS on these small matrices mostly measures contention.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import functools
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from measure import measured
from result_json import emit

from reference.gdn import gated_delta_net
from reference.model import Model, load_model
from reference.tiny import tiny_model
from reference.weights import GDNWeights


def median_time(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of fn(). CPU time is the steadier figure on a shared machine."""
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


def prefill(model: Model, tokens: np.ndarray) -> None:
    state = model.new_state()
    model.forward(tokens, state)
    state.release()


def gdn_layer(model: Model, x: np.ndarray) -> None:
    """The first GDN layer alone over x: [L, hidden], chunked as forward() chunks it, state carried."""
    c = model.config
    w = next(layer.mixer for layer in model.weights.layers if isinstance(layer.mixer, GDNWeights))
    conv = np.zeros((c.conv_dim, c.linear_conv_kernel_dim), np.float32)
    rec = np.zeros((c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim), np.float32)
    for s in range(0, len(x), c.chunk_size):
        _, conv, rec = gated_delta_net(w, c, x[s : s + c.chunk_size], conv, rec)


def decode_ms(model: Model, context: int, steps: int, rng: np.random.Generator) -> tuple[float, float]:
    """Median wall and CPU ms of a one-token forward after `context` prompt tokens."""
    state = model.new_state()
    model.forward(rng.integers(0, model.config.vocab_size, context), state)
    wall, cpu = [], []
    for token in rng.integers(0, model.config.vocab_size, steps):
        w, c = time.perf_counter(), time.process_time()
        model.forward([int(token)], state)
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    state.release()
    return statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192])
    parser.add_argument("--weights", nargs="+", default=["f32", "q4_k"], choices=["f32", "q4_k"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--decode-contexts", type=int, nargs="+", default=[256, 4096])
    parser.add_argument("--decode-steps", type=int, default=32)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    path = tiny_model(0)
    result: dict = {
        "benchmark": "model",
        "model": str(path),
        "repeats": args.repeats,
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpus": os.cpu_count(),
            "blas_threads": os.environ["OPENBLAS_NUM_THREADS"],
        },
        "runs": {},
    }
    for kind in args.weights:
        with measured() as loading:
            model = load_model(path, kind)
        run: dict = {
            "load_s": round(loading.wall_s, 3),
            "loading": loading.figures(),
            "prefill": [],
            "decode": [],
        }
        prefill(model, rng.integers(0, model.config.vocab_size, 64))  # warm-up
        for length in args.lengths:
            tokens = rng.integers(0, model.config.vocab_size, length)
            x = rng.normal(size=(length, model.config.hidden_size)).astype(np.float32)
            t_model = median_time(functools.partial(prefill, model, tokens), args.repeats)
            t_gdn = median_time(functools.partial(gdn_layer, model, x), args.repeats)
            row = {
                "tokens": length,
                "load_1m": os.getloadavg()[0],  # the machine is shared: each row beside the load it ran under
                "prefill_s": round(t_model[0], 4),
                "prefill_cpu_s": round(t_model[1], 4),
                "prefill_cpu_us_per_token": round(t_model[1] / length * 1e6, 1),
                "gdn_layer_s": round(t_gdn[0], 4),
                "gdn_layer_cpu_s": round(t_gdn[1], 4),
                "gdn_cpu_us_per_token": round(t_gdn[1] / length * 1e6, 1),
            }
            run["prefill"].append(row)
            print(kind, json.dumps(row), file=sys.stderr)
        first, last = run["prefill"][0], run["prefill"][-1]
        # 1.0 = perfectly linear; the GDN layer should stay near 1, the whole model grows with the attention layer
        run["gdn_cpu_per_token_growth"] = round(
            last["gdn_cpu_us_per_token"] / first["gdn_cpu_us_per_token"], 2
        )
        run["model_cpu_per_token_growth"] = round(
            last["prefill_cpu_us_per_token"] / first["prefill_cpu_us_per_token"], 2
        )
        for context in args.decode_contexts:
            wall, cpu = decode_ms(model, context, args.decode_steps, rng)
            run["decode"].append(
                {
                    "context": context,
                    "load_1m": os.getloadavg()[0],
                    "ms_per_token": round(wall, 3),
                    "cpu_ms_per_token": round(cpu, 3),
                    "tokens_per_s": round(1e3 / wall, 1),
                    "tokens_per_cpu_s": round(1e3 / cpu, 1),
                }
            )
            print(kind, json.dumps(run["decode"][-1]), file=sys.stderr)
        result["runs"][kind] = run
    return emit(result, args.out, indent=1)


if __name__ == "__main__":
    sys.exit(main())
