"""Every code block in README.md and docs/*.md is checked, so the docs cannot drift from the code:

- python: run in a fresh interpreter (with this checkout importable), from a scratch directory;
- yaml: a contract (`contract:`) or mutant (`id:` + `op:`) is written under its own name and linted with falsify's
  own loader (pack predictions' mutants resolve against this repo's mutants/); anything else must parse;
- toml: must parse; a `[tool.falsify]` table must be accepted by the project loader;
- json: must parse (a transcript: each line, after its → or ← arrow);
- sh: every `falsify ...` line must parse with the command's own argument parser; `tox -e ENV` names an env in
  tox.ini; other lines start with a known program.

`text` blocks are shown output and `ts` blocks are interface definitions of the wire protocol: listed, not run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from testkit_gate_cli import run_serving_falsifiers

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = {"text", "ts", ""}
PROGRAMS = {"falsify", "python", "python3", "tox", "pytest", "cd", "git", "pip", "ruff", "mypy", "bash"}
PROGRAMS |= {"sha256sum"}  # coreutils: the CI workflow checks the pinned harness wheel (docs/how-to.md)
FENCE = re.compile(r"^```([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^```\s*$", re.M | re.S)


def blocks() -> list[tuple[str, str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append((f"{page.relative_to(ROOT)}:{line}", m.group(1).lower(), m.group(2)))
    return found


BLOCKS = blocks()
CHECKED = [b for b in BLOCKS if b[1] not in NOT_RUN]


def test_every_block_has_a_language_we_check_or_is_marked_output() -> None:
    unknown = [f"{where} ({lang})" for where, lang, _ in BLOCKS if lang not in NOT_RUN | CHECKERS.keys()]
    assert not unknown, f"code blocks in a language nothing checks: {unknown}"
    untagged = [where for where, lang, _ in BLOCKS if lang == ""]
    assert not untagged, f"code blocks without a language (use ```text for output): {untagged}"


ADAPTER = re.compile(r"\A# adapter: (\w+)\.py\n")


def adapters(page: Path) -> dict[str, str]:
    """A page's adapter blocks (```python starting `# adapter: NAME.py`), by module name, in page order."""
    found = {}
    for where, lang, code in BLOCKS:
        m = ADAPTER.match(code)
        if lang == "python" and m and where.startswith(f"{page.relative_to(ROOT)}:"):
            found[m.group(1)] = code
    return found


def check_python(where: str, code: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    adapter = ADAPTER.match(code)
    if adapter:  # a module beside the page's other adapters: it must import (test_adapter_blocks runs it)
        for name, text in adapters(ROOT / where.split(":")[0]).items():
            (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
        code = f"import {adapter.group(1)}"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"{where}: the Python block fails:\n{proc.stderr[-2000:]}"


def check_yaml(where: str, code: str, tmp_path: Path) -> None:
    from falsify.contracts.corpus import load_corpus

    data = yaml.safe_load(code)
    if not isinstance(data, dict) or not ("contract" in data or {"id", "op"} <= data.keys()):
        return
    name = data.get("contract") or data["id"]
    path = tmp_path / f"{name}.yaml"
    path.write_text(code, encoding="utf-8")
    mutants = [p.stem for p in (ROOT / "mutants").glob("*.yaml")]
    corpus = load_corpus([path], mutant_universe=ROOT / "mutants")
    # A mutant's `kills` and `file` point into a project; the block is checked against the schema alone there.
    problems = [p for p in corpus.problems if p.rule not in ("mutant-file", "mutant-kills")]
    if "contract" in data:
        problems = [p for p in problems if not (p.rule == "mutant-ref" and mutants)]
    assert not problems, f"{where}: " + "\n".join(map(str, problems))


def check_toml(where: str, code: str, tmp_path: Path) -> None:
    from falsify.project import find_project

    data = tomllib.loads(code)
    if "falsify" in data.get("tool", {}):
        (tmp_path / "pyproject.toml").write_text(code, encoding="utf-8")
        find_project(tmp_path)  # raises ProjectError on an unknown key or a wrong type


def check_json(where: str, code: str, tmp_path: Path) -> None:
    """One JSON document, or a transcript: JSON lines, each optionally prefixed by → (sent) or ← (received)."""
    try:
        json.loads(code)
    except json.JSONDecodeError:
        for line in filter(None, (raw.strip() for raw in code.splitlines())):
            json.loads(line.removeprefix("→").removeprefix("←").strip())


def check_sh(where: str, code: str, tmp_path: Path) -> None:
    from falsify.cli import COMMANDS, LOCAL, build_parser

    envs = set(re.findall(r"^\[testenv:([\w-]+)\]", (ROOT / "tox.ini").read_text(), re.M)) | {"py"}
    for raw in code.splitlines():
        line = raw.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        for part in (p.strip() for p in line.split("&&")):
            words = shlex.split(part)
            assert words[0] in PROGRAMS, f"{where}: unknown program in {part!r}"
            if words[0] == "tox" and "-e" in words:
                assert words[words.index("-e") + 1] in envs, f"{where}: no tox env in {part!r}"
            if words[0] == "falsify":
                args = words[1:]
                command = next((a for a in args if not a.startswith("-")), None)
                only = command if command in COMMANDS and command not in LOCAL else None
                try:
                    build_parser(only).parse_args(args)
                except SystemExit as exc:
                    assert exc.code == 0, f"{where}: `{part}` does not parse"


CHECKERS = {
    "python": check_python,
    "yaml": check_yaml,
    "toml": check_toml,
    "json": check_json,
    "sh": check_sh,
}


@pytest.mark.parametrize(("where", "lang", "code"), CHECKED, ids=[f"{w} {lang}" for w, lang, _ in CHECKED])
def test_code_block(where: str, lang: str, code: str, tmp_path: Path) -> None:
    CHECKERS[lang](where, code, tmp_path)


def test_every_command_is_in_the_cli_reference() -> None:
    from falsify.cli import COMMANDS

    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    missing = [c for c in COMMANDS if f"## falsify {c}\n" not in text]
    assert not missing, f"docs/cli.md has no section for: {', '.join(missing)}"


def test_every_config_key_is_documented() -> None:
    from falsify.project import KEYS

    text = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    assert all(f"| `{key}` |" in text for key in KEYS), "a [tool.falsify] key is missing from docs/config.md"


# Each adapter of docs/engines.md, the capabilities it claims, and the serving pack's falsifiers it must pass (the
# numerics adapters wire the reference engine's modules: `falsify engine check` is their test).
ENGINE_ADAPTERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "my_generate": (("generate",), ("test_cancel_contract.py",)),
    "my_prefill": (("prefill",), ("test_prefill_steps.py",)),
    "my_sample": (("sample",), ("test_sampling_contract.py",)),
    "my_lanes": (("prefill", "lanes"), ("test_lanes_host.py", "test_lanes_paths.py")),
    "my_model": (("model",), ()),
    "my_quant": (("quant",), ()),
    "my_trace": (("trace",), ()),
}


def test_every_capability_has_an_adapter_block() -> None:
    from falsify.engines.protocol import CAPABILITIES

    claimed = {capability for capabilities, _ in ENGINE_ADAPTERS.values() for capability in capabilities}
    documented = set(adapters(ROOT / "docs" / "engines.md"))
    assert set(ENGINE_ADAPTERS) <= documented, f"docs/engines.md lacks {set(ENGINE_ADAPTERS) - documented}"
    assert {"generate", "prefill", "lanes", "sample", "trace", "quant", "model"} <= claimed
    assert claimed <= set(CAPABILITIES)


@pytest.mark.parametrize("module", sorted(ENGINE_ADAPTERS))
def test_adapter_blocks(module: str, tmp_path: Path) -> None:
    """docs/engines.md's adapter for one capability: `falsify engine check` claims it with every method it needs
    (and nothing else), and for generate, prefill, sample and lanes the serving pack's falsifiers pass on it."""
    from falsify.contracts.packs import falsifiers_dir

    capabilities, falsifiers = ENGINE_ADAPTERS[module]
    for name, text in adapters(ROOT / "docs" / "engines.md").items():
        (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text('[tool.falsify]\npacks = ["serving"]\n', encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    engine = f"{module}:Engine"
    check = subprocess.run(
        [sys.executable, "-m", "falsify.cli", "engine", "check", "--engine", engine],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    claimed = [line.split()[0] for line in check.stdout.splitlines() if line.split()[1:2] == ["yes"]]
    assert tuple(claimed) == capabilities, check.stdout
    if not falsifiers:
        return
    run, tests = run_serving_falsifiers(
        tmp_path, engine, *(str(falsifiers_dir("serving") / n) for n in falsifiers)
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    outcomes = {t["outcome"] for t in tests.values()}
    passed = sum(t["outcome"] == "passed" for t in tests.values())
    assert passed and outcomes <= {"passed", "skipped"}, outcomes
    # a skip here is only the plugin's NOT APPLICABLE (the prefill contract's lanes half), never a test's own
    assert all(t.get("not_applicable") for t in tests.values() if t["outcome"] == "skipped")


LONGEST_LINE = 300  # issue #50: a docs line a reader takes in at once; table rows and code blocks are exempt


def long_lines(text: str) -> list[tuple[int, int]]:
    """(line number, length) of each line over LONGEST_LINE characters outside fenced code blocks and table rows."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and not line.lstrip().startswith("|") and len(line) > LONGEST_LINE:
            found.append((number, len(line)))
    return found


def test_long_lines_finds_prose_and_skips_tables_and_code() -> None:
    long = "x" * (LONGEST_LINE + 1)
    text = f"{long}\n| {long} |\n```text\n{long}\n```\n{'y' * LONGEST_LINE}\n  {long}\n"
    assert long_lines(text) == [(1, LONGEST_LINE + 1), (7, LONGEST_LINE + 3)]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_no_docs_line_over_the_limit(page: Path) -> None:
    found = long_lines(page.read_text(encoding="utf-8"))
    where = ", ".join(f"{page.relative_to(ROOT)}:{number} ({length} characters)" for number, length in found)
    assert not found, f"lines over {LONGEST_LINE} characters outside tables and code (wrap them): {where}"
