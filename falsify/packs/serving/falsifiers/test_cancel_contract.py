"""Falsifiers of contract apr-serve-cancellation-v1 (falsify/packs/serving/contracts/apr-serve-cancellation-v1.yaml).

The engine comes from the `engine` fixture (`engine.load_model("f32")`, `engine.session(model)`); what is judged
comes from the harness (falsify/harness/instruments.py): the session runs on a `CountingModel` proxy of the
engine's model, which records every forward call, and is given the harness's `CountingCancel`, which counts every
poll. The contract's counters are those measurements; the run record's own counters are `reported_*` observables
that FALSIFY-SERVE-CANCEL-011 requires to agree with them, so an engine whose record miscounts is falsified, not
trusted. The seeded sampler is the test's own callable (logits -> token id). Every formula lives in the YAML; the
tests only observe.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import falsify
from falsify.harness.instruments import CountingCancel, CountingModel

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Prompts are drawn as raw ints and folded into the model's vocabulary inside the test.
raw_prompts = st.lists(st.integers(0, 2**20), min_size=1, max_size=32)
# Domains come from the contract (falsify.strategies), not restated here.
BUDGET = falsify.strategies("FALSIFY-SERVE-CANCEL-001")["n"]  # 1..16
BUDGET_OR_ZERO = falsify.strategies("FALSIFY-SERVE-CANCEL-006")  # n 0..16, seed
LIMIT = falsify.strategies("FALSIFY-SERVE-CANCEL-004")["max_tokens"]  # 1..32


@pytest.fixture(scope="module")
def model(engine: Any) -> Any:
    return engine.load_model("f32")


class SeededSampler:
    """Softmax sampling over the top 50 logits with its own seeded RNG, one uniform draw per token. The test
    brings it so the claim holds for any engine that samples through the `sampler` it is given."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def __call__(self, logits: Any) -> int:
        logits = np.asarray(logits, np.float64)
        order = np.argsort(-logits, kind="stable")[:50]
        p = np.exp(logits[order] - logits[order[0]])
        cdf = np.cumsum(p)
        return int(
            order[min(int(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right")), len(order) - 1)]
        )


def tokens_of(raw: list[int], model: Any) -> list[int]:
    return [t % model.config.vocab_size for t in raw]


def measured(
    run: Any, model: CountingModel, cancel: CountingCancel | None, prompt_len: int
) -> dict[str, Any]:
    """The contract's observables for one run: counts from the harness's instruments, and the run record's own
    counters as `reported_*`. `model` was reset() just before the run, so its calls are this run's."""
    prefill, decode = model.split(prompt_len)
    emitted = len(run.tokens)
    # Logits that produced no emitted token: every decode forward past the emitted - 1 that fed a token, and the
    # prefill's when it produced no token at all.
    wasted = len(decode) - max(emitted - 1, 0) + (len(prefill) if emitted == 0 else 0)
    # A wire engine's run record is the harness's own count of its events; what the engine says it did is its
    # `claims` (docs/engine-protocol.md §4.5), the self-report FALSIFY-SERVE-CANCEL-011 checks. A count it does not
    # claim falls back to the record.
    claims = getattr(run, "claims", None) or {}
    return {
        "tokens": run.tokens,
        "emitted": emitted,
        "decode_forwards": len(decode),
        "prefill_forwards": len(prefill),
        "polls": 0 if cancel is None else cancel.polls,
        "positions": [c.start for c in decode],
        "wasted_forwards": wasted,
        "stop_reason": str(run.stop_reason),
        "prompt_len": prompt_len,
        "reported_emitted": run.emitted,
        "reported_decode_forwards": claims.get("decode_forwards", run.decode_forwards),
        "reported_prefill_forwards": claims.get("prefill_forwards", run.prefill_forwards),
        "reported_polls": claims.get("polls", run.polls),
        "reported_positions": run.positions,
        "reported_wasted_forwards": run.wasted_forwards,
    }


REPORTED = (
    "emitted",
    "decode_forwards",
    "prefill_forwards",
    "polls",
    "positions",
    "wasted_forwards",
    "reported_emitted",
    "reported_decode_forwards",
    "reported_prefill_forwards",
    "reported_polls",
    "reported_positions",
    "reported_wasted_forwards",
)


def check_all(*checks: tuple[str, dict[str, Any]]) -> None:
    """Check every prediction before failing, so a red run names every claim it broke (the first raises, the
    rest ride along as notes); `falsify.check` records each observation either way."""
    __tracebackhide__ = True
    broken: list[falsify.ContractViolation] = []
    for prediction_id, observed in checks:
        try:
            falsify.check(prediction_id, **observed)
        except falsify.ContractViolation as exc:
            broken.append(exc)
    if broken:
        first = broken[0]
        for other in broken[1:]:
            first.add_note(f"also falsified: {other}")
        raise first


def pick(fields: dict[str, Any], *names: str) -> dict[str, Any]:
    return {name: fields[name] for name in names}


def warm_session(engine: Any, model: CountingModel, prompt: list[int], warm: int) -> Any:
    """A session on the counting proxy; when `warm`, it already holds a prefix of `prompt` from an earlier run
    (exercises reuse). The proxy is reset, so what it records next is the measured run's alone."""
    session = engine.session(model)
    if warm and len(prompt) > 1:
        session.generate(prompt[: max(1, len(prompt) // 2)], 1)
    model.reset()
    return session


@pytest.mark.falsifies(
    "FALSIFY-SERVE-CANCEL-001",
    "FALSIFY-SERVE-CANCEL-002",
    "FALSIFY-SERVE-CANCEL-003",
    "FALSIFY-SERVE-CANCEL-008",
    "FALSIFY-SERVE-CANCEL-010",
    "FALSIFY-SERVE-CANCEL-011",
)
@SETTINGS
@given(n=BUDGET, extra=st.integers(1, 16), raw=raw_prompts, warm=st.booleans())
@example(n=8, extra=8, raw=[1, 2, 3, 4, 5], warm=False)  # the source engine's case: 8 polls, 8 decode passes
# the contract's corners of CANCEL-001..003 (smallest and largest budget, the budget one below the limit)
@example(n=1, extra=1, raw=[4, 2], warm=False)
@example(n=16, extra=16, raw=[9, 9, 1], warm=True)
@example(n=5, extra=1, raw=[3, 1, 4, 1, 5], warm=True)
def test_a_budget_cancelled_run(
    engine: Any, model: Any, n: int, extra: int, raw: list[int], warm: bool
) -> None:
    prompt = tokens_of(raw, model)
    max_tokens = n + extra
    counting = CountingModel(model)
    session = warm_session(engine, counting, prompt, warm)
    cancel = CountingCancel.with_budget(n)
    run = session.generate(prompt, max_tokens, cancel=cancel)
    f = measured(run, counting, cancel, len(prompt))
    domain = {"n": n, "max_tokens": max_tokens}
    check_all(
        ("FALSIFY-SERVE-CANCEL-001", pick(f, "emitted", "stop_reason") | domain),
        ("FALSIFY-SERVE-CANCEL-002", pick(f, "emitted", "decode_forwards") | domain),
        ("FALSIFY-SERVE-CANCEL-003", pick(f, "emitted", "polls") | domain),
        ("FALSIFY-SERVE-CANCEL-008", pick(f, "positions", "prompt_len", "emitted") | domain),
        ("FALSIFY-SERVE-CANCEL-010", pick(f, "wasted_forwards") | {"n": n}),
        ("FALSIFY-SERVE-CANCEL-011", pick(f, *REPORTED)),
    )


@pytest.mark.falsifies(
    "FALSIFY-SERVE-CANCEL-004",
    "FALSIFY-SERVE-CANCEL-008",
    "FALSIFY-SERVE-CANCEL-010",
    "FALSIFY-SERVE-CANCEL-011",
)
@SETTINGS
@given(max_tokens=LIMIT, raw=raw_prompts, warm=st.booleans())
def test_a_run_cancelled_before_its_first_token(
    engine: Any, model: Any, max_tokens: int, raw: list[int], warm: bool
) -> None:
    prompt = tokens_of(raw, model)
    counting = CountingModel(model)
    session = warm_session(engine, counting, prompt, warm)
    cancel = CountingCancel.with_budget(0)
    run = session.generate(prompt, max_tokens, cancel=cancel)
    f = measured(run, counting, cancel, len(prompt))
    check_all(
        (
            "FALSIFY-SERVE-CANCEL-004",
            pick(f, "emitted", "decode_forwards", "prefill_forwards", "stop_reason")
            | {"max_tokens": max_tokens},
        ),
        (
            "FALSIFY-SERVE-CANCEL-008",
            pick(f, "positions", "prompt_len", "emitted") | {"n": 0, "max_tokens": max_tokens},
        ),
        ("FALSIFY-SERVE-CANCEL-010", pick(f, "wasted_forwards") | {"n": 0}),
        ("FALSIFY-SERVE-CANCEL-011", pick(f, *REPORTED)),
    )


@pytest.mark.falsifies("FALSIFY-SERVE-CANCEL-005", "FALSIFY-SERVE-CANCEL-008", "FALSIFY-SERVE-CANCEL-011")
@SETTINGS
@falsify.corner_examples("FALSIFY-SERVE-CANCEL-005", raw=[2, 7, 1], warm=False, counting=True)
@given(max_tokens=LIMIT, raw=raw_prompts, warm=st.booleans(), counting=st.booleans())
def test_an_uncancelled_run(
    engine: Any, model: Any, max_tokens: int, raw: list[int], warm: bool, counting: bool
) -> None:
    prompt = tokens_of(raw, model)
    proxy = CountingModel(model)
    session = warm_session(engine, proxy, prompt, warm)
    # a cancellable token nobody cancels must behave like never(): the harness counts the polls of both
    cancel = CountingCancel() if counting else CountingCancel.never()
    run = session.generate(prompt, max_tokens, cancel=cancel)
    f = measured(run, proxy, cancel, len(prompt))
    check_all(
        (
            "FALSIFY-SERVE-CANCEL-005",
            pick(f, "emitted", "decode_forwards", "stop_reason") | {"max_tokens": max_tokens},
        ),
        (
            "FALSIFY-SERVE-CANCEL-008",
            pick(f, "positions", "prompt_len", "emitted") | {"max_tokens": max_tokens},
        ),
        ("FALSIFY-SERVE-CANCEL-011", pick(f, *REPORTED)),
    )


@pytest.mark.falsifies("FALSIFY-SERVE-CANCEL-006")
@SETTINGS
@given(
    n=BUDGET_OR_ZERO["n"], extra=st.integers(0, 8), raw=raw_prompts, seed=st.none() | BUDGET_OR_ZERO["seed"]
)
def test_cancelled_tokens_are_a_prefix_of_the_uncancelled_run(
    engine: Any, model: Any, n: int, extra: int, raw: list[int], seed: int | None
) -> None:
    prompt = tokens_of(raw, model)
    max_tokens = n + extra + 1

    def sampler() -> Any:
        return None if seed is None else SeededSampler(seed)

    def generate(**kw: Any) -> Any:
        chosen = sampler()
        extra_kw = {} if chosen is None else {"sampler": chosen}  # None: the engine's default (greedy)
        return engine.session(model).generate(prompt, max_tokens, **kw, **extra_kw)

    full = generate()
    cut = generate(cancel=CountingCancel.with_budget(n))
    domain = {"n": n} if seed is None else {"n": n, "seed": seed}
    falsify.check("FALSIFY-SERVE-CANCEL-006", tokens=cut.tokens, uncancelled_tokens=full.tokens, **domain)


@pytest.mark.falsifies("FALSIFY-SERVE-CANCEL-007", "FALSIFY-SERVE-CANCEL-008", "FALSIFY-SERVE-CANCEL-011")
@SETTINGS
# The contract's corners first: the stop token on the last position the budget allows, on the first, mid-run.
@example(raw=[3, 1, 4, 1, 5], at=6, warm=False, last=True)
@example(raw=[2, 7, 1, 8], at=0, warm=True, last=False)
@example(raw=[9, 2, 6], at=4, warm=False, last=False)
@given(raw=raw_prompts, at=st.integers(0, 19), warm=st.booleans(), last=st.booleans())
def test_a_stop_token_ends_the_run(
    engine: Any, model: Any, raw: list[int], at: int, warm: bool, last: bool
) -> None:
    """`last`: the budget is exactly the position where the stop token first comes (both end the run at once)."""
    prompt = tokens_of(raw, model)
    full = engine.session(model).generate(prompt, 20)
    stop_token = full.tokens[at]
    max_tokens = full.tokens.index(stop_token) + 1 if last else 20
    proxy = CountingModel(model)
    session = warm_session(engine, proxy, prompt, warm)
    cancel = CountingCancel.never()
    run = session.generate(prompt, max_tokens, cancel=cancel, stop_tokens=[stop_token])
    f = measured(run, proxy, cancel, len(prompt))
    check_all(
        (
            "FALSIFY-SERVE-CANCEL-007",
            pick(f, "stop_reason", "tokens", "decode_forwards", "emitted", "wasted_forwards")
            | {"stop_token": stop_token, "max_tokens": max_tokens},
        ),
        (
            "FALSIFY-SERVE-CANCEL-008",
            pick(f, "positions", "prompt_len", "emitted") | {"max_tokens": max_tokens},
        ),
        ("FALSIFY-SERVE-CANCEL-011", pick(f, *REPORTED)),
    )


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# What the session ran before the measured run, as (earlier prompt, earlier max_tokens, how the measured prompt is
# made): the prompt P, a prefix of it, P itself, P + what the earlier run emitted (a chat turn), a history that
# differs from P at `at`, and P with more after it. One case per corner of FALSIFY-SERVE-CANCEL-012 at least.
HISTORIES = [
    ("nothing", 0, 0),
    ("prefix", 1, 1),
    ("prefix", 9, 1),
    ("chat", 5, 3),
    ("whole", 0, 1),
    ("whole", 0, 3),  # the session holds P and two of its tokens: the same question asked again
    ("diverged", 0, 1),
    ("diverged", 4, 3),  # the history runs two tokens past the prompt and differs from it at 4
    ("diverged", 11, 1),  # they differ at the prompt's last token
    ("longer", 0, 1),
    ("held", 0, 3),  # the prompt is all the session holds, its last tokens decoded there (not prefilled)
]


def run_after(engine: Any, model: Any, history: str, at: int, earlier_tokens: int) -> dict[str, Any]:
    """One case of HISTORIES on a fresh session: the earlier run, then the measured one (2 tokens, greedy)."""
    return session_after(engine, model, history, at, earlier_tokens)[0]


def session_after(
    engine: Any, model: Any, history: str, at: int, earlier_tokens: int
) -> tuple[dict[str, Any], list[int], list[int]]:
    """run_after's observables, the measured run's prompt and the tokens it emitted."""
    vocab = model.config.vocab_size
    base = tokens_of([(7919 * i + 104729 * at + 13) for i in range(12)], model)
    proxy = CountingModel(model)
    session = engine.session(proxy)
    held: list[int] = []
    prompt = base
    if history != "nothing":
        if history == "prefix":
            earlier = base[:at]
        elif history == "diverged":  # base with token `at` changed
            earlier = [*base[:at], (base[at] + 1) % vocab, *base[at + 1 :]]
        elif history == "longer":
            earlier = [*base, (base[0] + 5) % vocab, (base[1] + 7) % vocab]
        else:  # whole, chat
            earlier = base
        ran = session.generate(earlier, earlier_tokens)
        held = [*earlier, *ran.tokens[:-1]]  # what the session holds after it (docs/engine-protocol.md §4.4)
        if history == "chat":  # the next turn: the reply, then more
            prompt = [*held, *ran.tokens[-1:], *base[:3]]
        elif history == "held":
            prompt = held
    proxy.reset()
    run = session.generate(prompt, 2, cancel=CountingCancel.never())
    calls = proxy.calls
    observed = {
        "start": calls[0].start if calls else len(held),
        "held_len": len(held),
        "common": common_prefix(held, prompt),
        "prompt_len": len(prompt),
    }
    return observed, prompt, list(run.tokens)


@pytest.mark.falsifies("FALSIFY-SERVE-CANCEL-012")
def test_a_run_reuses_only_the_prefix_its_prompt_shares_with_the_session(engine: Any, model: Any) -> None:
    # The sensitivity control: an engine that starts every run at position 0 (the protocol allows it) reuses
    # nothing, so no reuse of it can run past the common prefix: the prediction cannot be shown false on it.
    controls = [
        run_after(engine, model, *case) for case in HISTORIES if case[0] in ("prefix", "chat", "whole")
    ]
    if not any(c["start"] > 0 for c in controls):
        falsify.cannot_show(
            "FALSIFY-SERVE-CANCEL-012",
            f"the engine started each of {len(controls)} runs whose prompt extends what the session held at "
            "position 0: it reuses none of a session's state, so none can be reused past the common prefix",
            starts=[c["start"] for c in controls],
            whose="engine",
        )
    for case in HISTORIES:
        falsify.check("FALSIFY-SERVE-CANCEL-012", **run_after(engine, model, *case))


@pytest.mark.falsifies("FALSIFY-SERVE-CANCEL-013")
def test_a_run_on_a_used_session_emits_what_a_fresh_session_emits(engine: Any, model: Any) -> None:
    for case in HISTORIES:
        observed, prompt, tokens = session_after(engine, model, *case)
        fresh = engine.session(model).generate(prompt, 2, cancel=CountingCancel.never())
        falsify.check(
            "FALSIFY-SERVE-CANCEL-013",
            tokens=tokens,
            fresh_tokens=list(fresh.tokens),
            history=case[0],
            held_len=observed["held_len"],
            prompt_len=observed["prompt_len"],
        )


@pytest.mark.falsifies("FALSIFY-SERVE-CANCEL-009")
@pytest.mark.parametrize("k", [1, 2, 5, 8])
def test_cancel_from_another_thread_stops_within_one_token(engine: Any, model: Any, k: int) -> None:
    token = CountingCancel()
    go, done = threading.Event(), threading.Event()
    seen: list[int] = []
    at_cancel: list[int] = []

    def canceller() -> None:
        if go.wait(30):
            token.cancel()
            at_cancel.append(len(seen))
        done.set()

    def on_token(t: int) -> None:
        seen.append(t)
        if len(seen) == k:
            # hand over mid-run: the other thread cancels while this run is between two tokens
            go.set()
            done.wait(30)

    thread = threading.Thread(target=canceller, name="canceller")
    thread.start()
    try:
        run = engine.session(model).generate([1, 2, 3, k], 40, cancel=token, on_token=on_token)
    finally:
        go.set()
        thread.join(30)
    assert at_cancel, "the canceller thread never ran"
    falsify.check(
        "FALSIFY-SERVE-CANCEL-009",
        stop_reason=str(run.stop_reason),
        emitted=len(run.tokens),
        emitted_at_cancel=at_cancel[0],
        k=k,
    )
