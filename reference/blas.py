"""BLAS pinned to one thread while the engine computes, so its bytes do not depend on the thread count.

OpenBLAS splits a matrix product across threads differently for different thread counts, and the float32 sums
come out in another order: one forward of the tiny model gave other logits bytes under OPENBLAS_NUM_THREADS=1
than under 2 (issue 13). Every forward chunk runs inside `one_blas_thread()`, which sets the BLAS libraries
numpy loaded (found by threadpoolctl) to one thread and restores their count when the last concurrent forward
leaves. The bytes still depend on which kernels OpenBLAS picks for the CPU (OPENBLAS_CORETYPE), not on threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_depth = 0  # forwards inside the pin, over all threads
_saved: list[tuple[Any, int]] = []  # (library controller, its thread count before the pin)
_controllers: list[Any] | None = None


def _blas_controllers() -> list[Any]:
    global _controllers
    if _controllers is None:
        import numpy  # noqa: F401  (loads the BLAS threadpoolctl must find)
        from threadpoolctl import ThreadpoolController

        _controllers = list(ThreadpoolController().select(user_api="blas").lib_controllers)
    return _controllers


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the body with every BLAS library at one thread; re-entrant and safe across threads (a counter)."""
    global _depth
    with _lock:
        if _depth == 0:
            _saved[:] = [(lib, lib.get_num_threads()) for lib in _blas_controllers()]
            for lib, threads in _saved:
                if threads != 1:
                    lib.set_num_threads(1)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for lib, threads in _saved:
                    if threads != 1:
                        lib.set_num_threads(threads)
