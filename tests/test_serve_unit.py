"""reference/serve.py in process: the engine's side of the wire protocol (docs/engine-protocol.md), driven by
a recording `Link` (the harness's other side), over stdio pipes in a thread, and over HTTP on 127.0.0.1 with the
harness's own client (falsify.engines.wire). What the engine answers is compared with the in-process reference
(Session, Prefill, model.forward on the same tiny model): tokens, logits and state bytes bit for bit, and every
event the harness would see, in order. These run in the pytest process so that `falsify mutmut` sees them."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import queue
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from falsify.engines.cancel import HarnessCancel
from falsify.engines.wire.client import WireConfig, WireEngine
from falsify.engines.wire.messages import decode_f32
from reference.cancel import CancelToken
from reference.model import load_model
from reference.prefill import Prefill
from reference.sampling import greedy
from reference.serve import (
    INTERNAL_ERROR,
    INVALID_INPUT,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PROTOCOL_VERSION,
    SERVER_NOT_INITIALIZED,
    UNKNOWN_HANDLE,
    UNSUPPORTED_PROTOCOL_VERSION,
    Engine,
    HttpLink,
    Link,
    Refusal,
    StdioLink,
    _answer,
    _classify,
    _dump,
    _f32,
    _Handler,
    _ids,
    _need,
    _Poll,
    _Reporting,
    _Server,
    main,
    serve_stdio,
)
from reference.session import Session
from reference.tiny import tiny_model

PROMPT = [17, 3, 250, 99, 4, 511, 0]  # 7 tokens: an odd length
WAIT = (
    5.0  # seconds a test waits for a thread or a reply (each takes milliseconds): a hang fails, never sticks
)


@pytest.fixture(scope="module")
def f32() -> Any:
    return load_model(tiny_model(seed=0), weights="f32")


def argmin(logits: np.ndarray) -> int:  # a harness sampler that greedy decoding would never match
    return int(np.argmin(logits))


class Recorder(Link):
    """The harness's side while the engine serves a request: answers `$/poll` from a budget (None: never
    cancel) and `$/sample` with `pick`, and records every message in order. `watch()`, read when a forward is
    reported, gives the engine state's position at that moment (a forward is reported before it runs)."""

    def __init__(
        self,
        budget: int | None = None,
        pick: Callable[[np.ndarray], int] | None = None,
        watch: Callable[[], int] | None = None,
    ) -> None:
        self.budget, self.pick, self.watch = budget, pick, watch
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.sampled: list[np.ndarray] = []
        self.pos_at_report: list[int] = []
        self.polls = 0

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.events.append((method, json.loads(json.dumps(params))))  # as it would cross the wire
        if method == "$/forward" and self.watch is not None:
            self.pos_at_report.append(self.watch())

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "$/poll":
            self.events.append((method, json.loads(json.dumps(params))))
            self.polls += 1
            return {"cancelled": self.budget is not None and self.polls > self.budget}
        if method == "$/sample":
            assert sorted(params) == ["logits", "request"]
            self.events.append((method, {"request": params["request"]}))
            logits = decode_f32(params["logits"], "$/sample logits")
            self.sampled.append(logits)
            return {"token": (self.pick or greedy)(logits)}
        raise AssertionError(f"the engine asked the harness for {method}")


def ready() -> Engine:
    engine = Engine()
    assert engine.serve("initialize", {"protocolVersion": PROTOCOL_VERSION}, 1, Recorder())
    return engine


def refusal(engine: Engine, method: str, params: dict[str, Any], link: Link | None = None) -> Refusal:
    with pytest.raises(Refusal) as info:
        engine.serve(method, params, 9, link or Recorder())
    return info.value


def loaded(weights: str = "f32") -> tuple[Engine, str]:
    engine = ready()
    return engine, engine.serve("load_model", {"weights": weights, "path": None}, 2, Recorder())["model"]


# -- lifecycle and dispatch ----------------------------------------------------------------------------------------
def test_a_fresh_engine_is_not_initialized_and_holds_nothing() -> None:
    engine = Engine()
    assert engine.initialized is False and engine.shut_down is False and engine.handles == {}


def test_initialize_answers_the_version_the_name_and_the_capabilities() -> None:
    engine = Engine()
    assert engine.version == PROTOCOL_VERSION == "falsify-engine/1.2"
    result = engine.serve("initialize", {"protocolVersion": "falsify-engine/1", "harness": {}}, 1, Recorder())
    assert result == {
        "protocolVersion": "falsify-engine/1",
        "engine": {"name": "reference", "version": "0.1.0"},
        "capabilities": ["generate", "state", "prefill"],
    }
    assert engine.initialized is True and engine.version == "falsify-engine/1"


@pytest.mark.parametrize("version", ["falsify-engine/1.1", "falsify-engine/1.2"])
def test_initialize_with_1_1_or_later_adds_lanes_and_sample(version: str) -> None:
    """1.2 names the capabilities of 1.1: what it adds (sample_draws) is served, not announced."""
    engine = Engine()
    result = engine.serve("initialize", {"protocolVersion": version}, 1, Recorder())
    assert result == {
        "protocolVersion": version,
        "engine": {"name": "reference", "version": "0.1.0"},
        "capabilities": ["generate", "state", "prefill", "lanes", "sample"],
    }
    assert engine.initialized is True and engine.version == version


def _initialized(version: str) -> Engine:
    engine = Engine()
    engine.serve("initialize", {"protocolVersion": version}, 1, Recorder())
    return engine


def test_sample_draws_is_served_under_1_2_only_and_answers_the_single_draws() -> None:
    logits = _f32(np.array([0.5, 2.0, 2.0, 1.0, -1.0], np.float32))
    params = {"temperature": 1.5, "top_k": None, "top_p": None, "seed": 3}
    engine = ready()
    batched = engine.serve("new_sampler", params, 2, Recorder())["sampler"]
    single = engine.serve("new_sampler", params, 3, Recorder())["sampler"]
    tokens = engine.serve("sample_draws", {"sampler": batched, "logits": logits, "count": 40}, 4, Recorder())
    singles = [
        engine.serve("sample_draw", {"sampler": single, "logits": logits}, 5 + i, Recorder())["token"]
        for i in range(40)
    ]
    assert tokens == {"tokens": singles} and len(set(singles)) >= 3, singles
    one = engine.serve("sample_draws", {"sampler": batched, "logits": logits, "count": 1}, 50, Recorder())
    assert one == {
        "tokens": [
            engine.serve("sample_draw", {"sampler": single, "logits": logits}, 51, Recorder())["token"]
        ]
    }
    for version in ("falsify-engine/1.1", "falsify-engine/1"):
        r = refusal(_initialized(version), "sample_draws", {"sampler": batched, "logits": logits, "count": 2})
        assert (r.code, str(r)) == (METHOD_NOT_FOUND, "no method 'sample_draws'"), version
    assert _initialized("falsify-engine/1.1").serve("greedy_pick", {"logits": logits}, 2, Recorder()) == {
        "token": 1
    }


@pytest.mark.parametrize("count", [0, -1, 65537, 2.0, True, None])
def test_sample_draws_refuses_a_count_outside_its_schema(count: object) -> None:
    engine = ready()
    handle = engine.serve(
        "new_sampler", {"temperature": 1.0, "top_k": None, "top_p": None, "seed": 0}, 2, Recorder()
    )
    logits = _f32(np.array([0.0, 1.0], np.float32))
    r = refusal(engine, "sample_draws", {"sampler": handle["sampler"], "logits": logits, "count": count})
    assert r.code == INVALID_PARAMS and "params.count" in str(r), str(r)


def test_sample_draws_answers_its_largest_count() -> None:
    engine = ready()
    handle = engine.serve(
        "new_sampler", {"temperature": 1.0, "top_k": None, "top_p": None, "seed": 0}, 2, Recorder()
    )
    logits = _f32(np.array([0.0, 1.0], np.float32))
    got = engine.serve(
        "sample_draws", {"sampler": handle["sampler"], "logits": logits, "count": 65536}, 3, Recorder()
    )
    assert len(got["tokens"]) == 65536 and set(got["tokens"]) == {0, 1}


def test_a_1_1_request_is_served_under_1_1_and_not_found_under_1() -> None:
    logits = _f32(np.array([0.0, 2.0, 2.0, 1.0], np.float32))
    engine = ready()
    assert engine.serve("greedy_pick", {"logits": logits}, 2, Recorder()) == {"token": 1}
    old = Engine()
    old.serve("initialize", {"protocolVersion": "falsify-engine/1"}, 1, Recorder())
    r = refusal(old, "greedy_pick", {"logits": logits})
    assert (r.code, str(r)) == (METHOD_NOT_FOUND, "no method 'greedy_pick'")
    r = refusal(engine, "no_such_1_1_method", {})
    assert (r.code, str(r)) == (METHOD_NOT_FOUND, "no method 'no_such_1_1_method'")
    r = refusal(engine, "$/greedy_pick", {})
    assert (r.code, str(r)) == (METHOD_NOT_FOUND, "no method '$/greedy_pick'")


def test_a_1_1_request_reaches_the_engines_own_handles() -> None:
    engine, model = loaded()
    host = engine.serve("lane_host", {"model": model}, 3, Recorder())["host"]
    assert engine.serve("lane_status", {"host": host}, 4, Recorder())["streams"] == []


def test_a_1_1_refusal_is_the_servers_own_refusal() -> None:
    engine = ready()
    r = refusal(engine, "greedy_pick", {"logits": {"dtype": "float16"}})
    assert (r.code, str(r)) == (INVALID_PARAMS, "params.logits: expected a float32 array object")
    r = refusal(engine, "new_sampler", {"temperature": "NaN", "top_k": None, "top_p": None, "seed": 0})
    assert r.code == INVALID_INPUT and "temperature" in str(r)


def test_another_protocol_version_is_refused_and_leaves_the_engine_uninitialized() -> None:
    engine = Engine()
    r = refusal(engine, "initialize", {"protocolVersion": "falsify-engine/2"})
    assert (r.code, str(r)) == (
        UNSUPPORTED_PROTOCOL_VERSION,
        "this engine speaks falsify-engine/1 and falsify-engine/1.1 and falsify-engine/1.2, not falsify-engine/2",
    )
    assert engine.initialized is False
    r = refusal(engine, "initialize", {"protocolVersion": 1})
    assert (r.code, str(r)) == (INVALID_PARAMS, "params.protocolVersion: expected str, got 1")


def test_a_request_before_initialize_is_refused() -> None:
    engine = Engine()
    r = refusal(engine, "load_model", {"weights": "f32"})
    assert (r.code, str(r)) == (SERVER_NOT_INITIALIZED, "load_model before initialize")
    assert engine.handles == {}


def test_shutdown_answers_empty_and_every_later_request_is_refused() -> None:
    engine = ready()
    assert engine.serve("shutdown", {}, 2, Recorder()) == {}
    assert engine.shut_down is True
    r = refusal(engine, "load_model", {"weights": "f32"})
    assert (r.code, str(r)) == (INVALID_REQUEST, "load_model after shutdown")
    assert engine.handles == {}


@pytest.mark.parametrize("method", ["no_such_method", "$/poll", "load-model", "__init__", "serve"])
def test_an_unknown_method_is_method_not_found(method: str) -> None:
    r = refusal(ready(), method, {})
    assert (r.code, str(r)) == (METHOD_NOT_FOUND, f"no method {method!r}")


@pytest.mark.parametrize("tokens", [[1, 512], [1, 2**64], [-(2**63) - 1]])  # past the vocabulary, past int64
def test_a_value_error_of_the_reference_is_invalid_input_without_its_traceback(
    f32: Any, tokens: list[int]
) -> None:
    engine, _model = loaded()
    state = engine.serve("new_state", {"model": "model-1"}, 3, Recorder())["state"]
    with pytest.raises(ValueError) as local:
        f32.forward(tokens, f32.new_state())
    r = refusal(engine, "forward", {"state": state, "tokens": tokens})
    assert (r.code, str(r)) == (INVALID_INPUT, str(local.value))
    assert r.__cause__ is None and r.__suppress_context__
    assert engine.serve("state_digest", {"state": state}, 5, Recorder())["pos"] == 0


# -- _need, _ids, _get ---------------------------------------------------------------------------------------------
def test_need_returns_the_value_of_the_kind_asked() -> None:
    assert _need({"n": 3}, "n", int) == 3
    assert _need({"s": "x"}, "s", str) == "x"
    assert _need({"b": True}, "b", bool) is True
    assert _need({"k": "y"}, "k", (int, str)) == "y"


@pytest.mark.parametrize(
    ("params", "kind", "message"),
    [
        ({"n": True}, int, "params.n: expected int, got True"),  # bool is not an int here
        ({"n": "3"}, int, "params.n: expected int, got '3'"),
        ({}, str, "params.n: expected str, got None"),
        ({"n": 1}, bool, "params.n: expected bool, got 1"),
        ({"n": 1.5}, (int, str), "params.n: expected (<class 'int'>, <class 'str'>), got 1.5"),
    ],
)
def test_need_refuses_another_kind_naming_the_key(params: dict[str, Any], kind: Any, message: str) -> None:
    with pytest.raises(Refusal) as info:
        _need(params, "n", kind)
    assert (info.value.code, str(info.value)) == (INVALID_PARAMS, message)


def test_ids_takes_a_list_of_ints_only() -> None:
    assert _ids({"t": [0, 5, 511]}, "t") == [0, 5, 511]
    assert _ids({"t": []}, "t") == []
    for bad in ([1, True], [1, 2.0], ["1"]):
        with pytest.raises(Refusal) as info:
            _ids({"t": bad}, "t")
        assert (info.value.code, str(info.value)) == (
            INVALID_PARAMS,
            "params.t: expected an array of integers",
        )
    with pytest.raises(Refusal) as info:
        _ids({"t": "ab"}, "t")
    assert str(info.value) == "params.t: expected list, got 'ab'"


def test_a_handle_of_another_kind_or_unknown_is_unknown_handle() -> None:
    engine, model = loaded()
    session = engine.serve("new_session", {"model": model}, 3, Recorder())["session"]
    state = engine.serve("new_state", {"model": model}, 4, Recorder())["state"]
    assert (model, session, state) == ("model-1", "session-2", "state-3")
    cases = [
        ("new_session", {"model": session}, "params.model: no model 'session-2'"),
        ("new_session", {"model": "model-9"}, "params.model: no model 'model-9'"),
        ("new_state", {"model": state}, "params.model: no model 'state-3'"),
        ("forward", {"state": model, "tokens": [1]}, "params.state: no state 'model-1'"),
        ("release_session", {"session": state}, "params.session: no session 'state-3'"),
        ("state_bytes", {"state": "state-4"}, "params.state: no state 'state-4'"),
        ("prefill_step", {"prefill": state}, "params.prefill: no prefill 'state-3'"),
    ]
    for method, params, message in cases:
        r = refusal(engine, method, params)
        assert (r.code, str(r)) == (UNKNOWN_HANDLE, message), method
    r = refusal(engine, "new_session", {"model": 1})
    assert (r.code, str(r)) == (INVALID_PARAMS, "params.model: expected str, got 1")
    assert sorted(engine.handles) == ["model-1", "session-2", "state-3"]


# -- load_model ----------------------------------------------------------------------------------------------------
def test_load_model_f32_and_q4_k_are_the_in_process_models(f32: Any) -> None:
    engine = ready()
    config = {"vocab_size": 512, "max_position_embeddings": 16384, "chunk_size": 64}
    assert engine.serve("load_model", {"weights": "f32", "path": None}, 2, Recorder()) == {
        "model": "model-1",
        "config": config,
    }
    assert engine.serve("load_model", {"weights": "q4_k"}, 3, Recorder()) == {
        "model": "model-2",
        "config": config,
    }
    one, two = engine.handles["model-1"], engine.handles["model-2"]
    assert (one.kind, two.kind) == ("f32", "q4_k")
    assert one.path == two.path == tiny_model(seed=0)
    tokens = np.asarray(PROMPT, np.int64)
    assert np.array_equal(one.forward(tokens, one.new_state()), f32.forward(tokens, f32.new_state()))
    q4 = load_model(tiny_model(seed=0), weights="q4_k")
    assert np.array_equal(two.forward(tokens, two.new_state()), q4.forward(tokens, q4.new_state()))


def test_load_model_reads_the_path_it_is_given(tmp_path: Path) -> None:
    engine = ready()
    result = engine.serve("load_model", {"weights": "f32", "path": str(tiny_model(seed=0))}, 2, Recorder())
    assert result["model"] == "model-1" and engine.handles["model-1"].path == tiny_model(seed=0)
    r = refusal(engine, "load_model", {"weights": "f32", "path": str(tmp_path / "absent")})
    assert r.code == INVALID_INPUT and "no config.json" in str(r)


@pytest.mark.parametrize(
    ("weights", "message"),
    [("f16", "params.weights: 'f32' or 'q4_k', got 'f16'"), (None, "params.weights: expected str, got None")],
)
def test_load_model_refuses_other_weights(weights: Any, message: str) -> None:
    engine = ready()
    r = refusal(engine, "load_model", {"weights": weights})
    assert (r.code, str(r)) == (INVALID_PARAMS, message)
    assert engine.handles == {}


# -- the model wrapper and the cancel token ------------------------------------------------------------------------
def test_reporting_reports_each_forward_before_running_it(f32: Any) -> None:
    wrapper = _Reporting(f32)
    assert wrapper.model is f32 and wrapper.config is f32.config and wrapper.report is None
    pool = wrapper.new_pool(3, 8)  # not the default page size (16)
    assert pool.page_size == 8 and pool.k.shape[0] == 3
    state = wrapper.new_state(pool)
    assert state.pool is pool
    local = f32.new_state()
    first = np.asarray(PROMPT, np.int64)
    assert np.array_equal(wrapper.forward(first, state), f32.forward(first, local))  # report None: just runs
    seen: list[tuple[int, list[int], int]] = []
    wrapper.report = lambda start, tokens: seen.append((start, tokens, state.pos))
    out = wrapper.forward(np.asarray([5, 6], np.int64), state)
    assert np.array_equal(out, f32.forward(np.asarray([5, 6], np.int64), local))
    assert seen == [(7, [5, 6], 7)] and all(type(t) is int for t in seen[0][1]) and type(seen[0][0]) is int
    with pytest.raises(ValueError, match="1-D"):  # reported flat first; the model then refuses the shape
        wrapper.forward(np.asarray([[8, 9]], np.int64), state)
    assert seen[1:] == [(9, [8, 9], 9)] and state.pos == 9


def test_poll_asks_the_harness_and_counts() -> None:
    class Answers(Link):
        def __init__(self) -> None:
            self.asked: list[tuple[str, dict[str, Any]]] = []

        def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
            self.asked.append((method, params))
            return {"cancelled": len(self.asked) - 1}  # 0, then 1: a truthy answer that is not a bool

    link = Answers()
    poll = _Poll(link, 12)
    assert (poll.link, poll.request, poll.polls) == (link, 12, 0)
    assert poll.is_cancelled() is False and poll.polls == 1
    assert poll.is_cancelled() is True and poll.polls == 2
    assert link.asked == [("$/poll", {"request": 12})] * 2


# -- generate ------------------------------------------------------------------------------------------------------
def local_run(
    model: Any, prompt: list[int], max_tokens: int, budget: int | None = None, **kw: Any
) -> tuple[Any, list[np.ndarray]]:
    """The in-process Session's run, with every logits row it sampled from."""
    sampler = kw.pop("sampler", greedy)
    rows: list[np.ndarray] = []

    def pick(logits: np.ndarray) -> int:
        rows.append(np.array(logits, np.float32))
        return int(sampler(logits))

    cancel = CancelToken() if budget is None else CancelToken.with_budget(budget)
    return Session(model).generate(prompt, max_tokens, cancel=cancel, sampler=pick, **kw), rows


def expected_events(rid: int, prompt: list[int], run: Any, harness: bool) -> list[tuple[str, dict[str, Any]]]:
    """What the harness sees of a run from an empty session: poll, forward, (sample,) token per token."""
    events: list[tuple[str, dict[str, Any]]] = []
    for i, token in enumerate(run.tokens):
        start, fed = (0, prompt) if i == 0 else (len(prompt) + i - 1, [run.tokens[i - 1]])
        events.append(("$/poll", {"request": rid}))
        events.append(("$/forward", {"request": rid, "start": start, "tokens": list(fed)}))
        if harness:
            events.append(("$/sample", {"request": rid}))
        events.append(("$/token", {"request": rid, "token": token}))
    if run.stop_reason == "cancelled":
        events.append(("$/poll", {"request": rid}))
    return events


CLAIMS = ("decode_forwards", "prefill_forwards", "polls", "reused")  # the counts a generate reply claims


def result_of(run: Any) -> dict[str, Any]:
    """The generate reply that carries `run`: its tokens, its stop reason, and its CLAIMS by name."""
    claims = {name: getattr(run, name) for name in CLAIMS}
    return {"tokens": list(run.tokens), "stop_reason": str(run.stop_reason), "claims": claims}


def session_engine() -> tuple[Engine, str]:
    engine, model = loaded()
    return engine, engine.serve("new_session", {"model": model}, 3, Recorder())["session"]


def generate(engine: Engine, session: str, link: Recorder, rid: int = 41, **params: Any) -> dict[str, Any]:
    base = {"session": session, "prompt": PROMPT, "max_tokens": 5, "stop_tokens": [], "sampler": "greedy"}
    return engine.serve("generate", {**base, **params}, rid, link)


def test_generate_greedy_is_the_in_process_run_with_every_event_in_order(f32: Any) -> None:
    engine, session = session_engine()
    assert session == "session-2"
    link = Recorder(watch=lambda: engine.handles[session].state.pos)
    result = generate(engine, session, link)
    run, _rows = local_run(f32, PROMPT, 5)
    assert result == result_of(run) and run.stop_reason == "max_tokens" and len(run.tokens) == 5
    assert type(result["stop_reason"]) is str
    assert link.events == expected_events(41, PROMPT, run, harness=False)
    starts = [e[1]["start"] for e in link.events if e[0] == "$/forward"]
    assert link.pos_at_report == starts == [0, 7, 8, 9, 10]  # reported before the forward moved the state
    assert link.sampled == [] and link.polls == 5
    assert engine.handles[session].model.report is None


def test_generate_with_the_harness_sampler_asks_for_each_token(f32: Any) -> None:
    engine, session = session_engine()
    link = Recorder(pick=argmin)
    result = generate(engine, session, link, rid=8, sampler="harness", max_tokens=4)
    run, rows = local_run(f32, PROMPT, 4, sampler=argmin)
    greedy_run, _ = local_run(f32, PROMPT, 4)
    assert run.tokens != greedy_run.tokens  # the harness's sampler decided these tokens
    assert result == result_of(run)
    assert link.events == expected_events(8, PROMPT, run, harness=True)
    assert len(link.sampled) == len(rows) == 4
    for got, want in zip(link.sampled, rows, strict=True):
        assert got.dtype == np.float32 and np.array_equal(got, want)


def test_generate_stops_at_a_stop_token(f32: Any) -> None:
    full, _ = local_run(f32, PROMPT, 5)
    engine, session = session_engine()
    link = Recorder()
    result = generate(engine, session, link, stop_tokens=[full.tokens[2]])
    run, _ = local_run(f32, PROMPT, 5, stop_tokens=[full.tokens[2]])
    assert result == result_of(run) and result["stop_reason"] == "stop_token" and len(result["tokens"]) == 3
    assert link.events == expected_events(41, PROMPT, run, harness=False)


def test_generate_is_cancelled_by_the_harness_poll_budget(f32: Any) -> None:
    engine, session = session_engine()
    link = Recorder(budget=2)
    result = generate(engine, session, link, max_tokens=6)
    run, _ = local_run(f32, PROMPT, 6, budget=2)
    assert result == result_of(run)
    assert result["stop_reason"] == "cancelled" and len(result["tokens"]) == 2
    assert result["claims"] == {"decode_forwards": 1, "prefill_forwards": 1, "polls": 3, "reused": 0}
    assert link.polls == 3 and link.events == expected_events(41, PROMPT, run, harness=False)


def test_a_second_generate_reuses_the_session_state(f32: Any) -> None:
    engine, session = session_engine()
    first = generate(engine, session, Recorder())
    follow = PROMPT + first["tokens"] + [42]
    link = Recorder()
    result = generate(engine, session, link, rid=42, prompt=follow, max_tokens=3)
    local = Session(f32)
    local.generate(PROMPT, 5, cancel=CancelToken())
    run = local.generate(follow, 3, cancel=CancelToken())
    assert result == result_of(run) and result["claims"]["reused"] == len(PROMPT) + 4
    forwards = [e[1] for e in link.events if e[0] == "$/forward"]
    assert forwards[0] == {"request": 42, "start": len(PROMPT) + 4, "tokens": follow[len(PROMPT) + 4 :]}


@pytest.mark.parametrize(
    ("params", "code", "message"),
    [
        ({"sampler": "top_k"}, INVALID_PARAMS, "params.sampler: 'greedy' or 'harness', got 'top_k'"),
        ({"sampler": None}, INVALID_PARAMS, "params.sampler: 'greedy' or 'harness', got None"),
        ({"prompt": "abc"}, INVALID_PARAMS, "params.prompt: expected list, got 'abc'"),
        ({"stop_tokens": [True]}, INVALID_PARAMS, "params.stop_tokens: expected an array of integers"),
        ({"max_tokens": True}, INVALID_PARAMS, "params.max_tokens: expected int, got True"),
        ({"max_tokens": "5"}, INVALID_PARAMS, "params.max_tokens: expected int, got '5'"),
        ({"prompt": [1, 600]}, INVALID_INPUT, "prompt[1] = 600 is outside the vocabulary [0, 512)"),
    ],
)
def test_generate_refuses_bad_params_before_any_event(
    params: dict[str, Any], code: int, message: str
) -> None:
    engine, session = session_engine()
    link = Recorder()
    with pytest.raises(Refusal) as info:
        generate(engine, session, link, **params)
    assert (info.value.code, str(info.value)) == (code, message)
    assert link.events == [] and engine.handles[session].state.pos == 0
    assert engine.handles[session].model.report is None


def test_release_session_frees_its_state_and_forgets_the_handle() -> None:
    engine, session = session_engine()
    generate(engine, session, Recorder(), max_tokens=2)
    held = engine.handles[session]
    assert engine.serve("release_session", {"session": session}, 5, Recorder()) == {}
    assert session not in engine.handles and held.state.released is True
    r = refusal(engine, "generate", {"session": session})
    assert (r.code, str(r)) == (UNKNOWN_HANDLE, "params.session: no session 'session-2'")
    r = refusal(engine, "release_session", {"session": session})
    assert r.code == UNKNOWN_HANDLE


# -- state: new, copy, release, forward, bytes, digest ------------------------------------------------------------
def test_forward_logits_and_positions_equal_the_in_process_model(f32: Any) -> None:
    engine, model = loaded()
    assert engine.serve("new_state", {"model": model}, 3, Recorder()) == {"state": "state-2", "pos": 0}
    assert engine.handles["state-2"][0] == "model-1"
    local = f32.new_state()
    for rid, cut in enumerate([PROMPT, [7], list(range(60, 123))], start=4):  # 7, 1, 63 tokens
        link = Recorder()
        result = engine.serve("forward", {"state": "state-2", "tokens": cut}, rid, link)
        want = f32.forward(np.asarray(cut, np.int64), local)
        assert sorted(result) == ["logits", "pos"] and result["pos"] == local.pos
        assert result["logits"]["dtype"] == "float32" and result["logits"]["shape"] == [len(cut), 512]
        got = decode_f32(result["logits"], "forward logits")
        assert np.array_equal(got, want), f"max |diff| {np.max(np.abs(got - want))}"
        assert link.events == []  # a bare forward sends the harness nothing
    assert local.pos == 71
    r = refusal(engine, "forward", {"state": "state-2", "tokens": []})
    assert (r.code, str(r)) == (INVALID_PARAMS, "params.tokens: at least one token")
    r = refusal(engine, "forward", {"state": "state-2", "tokens": [1, False]})
    assert (r.code, str(r)) == (INVALID_PARAMS, "params.tokens: expected an array of integers")


def test_state_bytes_and_digest_equal_the_in_process_state(f32: Any) -> None:
    engine, model = loaded()
    state = engine.serve("new_state", {"model": model}, 3, Recorder())["state"]
    engine.serve("forward", {"state": state, "tokens": PROMPT}, 4, Recorder())
    local = f32.new_state()
    f32.forward(np.asarray(PROMPT, np.int64), local)
    raw = engine.serve("state_bytes", {"state": state}, 5, Recorder())
    assert sorted(raw) == ["bytes", "pos"] and raw["pos"] == 7
    assert base64.b64decode(raw["bytes"], validate=True) == local.to_bytes()
    digest = engine.serve("state_digest", {"state": state}, 6, Recorder())
    assert digest == {"digest": hashlib.sha256(local.to_bytes()).hexdigest(), "pos": 7}


def test_copy_state_is_independent_and_release_state_frees_it(f32: Any) -> None:
    engine, model = loaded()
    state = engine.serve("new_state", {"model": model}, 3, Recorder())["state"]
    engine.serve("forward", {"state": state, "tokens": PROMPT}, 4, Recorder())
    before = engine.serve("state_digest", {"state": state}, 5, Recorder())["digest"]
    copy = engine.serve("copy_state", {"state": state}, 6, Recorder())
    assert copy == {"state": "state-3", "pos": 7} and engine.handles["state-3"][0] == "model-1"
    assert engine.serve("state_digest", {"state": "state-3"}, 7, Recorder())["digest"] == before
    moved = engine.serve("forward", {"state": "state-3", "tokens": [9]}, 8, Recorder())
    local = f32.new_state()
    f32.forward(np.asarray(PROMPT, np.int64), local)
    assert np.array_equal(
        decode_f32(moved["logits"], "logits"), f32.forward(np.asarray([9], np.int64), local)
    )
    assert moved["pos"] == 8
    assert engine.serve("state_digest", {"state": state}, 9, Recorder()) == {"digest": before, "pos": 7}
    held = engine.handles["state-3"][1]
    assert engine.serve("release_state", {"state": "state-3"}, 10, Recorder()) == {}
    assert "state-3" not in engine.handles and held.released is True and state in engine.handles
    r = refusal(engine, "copy_state", {"state": "state-3"})
    assert (r.code, str(r)) == (UNKNOWN_HANDLE, "params.state: no state 'state-3'")
    r = refusal(engine, "release_state", {"state": "state-3"})
    assert r.code == UNKNOWN_HANDLE


# -- stepped prefill -----------------------------------------------------------------------------------------------
LONG = [int(t) for t in np.random.default_rng(150).integers(0, 512, 150)]


def prefill_params(state: str, **kw: Any) -> dict[str, Any]:
    base = {"state": state, "prompt": LONG, "chunk_cap": 64, "kept": [], "marks": [40, 120], "starts": [110]}
    return {**base, "keep_logits": True, **kw}


def test_prefill_steps_are_the_in_process_prefill(f32: Any) -> None:
    engine, model = loaded()
    state = engine.serve("new_state", {"model": model}, 3, Recorder())["state"]
    opened = engine.serve("prefill_open", prefill_params(state), 4, Recorder())
    assert opened == {"prefill": "prefill-3", "state": state, "pos": 0, "done": False}
    assert engine.handles["prefill-3"][1].report is None
    local = Prefill.open(
        f32, f32.new_state(), LONG, chunk_cap=64, marks=[40, 120], starts=[110], keep_logits=True
    )
    cuts = [
        (0, 40),
        (40, 104),
        (104, 110),
        (110, 120),
        (120, 150),
    ]  # a mark, the width, a start, a mark, the end
    kept_handles = []
    for rid, (start, end) in enumerate(cuts, start=5):
        link = Recorder(watch=lambda: engine.handles[state][1].pos)
        result = engine.serve("prefill_step", {"prefill": "prefill-3"}, rid, link)
        local.step()
        assert link.events == [("$/forward", {"request": rid, "start": start, "tokens": LONG[start:end]})]
        assert link.pos_at_report == [start]
        assert engine.handles["prefill-3"][1].report is None
        assert sorted(result) == ["chunk_logits", "done", "kept", "logits", "pos"]
        assert (result["done"], result["pos"]) == (end == 150, end)
        assert local.logits is not None and local.chunk_logits is not None
        assert np.array_equal(decode_f32(result["logits"], "logits"), local.logits)
        assert np.array_equal(decode_f32(result["chunk_logits"], "chunk"), local.chunk_logits[-1])
        assert [k["tokens"] for k in result["kept"]] == ([LONG[:end]] if end in (40, 120) else [])
        kept_handles += [k["state"] for k in result["kept"]]
    assert kept_handles == ["state-4", "state-5"]
    for handle, snap in zip(kept_handles, local.kept, strict=True):
        assert engine.handles[handle][0] == "model-1"
        assert base64.b64decode(engine.serve("state_bytes", {"state": handle}, 20, Recorder())["bytes"]) == (
            snap.state.to_bytes()
        )
    assert base64.b64decode(engine.serve("state_bytes", {"state": state}, 21, Recorder())["bytes"]) == (
        local.state.to_bytes()
    )
    r = refusal(engine, "prefill_step", {"prefill": "prefill-3"})
    assert (r.code, str(r)) == (INVALID_INPUT, "prefill of 150 tokens is already done")


def test_prefill_open_restores_a_kept_prefix_into_a_new_state(f32: Any) -> None:
    engine, model = loaded()
    first = engine.serve("new_state", {"model": model}, 3, Recorder())["state"]
    engine.serve("prefill_open", prefill_params(first, marks=[70], starts=[]), 4, Recorder())
    engine.serve("prefill_step", {"prefill": "prefill-3"}, 5, Recorder())
    kept = engine.serve("prefill_step", {"prefill": "prefill-3"}, 6, Recorder())["kept"]
    assert kept == [{"tokens": LONG[:70], "state": "state-4"}]
    other = engine.serve("new_state", {"model": model}, 7, Recorder())["state"]
    prompt = [*LONG[:70], 1, 2, 3]
    params = {**prefill_params(other, prompt=prompt, marks=[], starts=[], keep_logits=False), "kept": kept}
    opened = engine.serve("prefill_open", params, 8, Recorder())
    assert opened == {"prefill": "prefill-7", "state": "state-6", "pos": 70, "done": False}
    assert engine.handles["state-6"][0] == "model-1"
    link = Recorder()
    result = engine.serve("prefill_step", {"prefill": "prefill-7"}, 9, link)
    assert link.events == [("$/forward", {"request": 9, "start": 70, "tokens": [1, 2, 3]})]
    assert result["chunk_logits"] is None and result["done"] is True and result["pos"] == 73
    local = f32.new_state()
    for cut in (prompt[:64], prompt[64:70]):  # the chunks the kept state consumed
        f32.forward(np.asarray(cut, np.int64), local)
    want = f32.forward(np.asarray([1, 2, 3], np.int64), local)[-1]
    assert np.array_equal(decode_f32(result["logits"], "logits"), want)
    assert engine.serve("state_digest", {"state": "state-6"}, 10, Recorder())["digest"] == local.digest()


def test_prefill_open_from_a_state_that_holds_a_prefix(f32: Any) -> None:
    engine, model = loaded()
    state = engine.serve("new_state", {"model": model}, 3, Recorder())["state"]
    engine.serve("forward", {"state": state, "tokens": LONG[:10]}, 4, Recorder())
    params = prefill_params(state, chunk_cap=None, marks=[], starts=[], keep_logits=False)
    opened = engine.serve("prefill_open", params, 5, Recorder())
    assert opened == {"prefill": "prefill-3", "state": state, "pos": 10, "done": False}
    link = Recorder()
    result = engine.serve("prefill_step", {"prefill": "prefill-3"}, 6, link)
    assert link.events == [("$/forward", {"request": 6, "start": 10, "tokens": LONG[10:74]})]  # chunk_size 64
    assert (result["pos"], result["done"], result["kept"], result["chunk_logits"]) == (74, False, [], None)


@pytest.mark.parametrize(
    ("change", "code", "message"),
    [
        ({"chunk_cap": "64"}, INVALID_PARAMS, "params.chunk_cap: an integer or null"),
        ({"chunk_cap": True}, INVALID_PARAMS, "params.chunk_cap: an integer or null"),
        ({"chunk_cap": 2.5}, INVALID_PARAMS, "params.chunk_cap: an integer or null"),
        (
            {"chunk_cap": 65},
            INVALID_INPUT,
            "chunk_cap 65 is not a multiple of the model's chunk_size 64: cuts off that grid would change the "
            "state bytes",
        ),
        ({"kept": [5]}, INVALID_PARAMS, "params.kept[0]: an object"),
        ({"kept": [{"tokens": [1], "state": "state-2"}, 7]}, INVALID_PARAMS, "params.kept[1]: an object"),
        ({"kept": [{"tokens": [1], "state": "model-1"}]}, UNKNOWN_HANDLE, "params.state: no state 'model-1'"),
        (
            {"kept": [{"tokens": "1", "state": "state-2"}]},
            INVALID_PARAMS,
            "params.tokens: expected list, got '1'",
        ),
        ({"kept": None}, INVALID_PARAMS, "params.kept: expected list, got None"),
        ({"marks": None}, INVALID_PARAMS, "params.marks: expected list, got None"),
        ({"starts": [1.0]}, INVALID_PARAMS, "params.starts: expected an array of integers"),
        ({"prompt": None}, INVALID_PARAMS, "params.prompt: expected list, got None"),
        ({"state": "model-1"}, UNKNOWN_HANDLE, "params.state: no state 'model-1'"),
    ],
)
def test_prefill_open_refuses_bad_params(change: dict[str, Any], code: int, message: str) -> None:
    engine, model = loaded()
    engine.serve("new_state", {"model": model}, 3, Recorder())
    r = refusal(engine, "prefill_open", {**prefill_params("state-2"), **change})
    assert (r.code, str(r)) == (code, message)
    assert sorted(engine.handles) == ["model-1", "state-2"]


# -- lines and replies ---------------------------------------------------------------------------------------------
def test_classify_parses_requests_replies_and_notifications() -> None:
    for message in (
        {"id": 1, "method": "initialize", "params": {}},
        {"method": "exit", "params": {}},
        {"method": "x"},
        {"id": 3, "result": {}},
        {"id": None, "error": {"code": 1, "message": "m"}},
    ):
        assert _classify(json.dumps(message).encode()) == (message, None)


def test_classify_answers_a_line_that_is_not_json_with_parse_error() -> None:
    for line in (b"not json\n", b"\xff\xfe\n", b'{"id": 1,', b'{"id": ' + b"9" * 5000 + b"}"):
        message, error = _classify(line)
        try:
            json.loads(line)
        except ValueError as exc:
            reason = str(exc)
        assert message is None
        assert error == {"id": None, "error": {"code": PARSE_ERROR, "message": f"not JSON: {reason}"}}
    message, error = _classify(b"[" * 100_000 + b"]" * 100_000)  # deeper than the parser recurses (issue #27)
    assert message is None and error is not None and error["error"]["code"] == PARSE_ERROR
    assert error["error"]["message"].startswith("not JSON: maximum recursion depth exceeded")


@pytest.mark.parametrize(
    "message",
    [[1, 2], "x", {"method": 5}, {"id": 1}, {"id": 1, "params": {}}, {"result": {}}, {"error": {}}, {}],
)
def test_classify_answers_other_json_with_invalid_request(message: Any) -> None:
    assert _classify(json.dumps(message).encode()) == (
        None,
        {
            "id": None,
            "error": {"code": INVALID_REQUEST, "message": "not a request, response or notification"},
        },
    )


def test_answer_wraps_results_and_refusals_with_the_request_id() -> None:
    engine = Engine()
    link = Recorder()
    init: dict[str, Any] = {"id": 5, "method": "initialize", "params": {"protocolVersion": PROTOCOL_VERSION}}
    assert _answer(engine, init, link) == {
        "id": 5,
        "result": engine.serve("initialize", init["params"], 5, link),
    }
    assert _answer(engine, {"id": 6, "method": "initialize"}, link) == {
        "id": 6,
        "error": {"code": INVALID_PARAMS, "message": "params.protocolVersion: expected str, got None"},
    }
    assert _answer(engine, {"id": 7, "method": "shutdown", "params": [1]}, link) == {
        "id": 7,
        "error": {"code": INVALID_PARAMS, "message": "params must be an object"},
    }
    assert engine.shut_down is False


def test_answer_reports_an_engine_bug_as_internal_error() -> None:
    class NoToken(Recorder):
        def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
            return {"cancelled": False} if method == "$/poll" else {"tok": 1}  # a reply without "token"

    engine, session = session_engine()
    params = {"session": session, "prompt": PROMPT, "max_tokens": 2, "stop_tokens": [], "sampler": "harness"}
    reply = _answer(engine, {"id": 9, "method": "generate", "params": params}, NoToken())
    assert reply == {"id": 9, "error": {"code": INTERNAL_ERROR, "message": "KeyError: 'token'"}}
    assert engine.handles[session].model.report is None


def test_dump_is_one_compact_json_line() -> None:
    assert (
        _dump({"id": 1, "result": {"a": [1, "é"], "b": None}})
        == b'{"id":1,"result":{"a":[1,"\\u00e9"],"b":null}}\n'
    )


def test_f32_round_trips_dtype_shape_and_bytes() -> None:
    array = np.arange(6, dtype=np.float64).reshape(2, 3).T * -1.5  # float64, not C-contiguous
    obj = _f32(array)
    assert sorted(obj) == ["data", "dtype", "shape"]
    assert obj["dtype"] == "float32" and obj["shape"] == [3, 2]
    raw = base64.b64decode(obj["data"], validate=True)
    assert raw == np.ascontiguousarray(array, dtype="<f4").tobytes() and len(raw) == 24
    assert np.array_equal(decode_f32(obj, "f32"), array.astype(np.float32))
    assert _f32(np.zeros((0,), np.float32)) == {"dtype": "float32", "shape": [0], "data": ""}


# -- stdio ---------------------------------------------------------------------------------------------------------
def line(message: Any) -> bytes:
    return json.dumps(message).encode() + b"\n"


def in_thread(fn: Callable[[], Any]) -> Any:
    """fn() in a daemon thread, given WAIT seconds: its return value, or the exception it raised."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(fn())
        except BaseException as exc:  # SystemExit too: what serve_stdio raises is the result
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive(), f"{fn} still running after {WAIT} s"
    return box[0]


class ReadToItsEndOnce(io.BytesIO):
    """An input that may be read to its end once: a read after the end of input raises, so an engine that goes
    on reading there (and would spin at its end forever) fails at once instead of after WAIT seconds of spinning,
    which under mutmut outlasted its timeout."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.ended = False

    def readline(self, size: int | None = -1) -> bytes:
        if self.ended:
            raise AssertionError("serve_stdio read again after the end of its input")
        got = super().readline(size)
        self.ended = got == b""
        return got


def stdio(*items: Any) -> tuple[Any, list[Any]]:
    """serve_stdio over `items` (messages, or raw bytes lines) then end of input: (its result, lines it wrote)."""
    inp = ReadToItsEndOnce(b"".join(i if isinstance(i, bytes) else line(i) for i in items))
    out = io.BytesIO()
    code = in_thread(lambda: serve_stdio(inp, out))
    written = out.getvalue()
    assert written == b"" or written.endswith(b"\n")
    return code, [json.loads(x) for x in written.splitlines()]


INIT = {"id": 1, "method": "initialize", "params": {"protocolVersion": PROTOCOL_VERSION}}
INIT_RESULT = {
    "protocolVersion": PROTOCOL_VERSION,
    "engine": {"name": "reference", "version": "0.1.0"},
    "capabilities": ["generate", "state", "prefill", "lanes", "sample"],
}


def test_stdio_exit_after_shutdown_is_0_and_nothing_after_exit_is_read() -> None:
    code, out = stdio(
        INIT,
        {"id": 2, "method": "shutdown", "params": {}},
        {"method": "exit", "params": {}},
        {"id": 3, "method": "initialize", "params": {"protocolVersion": PROTOCOL_VERSION}},
    )
    assert code == 0
    assert out == [{"id": 1, "result": INIT_RESULT}, {"id": 2, "result": {}}]


def test_stdio_exit_without_shutdown_is_1() -> None:
    code, out = stdio(INIT, {"method": "exit", "params": {}}, {"id": 2, "method": "shutdown", "params": {}})
    assert code == 1 and out == [{"id": 1, "result": INIT_RESULT}]


def test_stdio_end_of_input_is_0_after_answering_every_request() -> None:
    code, out = stdio(INIT, {"id": 2, "method": "load_model", "params": {"weights": "f16"}})
    assert code == 0
    assert out == [
        {"id": 1, "result": INIT_RESULT},
        {"id": 2, "error": {"code": INVALID_PARAMS, "message": "params.weights: 'f32' or 'q4_k', got 'f16'"}},
    ]
    assert stdio() == (0, [])


def json_error(bad: bytes) -> str:
    """What json.loads says of BAD: the reason a PARSE_ERROR reply quotes."""
    with pytest.raises(ValueError) as info:
        json.loads(bad)
    return str(info.value)


def test_stdio_answers_bad_lines_and_ignores_stray_replies_and_notifications() -> None:
    bad = b"this is not json\n"
    reason = json_error(bad)
    code, out = stdio(
        bad,
        line([1, 2]),
        {"id": 4, "result": {}},  # a stray reply
        {"method": "$/cancelRequest", "params": {"id": 1}},
        {"method": "exit"},  # a notification without params is still exit
        INIT,
    )
    assert code == 1 and out == [
        {"id": None, "error": {"code": PARSE_ERROR, "message": f"not JSON: {reason}"}},
        {
            "id": None,
            "error": {"code": INVALID_REQUEST, "message": "not a request, response or notification"},
        },
    ]
    code, out = stdio({"method": "$/cancelRequest", "params": {"id": 1}}, INIT, {"id": 2, "method": "nope"})
    assert code == 0 and out == [
        {"id": 1, "result": INIT_RESULT},
        {"id": 2, "error": {"code": METHOD_NOT_FOUND, "message": "no method 'nope'"}},
    ]


def test_stdio_link_request_waits_for_its_reply_answering_what_comes_meanwhile() -> None:
    bad = b"{oops\n"
    reason = json_error(bad)
    script = [
        bad,
        line({"id": 7, "method": "load_model", "params": {}}),  # a harness request during ours: busy
        line({"method": "$/cancelRequest", "params": {"id": 7}}),
        line({"id": 5, "result": {"cancelled": True}}),  # a reply to another id: not ours
        line({"id": 1, "result": {"cancelled": False}}),
        line({"id": 2, "error": {"code": -32600, "message": "no sampling today"}}),
    ]
    out = io.BytesIO()
    link = StdioLink(io.BytesIO(b"".join(script)), out)
    assert link.request("$/poll", {"request": 3}) == {"cancelled": False}
    with pytest.raises(RuntimeError) as info:
        link.request("$/sample", {"request": 3})
    assert str(info.value) == "the harness refused $/sample: no sampling today"
    with pytest.raises(SystemExit) as ended:  # the harness closed our stdin while we waited
        link.request("$/poll", {"request": 3})
    assert ended.value.code == 1
    link.notify("$/token", {"request": 3, "token": 4})
    assert [json.loads(x) for x in out.getvalue().splitlines()] == [
        {"id": 1, "method": "$/poll", "params": {"request": 3}},
        {"id": None, "error": {"code": PARSE_ERROR, "message": f"not JSON: {reason}"}},
        {"id": 7, "error": {"code": INVALID_REQUEST, "message": "busy"}},
        {"id": 2, "method": "$/sample", "params": {"request": 3}},
        {"id": 3, "method": "$/poll", "params": {"request": 3}},
        {"method": "$/token", "params": {"request": 3, "token": 4}},
    ]


def test_stdio_end_of_input_during_an_engine_request_exits_1() -> None:
    generate_ = {
        "session": "session-2",
        "prompt": PROMPT,
        "max_tokens": 2,
        "stop_tokens": [],
        "sampler": "greedy",
    }
    code, out = stdio(
        INIT,
        {"id": 2, "method": "load_model", "params": {"weights": "f32"}},
        {"id": 3, "method": "new_session", "params": {"model": "model-1"}},
        {"id": 4, "method": "generate", "params": generate_},
    )
    assert isinstance(code, SystemExit) and code.code == 1
    assert out[-1] == {"id": 1, "method": "$/poll", "params": {"request": 4}}


class PipeHarness:
    """The harness's end of two pipes to serve_stdio running in a thread; lines the engine writes are read by a
    reader thread into a queue, so a silent engine is a failed test after WAIT seconds, never a hang."""

    def __init__(self) -> None:
        to_engine_r, to_engine_w = os.pipe()
        from_engine_r, from_engine_w = os.pipe()
        self.inp = os.fdopen(to_engine_r, "rb")
        self.out = os.fdopen(from_engine_w, "wb")
        self.writer = os.fdopen(to_engine_w, "wb")
        self.reader = os.fdopen(from_engine_r, "rb")
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.result: list[Any] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.engine = threading.Thread(target=self._serve, daemon=True)
        self.engine.start()

    def _serve(self) -> None:
        try:
            self.result.append(serve_stdio(self.inp, self.out))
        except BaseException as exc:
            self.result.append(exc)
        finally:
            self.out.close()

    def _read(self) -> None:
        for raw in iter(self.reader.readline, b""):
            self.lines.put(raw)
        self.lines.put(b"")

    def send(self, message: Any) -> None:
        self.writer.write(message if isinstance(message, bytes) else line(message))
        self.writer.flush()

    def recv(self) -> dict[str, Any]:
        raw = self.lines.get(timeout=WAIT)
        assert raw.endswith(b"\n"), raw
        message: dict[str, Any] = json.loads(raw)
        return message

    def close(self) -> Any:
        self.writer.close()
        self.engine.join(WAIT)
        for f in (self.inp, self.reader):
            f.close()
        return self.result[0] if self.result else None


def test_stdio_over_pipes_serves_a_harness_sampled_generate(f32: Any) -> None:
    harness = PipeHarness()
    try:
        harness.send(INIT)
        assert harness.recv() == {"id": 1, "result": INIT_RESULT}
        harness.send({"id": 2, "method": "load_model", "params": {"weights": "f32", "path": None}})
        assert harness.recv()["result"]["model"] == "model-1"
        harness.send({"id": 3, "method": "new_session", "params": {"model": "model-1"}})
        assert harness.recv() == {"id": 3, "result": {"session": "session-2"}}
        params = {
            "session": "session-2",
            "prompt": PROMPT,
            "max_tokens": 4,
            "stop_tokens": [],
            "sampler": "harness",
        }
        harness.send({"id": 4, "method": "generate", "params": params})
        events: list[tuple[str, dict[str, Any]]] = []
        engine_ids: list[int] = []
        first_poll = True
        while True:
            message = harness.recv()
            if "method" not in message:
                break
            method = message["method"]
            if "id" in message:
                engine_ids.append(message["id"])
            if (
                method == "$/poll" and first_poll
            ):  # meanwhile: a request, a bad line, a notification, a stray reply
                first_poll = False
                harness.send({"id": 5, "method": "load_model", "params": {"weights": "f32"}})
                assert harness.recv() == {"id": 5, "error": {"code": INVALID_REQUEST, "message": "busy"}}
                harness.send(b"\n")
                assert harness.recv()["error"]["code"] == PARSE_ERROR
                harness.send({"method": "$/cancelRequest", "params": {"id": 4}})
                harness.send({"id": 99, "result": {"cancelled": True}})
            if method == "$/poll":
                harness.send({"id": message["id"], "result": {"cancelled": False}})
            elif method == "$/sample":
                token = argmin(decode_f32(message["params"]["logits"], "$/sample logits"))
                harness.send({"id": message["id"], "result": {"token": token}})
            events.append((method, {k: v for k, v in message["params"].items() if k != "logits"}))
        run, _ = local_run(f32, PROMPT, 4, sampler=argmin)
        assert message == {"id": 4, "result": result_of(run)}
        assert events == expected_events(4, PROMPT, run, harness=True)
        assert (
            engine_ids == list(range(1, len(engine_ids) + 1)) and len(engine_ids) == 8
        )  # 4 polls, 4 samples
        params["max_tokens"] = 1
        harness.send({"id": 6, "method": "generate", "params": params})
        poll = harness.recv()
        assert poll == {"id": 9, "method": "$/poll", "params": {"request": 6}}
        harness.send({"id": 9, "error": {"code": -32603, "message": "no polls today"}})
        assert harness.recv() == {
            "id": 6,
            "error": {
                "code": INTERNAL_ERROR,
                "message": "RuntimeError: the harness refused $/poll: no polls today",
            },
        }
        harness.send({"id": 7, "method": "shutdown", "params": {}})
        assert harness.recv() == {"id": 7, "result": {}}
        harness.send({"method": "exit", "params": {}})
        harness.engine.join(WAIT)
        assert harness.result == [0]
    finally:
        harness.close()


# -- HTTP ----------------------------------------------------------------------------------------------------------
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


def post(port: int, body: bytes, path: str = "/rpc") -> tuple[int, Any, bytes]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with OPENER.open(req, timeout=WAIT) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


@pytest.fixture
def http() -> Iterator[tuple[_Server, threading.Thread, int]]:
    server = _Server(("127.0.0.1", 0))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server, thread, server.server_address[1]
    finally:
        server.shutdown()
        thread.join(WAIT)
        server.server_close()


def test_a_reply_posted_by_the_harness_fills_its_slot_and_an_unknown_one_is_dropped() -> None:
    server = _Server(("127.0.0.1", 0))
    try:
        handler = _Handler.__new__(_Handler)  # the method alone: no connection needed for a reply
        handler.server = server
        rid, slot = server.open_slot()
        _, other = server.open_slot()
        handler._not_a_request({"id": 999, "result": {"cancelled": True}})  # nothing waits for it: no error
        reply = {"id": rid, "result": {"cancelled": True}}
        handler._not_a_request(reply)
        assert slot[0].is_set() and slot[1] is reply and sorted(server.slots) == [rid + 1]
        assert not other[0].is_set() and other[1] is None
        handler._not_a_request({"method": "$/cancelRequest", "params": {"id": rid + 1}})
        assert sorted(server.slots) == [rid + 1] and server.exit_code == 0
    finally:
        server.server_close()


def test_a_new_server_holds_a_fresh_engine_and_numbers_its_slots() -> None:
    server = _Server(("127.0.0.1", 0))
    try:
        assert server.server_address[0] == "127.0.0.1" and server.exit_code == 0 and server.slots == {}
        assert server.engine.initialized is False and server.busy.acquire(blocking=False)
        server.busy.release()
        one, slot = server.open_slot()
        two, _ = server.open_slot()
        assert (one, two) == (1, 2) and server.slots[1] is slot and sorted(server.slots) == [1, 2]
        assert slot[1] is None and not slot[0].is_set()
    finally:
        server.server_close()


def test_the_harness_client_over_http_judges_like_the_in_process_engine(
    http: tuple[_Server, threading.Thread, int], f32: Any
) -> None:
    server, thread, port = http
    wire = WireEngine(f"http://127.0.0.1:{port}")
    try:
        assert wire.supports("generate") is None and wire.supports("prefill") is None
        assert wire.info == {"name": "reference", "version": "0.1.0"}
        model = wire.load_model("f32")
        assert model.config == WireConfig(512, 16384, 64)
        session = wire.session(model)
        cancel = HarnessCancel.with_budget(3)
        run = session.generate(PROMPT, 6, cancel=cancel, sampler=argmin)
        local, _ = local_run(f32, PROMPT, 6, budget=3, sampler=argmin)
        assert run.tokens == local.tokens and run.stop_reason == "cancelled" and cancel.polls == 4
        assert run.claims == result_of(local)["claims"]
        state = model.new_state()
        logits = model.forward(LONG[:75], state)
        ls = f32.new_state()
        assert logits is not None and np.array_equal(logits, f32.forward(np.asarray(LONG[:75], np.int64), ls))
        assert state.to_bytes() == ls.to_bytes() and state.digest() == ls.digest()
        session.release()
    finally:
        wire.close()  # shutdown, then exit: the server stops itself
    thread.join(WAIT)
    assert not thread.is_alive() and server.exit_code == 0


def test_http_answers_requests_404s_other_paths_and_204s_the_rest(
    http: tuple[_Server, threading.Thread, int], capsys: pytest.CaptureFixture[str]
) -> None:
    _server, thread, port = http
    status, headers, body = post(port, line(INIT))
    assert (status, headers["Content-Type"], json.loads(body)) == (
        200,
        "application/x-ndjson",
        {"id": 1, "result": INIT_RESULT},
    )
    assert body.count(b"\n") == 1
    status, _, body = post(port, line(INIT), path="/other")
    assert status == 404 and b"Message: POST /rpc." in body
    for other in (
        line({"method": "$/cancelRequest", "params": {"id": 1}}),
        line({"id": 999, "result": {"cancelled": True}}),  # a reply nothing waits for
    ):
        status, _, body = post(port, other)
        assert (status, body) == (204, b"")
    for bad, code in ((b"not json\n", PARSE_ERROR), (line({"id": 3}), INVALID_REQUEST)):
        # What stdio answers such a line with, as a 400 (it used to be a silent 204, issue #27).
        status, _, body = post(port, bad)
        assert status == 400 and f'"code": {code}'.encode() in body, body
        assert json.dumps(_classify(bad)[1]).encode() in body
    status, _, body = post(port, line({"id": 2, "method": "load_model", "params": {"weights": "x"}}))
    assert json.loads(body)["error"] == {
        "code": INVALID_PARAMS,
        "message": "params.weights: 'f32' or 'q4_k', got 'x'",
    }
    with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:  # a POST without Content-Length
        sock.sendall(b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # an empty line: not JSON
        assert sock.recv(64).startswith(b'HTTP/1.0 400 {"id": null, "error": {"code": -32700, ')
    assert thread.is_alive() and "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(("shutdown", "code"), [(True, 0), (False, 1)])
def test_http_exit_stops_the_server_with_its_code(
    http: tuple[_Server, threading.Thread, int], shutdown: bool, code: int
) -> None:
    server, thread, port = http
    assert post(port, line(INIT))[0] == 200
    if shutdown:
        assert json.loads(post(port, line({"id": 2, "method": "shutdown", "params": {}}))[2]) == {
            "id": 2,
            "result": {},
        }
    assert post(port, line({"method": "exit", "params": {}}))[:1] == (204,)
    thread.join(WAIT)
    assert not thread.is_alive() and server.exit_code == code


def test_http_link_waits_for_the_reply_posted_to_its_slot() -> None:
    class Slots:
        def __init__(self, reply: dict[str, Any] | None, arrives: bool) -> None:
            self.reply, self.arrives = reply, arrives
            self.waited: list[float] = []

        def open_slot(self) -> tuple[int, list[Any]]:
            slots = self

            class Event:
                def wait(self, timeout: float) -> bool:
                    slots.waited.append(timeout)
                    return slots.arrives

            return 5, [Event(), self.reply]

    out = io.BytesIO()
    link = HttpLink(Slots({"id": 5, "result": {"cancelled": True}}, True), out)  # type: ignore[arg-type]
    assert link.request("$/poll", {"request": 2}) == {"cancelled": True}
    link.notify("$/token", {"request": 2, "token": 1})
    assert out.getvalue() == (
        b'{"id":5,"method":"$/poll","params":{"request":2}}\n{"method":"$/token","params":{"request":2,"token":1}}\n'
    )
    refused = HttpLink(Slots({"id": 5, "error": {"code": 1, "message": "nope"}}, True), io.BytesIO())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"^the harness refused \$/sample: nope$"):
        refused.request("$/sample", {"request": 2})
    silent = Slots(None, False)
    with pytest.raises(RuntimeError, match=r"^no reply to \$/poll from the harness in 300 s$"):
        HttpLink(silent, io.BytesIO()).request("$/poll", {"request": 2})  # type: ignore[arg-type]
    assert silent.waited == [300]


# -- main ----------------------------------------------------------------------------------------------------------
def test_main_help_names_the_program_its_option_and_exit_codes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m reference.serve [-h] [--http PORT]\n")
    lines = [text.strip() for text in out.splitlines()]
    for text in (
        "the reference engine over the falsify engine protocol (docs/engine-protocol.md)",
        "--http PORT  serve HTTP on 127.0.0.1:PORT (0: any free port)",
        "exit: 0 after shutdown + exit (or stdin closed), 1 after exit without shutdown, 2 bad arguments",
    ):
        assert text in lines, out


@pytest.mark.parametrize("argv", [["--http", "x"], ["--http"], ["--port", "1"], ["extra"]])
def test_main_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and "usage: python -m reference.serve" in capsys.readouterr().err


def test_main_without_arguments_serves_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(ReadToItsEndOnce(line(INIT)), encoding="utf-8"))
    monkeypatch.setattr(sys, "stdout", stdout)
    assert main([]) == 0
    stdout.flush()
    assert stdout.buffer.getvalue() == _dump({"id": 1, "result": INIT_RESULT})  # _dump: tested above


@pytest.mark.parametrize(("shutdown", "code"), [(True, 0), (False, 1)])
def test_main_http_serves_on_loopback_until_exit(
    capsys: pytest.CaptureFixture[str], shutdown: bool, code: int
) -> None:
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(main(["--http", "0"])), daemon=True)
    thread.start()
    port = None
    try:
        deadline = time.monotonic() + WAIT
        err = ""
        while port is None and time.monotonic() < deadline:
            err += capsys.readouterr().err
            found = re.fullmatch(r"reference\.serve: listening on http://127\.0\.0\.1:(\d+)\n", err)
            port = int(found.group(1)) if found else None
            time.sleep(0.02)
        assert port, err
        assert post(port, line(INIT))[0] == 200
        if shutdown:
            assert post(port, line({"id": 2, "method": "shutdown", "params": {}}))[0] == 200
    finally:
        if port:
            post(port, line({"method": "exit", "params": {}}))
        thread.join(WAIT)
    assert not thread.is_alive() and box == [code]


@pytest.mark.parametrize("from_argv", [False, True])
def test_main_hands_openai_and_its_options_to_the_openai_server(
    from_argv: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--openai` first: the rest are reference/openai_server.py's options (from argv, or sys.argv[1:])."""
    argv = ["--openai", "--port", "x"]
    # sys.argv holds them too only when main reads sys.argv: given argv, the openai server must get argv's rest
    monkeypatch.setattr(sys, "argv", ["python -m reference.serve", *argv] if from_argv else ["elsewhere"])
    with pytest.raises(SystemExit) as exc:
        main(None if from_argv else argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith(
        "usage: python -m reference.serve --openai [-h] --port PORT"
    )
    assert err.endswith("error: argument --port: invalid int value: 'x'\n")
