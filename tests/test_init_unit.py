"""reference/__init__.py: the public names resolve lazily to the objects their modules define."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import reference

# the public names, each where its module defines it
EXPORTS = [
    "reference.cancel.CancelToken",
    "reference.lanes.LaneHost",
    "reference.model.load_model",
    "reference.q4k.Q4_K",
    "reference.session.Session",
    "reference.tiny.tiny_model",
]


@pytest.mark.parametrize("dotted", EXPORTS)
def test_export_is_the_modules_object(dotted: str) -> None:
    module, _, name = dotted.rpartition(".")
    assert getattr(reference, name) is getattr(importlib.import_module(module), name)


def test_all_lists_the_exports() -> None:
    assert reference.__all__ == sorted(dotted.rpartition(".")[2] for dotted in EXPORTS)


def test_unknown_name() -> None:
    with pytest.raises(AttributeError) as e:
        reference.tiny_modle  # noqa: B018 (the attribute access is the test)
    assert str(e.value) == "module 'reference' has no attribute 'tiny_modle'"
    assert not hasattr(reference, "weights_of")


def test_import_loads_nothing_else() -> None:
    code = "import sys, reference; print(sorted(m for m in sys.modules if m.startswith('reference')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "['reference']"
