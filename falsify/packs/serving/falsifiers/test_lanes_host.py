"""Falsifiers of apr-serve-prefill-steps-v1, lane-host half.

Decode never stalls behind a prefill, leaving frees the lane, streams do not disturb each other, and a
stateful program of submit / round / cancel / leave / resume keeps the pool, the schedule and every
stream's tokens right.

The stall is measured outside the host: the harness's CountingModel around the model logs every forward call
with its stream, so the prompt tokens forwarded between two tokens of a decoding stream are counted from the calls
themselves.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, settings, target
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from hypothesis.statistics import collector, describe_statistics

import falsify
from falsify.harness.instruments import CountingModel
from falsify.packs.serving.falsifiers.lane_probe import CancelAndLeave, LaneProbe, observe

PAGE_SIZE = 16


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


def pool(host: Any) -> dict[str, int]:
    """The shared KV pool's pages as the pool predictions observe them: free, used and total."""
    free, used, total = host.pool()
    return {"free": free, "used": used, "total": total}


LONGEST = 256  # the domain's shortest long prompt: four chunks of the larger cap


@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-004")
@pytest.mark.parametrize(("wanted", "chunk_cap"), [(300, 64), (700, 128), (1100, 64)])
def test_decode_waits_at_most_one_chunk(engine: Any, model: Any, wanted: int, chunk_cap: int) -> None:
    # The prompt is sized to the engine's declared context (a request fits when len(prompt) + max_tokens - 1 <=
    # max_position_embeddings; this one decodes 2): a 1,024-position engine gets a 1,023-token prompt, not an
    # ERROR for 1,100 (issue #46); one whose context holds no long prompt cannot show the claim.
    prompt_len = min(wanted, model.config.max_position_embeddings - 1)
    if prompt_len < LONGEST:
        falsify.cannot_show(
            "FALSIFY-SERVE-PREFILL-004",
            f"the engine's context ({model.config.max_position_embeddings} positions) holds no prompt of "
            f"{LONGEST} tokens, the shortest long prompt the claim is about",
            whose="engine",
            max_position_embeddings=model.config.max_position_embeddings,
        )
    rec = CountingModel(model)
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
    # streams are numbered in the order of their first forward: b (submitted first), c, then a
    b_stream, a_stream = 0, 2
    between, prefill_between = [], 0
    for call in rec.calls[start:]:
        if call.stream == b_stream:  # one token of B
            between.append(prefill_between)
            prefill_between = 0
        elif call.stream == a_stream:
            prefill_between += len(call.tokens)
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
    falsify.check(
        "FALSIFY-SERVE-PREFILL-005",
        leave_round=leave_round,
        held=held,
        baseline_free=baseline_free,
        **pool(host),
    )
    assert other in host.streams()


def run_pair(engine: Any, model: Any, at_round: int | None, action: str) -> dict[str, Any]:
    """B's tokens, decode forwards and state, named as PREFILL-006 names them, when A is cancelled or left
    before round `at_round` (None: neither)."""
    host = engine.lane_host(model, chunk_cap=64, pages=64, page_size=PAGE_SIZE)
    a = host.submit(prompt_of(model, 200, 11), 6)
    b = host.submit(prompt_of(model, 70, 12), 12)
    r = 0
    while host.busy():
        if r == at_round:
            host.cancel(a) if action == "cancel" else host.leave(a)
        host.round()
        r += 1
    return {
        "b_tokens": host.tokens(b),
        "b_forwards": host.stats(b).decode_forwards,
        "b_state": host.state_digest(b),
    }


@pytest.fixture(scope="module")
def undisturbed_pair(engine: Any, model: Any) -> Any:
    """B's tokens, decode forwards and state when A is neither cancelled nor left: the reference every case of
    PREFILL-006 compares with, the same run for all of them, so run once per module (as `alone` is)."""
    cache: list[dict[str, Any]] = []

    def run() -> dict[str, Any]:
        if not cache:
            cache.append(run_pair(engine, model, None, "cancel"))
        return cache[0]

    return run


# A (4 chunks) and B (2 chunks) take prefill turns: before rounds 0 and 2 A is at the head of the queue, before
# rounds 1 and 3 B is (a cancel that drops the queue's head instead of A's entry is only seen there), from round
# 4 on B decodes.
@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-006")
@pytest.mark.parametrize(
    ("at_round", "action"),
    [
        (0, "cancel"),
        (1, "cancel"),
        (2, "cancel"),
        (3, "cancel"),
        (6, "cancel"),
        (1, "leave"),
        (5, "leave"),
        (9, "leave"),
    ],
)
def test_cancel_or_leave_of_a_never_changes_b(
    engine: Any, model: Any, undisturbed_pair: Any, at_round: int, action: str
) -> None:
    # the undisturbed run's as b_tokens_ref, b_forwards_ref, b_state_ref
    ref = {f"{name}_ref": value for name, value in undisturbed_pair().items()}
    b = run_pair(engine, model, at_round, action)
    falsify.check("FALSIFY-SERVE-PREFILL-006", at_round=at_round, action=action, **b, **ref)


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


@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-019")
@pytest.mark.parametrize(
    ("why", "short_by"), [(c["why"], c["short_by"]) for c in falsify.corners("FALSIFY-SERVE-PREFILL-019")]
)
def test_a_submit_that_does_not_fit_is_refused_by_name_and_allocates_nothing(
    engine: Any, model: Any, why: str, short_by: int
) -> None:
    """A pool of 12 pages and two lanes, one stream holding 3 pages; the next submit needs exactly the free pages
    plus `short_by` (its last position one past a page boundary), or finds both lanes held, or both lanes' streams
    finished (run to max_tokens; their clients have not left)."""
    host = engine.lane_host(model, chunk_cap=64, pages=12, page_size=PAGE_SIZE, max_streams=2)
    host.submit(prompt_of(model, 40, 1), 9)  # 48 positions: 3 pages
    if why in ("lanes", "finished"):
        host.submit(prompt_of(model, 5, 2), 2)
    if why == "finished":
        for _ in range(100):  # 2 chunks and 8 decode steps finish both
            if not host.busy():
                break
            host.round()
        assert not host.busy(), "two short streams did not finish in 100 rounds"
    free = host.pool()[0]
    max_tokens = 4
    positions = free * PAGE_SIZE + (1 + (short_by - 1) * PAGE_SIZE if short_by else 0)
    prompt = prompt_of(model, positions - max_tokens + 1 if why == "pages" else 8, 3)
    pool_before, streams_before = list(host.pool()), list(host.streams())
    try:
        host.submit(prompt, max_tokens)
        refusal = "none"
    except Exception as exc:  # the name is the claim: any other exception is a FAIL, not an ERROR
        refusal = type(exc).__name__
    falsify.check(
        "FALSIFY-SERVE-PREFILL-019",
        why=why,
        short_by=short_by,
        refusal=refusal,
        pool_before=pool_before,
        pool_after=list(host.pool()),
        streams_before=streams_before,
        streams_after=list(host.streams()),
    )


# The state machine's reach, as hypothesis' statistics show it (pytest --hypothesis-show-statistics): every label
# below is an event() the machine records, and the run asserts the ones the predictions need were reached.
FULL_ROUND = "a round began with every lane decoding"
SEVERAL_PREFILLING = "a round began with 2+ prompts prefilling"
OWN_TOKEN_STOP = "a stream was stopped by its own cancel token"
GAPS_CHECKED = "PREFILL-009 checked on a non-empty list of gaps"
FULL_LATER = "a round began with every lane decoding after the opening (a drawn program reached it)"
MACHINE_REACH: dict[str, int] = {}  # event -> examples (test cases) that reached it, over the whole run


@pytest.mark.falsifies(
    "FALSIFY-SERVE-PREFILL-008",
    "FALSIFY-SERVE-PREFILL-009",
    "FALSIFY-SERVE-PREFILL-010",
    "FALSIFY-SERVE-PREFILL-013",
    "FALSIFY-SERVE-PREFILL-014",
    "FALSIFY-SERVE-PREFILL-016",
)
def test_lane_host_state_machine(engine: Any, model: Any, alone: Any, request: pytest.FixtureRequest) -> None:
    # Three lanes and pages for all three at their largest (140 + 12 - 1 positions = 10 pages each), so that
    # every lane decoding at once is reachable; own-token budgets 0-8 below max_tokens up to 12 stop streams
    # mid-decode; the rounds rule runs up to 6 rounds so long prompts get through their chunks. Every program
    # opens at full capacity with a stream its own token stops, so the states the predictions are about are
    # reached in every example (asserted below), and the drawn program goes on from there.
    max_streams, pages = 3, 36
    MACHINE_REACH.clear()

    class LaneHostMachine(CancelAndLeave, RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.probe = LaneProbe(
                engine, model, chunk_cap=64, pages=pages, page_size=PAGE_SIZE, max_streams=max_streams
            )
            self.host = self.probe.host
            self.jobs: dict[int, tuple[list[int], int, int | None]] = {}
            self.waited: dict[int, int] = {}  # rounds a prefilling stream has gone without a chunk
            self.most_held = 0
            self.submitted = 0
            self.most_decoding = 0
            self.reached: set[str] = set()
            self.opening = True
            self.churned = False  # the last rule cancelled and resumed a prefilling stream beside another

        def phase(self, sid: int) -> str:
            return str(self.host.stats(sid).phase)

        def reach(self, what: str) -> None:
            event(what)
            self.reached.add(what)

        @initialize(
            jobs=st.lists(
                st.tuples(st.integers(1, 64), st.integers(8, 12), st.none() | st.integers(6, 8)),
                min_size=max_streams - 1,
                max_size=max_streams - 1,
            ),
            last=st.tuples(st.integers(1, 64), st.integers(2, 4)),
        )
        def fill_every_lane(self, jobs: list[tuple[int, int, int | None]], last: tuple[int, int]) -> None:
            """Start at full capacity: one-chunk prompts (every stream lives for at least 6 tokens but the last,
            whose own token stops it after 2-4), then rounds until one began with every lane decoding (the last
            prefill ends in round 3) and the last stream was stopped by its token (by round 7)."""
            for n, max_tokens, budget in jobs:
                self.submit(n, max_tokens, 0, budget)
            n, budget = last
            self.submit(n, 12, 0, budget)
            stopped = self.probe.tokens[max(self.probe.tokens)].answers
            for _ in range(4 * max_streams):
                if FULL_ROUND in self.reached and stopped and stopped[-1]:
                    break
                self.rounds(1)
            self.opening = False

        @rule(
            n=st.integers(1, 140),
            max_tokens=st.integers(1, 12),
            seed=st.integers(0, 2),
            budget=st.none() | st.integers(0, 8),
        )
        def submit(self, n: int, max_tokens: int, seed: int, budget: int | None) -> None:
            p = [self.submitted, *prompt_of(model, n - 1, seed)]  # the probe tells streams by first token
            self.submitted += 1
            try:
                sid = self.probe.submit(p, max_tokens, budget)
            except RuntimeError as refused:  # LaneRefused: a clear, named refusal
                assert type(refused).__name__ == "LaneRefused", refused
                return
            self.jobs[sid] = (p, max_tokens, budget)
            self.waited[sid] = 0
            self.most_held = max(self.most_held, sum(self.phase(s) != "done" for s in self.jobs))

        @rule(k=st.integers(1, 6))
        def rounds(self, k: int) -> None:
            for _ in range(k):
                report = self.probe.round()
                log = self.probe.rounds[-1]
                self.most_decoding = max(self.most_decoding, len(log.decoding))
                if len(log.decoding) == max_streams:
                    self.reach(FULL_ROUND if self.opening else FULL_LATER)
                if len(log.prefilling) >= 2:
                    self.reach(SEVERAL_PREFILLING)
                served = report.prefilled[0] if report.prefilled else None
                for sid in self.jobs:
                    if self.phase(sid) == "prefill":
                        self.waited[sid] = 0 if sid == served else self.waited[sid] + 1

        def leave_stream(self, sid: int) -> None:
            self.probe.leave(sid)  # the probe notes what the stream emitted, then the host lets it go

        @precondition(lambda self: any(self.phase(s) == "paused" for s in self.jobs))
        @rule(data=st.data())
        def resume(self, data: st.DataObject) -> None:
            sid = data.draw(st.sampled_from(sorted(s for s in self.jobs if self.phase(s) == "paused")))
            self.host.resume(sid)
            self.waited[sid] = 0

        @precondition(lambda self: any(self.phase(s) == "prefill" for s in self.jobs))
        @rule(data=st.data())
        def cancel_resume_round(self, data: st.DataObject) -> None:
            """cancel -> resume -> round on one prefilling stream: drawn repeatedly, consecutive rounds."""
            sid = data.draw(st.sampled_from(sorted(s for s in self.jobs if self.phase(s) == "prefill")))
            others = any(self.phase(s) == "prefill" for s in self.jobs if s != sid)
            self.host.cancel(sid)
            self.host.resume(sid)
            self.waited[sid] = 0
            self.rounds(1)
            self.churned = others

        @invariant()
        def pool_conserved(self) -> None:
            held = sum(self.host.stats(s).pages for s in self.jobs)
            falsify.check("FALSIFY-SERVE-PREFILL-008", lanes_held=held, **pool(self.host))

        @invariant()
        def no_starved_stream(self) -> None:
            gaps = [g for s in self.jobs for g in self.host.decode_gaps(s)]
            if not gaps:
                return  # nothing to judge yet; an empty list would be a vacuous check
            self.reach(GAPS_CHECKED)
            MACHINE_REACH["PREFILL-009 non-empty checks"] = (
                MACHINE_REACH.get("PREFILL-009 non-empty checks", 0) + 1
            )
            max_wait = max([self.waited[s] for s in self.jobs if self.phase(s) == "prefill"], default=0)
            churned, self.churned = self.churned, False
            falsify.check(
                "FALSIFY-SERVE-PREFILL-009",
                gaps=gaps,
                max_wait=max_wait,
                streams=max(self.most_held, 1),
                churned=churned,
            )

        @invariant()
        def tokens_and_forwards(self) -> None:
            for sid, (p, k, _) in self.jobs.items():
                m = self.probe.stream(sid)
                falsify.check(
                    "FALSIFY-SERVE-PREFILL-010",
                    shared_tokens=self.host.tokens(sid),
                    alone_tokens=alone(p, k),
                    emitted=m.emitted,
                    decode_forwards=m.decode_forwards,
                )

        @invariant()
        def own_tokens(self) -> None:
            for sid, (_, k, budget) in self.jobs.items():
                m = self.probe.stream(sid)
                observe("FALSIFY-SERVE-PREFILL-013", m, budget, k)
                answers = self.probe.tokens[sid].answers
                if budget is not None and answers and answers[-1]:  # stopped by its own token
                    self.reach(OWN_TOKEN_STOP)
                    bounds = {"max_tokens": k, "n": budget}
                    falsify.check(
                        "FALSIFY-SERVE-PREFILL-014", host_polls=m.host_polls, emitted=m.emitted, **bounds
                    )
                    falsify.check("FALSIFY-SERVE-PREFILL-016", wasted_forwards=m.wasted_forwards, n=budget)

        def teardown(self) -> None:
            target(float(self.most_decoding), label="most lanes decoding at a round's start")
            for what in self.reached:
                MACHINE_REACH[what] = MACHINE_REACH.get(what, 0) + 1

    examples = 16
    stats: dict[str, Any] = {}
    # The hook hypothesis' pytest plugin sets around @given tests, set here around the machine so that
    # --hypothesis-show-statistics prints its events and target for this (non-@given) test too.
    hook: Any = collector  # typed DynamicVariable[None]; the plugin sets a callback on it, as we do
    with hook.with_value(stats.update):
        run_state_machine_as_test(
            LaneHostMachine,
            settings=settings(
                max_examples=examples,
                stateful_step_count=30,
                deadline=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
    if stats:
        shown: Any = {**stats, "nodeid": request.node.nodeid}
        request.node.hypothesis_statistics = describe_statistics(shown)
    # The predictions' states were reached, not just allowed: each in at least a quarter of the examples.
    for what in (FULL_ROUND, SEVERAL_PREFILLING, OWN_TOKEN_STOP, GAPS_CHECKED):
        assert MACHINE_REACH.get(what, 0) >= examples // 4, (what, MACHINE_REACH)
    print(f"state machine reach over {examples} examples: {MACHINE_REACH}")


def round_judging_waits(
    host: Any, streams: list[int], prompts: list[int], waited: dict[int, int], **also: Any
) -> None:
    """One round, then FALSIFY-SERVE-PREFILL-009 on the host so far: each of PROMPTS still prefilling has waited one
    round more, unless the round served it; the decode gaps of STREAMS against the longest wait (ALSO: further
    observations)."""
    report = host.round()
    served = report.prefilled[0] if report.prefilled else None
    prefilling = [s for s in prompts if str(host.stats(s).phase) == "prefill"]
    for sid in prefilling:
        waited[sid] = 0 if sid == served else waited[sid] + 1
    gaps = [g for s in streams for g in host.decode_gaps(s)]
    if gaps:  # an empty list would be a vacuous check
        falsify.check(
            "FALSIFY-SERVE-PREFILL-009",
            gaps=gaps,
            max_wait=max([waited[s] for s in prefilling], default=0),
            streams=len(streams),
            **also,
        )


# Two prompts of three chunks each beside one decoding stream: the round-robin bound (max_wait < streams = 3) is
# tight here. The state machine's programs hold three streams with prompts of at most three chunks, where a host
# that lets the first prompt keep the prefill turn to its end still stayed within the bound (mutant
# prefill-keeps-its-turn survived it).
@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-009")
@pytest.mark.parametrize("seed", [0, 1])
def test_two_long_prompts_take_turns(engine: Any, model: Any, seed: int) -> None:
    host = engine.lane_host(model, chunk_cap=64, pages=36, page_size=PAGE_SIZE, max_streams=3)
    decoding = host.submit(prompt_of(model, 20, seed + 2), 12)
    host.round()
    prompts = [host.submit(prompt_of(model, 140 - 10 * i, seed + i), 3) for i in range(2)]
    streams = [decoding, *prompts]
    waited = dict.fromkeys(prompts, 0)
    while host.busy():
        round_judging_waits(host, streams, prompts, waited)


# cancel -> resume -> round on the same prefilling stream, round after round, beside another prompt and a decoding
# stream: the resumed stream rejoins the prefill queue at its back, so the other prompt is served every round. A
# host that puts it back at the head serves it every round instead, and the other prompt waits 3 rounds (= streams).
@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-009")
@pytest.mark.parametrize("seed", [0, 1])
def test_a_stream_cancelled_and_resumed_every_round_never_jumps_the_queue(
    engine: Any, model: Any, seed: int
) -> None:
    host = engine.lane_host(model, chunk_cap=64, pages=36, page_size=PAGE_SIZE, max_streams=3)
    decoding = host.submit(prompt_of(model, 20, seed + 2), 12)
    host.round()
    churn, other = (host.submit(prompt_of(model, n, seed + i), 3) for i, n in enumerate((250, 140)))
    streams = [decoding, churn, other]
    waited = {churn: 0, other: 0}

    def prefilling() -> list[int]:
        return [s for s in (churn, other) if str(host.stats(s).phase) == "prefill"]

    for _ in range(40):
        if not host.busy():
            break
        churned = prefilling() == [churn, other]
        if churned:
            host.cancel(churn)
            host.resume(churn)
            waited[churn] = 0  # a resumed stream waits from its resume, as a new arrival
        round_judging_waits(host, streams, [churn, other], waited, churned=churned)
