"""The plugin's side of `falsify gate --jobs N` (falsify/harness/shards.py): the options the gate passes each pytest
process, and the hook that keeps this process's share of the falsifiers once every other deselection is done."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import pytest

from falsify.harness import shards
from falsify.harness.markers import marked_ids


class Core(Protocol):
    """What the share reads and sets of the core plugin (falsify/harness/plugin.py's FalsifyPlugin)."""

    shard: tuple[int, int] | str | None
    held_back: int
    counts_collection: bool

    def reasons(self, item: pytest.Item, ids: list[str]) -> dict[str, list[str]]: ...


def add_options(group: pytest.OptionGroup) -> None:
    group.addoption(
        shards.SHARD_OPTION,
        type=shards.parse,
        default=None,
        metavar="K/N|serial",
        help="run only share K of N of the falsifiers (the gate's --jobs), holding back those marked "
        f"{shards.SERIAL_MARK}; 'serial': only those",
    )
    group.addoption(
        shards.COSTS_OPTION,
        default=None,
        metavar="RESULTS",
        help="a previous results.json whose durations balance the shares",
    )


class Share:
    """Registered beside the core plugin when --falsify-shard is given. Runs last among the collection hooks, so -k
    and -m have deselected what they will (the same in each share: the core's first share counts them)."""

    def __init__(self, core: Core) -> None:
        self.core = core

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Only this share's items; the others are deselected, and counted by no share."""
        core = self.core
        serial = [
            i.get_closest_marker(shards.SERIAL_MARK) is not None and not self._only_skips(i) for i in items
        ]
        if core.shard == shards.SERIAL:
            keep = [i for i, s in zip(items, serial, strict=True) if s]
        else:
            assert isinstance(core.shard, tuple)
            k, n = core.shard
            parallel = [i for i, s in zip(items, serial, strict=True) if not s]
            core.held_back = len(items) - len(parallel)
            costs_file = config.getoption("falsify_shard_costs")
            costs = shards.read_costs(Path(costs_file)) if costs_file else {}
            share = shards.assign([i.nodeid for i in parallel], costs, n)
            keep = [i for i, s in zip(parallel, share, strict=True) if s == k - 1]
        kept = set(map(id, keep))
        others = [i for i in items if id(i) not in kept]
        items[:] = keep
        if others:
            counted, core.counts_collection = core.counts_collection, False
            try:
                config.hook.pytest_deselected(items=others)
            finally:
                core.counts_collection = counted

    def _only_skips(self, item: pytest.Item) -> bool:
        """Every prediction of the item is NOT APPLICABLE on this engine or machine: it only skips, so it need not
        wait for the serial phase."""
        ids = marked_ids(item)
        return bool(ids) and len(self.core.reasons(item, ids)) == len(ids)
