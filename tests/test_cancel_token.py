"""Unit tests of reference.cancel.CancelToken: budgets, peek, never(), cancel() from another thread."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference import CancelToken


@settings(max_examples=50, deadline=None)
@given(n=st.integers(0, 40), extra=st.integers(1, 10))
def test_budget_answers_false_n_times_then_true_forever(n: int, extra: int) -> None:
    token = CancelToken.with_budget(n)
    answers = [token.is_cancelled() for _ in range(n + extra)]
    assert answers == [False] * n + [True] * extra
    assert token.polls == n + extra


def test_budget_zero_permits_nothing() -> None:
    token = CancelToken.with_budget(0)
    assert token.peek() is True
    assert token.is_cancelled() is True
    assert token.polls == 1


def test_peek_counts_no_poll_and_predicts_the_next_poll() -> None:
    token = CancelToken.with_budget(2)
    for _ in range(4):
        expected = token.peek()
        polls = token.polls
        assert token.peek() == expected and token.polls == polls  # peeking twice changes nothing
        assert token.is_cancelled() == expected
        assert token.polls == polls + 1


def test_cancel_overrides_the_budget_and_sticks() -> None:
    token = CancelToken.with_budget(100)
    assert token.is_cancelled() is False
    token.cancel()
    token.cancel()  # idempotent
    assert token.peek() is True
    assert [token.is_cancelled() for _ in range(3)] == [True, True, True]
    assert token.polls == 4


def test_plain_token_cancels_only_when_asked() -> None:
    token = CancelToken()
    assert [token.is_cancelled() for _ in range(5)] == [False] * 5
    token.cancel()
    assert token.is_cancelled() is True
    assert token.polls == 6


def test_never_never_cancels_and_counts_nothing() -> None:
    token = CancelToken.never()
    assert [token.is_cancelled() for _ in range(1000)] == [False] * 1000
    assert token.peek() is False
    assert token.polls == 0
    with pytest.raises(ValueError, match=r"never\(\) cannot be cancelled"):
        token.cancel()


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True, None])
def test_bad_budget_is_a_clear_error(bad: object) -> None:
    if bad is None:
        # None is the constructor's "no budget"; with_budget needs a number
        with pytest.raises(ValueError, match="cancel budget must be an int >= 0, got None"):
            CancelToken.with_budget(bad)
        return
    with pytest.raises(ValueError, match="cancel budget must be an int >= 0"):
        CancelToken.with_budget(bad)


def test_cancel_from_another_thread_is_seen_by_the_poller() -> None:
    token = CancelToken()
    polled = threading.Event()

    def poller() -> None:
        while not token.is_cancelled():
            polled.set()

    t = threading.Thread(target=poller)
    t.start()
    assert polled.wait(10), "poller never started"
    token.cancel()
    t.join(10)
    assert not t.is_alive(), "the poller never saw cancel() made on another thread"
    assert token.peek() is True


def test_polls_are_counted_exactly_across_threads() -> None:
    token = CancelToken()
    per_thread, threads = 2000, 4

    def poll_many() -> None:
        for _ in range(per_thread):
            token.is_cancelled()

    workers = [threading.Thread(target=poll_many) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert token.polls == per_thread * threads


def test_repr_shows_kind_budget_polls_and_cancel() -> None:
    assert repr(CancelToken.never()) == "CancelToken.never()"
    token = CancelToken.with_budget(3)
    token.is_cancelled()
    assert repr(token) == "CancelToken(budget=3, polls=1, cancelled=False)"
    plain = CancelToken()
    plain.cancel()
    assert repr(plain) == "CancelToken(polls=0, cancelled=True)"
    with pytest.raises(ValueError, match=r"^CancelToken\.never\(\) cannot be cancelled; use CancelToken\(\)"):
        CancelToken.never().cancel()
