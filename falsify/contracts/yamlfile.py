"""Safe YAML loading that remembers where every key and item came from.

Contracts are data: loaded with PyYAML's SafeLoader only, with anchors/aliases refused (an alias bomb expands
exponentially on construction), duplicate keys refused (PyYAML silently keeps the last), a size cap, and strict
UTF-8. Every failure is a ContractError naming file:line.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from falsify.errors import ContractError, Problem
from falsify.untrusted import safefile

MAX_BYTES = 1 << 20  # 1 MiB: a contract is prose plus formulas; a larger file is a mistake or an attack
MAX_DEPTH = 32  # nesting of mappings and sequences; a contract needs 4
MAX_EVENTS = 200_000  # YAML nodes in one file
MAX_NUMBER_CHARS = 64  # an int or float scalar longer than this is a mistake (int() refuses 4,300+ digits)

Path_ = tuple[str | int, ...]


@dataclass(slots=True)
class Located:
    """A loaded YAML document and the line of each path inside it (keys and sequence items, 1-based)."""

    file: str
    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)
    sha256: str = ""  # of the bytes read, so no one reads the file a second time

    def line(self, path: Path_) -> int:
        """The line of `path`, or of its nearest located ancestor."""
        path = tuple(path)
        while path not in self.lines and path:
            path = path[:-1]
        return self.lines.get(path, 1)


def format_path(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def read_regular(path: Path, name: str, limit: int = MAX_BYTES) -> bytes:
    """The bytes of `path` if it is a regular file of at most `limit` bytes; ContractError otherwise.

    Opened non-blocking (a FIFO would block an ordinary open until a writer comes), then checked with fstat on
    the open descriptor (no race between the check and the read): directories, FIFOs, sockets and devices
    (/dev/zero, /dev/urandom) are refused before a byte is read, and reading stops at `limit` + 1 bytes."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ContractError(Problem(name, 0, "", f"cannot read: {_why(exc)}", "io")) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ContractError(
                Problem(name, 0, "", f"not a regular file ({safefile.kind(info.st_mode)})", "io")
            )
        if info.st_size > limit:
            raise ContractError(
                Problem(
                    name,
                    1,
                    "",
                    f"file is {info.st_size / 1e6:.1f} MB, over the {limit // 1024} KiB limit",
                    "size",
                )
            )
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise ContractError(Problem(name, 0, "", f"cannot read: {_why(exc)}", "io")) from None
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    if len(raw) > limit:
        raise ContractError(Problem(name, 1, "", f"file grew past the {limit // 1024} KiB limit", "size"))
    return raw


def _why(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    return exc.strerror or str(exc)


def load_yaml(path: Path, display: str | None = None) -> Located:
    name = display or str(path)
    raw = read_regular(path, name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ContractError(
            Problem(
                name, line, "", f"not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}", "encoding"
            )
        ) from None
    located = parse_yaml(text, name)
    located.sha256 = hashlib.sha256(raw).hexdigest()
    return located


# libyaml when PyYAML was built with it (about 20x faster); the pure-Python loader otherwise. Both are "safe".
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str, name: str) -> Located:
    try:
        _precheck(text, name)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                raise ContractError(Problem(name, 1, "", "empty document", "type"))
            located = Located(name, None)
            # Composing is linear even for an alias bomb (an alias is a second reference to the same node);
            # _index refuses any node reached twice, before construction could expand it.
            located.data = _build(node, (), located, name, set(), loader)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise ContractError(
            Problem(name, line, "", f"YAML syntax: {exc.problem or exc.context}", "yaml")
        ) from None
    except yaml.YAMLError as exc:
        raise ContractError(Problem(name, 1, "", f"YAML: {_first_line(exc)}", "yaml")) from None
    return located


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _precheck(text: str, name: str) -> None:
    """Walk the event stream (iterative, no recursion) before composing: bound nesting depth and node count,
    refuse anchors and aliases, so the recursive composer and _build below only ever see a bounded tree."""
    loader = _Loader(text)
    depth = events = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            events += 1
            line = event.start_mark.line + 1 if event.start_mark else 1
            if events > MAX_EVENTS:
                raise ContractError(Problem(name, line, "", f"more than {MAX_EVENTS} YAML nodes", "size"))
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise ContractError(
                    Problem(name, line, "", "YAML anchors and aliases are not allowed in contracts", "alias")
                )
            tag = getattr(event, "tag", None)
            if tag is not None and tag not in (_STR, "!") and not isinstance(event, yaml.DocumentStartEvent):
                # Contracts need no explicit tag; one forces a constructor onto a value it was not written for
                # (`!!bool "maybe"`, `!!int ""`). `!!str` (quoting by tag) is the exception.
                raise ContractError(
                    Problem(name, line, "", f"explicit YAML tag {tag} is not allowed", "yaml")
                )
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ContractError(
                        Problem(name, line, "", f"nested deeper than {MAX_DEPTH} levels", "depth")
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            elif isinstance(event, yaml.DocumentStartEvent) and events > 2:
                raise ContractError(Problem(name, line, "", "more than one YAML document", "yaml"))
    finally:
        loader.dispose()


_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_NUMBERS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
_PLAIN = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:null")


def _scalar(node: yaml.ScalarNode, path: Path_, name: str, loader: Any) -> Any:
    """Strings, numbers, bools and null; every other scalar type (dates, binary, custom tags) is refused."""
    line = node.start_mark.line + 1
    where = format_path(path)
    if node.tag == _STR:
        return node.value
    if node.tag in _NUMBERS and len(node.value) > MAX_NUMBER_CHARS:
        raise ContractError(
            Problem(
                name, line, where, f"number {node.value[:20]}... is {len(node.value)} characters long", "type"
            )
        )
    if node.tag == "tag:yaml.org,2002:timestamp":
        raise ContractError(
            Problem(name, line, where, f"{node.value!r} reads as a date; quote it if it is text", "type")
        )
    if node.tag not in _NUMBERS and node.tag not in _PLAIN:
        raise ContractError(Problem(name, line, where, f"unsupported YAML tag {node.tag}", "yaml"))
    try:
        value = loader.construct_object(node, deep=True)
    except (
        Exception
    ) as exc:  # a scalar constructor fails in many ways (KeyError, IndexError...): each is named
        raise ContractError(
            Problem(name, line, where, f"bad scalar {node.value[:40]!r}: {_first_line(exc)}", "type")
        ) from None
    if isinstance(value, float) and value != value:
        raise ContractError(Problem(name, line, where, "NaN is not allowed in a contract", "type"))
    return value


def _build(node: yaml.Node, path: Path_, out: Located, name: str, seen_nodes: set[int], loader: Any) -> Any:
    """Construct the document from its nodes, recording the line of every key and item on the way."""
    if isinstance(node, yaml.ScalarNode):
        return _scalar(node, path, name, loader)
    if id(node) in seen_nodes:
        raise ContractError(
            Problem(
                name,
                node.start_mark.line + 1,
                format_path(path),
                "YAML anchors and aliases are not allowed in contracts",
                "alias",
            )
        )
    seen_nodes.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        if node.tag != _SEQ:
            raise ContractError(
                Problem(
                    name,
                    node.start_mark.line + 1,
                    format_path(path),
                    f"unsupported YAML tag {node.tag}",
                    "yaml",
                )
            )
        items = []
        for i, item in enumerate(node.value):
            out.lines[(*path, i)] = item.start_mark.line + 1
            items.append(_build(item, (*path, i), out, name, seen_nodes, loader))
        return items
    if node.tag != "tag:yaml.org,2002:map" or not isinstance(node, yaml.MappingNode):
        raise ContractError(
            Problem(
                name, node.start_mark.line + 1, format_path(path), f"unsupported YAML node {node.tag}", "yaml"
            )
        )
    mapping: dict[Any, Any] = {}
    lines: dict[Any, int] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise ContractError(
                Problem(
                    name,
                    key_node.start_mark.line + 1,
                    format_path(path),
                    "mapping keys must be plain scalars",
                    "yaml",
                )
            )
        key = _build(key_node, path, out, name, seen_nodes, loader)
        line = key_node.start_mark.line + 1
        if not isinstance(key, str):
            raise ContractError(
                Problem(
                    name,
                    key_node.start_mark.line + 1,
                    format_path(path),
                    f"mapping key {key_node.value!r} is read as {type(key).__name__}, not text; quote it",
                    "yaml",
                )
            )
        if key == "<<":
            raise ContractError(
                Problem(name, line, format_path(path), "YAML merge keys are not allowed", "alias")
            )
        if key in lines:
            raise ContractError(
                Problem(
                    name,
                    line,
                    format_path((*path, key)),
                    f"duplicate key {key!r} (first on line {lines[key]})",
                    "duplicate-key",
                )
            )
        lines[key] = line
        out.lines[(*path, key)] = line
        mapping[key] = _build(value_node, (*path, key), out, name, seen_nodes, loader)
    return mapping
