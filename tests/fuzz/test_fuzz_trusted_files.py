"""What falsify trusts is verified (issue #48, Build 1), fuzzed: drawn edits of a stored control and of an installed
pack. A stored control is read back only when the file is byte for byte the one this user's falsify wrote; any
other (bytes flipped, fields changed, its key renamed, its checksum or MAC recomputed under another key) is a
CorruptEntry naming the file. An installed pack's RECORD check finds a difference exactly when the pack's files
differ from those its RECORD lists. In process, in scratch directories: a case costs milliseconds."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from falsify.contracts import pack_record
from falsify.mutation.semantic import control

GREEN = {
    "ok": True,
    "seconds": 1.5,
    "tests": {"tests/check_toy.py::test_x": ["FALSIFY-TOY-001"]},
    "rows": [],
    "detail": "",
    "imported": {"toy.loop": None},
    "selected": ["tests/check_toy.py::test_x"],
    "durations": {},
    "targets": {},
}
KEY = "a" * 64

edits = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 10**6), st.just(0)),
    st.tuples(
        st.just("field"),
        st.sampled_from(["ok", "seconds", "selected", "key", "version", "recorded"]),
        st.integers(0, 3),
    ),
    st.tuples(st.just("remac"), st.binary(min_size=1, max_size=64), st.just(0)),
    st.tuples(st.just("checksum"), st.just(""), st.just(0)),
)


def _edited(text: str, edit: tuple[str, object, int]) -> str:
    kind, where, n = edit
    if kind == "flip":
        raw = bytearray(text.encode())
        raw[int(str(where)) % len(raw)] ^= n
        return raw.decode("utf-8", "replace")
    if kind == "cut":
        return text[: int(str(where)) % len(text)]
    entry = json.loads(text)
    mac = entry.pop("hmac")
    if kind == "field":
        values: dict[str, list[Any]] = {
            "ok": [False, 1, None, "true"],
            "seconds": [0, -1, 1e308, "1"],
            "selected": [[], ["x"], None, [1]],
        }
        where = str(where)
        if where in ("key", "version", "recorded"):
            entry[where] = ["b" * 64, 1, 3, "x"][n]
        else:
            entry["control"][where] = values[where][n]
        entry["hmac"] = mac
    elif kind == "remac":  # a forger's MAC under a key of its own
        body = json.dumps(entry, sort_keys=True).encode()
        assert isinstance(where, bytes)
        entry["hmac"] = hmac.new(where, body, hashlib.sha256).hexdigest()
    else:  # the checksum the store once carried, recomputed
        entry["sha256"] = hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()
    return json.dumps(entry, indent=1, sort_keys=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edit=edits)
def test_a_stored_control_is_read_back_only_as_it_was_written(
    tmp_path: Path, edit: tuple[str, object, int]
) -> None:
    root = tmp_path / "root"
    shutil.rmtree(root, ignore_errors=True)
    path = control.store(root, KEY, dict(GREEN))
    written = path.read_text(encoding="utf-8")
    text = _edited(written, edit)
    path.write_text(text, encoding="utf-8")
    try:
        stored = control.load(root, KEY)
    except control.CorruptEntry as exc:
        assert str(path) in str(exc), exc
        return
    assert json.loads(text) == json.loads(written), (
        edit,
        text[:300],
    )  # only the entry as written is read back
    assert stored is not None and stored.fields["selected"] == ("tests/check_toy.py::test_x",)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The serving pack's files and a RECORD of them (as pip writes it), in a scratch site directory."""
    site = tmp_path_factory.mktemp("site")
    shutil.copytree(pack_record.root() / "serving", site / "falsify/packs/serving", ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    info = site / "falsify_harness-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: falsify-harness\nVersion: 0.1.0\n")
    files = sorted(p for p in site.rglob("*") if p.is_file())
    lines = [f"{p.relative_to(site).as_posix()},{pack_record.record_hash(p.read_bytes())},{p.stat().st_size}\n" for p in files]  # fmt: skip
    (info / "RECORD").write_text("".join(lines))
    return site


tampers = st.tuples(
    st.sampled_from(["flip", "append", "truncate", "add", "remove", "link", "same"]),
    st.integers(0, 10**6),
    st.integers(1, 255),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tamper=tampers)
def test_the_record_check_finds_a_difference_exactly_when_the_pack_differs(
    installed: Path, tmp_path: Path, tamper: tuple[str, int, int]
) -> None:
    site = tmp_path / "site"
    shutil.rmtree(site, ignore_errors=True)
    shutil.copytree(installed, site, symlinks=True)
    base = site / "falsify/packs/serving"
    files = sorted(p for p in base.rglob("*") if p.is_file())
    kind, where, n = tamper
    target = files[where % len(files)]
    data = target.read_bytes()
    if kind == "flip" and data:
        target.write_bytes(
            data[: where % len(data)] + bytes([data[where % len(data)] ^ n]) + data[where % len(data) + 1 :]
        )
    elif kind == "append":
        target.write_bytes(data + bytes([n]))
    elif kind == "truncate":
        target.write_bytes(data[: where % max(len(data), 1)])
    elif kind == "add":
        (target.parent / f"conftest_{n}.py").write_bytes(b"")
    elif kind == "remove":
        target.unlink()
    elif kind == "link":
        target.unlink()
        os.symlink(files[(where + 1) % len(files)], target)
    changed = kind != "same" and (kind in ("add", "remove", "link") or target.read_bytes() != data)
    dist = metadata.PathDistribution(site / "falsify_harness-0.1.0.dist-info")
    problems = pack_record.record_problems(dist, base, "falsify/packs/serving/")
    assert bool(problems) == changed, (tamper, target.name, problems)
    if changed:
        assert any(target.name in p or "conftest_" in p for p in problems), problems
