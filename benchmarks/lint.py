"""Lint throughput: 2,000 generated contracts (5 predictions each), median of repeats. Target: <= 3 s on 2 cores.

python benchmarks/lint.py [--contracts 2000] [--repeats 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from measure import measured, summary
from result_json import emit

from falsify.contracts.corpus import load_corpus

TEMPLATE = """\
contract: bench-{i:05d}-v1
version: 1.0.0
title: Generated contract {i}
description: A generated contract for the lint benchmark.
references: [https://example.org/{i}]
requires: [generate]
observables:
  emitted: {{meaning: tokens emitted, type: int, unit: tokens}}
  decode_forwards: {{meaning: decode forwards, type: int, unit: forwards}}
  polls: {{meaning: cancel polls, type: int}}
  tokens: {{meaning: token ids, type: list}}
  wasted_forwards: {{meaning: wasted forwards, type: int}}
predictions:
{predictions}
costs:
  - {{name: wasted_forwards, formula: wasted_forwards <= 0, per: request, checked_by: FALSIFY-BENCH{i:05d}-001}}
"""

PREDICTION = """\
  - id: FALSIFY-BENCH{i:05d}-{j:03d}
    claim: Claim {j} of contract {i}.
    formula: decode_forwards == emitted - 1 and polls == emitted + 1 and is_prefix(tokens[:n], tokens)
    domain:
      n: {{type: int, min: 1, max: 16, description: cancel budget}}
    if_fails: the poll moved
"""


def generate(directory: Path, count: int, per: int) -> None:
    for i in range(count):
        predictions = "".join(PREDICTION.format(i=i, j=j + 1) for j in range(per))
        (directory / f"bench-{i:05d}-v1.yaml").write_text(TEMPLATE.format(i=i, predictions=predictions))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contracts", type=int, default=2000)
    parser.add_argument("--predictions", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        generate(directory, args.contracts, args.predictions)
        runs = []
        for _ in range(args.repeats):
            with measured() as m:
                corpus = load_corpus([directory], mutant_universe=directory)
            runs.append(m)
            assert not corpus.problems, corpus.problems[:3]
            assert len(corpus.contracts) == args.contracts
    result = {
        "benchmark": "lint",
        "contracts": args.contracts,
        "predictions": args.contracts * args.predictions,
        "repeats": args.repeats,
        "seconds": [r.wall_s for r in runs],
        "median_seconds": statistics.median(r.wall_s for r in runs),
        "runs": [r.figures() for r in runs],  # wall, CPU and the load average of each repeat
        **summary(runs),
        "target_seconds": 3.0,
        "cores": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],  # the machine is shared: read the figure against this
        "ratio_to_target": statistics.median(r.wall_s for r in runs) / 3.0,
    }
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
