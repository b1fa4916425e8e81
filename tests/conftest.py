from __future__ import annotations

import os
import shutil
import tempfile

import pytest

pytest_plugins = ["pytester"]

# The suite starts many gates, on xdist's two workers already: each gate runs its falsifiers in one pytest process
# (`falsify gate --jobs`, falsify/harness/shards.py), unless a test asks for more (tests/test_gate_jobs.py does).
os.environ.setdefault("FALSIFY_GATE_JOBS", "1")

# tox -e py runs the suite on two pytest-xdist workers, one test file at a time each (--dist loadfile), in collection
# order (--no-loadscope-reorder). These files take minutes (test_wire_reference 30 s of set-up, 83 s and 163 s;
# test_wire_node 150 s; the gate's stubborn-falsifier test 55 s; mutmut on the toy 48 s; the OpenAI server's mutants
# 43 s; measured at load 1.3-4.0, 2026-12-01): they go first, longest first, so that neither worker is left alone
# with one of them at the end. Only the order changes, and only in xdist's workers (each sorts alike).
SLOW_FIRST = (
    "tests/test_wire_reference.py",
    "tests/test_wire_node.py",
    "tests/fuzz/test_gate_hostile.py",
    "tests/test_mutmut_runner.py",
    "tests/test_openai_pack.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):
        return
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    items.sort(
        key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank))
    )  # stable: the rest keep their order


def pytest_configure(config: pytest.Config) -> None:
    """The mutants' control key (falsify/mutation/semantic/control.py) lives in the user's state directory: the
    suite, and every falsify it starts, keeps one of its own in a scratch directory, never the user's."""
    if "FALSIFY_STATE_DIR" not in os.environ:
        state = tempfile.mkdtemp(prefix="falsify-test-state-")
        os.environ["FALSIFY_STATE_DIR"] = state
        config.add_cleanup(lambda: shutil.rmtree(state, ignore_errors=True))
