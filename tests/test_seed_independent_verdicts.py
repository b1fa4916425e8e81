"""Verdicts that do not depend on the draw (issue 45, item 4): a bug class a contract names is reached by explicit
examples in every run, so a mutant of that class is red whatever seed hypothesis draws its other examples from.

The re-poll-after-resume mutants (mutants/host-repolls-after-resume.yaml on the reference's lane host,
mutants/node-lane-repolls-after-resume.yaml on the Node example's, over the wire) are planted in a scratch copy of
this checkout, then the falsifiers of the predictions they list run under ten seeds (FALSIFY_HYPOTHESIS_SEED, as
`falsify gate` hands its seed to pytest; docs/cli.md): every run must be red on a listed prediction. `falsify
mutants` cannot show this: its profile is derandomized (one draw for every run).

Cost: 20 pytest runs, each stopped at its first failure (-x), ~4 s of CPU each (docs/development.md has the
figures): skipped in `tox -e py` unless FALSIFY_SEEDS is set; `.ci/run` runs it in the py env as a step of its own
(`FALSIFY_SEEDS=1 tox -e py -- tests/test_seed_independent_verdicts.py`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from testkit_gate_cli import PYTEST

from falsify.contracts.corpus import load_corpus
from falsify.mutation.semantic.edits import apply
from falsify.mutation.semantic.targets import apply_text, edit_of

ROOT = Path(__file__).resolve().parent.parent
NODE = shutil.which("node")
SEEDS = [str(s) for s in range(1, 11)]
LANE_FALSIFIERS = [
    "falsify/packs/serving/falsifiers/test_lanes_paths.py",
    "falsify/packs/serving/falsifiers/test_lanes_host.py",
]

pytestmark = [
    pytest.mark.seeds,
    pytest.mark.skipif(
        not os.environ.get("FALSIFY_SEEDS"),
        reason="ten seeds per mutant, a step of .ci/run: FALSIFY_SEEDS=1 tox -e py -- tests/test_seed_independent_verdicts.py",
    ),
]


def planted(mutant_id: str, tmp: Path) -> tuple[Path, str, tuple[str, ...]]:
    """A scratch copy of this checkout with the mutant's edit made: (the copy, the engine spec, the predictions the
    mutant lists)."""
    corpus = load_corpus(
        [ROOT / "falsify" / "packs" / "serving" / "contracts", ROOT / "mutants" / f"{mutant_id}.yaml"]
    )
    (m,) = corpus.mutants
    tree = tmp / "tree"
    skip = shutil.ignore_patterns(
        ".git", ".tox", ".falsify", "__pycache__", "*.egg-info", ".mypy_cache", ".ruff_cache"
    )
    shutil.copytree(ROOT, tree, ignore=skip)
    target = tree / m.file
    source = target.read_text(encoding="utf-8")
    edit = edit_of(m)
    mutated = (apply_text if m.op == "text" else apply)(source, edit, m.file).mutated
    assert mutated != source
    target.write_text(mutated, encoding="utf-8")
    engine = "reference" if m.engine is None else m.engine.replace("exec:node", f"exec:{NODE}", 1)
    return tree, engine, m.kills


@pytest.mark.parametrize("mutant_id", ["host-repolls-after-resume", "node-lane-repolls-after-resume"])
def test_a_repoll_after_resume_is_red_under_every_seed(tmp_path: Path, mutant_id: str) -> None:
    if mutant_id.startswith("node-") and NODE is None:
        pytest.skip("node (Node.js 20) is not on PATH")
    tree, engine, kills = planted(mutant_id, tmp_path)
    # a seeded, random draw: hypothesis' own default profile, named, since under CI (CI=true, or another CI variable
    # hypothesis recognises) the plugin and hypothesis would otherwise load the derandomized "ci" profile
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PYTHONPATH=str(tree), PYTHONHASHSEED="0", HYPOTHESIS_PROFILE="default")
    red: dict[str, list[str]] = {}
    for seed in SEEDS:
        results = tmp_path / f"results-{seed}.json"
        cmd = [*PYTEST, "-x", *LANE_FALSIFIERS, "--engine", engine, "--falsify-results", str(results)]
        proc = subprocess.run(
            cmd,
            cwd=tree,
            env={**env, "FALSIFY_HYPOTHESIS_SEED": seed},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        data = json.loads(results.read_text(encoding="utf-8"))
        assert data["hypothesis"]["seed"] == seed and not data["hypothesis"]["derandomize"], data[
            "hypothesis"
        ]
        observed = [(p, ob) for r in data["tests"].values() for p, ob in r.get("observations", {}).items()]
        red[seed] = sorted({p for p, ob in observed if ob["held"] < ob["checks"] and p in kills})
        assert proc.returncode == 1, (seed, proc.stdout[-3000:])
    assert all(red.values()), red
