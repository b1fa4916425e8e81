"""Unit tests of reference.session.Session on the tiny model: input checks, the run record against a spy that
counts the model's forward calls, prefix reuse, stop tokens, samplers, and the mutant anchors' uniqueness."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from reference import CancelToken, Session
from reference.model import load_model
from reference.sampling import Sampler, greedy
from reference.session import StopReason
from reference.tiny import tiny_model


@pytest.fixture(scope="module")
def model() -> Any:
    return load_model(tiny_model(seed=0), weights="f32")


class Spy:
    """The model, with every forward call logged as (state.pos before, tokens)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.config = model.config
        self.calls: list[tuple[int, list[int]]] = []

    def new_state(self, pool: Any = None) -> Any:
        return self.model.new_state(pool)

    def forward(self, tokens: Any, state: Any) -> np.ndarray:
        self.calls.append((state.pos, [int(t) for t in tokens]))
        return self.model.forward(tokens, state)


def prompt_of(seed: int, n: int, vocab: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, vocab, size=n).tolist()


@pytest.mark.parametrize(
    ("budget", "max_tokens"), [(None, 1), (None, 9), (0, 5), (1, 5), (4, 5), (5, 5), (7, 5)]
)
def test_record_matches_the_forward_calls_the_model_saw(
    model: Any, budget: int | None, max_tokens: int
) -> None:
    spy = Spy(model)
    prompt = prompt_of(1, 11, model.config.vocab_size)
    cancel = CancelToken.never() if budget is None else CancelToken.with_budget(budget)
    run = Session(spy).generate(prompt, max_tokens, cancel=cancel)

    prefill_calls = [c for c in spy.calls if c[0] == 0]
    decode_calls = spy.calls[len(prefill_calls) :]
    assert run.prefill_forwards == len(prefill_calls)
    assert run.decode_forwards == len(decode_calls)
    assert all(len(tokens) == 1 for _, tokens in decode_calls)
    # each decode forward feeds back the previously emitted token, at the position after the last one
    assert [tokens[0] for _, tokens in decode_calls] == list(run.tokens[:-1])
    assert list(run.positions) == [pos for pos, _ in decode_calls]
    assert run.emitted == len(run.tokens)
    assert run.wasted_forwards == 0
    expected = min(max_tokens, budget) if budget is not None else max_tokens
    assert run.emitted == expected
    if budget is not None and budget < max_tokens:
        assert run.stop_reason is StopReason.CANCELLED
        assert run.polls == budget + 1
    else:
        assert run.stop_reason is StopReason.MAX_TOKENS
        assert run.polls == (0 if budget is None else max_tokens)


def test_budget_zero_touches_nothing(model: Any) -> None:
    spy = Spy(model)
    session = Session(spy)
    digest = session.state.digest()
    run = session.generate([1, 2, 3], 4, cancel=CancelToken.with_budget(0))
    assert (run.emitted, run.prefill_forwards, run.decode_forwards, run.polls) == (0, 0, 0, 1)
    assert spy.calls == []
    assert session.state.digest() == digest and session.history == []


def test_max_tokens_zero_emits_nothing_and_polls_nothing(model: Any) -> None:
    cancel = CancelToken()
    run = Session(model).generate([5], 0, cancel=cancel)
    assert run.tokens == () and run.stop_reason is StopReason.MAX_TOKENS
    assert (run.polls, run.prefill_forwards, run.decode_forwards) == (0, 0, 0)


def test_on_token_sees_each_token_as_it_is_emitted(model: Any) -> None:
    seen: list[int] = []
    run = Session(model).generate([3, 1, 4, 1, 5], 6, on_token=seen.append)
    assert seen == list(run.tokens)


def test_greedy_matches_argmax_of_a_fresh_forward(model: Any) -> None:
    prompt = prompt_of(2, 17, model.config.vocab_size)
    run = Session(model).generate(prompt, 5)
    state = model.new_state()
    logits = model.forward(np.asarray(prompt), state)[-1]
    expected = []
    for _ in range(5):
        expected.append(int(np.argmax(logits)))
        logits = model.forward(np.asarray([expected[-1]]), state)[-1]
    assert list(run.tokens) == expected


def test_stop_token_ends_the_run_at_its_first_occurrence(model: Any) -> None:
    prompt = prompt_of(3, 9, model.config.vocab_size)
    full = Session(model).generate(prompt, 12)
    j = 6
    stop = full.tokens[j]
    first = full.tokens.index(stop)
    spy = Spy(model)
    run = Session(spy).generate(prompt, 12, stop_tokens=[stop, model.config.vocab_size - 1])
    assert run.tokens == full.tokens[: first + 1]
    assert run.stop_reason is StopReason.STOP_TOKEN
    # the prefill, then one decode forward per token after the first
    assert run.decode_forwards == first and len(spy.calls) == first + 1


def test_stop_token_on_the_last_allowed_token_reports_stop_token(model: Any) -> None:
    prompt = prompt_of(4, 9, model.config.vocab_size)
    full = Session(model).generate(prompt, 4)
    if full.tokens[-1] in full.tokens[:-1]:
        pytest.skip("seeded prompt repeats its last token; the case needs a fresh one")
    run = Session(model).generate(prompt, 4, stop_tokens=[full.tokens[-1]])
    assert run.tokens == full.tokens and run.stop_reason is StopReason.STOP_TOKEN


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), temperature=st.floats(0.3, 3.0), top_k=st.none() | st.integers(1, 600))
def test_identical_seeds_give_identical_tokens(
    model: Any, seed: int, temperature: float, top_k: int | None
) -> None:
    prompt = prompt_of(seed % 1000, 7, model.config.vocab_size)
    a = Session(model).generate(prompt, 8, sampler=Sampler(temperature, top_k, seed))
    b = Session(model).generate(prompt, 8, sampler=Sampler(temperature, top_k, seed))
    assert a.tokens == b.tokens


def test_sampler_respects_top_k_and_spreads_over_it() -> None:
    logits = np.array([0.0, 5.0, 4.9, -3.0, 4.8, 1.0], np.float32)
    sampler = Sampler(temperature=1.0, top_k=3, seed=7)
    picks = [sampler(logits) for _ in range(600)]
    assert set(picks) == {1, 2, 4}  # the three largest, each drawn
    top1 = Sampler(temperature=5.0, top_k=1, seed=0)
    assert {top1(logits) for _ in range(50)} == {1}


def test_sampler_frequencies_follow_the_softmax() -> None:
    logits = np.log(np.array([0.5, 0.3, 0.2]))
    sampler = Sampler(temperature=1.0, seed=11)
    n = 20000
    counts = np.bincount([sampler(logits) for _ in range(n)], minlength=3) / n
    assert np.allclose(counts, [0.5, 0.3, 0.2], atol=0.02), counts


def test_sampler_top_p_keeps_the_token_that_crosses_it() -> None:
    # Probabilities 0.5, 0.25, 0.125, 0.125 (ids 2, 0, 1, 3): top_p 0.6 keeps 2 and 0 (0.5 < 0.6 <= 0.75).
    logits = np.log(np.array([0.25, 0.125, 0.5, 0.125]))
    sampler = Sampler(top_p=0.6)
    u = np.array([0.0, 0.3, 0.6666, 0.6668, 0.999999])
    assert sampler.pick(logits, u).tolist() == [
        2,
        2,
        2,
        0,
        0,
    ]  # renormalised: 2 over [0, 2/3), 0 over [2/3, 1)
    assert sampler.pick(logits, 0.7) == 0 and isinstance(sampler.pick(logits, 0.7), int)
    assert Sampler(top_p=0.5).pick(logits, 0.99) == 2  # exactly 0.5 is reached by the first token alone
    assert Sampler(top_p=1.0).pick(logits, 0.99) == 3  # no cut: the layout ends with the higher id of a tie
    assert Sampler(top_p=0.8, top_k=1).pick(logits, 0.99) == 2  # top-k first


def test_sampler_call_is_pick_of_one_uniform_from_its_rng() -> None:
    logits = np.array([0.3, -1.0, 2.0, 0.5, 1.5])
    sampler = Sampler(temperature=0.7, top_k=4, seed=5, top_p=0.9)
    rng = np.random.default_rng(5)
    assert [sampler(logits) for _ in range(50)] == [sampler.pick(logits, rng.random()) for _ in range(50)]
    assert repr(sampler) == "Sampler(temperature=0.7, top_k=4, top_p=0.9, seed=5)"


def test_greedy_breaks_ties_by_the_lower_id() -> None:
    assert greedy(np.array([1.0, 3.0, 3.0, 2.0])) == 1


class CancelNoPolls:
    """Has is_cancelled() but no poll counter: the run record could not count its polls."""

    def is_cancelled(self) -> bool:
        return False


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": 0.0}, "temperature must be a finite number >= 1e-06"),
        ({"temperature": float("nan")}, "temperature must be a finite number >= 1e-06"),
        ({"temperature": 5e-324}, "temperature must be a finite number >= 1e-06"),  # issue #48: a NaN CDF
        ({"temperature": 9.99e-7}, "temperature must be a finite number >= 1e-06"),
        ({"top_k": 0}, "top_k must be an int >= 1 or None"),
        ({"top_k": 2.5}, "top_k must be an int >= 1 or None"),
        ({"top_p": 0.0}, r"top_p must be a number in \(0, 1\] or None"),
        ({"top_p": 1.01}, r"top_p must be a number in \(0, 1\] or None"),
        ({"top_p": True}, r"top_p must be a number in \(0, 1\] or None"),
        ({"top_p": "0.5"}, r"top_p must be a number in \(0, 1\] or None"),
    ],
)
def test_sampler_refuses_bad_settings(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Sampler(**kwargs)


def test_sampler_refuses_logits_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match=r"logits of shape \[vocab\], got shape \(2, 3\)"):
        greedy(np.zeros((2, 3)))


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "stops", "message"),
    [
        ([], 4, (), "^prompt is empty: generate needs at least one token to prefill$"),
        ([1, 512, 3], 4, (), r"prompt\[1\] = 512 is outside the vocabulary \[0, 512\)"),
        ([1, -1], 4, (), r"prompt\[1\] = -1 is outside the vocabulary"),
        ([1, 2.0], 4, (), r"prompt\[1\] is 2.0, not an int token id"),
        ([1, True], 4, (), r"prompt\[1\] is True, not an int token id"),
        ("abc", 4, (), "prompt must be a sequence of token ids, got str"),
        (7, 4, (), "^prompt must be a sequence of token ids, got int$"),
        ([1], 4, 3, "^stop_tokens must be a sequence of token ids, got int$"),
        ([1, 2], -1, (), "max_tokens must be an int >= 0, got -1"),
        ([1, 2], 2.0, (), "max_tokens must be an int >= 0, got 2.0"),
        ([1, 2], 4, (9999,), r"stop_tokens\[0\] = 9999 is outside the vocabulary"),
        ([0] * 16384, 1, (), None),  # fills the context exactly: allowed, the first token needs no position
        ([0] * 16385, 1, (), "needs 16385 positions; the context holds 16384"),
        ([0] * 16000, 386, (), "prompt of 16000 tokens with max_tokens=386 needs 16385 positions"),
    ],
)
def test_bad_requests_are_refused_before_touching_state(
    model: Any, prompt: Any, max_tokens: Any, stops: Any, message: str | None
) -> None:
    spy = Spy(model)
    session = Session(spy)
    warm = session.generate([7, 8, 9], 3)
    digest, history, calls = session.state.digest(), list(session.history), len(spy.calls)
    if message is None:
        session.generate(prompt, max_tokens, cancel=CancelToken.with_budget(0), stop_tokens=stops)
    else:
        with pytest.raises(ValueError, match=message):
            session.generate(prompt, max_tokens, stop_tokens=stops)
    assert session.state.digest() == digest and session.history == history and len(spy.calls) == calls
    assert warm.emitted == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cancel": 3}, r"cancel must be a cancel token \(is_cancelled\(\) and polls\), got int$"),
        ({"cancel": Sampler()}, r"cancel must be a cancel token .*got Sampler$"),  # no is_cancelled, no polls
        ({"cancel": CancelNoPolls()}, r"cancel must be a cancel token .*got CancelNoPolls$"),
        ({"sampler": "greedy"}, r"sampler must be callable \(logits \[vocab\] -> token id\), got str$"),
        ({"on_token": []}, r"on_token must be callable or None, got list$"),
    ],
)
def test_bad_collaborators_are_refused_before_touching_state(
    model: Any, kwargs: dict[str, Any], message: str
) -> None:
    spy = Spy(model)
    session = Session(spy)
    with pytest.raises(ValueError, match=message):
        session.generate([1, 2, 3], 4, **kwargs)
    assert spy.calls == [] and session.history == []


def test_no_sampler_is_greedy(model: Any) -> None:
    """sampler=None is the protocol's default (greedy), as the harness's own sessions read it."""
    tokens = Session(model).generate([5, 6, 7], 4, sampler=None).tokens
    assert tokens == Session(model).generate([5, 6, 7], 4).tokens
    assert tokens == Session(model).generate([5, 6, 7], 4, sampler=greedy).tokens


@settings(max_examples=8, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    first_len=st.integers(1, 48),
    first_max=st.integers(1, 8),
    tail_len=st.integers(0, 24),
)
def test_a_session_holding_a_prefix_prefills_only_the_suffix(
    model: Any, seed: int, first_len: int, first_max: int, tail_len: int
) -> None:
    vocab = model.config.vocab_size
    first = prompt_of(seed, first_len, vocab)
    spy = Spy(model)
    session = Session(spy)
    turn = session.generate(first, first_max)
    # after a run the state holds the prompt and every emitted token but the last
    assert session.history == first + list(turn.tokens[:-1])
    assert session.state.pos == len(session.history)

    follow = first + list(turn.tokens) + prompt_of(seed + 1, tail_len, vocab)
    spy.calls.clear()
    again = session.generate(follow, 4)
    fresh_session = Session(model)
    fresh = fresh_session.generate(follow, 4)

    held = len(first) + len(turn.tokens) - 1
    assert again.reused == held
    assert spy.calls[0] == (held, follow[held:])  # the prefill ran over the suffix only
    assert again.prefill_forwards == 1 and fresh.reused == 0
    assert again.tokens == fresh.tokens
    assert again.positions == fresh.positions
    assert session.history == fresh_session.history
    # Chunks cut at other positions round differently: logits agree to float32 noise, not bit for bit.
    assert session._logits is not None and fresh_session._logits is not None
    diff = float(np.abs(session._logits - fresh_session._logits).max())
    assert diff < 1e-4, f"reused vs fresh logits differ by {diff}"


def test_the_same_prompt_again_reuses_the_kept_logits(model: Any) -> None:
    spy = Spy(model)
    session = Session(spy)
    prompt = prompt_of(5, 20, model.config.vocab_size)
    assert session.generate(prompt, 1).emitted == 1  # one token: the state holds exactly the prompt
    spy.calls.clear()
    again = session.generate(prompt, 3)
    assert again.reused == len(prompt) and again.prefill_forwards == 0 and spy.calls[0][0] == len(prompt)
    assert again.tokens == Session(model).generate(prompt, 3).tokens


def test_a_prompt_that_diverges_from_the_history_starts_over(model: Any) -> None:
    session = Session(model)
    session.generate([1, 2, 3, 4], 5)
    other = [1, 2, 9, 9, 9]
    run = session.generate(other, 4)
    assert run.reused == 0 and run.tokens == Session(model).generate(other, 4).tokens
    assert session.history == other + list(run.tokens[:-1])


def test_a_cancelled_run_keeps_an_exact_history(model: Any) -> None:
    session = Session(model)
    prompt = prompt_of(6, 12, model.config.vocab_size)
    run = session.generate(prompt, 10, cancel=CancelToken.with_budget(4))
    assert run.emitted == 4 and session.history == prompt + list(run.tokens[:-1])
    follow = prompt + list(run.tokens) + [1, 2]
    assert session.generate(follow, 5).tokens == Session(model).generate(follow, 5).tokens


def _statement_texts(func: Any) -> list[str]:
    """First source line of every statement in `func`'s body (nested ones too), whitespace removed."""
    source = textwrap.dedent(inspect.getsource(func))
    tree = ast.parse(source)
    lines = source.splitlines()
    body = tree.body[0]
    assert isinstance(body, ast.FunctionDef)
    out = []
    for node in ast.walk(body):
        if isinstance(node, ast.stmt) and node is not body:
            out.append("".join(lines[node.lineno - 1].split()))
    return out


@pytest.mark.parametrize(
    "mutant", ["poll-after-forward", "poll-deleted", "forward-after-last-token", "cancel-flushes-stale-token"]
)
def test_each_mutant_statement_and_anchor_is_unique_in_the_loop(mutant: str) -> None:
    doc = yaml.safe_load((Path(__file__).parents[1] / "mutants" / f"{mutant}.yaml").read_text())
    assert doc["file"] == "reference/session.py" and doc["function"] == "Session._run"
    texts = _statement_texts(Session._run)
    for key in ("statement", "anchor"):
        if key in doc:
            wanted = "".join(doc[key].split())
            matches = texts.count(wanted)
            assert matches == 1, f"{mutant}: {key} {doc[key]!r} matches {matches} statements"


def test_reset_keeps_the_sessions_pool(model: Any) -> None:
    pool = model.new_pool(8)
    session = Session(model, pool=pool)
    session.generate([1, 2, 3], 2)
    old = session.state
    session.reset()
    assert session.state.pool is pool and old.released and session.history == []
    assert pool.counts()[1] == 0  # the old state's pages went back; the fresh state holds none yet


def test_one_token_over_two_runs_reports_each_runs_own_polls(model: Any) -> None:
    """A token polled by an earlier run: the second run's record counts only its own polls (what the token's
    counter moved by while it ran), not the token's total."""
    cancel = CancelToken.with_budget(100)
    session = Session(model)
    first = session.generate([5, 6, 7], 3, cancel=cancel)
    assert (first.polls, cancel.polls) == (3, 3)
    second = session.generate([5, 6, 7, *first.tokens, 9], 2, cancel=cancel)
    assert (second.polls, cancel.polls) == (2, 5)
    assert (second.prompt_len, second.reused) == (
        3 + 3 + 1,
        3 + 2,
    )  # the last emitted token was never fed back


def test_a_session_takes_its_first_state_from_the_pool_it_is_given(model: Any) -> None:
    pool = model.new_pool(8)
    session = Session(model, pool=pool)
    assert session.state.pool is pool
    session.generate(list(range(1, 20)), 1)
    assert pool.counts()[1] > 0  # the prompt's KV pages came out of this pool


def test_a_draw_on_an_interval_edge_belongs_to_the_next_token() -> None:
    """Token i owns the half-open interval [cdf[i-1], cdf[i]) of the scaled draw: two equal logits split [0, 1)
    at exactly 0.5, and 0.5 itself is the second token's."""
    logits = np.zeros(2)
    assert Sampler().pick(logits, np.array([0.0, np.nextafter(0.5, 0.0), 0.5, 0.75])).tolist() == [0, 0, 1, 1]


def test_a_vocabulary_of_one_token_is_sampled_not_refused() -> None:
    logits = np.array([0.25])
    assert (
        greedy(logits) == 0 and Sampler()(logits) == 0 and Sampler(top_k=1, top_p=0.5).pick(logits, 0.9) == 0
    )
    with pytest.raises(ValueError, match=r"sampler wants logits of shape \[vocab\], got shape \(0,\)"):
        greedy(np.array([]))


def test_the_default_seed_is_zero() -> None:
    logits = np.linspace(0.0, 2.0, 16)

    def draws(sampler: Sampler) -> list[int]:
        return [sampler(logits) for _ in range(20)]

    assert Sampler().seed == 0 and draws(Sampler()) == draws(Sampler(seed=0)) != draws(Sampler(seed=1))
