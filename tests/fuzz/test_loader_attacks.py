"""The loader attack list (issue #19): every hostile file is a named lint problem (file, rule), never a
traceback, a hang, a memory blow-up or a silent skip."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from falsify.contracts.corpus import load_corpus
from falsify.contracts.lint import EXIT_ERRORS, lint
from falsify.contracts.yamlfile import MAX_BYTES, MAX_DEPTH

GOOD = Path(__file__).resolve().parent.parent / "fixtures" / "contracts" / "good" / "demo-serve-v1.yaml"
ROOT = Path(__file__).resolve().parent.parent.parent


def text(body: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.write_text(body, encoding="utf-8")

    return make


def good_with(old: str, new: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        body = GOOD.read_text(encoding="utf-8").replace("demo-serve-v1", path.stem)
        assert old in body
        path.write_text(body.replace(old, new, 1), encoding="utf-8")

    return make


def fifo(path: Path) -> None:
    os.mkfifo(path)


def link_to(target: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.symlink_to(target)

    return make


def directory(path: Path) -> None:
    path.mkdir()
    (path / "inner.yaml").write_text("contract: x\n", encoding="utf-8")


def self_loop(path: Path) -> None:
    path.symlink_to(path.name)


def pair_loop(path: Path) -> None:
    other = path.with_name("other.yml")
    path.symlink_to(other.name)
    other.symlink_to(path.name)


# name -> (how to make it, the rule of the problem it must produce)
CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "invalid-date": (good_with("version: 1.0.0", "version: 2020-13-45"), "type"),
    "valid-date": (good_with("version: 1.0.0", "version: 2020-01-02"), "type"),
    "huge-int": (good_with("max: 16", "max: " + "9" * 5000), "type"),
    "long-int": (good_with("max: 16", "max: " + "9" * 100), "type"),
    "nan": (good_with("max: 16", "max: .nan"), "type"),
    "deep-flow": (text("a: " + "[" * 990 + "]" * 990 + "\n"), "depth"),
    "deep-block": (text("".join(" " * i + "- \n" for i in range(200))), "depth"),
    "deep-unclosed": (text("[" * 100_000), "yaml"),  # libyaml's own nesting limit answers first
    "binary-tag": (good_with("title: A", "title: !!binary aGVsbG8= #"), "yaml"),
    "python-tag": (good_with("title: A", "title: !!python/object:os.system A"), "yaml"),
    "custom-tag": (good_with("title: A", "title: !mine A"), "yaml"),
    "set-tag": (good_with("requires: [generate]", "requires: !!set {generate: null}"), "yaml"),
    "omap-tag": (good_with("requires: [generate]", "requires: !!omap [{a: 1}]"), "yaml"),
    "bool-key": (good_with("  n: {type: int, min: 1", "  on: {type: int, min: 1"), "yaml"),
    "int-key": (good_with("  n: {type: int, min: 1", "  1: {type: int, min: 1"), "yaml"),
    "null-key": (good_with("  n: {type: int, min: 1", "  ~: {type: int, min: 1"), "yaml"),
    "anchor": (good_with("title: A", "title: &t A"), "alias"),
    "bool-tag-on-text": (good_with("title: A", 'title: !!bool "maybe" #'), "yaml"),
    "int-tag-on-empty": (good_with("max: 16", 'max: !!int ""'), "yaml"),
    "map-tag": (good_with("requires: [generate]", "requires: !!map {a: 1}"), "yaml"),
    "tag-directive": (text("%TAG ! tag:yaml.org,2002:\n---\na: !int 1\n"), "yaml"),
    "empty-domain": (good_with("min: 1, max: 16", "min: .inf, max: -.inf"), "domain-range"),
    "value-outside-domain": (good_with("min: 1, max: 16", "min: 1, max: 16, values: [99]"), "domain-range"),
    "two-documents": (text("a: 1\n---\nb: 2\n"), "yaml"),
    "nul-byte": (text("a: 1\x00\n"), "yaml"),
    "too-many-nodes": (text("[" + "0," * 250_000 + "0]\n"), "size"),
    "too-big": (text("# " + "x" * MAX_BYTES + "\n"), "size"),
    "fifo": (fifo, "io"),
    "dev-zero": (link_to("/dev/zero"), "io"),
    "dev-urandom": (link_to("/dev/urandom"), "io"),
    "dev-null": (link_to("/dev/null"), "io"),
    "dangling": (link_to("nowhere.yaml"), "io"),
    "self-loop": (self_loop, "io"),
    "pair-loop": (pair_loop, "io"),
    "directory-named-yaml": (directory, "io"),
    "formula-cannot-fail": (good_with("formula: decode_forwards == emitted - 1", "formula: emitted == emitted"), "cannot-fail"),
    "formula-constant": (good_with("formula: decode_forwards == emitted - 1", "formula: not not True"), "cannot-fail"),
    "formula-cost": (good_with("formula: decode_forwards == emitted - 1", "formula: (((9**64)**64)**64)**64 > emitted"), "formula-cost"),
    "formula-str-order": (good_with("formula: decode_forwards == emitted - 1", "formula: \"'10' <= '9' or emitted == 1\""), "formula-syntax"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_named_problem(case: str, tmp_path: Path) -> None:
    make, rule = CASES[case]
    make(tmp_path / f"{case}-v1.yaml")
    corpus, code = lint([tmp_path])
    assert code == EXIT_ERRORS
    rules = {p.rule for p in corpus.problems}
    assert rule in rules, [str(p) for p in corpus.problems]
    assert "internal" not in rules
    assert not corpus.contracts
    for p in corpus.problems:
        assert p.file and p.message and "Traceback" not in p.message


def test_unreadable_file_and_directory_are_named_not_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    secret = tmp_path / "secret-v1.yaml"
    secret.write_text("contract: secret-v1\n", encoding="utf-8")
    (tmp_path / "sub" / "inner-v1.yaml").write_text("contract: inner-v1\n", encoding="utf-8")
    if os.geteuid() == 0:
        # root reads through mode 000; make the kernel's answer for a non-root user happen instead.
        real_open, real_scandir = os.open, os.scandir

        def refuse_open(path: object, *args: object, **kwargs: object) -> int:
            if str(path) == str(secret):
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

        def refuse_scandir(path: object = ".") -> object:
            if str(path) == str(tmp_path / "sub"):
                raise PermissionError(13, "Permission denied", str(path))
            return real_scandir(path)  # type: ignore[call-overload]

        monkeypatch.setattr(os, "open", refuse_open)
        monkeypatch.setattr(os, "scandir", refuse_scandir)
    else:
        secret.chmod(0)
        (tmp_path / "sub").chmod(0)
    try:
        corpus, code = lint([tmp_path])
    finally:
        (tmp_path / "sub").chmod(0o755)
        secret.chmod(0o644)
    assert code == EXIT_ERRORS
    messages = [str(p) for p in corpus.problems]
    assert any("secret-v1.yaml" in m and "Permission denied" in m for m in messages), messages
    assert any("sub" in m and "cannot read directory" in m for m in messages), messages


def test_symlinked_directory_is_named_not_followed(tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to(".")
    corpus, code = lint([tmp_path])
    assert code == EXIT_ERRORS
    assert any("symlinked directory" in p.message for p in corpus.problems)


def test_nesting_at_the_limit_is_a_schema_problem_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "deep-v1.yaml").write_text("a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n")
    corpus = load_corpus([tmp_path])
    assert corpus.problems and all(p.rule not in ("depth", "internal") for p in corpus.problems)


@pytest.mark.parametrize("target", ["fifo", "/dev/zero", "/dev/urandom"])
def test_cli_does_not_hang(target: str, tmp_path: Path) -> None:
    """The command itself, in a subprocess with a wall-clock limit: a FIFO or a device that never ends."""
    path = tmp_path / "x-v1.yaml"
    fifo(path) if target == "fifo" else path.symlink_to(target)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "falsify.cli", "lint", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    # a FIFO is named for what it is; a link to a device is refused as a link out of the project, never opened
    named = "not a regular file" if target == "fifo" else "a symlink to a file outside the project"
    assert named in done.stdout, done.stdout
