"""The one file layer (falsify/untrusted/safefile.py) and the commands that write or read through it (issue #27): `init`,
`keygen`, `sign`, `verify --key`, `diff`. Each hostile path is a named error with nothing written outside, no
hang and no traceback. Every test runs under a SIGALRM bound so a FIFO read that blocks fails instead of hanging."""

from __future__ import annotations

import argparse
import base64
import errno
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from testkit_hang_bound import hang_bound

from falsify.evidence import STATEMENTS
from falsify.evidence.diff import load_evidence
from falsify.evidence.sign import check_envelopes, keygen, load_private_key, load_public_key
from falsify.evidence.tree import EvidenceError
from falsify.init import run as init
from falsify.project import ProjectError
from falsify.untrusted import boundedjson, safefile


@pytest.fixture(autouse=True)
def _alarm() -> Iterator[None]:
    with hang_bound(20, "a read or write"):
        yield


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


# -- the layer ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda p: fifo(p), "not a regular file (a FIFO)"),
        (lambda p: p.symlink_to("/dev/zero"), "a symlink (not followed)"),
        (lambda p: p.mkdir(), "not a regular file (a directory)"),
        (lambda p: p.symlink_to(p.parent / "nowhere"), "a symlink (not followed)"),
        (lambda p: p.write_bytes(b"x" * 101), "over 100 bytes"),
        (lambda p: None, "does not exist"),
    ],
    ids=["fifo", "link-to-dev-zero", "directory", "dangling-link", "too-big", "absent"],
)
def test_a_read_takes_regular_files_only_and_bounded(tmp_path: Path, make, named: str) -> None:
    path = tmp_path / "f"
    make(path)
    with pytest.raises(safefile.FileLayerError, match=re.escape(named)):
        safefile.read_bytes(path, limit=100)


def test_dev_zero_itself_is_refused_at_once() -> None:
    with pytest.raises(safefile.FileLayerError, match="a character device"):
        safefile.read_bytes(Path("/dev/zero"), limit=1 << 30)


def test_create_never_writes_through_a_link_or_over_a_file(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (tmp_path / "dangling").symlink_to(outside)
    with pytest.raises(safefile.FileLayerError, match="already exists"):
        safefile.create(tmp_path / "dangling", b"x")
    assert not outside.exists()
    (tmp_path / "kept").write_bytes(b"old")
    with pytest.raises(safefile.FileLayerError, match="already exists"):
        safefile.create(tmp_path / "kept", b"new")
    assert (tmp_path / "kept").read_bytes() == b"old"


def test_replace_refuses_a_link_in_place_and_leaves_its_target_alone(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"theirs")
    (tmp_path / "mine").symlink_to(outside)
    with pytest.raises(safefile.FileLayerError, match="a symlink is in its place"):
        safefile.replace(tmp_path / "mine", b"ours")
    assert outside.read_bytes() == b"theirs"
    safefile.replace(tmp_path / "plain", b"1")
    safefile.replace(tmp_path / "plain", b"2")
    assert (tmp_path / "plain").read_bytes() == b"2" and sorted(os.listdir(tmp_path)) == [
        "mine",
        "outside",
        "plain",
    ]


def test_root_refuses_outside_paths_and_symlinked_directories(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "linked").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(safefile.FileLayerError, match="outside"):
        safefile.create(root / ".." / "escaped", b"x", root=root)
    with pytest.raises(safefile.FileLayerError, match="a symlinked directory"):
        safefile.create(root / "linked" / "f", b"x", root=root)
    with pytest.raises(safefile.FileLayerError, match="a symlinked directory"):
        safefile.make_dirs(root / "linked" / "deeper", root=root)
    assert not list((tmp_path / "elsewhere").iterdir()) and not (tmp_path / "escaped").exists()


def test_a_file_where_a_directory_belongs_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(safefile.FileLayerError, match="not a directory"):
        safefile.create(tmp_path / "file" / "child", b"x")
    with pytest.raises(safefile.FileLayerError, match="not a directory"):
        safefile.make_dirs(tmp_path / "file")


@pytest.mark.parametrize(
    ("code", "named"),
    [
        (errno.ENOSPC, "no space left on the device \\(disk full\\)"),
        (errno.EROFS, "read-only file system"),
        (errno.EDQUOT, "disk quota exceeded"),
    ],
)
def test_a_full_or_read_only_disk_is_named_and_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, named: str
) -> None:
    # the kernel's answer is injected at os.write (a full or read-only mount needs privileges a test lacks);
    # what is tested is everything above it: the name, and that the half-written file is removed
    def full(fd: int, data: object) -> int:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(safefile.FileLayerError, match=named):
        safefile.create(tmp_path / "new", b"data")
    with pytest.raises(safefile.FileLayerError, match=named):
        safefile.replace(tmp_path / "new", b"data")
    assert os.listdir(tmp_path) == []


# -- falsify init ---------------------------------------------------------------------------------------------------
def run_init(root: Path) -> int:
    return init(argparse.Namespace(directory=root))


@pytest.mark.parametrize("name", ["pyproject.toml", ".gitignore"])
def test_init_does_not_write_through_a_symlinked_file(tmp_path: Path, name: str) -> None:
    root, outside = tmp_path / "repo", tmp_path / "outside"
    root.mkdir()
    outside.write_text("[project]\n")
    (root / name).symlink_to(outside)
    with pytest.raises(safefile.FileLayerError, match="a symlink"):
        run_init(root)
    assert outside.read_text() == "[project]\n"


def test_init_does_not_write_through_a_dangling_link_or_a_symlinked_directory(tmp_path: Path) -> None:
    root, outside = tmp_path / "repo", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "contracts").symlink_to(outside)
    (root / "tests").mkdir()
    (root / "tests" / "test_example_cancel.py").symlink_to(outside / "planted.py")
    with pytest.raises(safefile.FileLayerError, match="contracts: a symlinked directory"):
        run_init(root)
    assert list(outside.iterdir()) == []


def test_init_on_a_fifo_pyproject_is_named_without_hanging(tmp_path: Path) -> None:
    fifo(tmp_path / "pyproject.toml")
    with pytest.raises(safefile.FileLayerError, match=r"not a regular file \(a FIFO\)"):
        run_init(tmp_path)


def test_init_in_a_regular_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ProjectError, match="not a directory"):
        run_init(tmp_path / "file")


# -- keys, signing, verify --key, diff -------------------------------------------------------------------------------
def test_keygen_never_writes_the_pub_through_a_dangling_link(tmp_path: Path) -> None:
    (tmp_path / "k.pub").symlink_to(tmp_path / "planted")
    with pytest.raises(EvidenceError, match="already exists"):
        keygen(tmp_path / "k")
    assert not (tmp_path / "planted").exists() and not (tmp_path / "k").exists()


@pytest.mark.parametrize("make", [fifo, lambda p: p.symlink_to("/dev/zero")], ids=["fifo", "dev-zero"])
def test_a_key_that_is_a_fifo_or_dev_zero_is_named_at_once(tmp_path: Path, make) -> None:
    make(tmp_path / "key.pub")
    with pytest.raises(EvidenceError, match=r"key\.pub"):
        load_public_key(tmp_path / "key.pub")
    with pytest.raises(EvidenceError, match=r"key\.pub"):
        load_private_key(tmp_path / "key.pub")


@pytest.mark.parametrize(
    ("line", "named"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64"),
        (b'{"payload": ' + b"7" * 5000 + b"}", "an integer of 5000 digits"),
        (b'{"payload": NaN}', "NaN is not JSON"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_a_hostile_envelope_line_is_a_named_problem(tmp_path: Path, line: bytes, named: str) -> None:
    _, public = keygen(tmp_path / "k")
    problems = check_envelopes(b'{"a": 1}\n', line + b"\n", load_public_key(public))
    assert len(problems) == 1 and named in problems[0], problems


@pytest.mark.parametrize(
    ("line", "named"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64"),
        (b'{"predicateType": ' + b"1" * 5000 + b"}", "an integer of 5000 digits"),
        (b'{"x": 1e400}', "overflows a double"),
    ],
)
def test_diff_names_a_hostile_statement_line(tmp_path: Path, line: bytes, named: str) -> None:
    (tmp_path / STATEMENTS).write_bytes(line + b"\n")
    with pytest.raises(EvidenceError, match=named):
        load_evidence(tmp_path)


def test_diff_refuses_a_fifo_statements_file_without_hanging(tmp_path: Path) -> None:
    fifo(tmp_path / STATEMENTS)
    with pytest.raises(EvidenceError, match="a FIFO"):
        load_evidence(tmp_path)


def test_the_bounded_reader_names_what_it_read() -> None:
    with pytest.raises(boundedjson.JsonFormatError, match=r"^envelope: 3 bytes \(at most 2\)$"):
        boundedjson.loads(b"[1]", what="envelope", max_bytes=2)
    assert boundedjson.loads('{"a": [1, 2.5, "x", null, true]}', what="x") == {"a": [1, 2.5, "x", None, True]}
    deep = "[" * 64 + "]" * 64
    assert boundedjson.loads(deep, what="x") is not None
    with pytest.raises(boundedjson.JsonFormatError, match="nested deeper than 64"):
        boundedjson.loads("[" + deep + "]", what="x")
    assert boundedjson.loads("-" + "9" * 40, what="x") == -int("9" * 40)
    env = base64.b64encode(json.dumps({"k": 1}).encode())
    assert boundedjson.loads(b'{"payload": "' + env + b'"}', what="x")["payload"] == env.decode()


# -- the project's configuration -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[tool.falsify]\nx = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
        ('[tool.falsify]\nsources = ["/etc/*"]\n', "sources: '/etc/\\*' is absolute"),
        ('[tool.falsify]\nweights = ["../w/*.gguf"]\n', "weights: '../w/\\*.gguf' climbs out"),
        ('[tool.falsify]\ncontracts = "~/c"\n', "contracts: '~/c' is absolute"),
        ('[tool.falsify]\ntests = "t\\u0000"\n', "holds a NUL"),
    ],
    ids=["deep-toml", "absolute-source-glob", "dotdot-weights", "home-contracts", "nul"],
)
def test_a_hostile_configuration_is_a_project_error(tmp_path: Path, text: str, named: str) -> None:
    from falsify.project import find_project

    (tmp_path / "pyproject.toml").write_text(text)
    with pytest.raises(ProjectError, match=named):
        find_project(tmp_path)


def test_a_symlinked_pyproject_is_named_not_followed(tmp_path: Path) -> None:
    from falsify.project import find_project

    (tmp_path / "elsewhere.toml").write_text('[tool.falsify]\ncontracts = "c"\n')
    (tmp_path / "pyproject.toml").symlink_to(tmp_path / "elsewhere.toml")
    with pytest.raises(ProjectError, match="a symlink"):
        find_project(tmp_path)


def test_a_bundles_recorded_source_globs_cannot_leave_the_tree(tmp_path: Path) -> None:
    from falsify.evidence.tree import source_files

    (tmp_path / "inside.py").write_text("")
    (tmp_path / "link").symlink_to("/etc")
    assert source_files(tmp_path, ("*.py", "link/host*")) == ["inside.py"]
    for pattern in ("/etc/host*", "../*", "~/x"):
        with pytest.raises(EvidenceError, match="sources: "):
            source_files(tmp_path, (pattern,))


# -- falsify gate --out ----------------------------------------------------------------------------------------------
def test_gate_out_naming_a_file_or_a_link_is_named_without_a_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    (tmp_path / "file").write_text("mine")
    (tmp_path / "outside").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "outside")
    for out, named in ((tmp_path / "file", "is a regular file"), (tmp_path / "linked", "is a symlink")):
        proc = subprocess.run(
            [sys.executable, "-m", "falsify.cli", "gate", "--out", str(out)],
            cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert named in proc.stderr + proc.stdout, proc.stderr
    assert (tmp_path / "file").read_text() == "mine" and list((tmp_path / "outside").iterdir()) == []
