"""Safe YAML loading that remembers where every key and item came from.

Contracts are data: loaded with PyYAML's SafeLoader only, with anchors/aliases refused (an alias bomb expands
exponentially on construction), duplicate keys refused (PyYAML silently keeps the last), a size cap, and strict
UTF-8. Every failure is a ContractError naming file:line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from falsify.errors import ContractError, Problem

MAX_BYTES = 1 << 20  # 1 MiB: a contract is prose plus formulas; a larger file is a mistake or an attack

Path_ = tuple[str | int, ...]


@dataclass(slots=True)
class Located:
    """A loaded YAML document and the line of each path inside it (keys and sequence items, 1-based)."""

    file: str
    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)

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


def load_yaml(path: Path, display: str | None = None) -> Located:
    name = display or str(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ContractError(Problem(name, 0, "", f"cannot read: {exc.strerror}", "io")) from None
    if size > MAX_BYTES:
        raise ContractError(
            Problem(name, 1, "", f"file is {size / 1e6:.1f} MB, over the {MAX_BYTES // 1024} KiB limit", "size")
        )
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ContractError(
            Problem(name, line, "", f"not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}", "encoding")
        ) from None
    return parse_yaml(text, name)


def parse_yaml(text: str, name: str) -> Located:
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                mark = event.start_mark
                raise ContractError(
                    Problem(name, mark.line + 1, "", "YAML anchors and aliases are not allowed in contracts", "alias")
                )
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                raise ContractError(Problem(name, 1, "", "empty document", "type"))
            located = Located(name, None)
            _index(node, (), located, name)
            located.data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise ContractError(Problem(name, line, "", f"YAML syntax: {exc.problem or exc.context}", "yaml")) from None
    except yaml.YAMLError as exc:
        raise ContractError(Problem(name, 1, "", f"YAML: {exc}", "yaml")) from None
    return located


def _index(node: yaml.Node, path: Path_, out: Located, name: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else repr(key_node)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ContractError(
                    Problem(name, line, format_path((*path, key)), f"duplicate key {key!r} (first on line "
                            f"{seen[key]})", "duplicate-key")
                )
            seen[key] = line
            out.lines[(*path, key)] = line
            _index(value_node, (*path, key), out, name)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out.lines[(*path, i)] = item.start_mark.line + 1
            _index(item, (*path, i), out, name)
