"""`falsify init`: a working starter in an empty or existing repository.

Writes [tool.falsify] into pyproject.toml (created if absent, appended to otherwise), an example engine module
behind the engine protocol, one contract about it, a falsifier bound to that contract, one mutant planting the
bug the contract guards against, and a CI workflow, and pins the running harness for that workflow
(`falsify wrapper`: its wheel and sha256 in .falsify-harness/). `falsify lint`, `falsify gate` and
`falsify mutants` pass on the result straight away, and so does the workflow on its first run. Existing files are
never overwritten: each one is reported and left alone.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from importlib import resources
from pathlib import Path

from falsify.project import ProjectError, read_toml, subtable
from falsify.subcommand import add_subcommand
from falsify.untrusted import safefile
from falsify.wrapper import DIRECTORY, SUMS, WrapperError, pin

HELP = "write a working starter into this repo: [tool.falsify], a contract, a falsifier, a mutant, CI"
EXITS = (
    "0 the starter was written (files that already existed are listed and left alone); 2 the directory already "
    "has [tool.falsify], or its pyproject.toml cannot be read"
)

# template (falsify/starter/) -> path written, relative to the repository
FILES = {
    "__init__.py.tmpl": "example_engine/__init__.py",
    "engine.py.tmpl": "example_engine/engine.py",
    "contract.yaml.tmpl": "contracts/example-cancel-v1.yaml",
    "test_contract.py.tmpl": "tests/test_example_cancel.py",
    "mutant.yaml.tmpl": "mutants/example-poll-after-forward.yaml",
    "ci.yml.tmpl": ".github/workflows/falsify.yml",
}
PYTEST_TABLE = '\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
MAX_READ = 4 * 2**20  # bytes of an existing pyproject.toml or .gitignore init reads before it appends


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, "init", HELP, __doc__, f"exit codes: {EXITS}")
    p.add_argument("directory", nargs="?", type=Path, default=Path("."), help="the repository (default: .)")


def template(name: str) -> str:
    return (resources.files("falsify") / "starter" / name).read_text(encoding="utf-8")


def run(args: argparse.Namespace) -> int:
    root = args.directory.resolve()
    if not root.is_dir():
        raise ProjectError(f"{root} is not a directory")
    pyproject = root / "pyproject.toml"
    table = template("falsify.toml.tmpl")
    # everything read and checked before anything is written: a pyproject.toml that is not TOML, or that
    # [tool.falsify] cannot be appended to as valid TOML, or an unreadable .gitignore is refused with nothing written
    text: str | None = None
    if os.path.lexists(pyproject):  # read through the file layer: a FIFO or link is named, never read
        text = safefile.read_text(pyproject, limit=MAX_READ, what="pyproject.toml", root=root)
        if subtable(read_toml(pyproject), pyproject, "tool", "falsify") is not None:
            raise ProjectError(f"{pyproject} already has [tool.falsify]: nothing written")
        addition = ("\n" if text and not text.endswith("\n") else "") + "\n" + table
        if "[tool.pytest.ini_options]" not in text:
            addition += PYTEST_TABLE
        text += addition
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ProjectError(
                f"{pyproject}: [tool.falsify] cannot be appended as valid TOML ({exc}); add it by hand: "
                "nothing written"
            ) from None
    ignore = root / ".gitignore"
    lines = (
        safefile.read_text(ignore, limit=MAX_READ, what=".gitignore", root=root).splitlines()
        if os.path.lexists(ignore)
        else []
    )
    written, kept = [], []
    for name, target in FILES.items():
        path = root / target
        if os.path.lexists(path):
            kept.append(target)
            continue
        # every file through the one file layer: inside root, no symlinked directory on the way, O_EXCL |
        # O_NOFOLLOW (a dangling link is never written through), named errors for read-only or full disks
        safefile.make_dirs(path.parent, root=root)
        safefile.create(path, template(name).encode("utf-8"), what=target, root=root)
        written.append(target)
    if text is not None:
        safefile.replace(pyproject, text.encode("utf-8"), what="pyproject.toml", root=root)
        written.append("pyproject.toml ([tool.falsify] appended)")
    else:
        safefile.create(pyproject, (table + PYTEST_TABLE).encode("utf-8"), what="pyproject.toml", root=root)
        written.append("pyproject.toml")
    # .falsify/: the gate's and the mutants' outputs; __pycache__/: what the CI steps' Python leaves beside the
    # example engine and tests (a fresh repository has no .gitignore that says so)
    missing = [
        entry for entry in (".falsify/", "__pycache__/") if entry not in lines and f"/{entry}" not in lines
    ]
    if missing:
        data = ("\n".join([*lines, *missing]) + "\n").encode("utf-8")
        safefile.replace(ignore, data, what=".gitignore", root=root)
        written.append(f".gitignore ({', '.join(missing)}: gate and mutant outputs, compiled Python)")
    if (root / DIRECTORY / SUMS).is_file():
        kept.append(f"{DIRECTORY}/ (already there; `falsify wrapper` replaces it)")
    else:
        try:
            wheel, digest = pin(root)
        except WrapperError as exc:
            print(f"init: the harness was not pinned ({exc}); the CI workflow needs `falsify wrapper`")
        else:
            written.append(
                f"{wheel.relative_to(root)} and {DIRECTORY}/{SUMS} (sha256 {digest[:16]}…: for CI)"
            )
    for line in written:
        print(f"init: wrote {line}")
    for line in kept:
        print(f"init: kept {line} (already there; not overwritten)")
    print(
        f"init: {len(written)} written, {len(kept)} kept. Next: falsify lint && falsify gate && falsify mutants; "
        "then point engine in [tool.falsify] at your own engine (docs/tutorial.md)"
    )
    return 0
