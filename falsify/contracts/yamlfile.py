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
            Problem(
                name, 1, "", f"file is {size / 1e6:.1f} MB, over the {MAX_BYTES // 1024} KiB limit", "size"
            )
        )
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ContractError(
            Problem(
                name, line, "", f"not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}", "encoding"
            )
        ) from None
    return parse_yaml(text, name)


# libyaml when PyYAML was built with it (about 20x faster); the pure-Python loader otherwise. Both are "safe".
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str, name: str) -> Located:
    try:
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
        raise ContractError(Problem(name, 1, "", f"YAML: {exc}", "yaml")) from None
    return located


_STR = "tag:yaml.org,2002:str"


def _build(node: yaml.Node, path: Path_, out: Located, name: str, seen_nodes: set[int], loader: Any) -> Any:
    """Construct the document from its nodes, recording the line of every key and item on the way."""
    if isinstance(node, yaml.ScalarNode):
        return node.value if node.tag == _STR else loader.construct_object(node, deep=True)
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
