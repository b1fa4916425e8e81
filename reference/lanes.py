"""A lane host: many streams over one model, decode rounds shared, at most one prefill chunk per round.

Each stream gets a lane: attention KV in pages of a PagePool shared by every stream, GDN conv and recurrent
state in the stream's own state (its slot). A round gives every decoding stream one decode step and then runs
at most one prefill chunk, round-robin among the prefilling streams, so a decoding stream never waits more
than one chunk for its next token however long a new prompt is (Sarathi-Serve's stall-free batching, arXiv
2403.02310; pages as in vLLM's PagedAttention, arXiv 2309.06180).

Per stream the host keeps Session's semantics: the cancel token is polled once before each token-producing
forward (the whole prefill counts as the first token's forward), and a run that emits n tokens makes n - 1
decode forwards. A submit reserves the pages of its whole run (prompt + max_tokens - 1 positions), so a lane
that was admitted never runs out of pages; a submit that cannot fit is refused with LaneRefused and allocates
nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from falsify.engines.lanes import LaneRounds
from reference.prefill import Prefill, chunk_width
from reference.sampling import greedy


class LaneRefused(RuntimeError):
    """A submit the host cannot fit (too many streams, too few free pages); nothing was allocated."""


class StreamError(LookupError):
    """An operation on a stream id the host does not know, or in a phase that does not allow it."""


class Phase(StrEnum):
    PREFILL = "prefill"  # prompt chunks left to run; queued for one chunk per turn
    PAUSED = "paused"  # prefill cancelled between chunks: state kept at the last chunk's end until resume
    DECODE = "decode"  # one decode step per round
    DONE = "done"  # max_tokens reached or cancelled; lane released, tokens and final digest kept


@dataclass(frozen=True, slots=True)
class StreamStats:
    phase: Phase
    pos: int  # tokens the stream's state has consumed
    emitted: int
    prefill_chunks: int
    decode_forwards: int
    pages: int  # pages the lane holds (0 once released)


@dataclass(frozen=True, slots=True)
class RoundReport:
    round: int
    decoded: tuple[int, ...]  # streams that ran a decode forward this round
    prefilled: tuple[int, int, int] | None  # (stream, start, end) of the one prefill chunk, if any
    emitted: tuple[int, ...]  # streams that emitted a token this round
    finished: tuple[int, ...]  # streams that reached DONE this round


@dataclass(slots=True)
class _Lane:
    id: int
    prompt: tuple[int, ...]
    max_tokens: int
    cancel: Any  # CancelToken or None
    sample: Callable[[np.ndarray], int]
    state: Any  # StreamState; None once released
    prefill: Prefill | None
    phase: Phase = Phase.PREFILL
    polled_first: bool = False  # the first token's poll happens once, before the prefill's first chunk
    tokens: list[int] = field(default_factory=list)
    token_rounds: list[int] = field(default_factory=list)
    prefill_chunks: int = 0
    decode_forwards: int = 0
    digest: str | None = None  # the state's digest when the lane was released
    final_pos: int = 0  # the state's position when the lane was released


class LaneHost(LaneRounds):
    """Streams over one model: `submit`, then `round` until `busy()` is false.

    chunk_cap: tokens per prefill chunk (a multiple of the model's chunk_size; None: chunk_size).
    pages, page_size: the shared KV pool. max_streams: lanes (slots) held at once.
    """

    def __init__(
        self,
        model: Any,
        chunk_cap: int | None = None,
        pages: int = 256,
        page_size: int = 16,
        max_streams: int = 8,
    ) -> None:
        if isinstance(max_streams, bool) or not isinstance(max_streams, int) or max_streams < 1:
            raise ValueError(f"LaneHost: max_streams must be an int >= 1, got {max_streams!r}")
        self.model = model
        self.chunk_cap = chunk_width(model, chunk_cap)
        self._pool = model.new_pool(pages, page_size)
        self.max_streams = max_streams
        self.rounds = 0
        self._lanes: dict[int, _Lane] = {}
        self._queue: deque[int] = deque()  # prefilling streams, next chunk's owner first
        self._next_id = 0

    def submit(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        cancel: Any = None,
        sample: Callable[[np.ndarray], int] = greedy,
    ) -> int:
        """Admit a stream; its first chunk runs in a later round. Raises LaneRefused when it cannot fit."""
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"submit: max_tokens must be an int >= 1, got {max_tokens!r}")
        state = self.model.new_state(self._pool)
        try:
            prefill = Prefill.open(self.model, state, prompt, chunk_cap=self.chunk_cap)  # checks the prompt
            positions = len(prefill.prompt) + max_tokens - 1  # the last emitted token is never forwarded
            self._admit(len(prefill.prompt), max_tokens, positions)
            state.reserve(positions)
        except BaseException:
            state.release()
            raise
        lane = _Lane(self._next_id, prefill.prompt, max_tokens, cancel, sample, state, prefill)
        self._next_id += 1
        self._lanes[lane.id] = lane
        self._queue.append(lane.id)
        return lane.id

    def _admit(self, n_prompt: int, max_tokens: int, positions: int) -> None:
        """Raise LaneRefused unless a lane and the pages of `positions` positions are free."""
        held = sum(lane.state is not None for lane in self._lanes.values())
        if held >= self.max_streams:
            raise LaneRefused(f"submit: all {self.max_streams} lanes are held; a stream must leave or finish")
        limit = int(self.model.config.max_position_embeddings)
        if positions > limit:
            raise LaneRefused(
                f"submit: {n_prompt} prompt + {max_tokens} reply tokens need {positions} "
                f"positions; the model has {limit}"
            )
        free, _, total = self._pool.counts()
        need = -(-positions // self._pool.page_size)
        if need > free:
            raise LaneRefused(
                f"submit: {n_prompt} prompt + {max_tokens} reply tokens need {need} pages "
                f"of {self._pool.page_size} tokens; {free} of {total} are free"
            )

    def round(self) -> RoundReport:
        """One decode step for every decoding stream, then at most one prefill chunk."""
        self.rounds += 1
        decoded, emitted, finished = [], [], []
        for lane in [lane for lane in self._lanes.values() if lane.phase is Phase.DECODE]:
            if self._poll(lane):
                self._finish(lane)
            else:
                logits = self.model.forward(np.asarray(lane.tokens[-1:], np.int64), lane.state)  # [1, vocab]
                lane.decode_forwards += 1
                decoded.append(lane.id)
                self._emit(lane, lane.sample(logits[-1]))
                emitted.append(lane.id)
            if lane.phase is Phase.DONE:
                finished.append(lane.id)
        prefilled = None
        if self._queue:
            lane = self._lanes[self._queue.popleft()]
            assert lane.prefill is not None
            if not lane.polled_first and self._poll(lane):
                self._finish(lane)
                finished.append(lane.id)
            else:
                lane.polled_first = True
                start = lane.prefill.pos
                done = lane.prefill.step()
                lane.prefill_chunks += 1
                prefilled = (lane.id, start, lane.prefill.pos)
                if done:
                    lane.phase = Phase.DECODE
                    assert lane.prefill.logits is not None
                    self._emit(lane, lane.sample(lane.prefill.logits))
                    lane.prefill = None
                    emitted.append(lane.id)
                    if lane.phase is Phase.DONE:
                        finished.append(lane.id)
                else:
                    self._queue.append(lane.id)
        return RoundReport(self.rounds, tuple(decoded), prefilled, tuple(emitted), tuple(finished))

    def cancel(self, stream: int) -> None:
        """Stop a stream.

        Mid-prefill it pauses with its state at the last finished chunk's end (resume goes on from there);
        decoding, it finishes with the tokens emitted so far. A paused or done stream is unchanged.
        """
        lane = self._stream(stream)
        if lane.phase is Phase.PREFILL:
            self._queue.remove(lane.id)
            lane.phase = Phase.PAUSED
            lane.prefill = None
        elif lane.phase is Phase.DECODE:
            self._finish(lane)

    def resume(self, stream: int) -> None:
        """Go on with a paused prefill.

        The pass is planned again from the state's position, so it cuts as the whole pass does from there.
        """
        lane = self._stream(stream)
        if lane.phase is not Phase.PAUSED:
            raise StreamError(f"resume: stream {stream} is {lane.phase}, not paused")
        lane.prefill = Prefill.open(self.model, lane.state, lane.prompt, chunk_cap=self.chunk_cap)
        lane.phase = Phase.PREFILL
        self._queue.append(lane.id)

    def leave(self, stream: int) -> None:
        """The client is gone: forget the stream and return its pages and slot to the pool."""
        lane = self._stream(stream)
        if lane.phase is Phase.PREFILL:
            self._queue.remove(lane.id)
        if lane.state is not None:
            lane.state.release()
        del self._lanes[lane.id]

    def busy(self) -> bool:
        """Whether a round would do any work."""
        return bool(self._queue) or any(lane.phase is Phase.DECODE for lane in self._lanes.values())

    def pool(self) -> tuple[int, int, int]:
        """(free, used, total) pages of the shared KV pool."""
        return self._pool.counts()

    def streams(self) -> tuple[int, ...]:
        return tuple(self._lanes)

    def state_digest(self, stream: int) -> str:
        """sha256 of the stream's state bytes (a finished stream's: when its lane was released)."""
        lane = self._stream(stream)
        return lane.state.digest() if lane.state is not None else str(lane.digest)

    def state_bytes(self, stream: int) -> bytes:
        lane = self._stream(stream)
        if lane.state is None:
            raise StreamError(f"state_bytes: stream {stream} is done; its lane was released (digest kept)")
        return bytes(lane.state.to_bytes())

    def stats(self, stream: int) -> StreamStats:
        lane = self._stream(stream)
        pos = lane.state.pos if lane.state is not None else lane.final_pos
        pages = len(lane.state.pages) if lane.state is not None else 0
        return StreamStats(
            lane.phase, int(pos), len(lane.tokens), lane.prefill_chunks, lane.decode_forwards, pages
        )

    def _stream(self, stream: int) -> _Lane:
        lane = self._lanes.get(stream)
        if lane is None:
            raise StreamError(f"no stream {stream!r} on this host (never submitted, or it left)")
        return lane

    def _poll(self, lane: _Lane) -> bool:
        return lane.cancel is not None and bool(lane.cancel.is_cancelled())

    def _emit(self, lane: _Lane, token: int) -> None:
        lane.tokens.append(int(token))
        lane.token_rounds.append(self.rounds)
        if len(lane.tokens) >= lane.max_tokens:
            self._finish(lane)

    def _finish(self, lane: _Lane) -> None:
        lane.digest = lane.state.digest()
        lane.final_pos = int(lane.state.pos)
        lane.state.release()
        lane.state = None
        lane.prefill = None
        lane.phase = Phase.DONE
