"""Model speed on the embedded tiny model: prefill time vs prompt length, GDN-layer prefill cost, decode tokens/s.

For each prompt length L (256 ... 8192) and each weights kind: the median wall time of one forward over the
whole prompt (chunks of config.chunk_size), and of one Gated DeltaNet layer alone over L tokens in the same
chunks. GDN cost per token should stay flat as L grows (linear prefill); whole-model cost per token grows with L
through the one attention layer. Decode: one-token forwards after a prompt of C tokens, median ms per token.
Everything runs in one process, side by side; JSON on stdout (and to --out). Wall and CPU (process) time are
both reported: on a machine shared with other jobs, wall time mostly measures the wait for a core.

    python benchmarks/model.py [--lengths 256 512 ... 8192] [--weights f32 q4_k] [--repeats 3] [--out FILE]
    python benchmarks/model.py --against REV [--rounds 7] [--same-process]

--against REV compares this tree's engine with the engine of git revision REV on the forward mix the gate runs
(f32 weights, contexts under ~200 tokens): a decode step and prefill calls of 8, 40, 64 and 150 tokens. Each
round runs one child process per engine, in alternating order (ABBA), each child importing its own reference/;
the report gives every round's CPU ms beside the load average it ran under, and the medians side by side.
With --same-process both engines are imported into this one process (each a fresh `reference` package) and
called by turns, call size by call size, which the machine's phases hit alike: on the project's 2-core VM two
child processes a second apart differ by up to ±40 %, one process's two copies of one tree by ±2 %. Its report
adds each call size's paired median (after / before, pair by pair).

BLAS runs single-threaded (OPENBLAS_NUM_THREADS=1 unless already set): the machine's cores are shared, and a
multi-threaded BLAS on these small matrices mostly measures contention.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import contextlib
import functools
import importlib
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from measure import measured
from result_json import emit

from reference.gdn import gated_delta_net
from reference.model import Model, load_model
from reference.tiny import tiny_model
from reference.weights import GDNWeights

ROOT = Path(__file__).resolve().parent.parent


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


MIX = (1, 8, 40, 64, 150)  # tokens per forward call; 1 is a decode step


def gate_mix(model: Model, rounds: int, rng: np.random.Generator) -> dict[str, float]:
    """Median CPU ms of each forward call size of MIX, every call after a 30-token prompt on a fresh state."""
    cpu: dict[int, list[float]] = {n: [] for n in MIX}
    for _ in range(rounds):
        for n in MIX:
            state = model.new_state()
            model.forward(rng.integers(0, model.config.vocab_size, 30), state)
            calls = 20 if n == 1 else 1  # a decode step is short: time 20 in a row
            tokens = rng.integers(0, model.config.vocab_size, (calls, n))
            c = time.process_time()
            for row in tokens:
                model.forward(row, state)
            cpu[n].append((time.process_time() - c) / calls * 1e3)
            state.release()
    return {f"cpu_ms_{n}_tokens": round(statistics.median(v), 4) for n, v in cpu.items()}


def mix_child(rounds: int) -> int:
    """One side of --against: the gate mix on the reference/ this interpreter imports, as one JSON line."""
    import reference

    model = load_model(tiny_model(0), "f32")
    load = os.getloadavg()[0]
    figures = gate_mix(model, rounds, np.random.default_rng(0))
    print(json.dumps({"reference": reference.__file__, "load_1m": round(load, 2), **figures}))
    return 0


@contextlib.contextmanager
def engine_of(rev: str) -> Iterator[str]:
    """A scratch directory holding git revision REV's reference/, for the life of the block."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev, "reference"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield tmp


def against(rev: str, rounds: int) -> dict:
    """The gate mix of REV's engine and of this tree's, one child process each per round, in ABBA order."""
    with engine_of(rev) as tmp:
        trees = {"before": tmp, "after": str(ROOT)}
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        for r in range(rounds):
            for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
                env = {**os.environ, "PYTHONPATH": trees[side]}
                out = subprocess.run(
                    [sys.executable, __file__, "--mix-child", "15"], env=env, capture_output=True, text=True
                )
                if out.returncode:
                    raise SystemExit(f"benchmarks/model.py: the {side} child failed:\n{out.stderr}")
                row = json.loads(out.stdout)
                assert Path(row.pop("reference")).is_relative_to(trees[side]), (
                    "child imported the wrong engine"
                )
                runs[side].append(row)
                print(side, json.dumps(row), file=sys.stderr)
    keys = [k for k in runs["after"][0] if k.startswith("cpu_ms")]
    median = {
        side: {k: round(statistics.median(r[k] for r in rows), 4) for k in keys}
        for side, rows in runs.items()
    }
    return {
        "benchmark": "model --against",
        "before": rev,
        "after": "working tree",
        "rounds": rounds,
        "median": median,
        "after_over_before": {k: round(median["after"][k] / median["before"][k], 3) for k in keys},
        "runs": runs,
    }


def _import_engine(tree: str) -> Model:
    """The f32 tiny model of the reference/ under `tree`, imported afresh (its modules replace any in sys.modules)."""
    for name in [k for k in sys.modules if k == "reference" or k.startswith("reference.")]:
        del sys.modules[name]
    sys.path.insert(0, tree)
    try:
        engine = importlib.import_module("reference.model")
        assert Path(str(engine.__file__)).is_relative_to(tree), f"imported {engine.__file__}, not {tree}'s"
        return engine.load_model(importlib.import_module("reference.tiny").tiny_model(0), "f32")
    finally:
        sys.path.remove(tree)


def same_process(rev: str, rounds: int) -> dict:
    """The gate mix of REV's engine and of this tree's in this one process, by turns (ABBA) call by call."""
    with engine_of(rev) as tmp:
        models = {"before": _import_engine(tmp), "after": _import_engine(str(ROOT))}
        cpu: dict[str, dict[int, list[float]]] = {side: {n: [] for n in MIX} for side in models}
        rng = np.random.default_rng(0)
        load = [os.getloadavg()[0]]
        for r in range(rounds):
            for n in MIX:
                prompt = rng.integers(0, 512, 30)
                tokens = rng.integers(0, 512, (20 if n == 1 else 1, n))  # a decode step is short: 20 in a row
                for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
                    model = models[side]
                    state = model.new_state()
                    model.forward(prompt, state)
                    c = time.process_time()
                    for row in tokens:
                        model.forward(row, state)
                    cpu[side][n].append((time.process_time() - c) / len(tokens) * 1e3)
                    state.release()
        load.append(os.getloadavg()[0])
    keys = {n: f"cpu_ms_{n}_tokens" for n in MIX}
    median = {
        side: {keys[n]: round(statistics.median(v), 4) for n, v in rows.items()} for side, rows in cpu.items()
    }
    paired = {
        keys[n]: round(
            statistics.median(a / b for a, b in zip(cpu["after"][n], cpu["before"][n], strict=True)), 3
        )
        for n in MIX
    }
    return {
        "benchmark": "model --against --same-process",
        "before": rev,
        "after": "working tree",
        "rounds": rounds,
        "load_1m": [round(x, 2) for x in load],
        "median": median,
        "after_over_before": {k: round(median["after"][k] / median["before"][k], 3) for k in paired},
        "paired_after_over_before": paired,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--against", metavar="REV", help="compare the gate mix with git revision REV's engine"
    )
    parser.add_argument("--rounds", type=int, default=7, help="--against: child processes per engine")
    parser.add_argument(
        "--same-process", action="store_true", help="--against: both engines in this process, by turns"
    )
    parser.add_argument("--mix-child", type=int, metavar="ROUNDS", help=argparse.SUPPRESS)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192])
    parser.add_argument("--weights", nargs="+", default=["f32", "q4_k"], choices=["f32", "q4_k"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--decode-contexts", type=int, nargs="+", default=[256, 4096])
    parser.add_argument("--decode-steps", type=int, default=32)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.mix_child:
        return mix_child(args.mix_child)
    if args.against:
        compare = same_process if args.same_process else against
        return emit(compare(args.against, args.rounds), args.out, indent=1)

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
