"""`falsify lint --format github`: a file name cannot end a workflow command or start one (docs/hardening.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from falsify.contracts.corpus import Corpus
from falsify.contracts.lint import lint, render
from falsify.errors import Problem


def _github(*files: str) -> list[str]:
    problems = [Problem(f, 3, "", f"bad {f}", "required") for f in files]
    return render(Corpus(problems=problems, files=len(files)), [Path("contracts")], "github").split("\n")


@pytest.mark.parametrize(
    ("file", "escaped"),
    [
        (
            "contracts/x\n::notice title=INJECTED::y-v1.yaml",
            "contracts/x%0A%3A%3Anotice title=INJECTED%3A%3Ay-v1.yaml",
        ),
        (
            "contracts/y,line=999,title=forged::z-v1.yaml",
            "contracts/y%2Cline=999%2Ctitle=forged%3A%3Az-v1.yaml",
        ),
        ("contracts/cr\r%0A-v1.yaml", "contracts/cr%0D%250A-v1.yaml"),
    ],
)
def test_a_file_name_is_escaped_as_a_property_and_as_data(file: str, escaped: str) -> None:
    error, verdict_line = _github(file)
    assert error.startswith(f"::error file={escaped},line=3,title=required::")
    assert error.endswith(f"::bad {escaped.replace('%3A', ':').replace('%2C', ',')}")
    assert verdict_line.startswith("lint: 1 files")


def test_every_line_is_one_command_or_the_verdict() -> None:
    lines = _github("contracts/a\n::warning::x-v1.yaml", "contracts/b\r\n::error::y-v1.yaml")
    assert len(lines) == 3
    assert all(line.startswith("::error file=contracts/") for line in lines[:2])
    assert not lines[2].startswith("::")


def test_an_empty_corpus_verdict_naming_a_hostile_path_stays_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "c\n::notice::x"
    empty.mkdir()
    corpus, _ = lint([empty])
    (line,) = render(corpus, [empty], "github").split("\n")
    assert "%0A::notice::x" in line and line.startswith("lint: no contract found")
