"""Where mutant runs execute: `local` (threads on this machine: the default) or `ray` (one task per mutant on warm
Ray actors of a cluster). The callers (the semantic runner, mutmut shards, campaigns) hand in a module-level
function (or its "module:name") and its tasks and get the results back in completion order; this module knows nothing of what a task runs, so the kill matrix, the
Stryker report and the evidence bundle do not depend on the executor.

Ray: the project goes into the object store once, as a content-addressed snapshot (a tar of the files a scratch
copy would hold, named by its sha256); a pool of warm actors, one per CPU of the cluster, each unpacks it when it
starts (once per node: the first actor there does it) and then runs task after task in the same process. A task
is a pure function of (snapshot, mutant id, control, settings) that runs one mutant in its own scratch copy and
returns the compact MutantResult. Mutant runs are idempotent (each in a fresh copy), so a task whose actor or node
dies is re-run on a live actor (RAY_RETRIES); a falsifier run that outlives its timeout is TIMEOUT, never KILLED
(the runner's own per-mutant timeout, unchanged). Ray is an optional extra (`[ray]` in pyproject.toml): `pip install "ray>=2.40"`.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import importlib
import io
import os
import re
import shutil
import signal
import tarfile
import tempfile
import time
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from falsify.errors import FalsifyError

EXECUTORS = ("local", "ray")
T = TypeVar("T")
RAY_RETRIES = 3  # re-runs of a task whose worker or node died; a mutant run is idempotent
# The tasks, or how to cut them once the number of worker slots is known (one per CPU of the cluster, or -j here).
Tasks = list[tuple[Any, ...]] | Callable[[int], list[tuple[Any, ...]]]


class ExecutorError(FalsifyError):
    """An executor that cannot start (Ray missing, no cluster at the address)."""


def available_cores() -> int:
    """CPUs this process may run on (its affinity mask on Linux)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# -- ray ---------------------------------------------------------------------------------------------------------
def snapshot(root: Path, skip: Callable[[Path], bool]) -> tuple[str, bytes]:
    """(sha256, bytes) of an uncompressed tar of the project's files, in sorted order, with fixed metadata, so the
    same tree gives the same snapshot (and the same object in the store). Symlinks are stored as their content
    when they point inside the project and refused otherwise: a snapshot never carries a path out of it."""
    buffer = io.BytesIO()
    root = root.resolve()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if skip(rel) or path.is_dir():
                continue
            real = path.resolve()
            if not real.is_relative_to(root):
                raise ExecutorError(f"{rel}: a link out of the project cannot go into a Ray snapshot")
            if not real.is_file():
                continue
            data = real.read_bytes()
            info = tarfile.TarInfo(rel.as_posix())
            info.size, info.mode, info.mtime = len(data), 0o755 if os.access(real, os.X_OK) else 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    return hashlib.sha256(data).hexdigest(), data


def skipper(exclude: tuple[str, ...] = ()) -> Callable[[Path], bool]:
    """What a scratch copy leaves out (plus the project's copy_exclude), as a predicate on paths relative to the
    project root."""
    from falsify.mutation.semantic.scratch import IGNORE_ANYWHERE, IGNORE_TOP

    def skip(rel: Path) -> bool:
        parts = rel.parts
        if any(fnmatch.fnmatch(p, pattern) for p in parts for pattern in IGNORE_ANYWHERE):
            return True
        top = parts[0]
        return top in IGNORE_TOP or any(fnmatch.fnmatch(top, p) for p in exclude)

    return skip


SNAPSHOT_KEEP_S = 24 * 3600  # a node's unpacked snapshot no task has used for this long is removed


def unpack(digest: str, data: bytes, tmp: Path | None = None) -> Path:
    """The snapshot's tree on this node, unpacked once (later tasks with the same digest reuse it) in `tmp` (the
    temp directory). Each use marks it used; snapshots (and unfinished unpackings) of other digests no task has
    used for SNAPSHOT_KEEP_S are removed, so a node does not keep a copy of every project state it ever ran."""
    tmp = Path(tempfile.gettempdir()) if tmp is None else tmp
    base = tmp / f"falsify-ray-{digest[:32]}"
    done = base / ".complete"
    if done.is_file():
        # marking it used is housekeeping: a snapshot in a read-only temp dir still serves
        with contextlib.suppress(OSError):
            os.utime(done)
        _evict(tmp, keep=base)
        return base
    if hashlib.sha256(data).hexdigest() != digest:
        raise ExecutorError(f"snapshot {digest[:16]}…: content does not match its digest")
    staging = Path(tempfile.mkdtemp(prefix=f"falsify-ray-{digest[:12]}-", dir=tmp))
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(staging, filter="data")  # refuses absolute paths, .. and links out
    (staging / ".complete").write_text(digest, encoding="utf-8")
    try:
        os.rename(staging, base)  # atomic; another task may have won the race, which is as good
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    _evict(tmp, keep=base)
    return base


def _evict(tmp: Path, keep: Path) -> None:
    """Remove this executor's snapshot trees in `tmp` last used more than SNAPSHOT_KEEP_S ago (by their
    .complete file's mtime, else the directory's), except `keep`."""
    cutoff = time.time() - SNAPSHOT_KEEP_S
    for path in tmp.glob("falsify-ray-*"):
        name = path.name.removeprefix("falsify-ray-")
        ours = re.fullmatch(r"[0-9a-f]{32}|[0-9a-f]{12}-\w+", name) is not None
        if path == keep or not ours or path.is_symlink() or not path.is_dir():
            continue
        try:
            marker = path / ".complete"
            used = (marker if marker.is_file() else path).stat().st_mtime
        except OSError:
            continue
        if used < cutoff:
            shutil.rmtree(path, ignore_errors=True)


def _node_ip(address: str | None) -> dict[str, str]:
    """The driver's node IP for a cluster on this machine's loopback: Ray would otherwise find it by opening a
    socket towards an outside address (it sends nothing, but nothing should try)."""
    host = (address or "").removeprefix("ray://").rsplit(":", 1)[0]
    return {"_node_ip_address": "127.0.0.1"} if host in ("127.0.0.1", "localhost") else {}


def task_function(fn: Callable[..., Any] | str) -> Callable[..., Any]:
    """A task's function: itself, or imported from its "module:name" (for a function whose module imports the
    caller's)."""
    if callable(fn):
        return fn
    module, _, name = fn.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return function


class _Warm:
    """A Ray actor that holds one CPU: it unpacks the snapshot once when it starts (the object store brings the
    bytes to its node once, whichever of the node's actors asks first), then runs task after task in the same
    process, so a task pays neither a worker start nor falsify's imports nor an unpack."""

    def __init__(self, digest: str, data: bytes) -> None:
        self.root = unpack(digest, data)

    def run(self, fn: Callable[..., Any] | str, task: tuple[Any, ...]) -> Any:
        return task_function(fn)(self.root, *task)

    def close(self) -> None:
        """Run the clean-ups the tasks registered in this process (on_close), newest first."""
        _close()


_CLOSERS: list[Callable[[], None]] = []


def _close() -> None:
    while _CLOSERS:
        _CLOSERS.pop()()


def on_close(cleanup: Callable[[], None]) -> None:
    """Register a clean-up for the end of a run: a warm Ray worker runs it before the driver shuts down, a local
    run when its last task is back."""
    _CLOSERS.append(cleanup)


_KEPT: dict[Hashable, Any] = {}


def kept(key: Hashable, make: Callable[[], T], close: Callable[[T], None] | None = None) -> T:
    """This worker's object for `key`, made by the first task that asks and kept for the later ones (a linted
    snapshot, a scratch directory with its fork server, a prepared mutmut tree); `close` runs on it at the run's
    end (on_close). A worker that dies leaves its scratch directories to the next run's sweep."""
    if key not in _KEPT:
        _KEPT[key] = make()
        if close is not None:
            on_close(lambda: close(_KEPT.pop(key)))
    value: T = _KEPT[key]
    return value


def _lost(exc: BaseException) -> bool:
    """A task lost with its worker or node (to re-run elsewhere), not one whose function raised."""
    import ray.exceptions as rex

    return isinstance(
        exc, rex.RayActorError | rex.WorkerCrashedError | rex.NodeDiedError | rex.ObjectLostError
    )


def ray_tasks(
    fn: Callable[..., Any] | str,
    tasks: Tasks,
    root: Path,
    address: str,
    exclude: tuple[str, ...] = (),
    say: Callable[[str], None] | None = None,
) -> Iterator[Any]:
    """fn(node_root, *task) for every task, in completion order, on a pool of warm actors (one per CPU of the
    cluster, at most one per task) over one snapshot of `root` put into the object store once and unpacked once
    per node. A task lost with its actor or node is re-run on a live actor (RAY_RETRIES times); an exception
    fn raises is the run's."""
    try:
        import ray
    except ImportError:
        raise ExecutorError("--executor ray needs Ray: pip install 'ray>=2.40'") from None
    digest, data = snapshot(root, skipper(exclude))
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, **_node_ip(address))
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ExecutorError(f"no Ray cluster at {address!r}: {exc}") from None
    actors: list[Any] = []
    try:
        ref = ray.put(data)
        cpus = max(1, int(ray.cluster_resources().get("CPU", 0)))
        if callable(tasks):
            tasks = tasks(cpus)
        warm = ray.remote(num_cpus=1, max_restarts=0, scheduling_strategy="SPREAD")(_Warm)
        actors = [warm.remote(digest, ref) for _ in range(max(1, min(cpus, len(tasks))))]
        if say is not None:
            say(
                f"mutants: ray — snapshot {digest[:12]} ({len(data) / 1e6:.1f} MB) in the object store; "
                f"{len(tasks)} tasks on {len(actors)} warm workers ({cpus} CPUs)"
            )
        queue = list(range(len(tasks)))[::-1]  # pop() from the end: tasks go out in their given order
        lost = [0] * len(tasks)
        idle = list(actors)
        running: dict[Any, tuple[Any, int]] = {}
        last_loss = ""
        while queue or running:
            while queue and idle:
                actor, i = idle.pop(), queue.pop()
                running[actor.run.remote(fn, tasks[i])] = (actor, i)
            if not running:
                raise ExecutorError(f"every Ray worker was lost ({last_loss}); {len(queue)} tasks not run")
            ready, _ = ray.wait(list(running), num_returns=1)
            actor, i = running.pop(ready[0])
            try:
                result = ray.get(ready[0])
            except Exception as exc:
                if not _lost(exc):
                    raise
                lost[i] += 1
                last_loss = (
                    f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                )
                if lost[i] > RAY_RETRIES:
                    raise ExecutorError(f"task {i} lost with its worker {lost[i]} times: {exc}") from None
                actors.remove(actor)
                queue.append(i)
                if say is not None:
                    say(f"mutants: ray — a worker was lost ({type(exc).__name__}); its task goes to another")
                continue
            idle.append(actor)
            yield result
    finally:
        # each live worker removes what its tasks kept (a lost one has nothing left to clean): then the shutdown
        with contextlib.suppress(Exception):
            ray.get([a.close.remote() for a in actors], timeout=120)
        ray.shutdown()


def run_tasks(
    fn: Callable[..., Any] | str,
    tasks: Tasks,
    root: Path,
    executor: str,
    address: str | None,
    jobs: int = 0,
    exclude: tuple[str, ...] = (),
) -> Iterator[Any]:
    """fn(project_root, *task) for every task, in completion order: on local threads in `root` itself, or as Ray
    tasks in a snapshot of `root` unpacked on each node (fn must be a module-level function, pure in its args).
    `tasks` may be a function of the number of worker slots that returns them."""
    if executor == "ray":
        return ray_tasks(fn, tasks, root, address or "auto", exclude)
    if executor != "local":
        raise ExecutorError(f"unknown executor {executor!r} (choose from {', '.join(EXECUTORS)})")
    return _local_tasks(task_function(fn), tasks, root, jobs)


def _local_tasks(fn: Callable[..., Any], tasks: Tasks, root: Path, jobs: int) -> Iterator[Any]:
    slots = max(1, jobs or available_cores())
    if callable(tasks):
        tasks = tasks(slots)
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(slots, len(tasks) or 1))) as pool:
            futures = [pool.submit(fn, root, *task) for task in tasks]
            for future in as_completed(futures):
                yield future.result()
    finally:
        _close()  # the clean-ups the tasks registered in this process (on_close)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block SIGTERM raises KeyboardInterrupt, so a killed run removes its scratch copies as Ctrl-C
    does (main thread only, as signal.signal requires)."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
