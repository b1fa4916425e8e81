"""A wire engine, seen by the falsifiers through the same Python interface as an in-process one.

`--engine exec:"CMD ARGS"` or `--engine http://127.0.0.1:PORT` makes a `WireEngine`: `load_model`, `session`,
`cancel_token` (and models' `new_state` / `forward` / states' `to_bytes` / `digest` / `copy` / `release` when the
engine offers the `state` capability). docs/engine-protocol.md is the protocol.

The harness stays the judge (judge.py). During `generate` the engine asks the harness before each forward that
could produce a token (`$/poll`, answered from the harness's own cancel token, which counts the poll), reports every
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
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

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
from falsify.engines.wire.connection import Connection
from falsify.engines.wire.events import EventState, WireRun, checked_ids, checked_logits, engine_bytes
from falsify.engines.wire.judge import Judge
from falsify.engines.wire.messages import (
    PROTOCOL_VERSIONS,
    V1,
    V1_CAPABILITIES,
)
from falsify.engines.wire.transports import TransportError, open_transport
from falsify.errors import terminal_safe

DEFAULT_TIMEOUT = (
    WIRE_TIMEOUT  # seconds the harness waits for each message of the engine (FALSIFY_WIRE_TIMEOUT)
)
DEFAULT_MAX_LINE = WIRE_MAX_LINE  # bytes in one message line (FALSIFY_WIRE_MAX_LINE)
MAX_RESTARTS = 3  # fresh engine processes a run starts after wire breaks (WireEngine.restart)

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
        # each digest lane_digest answered -> the history (tokens fed) it names, on this engine
        self.lane_digests: dict[str, tuple[int, ...]] = {}
        self._lock = threading.Lock()
        self.generation = 0  # the engine process this object talks to: +1 at each restart
        self.restarts = 0
        self._carried: Counter[str] = Counter()  # messages seen by the processes before a restart

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def connection(self) -> Connection:
        with self._lock:
            if self._failure is not None:
                raise self._failure.again()
            if self._conn is not None and isinstance(self._conn.failure, errors.CallAbandoned):
                self._replace()  # the harness left a call, the engine did not break: a fresh one, not counted
            if self._conn is None:
                try:
                    self._conn = self._start()
                except errors.WireError as exc:
                    self._failure = exc
                    raise
            if self._conn.failure is not None:
                raise self._conn.failure.again()
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

    @property
    def failure(self) -> errors.WireError | None:
        """The error that ended the connection (or its start), else None."""
        if self._failure is not None:
            return self._failure
        return self._conn.failure if self._conn is not None else None

    def restart(self) -> bool:
        """After a wire break in a running engine, start a fresh one for the next falsifier (issue #46: one break
        made every later prediction an ERROR row). Not for an engine that failed to start, nor more than
        MAX_RESTARTS times a run: after that, every later call raises at once one error naming the budget and
        the last break. Models loaded before are loaded again in the new process when next used
        (WireModel.handle); other handles of the old process are gone. True when the next call starts a new
        process."""
        with self._lock:
            if self._failure is not None or self._conn is None or self._conn.failure is None:
                return False
            broke = self._conn.failure
            if isinstance(broke, errors.CallAbandoned):
                self._replace()
                return True
            if self.restarts >= MAX_RESTARTS:
                self._failure = type(broke)(
                    f"engine {self.spec}: broke {self.restarts + 1} times in this run, not started again (at "
                    f"most {MAX_RESTARTS} restarts a run); the last break: {broke}"
                )
                return False
            self._replace()
            self.restarts += 1
            return True

    def _replace(self) -> None:
        """Drop the ended connection (its lock held): the next call starts a new engine process."""
        assert self._conn is not None
        self._conn.close(grace=0)
        self._carried.update(self._conn.seen)  # the run's wire coverage counts every process's messages
        self._conn = None
        self.generation += 1

    def wire_seen(self) -> Counter[str]:
        """Each message and error code of the protocol this run exercised, in every engine process it started."""
        return self._carried + (self._conn.seen if self._conn is not None else Counter())

    def last_message(self) -> str:
        """The last line the engine sent on the current connection, clipped, for naming a break; "" if none."""
        line = self._conn.last_line if self._conn is not None else b""
        return terminal_safe(line.decode("utf-8", "replace"))

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
            self._models[weights] = WireModel(
                self, result["model"], WireConfig(**result["config"]), weights=weights
            )
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
        ids, mark_ids = token_list(prompt, "prompt"), token_list(marks, "marks")
        params = {
            "state": state.handle,
            "prompt": ids,
            "chunk_cap": chunk_cap,
            "marks": mark_ids,
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
        pf.marks = frozenset(mark_ids)
        return pf


@dataclass(frozen=True, slots=True)
class WireConfig:
    vocab_size: int
    max_position_embeddings: int
    chunk_size: int


class WireModel:
    """A model loaded in the engine. `forward` and states need the engine's `state` capability."""

    def __init__(self, engine: WireEngine, handle: str, config: WireConfig, weights: str = "f32") -> None:
        self.engine = engine
        self._handle = handle
        self.config = config
        self.weights = weights
        self.generation = engine.generation

    @property
    def handle(self) -> str:
        """The model's handle in the running engine process: loaded again there after a restart, so a falsifier's
        module-scoped model keeps working (its config must not change)."""
        if self.generation != self.engine.generation:
            conn = self.engine.connection()
            result = conn.request("load_model", {"weights": self.weights, "path": None})
            config = WireConfig(**result["config"])
            if config != self.config:
                conn.fail(
                    errors.ProtocolViolation(
                        f"engine {self.engine.spec}: restarted, it loaded the model with config {config}, "
                        f"not {self.config}"
                    )
                )
            self._handle, self.generation = result["model"], self.engine.generation
        return self._handle

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
        return engine_bytes(self.engine, result["bytes"], "state_bytes result")

    def digest(self) -> str:
        """The engine's digest, checked against sha256 of the state bytes it sends for the same state."""
        conn = self.engine.connection()
        digest = str(conn.request("state_digest", {"state": self.handle})["digest"])
        got = conn.request("state_bytes", {"state": self.handle})
        measured = hashlib.sha256(engine_bytes(self.engine, got["bytes"], "state_bytes result")).hexdigest()
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
        self.marks: frozenset[int] = frozenset()

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
        for i, item in enumerate(result["kept"]):
            where = f"prefill_step result kept[{i}].tokens"
            tokens = checked_ids(self.engine, item["tokens"], vocab, where)
            if tokens != self.prompt[: self.state.pos] or self.state.pos not in self.marks:
                self.engine.connection().fail(
                    errors.ProtocolViolation(
                        f"engine {self.engine.spec}: {where} holds {len(tokens)} tokens {tokens[:8]}...; the step "
                        f"ended at {self.state.pos} (marks {sorted(self.marks)[:8]}), where the prompt's prefix is "
                        f"{self.prompt[:8]}... [rule: a kept snapshot is the prompt's prefix at a mark, taken at "
                        "the chunk's end]"
                    )
                )
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
        judge = Judge(
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


def _version() -> str:
    try:
        return importlib.metadata.version("falsify")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
