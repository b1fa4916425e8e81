"""Reading the `falsifies` marker: the prediction ids a test names, the capabilities it narrows its contract's
requirement to (`requires=[...]`), and what is wrong with a marker falsify cannot read (binding problems)."""

from __future__ import annotations

import pytest

from falsify.engines.protocol import CAPABILITIES


def marker_problems(item: pytest.Item) -> list[str]:
    """What is wrong with the item's `falsifies` markers: an id that is not a string (a list, a number), a keyword
    other than `requires`, or a `requires` that is not a list of capability names (protocol.CAPABILITIES).
    Binding problems, so a marker falsify cannot read fails the run instead of being read some other way."""
    problems: list[str] = []
    for mark in item.iter_markers("falsifies"):
        for pid in mark.args:
            if not isinstance(pid, str):
                problems.append(
                    f"{item.nodeid}: falsifies() takes prediction ids as strings, one per argument; "
                    f"got {pid!r} ({type(pid).__name__})"
                )
        for key, value in mark.kwargs.items():
            if key != "requires":
                problems.append(f"{item.nodeid}: falsifies() has no keyword {key!r} (only requires=[...])")
            elif not isinstance(value, list | tuple | set | frozenset) or not all(
                isinstance(c, str) for c in value
            ):
                problems.append(
                    f"{item.nodeid}: falsifies(requires=...) takes a list of capability names; got {value!r}"
                )
            else:
                for capability in value:
                    if capability not in CAPABILITIES:
                        problems.append(
                            f"{item.nodeid}: falsifies(requires=...) names unknown capability {capability!r} "
                            f"(one of {', '.join(CAPABILITIES)})"
                        )
    return problems


def marked_ids(item: pytest.Item) -> list[str]:
    """The prediction ids the item's markers name; an id that is not a string is a binding problem
    (marker_problems), not an id."""
    ids: list[str] = []
    for mark in item.iter_markers("falsifies"):
        for pid in mark.args:
            if isinstance(pid, str) and pid not in ids:
                ids.append(pid)
    return ids


def marked_requires(item: pytest.Item) -> set[str] | None:
    """`falsifies(..., requires=[...])`: the capabilities this test uses when it needs fewer than its contract
    requires (the prefill half of a contract runs on an engine without a lane host). None: the contract's."""
    found: set[str] | None = None
    for mark in item.iter_markers("falsifies"):
        requires = mark.kwargs.get("requires")
        if isinstance(requires, list | tuple | set | frozenset):  # anything else is a binding problem
            found = (found or set()) | {c for c in requires if isinstance(c, str)}
    return found
