"""The mutants' control, stored and reused (falsify/mutation/semantic/control.py): reused on an unchanged tree,
never after an edit of the tree or of an engine installed outside it, and a corrupted entry refused by name and
run again. End to end on the toy project (tests/test_mutants_runner.py's fixture), one mutant per run."""

from __future__ import annotations

import hashlib
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
        (
            lambda text: text.replace('"ok": true', '"ok": false'),
            "its HMAC does not match this user's control key",
        ),
        (lambda text: text[: len(text) // 2], "not JSON"),
        (lambda text: "[1, 2]", "not a control entry"),
        (lambda text: text.replace('"version": 2', '"version": 1'), "entry format 1"),
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
    assert (
        f"mutants: stored control refused — {entry}: its HMAC does not match this user's control key" in out
    )
    assert RAN in out and REUSED not in out
    stored = control.load(toy, entry.stem)  # recomputed and stored again, over the corrupted one
    assert stored is not None and stored.fields["selected"] != _green_fields()["selected"]


def test_an_entry_under_another_key_is_refused(tmp_path: Path) -> None:
    path = control.store(tmp_path, "a" * 64, _green_fields())
    path.rename(control.path_of(tmp_path, "b" * 64))
    with pytest.raises(control.CorruptEntry, match="holds key 'aaaa"):
        control.load(tmp_path, "b" * 64)
    assert control.load(tmp_path, "c" * 64) is None  # none stored: run it


def forge(root: Path, entry_key: str, fields: dict[str, object], secret: bytes) -> Path:
    """An entry as a forger writes it: the right format, `entry_key` and a MAC under `secret` (not the user's)."""
    import hashlib
    import hmac

    body = {
        "version": control.VERSION,
        "key": entry_key,
        "recorded": "2026-12-07T00:00:00Z",
        "control": fields,
    }
    mac = hmac.new(secret, json.dumps(body, sort_keys=True).encode(), hashlib.sha256).hexdigest()
    path = control.path_of(root, entry_key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**body, "hmac": mac}), encoding="utf-8")
    return path


def test_a_forged_or_copied_entry_is_refused_by_name(tmp_path: Path) -> None:
    """Issue #48: an entry is reused only when this user's falsify wrote it. One copied from another tree with
    its key and checksum rewritten, and one MACed under another key (another user's, another machine's), are
    refused by name; the user's own entry is read."""
    other, mine = tmp_path / "other", tmp_path / "mine"
    green = control.store(other, "a" * 64, _green_fields())
    body = json.loads(green.read_text(encoding="utf-8"))
    body["key"] = "b" * 64
    del body["hmac"]
    body["sha256"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()  # as v1 checked
    copied = control.path_of(mine, "b" * 64)
    copied.parent.mkdir(parents=True)
    copied.write_text(json.dumps(body), encoding="utf-8")
    why = "its HMAC does not match this user's control key"
    with pytest.raises(control.CorruptEntry, match=why) as refused:
        control.load(mine, "b" * 64)
    assert f"{copied}: " in str(refused.value) and "forged" in str(refused.value)
    stored = json.loads(green.read_text(encoding="utf-8"))["control"]
    forged = forge(mine, "c" * 64, stored, b"\x01" * control.KEY_BYTES)
    with pytest.raises(control.CorruptEntry, match=why):
        control.load(mine, "c" * 64)
    assert control.load(other, "a" * 64) is not None
    assert forged.exists()


def test_a_forged_entry_never_decides_the_verdict(toy: Path) -> None:  # noqa: F811
    """End to end: a forged green entry under the tree's own key is refused in the output and the control runs."""
    path = forge(toy, key_of(toy), _green_fields(), b"\x02" * control.KEY_BYTES)  # rows: none to convert
    result = falsify(toy, "poll-deleted")
    out = result.stdout
    assert f"mutants: stored control refused — {path}: its HMAC does not match" in out, out + result.stderr
    assert RAN in out and REUSED not in out


@pytest.mark.parametrize("case", ["inside", "readable", "short"])
def test_a_key_that_cannot_be_trusted_stores_and_reuses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """A control key inside the project, one others may read, or one that is not 32 bytes: NoKey, by name; the
    control is neither stored nor reused with it."""
    root, state = tmp_path / "root", tmp_path / "state"
    root.mkdir()
    if case == "inside":
        state = root / ".state"
    monkeypatch.setenv("FALSIFY_STATE_DIR", str(state))
    named = {"inside": "lies inside the project", "readable": "mode 644", "short": "is not 32 bytes of hex"}[
        case
    ]
    if case != "inside":
        state.mkdir()
        (state / control.KEY_NAME).write_text("ab" * (control.KEY_BYTES if case == "readable" else 3))
        os.chmod(state / control.KEY_NAME, 0o644 if case == "readable" else 0o600)
    with pytest.raises(control.NoKey, match=named):
        control.store(root, "a" * 64, _green_fields())
    assert not control.path_of(root, "a" * 64).exists()


def test_the_key_is_made_once_for_this_user_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FALSIFY_STATE_DIR", str(tmp_path / "state"))
    control.store(tmp_path / "root", "a" * 64, _green_fields())
    key_file = tmp_path / "state" / control.KEY_NAME
    made = key_file.read_bytes()
    assert key_file.stat().st_mode & 0o777 == 0o600 and len(bytes.fromhex(made.decode())) == control.KEY_BYTES
    control.store(tmp_path / "root", "b" * 64, _green_fields())
    assert key_file.read_bytes() == made
    assert control.load(tmp_path / "root", "a" * 64) is not None


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
