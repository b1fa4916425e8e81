"""Falsifiers of apr-serve-prefill-steps-v1, lane-host half.

Decode never stalls behind a prefill, leaving frees the lane, streams do not disturb each other, and a
stateful program of submit / round / cancel / leave / resume keeps the pool, the schedule and every
stream's tokens right.

The stall is measured outside the host: a recorder around the model logs every forward call with its state, so
the prompt tokens forwarded between two tokens of a decoding stream are counted from the calls themselves.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import falsify

PAGE_SIZE = 16


class Recorder:
    """The model, logging the states it made and (state, tokens) for every forward call."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.config = model.config
        self.states: list[Any] = []
        self.calls: list[tuple[Any, int]] = []

    def new_pool(self, *args: Any, **kw: Any) -> Any:
        return self.model.new_pool(*args, **kw)

    def new_state(self, pool: Any = None) -> Any:
        state = self.model.new_state(pool)
        self.states.append(state)
        return state

    def forward(self, tokens: Any, state: Any) -> np.ndarray:
        self.calls.append((state, len(tokens)))
        return self.model.forward(tokens, state)


def prompt_of(model: Any, n: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, model.config.vocab_size, n)]


@pytest.fixture(scope="module")
def model(engine: Any) -> Any:
    return engine.load_model("f32")


@pytest.fixture(scope="module")
def alone(engine: Any, model: Any) -> Any:
    """Tokens of a request run alone through Session.generate (greedy), cached per (prompt, max_tokens)."""
    cache: dict[tuple[tuple[int, ...], int], list[int]] = {}

    def run(prompt: list[int], max_tokens: int) -> list[int]:
        key = (tuple(prompt), max_tokens)
        if key not in cache:
            cache[key] = list(engine.session(model).generate(prompt, max_tokens).tokens)
        return cache[key]

    return run


@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-004")
@pytest.mark.parametrize(("prompt_len", "chunk_cap"), [(300, 64), (700, 128), (1100, 64)])
def test_decode_waits_at_most_one_chunk(engine: Any, model: Any, prompt_len: int, chunk_cap: int) -> None:
    rec = Recorder(model)
    host = engine.lane_host(rec, chunk_cap=chunk_cap, pages=256, page_size=PAGE_SIZE)
    rounds_needed = -(-prompt_len // chunk_cap) + 4
    b = host.submit(prompt_of(model, 5, 1), rounds_needed + 4)
    c = host.submit(prompt_of(model, 9, 2), rounds_needed + 4)
    while not (host.tokens(b) and host.tokens(c)):
        host.round()
    start = len(rec.calls)
    a = host.submit(prompt_of(model, prompt_len, 3), 2)
    while not host.tokens(a):
        host.round()
    b_state, a_state = rec.states[0], rec.states[2]
    between, prefill_between = [], 0
    for state, n in rec.calls[start:]:
        if state is b_state:  # one token of B
            between.append(prefill_between)
            prefill_between = 0
        elif state is a_state:
            prefill_between += n
    between.append(prefill_between)
    falsify.check(
        "FALSIFY-SERVE-PREFILL-004",
        prompt_len=prompt_len,
        chunk_cap=chunk_cap,
        gaps=host.decode_gaps(b),
        max_prefill_between=max(between),
    )


@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-005")
@pytest.mark.parametrize("leave_round", [1, 2, 4, 9])
def test_leaving_mid_pass_returns_the_lane(engine: Any, model: Any, leave_round: int) -> None:
    host = engine.lane_host(model, chunk_cap=64, pages=64, page_size=PAGE_SIZE)
    other = host.submit(prompt_of(model, 40, 5), 20)
    baseline_free = host.pool()[0]
    a = host.submit(prompt_of(model, 150, 6), 10)  # 3 chunks, then decode: rounds 1-2 prefill, 4+ decode
    for _ in range(leave_round):
        host.round()
    held = baseline_free - host.pool()[0]
    host.leave(a)
    free, used, total = host.pool()
    falsify.check(
        "FALSIFY-SERVE-PREFILL-005",
        leave_round=leave_round,
        held=held,
        baseline_free=baseline_free,
        free=free,
        used=used,
        total=total,
    )
    assert other in host.streams()


def run_pair(engine: Any, model: Any, at_round: int | None, action: str) -> tuple[list[int], int, str]:
    host = engine.lane_host(model, chunk_cap=64, pages=64, page_size=PAGE_SIZE)
    a = host.submit(prompt_of(model, 200, 11), 6)
    b = host.submit(prompt_of(model, 70, 12), 12)
    r = 0
    while host.busy():
        if r == at_round:
            host.cancel(a) if action == "cancel" else host.leave(a)
        host.round()
        r += 1
    return host.tokens(b), host.stats(b).decode_forwards, host.state_digest(b)


@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-006")
@pytest.mark.parametrize(
    ("at_round", "action"),
    [(0, "cancel"), (2, "cancel"), (6, "cancel"), (1, "leave"), (5, "leave"), (9, "leave")],
)
def test_cancel_or_leave_of_a_never_changes_b(engine: Any, model: Any, at_round: int, action: str) -> None:
    ref_tokens, ref_forwards, ref_state = run_pair(engine, model, None, action)
    tokens, forwards, state = run_pair(engine, model, at_round, action)
    falsify.check(
        "FALSIFY-SERVE-PREFILL-006",
        at_round=at_round,
        action=action,
        b_tokens=tokens,
        b_tokens_ref=ref_tokens,
        b_forwards=forwards,
        b_forwards_ref=ref_forwards,
        b_state=state,
        b_state_ref=ref_state,
    )


@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-007")
@pytest.mark.parametrize("n_streams", [1, 3, 4])
def test_shared_tokens_equal_alone(engine: Any, model: Any, alone: Any, n_streams: int) -> None:
    jobs = [(prompt_of(model, n, n), k) for n, k in ((150, 5), (63, 9), (75, 3), (1, 7))][:n_streams]
    host = engine.lane_host(model, chunk_cap=64, pages=64, page_size=PAGE_SIZE)
    ids = [host.submit(p, k) for p, k in jobs]
    host.run()
    for sid, (p, k) in zip(ids, jobs, strict=True):
        falsify.check(
            "FALSIFY-SERVE-PREFILL-007",
            n_streams=n_streams,
            shared_tokens=host.tokens(sid),
            alone_tokens=alone(p, k),
        )


@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-008", "FALSIFY-SERVE-PREFILL-009", "FALSIFY-SERVE-PREFILL-010")
def test_lane_host_state_machine(engine: Any, model: Any, alone: Any) -> None:
    max_streams, pages = 3, 24

    class LaneHostMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.host = engine.lane_host(
                model, chunk_cap=64, pages=pages, page_size=PAGE_SIZE, max_streams=max_streams
            )
            self.jobs: dict[int, tuple[list[int], int]] = {}
            self.waited: dict[int, int] = {}  # rounds a prefilling stream has gone without a chunk
            self.most_held = 0

        def phase(self, sid: int) -> str:
            return str(self.host.stats(sid).phase)

        @rule(n=st.integers(1, 140), max_tokens=st.integers(1, 5), seed=st.integers(0, 2))
        def submit(self, n: int, max_tokens: int, seed: int) -> None:
            p = prompt_of(model, n, seed)
            try:
                sid = self.host.submit(p, max_tokens)
            except RuntimeError as refused:  # LaneRefused: a clear, named refusal
                assert type(refused).__name__ == "LaneRefused", refused
                return
            self.jobs[sid] = (p, max_tokens)
            self.waited[sid] = 0
            self.most_held = max(self.most_held, sum(self.phase(s) != "done" for s in self.jobs))

        @rule()
        def round(self) -> None:
            report = self.host.round()
            served = report.prefilled[0] if report.prefilled else None
            for sid in self.jobs:
                if self.phase(sid) == "prefill":
                    self.waited[sid] = 0 if sid == served else self.waited[sid] + 1

        @precondition(lambda self: self.jobs)
        @rule(data=st.data())
        def cancel(self, data: st.DataObject) -> None:
            self.host.cancel(data.draw(st.sampled_from(sorted(self.jobs))))

        @precondition(lambda self: self.jobs)
        @rule(data=st.data())
        def leave(self, data: st.DataObject) -> None:
            sid = data.draw(st.sampled_from(sorted(self.jobs)))
            self.host.leave(sid)
            del self.jobs[sid]

        @precondition(lambda self: any(self.phase(s) == "paused" for s in self.jobs))
        @rule(data=st.data())
        def resume(self, data: st.DataObject) -> None:
            sid = data.draw(st.sampled_from(sorted(s for s in self.jobs if self.phase(s) == "paused")))
            self.host.resume(sid)
            self.waited[sid] = 0

        @invariant()
        def pool_conserved(self) -> None:
            free, used, total = self.host.pool()
            held = sum(self.host.stats(s).pages for s in self.jobs)
            falsify.check("FALSIFY-SERVE-PREFILL-008", free=free, used=used, total=total, lanes_held=held)

        @invariant()
        def no_starved_stream(self) -> None:
            max_wait = max([self.waited[s] for s in self.jobs if self.phase(s) == "prefill"], default=0)
            gaps = [g for s in self.jobs for g in self.host.decode_gaps(s)]
            falsify.check(
                "FALSIFY-SERVE-PREFILL-009", gaps=gaps, max_wait=max_wait, streams=max(self.most_held, 1)
            )

        @invariant()
        def tokens_and_forwards(self) -> None:
            for sid, (p, k) in self.jobs.items():
                stats = self.host.stats(sid)
                falsify.check(
                    "FALSIFY-SERVE-PREFILL-010",
                    shared_tokens=self.host.tokens(sid),
                    alone_tokens=alone(p, k),
                    emitted=stats.emitted,
                    decode_forwards=stats.decode_forwards,
                )

    run_state_machine_as_test(
        LaneHostMachine,
        settings=settings(
            max_examples=12, stateful_step_count=25, deadline=None, suppress_health_check=list(HealthCheck)
        ),
    )
