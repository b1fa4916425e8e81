"""BLAS pinned to one thread while the engine computes, so its bytes do not depend on the thread count.

OpenBLAS splits a matrix product across threads differently for different thread counts, and the float32 sums
come out in another order: one forward of the tiny model gave other logits bytes under OPENBLAS_NUM_THREADS=1
than under 2 (issue 13). Every forward chunk runs inside `one_blas_thread()`, which sets the BLAS libraries
numpy loaded (found by threadpoolctl) to one thread and restores their count when the last concurrent forward
leaves. The bytes still depend on which kernels OpenBLAS picks for the CPU (OPENBLAS_CORETYPE), not on threads.

OpenBLAS ignores `openblas_set_num_threads` called from any thread but the main one (measured with numpy's
OpenBLAS 0.3.31): a forward in a worker thread (reference.serve's HTTP handlers) kept the process's thread count
and gave other logits bytes. So each thread inside the pin also sets its own count with
`openblas_set_num_threads_local` (OpenBLAS >= 0.3.27), and gives its previous count back when it leaves.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_depth = 0  # forwards inside the pin, over all threads
_saved: list[tuple[Any, int]] = []  # (library controller, its thread count before the pin)
_controllers: list[Any] | None = None
_setters: list[Callable[[int], int]] | None = None  # openblas_set_num_threads_local of each OpenBLAS
_thread = threading.local()  # per thread: `depth` inside the pin, `saved` local counts to give back


def _blas_controllers() -> list[Any]:
    global _controllers
    if _controllers is None:
        import numpy  # noqa: F401  (loads the BLAS threadpoolctl must find)
        from threadpoolctl import ThreadpoolController

        _controllers = list(ThreadpoolController().select(user_api="blas").lib_controllers)
    return _controllers


def _local_setters() -> list[Callable[[int], int]]:
    """Each OpenBLAS's setter of the calling thread's count, which returns the count it replaces (absent before
    OpenBLAS 0.3.27: that library then gets the process-wide pin alone)."""
    global _setters
    if _setters is None:
        found = []
        for lib in _blas_controllers():
            setter = getattr(getattr(lib, "dynlib", None), "openblas_set_num_threads_local", None)
            if lib.internal_api == "openblas" and setter is not None:
                setter.argtypes, setter.restype = [ctypes.c_int], ctypes.c_int
                found.append(setter)
        _setters = found
    return _setters


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the body with every BLAS library at one thread; re-entrant and safe across threads (a counter, and
    per thread a depth)."""
    global _depth
    with _lock:
        if _depth == 0:
            _saved[:] = [(lib, lib.get_num_threads()) for lib in _blas_controllers()]
            for lib, threads in _saved:
                if threads != 1:
                    lib.set_num_threads(1)
        _depth += 1
        setters = _local_setters()
    depth = getattr(_thread, "depth", 0)
    if depth == 0:
        _thread.saved = [(setter, setter(1)) for setter in setters]
    _thread.depth = depth + 1
    try:
        yield
    finally:
        _thread.depth -= 1
        if _thread.depth == 0:
            for setter, threads in _thread.saved:
                setter(threads)
        with _lock:
            _depth -= 1
            if _depth == 0:
                for lib, threads in _saved:
                    if threads != 1:
                        lib.set_num_threads(threads)
