"""falsify.engines.adapters.generate: the checks the HF and llama.cpp adapters share, one named error each."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from falsify.engines.adapters.generate import generate_arguments, run_record, token_ids
from falsify.harness.instruments import CountingCancel


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "stops", "cancel", "sampler", "message"),
    [
        ([], 1, (), None, None, "prompt is empty"),
        ("abc", 1, (), None, None, "prompt must be a sequence of token ids, got str"),
        ([1, 99], 1, (), None, None, "prompt[1] = 99 is outside the vocabulary [0, 10)"),
        ([[1, 2]], 1, (), None, None, "prompt must be a 1-D sequence of int token ids"),
        ([1.5], 1, (), None, None, "prompt must be a 1-D sequence of int token ids"),
        ([1], 0, (), None, None, "max_tokens must be an int >= 1, got 0"),
        ([1], True, (), None, None, "max_tokens must be an int >= 1, got True"),
        (
            [1, 2, 3],
            3,
            (),
            None,
            None,
            "prompt of 3 tokens with max_tokens=3 exceeds the model's 4 positions",
        ),
        ([1], 1, [-1], None, None, "stop_tokens[0] = -1 is outside the vocabulary"),
        ([1], 1, (), object(), None, "cancel must have is_cancelled() and polls, got object"),
        ([1], 1, (), None, 7, "sampler must be callable (logits [vocab] -> token id), got int"),
    ],
)
def test_each_bad_argument_is_one_named_error(
    prompt: Any, max_tokens: Any, stops: Any, cancel: Any, sampler: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        generate_arguments(prompt, max_tokens, stops, cancel, sampler, vocab=10, positions=4)


def test_good_arguments_come_back_as_plain_ints_with_the_callers_token() -> None:
    cancel = CountingCancel(budget=2)
    ids, stops, got = generate_arguments(
        np.array([3, 4], np.int32), np.int64(3), (9,), cancel, None, vocab=10, positions=4
    )
    assert (ids, stops, got) == ([3, 4], [9], cancel)
    assert all(type(t) is int for t in ids + stops)
    _, _, default = generate_arguments([1], 1, (), None, None, vocab=10, positions=4)
    assert [default.is_cancelled() for _ in range(3)] == [False] * 3  # no token: one that never cancels
    assert token_ids([], "prompt", 10) == []


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
