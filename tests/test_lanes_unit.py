"""Unit tests of the lane host's scheduling on a toy model whose state depends on where forward calls are cut.

The toy keeps the real model's interface (config, new_pool, new_state, forward over internal chunks of
chunk_size aligned to the call's first token) and uses the real PagePool/StreamState, but runs in
microseconds, so the scheduling logic can be exercised over many rounds and streams. The contract's falsifiers
run the real model.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from falsify.packs.serving.falsifiers.lane_probe import CancelAndLeave
from reference.cancel import CancelToken
from reference.lanes import LaneHost, LaneRefused, Phase, StreamError
from reference.prefill import Prefill, PrefillError
from reference.state import PagePool, StreamState


@dataclass(frozen=True)
class ToyConfig:
    vocab_size: int = 37
    chunk_size: int = 4
    max_position_embeddings: int = 512


class Toy:
    """A recurrence updated once per internal chunk: cutting a call off the chunk grid changes the state."""

    config = ToyConfig()

    def new_pool(self, pages: int, page_size: int) -> PagePool:
        return PagePool(pages, page_size, 1, 1, 2)

    def new_state(self, pool: PagePool | None = None) -> StreamState:
        pool = pool if pool is not None else PagePool(4, 8, 1, 1, 2, growable=True)
        return StreamState(pool, [np.zeros((2, 3), np.float32)], [np.zeros((1, 2, 2), np.float32)])

    def forward(self, tokens: np.ndarray, state: StreamState) -> np.ndarray:  # [T] -> [T, vocab]
        tokens = np.asarray(tokens)
        state.reserve(state.pos + len(tokens))
        rows = []
        for s in range(0, len(tokens), self.config.chunk_size):
            x = (tokens[s : s + self.config.chunk_size].astype(np.float32) + 1) / np.float32(7)  # [C]
            kv = np.stack([x, x * x], -1)[:, None, :]  # [C, 1, 2]
            state.write_kv(0, state.pos, kv, -kv)
            state.conv[0] = np.concatenate([state.conv[0], np.stack([x, -x])], 1)[:, -3:]
            state.recurrent[0] = state.recurrent[0] * np.float32(0.5) ** len(x) + np.float32(x.sum())
            state.pos += len(x)
            h = state.recurrent[0].sum() + state.conv[0].sum()
            for xi in x:
                rows.append(np.cos(np.arange(self.config.vocab_size, dtype=np.float32) * (h + xi)))
        return np.stack(rows).astype(np.float32)


def alone(model: Toy, prompt: list[int], max_tokens: int) -> list[int]:
    host = LaneHost(model, pages=64, page_size=8)
    sid = host.submit(prompt, max_tokens)
    host.run()
    return host.tokens(sid)


def prompt_of(n: int, seed: int = 0) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, Toy.config.vocab_size, n)]


def test_toy_is_cut_sensitive() -> None:
    """The toy only tests cut handling if a cut off the grid changes its state; check that it does."""
    m = Toy()
    p = prompt_of(10)
    one, split = m.new_state(), m.new_state()
    m.forward(np.array(p), one)
    m.forward(np.array(p[:3]), split)
    m.forward(np.array(p[3:]), split)
    assert one.to_bytes() != split.to_bytes()
    aligned = m.new_state()
    m.forward(np.array(p[:4]), aligned)
    m.forward(np.array(p[4:]), aligned)
    assert one.to_bytes() == aligned.to_bytes()


def test_stepped_prefill_equals_one_call() -> None:
    m = Toy()
    p = prompt_of(23, 1)
    one = m.new_state()
    want = m.forward(np.array(p), one)
    pf = Prefill.open(m, m.new_state(), p, chunk_cap=8, keep_logits=True)
    assert pf.cuts == (8, 16, 23)
    steps = 0
    while not pf.step():
        steps += 1
    assert steps == 2 and pf.chunk_logits is not None
    np.testing.assert_array_equal(np.concatenate(pf.chunk_logits), want)
    assert pf.state.to_bytes() == one.to_bytes()


def test_chunk_cap_off_grid_is_refused() -> None:
    with pytest.raises(PrefillError, match="not a multiple of the model's chunk_size 4"):
        LaneHost(Toy(), chunk_cap=6)


def test_other_stream_waits_at_most_one_chunk() -> None:
    m = Toy()
    host = LaneHost(m, chunk_cap=4, pages=64, page_size=8)
    b = host.submit(prompt_of(5, 2), 30)
    while not host.tokens(b):
        host.round()
    a = host.submit(prompt_of(60, 3), 3)
    reports = [host.round() for _ in range(20)]
    assert all(r.prefilled is None or r.prefilled[2] - r.prefilled[1] <= 4 for r in reports)
    assert [r.prefilled[0] for r in reports[:15] if r.prefilled] == [a] * 15
    assert all(b in r.emitted for r in reports)
    assert set(host.decode_gaps(b)) == {1}


def test_round_robin_among_prefilling_streams() -> None:
    host = LaneHost(Toy(), chunk_cap=4, pages=64, page_size=8)
    ids = [host.submit(prompt_of(12, s), 1) for s in range(3)]
    owners = [host.round().prefilled[0] for _ in range(9)]  # type: ignore[index]
    assert owners == ids * 3
    assert not host.busy()


def test_tokens_in_shared_host_equal_alone() -> None:
    m = Toy()
    jobs = [(prompt_of(n, n), k) for n, k in ((9, 7), (30, 4), (3, 12), (17, 1))]
    host = LaneHost(m, chunk_cap=8, pages=64, page_size=8)
    ids = [host.submit(p, k) for p, k in jobs]
    host.run()
    for sid, (p, k) in zip(ids, jobs, strict=True):
        assert host.tokens(sid) == alone(m, p, k)
        st_ = host.stats(sid)
        assert st_.phase is Phase.DONE and st_.decode_forwards == k - 1 and st_.emitted == k
    assert host.pool() == (64, 0, 64)


def test_cancel_mid_prefill_pauses_at_last_cut_and_resume_matches() -> None:
    m = Toy()
    p = prompt_of(27, 5)
    host = LaneHost(m, chunk_cap=8, pages=64, page_size=8)
    sid = host.submit(p, 5)
    host.round()
    host.round()
    host.cancel(sid)
    assert host.stats(sid).phase is Phase.PAUSED and host.stats(sid).pos == 16
    ref = m.new_state()
    m.forward(np.array(p[:16]), ref)
    assert host.state_bytes(sid) == ref.to_bytes()
    assert not host.busy()
    host.round()
    assert host.stats(sid).pos == 16
    host.resume(sid)
    assert host.stats(sid).phase is Phase.PREFILL and host.busy()  # queued again, not only planned again
    host.run()
    assert host.tokens(sid) == alone(m, p, 5)


def test_leave_returns_pages_and_refusals_are_named() -> None:
    host = LaneHost(Toy(), chunk_cap=4, pages=8, page_size=8, max_streams=2)
    a = host.submit(prompt_of(20, 1), 10)  # 29 positions: 4 pages
    assert host.pool() == (4, 4, 8)
    with pytest.raises(LaneRefused, match="need 5 pages of 8 tokens; 4 of 8 are free"):
        host.submit(prompt_of(30, 1), 10)
    assert host.pool() == (4, 4, 8)
    b = host.submit(prompt_of(3, 1), 2)
    with pytest.raises(LaneRefused, match="all 2 lanes are held"):
        host.submit(prompt_of(3, 1), 2)
    host.round()
    host.leave(a)
    assert host.pool() == (7, 1, 8)
    with pytest.raises(StreamError, match="no stream 0"):
        host.tokens(a)
    host.run()
    assert host.pool() == (8, 0, 8) and len(host.tokens(b)) == 2


def test_bad_submits_are_refused_before_any_page_is_taken() -> None:
    host = LaneHost(Toy(), chunk_cap=4, pages=8, page_size=8)
    with pytest.raises(PrefillError, match=r"prompt\[1\] = 99 is outside the vocabulary \[0, 37\)"):
        host.submit([1, 99], 3)
    with pytest.raises(PrefillError, match=r"^prompt is empty: a prefill needs at least one token$"):
        host.submit([], 3)
    with pytest.raises(ValueError, match="max_tokens must be an int >= 1, got 0"):
        host.submit([1], 0)
    with pytest.raises(LaneRefused, match="need 600 positions; the model has 512"):
        host.submit([1] * 500, 101)
    assert host.pool() == (8, 0, 8) and host.streams() == ()


def test_cancel_token_polled_once_per_token() -> None:
    m = Toy()
    host = LaneHost(m, chunk_cap=4, pages=64, page_size=8)
    token = CancelToken.with_budget(3)
    sid = host.submit(prompt_of(13, 4), 10, cancel=token)
    host.run()
    assert host.tokens(sid) == alone(m, prompt_of(13, 4), 10)[:3]
    assert token.polls == 4 and host.stats(sid).decode_forwards == 2
    zero = host.submit(prompt_of(13, 4), 10, cancel=CancelToken.with_budget(0))
    host.run()
    assert host.tokens(zero) == [] and host.stats(zero).prefill_chunks == 0


class LaneMachine(CancelAndLeave, RuleBasedStateMachine):
    """submit / round / cancel / leave / resume against the toy; failures print as a replayable program."""

    def __init__(self) -> None:
        super().__init__()
        self.model = Toy()
        self.host = LaneHost(self.model, chunk_cap=4, pages=24, page_size=8, max_streams=4)
        self.jobs: dict[int, tuple[list[int], int]] = {}
        self.waited: dict[int, int] = {}  # rounds a queued prefilling stream has gone without a chunk

    @rule(n=st.integers(1, 40), max_tokens=st.integers(1, 8), seed=st.integers(0, 3))
    def submit(self, n: int, max_tokens: int, seed: int) -> None:
        p = prompt_of(n, seed)
        free_before = self.host.pool()
        try:
            sid = self.host.submit(p, max_tokens)
        except LaneRefused:
            assert self.host.pool() == free_before
            return
        self.jobs[sid] = (p, max_tokens)
        self.waited[sid] = 0

    @rule()
    def round(self) -> None:
        report = self.host.round()
        for sid in self.jobs:
            if self.host.stats(sid).phase is Phase.PREFILL:
                served = report.prefilled is not None and report.prefilled[0] == sid
                self.waited[sid] = 0 if served else self.waited[sid] + 1

    @rule()
    def resume(self) -> None:
        for sid in self.jobs:
            if self.host.stats(sid).phase is Phase.PAUSED:
                self.host.resume(sid)
                self.waited[sid] = 0
                return

    @invariant()
    def pool_conserved(self) -> None:
        free, used, total = self.host.pool()
        assert free + used == total == 24
        assert used == sum(self.host.stats(s).pages for s in self.jobs)
        for sid, (p, k) in self.jobs.items():
            if self.host.stats(sid).phase is not Phase.DONE:
                assert self.host.stats(sid).pages == -(-(len(p) + k - 1) // 8)

    @invariant()
    def no_starved_stream(self) -> None:
        # round-robin: a queued stream has at most every other lane ahead of it
        for sid in self.jobs:
            if self.host.stats(sid).phase is Phase.PREFILL:
                assert self.waited[sid] < self.host.max_streams
        for sid in self.jobs:
            assert set(self.host.decode_gaps(sid)) <= {1}

    @invariant()
    def tokens_as_alone_and_forwards_counted(self) -> None:
        for sid, (p, k) in self.jobs.items():
            stats = self.host.stats(sid)
            want = alone(self.model, p, k)
            assert self.host.tokens(sid) == want[: stats.emitted]
            if stats.emitted:
                assert stats.decode_forwards == stats.emitted - 1


TestLaneMachine = LaneMachine.TestCase
TestLaneMachine.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_state_digest_and_bytes_before_and_after_release() -> None:
    host = LaneHost(Toy(), chunk_cap=4, pages=8, page_size=8, max_streams=2)
    a = host.submit(prompt_of(6, 2), 3)
    host.round()
    live = host.state_bytes(a)
    assert host.state_digest(a) == hashlib.sha256(live).hexdigest()
    host.run()
    assert host.stats(a).phase is Phase.DONE
    # The digest outlives the lane: it is the released state's, kept when the lane was freed.
    done = host.state_digest(a)
    assert len(done) == 64 and done != hashlib.sha256(live).hexdigest()
    with pytest.raises(StreamError, match="state_bytes: stream 0 is done; its lane was released"):
        host.state_bytes(a)


def test_round_reports_name_each_stream_and_the_counters_count() -> None:
    """Two streams, traced round by round: which streams decoded, which prefilled (stream, start, end), which
    emitted and which finished; then the per-stream counters and the rounds run() reports."""
    host = LaneHost(Toy(), chunk_cap=4, pages=64, page_size=8)
    a = host.submit(prompt_of(6, 1), 2)  # two chunks: 0-4, 4-6
    b = host.submit(prompt_of(3, 2), 3)  # one chunk: 0-3
    assert (a, b) == (0, 1) and host.rounds == 0
    reports = [host.round() for _ in range(4)]
    assert [(r.round, r.decoded, r.prefilled, r.emitted, r.finished) for r in reports] == [
        (1, (), (a, 0, 4), (), ()),
        (2, (), (b, 0, 3), (b,), ()),
        (3, (b,), (a, 4, 6), (b, a), ()),
        (4, (a, b), None, (a, b), (a, b)),  # decode in submission order
    ]
    counters = {s: (host.stats(s).prefill_chunks, host.stats(s).decode_forwards) for s in (a, b)}
    assert counters == {a: (2, 1), b: (1, 2)}
    assert not host.busy() and host.run() == 0 and host.rounds == 4
    c = host.submit(prompt_of(9, 3), 4)
    assert c == 2
    assert host.run(max_rounds=2) == 2 and host.busy() and host.stats(c).prefill_chunks == 2
    assert host.run() == 4 and host.stats(c).phase is Phase.DONE and len(host.tokens(c)) == 4


def test_a_resumed_stream_keeps_the_hosts_chunk_cap() -> None:
    host = LaneHost(Toy(), chunk_cap=8, pages=64, page_size=8)
    sid = host.submit(prompt_of(40, 6), 1)
    host.round()
    host.cancel(sid)
    host.resume(sid)
    assert [host.round().prefilled for _ in range(4)] == [
        (sid, 8, 16),
        (sid, 16, 24),
        (sid, 24, 32),
        (sid, 32, 40),
    ]
    with pytest.raises(StreamError, match=rf"^resume: stream {sid} is {Phase.DONE}, not paused$"):
        host.resume(sid)


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "8"])
def test_max_streams_must_be_an_int_of_at_least_one(bad: object) -> None:
    with pytest.raises(
        ValueError, match=rf"^LaneHost: max_streams must be an int >= 1, got {re.escape(repr(bad))}$"
    ):
        LaneHost(Toy(), max_streams=bad)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=rf"^submit: max_tokens must be an int >= 1, got {re.escape(repr(bad))}$"
    ):
        LaneHost(Toy()).submit([1], bad)  # type: ignore[arg-type]


def test_the_defaults_one_lane_and_the_exact_limits_are_admitted() -> None:
    host = LaneHost(Toy(), max_streams=1)
    assert host.pool() == (256, 0, 256) and host.max_streams == 1 and host.chunk_cap == 4
    sid = host.submit(prompt_of(400, 7), 113)  # 512 positions: the model's whole context, 32 pages of 16
    assert host.pool() == (224, 32, 256) and host.stats(sid).pages == 32
    host.leave(sid)
    small = LaneHost(Toy(), chunk_cap=4, pages=2, page_size=8)
    small.submit(prompt_of(10, 8), 7)  # 16 positions: exactly the 2 free pages
    assert small.pool() == (0, 2, 2)
