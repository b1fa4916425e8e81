"""Every claim the wire can check is checked (issue #48, Build 4), fuzzed against the reference server (protocol 1.2,
a real child process): drawn lane workloads (prompt lengths, max_tokens, cancel budgets, lane_cancel at a drawn
round) pass every check when the engine tells the truth, and one drawn lie about a drawn reply (a stream added to
or dropped from `finished`, a stream's phase, emitted count or pages, the pool's total, a lane digest; a token id
past the vocabulary in a generate's result) is a ProtocolViolation naming its rule. The lie is made where the reply
arrives (Connection.request), as an engine that lies would send it."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from falsify.engines.cancel import HarnessCancel
from falsify.engines.wire.client import WireEngine
from falsify.engines.wire.errors import ProtocolViolation

SPEC = f"exec:{sys.executable} -m reference.serve"

streams = st.lists(
    st.tuples(st.integers(1, 150), st.integers(1, 6), st.one_of(st.none(), st.integers(0, 6))),
    min_size=1,
    max_size=4,
)
workloads = st.tuples(streams, st.one_of(st.none(), st.tuples(st.integers(0, 3), st.integers(0, 4))))


def run(engine: WireEngine, workload: tuple[list[tuple[int, int, int | None]], Any]) -> None:
    """The workload on a fresh host: submit, round until idle (a lane_cancel at the drawn round), then read every
    stream's status and digest; then one generate."""
    jobs, cancel_at = workload
    model = engine.load_model("f32")
    host = engine.lane_host(model, chunk_cap=64, pages=256, page_size=16)
    ids = []
    for n, (length, max_tokens, budget) in enumerate(jobs):
        token = None if budget is None else HarnessCancel.with_budget(budget)
        ids.append(host.submit([(7 * n + i) % 500 + 3 for i in range(length)], max_tokens, cancel=token))
    rounds = 0
    while host.busy() and rounds < 400:
        if cancel_at is not None and rounds == cancel_at[0]:
            host.cancel(ids[cancel_at[1] % len(ids)])
        host.round()
        rounds += 1
    for sid in ids:
        host.stats(sid)
        host.state_digest(sid)
    host.release()
    engine.session(model).generate([5, 6, 7], 2)


@pytest.fixture(scope="module")
def honest() -> Iterator[WireEngine]:
    engine = WireEngine(SPEC)
    yield engine
    engine.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workload=workloads)
def test_an_honest_engine_passes_every_check(honest: WireEngine, alarm: None, workload: Any) -> None:
    signal.alarm(60)
    run(honest, workload)
    signal.alarm(0)


LIES = ["finished-add", "finished-drop", "phase", "emitted", "pages", "total", "digest", "token"]


def lie(kind: str, method: str, result: dict[str, Any]) -> dict[str, Any] | None:
    """`result` with the lie `kind` told about it, or None when this reply cannot carry it."""
    if kind == "finished-add" and method == "lane_round" and result["emitted"]:
        extra = [s for s in result["emitted"] if s not in result["finished"]]
        return {**result, "finished": [*result["finished"], extra[0]]} if extra else None
    if kind == "finished-drop" and method == "lane_round" and result["finished"]:
        return {**result, "finished": result["finished"][1:]}
    if method == "lane_status" and result["streams"] and kind in ("phase", "emitted", "pages"):
        first = dict(result["streams"][0])
        if kind == "phase":
            first["phase"] = {"done": "decode", "decode": "done", "prefill": "done", "paused": "decode"}[
                first["phase"]
            ]
        elif kind == "emitted":
            first["emitted"] += 1
        elif first["phase"] == "done":
            first["pages"] += 1
        else:
            return None
        return {**result, "streams": [first, *result["streams"][1:]]}
    if kind == "total" and method == "lane_status":
        pool = result["pool"]
        return {**result, "pool": {**pool, "total": pool["total"] + 1}}
    if kind == "digest" and method == "lane_digest":
        digest = result["digest"]
        return {**result, "digest": ("0" if digest[0] != "0" else "1") + digest[1:]}
    if kind == "token" and method == "generate" and result["tokens"]:
        return {**result, "tokens": [*result["tokens"][:-1], 512 + result["tokens"][-1]]}
    return None


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workload=workloads, kind=st.sampled_from(LIES), at=st.integers(0, 3))
def test_a_lie_the_wire_can_check_is_refused_by_its_rule(
    alarm: None, workload: Any, kind: str, at: int
) -> None:
    """The reply after the first `at` that could carry the lie carries it (a case with fewer is discarded)."""
    engine = WireEngine(SPEC)
    told: list[str] = []
    try:
        conn = engine.connection()
        honest_request = conn.request
        chances: list[int] = [0]

        def lying(method: str, params: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
            result = honest_request(method, params, *args, **kwargs)
            lied = lie(kind, method, result)
            if lied is None or told:
                return result
            chances[0] += 1
            if chances[0] <= at and method != "generate":  # a generate's result: its one chance
                return result
            told.append(method)
            return lied

        conn.request = lying  # type: ignore[method-assign]
        signal.alarm(60)
        try:
            run(engine, workload)
        except ProtocolViolation as exc:
            assert told and "[rule: " in str(exc), (kind, told, exc)
            return
        finally:
            signal.alarm(0)
        assert not told, f"the lie {kind} in {told[0]} was taken"
        assume(False)  # the workload had fewer than `at` replies that could carry this lie: no lie told
    finally:
        engine.close()
