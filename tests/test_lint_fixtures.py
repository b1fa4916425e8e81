"""One test per fixture contract, named from its file (jsonschema's tests/_suite.py style).

Each bad fixture's first line says what lint must report: `# expect: <rule> <line>`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from falsify.contracts.corpus import load_corpus

FIXTURES = Path(__file__).parent / "fixtures" / "contracts"
BAD = sorted((FIXTURES / "bad").glob("*.yaml"))
GOOD = sorted((FIXTURES / "good").glob("*.yaml"))


def expectation(path: Path) -> tuple[str, int]:
    first = path.read_bytes().split(b"\n", 1)[0].decode("ascii")
    _, _, rest = first.partition("# expect:")
    rule, line = rest.split()
    return rule, int(line)


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_fixture_reports_rule_at_line(path: Path) -> None:
    rule, line = expectation(path)
    corpus = load_corpus([path])
    assert corpus.files == 1
    found = [(p.rule, p.line) for p in corpus.problems]
    assert (rule, line) in found, f"expected {rule} at line {line}, got {found}"
    assert all(p.file.endswith(path.name) for p in corpus.problems)
    assert {r for r, _ in found} == {rule}, f"unrelated problems too: {found}"


@pytest.mark.parametrize("path", GOOD, ids=[p.stem for p in GOOD])
def test_good_fixture_is_clean(path: Path) -> None:
    corpus = load_corpus([path])
    assert corpus.problems == []
    assert len(corpus.contracts) == 1 and corpus.contracts[0].predictions


def test_duplicate_prediction_ids_across_files_name_both() -> None:
    corpus = load_corpus([FIXTURES / "duplicate"])
    [problem] = corpus.problems
    assert problem.rule == "duplicate-id"
    assert "duplicate-a-v1.yaml:10" in problem.message and problem.file.endswith("duplicate-b-v1.yaml")


def test_unknown_keys_are_all_reported_at_once(tmp_path: Path) -> None:
    text = (FIXTURES / "good" / "demo-serve-v1.yaml").read_text()
    text = text.replace("title:", "owner: me\ntitle:").replace(
        "    if_fails:", "    tolerance: 1\n    if_fails:"
    )
    (tmp_path / "demo-serve-v1.yaml").write_text(text)
    corpus = load_corpus([tmp_path])
    keys = sorted(p.path for p in corpus.problems)
    assert keys == ["owner", "predictions[0].tolerance", "predictions[1].tolerance"]
