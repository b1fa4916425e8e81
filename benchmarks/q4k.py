"""Q4_K speed on one 4096 x 4096 Gaussian matrix, medians of repeats, every ratio measured side by side.

python benchmarks/q4k.py [--rows 4096] [--cols 4096] [--repeats 7] [--quant-repeats 3] [--out FILE]
python benchmarks/q4k.py --quantize-vs REV [--quant-repeats 15] [--out FILE]

Targets: matvec <= 5x a dense float32 matvec and >= 10x faster than gguf dequantize + matmul; quantize <= 3x
llama.cpp's C quantize_row_q4_K_ref (through ggml-python, when installed). Each repeat runs every contender once
in turn, so a load spike on the shared machine hits all of them; the ratios are of the medians.

--quantize-vs REV times only Q4_K.quantize, on the matrices one load of the tiny model quantizes (17 of them,
~2M weights: what every model load in the gate pays), this tree's against reference/q4k.py at git revision REV,
interleaved, and checks both give the same bytes.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from result_json import emit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(
    0, str(ROOT / "tests" / "data" / "q4k")
)  # testkit_q4k_cases: the data classes and the C quantizer

import testkit_q4k_cases as cases  # noqa: E402  (after the path inserts, so the benchmark runs from a checkout)

from reference.q4k import Q4_K  # noqa: E402


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


CPU: dict[
    str, dict[str, float]
] = {}  # per table ("quantize", "matvec", "matmul"): contender -> median CPU seconds
LOADS: list[float] = []  # the 1-minute load average around each table


def medians(contenders: dict[str, Callable[[], object]], repeats: int, table: str) -> dict[str, float]:
    """Median wall seconds of each contender, run round-robin `repeats` times after one warm-up call each; the
    median CPU seconds go to CPU[table], the load average before and after to LOADS."""
    for fn in contenders.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    LOADS.append(os.getloadavg()[0])
    for _ in range(repeats):
        for name, fn in contenders.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    LOADS.append(os.getloadavg()[0])
    CPU[table] = {name: statistics.median(cs) for name, cs in cpu.items()}
    return {name: statistics.median(ts) for name, ts in times.items()}


def tiny_model_matrices() -> list[np.ndarray]:
    """The float32 matrices a load of the tiny model hands Q4_K.quantize, in order."""
    from reference import tiny
    from reference.model import load_model

    seen: list[np.ndarray] = []
    quantize = Q4_K.__dict__["quantize"]

    def record(cls: type[Q4_K], x: np.ndarray) -> np.ndarray:
        seen.append(x.copy())
        return quantize.__func__(cls, x)

    Q4_K.quantize = classmethod(record)  # type: ignore[method-assign, assignment]
    try:
        load_model(tiny.tiny_model())
    finally:
        Q4_K.quantize = quantize  # type: ignore[method-assign]
    return seen


def quantize_vs(rev: str, repeats: int) -> dict[str, Any]:
    """Q4_K.quantize of this tree against reference/q4k.py at REV, on the tiny model's matrices, interleaved."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:reference/q4k.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "q4k_at_rev.py"
        path.write_text(source, encoding="utf-8")
        spec = importlib.util.spec_from_file_location("q4k_at_rev", path)
        assert spec is not None and spec.loader is not None
        before = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(before)
    mats = tiny_model_matrices()
    contenders = {"before": before.Q4_K.quantize, "after": Q4_K.quantize}
    same = all(np.array_equal(contenders["before"](m), contenders["after"](m)) for m in mats)
    wall: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    load = [os.getloadavg()[0]]
    for _ in range(repeats):
        for name, fn in contenders.items():
            t0, c0 = time.perf_counter(), time.process_time()
            for m in mats:
                fn(m)
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    load.append(os.getloadavg()[0])
    median_cpu = {name: statistics.median(cs) for name, cs in cpu.items()}
    return {
        "benchmark": "q4k-quantize-vs",
        "before_rev": rev,
        "matrices": [list(m.shape) for m in mats],
        "weights": int(sum(m.size for m in mats)),
        "repeats": repeats,
        "same_bytes": same,
        "median_seconds": {name: statistics.median(ts) for name, ts in wall.items()},
        "median_cpu_seconds": median_cpu,
        "cpu_seconds": cpu,
        "cpu_before_over_after": median_cpu["before"] / median_cpu["after"],
        "load_1m_range": [min(load), max(load)],
        "env": {"numpy": np.__version__, "cpus": os.cpu_count()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quant-repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64, help="rows of x for the matmul (a prefill chunk)")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--quantize-vs", metavar="REV", help="only Q4_K.quantize, against reference/q4k.py at REV"
    )
    args = parser.parse_args()
    if args.quantize_vs:
        return emit(quantize_vs(args.quantize_vs, max(args.quant_repeats, 1)), args.out)

    rng = np.random.default_rng(0)
    W = rng.standard_normal((args.rows, args.cols), dtype=np.float32)
    x = rng.standard_normal(args.cols, dtype=np.float32)
    X = rng.standard_normal((args.batch, args.cols), dtype=np.float32)
    q = Q4_K.quantize(W)
    Wd = Q4_K.dequantize(q)  # the dense float32 contender multiplies the same (dequantized) weights

    try:
        lib = cases.ggml_base()
    except ImportError:
        lib = None
    try:
        import gguf
    except ImportError:
        gguf = None  # type: ignore[assignment]  # optional: the gguf contender is skipped

    quant: dict[str, Callable[[], object]] = {"ours": lambda: Q4_K.quantize(W)}
    if lib is not None:
        quant["c_ref"] = lambda: cases.c_quantize(lib, W.reshape(-1, 256))
    t_quant = medians(quant, args.quant_repeats, "quantize")

    # Writeable memory numpy does not own: never cached, so unpacked tile by tile on every call.
    q_cold = np.frombuffer(bytearray(q.tobytes()), np.uint8).reshape(q.shape)
    mv: dict[str, Callable[[], object]] = {
        "ours": lambda: Q4_K.matvec(q, x),
        "ours_uncached": lambda: Q4_K.matvec(q_cold, x),
        "dense_f32": lambda: Wd @ x,
    }
    mm: dict[str, Callable[[], object]] = {
        "ours": lambda: Q4_K.matmul(q, X),
        "ours_uncached": lambda: Q4_K.matmul(q_cold, X),
        "dense_f32": lambda: X @ Wd.T,
        "dense_f32_w_xT": lambda: (Wd @ X.T).T,  # the orientation ours uses; OpenBLAS threads it differently
    }
    if gguf is not None:

        def gguf_deq() -> np.ndarray:
            return gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q4_K)

        mv["gguf_dequantize_matmul"] = lambda: gguf_deq() @ x
        mm["gguf_dequantize_matmul"] = lambda: X @ gguf_deq().T
    t_mv = medians(mv, args.repeats, "matvec")
    t_mm = medians(mm, args.repeats, "matmul")

    ratios: dict[str, float] = {
        "matvec_over_dense_f32": t_mv["ours"] / t_mv["dense_f32"],
        "matvec_uncached_over_dense_f32": t_mv["ours_uncached"] / t_mv["dense_f32"],
        "matmul_over_dense_f32": t_mm["ours"] / min(t_mm["dense_f32"], t_mm["dense_f32_w_xT"]),
    }
    targets: dict[str, dict[str, Any]] = {
        "matvec <= 5x dense float32": {"value": ratios["matvec_over_dense_f32"], "met": None},
    }
    targets["matvec <= 5x dense float32"]["met"] = ratios["matvec_over_dense_f32"] <= 5
    if "gguf_dequantize_matmul" in t_mv:
        ratios["gguf_over_matvec"] = t_mv["gguf_dequantize_matmul"] / t_mv["ours"]
        ratios["gguf_over_matmul"] = t_mm["gguf_dequantize_matmul"] / t_mm["ours"]
        targets["matvec >= 10x faster than gguf dequantize+matmul"] = {
            "value": ratios["gguf_over_matvec"],
            "met": ratios["gguf_over_matvec"] >= 10,
        }
    if "c_ref" in t_quant:
        ratios["quantize_over_c_ref"] = t_quant["ours"] / t_quant["c_ref"]
        targets["quantize <= 3x C reference"] = {
            "value": ratios["quantize_over_c_ref"],
            "met": ratios["quantize_over_c_ref"] <= 3,
        }

    result = {
        "benchmark": "q4k",
        "shape": [args.rows, args.cols],
        "matmul_batch": args.batch,
        "repeats": {"quantize": args.quant_repeats, "matvec_matmul": args.repeats},
        "median_seconds": {"quantize": t_quant, "matvec": t_mv, "matmul": t_mm},
        "median_cpu_seconds": CPU,  # process CPU (user + system): BLAS threads included
        "load_1m_range": [min(LOADS), max(LOADS)],  # around the timed runs
        "ratios": ratios,
        "targets": targets,
        "env": {
            "numpy": np.__version__,
            "gguf": version("gguf"),
            "ggml-python": version("ggml-python"),
            "cpus": os.cpu_count(),
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
            "loadavg_1min": os.getloadavg()[0],
        },
    }
    return emit(result, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
