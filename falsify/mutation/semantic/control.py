"""The mutants' control run: its record, kept and reused while nothing it depends on changed (issue #28).

The control (runner.py) runs every selected falsifier on an unmutated copy of the project; it is the slowest part
of a small `falsify mutants` run. Its result is stored under the project's scratch directory,
`.falsify/control/<key>.json`, where the key is a sha256 over everything the run depends on:

    the files a scratch copy holds (scratch.py's rules: path and content of each), the harness's own files
    (falsify/, wherever it is installed), the engine spec and, for an engine module outside the project, its
    package's files; the mutants run (their ids: they choose the falsifiers), the scope; the Python, numpy,
    pytest and hypothesis versions; and the environment variables that change a forward's bytes or the examples.

Any edit anywhere in the tree or the engine gives another key, so a stale entry is never found; the KEEP
most recent entries are kept, older ones removed.
Only a green control is stored. An entry is read back only when it parses, names its own key and carries the
HMAC-SHA256 of its body under this user's control key: anything else is refused by name (the file and why) and
the control runs again.

Why a MAC (issue #48): `.falsify/` is inside the tree, so a CI cache, an archive or a pull request can put an
entry there, and a plain checksum can be recomputed by whoever wrote it: an entry copied under another tree's key
made `falsify mutants` PASS on a tree whose control was red. The key is 32 random bytes in the user's state
directory, outside every tree (`$FALSIFY_STATE_DIR`, else `$XDG_STATE_HOME/falsify`, else
`~/.local/state/falsify`; `control.key`, mode 0600, made on first use), so only entries this user's falsify wrote
on this machine are reused. A key inside the project, a key others can read or write, or a key that cannot be
made means no entry is stored or reused (said once), never a weaker check.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from falsify.harness.results import Outcome, PredictionResult
from falsify.mutation.semantic.scratch import IGNORE_ANYWHERE, IGNORE_TOP
from falsify.untrusted import safefile

VERSION = 2  # of the entry format (2: an HMAC under the user's control key in place of a sha256)
DIRECTORY = Path(".falsify/control")
KEEP = 8  # stored controls kept (the most recent)
MAX_ENTRY_BYTES = 64 * 2**20  # a stored control's file
KEY_NAME = "control.key"  # in the user's state directory (state_dir())
KEY_BYTES = 32
ENV = (  # what changes the bytes of a forward or the examples hypothesis draws
    "OPENBLAS_CORETYPE",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "PYTHONHASHSEED",
    "HYPOTHESIS_PROFILE",
    "FALSIFY_ENGINE",
)
VERSIONS = ("numpy", "pytest", "hypothesis")


@dataclass(frozen=True, slots=True)
class Control:
    ok: bool
    seconds: float
    tests: dict[str, tuple[str, ...]]  # falsifier node id -> predictions it is bound to
    rows: list[PredictionResult]
    detail: str
    imported: dict[str, str | None]  # module -> file it was imported from
    selected: tuple[str, ...] = ()  # the falsifiers the control ran: those some mutant will run
    durations: dict[str, float] = field(default_factory=dict)  # falsifier -> seconds in the control
    # falsifier node id -> what pytest runs: the node id, or an installed pack's file path + the id's tail
    targets: dict[str, str] = field(default_factory=dict)
    reused: str = (
        ""  # the stored entry this control was read from (see the module docstring); "" when it ran here
    )
    recorded: str = ""  # when a reused control ran (UTC)


class CorruptEntry(Exception):
    """A stored control that cannot be trusted; the message says which file and why."""


@dataclass(frozen=True, slots=True)
class Stored:
    """A control read back: its fields (Control's), when it was run, the file it came from."""

    fields: dict[str, Any]
    recorded: str  # UTC time the control ran
    path: Path


def _files(root: Path, exclude: tuple[str, ...]) -> list[Path]:
    """The files a scratch copy of `root` holds (scratch.Scratch.copy's rules), sorted."""
    out = []
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        top = Path(directory) == root
        keep = []
        for name in sorted(dirnames):
            if any(fnmatch.fnmatch(name, p) for p in IGNORE_ANYWHERE):
                continue
            if top and (name in IGNORE_TOP or any(fnmatch.fnmatch(name, p) for p in exclude)):
                continue
            if (Path(directory) / name).is_symlink():
                out.append(Path(directory) / name)  # hashed as its link text: a copy keeps it as a link
                continue
            keep.append(name)
        dirnames[:] = keep
        for name in sorted(filenames):
            if any(fnmatch.fnmatch(name, p) for p in IGNORE_ANYWHERE):
                continue
            if top and (name in IGNORE_TOP or any(fnmatch.fnmatch(name, p) for p in exclude)):
                continue
            out.append(Path(directory) / name)
    return sorted(out)


def _hash_tree(digest: Any, label: str, root: Path, exclude: tuple[str, ...] = ()) -> int:
    files = _files(root, exclude)
    for path in files:
        rel = path.relative_to(root).as_posix()
        if path.is_symlink() and path.is_dir():
            content = b"link:" + os.readlink(path).encode()
        else:
            try:
                content = path.read_bytes()  # a link to a file: the copy holds its content
            except OSError as exc:
                content = f"unreadable: {exc.strerror}".encode()
        digest.update(f"{label}:{rel}\0{len(content)}\0".encode())
        digest.update(content)
    return len(files)


def _engine_package(spec: str, root: Path) -> Path | None:
    """The directory of the engine module's top-level package when it lies outside the project (an installed
    engine), else None (the tree covers it, or the engine is a program named by exec:/http:)."""
    from falsify.engines.loading import REGISTERED, is_openai, is_wire

    if is_wire(spec) or is_openai(spec):
        return None
    name = spec.partition(":")[0]
    target = REGISTERED.get(name, REGISTERED.get(spec, spec))
    top = target.partition(":")[0].split(".")[0]
    if not top or top == "falsify":
        return None  # a built-in adapter: hashed with the harness
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if found is None or not found.origin:
        return None
    where = Path(found.origin).resolve().parent if found.submodule_search_locations else Path(found.origin)
    return None if where.is_relative_to(root.resolve()) else where


def key(root: Path, exclude: tuple[str, ...], engine: str, scope: str, mutant_ids: list[str]) -> str:
    """sha256 over what the control depends on (the module docstring lists it)."""
    import falsify

    digest = hashlib.sha256(f"falsify control v{VERSION}\0".encode())
    files = _hash_tree(digest, "tree", root, exclude)
    harness = Path(falsify.__file__).resolve().parent
    if not harness.is_relative_to(root.resolve()):
        _hash_tree(digest, "falsify", harness)
    package = _engine_package(engine, root)
    if package is not None:
        if package.is_dir():
            _hash_tree(digest, "engine", package)
        else:
            digest.update(b"engine-file\0" + package.read_bytes())
    versions = {name: _version(name) for name in VERSIONS}
    facts = {
        "files": files,
        "engine": engine,
        "scope": scope,
        "mutants": sorted(mutant_ids),
        "python": sys.version,
        "machine": platform.machine(),
        "versions": versions,
        "env": {name: os.environ.get(name) for name in ENV},
    }
    digest.update(json.dumps(facts, sort_keys=True).encode())
    return digest.hexdigest()


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def path_of(root: Path, entry_key: str) -> Path:
    return root / DIRECTORY / f"{entry_key}.json"


class NoKey(Exception):
    """The user's control key cannot be used; the message says where and why. Nothing is stored or reused."""


def state_dir() -> Path:
    """The user's falsify state directory, outside every tree: $FALSIFY_STATE_DIR, else $XDG_STATE_HOME/falsify,
    else ~/.local/state/falsify."""
    given = os.environ.get("FALSIFY_STATE_DIR")
    if given:
        return Path(given).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return base / "falsify"


def secret(root: Path, make: bool) -> bytes:
    """This user's control key: read from the state directory (made there first when `make`). NoKey when it is
    inside the project, not this user's or readable or writable by others, or cannot be read or made."""
    path = state_dir() / KEY_NAME
    if path.resolve().is_relative_to(root.resolve()):
        raise NoKey(
            f"the control key {path} lies inside the project, where anyone who writes the tree can read it"
        )
    if make and not os.path.lexists(path):
        try:
            safefile.make_dirs(path.parent, what="state directory")
            os.chmod(path.parent, 0o700)
            safefile.create(path, os.urandom(KEY_BYTES).hex().encode(), mode=0o600, what="control key")
        except (safefile.FileLayerError, OSError) as exc:
            if not os.path.lexists(path):  # not a concurrent run that made it first
                raise NoKey(f"cannot make the control key: {exc}") from None
    if not os.path.lexists(path):
        raise NoKey(f"no control key at {path} (made when a control is first stored)")
    try:
        st = os.lstat(path)
        text = safefile.read_text(path, limit=4 * KEY_BYTES, what="control key")
    except (safefile.FileLayerError, OSError) as exc:
        raise NoKey(f"cannot read the control key: {exc}") from None
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise NoKey(
            f"the control key {path} is not this user's alone (owner uid {st.st_uid}, mode {st.st_mode & 0o777:o}): "
            "not trusted"
        )
    try:
        key_bytes = bytes.fromhex(text.strip())
    except ValueError:
        key_bytes = b""
    if len(key_bytes) != KEY_BYTES:
        raise NoKey(f"the control key {path} is not {KEY_BYTES} bytes of hex")
    return key_bytes


def _body_mac(key_bytes: bytes, body: dict[str, Any]) -> str:
    return hmac.new(key_bytes, json.dumps(body, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def store(root: Path, entry_key: str, fields: dict[str, Any]) -> Path:
    """Write a green control's fields under its key (atomically: a reader never sees half a file)."""
    rows = [_row(r) for r in fields["rows"]]
    body = {
        "version": VERSION,
        "key": entry_key,
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "control": {**fields, "rows": rows},
    }
    mac = _body_mac(secret(root, make=True), body)
    path = path_of(root, entry_key)
    safefile.make_dirs(path.parent, what="control store", root=root)
    data = json.dumps({**body, "hmac": mac}, indent=1, sort_keys=True).encode()
    safefile.replace(path, data, what="stored control", root=root)  # atomic, never through a link
    # Every edit of the tree makes a new key: keep the KEEP most recent entries, not one per edit forever.
    entries = sorted(path.parent.glob("*.json"), key=lambda p: (p.stat().st_mtime_ns, p.name), reverse=True)
    for stale in entries[KEEP:]:
        if stale != path:
            stale.unlink(missing_ok=True)
    return path


def load(root: Path, entry_key: str) -> Stored | None:
    """The stored control of this key; None when there is none; CorruptEntry when the file cannot be trusted;
    NoKey when there is an entry but no usable control key to check it with."""
    path = path_of(root, entry_key)
    if not os.path.lexists(path):
        return None
    try:
        data = safefile.read_json(path, limit=MAX_ENTRY_BYTES, what="stored control", root=root)
    except safefile.FileLayerError as exc:  # a link, a FIFO, too large, not UTF-8 or not JSON
        raise CorruptEntry(f"not JSON or not readable: {exc}") from None
    if not isinstance(data, dict):
        raise CorruptEntry(f"{path}: not a control entry (a JSON {type(data).__name__})")
    claimed = data.pop("hmac", None)
    if data.get("version") != VERSION:
        raise CorruptEntry(f"{path}: entry format {data.get('version')!r}, this falsify reads {VERSION}")
    if data.get("key") != entry_key:
        raise CorruptEntry(f"{path}: holds key {data.get('key')!r}, not its file name's")
    mac = _body_mac(secret(root, make=False), data)
    # bytes: compare_digest raises TypeError on a str with non-ASCII characters (found by the fuzzer)
    if not isinstance(claimed, str) or not hmac.compare_digest(claimed.encode(), mac.encode()):
        raise CorruptEntry(
            f"{path}: its HMAC does not match this user's control key ({state_dir() / KEY_NAME}): not written by "
            "this user's falsify here (copied from another tree or machine, restored from a cache, forged or edited)"
        )
    try:
        control = dict(data["control"])
        control["rows"] = [_unrow(r) for r in control["rows"]]
        control["tests"] = {k: tuple(v) for k, v in control["tests"].items()}
        control["selected"] = tuple(control["selected"])
        recorded = str(data["recorded"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CorruptEntry(f"{path}: a field is missing or malformed ({type(exc).__name__}: {exc})") from None
    return Stored(control, recorded, path)


TUPLE_FIELDS = (
    "tests",
    "failing_tests",
    "corners",
    "corners_reached",
)  # PredictionResult's tuples (JSON lists)


def _row(r: PredictionResult) -> dict[str, Any]:
    return {**{f.name: getattr(r, f.name) for f in fields(r)}, "outcome": r.outcome.value}


def _unrow(d: dict[str, Any]) -> PredictionResult:
    names = {f.name for f in fields(PredictionResult)}
    if set(d) != names:
        raise KeyError(f"a row's fields are {sorted(d)}, not {sorted(names)}")
    return PredictionResult(
        **{**d, "outcome": Outcome(d["outcome"])} | {k: tuple(d[k]) for k in TUPLE_FIELDS}
    )


def reuse_or_run(
    root: Path,
    exclude: tuple[str, ...],
    engine: str,
    scope: str,
    mutant_ids: list[str],
    run: Callable[[], Control],
    say: Callable[[str], None],
) -> Control:
    """The stored control of this key when there is one, else `run()`'s, stored when green and the tree did
    not change while it ran. A refused entry is named in `say` and the control runs again."""
    args = (root, exclude, engine, scope, mutant_ids)
    entry = key(*args)
    try:
        stored = load(root, entry)
    except CorruptEntry as exc:
        say(f"mutants: stored control refused — {exc}; running the control again")
        stored = None
    except NoKey as exc:
        say(f"mutants: stored control not read — {exc}; running the control again")
        stored = None
    if stored is not None:
        where = str(stored.path.relative_to(root))
        say(
            f"mutants: control reused from {where}: the tree, the engine and the versions are those it ran on "
            "(--fresh-control runs it again)"
        )
        return Control(**stored.fields, reused=where, recorded=stored.recorded)
    control = run()
    if control.ok and key(*args) == entry:
        kept = {
            f.name: getattr(control, f.name) for f in fields(Control) if f.name not in ("reused", "recorded")
        }
        try:
            store(root, entry, kept)
        except (safefile.FileLayerError, NoKey) as exc:  # the run stands; only its reuse is lost
            say(f"mutants: control not stored — {exc}")
    return control


def green_text(control: Control, read: float) -> str:
    """How a green control is announced: run here, or reused (with the seconds it took when it ran)."""
    if control.reused:
        return (
            f"reused — {len(control.selected)} falsifiers green in {control.seconds:.1f} s when recorded "
            f"({control.recorded}), read in {read:.1f} s"
        )
    return f"green — {len(control.selected)} falsifiers in {control.seconds:.1f} s"
