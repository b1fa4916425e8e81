"""Hostile and type-confused input to `falsify evidence`, `sign`, `keygen` and `verify`: every value read from a
results.json, junit.xml, mutation report or statements file is either of the type its reader reads it as, or one
line naming the file and the field (exit 2), never a traceback.

The readers are checked field by field: each value of a real bundle's results.json and mutation report is replaced
in turn by values of every other JSON type; what the check refuses must be one line naming the file, and what it
accepts must go through every reader of that file without an exception. The CLI cases are the reproducers' classes.
"""

from __future__ import annotations

import copy as copying
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_evidence import ENGINE, built, copy, evidence_args, falsify_cli, statements, verify

from falsify.contracts.corpus import Corpus, load_corpus
from falsify.evidence import JUNIT, MUTATION_REPORT, RESULTS, SIGNATURES, STATEMENTS, junit
from falsify.evidence.mutation import check_report, normalise, outcomes
from falsify.evidence.sign import check_statements, keygen, load_private_key, sign_bundle
from falsify.evidence.statements import mutmut_summary, normalise_junit, normalise_results
from falsify.evidence.tree import EvidenceError
from falsify.harness.proven import cannot_show_from_stryker
from falsify.harness.results import check_results, per_prediction
from falsify.harness.results import test_counts as pytest_tally
from falsify.untrusted.boundedjson import FieldError

__all__ = ["built", "copy", "verify"]  # fixtures used here, defined in test_evidence

# One value of every JSON type (and a nested one): each field is replaced by each in turn.
OTHER_TYPES: list[Any] = [None, True, 0, -1, 1.5, "x", "", [], ["x"], {}, {"x": 1}, [[[[]]]]]


def paths(value: Any, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Every position in a JSON value, the root included."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from paths(item, (*prefix, i))


def replaced(document: Any, path: tuple[str | int, ...], value: Any) -> Any:
    if not path:
        return copying.deepcopy(value)
    out = copying.deepcopy(document)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = copying.deepcopy(value)
    return out


def assert_one_line(message: str, file: str) -> None:
    assert message.startswith(file) and "\n" not in message and "Traceback" not in message, message


@pytest.fixture(scope="module")
def readers(built: Path) -> tuple[Path, Corpus, dict[str, Any], dict[str, Any]]:
    """The tiny project's root, corpus, and its bundle's results.json and mutation report."""
    root = built / "proj"
    corpus = load_corpus([root / "contracts", root / "mutants"])
    bundle = root / "evidence"
    results = json.loads((bundle / RESULTS).read_text(encoding="utf-8"))
    report = json.loads((bundle / MUTATION_REPORT).read_text(encoding="utf-8"))
    return root, corpus, results, report


def refusals(doc: dict[str, Any], check: Any, name: str, read: Any, *, names_the_field: bool) -> int:
    """Replace every field of doc in turn by each value of another type: `check` refuses the copy on one line
    (naming the field's last key when names_the_field), or every reader (`read`) takes it. How many were refused."""
    refused = 0
    for path in list(paths(doc)):
        for value in OTHER_TYPES:
            changed = replaced(doc, path, value)
            try:
                check(changed, name)
            except FieldError as exc:
                assert_one_line(str(exc), name)
                if names_the_field and path:
                    assert str(path[-1]) in str(exc), (path, str(exc))
                refused += 1
            else:
                read(changed)
    return refused


def test_every_results_field_of_another_type_is_refused_by_name_or_read_safely(
    readers: tuple[Path, Corpus, dict[str, Any], dict[str, Any]],
) -> None:
    root, corpus, results, report = readers

    def read(doc: dict[str, Any]) -> None:  # every reader of a results file
        per_prediction(corpus, doc)
        pytest_tally(doc)
        normalise_results(doc, root, "contracts")
        outcomes(normalise(report, root), corpus, doc, root)

    refused = refusals(results, check_results, "results.json", read, names_the_field=True)
    assert refused > len(list(paths(results)))  # most replacements are of the wrong type


def test_an_impossible_observation_count_is_refused() -> None:
    record = {"outcome": "passed", "observations": {"P": {"checks": 1, "held": 2, "vacuous": 0}}}
    with pytest.raises(FieldError, match=r"results.json: tests.t.observations.P: vacuous 0 <= held 2"):
        check_results({"tests": {"t": record}}, "results.json")
    record["outcome"] = "exploded"
    with pytest.raises(FieldError, match='outcome: "exploded" is not one of passed'):
        check_results({"tests": {"t": record}}, "results.json")


def test_every_mutation_report_field_of_another_type_is_refused_by_name_or_read_safely(
    readers: tuple[Path, Corpus, dict[str, Any], dict[str, Any]],
) -> None:
    root, corpus, results, report = readers

    def read(doc: dict[str, Any]) -> None:  # every reader of a mutation report
        kept = normalise(doc, root)
        outcomes(kept, corpus, results, root)
        cannot_show_from_stryker(kept)
        mutmut_summary(kept, root)

    assert refusals(report, check_report, "m.json", read, names_the_field=False) > len(list(paths(report)))


def test_a_mutant_without_id_or_status_is_refused_by_name() -> None:
    report = {"schemaVersion": "2", "files": {"a.py": {"mutants": [{"id": "m"}]}}}
    with pytest.raises(FieldError, match=r'm.json: files\["a.py"\].mutants\[0\]: no status'):
        check_report(report, "m.json")


LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
    '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]><testsuites name="&c;"/>'
)
SUITE = '<testsuites><testsuite name="s" tests="{}" failures="0" errors="0" skipped="0"/></testsuites>'
BAD_JUNIT = {
    "deep": ("<testsuites>" + "<a>" * 100_000 + "</a>" * 100_000 + "</testsuites>", "deeper than"),
    "deep-root": ("<a>" * 100_000 + "</a>" * 100_000, "deeper than"),
    "doctype": (LAUGHS, "document type declaration"),
    "external-entity": (
        '<!DOCTYPE t [<!ENTITY e SYSTEM "file:///etc/passwd">]><testsuites name="&e;"/>',
        "document type declaration",
    ),
    "not-xml": ("not xml", "not XML"),
    "empty": ("", "not XML"),
    "other-root": ("<html/>", "root element is <html>"),
    **{
        f"count-{i}": (SUITE.format(count), 'tests="')
        for i, count in enumerate(["", "x", "1e999", "-1", "9" * 5000, "1.5", " 1", "\u0661", "1_0", "0x1"])
    },
}


@pytest.mark.parametrize("name", sorted(BAD_JUNIT))
def test_hostile_junit_is_one_line_naming_the_file(name: str, tmp_path: Path) -> None:
    text, said = BAD_JUNIT[name]
    for read in (
        lambda xml: junit.totals(xml, "gate/junit.xml"),
        lambda xml: normalise_junit(xml, tmp_path, "gate/junit.xml"),
    ):
        with pytest.raises(EvidenceError) as caught:
            read(text.encode("utf-8"))
        assert_one_line(str(caught.value), "gate/junit.xml")
        assert said in str(caught.value), str(caught.value)


def test_a_plain_junit_report_still_totals() -> None:
    assert junit.totals(SUITE.format("12").encode(), JUNIT) == {
        "tests": 12,
        "failures": 0,
        "errors": 0,
        "skipped": 0,
    }


def refused(proc: Any, *said: str) -> str:
    """The CLI refused on one stderr line (exit 2) that says each of SAID."""
    err = proc.stderr.strip()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and "\n" not in err, err
    for s in said:
        assert s in err, err
    return str(err)


def gate_dir(copy: Path, edit_results: Any = None, junit_text: str | None = None) -> Path:
    """A copy of the tiny project's gate output, its results.json edited by EDIT_RESULTS(doc) or junit replaced."""
    src = copy / "proj" / ".falsify" / "gate"
    out = copy / "gate-copy"
    out.mkdir()
    for name in (RESULTS, JUNIT):
        shutil.copy(src / name, out / name)
    if edit_results is not None:
        doc = json.loads((out / RESULTS).read_text(encoding="utf-8"))
        edit_results(doc)
        (out / RESULTS).write_text(json.dumps(doc), encoding="utf-8")
    if junit_text is not None:
        (out / JUNIT).write_text(junit_text, encoding="utf-8")
    return out


def evidence_from(copy: Path, from_dir: Path, *extra: str) -> Any:
    args = [a if a != ".falsify/gate" else str(from_dir) for a in evidence_args("ev")]
    return falsify_cli(copy / "proj", *args, *extra)


def _first_test(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["tests"][sorted(doc["tests"])[0]]


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda d: d.update(tests="x"), 'tests: expected a JSON object, got "x"'),
        (lambda d: d.update(counts={"passed": "2"}), "counts.passed: expected an integer >= 0"),
        (lambda d: _first_test(d).update(outcome=5), "outcome: expected a string, got 5"),
        (lambda d: _first_test(d).update(predictions="FALSIFY-TINY-ADD-001"), "predictions: expected a list"),
        (lambda d: _first_test(d).update(duration=[]), "duration: expected a finite number"),
    ],
)
def test_evidence_from_type_confused_results_is_one_line(copy: Path, edit: Any, said: str) -> None:
    proc = evidence_from(copy, gate_dir(copy, edit_results=edit), "--no-mutants")
    refused(proc, "gate-copy/results.json", said)


def test_evidence_from_hostile_junit_is_one_line(copy: Path) -> None:
    deep = "<testsuites>" + "<a>" * 100_000 + "</a>" * 100_000 + "</testsuites>"
    refused(
        evidence_from(copy, gate_dir(copy, junit_text=deep), "--no-mutants"), "gate-copy/junit.xml", "deeper"
    )
    shutil.rmtree(copy / "gate-copy")
    text = (
        (copy / "proj" / ".falsify" / "gate" / JUNIT)
        .read_text(encoding="utf-8")
        .replace('tests="', 'tests="1e99', 1)
    )
    refused(
        evidence_from(copy, gate_dir(copy, junit_text=text), "--no-mutants"),
        "gate-copy/junit.xml",
        "not a count",
    )


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda m: m.update(statusReason=None), "mutants[0].statusReason: expected a string, got null"),
        (lambda m: m.update(killedBy="tests/test_add.py::test_add"), "killedBy: expected a list"),
        (lambda m: m.update(id=7), "mutants[0].id: expected a string, got 7"),
        (lambda m: m.pop("status"), "mutants[0]: no status"),
    ],
)
def test_evidence_with_a_type_confused_mutation_report_is_one_line(copy: Path, edit: Any, said: str) -> None:
    report = json.loads((copy / "stryker.json").read_text(encoding="utf-8"))
    edit(report["files"]["tinyengine/engine.py"]["mutants"][0])
    (copy / "bad.json").write_text(json.dumps(report), encoding="utf-8")
    refused(
        falsify_cli(copy / "proj", *evidence_args("ev"), "--mutants-report", str(copy / "bad.json")),
        "bad.json",
        said,
    )


def test_test_files_of_another_type_are_one_line(copy: Path) -> None:
    report = json.loads((copy / "stryker.json").read_text(encoding="utf-8"))
    report["testFiles"] = {"tests/test_add.py": {"tests": True}}
    (copy / "bad.json").write_text(json.dumps(report), encoding="utf-8")
    proc = falsify_cli(copy / "proj", *evidence_args("ev"), "--mutants-report", str(copy / "bad.json"))
    refused(proc, 'bad.json: testFiles["tests/test_add.py"].tests: expected a list, got true')


def test_results_or_mutants_of_another_engine_are_refused(copy: Path) -> None:
    other = "tinyengine.other:OtherEngine"
    proc = evidence_from(copy, gate_dir(copy, edit_results=lambda d: d.update(engine=other)), "--no-mutants")
    refused(proc, "gate-copy/results.json: the gate ran on engine", other, ENGINE)
    report = json.loads((copy / "stryker.json").read_text(encoding="utf-8"))
    report["config"] = {"engine": other}
    (copy / "other.json").write_text(json.dumps(report), encoding="utf-8")
    proc = falsify_cli(copy / "proj", *evidence_args("ev"), "--mutants-report", str(copy / "other.json"))
    refused(proc, "other.json: the mutants ran on engine", other)
    report["config"] = {"engine": ENGINE}  # the same engine: taken
    (copy / "same.json").write_text(json.dumps(report), encoding="utf-8")
    proc = falsify_cli(copy / "proj", *evidence_args("ev"), "--mutants-report", str(copy / "same.json"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_verify_names_a_type_confused_results_field_and_another_engine(copy: Path, verify: Any) -> None:
    root = copy / "proj"
    kept = root / "evidence" / RESULTS
    doc = json.loads(kept.read_text(encoding="utf-8"))
    _first_test(doc)["observations"] = {"FALSIFY-TINY-ADD-001": {"checks": "3", "held": 3}}
    kept.write_text(json.dumps(doc), encoding="utf-8")
    code, out = verify(root, "evidence")
    assert code == 1 and "Traceback" not in out, out
    assert (
        'results.json: tests["tests/test_add.py::test_add"].observations["FALSIFY-TINY-ADD-001"].checks'
        in out
    ), out
    doc = json.loads((copy / "proj" / ".falsify" / "gate" / RESULTS).read_text(encoding="utf-8"))
    doc["engine"] = "tinyengine.other:OtherEngine"
    kept.write_text(json.dumps(doc), encoding="utf-8")
    code, out = verify(root, "evidence")
    assert code == 1 and 'results.json: made on engine "tinyengine.other:OtherEngine"' in out, out


def sign(copy: Path, key: Path) -> Any:
    return falsify_cli(copy / "proj", "sign", "--key", str(key), "evidence")


@pytest.fixture
def key(copy: Path) -> Path:
    proc = falsify_cli(copy, "keygen", str(copy / "k"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return copy / "k"


def test_sign_refuses_what_is_not_a_statements_file(copy: Path, key: Path) -> None:
    path = copy / "proj" / "evidence" / STATEMENTS
    good = path.read_bytes()
    lines = good.splitlines(keepends=True)
    edited = json.loads(lines[1])
    edited["predicate"]["verdict"]["decision"] = "GO!"
    cases = {
        good[:100]: "found 0 line(s) and one not terminated",
        b"\xff\xfe garbage": "found 0 line(s) and one not terminated",
        b"": "found 0 line(s)",
        good + b"{}\n": "found 4 line(s)",
        lines[0] + b"\n" + lines[1] + lines[2]: "one of them empty",
        lines[1] + lines[0] + lines[2]: "line 1: predicateType",
        b"[]\n" + lines[1] + lines[2]: "line 1: not an in-toto Statement v1",
        b'{"a": 1e999}\n' + lines[1] + lines[2]: "line 1: the number 1e999 overflows",
        lines[0]
        + json.dumps(edited, sort_keys=True).encode()
        + b"\n"
        + lines[2]: "line 2 is not the statement",
    }
    for data, said in cases.items():
        path.write_bytes(data)
        refused(sign(copy, key), STATEMENTS, said)
        assert not (path.parent / "evidence.dsse.jsonl").exists()
    path.write_bytes(good)
    assert sign(copy, key).returncode == 0


def test_check_statements_takes_what_evidence_writes(built: Path) -> None:
    data = (built / "proj" / "evidence" / STATEMENTS).read_bytes()
    check_statements(data, STATEMENTS)
    assert len(statements(built / "proj" / "evidence")) == 3


@pytest.mark.parametrize("arg", [".", "", "/", "..", "sub/", "sub"])
def test_keygen_on_a_directory_or_nothing_is_one_line(arg: str, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    proc = falsify_cli(tmp_path, "keygen", arg)
    refused(proc, "keygen" if arg == "" else "a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"]


def test_matrix_details_of_another_type_are_one_line(tmp_path: Path) -> None:
    from falsify.evidence.statements import normalise_matrix

    doc = {"engines": ["a"], "predictions": [{"id": "P", "outcomes": {"a": "PASS"}, "details": [1]}]}
    with pytest.raises(
        FieldError, match=r"^matrix: predictions\[0\]\.details: expected a JSON object, got \[1\]$"
    ):
        normalise_matrix(doc, tmp_path)
    doc["predictions"][0]["details"] = None  # type: ignore[index]
    assert normalise_matrix(doc, tmp_path)["predictions"][0]["details"] == {"a": ""}


def test_a_release_statement_without_its_time_or_decision_is_not_signed(built: Path) -> None:
    lines = (built / "proj" / "evidence" / STATEMENTS).read_bytes().splitlines(keepends=True)
    release = json.loads(lines[2])
    release["predicate"]["generatedAt"] = 1
    data = lines[0] + lines[1] + json.dumps(release).encode() + b"\n"
    with pytest.raises(FieldError, match=r"line 3 predicate\.generatedAt: expected a string, got 1$"):
        check_statements(data, STATEMENTS)


def test_sign_replaces_a_symlinked_signatures_file_without_writing_through_it(
    copy: Path, tmp_path: Path
) -> None:
    """(Was in test_file_layer.py with a one-line statements file, which sign now refuses before it writes.)"""
    private, _ = keygen(tmp_path / "k")
    bundle, outside = copy / "proj" / "evidence", tmp_path / "outside"
    outside.write_bytes(b"theirs")
    (bundle / SIGNATURES).unlink(missing_ok=True)
    (bundle / SIGNATURES).symlink_to(outside)
    with pytest.raises(EvidenceError, match=r"a symlink is in its place"):
        sign_bundle(bundle, load_private_key(private))
    assert outside.read_bytes() == b"theirs"
