"""Decode stall behind a new prompt: stepped prefill (one chunk per round) vs the whole prompt in one round.

Two streams are decoding when a prompt of L tokens (256 ... 8192) arrives. For each L and each mode the lane
host runs until the new prompt's first token, and one round more; we report, medians over repeats, the
decoding streams' largest gap between two tokens (in rounds, in prompt tokens prefilled between them, in
stepped chunks, and in ms) and the new prompt's time to first token (rounds and ms). "whole" is the same host
with a chunk cap covering the whole prompt, so both modes run in one process, side by side, on the same model.
Token times are taken when the model returns the logits a token is sampled from (a recorder around the model),
so host bookkeeping does not blur them.

    python benchmarks/stall.py [--lengths 256 512 ... 8192] [--chunk-cap 256] [--repeats 3] [--out FILE]

BLAS runs single-threaded (OPENBLAS_NUM_THREADS=1 unless already set): the machine's 2 cores are shared, and a
multi-threaded BLAS on small matrices mostly measures contention.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from result_json import emit

from falsify.harness.instruments import CountingModel
from reference.lanes import LaneHost
from reference.model import load_model
from reference.tiny import tiny_model

LENGTHS = (256, 512, 1024, 2048, 4096, 8192)
PAGE_SIZE = 16


class Clock(CountingModel):
    """The harness's CountingModel, also stamping when each forward call's logits are ready (perf_counter)."""

    ready: list[float]  # one stamp per call in `calls`, same order

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        object.__setattr__(self, "ready", [])  # CountingModel refuses plain attribute writes

    def forward(self, tokens: Any, state: Any) -> Any:
        logits = super().forward(tokens, state)
        self.ready.append(time.perf_counter())
        return logits


def one_run(model: Any, length: int, chunk_cap: int, unit: int) -> dict[str, float]:
    """Two decoding streams, then a prompt of `length`; run until its first token, and one round more.

    unit: the stepped chunk cap, in which the prefill between two decode tokens is counted for both modes.
    """
    rng = np.random.default_rng(length)
    clock = Clock(model)
    rounds_needed = -(-length // chunk_cap)
    pages = 2 * -(-(16 + rounds_needed + 8) // PAGE_SIZE) + -(-(length + 1) // PAGE_SIZE) + 4
    host = LaneHost(clock, chunk_cap=chunk_cap, pages=pages, page_size=PAGE_SIZE, max_streams=3)
    others = [
        host.submit(rng.integers(0, model.config.vocab_size, 16).tolist(), rounds_needed + 8)
        for _ in range(2)
    ]
    while not all(host.tokens(s) for s in others):
        host.round()
    before = {s: len(host.tokens(s)) for s in others}
    start_call = len(clock.calls)
    t0, c0 = time.perf_counter(), time.process_time()
    new = host.submit(rng.integers(0, model.config.vocab_size, length).tolist(), 2)
    rounds = 0
    while not host.tokens(new):
        host.round()
        rounds += 1
    ttft_ms, ttft_cpu_ms = 1e3 * (time.perf_counter() - t0), 1e3 * (time.process_time() - c0)
    host.round()  # the decoding streams' next tokens: the gap that spans the last (or only) prefill chunk
    new_stream = (
        2  # streams are numbered in the order of their first forward: the two others, then the new one
    )
    gap_rounds = max(g for s in others for g in host.decode_gaps(s)[before[s] - 1 :])
    gap_ms, gap_tokens = 0.0, 0
    for stream in (0, 1):
        last, prefilled = None, 0
        for i, (call, t) in enumerate(
            zip(clock.calls, clock.ready, strict=True)
        ):  # gaps ending after the submit
            if call.stream == stream:
                if last is not None and i >= start_call:
                    gap_ms = max(gap_ms, 1e3 * (t - last))
                    gap_tokens = max(gap_tokens, prefilled)
                last, prefilled = t, 0
            elif call.stream == new_stream:
                prefilled += len(call.tokens)
    return {
        "max_gap_rounds": gap_rounds,
        "max_gap_ms": gap_ms,
        "max_prefill_tokens_between": gap_tokens,
        "max_gap_chunks": gap_tokens / unit,
        "ttft_rounds": rounds,
        "ttft_ms": ttft_ms,
        "ttft_cpu_ms": ttft_cpu_ms,
        "load_1m": os.getloadavg()[0],  # the machine is shared: each run beside the load it ran under
    }


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--chunk-cap", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    model = load_model(tiny_model(seed=0), weights="f32")
    size = model.config.chunk_size
    if args.chunk_cap % size:
        parser.error(f"--chunk-cap {args.chunk_cap} is not a multiple of the model's chunk_size {size}")
    one_run(model, 256, args.chunk_cap, args.chunk_cap)  # warm-up: first-touch allocations, BLAS start-up
    rows = []
    for length in args.lengths:
        whole_cap = -(-length // size) * size  # one chunk covers the whole prompt
        stepped, whole = [], []
        for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits both modes alike
            stepped.append(one_run(model, length, args.chunk_cap, args.chunk_cap))
            whole.append(one_run(model, length, whole_cap, args.chunk_cap))
        s, w = median_of(stepped), median_of(whole)
        rows.append(
            {
                "prompt_len": length,
                "stepped": s,
                "whole": w,
                "gap_ms_ratio_whole_over_stepped": w["max_gap_ms"] / s["max_gap_ms"],
                "ttft_ratio_stepped_over_whole": s["ttft_ms"] / w["ttft_ms"],
            }
        )
        print(
            f"L={length:5d}  stepped: gap {s['max_gap_rounds']:.0f} round / {s['max_gap_chunks']:.2f} chunk"
            f" / {s['max_gap_ms']:7.1f} ms, ttft {s['ttft_ms']:8.1f} ms   whole: gap"
            f" {w['max_gap_chunks']:.2f} chunk / {w['max_gap_ms']:8.1f} ms, ttft {w['ttft_ms']:8.1f} ms",
            file=sys.stderr,
        )
    report = {
        "benchmark": "stall",
        "model": "tiny-0 f32",
        "chunk_cap": args.chunk_cap,
        "decoding_streams": 2,
        "repeats": args.repeats,
        "statistic": "median over repeats",
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "rows": rows,
        "max_gap_chunks_stepped": max(r["stepped"]["max_gap_chunks"] for r in rows),
    }
    return emit(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
