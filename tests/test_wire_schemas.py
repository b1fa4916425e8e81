"""The wire messages' schema check (falsify/engines/wire/messages.py): its fast path for arrays of integers gives
jsonschema's own verdict, item for item, on every method whose schema has such an array."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
import pytest

from falsify.engines.wire import messages

SCHEMAS = sorted(
    ref.name.removesuffix(".schema.json")
    for ref in resources.files("falsify.engines.wire").joinpath("schemas").iterdir()
    if ref.name.endswith(".schema.json") and ref.name != "envelope.schema.json"
)


@cache
def schema(name: str) -> dict[str, Any]:
    return json.loads(
        resources.files("falsify.engines.wire").joinpath(f"schemas/{name}.schema.json").read_text()
    )


def plain_problem(name: str, value: Any) -> str | None:
    """What schema_problem said before its fast path: jsonschema's descent into every item."""
    cls = jsonschema.validators.validator_for(schema(name))
    strict = cls.TYPE_CHECKER.redefine("integer", messages._json_integer)
    validator = jsonschema.validators.extend(cls, type_checker=strict)(schema(name))
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return None
    method, part = name.rsplit(".", 1)
    method = method.replace("dollar-", "$/")
    where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"{method} {part}{where}: {error.message} [{error.validator}]"


def int_arrays(name: str) -> list[str]:
    """The top-level properties of a message whose schema is an array of integers."""
    found = []
    for key, sub in schema(name).get("properties", {}).items():
        items = sub.get("items")
        if sub.get("type") == "array" and isinstance(items, dict) and items.get("type") == "integer":
            found.append(key)
    return found


CASES = [(name, prop) for name in SCHEMAS for prop in int_arrays(name)]
# Arrays of 300 token ids with one or more bad items at odd places, and the good array.
ITEMS: list[list[Any]] = [
    list(range(300)),
    [*range(150), -1, *range(149)],
    [*range(299), 2.0],
    [True, *range(299)],
    [*range(100), "7", *range(198), None],
    [*range(7), -3, *range(100), -4.5, *range(191)],
    [],
    [2**62, 0],
]


def test_there_are_integer_arrays_to_check() -> None:
    assert len(CASES) >= 10, CASES


@pytest.mark.parametrize(("name", "prop"), CASES, ids=[f"{n}.{p}" for n, p in CASES])
@pytest.mark.parametrize("items", ITEMS, ids=range(len(ITEMS)))
def test_the_fast_path_says_what_jsonschema_says(name: str, prop: str, items: list[Any]) -> None:
    method, part = name.rsplit(".", 1)
    method = method.replace("dollar-", "$/")
    value = {prop: items}
    assert messages.schema_problem(method, part, value) == plain_problem(name, value)
