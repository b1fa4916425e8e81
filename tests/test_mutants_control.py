"""The mutants' control, stored and reused (falsify/mutation/semantic/control.py): reused on an unchanged tree,
never after an edit of the tree or of an engine installed outside it, and a corrupted entry refused by name and
run again. End to end on the toy project (tests/test_mutants_runner.py's fixture), one mutant per run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from test_mutants_runner import falsify, toy  # noqa: F401  (toy: the fixture)

from falsify.harness.results import Outcome, PredictionResult
from falsify.mutation.semantic import control
from falsify.untrusted import safefile

REUSED = "mutants: control reused from .falsify/control/"
RAN = "mutants: control green —"


def entries(root: Path) -> list[Path]:
    return sorted((root / ".falsify" / "control").glob("*.json"))


def key_of(root: Path, engine: str = "toy.engine:ToyEngine") -> str:
    return control.key(root, (), engine, "kills", ["poll-deleted"])


def test_an_unchanged_tree_reuses_the_control_and_an_edited_one_does_not(toy: Path) -> None:  # noqa: F811
    first = falsify(toy, "poll-deleted")
    assert first.returncode == 0, first.stdout + first.stderr
    assert RAN in first.stdout and REUSED not in first.stdout
    assert len(entries(toy)) == 1

    again = falsify(toy, "poll-deleted")
    out = again.stdout
    assert again.returncode == 0, out + again.stderr
    assert REUSED in out and RAN not in out
    assert "poll-deleted: KILLED" in out
    # the verdict line: the control apart from the mutants' time, and where it came from
    verdict = next(line for line in out.splitlines() if line.startswith("mutants: PASS"))
    assert "control reused from .falsify/control/" in verdict and "when recorded" in verdict
    assert "mutants " in verdict and "s wall, median" in verdict
    report = json.loads((toy / ".falsify" / "mutants" / "mutation-report.json").read_text(encoding="utf-8"))
    assert report["config"]["control"].startswith("reused from .falsify/control/")

    fresh = falsify(toy, "poll-deleted", "--fresh-control")
    assert fresh.returncode == 0 and RAN in fresh.stdout and REUSED not in fresh.stdout

    # any edit of the tree: another key, so the control runs again (and is stored beside the old entry)
    stored = key_of(toy)
    assert [p.stem for p in entries(toy)] == [stored]
    check = toy / "tests" / "check_toy.py"
    check.write_text(check.read_text(encoding="utf-8") + "\n# an edit\n", encoding="utf-8")
    assert key_of(toy) != stored
    edited = falsify(toy, "poll-deleted")
    assert edited.returncode == 0, edited.stdout + edited.stderr
    assert RAN in edited.stdout and REUSED not in edited.stdout
    assert len(entries(toy)) == 2


def test_the_key_follows_every_file_the_copy_holds_and_nothing_else(toy: Path) -> None:  # noqa: F811
    base = key_of(toy)
    # what a scratch copy leaves out does not count: caches, our own output
    (toy / "toy" / "__pycache__").mkdir()
    (toy / "toy" / "__pycache__" / "loop.cpython-311.pyc").write_bytes(b"\0")
    (toy / ".falsify").mkdir(exist_ok=True)
    (toy / ".falsify" / "anything").write_text("x", encoding="utf-8")
    assert key_of(toy) == base
    # the engine spec, the mutant set and the scope are part of it
    assert key_of(toy, "toy.engine:Other") != base
    assert control.key(toy, (), "toy.engine:ToyEngine", "kills", ["poll-after-forward"]) != base
    assert control.key(toy, (), "toy.engine:ToyEngine", "all", ["poll-deleted"]) != base
    # any file of the tree: content, a new file, a rename
    for edit in (
        lambda: (toy / "toy" / "engine.py").write_text("# engine edited\n", encoding="utf-8"),
        lambda: (toy / "contracts" / "new.txt").write_text("", encoding="utf-8"),
        lambda: (toy / "contracts" / "new.txt").rename(toy / "contracts" / "new2.txt"),
    ):
        before = key_of(toy)
        edit()
        assert key_of(toy) != before


def test_an_edit_of_an_engine_outside_the_tree_changes_the_key(
    toy: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outside = tmp_path / "site"
    (outside / "outside_engine").mkdir(parents=True)
    module = outside / "outside_engine" / "__init__.py"
    module.write_text("class Engine:\n    name = 'outside'\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(outside))
    spec = "outside_engine:Engine"
    base = key_of(toy, spec)
    assert key_of(toy, spec) == base
    module.write_text("class Engine:\n    name = 'edited'\n", encoding="utf-8")
    assert key_of(toy, spec) != base
    sys.modules.pop("outside_engine", None)


@pytest.mark.parametrize(
    ("corrupt", "why"),
    [
        (lambda text: text.replace('"ok": true', '"ok": false'), "its sha256 does not match its content"),
        (lambda text: text[: len(text) // 2], "not JSON"),
        (lambda text: "[1, 2]", "not a control entry"),
        (lambda text: text.replace('"version": 1', '"version": 0'), "entry format 0"),
    ],
    ids=["edited", "truncated", "not-an-entry", "old-format"],
)
def test_a_corrupted_entry_is_refused_by_name(tmp_path: Path, corrupt: object, why: str) -> None:
    entry = control.store(tmp_path, "a" * 64, _green_fields())
    assert control.load(tmp_path, "a" * 64) is not None
    assert callable(corrupt)
    entry.write_text(corrupt(entry.read_text(encoding="utf-8")), encoding="utf-8")
    with pytest.raises(control.CorruptEntry, match=why) as refused:
        control.load(tmp_path, "a" * 64)
    assert str(entry) in str(refused.value)


def test_a_corrupted_entry_is_refused_in_the_output_and_the_control_runs_again(toy: Path) -> None:  # noqa: F811
    entry = control.store(toy, key_of(toy), _green_fields())
    entry.write_text(entry.read_text(encoding="utf-8").replace('"ok": true', '"ok": false'), encoding="utf-8")
    result = falsify(toy, "poll-deleted")
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert f"mutants: stored control refused — {entry}: its sha256 does not match its content" in out
    assert RAN in out and REUSED not in out
    stored = control.load(toy, entry.stem)  # recomputed and stored again, over the corrupted one
    assert stored is not None and stored.fields["selected"] != _green_fields()["selected"]


def test_an_entry_under_another_key_is_refused(tmp_path: Path) -> None:
    path = control.store(tmp_path, "a" * 64, _green_fields())
    path.rename(control.path_of(tmp_path, "b" * 64))
    with pytest.raises(control.CorruptEntry, match="holds key 'aaaa"):
        control.load(tmp_path, "b" * 64)
    assert control.load(tmp_path, "c" * 64) is None  # none stored: run it


def test_only_the_most_recent_entries_are_kept(tmp_path: Path) -> None:
    keys = [f"{i:064x}" for i in range(control.KEEP + 3)]
    for i, k in enumerate(keys):
        path = control.store(tmp_path, k, _green_fields())
        os.utime(path, ns=(i * 10**9, i * 10**9))  # stored one second apart, oldest first
    kept = sorted(p.stem for p in (tmp_path / control.DIRECTORY).glob("*.json"))
    assert kept == sorted(keys[-control.KEEP :])


def _green_fields() -> dict[str, object]:
    return {
        "ok": True,
        "seconds": 1.5,
        "tests": {"tests/check_toy.py::test_x": ("FALSIFY-TOY-001",)},
        "rows": [],
        "detail": "",
        "imported": {"toy.loop": None},
        "selected": ("tests/check_toy.py::test_x",),
        "durations": {},
        "targets": {},
    }


def test_a_link_or_fifo_in_an_entrys_place_is_refused_never_followed(tmp_path: Path) -> None:
    """The store is read and written through the file layer: a FIFO is refused at once (no hang), a symlink is
    neither read nor written through (its target is untouched)."""
    path = control.path_of(tmp_path, "a" * 64)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    with pytest.raises(control.CorruptEntry, match="not a regular file"):
        control.load(tmp_path, "a" * 64)
    path.unlink()
    target = tmp_path / "elsewhere.json"
    target.write_text("{}", encoding="utf-8")
    path.symlink_to(target)
    with pytest.raises(control.CorruptEntry, match=str(path)):
        control.load(tmp_path, "a" * 64)
    with pytest.raises(safefile.FileLayerError, match="symlink"):
        control.store(tmp_path, "a" * 64, _green_fields())
    assert target.read_text(encoding="utf-8") == "{}"


def test_a_row_round_trips_and_a_row_with_other_fields_is_refused(tmp_path: Path) -> None:
    result = PredictionResult(
        "FALSIFY-TOY-001", "toy-v1", Outcome.PASS, ("t::a", "t::b"), (), 0.25, 3, "", {"n": [1, 2]},
        skipped=1, corners=("empty",), corners_reached=("empty",), cannot_show=True,
    )  # fmt: skip
    fields = {**_green_fields(), "rows": [result]}
    control.store(tmp_path, "a" * 64, fields)
    stored = control.load(tmp_path, "a" * 64)
    assert stored is not None and stored.fields["rows"] == [result]
    row = control._row(result)
    with pytest.raises(KeyError, match="a row's fields are"):
        control._unrow({**row, "extra": 1})
