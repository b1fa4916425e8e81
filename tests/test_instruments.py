"""The harness's own instruments (falsify/harness/instruments.py) count what an engine does, independently of the
engine's run record: checked on the real reference engine and on hand-made calls."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from falsify.engines.loading import load_engine
from falsify.harness.instruments import CountingCancel, CountingModel, Forward


@pytest.fixture(scope="module")
def reference_model():
    return load_engine("reference").load_model("f32")


def test_a_budget_answers_false_n_times_then_true() -> None:
    token = CountingCancel.with_budget(3)
    assert [token.is_cancelled() for _ in range(5)] == [False, False, False, True, True]
    assert token.polls == 5
    assert token.peek() is True and token.polls == 5  # peek counts nothing


def test_a_zero_budget_permits_nothing_and_bad_budgets_are_refused() -> None:
    assert CountingCancel(0).is_cancelled() is True
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="budget"):
            CountingCancel(bad)  # type: ignore[arg-type]


def test_never_counts_its_polls_and_refuses_cancel() -> None:
    token = CountingCancel.never()
    assert not any(token.is_cancelled() for _ in range(4))
    assert token.polls == 4
    with pytest.raises(ValueError, match="never"):
        token.cancel()


def test_polls_from_many_threads_are_all_counted() -> None:
    token = CountingCancel()

    def poll() -> None:
        for _ in range(2000):
            token.is_cancelled()

    threads = [threading.Thread(target=poll) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert token.polls == 8000
    token.cancel()
    assert token.is_cancelled() and token.cancelled


def test_the_proxy_records_every_forward_with_its_tokens_start_and_stream(reference_model) -> None:
    model = CountingModel(reference_model)
    a, b = model.new_state(), model.new_state()
    model.forward(np.asarray([1, 2, 3], np.int64), a)
    model.forward(np.asarray([4], np.int64), b)
    model.forward([5], a)
    assert model.calls == [Forward(0, (1, 2, 3), 0), Forward(0, (4,), 1), Forward(3, (5,), 0)]
    assert (model.forwards, model.tokens_fed) == (3, 5)
    assert model.config is reference_model.config  # everything but forward is the engine's own
    model.reset()
    assert model.calls == [] and model.forwards == 0


def test_the_proxy_refuses_a_non_model_and_double_wrapping(reference_model) -> None:
    with pytest.raises(ValueError, match="no forward"):
        CountingModel(object())
    with pytest.raises(ValueError, match="already"):
        CountingModel(CountingModel(reference_model))
    with pytest.raises(AttributeError, match="read-only"):
        CountingModel(reference_model).config = None


def test_a_reference_session_run_through_the_instruments(reference_model) -> None:
    engine = load_engine("reference")
    model = CountingModel(reference_model)
    cancel = CountingCancel.with_budget(4)
    prompt = [3, 1, 4, 1, 5]
    run = engine.session(model).generate(prompt, 10, cancel=cancel)
    prefill, decode = model.split(len(prompt))
    assert run.emitted == 4 and cancel.polls == 5
    assert len(decode) == 3 and [c.start for c in decode] == [5, 6, 7]
    assert [c.tokens for c in decode] == [
        (t,) for t in run.tokens[:-1]
    ]  # each fed the previous emitted token
    assert sum(len(c.tokens) for c in prefill) == len(prompt)
    # the engine's record agrees with the harness here; the cancellation falsifiers judge the harness's counts
    assert (run.decode_forwards, run.prefill_forwards, run.polls) == (len(decode), len(prefill), cancel.polls)
