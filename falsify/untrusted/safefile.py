"""The one file layer for paths falsify reads or writes on a user's behalf: `falsify init`, `keygen`, `sign`,
evidence bundles, `--out`, `verify`, the project's configuration.

- Reads open with O_NOFOLLOW and O_NONBLOCK, check the open descriptor is a regular file before a byte is read
  (a FIFO or /dev/zero is refused at once, never waited on or read without end) and stop at a byte limit.
- A new file is created with O_CREAT | O_EXCL | O_NOFOLLOW: never through a symlink, dangling or not, never over
  an existing file. A replaced file is written to a new temporary beside it and renamed over it, so a symlink in
  its place is replaced, never written through; anything but a regular file in its place is refused.
- With `root`, the path must lie inside `root` and no component below `root` may be a symlink.
- Every OSError becomes a FileLayerError naming the path and the cause in words: read-only file system, disk full,
  not a directory, permission denied, a symlink.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from falsify.errors import FalsifyError

CAUSES = {
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "no space left on the device (disk full)",
    errno.EDQUOT: "disk quota exceeded",
    errno.ENOTDIR: "a component of the path is not a directory",
    errno.EISDIR: "is a directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ELOOP: "a symlink (not followed)",
    errno.EEXIST: "already exists",
    errno.ENOENT: "does not exist",
    errno.ENAMETOOLONG: "name too long",
    errno.EMLINK: "a symlink (not followed)",  # FreeBSD's O_NOFOLLOW errno
}
KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISREG, "a regular file"),
)


class FileLayerError(FalsifyError):
    """A path falsify may not or cannot read or write; str() is `PATH: cause`."""


def cause(exc: OSError) -> str:
    return CAUSES.get(exc.errno or 0, exc.strerror or str(exc))


def kind(mode: int) -> str:
    return next((name for test, name in KINDS if test(mode)), "not a regular file")


def inside(root: Path, path: Path) -> None:
    """Refuse `path` unless it lies under `root` with no symlink among its components below `root`."""
    base = Path(os.path.abspath(root))
    target = Path(os.path.abspath(path))
    try:
        parts = target.relative_to(base).parts
    except ValueError:
        raise FileLayerError(f"{path}: outside {root}; falsify reads and writes only inside it") from None
    here = base
    for part in parts[:-1]:
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            return  # nothing further exists: nothing on the way can be a link
        except OSError as exc:
            raise FileLayerError(f"{here}: {cause(exc)}") from None
        if stat.S_ISLNK(mode):
            raise FileLayerError(f"{here}: a symlinked directory; falsify does not follow it")
        if not stat.S_ISDIR(mode):
            raise FileLayerError(f"{here}: {CAUSES[errno.ENOTDIR]} ({kind(mode)})")


def link_out_of(root: Path, path: Path) -> str | None:
    """Why `path`, a name under `root` (the project, or an installed pack), must not be read: it is a symlink, or
    lies below one, whose target resolves outside `root`. None when it resolves inside, or when `path` is not under
    `root` at all (whether to read that is the caller's rule). The file-level twin of the walkers' "symlinked
    directory: not followed": contracts, mutants, test files and packs are read only where they lie inside the
    project, so a link cannot show a file from elsewhere (its text quoted in lint's errors) or run its tests."""
    here = Path(os.path.abspath(root))
    try:
        parts = Path(os.path.abspath(path)).relative_to(here).parts
    except ValueError:
        return None
    base = os.path.realpath(root)
    target = os.path.realpath(path)
    if target == base or target.startswith(base.rstrip(os.sep) + os.sep):
        return None
    if os.path.islink(path):
        what = "a directory" if os.path.isdir(path) else "a file"
        return f"a symlink to {what} outside the project: not followed"
    for part in parts[:-1]:
        here = here / part
        if os.path.islink(here):
            return f"below {here}, a symlink to a directory outside the project: not followed"
    return "resolves outside the project: not read"


def open_regular(path: Path, *, what: str = "file", root: Path | None = None) -> BinaryIO:
    """`path` opened for reading, once it is known to be a regular file reached without a symlink."""
    if root is not None:
        inside(root, path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise FileLayerError(f"{path}: cannot read the {what}: {cause(exc)}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise FileLayerError(f"{path}: the {what} is not a regular file ({kind(mode)})")
    return os.fdopen(fd, "rb")


def sha256(path: Path, *, what: str = "file", root: Path | None = None) -> str:
    """The sha256 of the regular file at `path`, read in blocks (weights may be gigabytes: no size limit)."""
    h = hashlib.sha256()
    with open_regular(path, what=what, root=root) as f:
        try:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        except OSError as exc:
            raise FileLayerError(f"{path}: cannot read the {what}: {cause(exc)}") from None
    return h.hexdigest()


def read_bytes(path: Path, *, limit: int, what: str = "file", root: Path | None = None) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them."""
    with open_regular(path, what=what, root=root) as f:
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise FileLayerError(f"{path}: cannot read the {what}: {cause(exc)}") from None
    if len(data) > limit:
        raise FileLayerError(f"{path}: the {what} is over {limit:,} bytes")
    return data


def read_text(path: Path, *, limit: int, what: str = "file", root: Path | None = None) -> str:
    data = read_bytes(path, limit=limit, what=what, root=root)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileLayerError(f"{path}: the {what} is not UTF-8 (byte {exc.start})") from None


def read_json(path: Path, *, limit: int, what: str = "file", root: Path | None = None) -> Any:
    """The value of the JSON document at `path`: a regular file of at most `limit` bytes, read by the bounded
    JSON reader (falsify/untrusted/boundedjson.py); any failure is a FileLayerError naming the file."""
    from falsify.untrusted import boundedjson

    data = read_bytes(path, limit=limit, what=what, root=root)
    try:
        return boundedjson.loads(data, what=str(path), max_bytes=limit)
    except boundedjson.JsonFormatError as exc:
        raise FileLayerError(str(exc)) from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def create(
    path: Path, data: bytes, *, mode: int = 0o644, what: str = "file", root: Path | None = None
) -> None:
    """Create `path` with `data`; refuse if anything (a file, a symlink, even a dangling one) is there."""
    if root is not None:
        inside(root, path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        raise FileLayerError(f"{path}: cannot create the {what}: {cause(exc)}") from None
    try:
        _write_all(fd, data)
    except OSError as exc:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise FileLayerError(f"{path}: cannot write the {what}: {cause(exc)}") from None
    os.close(fd)


def replace(
    path: Path, data: bytes, *, mode: int = 0o644, what: str = "file", root: Path | None = None
) -> None:
    """Write `data` to `path` atomically (a new file renamed over it). What is there must be a regular file or
    nothing: a symlink, FIFO or directory in its place is refused, and nothing is ever written through a link."""
    if root is not None:
        inside(root, path)
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise FileLayerError(f"{path}: cannot write the {what}: {cause(exc)}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise FileLayerError(f"{path}: cannot replace the {what}: {kind(st.st_mode)} is in its place")
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    create(temporary, data, mode=mode, what=what)
    try:
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise FileLayerError(f"{path}: cannot write the {what}: {cause(exc)}") from None


def make_dirs(path: Path, *, what: str = "directory", root: Path | None = None) -> None:
    """`mkdir -p path`, refusing a symlink or non-directory at `path` or (with `root`) on the way from `root`."""
    if root is not None:
        inside(root, path / "x")
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise FileLayerError(f"{path}: cannot make the {what}: {cause(exc)}") from None
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        raise FileLayerError(f"{path}: cannot make the {what}: {cause(exc)}") from None
    if not stat.S_ISDIR(mode):
        raise FileLayerError(f"{path}: the {what} is {kind(mode)}, not a directory")
