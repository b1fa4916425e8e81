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


def snapshot(files: dict[str, str]) -> tuple[str, bytes]:
    import hashlib
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(buf.getvalue()).hexdigest(), buf.getvalue()


def test_a_snapshot_unpacks_once_and_old_unused_ones_are_removed(tmp_path: Path) -> None:
    import os
    import time

    digest, data = snapshot({"a.txt": "one"})
    root = executors.unpack(digest, data, tmp_path)
    assert root == tmp_path / f"falsify-ray-{digest[:32]}" and (root / "a.txt").read_text() == "one"
    # a second task with the same digest reuses the tree: no new unpacking
    (root / "a.txt").write_text("kept")
    assert executors.unpack(digest, data, tmp_path) == root and (root / "a.txt").read_text() == "kept"
    # Another digest's snapshot, an abandoned unpacking and someone else's directory, all unused for 2 days;
    # and a snapshot used an hour ago.
    old = time.time() - 2 * 86400
    stale, staging, foreign, recent = (
        tmp_path / f"falsify-ray-{'b' * 32}",
        tmp_path / f"falsify-ray-{'c' * 12}-x1y2z3",
        tmp_path / "falsify-ray-bench-q1",
        tmp_path / f"falsify-ray-{'d' * 32}",
    )
    for d in (stale, staging, foreign, recent):
        d.mkdir()
    for d in (stale, recent):
        (d / ".complete").write_text("x")
    for p in (stale / ".complete", staging, foreign):
        os.utime(p, (old, old))
    os.utime(recent / ".complete", (time.time() - 3600,) * 2)
    os.utime(root / ".complete", (old, old))  # ours, last used long ago: this use marks it used again
    assert executors.unpack(digest, data, tmp_path) == root
    assert not stale.exists() and not staging.exists()
    assert foreign.is_dir() and recent.is_dir() and (root / "a.txt").is_file()
    assert (root / ".complete").stat().st_mtime > old + 86400


def test_a_snapshot_whose_bytes_do_not_match_its_digest_is_refused(tmp_path: Path) -> None:
    digest, data = snapshot({"a.txt": "one"})
    with pytest.raises(executors.ExecutorError, match="does not match its digest"):
        executors.unpack(digest, data + b"\0", tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing unpacked, no staging directory left behind
