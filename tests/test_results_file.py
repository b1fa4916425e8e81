"""The plugin's results file mid-run (compact, pre-encoded parts spliced in) holds what the final dump holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from falsify.harness.results import write_results


def test_a_compact_write_with_encoded_parts_reads_back_as_the_payload(tmp_path: Path) -> None:
    payload: dict[str, Any] = {
        "engine": "reference",
        "collected": [{"nodeid": "t.py::a", "predictions": ["X-001"], "path": "t.py"}],
        "counts": {"passed": 1},
        "tests": {"t.py::b": {"outcome": "not run"}, "t.py::a": {"outcome": "passed", "checks": [1, 2]}},
    }
    written = {"t.py::a": json.dumps(payload["tests"]["t.py::a"])}  # a finished test, encoded at its teardown
    compact, full = tmp_path / "compact.json", tmp_path / "full.json"
    write_results(compact, payload, written, {"collected": json.dumps(payload["collected"])})
    write_results(full, payload, None)
    assert json.loads(compact.read_text()) == json.loads(full.read_text()) == payload


def test_a_compact_write_without_other_fields_is_valid_json(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    write_results(out, {"tests": {}}, {}, {})
    assert json.loads(out.read_text()) == {"tests": {}}
