"""One test per fixture contract, named from its file (jsonschema's tests/_suite.py style).

Each bad fixture's first line says what lint must report: `# expect: <rule> <line>`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from falsify.contracts.corpus import load_corpus
from falsify.errors import ContractError

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


@pytest.mark.parametrize("name", ["contract-v1", "mutant-v1"])
def test_schemas_are_checked_by_a_draft_2020_12_validator(name: str) -> None:
    # Validity is jsonschema's verdict under the schema's own draft; no faster validator stands in for it.
    import jsonschema

    from falsify.contracts.corpus import _validator

    assert isinstance(_validator(name), jsonschema.Draft202012Validator)


def test_every_fixture_verdict_is_jsonschemas() -> None:
    # The lint verdict on each fixture agrees with a fresh Draft202012Validator over the same parsed document:
    # a document jsonschema rejects is never reported clean (schema problems carry the failed keyword as rule).
    import json

    import jsonschema

    from falsify.contracts.yamlfile import load_yaml
    from falsify.project import schema_path

    schema = json.loads(schema_path("contract-v1").read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    checked = 0
    for path in sorted(FIXTURES.rglob("*.yaml")):
        try:
            data = load_yaml(path).data
        except ContractError:  # unloadable fixtures are the loader's cases, not the schema's
            continue
        if not isinstance(data, dict) or "contract" not in data:
            continue
        checked += 1
        corpus = load_corpus([path])
        if not validator.is_valid(data):
            assert corpus.problems, f"{path.name}: jsonschema rejects it, lint reported nothing"
    assert checked >= 5, f"only {checked} contract fixtures were compared"
