"""Every other file falsify reads for the user goes through the file layer and the bounded JSON reader too (issue
#27, round 3): a checkpoint's config.json (llama.cpp conversion, the gdn pack), results.json, junit.xml and
mutation reports given to `evidence`, the mutmut baseline, pyproject.toml's sub-tables, the digests of tree
files, and the reports written into `--out`. Each hostile file is a named error at once: no hang (SIGALRM
bound), no traceback, nothing written through a link."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from testkit_hang_bound import hang_bound

from falsify.engines.adapters.llamacpp_files import CheckpointError, checkpoint_config
from falsify.errors import FalsifyError
from falsify.evidence.collect import read_gate_dir
from falsify.evidence.digests import sha256_file
from falsify.evidence.mutation import load_report
from falsify.evidence.tree import EvidenceError
from falsify.mutation.mutmut.config import MutmutError, read_baseline, read_config
from falsify.project import ProjectError, find_project
from falsify.untrusted import boundedjson, safefile

DEEP = b"[" * 100_000 + b"]" * 100_000
Make = Callable[[Path], object]


@pytest.fixture(autouse=True)
def _alarm() -> Iterator[None]:
    with hang_bound(20, "a read"):
        yield


HOSTILE: list[tuple[str, Make, str]] = [
    ("fifo", lambda p: os.mkfifo(p), "not a regular file (a FIFO)"),
    ("dev-zero", lambda p: p.symlink_to("/dev/zero"), "a symlink (not followed)"),
    ("nested", lambda p: p.write_bytes(b'{"vocab_size": ' + DEEP + b"}"), "nested deeper than 64 levels"),
    ("5000-digits", lambda p: p.write_bytes(b'{"vocab_size": ' + b"9" * 5000 + b"}"), "an integer of 5000 digits"),
    ("repeated-key", lambda p: p.write_bytes(b'{"vocab_size": 8, "vocab_size": 9}'), "'vocab_size' appears twice"),
    ("not-utf8", lambda p: p.write_bytes(b'{"vocab_size": "\xff"}'), "not UTF-8"),
]  # fmt: skip


@pytest.mark.parametrize(("make", "named"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_a_checkpoint_config_for_llamacpp_is_read_as_untrusted(
    tmp_path: Path, make: Make, named: str
) -> None:
    make(tmp_path / "config.json")
    with pytest.raises(CheckpointError, match=re.escape(named)):
        checkpoint_config(tmp_path)


@pytest.mark.parametrize("vocab", ["8", True, 0, -1, 2**22 + 1, 10**12, None])
def test_a_checkpoints_vocab_size_must_be_a_plausible_int(tmp_path: Path, vocab: object) -> None:
    """The tokenizer written for it has one piece per id: 10**12 of them would exhaust memory."""
    import json

    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": vocab}), encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"vocab_size must be an integer in 1\.\.4194304"):
        checkpoint_config(tmp_path)
    (tmp_path / "config.json").write_text('{"vocab_size": 512}', encoding="utf-8")
    assert checkpoint_config(tmp_path)[1] == {"vocab_size": 512}


def test_the_gdn_packs_config_reader_refuses_a_fifo(tmp_path: Path) -> None:
    path = Path(__file__).resolve().parent.parent / "falsify/packs/gdn/falsifiers/test_gdn_textbook.py"
    spec = importlib.util.spec_from_file_location("gdn_textbook_for_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(safefile.FileLayerError, match="not a regular file"):
        module.read_config(tmp_path)


def test_the_bounded_reader_refuses_a_repeated_key_at_any_depth() -> None:
    assert boundedjson.loads(b'{"a": {"b": 1}, "b": [{"b": 2}]}', what="x") == {
        "a": {"b": 1},
        "b": [{"b": 2}],
    }
    with pytest.raises(boundedjson.JsonFormatError, match=r"x: the key 'k' appears twice in one object"):
        boundedjson.loads(b'{"a": [{"k": 1, "k": 1}]}', what="x")


def replace_by_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


# -- what `falsify evidence` reads ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "make", "named"),
    [
        ("results.json", lambda p: os.mkfifo(p), "no results.json (expected the --out directory"),
        ("results.json", lambda p: p.write_bytes(DEEP), "nested deeper than 64 levels"),
        ("results.json", lambda p: p.write_bytes(b"[1]"), "not a results file (expected a JSON object)"),
        ("junit.xml", lambda p: replace_by_fifo(p), "not a regular file (a FIFO)"),
    ],
    ids=["results-fifo", "results-nested", "results-list", "junit-fifo"],
)
def test_a_gate_directory_given_to_evidence_is_read_as_untrusted(
    tmp_path: Path, name: str, make: Make, named: str
) -> None:
    (tmp_path / "results.json").write_text("{}", encoding="utf-8")
    (tmp_path / "junit.xml").write_text("<testsuites/>", encoding="utf-8")
    if name == "results.json":
        (tmp_path / name).unlink()
    make(tmp_path / name)
    if name == "junit.xml":  # a FIFO is no file: named as missing before anything opens it
        with pytest.raises(EvidenceError, match=re.escape("no junit.xml")):
            read_gate_dir(tmp_path)
        return
    with pytest.raises(FalsifyError, match=re.escape(named)):
        read_gate_dir(tmp_path)


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda p: os.mkfifo(p), "not a regular file (a FIFO)"),
        (lambda p: p.write_bytes(DEEP), "nested deeper than 64 levels"),
        (lambda p: p.write_bytes(b'{"files": {}, "files": {}}'), "appears twice"),
    ],
    ids=["fifo", "nested", "repeated-key"],
)
def test_a_mutation_report_is_read_as_untrusted(tmp_path: Path, make: Make, named: str) -> None:
    make(tmp_path / "report.json")
    with pytest.raises(EvidenceError, match=f"not a readable mutation report: .*{re.escape(named)}"):
        load_report(tmp_path / "report.json")


def test_a_tree_file_replaced_by_a_fifo_is_an_oserror_not_a_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "source.py")
    with pytest.raises(OSError, match="not a regular file"):
        sha256_file(tmp_path / "source.py")
    (tmp_path / "real.py").write_text("X = 1\n", encoding="utf-8")
    (tmp_path / "link.py").symlink_to(tmp_path / "real.py")  # a link inside the tree is still followed
    assert sha256_file(tmp_path / "link.py") == sha256_file(tmp_path / "real.py")


# -- configuration ----------------------------------------------------------------------------------------------------
def project(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.falsify]\ncontracts = "c"\n\n[tool.falsify.mutmut]\nbaseline = "b.toml"\npaths = ["x.py"]\n'
        + extra,
        encoding="utf-8",
    )
    return tmp_path


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda p: os.mkfifo(p), "not a regular file (a FIFO)"),
        (lambda p: p.symlink_to("/dev/zero"), "a symlink (not followed)"),
        (lambda p: p.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n"), "nested too deeply"),
        (lambda p: p.write_bytes(b"a = '\xff'\n"), "not UTF-8"),
    ],
    ids=["fifo", "dev-zero", "nested", "not-utf8"],
)
def test_a_hostile_mutmut_baseline_is_named_not_read_as_empty(tmp_path: Path, make: Make, named: str) -> None:
    make(project(tmp_path) / "b.toml")
    found = find_project(tmp_path)
    with pytest.raises(MutmutError, match=re.escape(named)):
        read_baseline(found, read_config(found))


def test_a_pyproject_whose_tool_table_is_not_a_table_is_named(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("tool = 1\n", encoding="utf-8")
    with pytest.raises(ProjectError, match=r"pyproject.toml: \[tool\] must be a table"):
        find_project(tmp_path)


# -- reports written into --out ---------------------------------------------------------------------------------------
def test_a_report_in_out_is_replaced_never_written_through_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import falsify.mutation.semantic.report as report

    monkeypatch.setattr(report, "to_stryker", lambda run: {"schemaVersion": "2", "files": {}})
    outside = tmp_path / "outside.json"
    outside.write_text("keep", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / "mutation-report.json").symlink_to(outside)
    with pytest.raises(safefile.FileLayerError, match="cannot replace the mutation report: a symlink"):
        report.write(object(), out)  # type: ignore[arg-type]
    assert outside.read_text(encoding="utf-8") == "keep"


def test_a_fifo_named_like_a_test_file_is_skipped_not_waited_on(tmp_path: Path) -> None:
    from falsify.harness.collection import _read_text

    os.mkfifo(tmp_path / "test_x.py")
    assert _read_text(tmp_path / "test_x.py") is None
    (tmp_path / "test_y.py").write_bytes(b"# falsifies \xff\n")
    assert _read_text(tmp_path / "test_y.py") == "# falsifies \ufffd\n"


def test_the_wrapper_never_writes_through_a_linked_directory(tmp_path: Path) -> None:
    from falsify.wrapper import DIRECTORY, pin

    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / DIRECTORY).symlink_to(tmp_path / "elsewhere")  # the directory itself a link out of the repo
    with pytest.raises(safefile.FileLayerError, match="a symlinked directory; falsify does not follow it"):
        pin(root)
    assert list((tmp_path / "elsewhere").iterdir()) == []
