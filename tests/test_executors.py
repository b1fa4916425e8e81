"""The executor seam's own parts that need no cluster: a task named by "module:name", the per-worker objects a
task keeps across tasks (made once per worker, closed when the run ends), and the errors of a bad executor."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from falsify.mutation import executors

MADE: list[tuple[str, int]] = []
CLOSED: list[tuple[str, int]] = []


def make(key: tuple[str, int]) -> tuple[str, int]:
    MADE.append(key)
    return key


def keeps_one_per_thread(root: Path, i: int) -> tuple[int, int]:
    key = ("test", threading.get_ident())
    thing = executors.kept(key, lambda: make(key), CLOSED.append)
    assert thing == key
    return i, threading.get_ident()


def test_a_local_run_makes_each_kept_object_once_and_closes_it_at_the_end(tmp_path: Path) -> None:
    MADE.clear()
    CLOSED.clear()
    stream = executors.run_tasks(
        keeps_one_per_thread, [(i,) for i in range(40)], tmp_path, "local", None, jobs=2
    )
    results = []
    for result in stream:
        results.append(result)
        assert CLOSED == []  # nothing closed while tasks still come back
    assert sorted(i for i, _ in results) == list(range(40))
    threads = {t for _, t in results}
    assert sorted(MADE) == sorted(("test", t) for t in threads)  # once per worker thread, not per task
    assert sorted(CLOSED) == sorted(MADE)
    # closed objects are dropped: a new run makes its own
    assert not [k for k in executors._KEPT if isinstance(k, tuple) and k[0] == "test"]


def test_a_task_named_by_module_and_function_runs(tmp_path: Path) -> None:
    got = list(executors.run_tasks("test_executors:keeps_one_per_thread", [(7,)], tmp_path, "local", None))
    assert [i for i, _ in got] == [7]
    assert executors.task_function(keeps_one_per_thread) is keeps_one_per_thread


def test_an_unknown_executor_is_a_named_error(tmp_path: Path) -> None:
    with pytest.raises(
        executors.ExecutorError, match="unknown executor 'slurm' \\(choose from local, ray\\)"
    ):
        executors.run_tasks(keeps_one_per_thread, [(0,)], tmp_path, "slurm", None)


def test_tasks_cut_once_the_worker_slots_are_known(tmp_path: Path) -> None:
    asked: list[int] = []

    def cut(slots: int) -> list[tuple[object, ...]]:
        asked.append(slots)
        return [(i,) for i in range(2 * slots)]

    got = list(executors.run_tasks(keeps_one_per_thread, cut, tmp_path, "local", None, jobs=3))
    assert asked == [3] and sorted(i for i, _ in got) == list(range(6))
