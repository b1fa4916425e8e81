"""`falsify wrapper`: the harness pinned in the project, as the Gradle wrapper pins Gradle.

Writes the falsify harness that is running now into `.falsify-harness/` as a wheel, with its sha256 in
`.falsify-harness/SHA256SUMS`. The CI workflow `falsify init` writes checks that sum and installs that wheel, so
it is green on its first run in a fresh repository whether or not falsify-harness is on any package index, and CI
runs the harness the team ran locally, byte for byte. `falsify init` calls it; run it again after upgrading
falsify (commit both files).

The wheel is made from the installed package's files (every file under the `falsify` package, no bytecode) and
its distribution's metadata (METADATA, entry_points.txt), with fixed timestamps and sorted entries: the same
installed harness gives the same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import zipfile
from importlib import metadata
from pathlib import Path

from falsify import __version__
from falsify.contracts import pack_record
from falsify.contracts.packs import DISTRIBUTION
from falsify.errors import FalsifyError
from falsify.subcommand import add_subcommand
from falsify.untrusted import safefile

DIRECTORY = ".falsify-harness"
SUMS = "SHA256SUMS"
HELP = "pin the running falsify harness in this repo: a wheel and its sha256 in .falsify-harness/ (for CI)"
EXITS = "0 the wheel and SHA256SUMS are written; 2 the running harness has no distribution metadata to pack"
EPOCH = (
    1980,
    1,
    1,
    0,
    0,
    0,
)  # the earliest zip timestamp: every entry gets it, so bytes do not depend on mtime
WHEEL = f"Wheel-Version: 1.0\nGenerator: falsify wrapper {__version__}\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


class WrapperError(FalsifyError):
    """The running harness cannot be packed into a wheel."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, "wrapper", HELP, __doc__, f"exit codes: {EXITS}")
    p.add_argument("directory", nargs="?", type=Path, default=Path("."), help="the repository (default: .)")


def wheel_name(version: str) -> str:
    return f"{DISTRIBUTION.replace('-', '_')}-{version}-py3-none-any.whl"


def build_wheel(target: Path) -> Path:
    """The running harness as a wheel in `target`; returns its path."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise WrapperError(
            f"{DISTRIBUTION} is not installed as a distribution (no METADATA to pack): install it with pip"
        ) from None
    meta = dist.read_text("METADATA")
    if not meta:
        raise WrapperError(f"{DISTRIBUTION} {dist.version}: its METADATA cannot be read")
    version = dist.version
    package = Path(__file__).resolve().parent
    # Pin only the harness its distribution installed (issue #48): a file edited in site-packages would be pinned
    # and run in CI byte for byte. A source tree or an editable install has no RECORD of its files: packed as is.
    recorded, _ = pack_record.installed(package)
    if recorded is not None:
        problems = pack_record.record_problems(recorded, package, "falsify/")
        if problems:
            raise WrapperError(pack_record.refusal("the installed harness", recorded, problems))
    files: dict[str, bytes] = {
        f"falsify/{p.relative_to(package).as_posix()}": p.read_bytes()
        for p in sorted(package.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    }
    info = f"{DISTRIBUTION.replace('-', '_')}-{version}.dist-info"
    files[f"{info}/METADATA"] = meta.encode()
    files[f"{info}/WHEEL"] = WHEEL.encode()
    entry_points = dist.read_text("entry_points.txt")
    if entry_points:
        files[f"{info}/entry_points.txt"] = entry_points.encode()
    files[f"{info}/top_level.txt"] = b"falsify\n"
    record = "".join(f"{name},{pack_record.record_hash(data)},{len(data)}\n" for name, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    target.mkdir(parents=True, exist_ok=True)
    out = target / wheel_name(version)
    tmp = out.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)  # a link left in its place is removed, never written through
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as whl:
        for name, data in files.items():  # the package's files sorted, then the dist-info, RECORD last
            entry = zipfile.ZipInfo(name, EPOCH)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(entry, data)
    tmp.replace(out)
    return out


def pin(root: Path) -> tuple[Path, str]:
    """Write the wheel and SHA256SUMS into root/.falsify-harness (older wheels there are removed); (wheel, sha256)."""
    directory = root / DIRECTORY
    safefile.make_dirs(directory, what="wrapper directory", root=root)  # not a link out of the repo
    for old in directory.glob("*.whl"):
        old.unlink()
    wheel = build_wheel(directory)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    # `sha256sum -c SHA256SUMS` format: the digest, two spaces, the file name
    safefile.replace(directory / SUMS, f"{digest}  {wheel.name}\n".encode(), what="SHA256SUMS")
    return wheel, digest


def run(args: argparse.Namespace) -> int:
    root = args.directory.resolve()
    if not root.is_dir():
        raise WrapperError(f"{root} is not a directory")
    wheel, digest = pin(root)
    print(f"wrapper: wrote {wheel.relative_to(root)} (sha256 {digest}) and {DIRECTORY}/{SUMS}; commit both")
    return 0
