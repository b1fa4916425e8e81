"""A wire engine, seen by the falsifiers through the same Python interface as an in-process one.

`--engine exec:"CMD ARGS"` or `--engine http://127.0.0.1:PORT` makes a `WireEngine`: `load_model`, `session`,
`cancel_token` (and models' `new_state` / `forward` / states' `to_bytes` / `digest` / `copy` / `release` when the
engine offers the `state` capability). docs/engine-protocol.md is the protocol.

The harness stays the judge. During `generate` the engine asks the harness before each forward that could
produce a token (`$/poll`, answered from the harness's own cancel token, which counts the poll), reports every
forward before running it (`$/forward`: start position and tokens fed), and reports every token (`$/token`). The
`Run` returned is built from those events as the harness counted them; the engine's own counts (`claims`) are
kept beside it, never used. Each reported forward is also replayed, without running anything, through
`model.forward` of the model object the session was made with, so a harness proxy around the model
(falsify.harness.instruments.CountingModel) sees every forward the engine ran. An event stream that cannot be
true (a token with no forward reported before it, a forward that skips positions or feeds other tokens than the
prompt or the previous token, a result contradicting the events) is a ProtocolViolation.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.metadata
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from falsify.engines.calls import CheckedGenerate, GenerateCall
from falsify.engines.cancel import HarnessCancel
from falsify.engines.env_settings import (
    WIRE_MAX_LINE,
    WIRE_TIMEOUT,
    wire_call_timeout,
    wire_max_line,
    wire_timeout,
)
from falsify.engines.prefill import Stepped
from falsify.engines.tokens import token_list
from falsify.engines.wire import errors
from falsify.engines.wire.connection import Connection, EngineRefused
from falsify.engines.wire.events import EventState, WireRun, _engine_bytes, checked_logits
from falsify.engines.wire.messages import (
    PROTOCOL_VERSIONS,
    V1,
    V1_CAPABILITIES,
    ErrorCode,
)
from falsify.engines.wire.transports import TransportError, open_transport

DEFAULT_TIMEOUT = (
    WIRE_TIMEOUT  # seconds the harness waits for each message of the engine (FALSIFY_WIRE_TIMEOUT)
)
DEFAULT_MAX_LINE = WIRE_MAX_LINE  # bytes in one message line (FALSIFY_WIRE_MAX_LINE)

# falsify capabilities (falsify/engines/protocol.py) a wire engine can serve, and the wire capability each needs.
# `lanes` also needs `generate`: its falsifiers compare each stream's tokens with the same request run alone.
SERVED = {
    "generate": ("generate",),
    "prefill": ("prefill", "state"),
    "lanes": ("lanes", "generate"),
    "sample": ("sample",),
}


class WireEngine:
    """The engine object `--engine exec:...` / `--engine http://...` makes. Connects on first use, so a failure to
    start or handshake is an ERROR for each prediction it touches, named, rather than a crash at collection."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.name = spec
        self.timeout = wire_timeout(errors.EngineStartError)
        self.call_timeout = wire_call_timeout(errors.EngineStartError)
        self.max_line = wire_max_line(errors.EngineStartError)
        self.info: dict[str, Any] = {}
        self.capabilities: frozenset[str] = frozenset()
        self.version = ""  # the protocol version the engine answered initialize with
        self._conn: Connection | None = None
        self._failure: errors.WireError | None = None
        self._models: dict[str, WireModel] = {}
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def connection(self) -> Connection:
        with self._lock:
            if self._failure is not None:
                raise self._failure
            if self._conn is None:
                try:
                    self._conn = self._start()
                except errors.WireError as exc:
                    self._failure = exc
                    raise
            if self._conn.failure is not None:
                raise self._conn.failure
            return self._conn

    def _start(self) -> Connection:
        try:
            transport = open_transport(self.spec, max_line=self.max_line, timeout=self.timeout)
        except TransportError as exc:
            raise errors.EngineStartError(str(exc)) from None
        conn = Connection(
            transport, timeout=self.timeout, max_line=self.max_line, call_timeout=self.call_timeout
        )
        atexit.register(conn.close)
        try:
            self._handshake(conn)
        except (
            errors.WireError
        ) as exc:  # an error reply to initialize: stop the engine too, not only refuse it
            if conn.failure is None:
                conn.fail(exc)
            raise
        return conn

    def _handshake(self, conn: Connection) -> None:
        harness = {"name": "falsify", "version": _version()}
        result: dict[str, Any] | None = None
        for offered in PROTOCOL_VERSIONS:  # newest first; an engine refuses a version it does not speak
            try:
                result = conn.request("initialize", {"protocolVersion": offered, "harness": harness})
                break
            except errors.ProtocolVersionMismatch as refused:
                if offered == PROTOCOL_VERSIONS[-1]:
                    conn.fail(refused)
            except (errors.EngineRefusal, errors.LaneRefused) as refused:
                # any refusal of initialize is final: the engine is stopped and every later call raises this
                # (issue #48: an engine answering initialize with an error was started again for every call)
                conn.fail(errors.EngineStartError(f"engine {self.spec}: initialize refused: {refused}"))
        assert result is not None
        if result["protocolVersion"] not in PROTOCOL_VERSIONS:
            conn.fail(
                errors.ProtocolVersionMismatch(
                    f"engine {self.spec} speaks {result['protocolVersion']!r}; the harness speaks "
                    f"{' or '.join(map(repr, PROTOCOL_VERSIONS))}"
                )
            )
        self.version = result["protocolVersion"]
        self.info = result["engine"]
        capabilities = frozenset(result["capabilities"])
        if self.version == V1:  # a 1.0 engine: what it names beyond 1.0 is not carried
            capabilities &= frozenset(V1_CAPABILITIES)
        self.capabilities = capabilities

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()

    # -- the engine protocol (falsify/engines/protocol.py) ------------------------------------------------------
    def supports(self, capability: str) -> str | None:
        self.connection()
        wire = SERVED.get(capability)
        if wire is None:
            return f"the wire protocol ({self.version}) does not carry {capability!r}"
        if self.version == V1 and any(c not in V1_CAPABILITIES for c in wire):
            return f"engine {self.info.get('name', self.spec)} speaks {self.version}, which does not carry {capability!r}"
        lacking = [c for c in wire if c not in self.capabilities]
        if lacking:
            return f"engine {self.info.get('name', self.spec)} does not offer {' and '.join(map(repr, lacking))} over the wire"
        return None

    def load_model(self, weights: str = "f32") -> WireModel:
        if weights not in self._models:
            result = self.connection().request("load_model", {"weights": weights, "path": None})
            self._models[weights] = WireModel(self, result["model"], WireConfig(**result["config"]))
        return self._models[weights]

    def session(self, model: Any) -> WireSession:
        return WireSession(self, model)

    def cancel_token(self) -> type[HarnessCancel]:
        return HarnessCancel

    def lane_host(
        self,
        model: Any,
        chunk_cap: int | None = None,
        pages: int | None = None,
        page_size: int | None = None,
        max_streams: int | None = None,
    ) -> Any:
        """A lane host in the engine (capability `lanes`, 1.1); forwards replayed through `model` (lanes.py)."""
        from falsify.engines.wire.lanes import WireLaneHost

        return WireLaneHost(self, model, chunk_cap, pages, page_size, max_streams)

    def sampler(
        self, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None, seed: int = 0
    ) -> Any:
        """A sampler in the engine (capability `sample`, 1.1); the engine refuses bad parameters (-32010)."""
        from falsify.engines.wire.sample import WireSampler

        return WireSampler(self, temperature, top_k, top_p, seed)

    def greedy(self) -> Any:
        from falsify.engines.wire.sample import WireGreedy

        return WireGreedy(self)

    def prefill(
        self,
        model: Any,
        state: WireState,
        prompt: Sequence[int],
        chunk_cap: int | None = None,
        kept: Any = (),
        marks: Iterable[int] = (),
        starts: Iterable[int] = (),
        keep_logits: bool = False,
    ) -> WirePrefill:
        """A stepped prefill in the engine (protocol §4.13). `model` is the falsifier's model object (a recorder
        around a WireModel): each chunk the engine reports is replayed through its `forward` on `state`."""
        snapshots = [kept] if isinstance(kept, WireKept) else list(kept)
        ids = token_list(prompt, "prompt")
        params = {
            "state": state.handle,
            "prompt": ids,
            "chunk_cap": chunk_cap,
            "marks": token_list(marks, "marks"),
            "starts": token_list(starts, "starts"),
            "kept": [{"tokens": list(k.tokens), "state": k.state.handle} for k in snapshots],
            "keep_logits": bool(keep_logits),
        }
        result = self.connection().request("prefill_open", params)
        if result["state"] != state.handle:  # a kept prefix was restored: the stream's state is a copy of it
            state = WireState(self, result["state"], result["pos"])
        elif result["pos"] != state.pos:
            raise errors.ProtocolViolation(f"prefill_open left the state at {result['pos']}, not {state.pos}")
        pf = WirePrefill(self, model, state, result["prefill"], result["done"], keep_logits)
        pf.prompt = ids
        return pf


@dataclass(frozen=True, slots=True)
class WireConfig:
    vocab_size: int
    max_position_embeddings: int
    chunk_size: int


class WireModel:
    """A model loaded in the engine. `forward` and states need the engine's `state` capability."""

    def __init__(self, engine: WireEngine, handle: str, config: WireConfig) -> None:
        self.engine = engine
        self.handle = handle
        self.config = config

    def _needs_state(self) -> Connection:
        conn = self.engine.connection()
        if "state" not in self.engine.capabilities:
            raise errors.EngineErrorReply(
                f"engine {self.engine.spec} does not offer 'state' (forward, states)"
            )
        return conn

    def new_state(self, pool: Any = None) -> WireState:
        result = self._needs_state().request("new_state", {"model": self.handle})
        return WireState(self.engine, result["state"], result["pos"])

    def forward(self, tokens: Any, state: Any) -> np.ndarray | None:
        if isinstance(state, EventState):
            return None  # a forward the engine reported during generate: it runs there, not here
        if getattr(state, "replaying", False):  # a prefill chunk the engine reported: it ran there
            state.pos += len(token_list(tokens, "tokens"))
            return None
        ids = token_list(tokens, "tokens")
        result = self._needs_state().request("forward", {"state": state.handle, "tokens": ids})
        vocab = self.config.vocab_size
        logits = checked_logits(self.engine, result["logits"], "forward result logits", (len(ids), vocab))
        if result["pos"] != state.pos + len(ids):
            self.engine.connection().fail(
                errors.ProtocolViolation(
                    f"engine {self.engine.spec}: forward of {len(ids)} tokens from {state.pos} answered pos "
                    f"{result['pos']} [rule: a forward advances the state by its tokens]"
                )
            )
        state.pos = result["pos"]
        return logits


class WireState:
    def __init__(self, engine: WireEngine, handle: str, pos: int) -> None:
        self.engine = engine
        self.handle = handle
        self.pos = pos
        self.replaying = False  # set while a reported prefill chunk is replayed through the model object

    def to_bytes(self) -> bytes:
        result = self.engine.connection().request("state_bytes", {"state": self.handle})
        return _engine_bytes(self.engine, result["bytes"], "state_bytes result")

    def digest(self) -> str:
        """The engine's digest, checked against sha256 of the state bytes it sends for the same state."""
        conn = self.engine.connection()
        digest = str(conn.request("state_digest", {"state": self.handle})["digest"])
        got = conn.request("state_bytes", {"state": self.handle})
        measured = hashlib.sha256(_engine_bytes(self.engine, got["bytes"], "state_bytes result")).hexdigest()
        if measured != digest:
            conn.fail(
                errors.ProtocolViolation(
                    f"engine {self.engine.spec}: state_digest of {self.handle} is {digest[:16]}..., sha256 of its "
                    f"state_bytes is {measured[:16]}... [rule: the digest is sha256 of the state bytes]"
                )
            )
        return digest

    def copy(self) -> WireState:
        result = self.engine.connection().request("copy_state", {"state": self.handle})
        return WireState(self.engine, result["state"], result["pos"])

    def release(self) -> None:
        self.engine.connection().request("release_state", {"state": self.handle})


@dataclass(frozen=True, slots=True)
class WireKept:
    """A snapshot a prefill kept at a mark: `state` has consumed exactly `tokens`."""

    tokens: tuple[int, ...]
    state: WireState


class WirePrefill(Stepped):
    """A stepped prefill running in the engine: `step()` runs exactly one chunk there. The chunk's `$/forward`
    (exactly one per step, at the state's position, feeding the prompt's tokens there) is checked and replayed
    through the falsifier's model object, so a recorder around the model sees every cut on this state."""

    def __init__(
        self, engine: WireEngine, model: Any, state: WireState, handle: str, done: bool, keep_logits: bool
    ) -> None:
        self.engine, self.model, self.state, self.handle = engine, model, state, handle
        self._done = done
        self.logits: np.ndarray | None = None
        self.chunk_logits: list[np.ndarray] | None = [] if keep_logits else None
        self.kept: list[WireKept] = []
        self.prompt: list[int] = []

    @property
    def pos(self) -> int:
        return self.state.pos

    @property
    def done(self) -> bool:
        return self._done

    def step(self) -> bool:
        forwards: list[tuple[int, list[int]]] = []

        def on_engine(method: str, params: dict[str, Any]) -> dict[str, Any] | None:
            if method != "$/forward":
                raise errors.ProtocolViolation(f"engine {self.engine.spec}: {method} during prefill_step")
            forwards.append((params["start"], params["tokens"]))
            start, fed = params["start"], params["tokens"]
            if len(forwards) > 1 or start != self.state.pos or fed != self.prompt[start : start + len(fed)]:
                self.engine.connection().fail(
                    errors.ProtocolViolation(
                        f"engine {self.engine.spec}: prefill_step reported a forward at {params['start']} "
                        f"(forward {len(forwards)} of the step) feeding {fed[:8]}...; the state was at "
                        f"{self.state.pos}, where the prompt has {self.prompt[start : start + 8]}..."
                    )
                )
            self.state.replaying = True
            try:
                self.model.forward(np.asarray(params["tokens"], dtype=np.int64), self.state)
            finally:
                self.state.replaying = False
            return None

        result = self.engine.connection().request("prefill_step", {"prefill": self.handle}, on_engine)
        if len(forwards) != 1 or result["pos"] != self.state.pos:
            self.engine.connection().fail(
                errors.ProtocolViolation(
                    f"engine {self.engine.spec}: prefill_step reported {len(forwards)} forwards and ended at "
                    f"{result['pos']}; the forwards reported bring the state to {self.state.pos}"
                )
            )
        vocab = self.model.config.vocab_size
        self.logits = checked_logits(self.engine, result["logits"], "prefill_step logits", (vocab,))
        if self.chunk_logits is not None:
            if result["chunk_logits"] is None:
                raise errors.ProtocolViolation(f"engine {self.engine.spec}: keep_logits, but no chunk_logits")
            width = len(forwards[0][1])
            self.chunk_logits.append(
                checked_logits(
                    self.engine, result["chunk_logits"], "prefill_step chunk_logits", (width, vocab)
                )
            )
        for item in result["kept"]:
            self.kept.append(
                WireKept(tuple(item["tokens"]), WireState(self.engine, item["state"], len(item["tokens"])))
            )
        self._done = bool(result["done"])
        return self._done


class WireSession(CheckedGenerate[WireRun]):
    """One stream in the engine. The harness keeps the token history the engine reported feeding, to check
    each forward against it. `generate` checks only what cannot be sent (falsify.engines.calls): an empty
    prompt, an id outside the vocabulary or a run past the context are the engine's to refuse."""

    def __init__(self, engine: WireEngine, model: Any) -> None:
        self.engine = engine
        self.model = model  # the object the falsifier gave: a WireModel, or a proxy around one
        self.handle = engine.connection().request("new_session", {"model": model.handle})["session"]
        self.history: list[int] = []  # tokens the engine's state has consumed, as reported by $/forward

    def _run(self, call: GenerateCall) -> WireRun:
        cancel = call.cancel
        judge = _Judge(
            self, call.prompt, call.max_tokens, frozenset(call.stops), cancel, call.sampler, call.on_token
        )
        polls_before = cancel.polls
        conn = self.engine.connection()
        params = {
            "session": self.handle,
            "prompt": call.prompt,
            "max_tokens": call.max_tokens,
            "stop_tokens": call.stops,
            "sampler": "greedy" if call.sampler is None else "harness",
        }
        result = conn.request("generate", params, judge.on_engine)
        return judge.finish(result, cancel.polls - polls_before)

    def release(self) -> None:
        self.engine.connection().request("release_session", {"session": self.handle})


class _Judge:
    """Counts one generate's events and checks that they can be true."""

    def __init__(
        self,
        session: WireSession,
        prompt: list[int],
        max_tokens: int,
        stops: frozenset[int],
        cancel: Any,
        sampler: Callable[[np.ndarray], int] | None,
        on_token: Callable[[int], object] | None,
    ) -> None:
        self.session, self.prompt, self.max_tokens, self.stops = session, prompt, max_tokens, stops
        self.cancel, self.sampler, self.on_token = cancel, sampler, on_token
        self.tokens: list[int] = []
        self.prefill_forwards = 0
        self.decode_forwards = 0
        self.positions: list[int] = []
        self.first_start: int | None = None
        self.unused = 0  # forwards behind the newest logits while no token has come from them
        self.wasted = 0
        self.fed_since_token = False
        self.sampled: int | None = None
        self.request_id: int | None = None

    def violation(self, text: str) -> NoReturn:
        conn = self.session.engine.connection()
        conn.fail(errors.ProtocolViolation(f"engine {self.session.engine.spec}: {text}"))

    def on_engine(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        if self.request_id is None:
            self.request_id = params["request"]
        elif params["request"] != self.request_id:
            self.violation(f"{method} names request {params['request']}, not the generate in flight")
        if method == "$/poll":
            return {"cancelled": bool(self.cancel.is_cancelled())}
        if method == "$/forward":
            self.forward(params["start"], params["tokens"])
            return None
        if method == "$/sample":
            if self.sampler is None:
                raise EngineRefused(
                    ErrorCode.INVALID_REQUEST, "$/sample: this generate asked for sampler greedy"
                )
            vocab = self.session.model.config.vocab_size
            logits = checked_logits(self.session.engine, params["logits"], "$/sample logits", (vocab,))
            self.sampled = int(self.sampler(logits))
            return {"token": self.sampled}
        self.token(params["token"])  # $/token
        return None

    def forward(self, start: int, fed: list[int]) -> None:
        history = self.session.history
        if start > len(history):
            self.violation(
                f"$/forward at position {start}, but the forwards reported so far brought the state to "
                f"{len(history)}: {start - len(history)} token(s) were fed with no $/forward"
            )
        if not self.tokens:
            expected = self.prompt[start : start + len(fed)]
            if fed != expected:
                self.violation(
                    f"prefill $/forward at {start} fed {fed[:8]}..., the prompt has {expected[:8]}... there"
                )
            self.prefill_forwards += 1
            if self.first_start is None:
                self.first_start = start
            self.unused += 1
        else:
            if fed != [self.tokens[-1]] or start != len(history):
                self.violation(
                    f"decode $/forward at {start} fed {fed[:8]}; expected the previous token [{self.tokens[-1]}] "
                    f"at {len(history)}"
                )
            self.decode_forwards += 1
            self.positions.append(start)
            self.wasted += self.unused
            self.unused = 1
        del history[start:]
        history.extend(fed)
        self.fed_since_token = True
        # replayed through the falsifier's model object, so a harness proxy counts it (runs nothing)
        self.session.model.forward(np.asarray(fed, dtype=np.int64), EventState(start, self.session.handle))

    def token(self, token: int) -> None:
        vocab = self.session.model.config.vocab_size
        if not 0 <= token < vocab:
            self.violation(
                f"$/token {token} outside the vocabulary of {vocab} [rule: token ids lie in [0, vocab_size)]"
            )
        if not self.fed_since_token:
            holds_prompt = not self.tokens and self.session.history == self.prompt
            if not holds_prompt:
                self.violation(
                    f"$/token {token} (token {len(self.tokens)}) with no $/forward reported since the last"
                )
        if self.sampler is not None and self.sampled is None:
            self.violation(
                f"$/token {token} (token {len(self.tokens)}) without first asking the harness's sampler "
                '($/sample) [rule: with sampler "harness", each token is the one $/sample answered]'
            )
        if self.sampler is not None and self.sampled != token:
            self.violation(f"$/token {token}, but the harness's sampler ($/sample) answered {self.sampled}")
        self.sampled = None
        self.tokens.append(token)
        self.unused = 0
        self.fed_since_token = False
        if self.on_token is not None:
            self.on_token(token)

    def finish(self, result: dict[str, Any], polls: int) -> WireRun:
        if list(result["tokens"]) != self.tokens:
            self.violation(
                f"generate returned tokens {result['tokens'][:8]}..., $/token reported {self.tokens[:8]}..."
            )
        if self.tokens and self.tokens[-1] in self.stops:
            stop = "stop_token"
        elif len(self.tokens) >= self.max_tokens:
            stop = "max_tokens"
        else:
            stop = "cancelled"
        if result["stop_reason"] != stop:
            self.violation(f"generate says it stopped for {result['stop_reason']}; its events say {stop}")
        reused = len(self.prompt) if self.tokens and self.prefill_forwards == 0 else self.first_start or 0
        return WireRun(
            tokens=tuple(self.tokens),
            emitted=len(self.tokens),
            decode_forwards=self.decode_forwards,
            prefill_forwards=self.prefill_forwards,
            polls=polls,
            positions=tuple(self.positions),
            wasted_forwards=self.wasted + self.unused,
            stop_reason=stop,
            prompt_len=len(self.prompt),
            reused=reused,
            claims=dict(result.get("claims", {})),
        )


def _version() -> str:
    try:
        return importlib.metadata.version("falsify")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
