"""falsify.engines.calls and adapters.generate: a generate call's checks, one named error each (an adapter's, with
its library's vocabulary and context, and the wire client's, which leaves the engine's refusals to the engine), and
the run record the adapters share."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from falsify.engines.adapters.generate import run_record
from falsify.engines.calls import generate_call
from falsify.harness.instruments import CountingCancel


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "stops", "cancel", "sampler", "message"),
    [
        ([], 1, (), None, None, "prompt is empty"),
        ("abc", 1, (), None, None, "prompt must be a sequence of token ids, got str"),
        ([1, 99], 1, (), None, None, "prompt[1] = 99 is outside the vocabulary [0, 10)"),
        ([[1, 2]], 1, (), None, None, "prompt[0] is [1, 2], not an int token id"),
        (np.array([[1, 2]]), 1, (), None, None, "prompt[0] is [1, 2], not an int token id"),
        ([1.5], 1, (), None, None, "prompt[0] is 1.5, not an int token id"),
        ([True], 1, (), None, None, "prompt[0] is True, not an int token id"),
        ([1], 0, (), None, None, "max_tokens must be an int >= 1, got 0"),
        ([1], True, (), None, None, "max_tokens must be an int >= 1, got True"),
        (
            [1, 2, 3],
            3,
            (),
            None,
            None,
            "prompt of 3 tokens with max_tokens=3 needs 5 positions; the context holds 4 (max_position_embeddings)",
        ),
        ([1], 1, [-1], None, None, "stop_tokens[0] = -1 is outside the vocabulary"),
        ([1], 1, (), object(), None, "cancel must be a cancel token (is_cancelled() and polls), got object"),
        ([1], 1, (), None, 7, "sampler must be callable (logits [vocab] -> token id), got int"),
    ],
)
def test_each_bad_argument_is_one_named_error(
    prompt: Any, max_tokens: Any, stops: Any, cancel: Any, sampler: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        generate_call(
            prompt, max_tokens, stops, cancel, sampler, None, vocab=10, positions=4, nonempty=True, least=1
        )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("abc", 1, (), None, None, None), "prompt must be a sequence of token ids, got str"),
        (([1], -1, (), None, None, None), "max_tokens must be an int >= 0, got -1"),
        (([1], 1.0, (), None, None, None), "max_tokens must be an int >= 0, got 1.0"),
        (([1], 1, ["x"], None, None, None), "stop_tokens[0] is 'x', not an int token id"),
        (([1], 1, (), CountingCancel, None, None), "cancel must be a cancel token"),  # the class, not a token
        (([1], 1, (), None, None, "print"), "on_token must be callable or None, got str"),
    ],
)
def test_the_wire_clients_checks_are_what_cannot_be_sent(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        generate_call(*args)


def test_the_wire_client_leaves_the_engines_refusals_to_the_engine() -> None:
    """An empty prompt, max_tokens 0 and an id past any vocabulary go through: the engine must refuse them
    itself (docs/engine-protocol.md), and the harness judges that refusal."""
    call = generate_call([], 0, (10**9,), None, None, None)
    assert (call.prompt, call.max_tokens, call.stops) == ([], 0, [10**9])


def test_good_arguments_come_back_as_plain_ints_with_the_callers_token() -> None:
    cancel = CountingCancel(budget=2)
    call = generate_call(
        np.array([3, 4], np.int32),
        np.int64(3),
        (9,),
        cancel,
        None,
        None,
        vocab=10,
        positions=4,
        nonempty=True,
        least=1,
    )
    assert (call.prompt, call.stops, call.cancel, call.max_tokens) == ([3, 4], [9], cancel, 3)
    assert all(type(t) is int for t in [*call.prompt, *call.stops, call.max_tokens])
    default = generate_call(
        [1], 1, (), None, None, None, vocab=10, positions=4, nonempty=True, least=1
    ).cancel
    assert [default.is_cancelled() for _ in range(3)] == [False] * 3  # no token: one that never cancels


def test_the_run_record_counts_the_forwards_it_is_given() -> None:
    prefill, decode = [(5, 0)], [(1, 5), (1, 6)]  # (tokens fed, start position)
    run = run_record([7, 8, 9], prefill, decode, forwards=4, polls=3, prompt_len=5, stops=(), max_tokens=3)
    assert (run.tokens, run.emitted, run.prefill_forwards, run.decode_forwards) == ((7, 8, 9), 3, 1, 2)
    assert (run.positions, run.wasted_forwards, run.polls, run.prompt_len) == ((5, 6), 1, 3, 5)
    assert run.stop_reason == "max_tokens"
    assert (
        run_record(
            [7, 2], prefill, decode[:1], forwards=2, polls=2, prompt_len=5, stops=[2], max_tokens=2
        ).stop_reason
        == "stop_token"
    )
    assert (
        run_record([7], prefill, [], forwards=2, polls=2, prompt_len=5, stops=[2], max_tokens=3).stop_reason
        == "cancelled"
    )
