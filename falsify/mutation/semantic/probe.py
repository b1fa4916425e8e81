"""A pytest plugin for mutant runs (`-p falsify.mutation.semantic.probe`), configured through the environment:

- records the file each edited module was imported from, so the runner can prove the tests saw the mutated copy
  before it believes a survivor (mutmut proves the same with a forced-fail run; a path is cheaper and also
  catches an editable install shadowing the scratch copy), and the CPU time the run took;
- optionally ends the session (as failed, like -x) once every prediction a mutant must kill has turned red: the rest of the run
  could only confirm what is already known.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

MODULES_ENV = "FALSIFY_PROBE_MODULES"  # comma-separated module names
OUT_ENV = "FALSIFY_PROBE_OUT"  # where the JSON {"modules": {module: file or null}, "cpu": seconds} goes
STOP_ENV = "FALSIFY_STOP_WHEN_RED"  # comma-separated prediction ids


class StopWhenRed:
    def __init__(self, wanted: set[str]) -> None:
        self.wanted = wanted
        self.red: set[str] = set()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if report.failed:
            ids = {pid for mark in item.iter_markers("falsifies") for pid in mark.args}
            violated = getattr(call.excinfo.value, "prediction_id", None) if call.excinfo else None
            # Same rule as falsify.harness.results: a ContractViolation reddens its own prediction, anything else all of
            # the test's predictions.
            self.red |= {violated} if isinstance(violated, str) and violated in ids else ids
            if self.wanted <= self.red:
                item.session.shouldfail = "falsify: every prediction this mutant must kill is red"
        return report


def pytest_configure(config: pytest.Config) -> None:
    wanted = {p for p in os.environ.get(STOP_ENV, "").split(",") if p}
    if wanted:
        config.pluginmanager.register(StopWhenRed(wanted), "falsify-stop-when-red")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = os.environ.get(OUT_ENV)
    if not out:
        return
    names = [n for n in os.environ.get(MODULES_ENV, "").split(",") if n]
    times = os.times()
    found: dict[str, Any] = {
        "modules": {name: getattr(sys.modules.get(name), "__file__", None) for name in names},
        "cpu": times.user + times.system + times.children_user + times.children_system,
    }
    Path(out).write_text(json.dumps(found), encoding="utf-8")
