"""Continuous batching for the OpenAI-compatible server: requests over one lane host, one scheduler thread.

HTTP handler threads `add` a `Job` and read its events; a single scheduler thread owns the `LaneHost`
(reference/lanes.py) and loops: admit waiting jobs while a lane and pages are free, reap the jobs whose client
is gone, run one round (a decode step for every decoding stream, at most one prefill chunk), hand each new token
to its job. A job waits in a FIFO queue while every lane is held, as a request waits for a free slot in
llama-server.

Before every round the scheduler asks each job whether its client left (`Job.left`: the handler's socket check,
or a failed write), as llama.cpp's server checks a cancel flag before each slot's batch (PR #24630), and takes a
job whose client left off the host (`cancel`, then `leave`) whatever its phase: a decoding stream stops before
its next decode forward, a long prompt within one chunk of the disconnect. The job's CancelToken is also the
lane's own cancel token, polled before each decode forward (lanes.py).

Text follows the vocabulary reference/gguf_io.py writes into the GGUF (llama.cpp's SPM byte fallback): ids 0-2
are <unk>, <s>, </s> (control: no text), 3..258 the bytes 0x00..0xFF, the rest "▁t<id>", shown as " t<id>".
A string prompt is its UTF-8 bytes as byte tokens. </s> (id 2) ends a reply as llama-server's end of generation.
"""

from __future__ import annotations

import codecs
import queue
import threading
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from reference.cancel import CancelToken
from reference.lanes import LaneHost, LaneRefused, Phase
from reference.sampling import Sampler, greedy

EOS = 2  # </s>
N_CONTROL = 3  # <unk>, <s>, </s>
N_BYTES = 256


def piece(token: int) -> bytes:
    """The bytes one token stands for in the GGUF vocabulary (gguf_io.vocab)."""
    if token < N_CONTROL:
        return b""
    if token < N_CONTROL + N_BYTES:
        return bytes([token - N_CONTROL])
    return f" t{token}".encode("ascii")


def encode(text: str) -> list[int]:
    """A string prompt as byte tokens (llama.cpp's byte fallback spells any text this way)."""
    return [N_CONTROL + b for b in text.encode("utf-8")]


class Detokenizer:
    """Token ids to text, incrementally: a UTF-8 sequence split over tokens is held until it completes."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token: int) -> str:
        return self._decoder.decode(piece(token))

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


def log_softmax(row: np.ndarray) -> np.ndarray:  # [vocab] -> [vocab], float64
    z = np.asarray(row, np.float64)
    z = z - z.max()
    return z - np.log(np.exp(z).sum())


@dataclass(frozen=True, slots=True)
class Token:
    """One emitted token as a job's reader sees it."""

    id: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # the n most likely ids and their logprobs, when asked for


@dataclass(slots=True)
class Job:
    """One request: what to run, and the events the scheduler hands back (Token, then a final str)."""

    prompt: list[int]
    max_tokens: int
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    top_logprobs: int = 0
    cancel: CancelToken = field(default_factory=CancelToken)
    events: queue.Queue[Any] = field(default_factory=queue.Queue)  # Token ... then finish reason (str)
    watch: Any = None  # () -> bool: whether the client closed its connection (the handler's socket check)
    hung_up: bool = False  # set by the handler when a write to the client failed
    stream: int | None = None  # the lane host's stream id once admitted
    sampler: Any = None
    sent: int = 0  # tokens handed to the reader

    def gone(self) -> None:
        """The reader stopped the job (a stop string, end of generation): the scheduler drops it at its next look."""
        self.cancel.cancel()

    def left(self) -> bool:
        """Whether the job is over for its client: stopped, or the client hung up (then it is cancelled here)."""
        if not self.cancel.peek() and (self.hung_up or (self.watch is not None and self.watch())):
            self.cancel.cancel()  # a client that hung up cancels its request, checked before every round
        return self.cancel.peek()


class Batcher:
    """The scheduler thread over one LaneHost (`slots` lanes)."""

    def __init__(
        self,
        model: Any,
        slots: int = 4,
        chunk_cap: int | None = None,
        pages: int = 4096,
        vocab: int | None = None,
    ) -> None:
        self.model = model
        # the ids served: the model's, or its first `vocab` (another vocabulary for the pack to learn; issue #47)
        self.vocab = int(model.config.vocab_size) if vocab is None else vocab
        self.host = LaneHost(model, chunk_cap=chunk_cap, pages=pages, max_streams=slots)
        self.slots = slots
        self._waiting: deque[Job] = deque()
        self._running: dict[int, Job] = {}
        self._wake = threading.Condition()
        self._rows: list[np.ndarray] = []  # this round's logits rows, the batch's output matrix
        self.tokens_predicted = 0  # /metrics: tokens handed to jobs
        self.prompt_tokens = 0  # /metrics: prompt tokens prefilled
        self.decode_rounds = 0
        self._thread = threading.Thread(target=self._loop, name="openai-batcher", daemon=True)
        self._thread.start()

    def add(self, job: Job) -> None:
        """Queue a job; a job that could never fit is refused here (ValueError) and never queued."""
        limit = int(self.model.config.max_position_embeddings)
        if len(job.prompt) + job.max_tokens - 1 > limit:
            raise ValueError(
                f"prompt of {len(job.prompt)} tokens + max_tokens {job.max_tokens} exceeds the context of {limit}"
            )
        job.sampler = (
            greedy
            if job.temperature == 0
            else Sampler(job.temperature, job.top_k, _seed(job.seed), job.top_p)
        )
        with self._wake:
            self._waiting.append(job)
            self._wake.notify()

    def busy_slots(self) -> int:
        return len(self._running)

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not (self._waiting or self._running):
                    self._wake.wait()
            self._reap()
            self._admit()
            if not self.host.busy():
                with self._wake:
                    self._wake.wait(0.005)  # jobs held in the queue wait for a lane
                continue
            self._rows = []
            report = self.host.round()
            if report.decoded:
                self.decode_rounds += 1
            if report.prefilled is not None:
                self.prompt_tokens += report.prefilled[2] - report.prefilled[1]
            for stream in report.finished:
                self._finish(stream)

    def _admit(self) -> None:
        while self._waiting:
            job = self._waiting[0]
            if job.left():
                self._waiting.popleft()
                job.events.put("cancelled")
                continue
            try:
                job.stream = self.host.submit(
                    job.prompt, job.max_tokens, job.cancel, partial(self._sample, job)
                )
            except LaneRefused:
                return  # held until a lane or pages free up
            except ValueError as exc:
                self._waiting.popleft()
                job.events.put(f"error: {exc}")
                continue
            self._waiting.popleft()
            self._running[job.stream] = job

    def _reap(self) -> None:
        """Take every job whose client left off the host, whatever its phase: mid-prefill too."""
        for stream, job in list(self._running.items()):
            if job.left() and self.host.stats(stream).phase is not Phase.DONE:
                self.host.cancel(stream)
                self._finish(stream)

    def _sample(self, job: Job, logits: np.ndarray) -> int:  # [vocab] -> token id
        if self.vocab < logits.shape[-1]:
            logits = np.where(np.arange(logits.shape[-1]) < self.vocab, logits, -np.inf)
        self._rows.append(logits)
        row = self._rows[-1]  # this stream's row of the round's batch
        token = int(job.sampler(row))
        lp = log_softmax(row)
        top: tuple[tuple[int, float], ...] = ()
        if job.top_logprobs:
            order = np.argsort(-lp, kind="stable")[: job.top_logprobs]
            top = tuple((int(i), float(lp[i])) for i in order)
        job.events.put(Token(token, float(lp[token]), top))
        job.sent += 1
        self.tokens_predicted += 1
        if token == EOS and job.sent < job.max_tokens:
            job.cancel.cancel()  # end of generation: the next poll stops the stream before another forward
            job.events.put("stop")
        return token

    def _finish(self, stream: int) -> None:
        job = self._running.pop(stream, None)
        if job is None:
            return
        self.host.leave(stream)
        if job.cancel.peek():
            job.events.put("cancelled")
        else:
            job.events.put("length" if job.sent >= job.max_tokens else "stop")


def _seed(seed: int | None) -> int:
    """The request's seed, or fresh entropy: an unseeded request is not reproducible (as OpenAI's)."""
    return int(np.random.default_rng().integers(2**63)) if seed is None else seed
