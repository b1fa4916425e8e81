"""`falsify engine check --conformance`: exercise every message of the wire protocol, and the errors a harness
can provoke without breaking the conversation, on an engine.

Each probe drives the engine through the harness's wire client (WireEngine) and checks one rule of
docs/engine-protocol.md: copy_state independence both ways, the releases, `$/cancelRequest`, a null `chunk_cap`,
non-empty `starts` and `marks`, each -32010 refusal, -32011, -32013, -32601, a line that is not JSON (-32700),
params that break their schema (-32602), the lane host, the sampler, then `shutdown` and `exit`. The connection
counts what was exercised (Connection.seen); `spec_parts(version)` lists the messages the agreed version carries
and the error codes a run provokes, so a part the run left unexercised shows as 0. A probe that would run after
the connection failed is a FAIL naming that failure, never ok (§8: nothing passes after it).
"""

from __future__ import annotations

import hashlib
import http.client
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from falsify.engines.wire import errors
from falsify.engines.wire.connection import Connection
from falsify.engines.wire.messages import (
    BATCHED,
    ENGINE_NOTIFICATIONS,
    ENGINE_REQUESTS,
    HARNESS_NOTIFICATIONS,
    HARNESS_REQUESTS,
    PROTOCOL_VERSION,
    V1,
    V1_CAPABILITIES,
    WIRE_CAPABILITIES,
    ErrorCode,
    batches,
)
from falsify.engines.wire.transports import HttpTransport, StdioTransport, TransportError
from falsify.untrusted import boundedjson

# The errors an engine sends that a conformance run provokes. Not provoked: -32600 (a JSON line that is not a
# message: an engine may take it for a stray reply and send nothing) and -32002 (a request before initialize: the
# harness initializes first on its one connection); -32603 (an engine bug) and -32800 (optional) cannot be asked
# for; -32012 is retired. -32001 is counted for an engine that refused 1.1 at initialize.
PROVOKED = (
    ErrorCode.PARSE_ERROR,
    ErrorCode.METHOD_NOT_FOUND,
    ErrorCode.INVALID_PARAMS,
    ErrorCode.INVALID_INPUT,
    ErrorCode.UNKNOWN_HANDLE,
    ErrorCode.LANE_REFUSED,
)
# The messages only 1.1 carries (its capabilities `lanes` and `sample`; `load_model` is 1's too) and its error.
ONLY_1_1 = frozenset(
    m for c in WIRE_CAPABILITIES if c not in V1_CAPABILITIES for m in WIRE_CAPABILITIES[c]
) - frozenset(m for c in V1_CAPABILITIES for m in WIRE_CAPABILITIES[c]) | {
    f"error {int(ErrorCode.LANE_REFUSED)}"
}


@dataclass(frozen=True, slots=True)
class Probe:
    name: str
    outcome: str  # "ok", "FAIL: ...", or "skipped: ..." (the capability is not offered)


def _refused(call: Callable[[], Any], what: str) -> None:
    try:
        call()
    except errors.EngineRefusal:
        return
    raise AssertionError(f"{what} was not refused with -32010")


def _error(call: Callable[[], Any], code: ErrorCode, what: str) -> None:
    try:
        call()
    except errors.EngineErrorReply as exc:
        if code.name in str(exc):
            return
        raise AssertionError(f"{what}: {exc}") from None
    raise AssertionError(f"{what} was not refused with {int(code)} ({code.name})")


def probes(engine: Any) -> list[Probe]:
    """Run every probe the engine's capabilities allow; each outcome one line."""
    conn = engine.connection()
    caps = engine.capabilities
    model = engine.load_model("f32")
    vocab = model.config.vocab_size
    out: list[Probe] = []

    def probe(name: str, needs: str, body: Callable[[], None]) -> None:
        if needs in ("lanes", "sample") and engine.version == V1:
            out.append(
                Probe(
                    name,
                    f"not applicable: the engine speaks {engine.version}, which does not carry {needs!r}",
                )
            )
            return
        if needs not in caps:
            out.append(Probe(name, f"skipped: the engine does not offer {needs!r}"))
            return
        if conn.failure is not None:  # §8: after a connection error nothing passes
            out.append(Probe(name, f"FAIL: not run: the connection failed earlier: {conn.failure}"))
            return
        try:
            body()
            if conn.failure is not None:  # a failure the body did not see (a notification to a dead engine)
                raise conn.failure.again()
        except (AssertionError, ValueError, RuntimeError, errors.WireError) as exc:
            out.append(Probe(name, f"FAIL: {exc}"))
        else:
            out.append(Probe(name, "ok"))

    def generate() -> None:
        session = engine.session(model)
        run = session.generate(
            [1, 2, 3], 3, cancel=engine.cancel_token()()
        )  # a counting token, never cancelled
        assert run.emitted == 3 and run.polls == 3, f"3 tokens with 3 polls, got {run.emitted}, {run.polls}"
        picked = session.generate([4, 5], 2, sampler=lambda logits: int(np.argmin(logits)))
        assert picked.emitted == 2
        cancelled = session.generate([6], 5, cancel=engine.cancel_token().with_budget(1))
        assert cancelled.stop_reason == "cancelled" and cancelled.emitted == 1
        _refused(lambda: session.generate([], 2), "generate with an empty prompt")
        _refused(lambda: session.generate([vocab], 2), "generate with a token id of vocab_size")
        context = model.config.max_position_embeddings
        _refused(lambda: session.generate([1] * context, 2), "generate past the context")
        session.release()
        _error(lambda: session.generate([1], 1), ErrorCode.UNKNOWN_HANDLE, "generate on a released session")

    def state() -> None:
        a = model.new_state()
        model.forward(np.asarray([1, 2, 3]), a)
        b = a.copy()
        a_bytes, b_bytes = a.to_bytes(), b.to_bytes()
        assert a_bytes == b_bytes, "a copy's bytes differ from its original's"
        assert a.digest() == hashlib.sha256(a_bytes).hexdigest()
        model.forward(np.asarray([4]), b)
        assert a.to_bytes() == a_bytes, "advancing the copy changed the original's bytes"
        b_after = b.to_bytes()
        model.forward(np.asarray([5, 6]), a)
        assert b.to_bytes() == b_after, "advancing the original changed the copy's bytes"
        # The bytes are the state's content only (§4.11): another handle fed the same tokens the same way holds
        # equal bytes, and one more token changes them.
        c = model.new_state()
        model.forward(np.asarray([1, 2, 3]), c)
        assert c.to_bytes() == a_bytes, (
            "two states fed [1, 2, 3] alike serialise differently (a handle, page id?)"
        )
        assert b_after != a_bytes, "a state that consumed one more token serialises as before"
        c.release()
        _refused(lambda: model.forward(np.asarray([vocab]), a), "forward with a token id of vocab_size")
        b.release()
        _error(lambda: b.to_bytes(), ErrorCode.UNKNOWN_HANDLE, "state_bytes on a released state")
        a.release()

    def prefill() -> None:
        prompt = [int(t) % vocab for t in range(7, 7 + 40)]
        s = model.new_state()
        pf = engine.prefill(model, s, prompt, chunk_cap=None, marks=[10], starts=[25], keep_logits=True)
        pf.run()
        assert pf.done and pf.pos == len(prompt) and len(pf.kept) == 1, "a null chunk_cap pass with a mark"
        t = model.new_state()
        resumed = engine.prefill(model, t, [*prompt[:10], 99 % vocab], kept=pf.kept)
        assert resumed.pos == 10, f"a kept prefix of 10 restored, the pass starts at {resumed.pos}"
        resumed.run()
        _refused(
            lambda: engine.prefill(model, model.new_state(), prompt, marks=[len(prompt)]), "a mark at the end"
        )
        # a bad token id is refused at prefill_open or at the step whose chunk holds it, before that forward
        _refused(
            lambda: engine.prefill(model, model.new_state(), [1, vocab]).run(), "a prompt id of vocab_size"
        )
        for k in pf.kept:
            k.state.release()
        pf.state.release()
        resumed.state.release()

    def cancel_request() -> None:
        conn.notify("$/cancelRequest", {"id": 10**9})  # a request it never had: it must go on serving
        session = engine.session(model)  # a request it must answer (load_model is cached by the client)
        session.release()

    def malformed() -> None:
        _not_json(conn)
        session = engine.session(model)
        bad = {
            "session": session.handle,
            "prompt": "1 2 3",
            "max_tokens": 1,
            "stop_tokens": [],
            "sampler": "greedy",
        }
        _error(lambda: conn.request("generate", bad), ErrorCode.INVALID_PARAMS, "a prompt that is a string")
        session.release()

    def unknown_method() -> None:
        _error(lambda: conn.request("no_such_method", {}), ErrorCode.METHOD_NOT_FOUND, "an unknown method")

    def lanes() -> None:
        host = engine.lane_host(model, chunk_cap=None, pages=4, page_size=16, max_streams=2)
        cancel = engine.cancel_token()
        a = host.submit([1, 2, 3], 3, cancel=cancel.with_budget(2))
        b = host.submit([4] * 20, 2)
        _refused(lambda: host.submit([5], 0), "lane_submit with max_tokens 0")
        try:
            host.submit([6] * 80, 2)
        except errors.LaneRefused:
            pass
        else:
            raise AssertionError("a submit past the pool was admitted")
        host.round()
        host.cancel(b)
        host.resume(b)
        host.run()
        assert len(host.tokens(a)) == 2 and host.stats(a).phase == "done", "stream a: budget 2"
        assert len(host.state_digest(a)) == 64
        free, used, total = host.pool()
        assert free + used == total
        host.leave(a)
        host.leave(b)
        host.release()
        # every size null: the engine's defaults (§4.14) take a short run
        plain = engine.lane_host(model)
        c = plain.submit([1, 2, 3], 2)
        plain.run()
        assert len(plain.tokens(c)) == 2, "a lane host with the engine's default sizes runs a 2-token stream"
        plain.release()

    def sample() -> None:
        sampler = engine.sampler(temperature=1.0, top_k=2, seed=0)
        row = np.array([1.0, 1.0, 1.0, 0.0], np.float32)
        assert list(sampler.pick(row, np.array([0.0, 0.5]))) == [0, 1]
        assert sampler(row) in (0, 1)
        assert engine.greedy()(np.array([0.0, 2.0, 2.0], np.float32)) == 1
        _refused(lambda: engine.sampler(temperature=float("nan")), "a NaN temperature")
        if batches(engine.version):  # 1.2: one call, the same tokens as one draw at a time
            batched = engine.sampler(temperature=1.0, seed=7).draws(row, 9)
            one_by_one = engine.sampler(temperature=1.0, seed=7)
            singles = [one_by_one(row) for _ in range(9)]
            assert list(batched) == singles, (
                f"sample_draws answered {list(batched)}, 9 sample_draw calls of a sampler of the same seed "
                f"{singles} [rule: sample_draws answers what count successive sample_draw calls would]"
            )

    probe("generate, $/poll, $/forward, $/token, $/sample, refusals", "generate", generate)
    probe("state: copy independence both ways, bytes, digest, releases", "state", state)
    probe("prefill: null chunk_cap, marks, starts, kept prefix, refusal", "prefill", prefill)
    probe("$/cancelRequest: the engine goes on serving", "generate", cancel_request)
    probe("an unknown method is -32601", "generate", unknown_method)
    probe("a line that is not JSON is -32700, params that break the schema -32602", "generate", malformed)
    probe("lanes: submit, round, cancel, resume, leave, status, digest, -32013", "lanes", lanes)
    probe("sample: pick, draw, greedy, refusal; 1.2: draws", "sample", sample)
    return out


def _not_json(conn: Connection) -> None:
    """Send a line that is not JSON; the engine answers -32700 with `"id": null` (over HTTP: a 400 carrying it)."""
    line, transport = b"{not json", conn.transport
    if isinstance(transport, HttpTransport):
        post = http.client.HTTPConnection(transport.host, transport.port, timeout=conn.timeout)
        try:
            post.request(
                "POST", transport.path, body=line + b"\n", headers={"Content-Type": "application/json"}
            )
            resp = post.getresponse()
            text = f"{resp.reason} {resp.read(4096).decode('utf-8', 'replace')}"
        except (OSError, http.client.HTTPException) as exc:
            raise AssertionError(f"POST of a line that is not JSON: {exc}") from None
        finally:
            post.close()
        assert resp.status == 400 and str(int(ErrorCode.PARSE_ERROR)) in text, (
            f"a line that is not JSON got HTTP {resp.status} {text[:200]!r}, not 400 carrying -32700"
        )
        conn.seen[f"error {int(ErrorCode.PARSE_ERROR)}"] += 1
        return
    assert isinstance(transport, StdioTransport)
    who = f"engine {transport.description}"
    try:
        transport.send(line, request_id=None, timeout=conn.timeout)
    except TransportError as exc:
        conn.fail(errors.EngineCrashed(f"{who}: {exc} (sending a line that is not JSON)"))
    reply: Any = {"method": "$/log"}
    while isinstance(reply, dict) and reply.get("method") == "$/log":  # $/log MAY come any time
        kind, value = transport.recv(conn.timeout)
        if kind == "timeout":
            conn.fail(
                errors.EngineTimeout(f"{who}: no reply to a line that is not JSON for {conn.timeout:g} s")
            )
        if kind != "line":
            conn.fail(errors.EngineCrashed(f"{who}: {kind} {value} after a line that is not JSON"))
        try:
            reply = boundedjson.loads(
                value, what="the reply to a line that is not JSON", max_bytes=conn.max_line
            )
        except boundedjson.JsonFormatError as exc:
            conn.fail(errors.MalformedMessage(f"{who}: {exc}"))
    error = reply.get("error") if isinstance(reply, dict) else None
    if not isinstance(error, dict) or reply.get("id", 0) is not None:
        conn.fail(
            errors.ProtocolViolation(
                f"{who}: a line that is not JSON was answered {value[:120]!r}, not an error with id null"
            )
        )
    conn.seen[f"error {error.get('code')}"] += 1
    assert error.get("code") == ErrorCode.PARSE_ERROR, (
        f"a line that is not JSON got error {error.get('code')}, not -32700"
    )


def spec_parts(version: str = PROTOCOL_VERSION) -> list[str]:
    """Every message the version carries and every error code a conformance run provokes on it."""
    parts = [
        *HARNESS_REQUESTS,
        *HARNESS_NOTIFICATIONS,
        *ENGINE_REQUESTS,
        *(m for m in ENGINE_NOTIFICATIONS if m != "$/log"),  # $/log: an engine MAY send it
        *(f"error {int(c)}" for c in PROVOKED),
    ]
    if version == PROTOCOL_VERSION:
        return parts
    # a 1.1 engine: 1.2's batched calls are not applicable, a 1 engine: nor are 1.1's messages; either refused a
    # newer version at initialize (-32001)
    dropped = ONLY_1_1 | set(BATCHED) if version == V1 else set(BATCHED)
    return [p for p in parts if p not in dropped] + [f"error {int(ErrorCode.UNSUPPORTED_PROTOCOL_VERSION)}"]


def unexercised(seen: dict[str, int], parts: list[str] | None = None) -> list[str]:
    return [p for p in (parts or spec_parts()) if not seen.get(p)]
