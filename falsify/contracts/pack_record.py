"""An installed pack checked against its distribution's RECORD before anything uses it (issue #48).

A pack's contracts and falsifiers decide verdicts, and an installed pack lives in site-packages, where anyone who
can write the environment can edit it: a falsifier edited there turned a FAIL into a PASS without a word, and
evidence named the edited file as the published version's. pip writes each installed file's sha256 and size into
the distribution's `RECORD` (the wheel's own list, PEP 376 / PEP 627), so before a gate, a mutant run, lint or
evidence reads a pack, every file under `falsify/packs/<pack>/` is held to it:

    a file whose sha256 or size differs from its RECORD line, a file RECORD does not list (a falsifier or
    conftest.py added beside the shipped ones), a RECORD line whose file is gone, a symlink in the pack

each a PackTampered naming the file and the RECORD, listing every difference. What is checked is recorded in
evidence (`falsify.record` on each pack file) and `falsify verify` checks again. Where falsify does not run from
a wheel's files (a source tree, an editable install: no RECORD lists the pack's files) the pack is used as it is
and the record says so.

This catches an edit of the pack, not an edit of the RECORD as well: whoever can rewrite both can rewrite the
harness itself. `falsify wrapper` pins the whole wheel by its sha256 for that (`.falsify-harness/SHA256SUMS`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from dataclasses import dataclass
from functools import cache
from importlib import metadata, resources
from pathlib import Path

from falsify.errors import FalsifyError

DISTRIBUTION = "falsify-harness"  # the distribution the packs ship in (pyproject.toml [project] name)


class PackError(FalsifyError):
    """A pack name that no installed pack has (falsify/contracts/packs.py raises it; defined here, below it)."""


def root() -> Path:
    """falsify/packs/, where the installed packs are."""
    return Path(str(resources.files("falsify.packs")))


class PackTampered(PackError):
    """An installed pack whose files are not those its distribution's RECORD lists."""


@dataclass(frozen=True, slots=True)
class PackCheck:
    pack: str
    files: int  # pack files held to RECORD (0 when not checked)
    record: str  # how: "RECORD of falsify-harness 0.1.0", or why it was not checked

    @property
    def checked(self) -> bool:
        return self.files > 0


def record_hash(data: bytes) -> str:
    """A RECORD hash field: sha256=<urlsafe base64 without padding> (PEP 376)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _on_disk(base: Path, prefix: str) -> dict[str, Path]:
    """The pack's files as RECORD would name them (bytecode caches aside, as pip leaves them out)."""
    out = {}
    for directory, dirnames, filenames in os.walk(base, followlinks=False):
        here = Path(directory)
        linked = [d for d in dirnames if (here / d).is_symlink()]  # listed as files: never walked
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and d not in linked)
        for name in sorted(filenames + linked):
            out[prefix + (here / name).relative_to(base).as_posix()] = here / name
    return out


def _differences(listed: dict[str, metadata.PackagePath], present: dict[str, Path]) -> list[str]:
    problems = []
    for name in sorted(set(present) - set(listed)):
        problems.append(f"{name}: not in RECORD (added after install)")
    for name in sorted(set(listed) - set(present)):
        problems.append(f"{name}: in RECORD, missing")
    for name in sorted(set(listed) & set(present)):
        path, line = present[name], listed[name]
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):
            problems.append(f"{name}: not a regular file (a wheel installs none)")
            continue
        data = path.read_bytes()
        want = None if line.hash is None else f"{line.hash.mode}={line.hash.value}"
        if want is None or not want.startswith("sha256="):
            problems.append(f"{name}: RECORD gives it no sha256")
        elif record_hash(data) != want or (line.size is not None and line.size != len(data)):
            problems.append(
                f"{name}: {record_hash(data)[:19]}... ({len(data)} bytes), RECORD says {want[:19]}... "
                f"({line.size} bytes)"
            )
    return problems


def record_problems(dist: metadata.Distribution, base: Path, prefix: str) -> list[str]:
    """Every difference between the files under `base` (named `prefix` + their path below it, as RECORD names
    them) and the lines of `dist`'s RECORD under `prefix`."""
    listed = {
        str(f.as_posix()): f
        for f in dist.files or ()
        if str(f.as_posix()).startswith(prefix) and "__pycache__" not in f.parts
    }
    return _differences(listed, _on_disk(base, prefix))


def refusal(what: str, dist: metadata.Distribution, problems: list[str]) -> str:
    """`what` does not match the RECORD: the first differences, their number and the fix, on one line."""
    shown = "; ".join(problems[:4]) + (f"; and {len(problems) - 4} more" if len(problems) > 4 else "")
    record = dist.locate_file(f"{DISTRIBUTION.replace('-', '_')}-{dist.version}.dist-info/RECORD")
    return (
        f"{what} does not match the RECORD of {DISTRIBUTION} {dist.version} ({record}): {shown} "
        f"[{len(problems)} difference(s)]; reinstall {DISTRIBUTION}"
    )


def installed(package: Path) -> tuple[metadata.Distribution | None, str]:
    """The distribution whose RECORD lists the files of `package` (falsify/ or a directory below it), or None and
    why not: not installed, no RECORD (not from a wheel), or falsify runs from other files (editable, source)."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None, f"not checked: {DISTRIBUTION} is not installed (falsify runs from a source tree)"
    if dist.read_text("RECORD") is None:
        return None, f"not checked: {DISTRIBUTION} {dist.version} has no RECORD (not installed from a wheel)"
    at = Path(str(dist.locate_file(package.resolve().relative_to(root().resolve().parent.parent).as_posix())))
    if at.resolve() != package.resolve():
        return None, (
            f"not checked: falsify runs from {root().resolve().parent.parent}, not from the files {DISTRIBUTION} "
            f"{dist.version} installed (an editable install or a source tree: no RECORD lists them)"
        )
    return dist, f"the RECORD of {DISTRIBUTION} {dist.version}"


@cache
def check(pack: str) -> PackCheck:
    """Hold the installed pack `pack` (a name `packs.available()` lists) to its distribution's RECORD, once per
    process; PackTampered naming every difference."""
    base = root() / pack
    dist, how = installed(base)
    if dist is None:
        return PackCheck(pack, 0, how)
    prefix = f"falsify/packs/{pack}/"
    problems = record_problems(dist, base, prefix)
    if problems:
        raise PackTampered(refusal(f"installed pack {pack!r}", dist, problems))
    files = sum(
        1 for f in dist.files or () if str(f.as_posix()).startswith(prefix) and "__pycache__" not in f.parts
    )
    return PackCheck(pack, files, f"checked against {how}: {files} files")
