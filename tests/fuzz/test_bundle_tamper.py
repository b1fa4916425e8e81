"""The bundle tamper matrix (issue #19): each tampering of an evidence bundle fails `falsify verify` with a named
problem, never exit 0 and never a traceback. Built on test_evidence's throwaway project (real gate, real digests)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_evidence import built, copy, verify  # noqa: F401  (fixtures, shared on purpose)

from falsify.evidence import REPORT_MD, STATEMENTS

Verify = Callable[..., tuple[int, str]]


def lines_of(bundle: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (bundle / STATEMENTS).read_text(encoding="utf-8").splitlines()]


def write_lines(bundle: Path, statements: list[dict[str, object]]) -> None:
    text = "".join(json.dumps(s, sort_keys=True, separators=(",", ":")) + "\n" for s in statements)
    (bundle / STATEMENTS).write_text(text, encoding="utf-8")


def add_subject(bundle: Path, line: int, name: str, target: Path) -> None:
    statements = lines_of(bundle)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    statements[line]["subject"].append({"name": name, "digest": {"sha256": digest}})  # type: ignore[attr-defined]
    write_lines(bundle, statements)


def tamper_extra_file(bundle: Path) -> None:
    (bundle / "run-me.sh").write_text("#!/bin/sh\necho hi\n", encoding="utf-8")


def tamper_extra_dir(bundle: Path) -> None:
    (bundle / "more").mkdir()


def tamper_symlink_to_identical_copy(bundle: Path) -> None:
    shutil.copyfile(bundle / REPORT_MD, bundle.parent / "REPORT-copy.md")
    (bundle / REPORT_MD).unlink()
    (bundle / REPORT_MD).symlink_to(bundle.parent / "REPORT-copy.md")


def tamper_invented_absolute_subject(bundle: Path) -> None:
    add_subject(bundle, 0, "/etc/hostname", Path("/etc/hostname"))


def tamper_invented_relative_subject(bundle: Path) -> None:
    add_subject(bundle, 0, "../../etc/hostname", Path("/etc/hostname"))


def tamper_invented_release_subject(bundle: Path) -> None:
    add_subject(bundle, 2, "../../etc/hostname", Path("/etc/hostname"))


def tamper_subject_dropped(bundle: Path) -> None:
    statements = lines_of(bundle)
    statements[0]["subject"].pop()  # type: ignore[attr-defined]
    write_lines(bundle, statements)


def tamper_flipped_key(bundle: Path) -> None:
    text = (bundle / STATEMENTS).read_text(encoding="utf-8")
    assert '"verdict"' in text
    (bundle / STATEMENTS).write_text(text.replace('"verdict"', '"verdicu"'), encoding="utf-8")


def tamper_fourth_statement(bundle: Path) -> None:
    statements = lines_of(bundle)
    extra = dict(statements[0], predicateType="https://example.org/extra/v1")
    write_lines(bundle, [*statements, extra])


def tamper_configuration_entry_added(bundle: Path) -> None:
    statements = lines_of(bundle)
    config = statements[0]["predicate"]["configuration"]  # type: ignore[index]
    config.append({"name": "../../etc/hostname", "digest": {"sha256": "0" * 64}})
    write_lines(bundle, statements)


TAMPERS: dict[str, tuple[Callable[[Path], None], str]] = {
    "extra-file": (tamper_extra_file, "run-me.sh: in the bundle but not part of it"),
    "extra-dir": (tamper_extra_dir, "more: not a regular file"),
    "symlink-to-identical-copy": (tamper_symlink_to_identical_copy, f"{REPORT_MD}: a symlink"),
    "invented-absolute-subject": (tamper_invented_absolute_subject, "/etc/hostname: missing"),
    "invented-relative-subject": (tamper_invented_relative_subject, "../../etc/hostname: missing"),
    "invented-release-subject": (tamper_invented_release_subject, "not a plain file name"),
    "subject-dropped": (tamper_subject_dropped, "subject"),
    "flipped-key": (tamper_flipped_key, "line 2"),
    "fourth-statement": (tamper_fourth_statement, "4 lines"),
    "configuration-entry-added": (tamper_configuration_entry_added, "../../etc/hostname: missing"),
}


@pytest.mark.parametrize("case", sorted(TAMPERS))
def test_tamper_matrix(copy: Path, verify: Verify, case: str) -> None:  # noqa: F811
    tamper, fragment = TAMPERS[case]
    tamper(copy / "proj" / "evidence")
    code, out = verify(copy / "proj", "evidence")
    assert code == 1, out
    assert fragment in out, out
    assert "Traceback" not in out


def test_the_statements_name_the_harness_code_and_schemas(copy: Path) -> None:  # noqa: F811
    names = {d["name"] for d in lines_of(copy / "proj" / "evidence")[0]["predicate"]["configuration"]}  # type: ignore[index]
    for module in ("harness/checks.py", "harness/results.py", "harness/plugin.py", "contracts/formula.py"):
        assert any(n.endswith(f"falsify/{module}") for n in names), sorted(names)
    assert any(n.endswith("contract-v1.schema.json") for n in names), sorted(names)


def test_a_changed_harness_fails_verify(
    copy: Path,  # noqa: F811
    verify: Verify,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The same bundle checked with a harness whose formula evaluator differs by one byte."""
    from falsify.evidence import verify as verify_module
    from falsify.evidence.tree import harness_files

    def changed(root: Path) -> list[tuple[str, str, Path]]:
        out = []
        for name, role, path in harness_files(root):
            if name.endswith("falsify/contracts/formula.py"):
                edited = tmp_path / "formula.py"
                edited.write_bytes(path.read_bytes() + b"\n")
                path = edited
            out.append((name, role, path))
        return out

    monkeypatch.setattr(verify_module, "harness_files", changed)
    code, out = verify(copy / "proj", "evidence")
    assert code == 1, out
    assert "falsify/contracts/formula.py: sha256 changed" in out, out


@settings(
    max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
@given(st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=3))
def test_flipped_bytes_never_verify_and_never_traceback(
    built: Path,  # noqa: F811
    verify: Verify,  # noqa: F811
    flips: list[tuple[float, int]],
) -> None:
    scratch = built.parent / "flip"
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(built, scratch)
    try:
        path = scratch / "proj" / "evidence" / STATEMENTS
        data = bytearray(path.read_bytes())
        for where, mask in flips:
            data[int(where * len(data))] ^= mask
        path.write_bytes(bytes(data))
        code, out = verify(scratch / "proj", "evidence")
        assert code in (1, 2), out
        assert "Traceback" not in out
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
