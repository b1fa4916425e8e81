"""reference/blas.py: one_blas_thread pins every BLAS numpy loaded to one thread and gives the count back.

Thread counts are read with threadpoolctl's own threadpool_info(), a fresh look at the libraries, not through the
controllers reference.blas keeps.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
from threadpoolctl import ThreadpoolController, threadpool_info

import reference.blas as blas
from reference.blas import one_blas_thread


def blas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


@pytest.fixture
def three_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """BLAS at 3 threads, and reference.blas as freshly imported (no controllers or per-thread setters found yet)."""
    controller = ThreadpoolController().select(user_api="blas")
    assert controller.lib_controllers, "numpy loaded no BLAS threadpoolctl can see"
    before = [lib.get_num_threads() for lib in controller.lib_controllers]
    monkeypatch.setattr(blas, "_controllers", None)
    monkeypatch.setattr(blas, "_setters", None)
    controller.limit(limits=3)
    try:
        assert set(blas_threads()) == {3}
        yield
    finally:
        for lib, n in zip(controller.lib_controllers, before, strict=True):
            lib.set_num_threads(n)


def test_pins_inside_and_restores_after(three_threads) -> None:
    with one_blas_thread():
        assert set(blas_threads()) == {1}
        np.ones((64, 64), np.float32) @ np.ones((64, 64), np.float32)
    assert set(blas_threads()) == {3}


def test_restores_after_an_exception(three_threads) -> None:
    with pytest.raises(KeyError), one_blas_thread():
        raise KeyError("x")
    assert set(blas_threads()) == {3}


def test_nested_keeps_the_pin_until_the_outermost_leaves(three_threads) -> None:
    with one_blas_thread():
        with one_blas_thread():
            assert set(blas_threads()) == {1}
        assert set(blas_threads()) == {1}
    assert set(blas_threads()) == {3}


def run_inside_pin(seen: dict[str, list[int]]) -> threading.Thread:
    """A thread that enters one_blas_thread, notes the thread counts, and leaves."""

    def body() -> None:
        with one_blas_thread():
            seen["worker inside"] = blas_threads()
        seen["worker left"] = blas_threads()

    return threading.Thread(target=body)


def test_a_worker_leaving_keeps_the_main_threads_pin(three_threads) -> None:
    seen: dict[str, list[int]] = {}
    n = len(blas_threads())
    with one_blas_thread():
        worker = run_inside_pin(seen)
        worker.start()
        worker.join(10)
        seen["main inside"] = blas_threads()
    seen["main left"] = blas_threads()
    assert seen == {
        "worker inside": [1] * n,
        "worker left": [1] * n,
        "main inside": [1] * n,
        "main left": [3] * n,
    }


def test_a_worker_alone_is_pinned(three_threads) -> None:
    seen: dict[str, list[int]] = {}
    n = len(blas_threads())
    worker = run_inside_pin(seen)
    worker.start()
    worker.join(10)
    assert seen == {"worker inside": [1] * n, "worker left": [3] * n}


def test_already_one_thread_stays_one(three_threads) -> None:
    ThreadpoolController().select(user_api="blas").limit(limits=1)
    with one_blas_thread():
        assert set(blas_threads()) == {1}
    assert set(blas_threads()) == {1}


def test_controllers_are_found_once(three_threads) -> None:
    first = blas._blas_controllers()
    assert first and {lib.user_api for lib in first} == {"blas"}
    assert blas._blas_controllers() is first


def test_a_forward_in_a_worker_thread_gives_the_main_threads_bytes(three_threads) -> None:
    """OpenBLAS ignores a process-wide thread count set off the main thread; the pin sets the worker's own
    (openblas_set_num_threads_local), so the bytes do not depend on which thread ran the forward."""
    from reference.model import load_model
    from reference.tiny import tiny_model

    model = load_model(tiny_model(seed=0), weights="f32")
    tokens = np.random.default_rng(1).integers(0, model.config.vocab_size, 300)

    def logits() -> bytes:
        return bytes(model.forward(tokens, model.new_state()).tobytes())

    on_main = logits()
    seen: dict[str, bytes] = {}
    worker = threading.Thread(target=lambda: seen.setdefault("worker", logits()))
    worker.start()
    worker.join(60)
    assert seen["worker"] == on_main
    assert set(blas_threads()) == {3}  # and the process's count is given back
