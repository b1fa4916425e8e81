"""The engine protocol: what a target must offer for each contract capability.

A falsifier never imports an engine; it asks the `engine` fixture (`falsify gate --engine NAME`, or
`module:factory`) for objects with the shapes below. Every engine offers `name` and `supports(capability)`; the
rest is needed only for the capabilities it supports. `supports` answers None (supported) or the reason it is not,
and the plugin reports each prediction needing a missing capability NOT APPLICABLE with that reason, never PASS.

    capability  engine methods                              what the falsifiers do with them
    quant       q4_k()                                      quantize / dequantize / matvec Q4_K blocks
    model       load_model("f32"), gdn_kernels()            forward over cuts; the two GDN kernel twins
    generate    load_model("f32"), session(model),          generate with a cancel token; read the Run record
                cancel_token()
    prefill     load_model("f32"), prefill(model, state,    open a stepped prefill, step it chunk by chunk,
                prompt, ...), cancel_token()                compare state digests and logits
    lanes       lane_host(model, ...)                       submit / round / cancel / leave over a shared pool
    sample      sampler(temperature, top_k, top_p, seed),   map uniforms through pick(); draw seeded tokens;
                greedy()                                    greedy's pick on (near-)tied logits
    trace       load_checkpoint(path), trace(model,         compare logits, every layer's output and the GDN
                tokens, state) -> {logits, hidden, conv,    states with committed HF golden data
                recurrent}
    gguf        tiny_model_path(), export_gguf(checkpoint,   write the tiny checkpoint as a llama.cpp qwen35
                out, weights), load_checkpoint(path)        GGUF; compare with llama.cpp's converter and read back
    openai      complete(prompt, max_tokens, ...),          requests to an OpenAI-compatible HTTP server, read
                open_stream(...), self_report()             as its client sees them (adapters/openai.py)

Three rules make the observations the engine's own rather than a story the adapter tells:
  - `prefill` must advance the state only through `model.forward(tokens, state)` of the model object it is
    given, so a test that wraps the model (a recorder) sees every cut;
  - a `Run`'s counters are measured where the work happens (a hook on the forward, a poll counter on the token),
    never derived from the number of tokens.
  - `lane_host(model, ...)` likewise forwards only through the model it is given, and polls each stream's cancel
    token (the one passed to `submit`) with `is_cancelled()`: the lane falsifiers give it the harness's proxy
    and tokens and count the forwards and polls themselves.

The classes here are `typing.Protocol`s for documentation and static checks; `missing(engine, capability)` lists
the attributes an engine lacks for a capability (tests/test_engines.py runs it on every registered engine).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

# The capability names a contract may `require` (contracts/schema/contract-v1.schema.json), with the engine
# methods each one needs. `name` and `supports` are needed by all.
CAPABILITIES: dict[str, tuple[str, ...]] = {
    "quant": ("q4_k",),
    "model": ("load_model", "gdn_kernels"),
    "generate": ("load_model", "session", "cancel_token"),
    "prefill": ("load_model", "prefill", "cancel_token"),
    "lanes": ("load_model", "lane_host", "session"),
    "sample": ("sampler", "greedy"),
    "trace": ("load_checkpoint", "trace"),
    "gguf": ("tiny_model_path", "export_gguf", "load_checkpoint"),
    "openai": ("complete", "open_stream", "self_report"),
    # measured by the adapter, not declared: does the server run one request at a time, or several at once;
    # does it publish a tokens-predicted counter
    "one_slot": ("complete", "open_stream"),
    "parallel_slots": ("complete", "open_stream"),
    "metrics": ("self_report",),
}
# Offered by an OpenAI-compatible server behind `--engine openai+http://...` (adapters/openai.py), not in process.
SERVER_CAPABILITIES = frozenset({"openai", "one_slot", "parallel_slots", "metrics"})


@runtime_checkable
class Engine(Protocol):
    """The object `--engine` names. Everything else is reached through it."""

    name: str

    def supports(self, capability: str) -> str | None:
        """None when `capability` is supported, else a one-line reason (shown as NOT APPLICABLE: reason)."""
        ...


class CancelToken(Protocol):
    """What a generation loop polls. `polls` counts is_cancelled() calls (0 for never())."""

    @property
    def polls(self) -> int: ...

    def is_cancelled(self) -> bool:
        """The loop's poll: counts one poll, then answers."""
        ...

    def cancel(self) -> None:
        """Request cancellation; any thread."""
        ...


class CancelTokenFactory(Protocol):
    """`engine.cancel_token()`: the token class. `Factory()` can be cancelled; `with_budget(n)` answers false to
    n polls and true after; `never()` never cancels and counts nothing."""

    def __call__(self) -> CancelToken: ...

    def with_budget(self, n: int) -> CancelToken: ...

    def never(self) -> CancelToken: ...


class ModelConfig(Protocol):
    vocab_size: int
    max_position_embeddings: int
    chunk_size: int  # the width the engine groups a forward call's tokens into (its chunk grid)


class StreamState(Protocol):
    """One stream's state between forward calls (KV, conv and recurrent state for a hybrid model)."""

    pos: int  # tokens consumed

    def to_bytes(self) -> bytes:
        """Deterministic serialisation: equal content gives equal bytes, whatever memory holds it."""
        ...

    def digest(self) -> str:
        """sha256 hex of to_bytes()."""
        ...

    def copy(self) -> StreamState:
        """A deep copy: advancing one never changes the other."""
        ...

    def release(self) -> None: ...


class Model(Protocol):
    """The model object: the unit a prefill steps and a recorder wraps."""

    config: ModelConfig

    def new_state(self, pool: Any = None) -> StreamState: ...

    def forward(self, tokens: np.ndarray, state: StreamState) -> np.ndarray:
        """Logits f32[len(tokens), vocab]; advances `state` by len(tokens)."""
        ...


class PagedModel(Model, Protocol):
    """A model whose attention KV lives in a page pool shared by streams (needed for `lanes`)."""

    def new_pool(self, pages: int, page_size: int) -> Any: ...


class Run(Protocol):
    """The record `Session.generate` returns: the cancellation contract's observables."""

    tokens: Sequence[int]  # emitted, in order
    emitted: int
    decode_forwards: int  # one-token forwards on a previously emitted token
    prefill_forwards: int  # forward calls spent on the prompt
    polls: int  # cancel-token polls this run made
    positions: Sequence[int]  # position of the token each decode forward consumed
    wasted_forwards: int  # forwards whose logits produced no emitted token
    stop_reason: Any  # str() is "cancelled", "max_tokens" or "stop_token"
    prompt_len: int


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A `Run` as a frozen record, for adapters to return from `generate` (the broken and HF adapters do; the wire
    client's WireRun adds what it reused)."""

    tokens: tuple[int, ...]
    emitted: int
    decode_forwards: int
    prefill_forwards: int
    polls: int
    positions: tuple[int, ...]
    wasted_forwards: int
    stop_reason: str
    prompt_len: int


class Session(Protocol):
    def generate(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        cancel: CancelToken | None = None,
        stop_tokens: Iterable[int] = (),
        sampler: Callable[[np.ndarray], int] = ...,
        on_token: Callable[[int], object] | None = None,
    ) -> Run:
        """Emit up to max_tokens tokens after `prompt`. `sampler` maps logits f32[vocab] to a token id (default
        greedy); `on_token` sees each token as it is emitted."""
        ...


class Sampler(Protocol):
    """`engine.sampler(temperature=1.0, top_k=None, top_p=None, seed=0)`: softmax(logits / temperature), cut to
    the top-k logits, then to the top-p nucleus, renormalised over what is kept."""

    def __call__(self, logits: np.ndarray) -> int:
        """One token drawn with the sampler's own seeded RNG: exactly one uniform draw per call."""
        ...

    def pick(self, logits: np.ndarray, u: Any) -> Any:
        """The inverse CDF: the kept tokens laid out on [0, 1) in descending logit order (ties: lower id first),
        each over its probability; the token whose interval holds u. `u` a float, or an array (ids back)."""
        ...


class KeptPrefix(Protocol):
    tokens: tuple[int, ...]
    state: StreamState  # has consumed exactly `tokens`; never advanced


class Prefill(Protocol):
    """`engine.prefill(model, state, prompt, chunk_cap=None, kept=(), marks=(), starts=(), keep_logits=False)`:
    a pass over prompt[state.pos:] planned into chunks, run one chunk per step()."""

    state: StreamState  # the stream's state (a copy of a kept prefix when one was restored)
    logits: np.ndarray | None  # [vocab] of the last token forwarded so far
    chunk_logits: list[np.ndarray] | None  # every chunk's [T, vocab] logits when keep_logits
    kept: list[KeptPrefix]  # a snapshot at every mark

    @property
    def pos(self) -> int: ...

    @property
    def done(self) -> bool: ...

    def step(self) -> bool:
        """Run exactly one chunk through model.forward; True when the pass is done."""
        ...

    def run(self, cancel: CancelToken | None = None) -> bool:
        """Step until done, polling `cancel` before each chunk; False when the cancel stopped it."""
        ...


class LaneHost(Protocol):
    """Streams sharing one model: one decode step per decoding stream and at most one prefill chunk per round."""

    def submit(self, prompt: Sequence[int], max_tokens: int, cancel: Any = None) -> int:
        """A new stream's id; a stream that cannot fit (no free lane, or fewer free pages than its whole run
        needs) is refused with an exception whose class is named `LaneRefused`, allocating nothing
        (FALSIFY-SERVE-PREFILL-019)."""
        ...

    def round(self) -> Any: ...

    def cancel(self, stream: int) -> None: ...

    def resume(self, stream: int) -> None: ...

    def leave(self, stream: int) -> None: ...

    def busy(self) -> bool: ...

    def run(self) -> int: ...

    def pool(self) -> tuple[int, int, int]:
        """(free, used, total) pages."""
        ...

    def streams(self) -> tuple[int, ...]: ...

    def tokens(self, stream: int) -> list[int]: ...

    def decode_gaps(self, stream: int) -> list[int]: ...

    def state_digest(self, stream: int) -> str: ...

    def stats(self, stream: int) -> Any: ...


def missing(engine: Any, capability: str) -> list[str]:
    """Attributes `engine` lacks for `capability` (empty when it offers them all)."""
    if capability not in CAPABILITIES:
        raise ValueError(f"unknown capability {capability!r}: one of {', '.join(CAPABILITIES)}")
    lacking = [] if isinstance(getattr(engine, "name", None), str) else ["name"]
    return lacking + [
        m for m in ("supports", *CAPABILITIES[capability]) if not callable(getattr(engine, m, None))
    ]
