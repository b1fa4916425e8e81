"""Where mutant runs execute: `local` (threads on this machine: the default) or `ray` (one Ray task per mutant on a
cluster). The callers (the semantic runner, mutmut campaigns) hand in a module-level function and its tasks and get
the results back in completion order; this module knows nothing of what a task runs, so the kill matrix, the
Stryker report and the evidence bundle do not depend on the executor.

Ray, following its task model: the project goes into the object store once, as a content-addressed snapshot (a
tar of the files a scratch copy would hold, named by its sha256); each task is a pure function of (snapshot,
mutant id, control, settings) that unpacks the snapshot once per node, runs one mutant in its own scratch copy
there and returns the compact MutantResult. Mutant runs are idempotent (each in a fresh copy), so a task whose
worker or node dies is retried (`max_retries`); a falsifier run that outlives its timeout is TIMEOUT, never KILLED
(the runner's own per-mutant timeout, unchanged). Ray is an optional extra (`[ray]` in pyproject.toml): `pip install "ray>=2.40"`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import signal
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from falsify.errors import FalsifyError

EXECUTORS = ("local", "ray")
RAY_RETRIES = 3  # re-runs of a task whose worker or node died; a mutant run is idempotent


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


def unpack(digest: str, data: bytes) -> Path:
    """The snapshot's tree on this node, unpacked once (later tasks with the same digest reuse it)."""
    base = Path(tempfile.gettempdir()) / f"falsify-ray-{digest[:32]}"
    if (base / ".complete").is_file():
        return base
    staging = Path(tempfile.mkdtemp(prefix=f"falsify-ray-{digest[:12]}-"))
    if hashlib.sha256(data).hexdigest() != digest:
        raise ExecutorError(f"snapshot {digest[:16]}…: content does not match its digest")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(staging, filter="data")  # refuses absolute paths, .. and links out
    (staging / ".complete").write_text(digest, encoding="utf-8")
    try:
        os.rename(staging, base)  # atomic; another task may have won the race, which is as good
    except OSError:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
    return base


def _node_ip(address: str | None) -> dict[str, str]:
    """The driver's node IP for a cluster on this machine's loopback: Ray would otherwise find it by opening a
    socket towards an outside address (it sends nothing, but nothing should try)."""
    host = (address or "").removeprefix("ray://").rsplit(":", 1)[0]
    return {"_node_ip_address": "127.0.0.1"} if host in ("127.0.0.1", "localhost") else {}


def ray_tasks(
    fn: Callable[..., Any],
    tasks: list[tuple[Any, ...]],
    root: Path,
    address: str,
    exclude: tuple[str, ...] = (),
    say: Callable[[str], None] | None = None,
) -> Iterator[Any]:
    """fn(node_root, *task) as one Ray task each, in completion order, over one snapshot of `root` put into the
    object store once and unpacked once per node; a task whose worker or node dies is retried."""
    try:
        import ray
    except ImportError:
        raise ExecutorError("--executor ray needs Ray: pip install 'ray>=2.40'") from None
    digest, data = snapshot(root, skipper(exclude))
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, **_node_ip(address))
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ExecutorError(f"no Ray cluster at {address!r}: {exc}") from None
    try:
        remote = ray.remote(max_retries=RAY_RETRIES, retry_exceptions=False)(_in_snapshot)
        ref = ray.put(data)
        if say is not None:
            say(
                f"mutants: ray — snapshot {digest[:12]} ({len(data) / 1e6:.1f} MB) in the object store; "
                f"{len(tasks)} tasks on {int(ray.cluster_resources().get('CPU', 0))} CPUs"
            )
        pending = [remote.remote(digest, ref, fn, task) for task in tasks]
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            yield ray.get(ready[0])
    finally:
        ray.shutdown()


def run_tasks(
    fn: Callable[..., Any],
    tasks: list[tuple[Any, ...]],
    root: Path,
    executor: str,
    address: str | None,
    jobs: int = 0,
    exclude: tuple[str, ...] = (),
) -> Iterator[Any]:
    """fn(project_root, *task) for every task, in completion order: on local threads in `root` itself, or as Ray
    tasks in a snapshot of `root` unpacked on each node (fn must be a module-level function, pure in its args)."""
    if executor == "ray":
        return ray_tasks(fn, tasks, root, address or "auto", exclude)
    if executor != "local":
        raise ExecutorError(f"unknown executor {executor!r} (choose from {', '.join(EXECUTORS)})")
    return _local_tasks(fn, tasks, root, jobs)


def _local_tasks(
    fn: Callable[..., Any], tasks: list[tuple[Any, ...]], root: Path, jobs: int
) -> Iterator[Any]:
    with ThreadPoolExecutor(max_workers=max(1, min(jobs or available_cores(), len(tasks) or 1))) as pool:
        futures = [pool.submit(fn, root, *task) for task in tasks]
        for future in as_completed(futures):
            yield future.result()


def _in_snapshot(digest: str, data: bytes, fn: Callable[..., Any], task: tuple[Any, ...]) -> Any:
    return fn(unpack(digest, data), *task)


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
