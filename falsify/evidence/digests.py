"""Digests, in-toto ResourceDescriptors and the one JSON encoding every statement uses."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """The sha256 of a regular file (links followed: a tree's sources may be links inside it). Opened without
    blocking and checked on the open descriptor, so a FIFO or device put in a file's place is an OSError naming
    it, never a hang or an endless read (issue #27)."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def descriptor(name: str, digest: str, **annotations: str) -> dict[str, Any]:
    """An in-toto ResourceDescriptor (attestation spec v1, resource_descriptor.md): name + sha256 digest."""
    out: dict[str, Any] = {"name": name, "digest": {"sha256": digest}}
    if annotations:
        out["annotations"] = dict(annotations)
    return out


def canonical(obj: Any) -> str:
    """One line of JSON: sorted keys, no spaces, UTF-8 text kept as is. Same object -> same bytes."""
    return json.dumps(
        plain_json(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def pretty(obj: Any) -> str:
    """Indented, sorted JSON with a final newline, for the bundle's JSON files."""
    return json.dumps(plain_json(obj), sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def plain_json(value: Any) -> Any:
    """Observed values made strict JSON: NaN and infinities become strings, tuples lists, keys strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_json(v) for v in value]
    return value


def scrub(value: Any, root: Path) -> Any:
    """Make text machine-neutral: the project's absolute path becomes relative ('.'), so does the directory the
    harness is installed in, the home directory '~' (the weights cache lives there), and object addresses in reprs
    ('at 0x7f3a...') '0x?'."""
    # The directory holding the installed falsify package (site-packages) goes too: a pack falsifier's path in a
    # message reads `falsify/packs/...`, its path inside the distribution.
    harness = Path(__file__).resolve().parent.parent.parent
    replacements = [(str(p), ".") for p in {root, root.resolve(), harness}] + [(str(Path.home()), "~")]
    replacements.sort(key=lambda r: len(r[0]), reverse=True)  # the longest prefix first: a root inside home

    def fix(text: str) -> str:
        for prefix, short in replacements:
            if short == ".":
                text = text.replace(prefix + "/", "")
            text = text.replace(prefix, short)
        return _ADDRESS.sub(" at 0x?", text)

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return fix(v)
        if isinstance(v, dict):
            return {fix(str(k)): walk(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [walk(x) for x in v]
        return v

    return walk(value)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]{4,}")
