"""A lane host in the engine (capability `lanes`, protocol 1.1), seen as falsify/engines/protocol.py's LaneHost.

The harness stays the judge here as in `generate`. Each stream's cancel token is the harness's own: `lane_submit`
carries a handle for it, and every `$/poll` naming that handle during `lane_round` is answered from (and counted
by) that token. Every forward the engine runs for a stream is reported (`$/forward` with the stream) and replayed,
without running anything, through `forward` of the model object the falsifier gave (a CountingModel sees each
stream's calls on a stand-in state of its own), and every token is reported (`$/token` with the stream). Tokens,
decode gaps and forward counts come from those events; the engine's phases, page counts, pool and digests are its
reports. A stream's forwards must continue its own history (no gap, no rewind), feed its prompt before its first
token and its previous token after it; a round's reply must agree with its events. A broken rule is a
ProtocolViolation naming it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from itertools import count
from typing import Any, NoReturn

import numpy as np

from falsify.engines.lanes import LaneRounds
from falsify.engines.tokens import token_list
from falsify.engines.wire import errors
from falsify.engines.wire.connection import Connection, EngineRefused
from falsify.engines.wire.events import EventState, checked_ids, engine_bytes
from falsify.engines.wire.messages import ErrorCode


class StreamError(LookupError):
    """A stream id the host does not hold (never submitted, or it left)."""


@dataclass(frozen=True, slots=True)
class WireRoundReport:
    round: int
    decoded: tuple[int, ...]  # streams that ran a decode forward this round (from the events)
    prefilled: tuple[int, int, int] | None  # (stream, start, end) of the one prefill chunk (from the events)
    emitted: tuple[int, ...]  # streams that emitted a token this round (from the events)
    finished: tuple[int, ...]  # streams that reached done this round (the engine's report)


@dataclass(frozen=True, slots=True)
class WireStreamStats:
    phase: str  # the engine's report: prefill, paused, decode, done
    pos: int  # tokens the stream's forwards fed (events)
    emitted: int  # tokens reported (events)
    prefill_chunks: int  # prefill forwards reported (events)
    decode_forwards: int  # decode forwards reported (events)
    pages: int  # the engine's report


@dataclass(slots=True)
class _Stream:
    prompt: list[int]
    max_tokens: int
    cancel: Any
    stand_in: EventState  # the state object its forwards are replayed on (one per stream)
    fed: list[int] = field(default_factory=list)
    chunks: list[list[int]] = field(default_factory=list)  # each reported forward's tokens, for recomputing
    tokens: list[int] = field(default_factory=list)
    token_rounds: list[int] = field(default_factory=list)
    prefill_chunks: int = 0
    decode_forwards: int = 0
    fed_since_token: bool = False
    done: bool = False  # finished in a round's report (as the events allow) or by lane_cancel while decoding


_handles = count(1)  # cancel-token handles, unique within the harness process


class WireLaneHost(LaneRounds):
    def __init__(
        self,
        engine: Any,  # a WireEngine
        model: Any,
        chunk_cap: int | None,
        pages: int | None,
        page_size: int | None,
        max_streams: int | None,
    ) -> None:
        self.engine, self.model = engine, model
        self.vocab = int(model.config.vocab_size)
        params = {
            "model": model.handle,
            "chunk_cap": chunk_cap,
            "pages": pages,
            "page_size": page_size,
            "max_streams": max_streams,
        }
        self.handle = engine.connection().request("lane_host", params)["host"]
        self.rounds = 0
        self._streams: dict[int, _Stream] = {}
        self._by_cancel: dict[int, int] = {}  # cancel handle -> stream
        self._status: dict[str, Any] | None = None  # the engine's last lane_status, until the next change
        self._total: int | None = None  # the pool's size, as the first lane_status said it

    # -- requests that change the host ------------------------------------------------------------------------
    def _request(self, method: str, params: dict[str, Any], on_engine: Any = None) -> dict[str, Any]:
        self._status = None
        return self.engine.connection().request(method, {"host": self.handle, **params}, on_engine)

    def violation(self, text: str) -> NoReturn:
        conn: Connection = self.engine.connection()
        conn.fail(errors.ProtocolViolation(f"engine {self.engine.spec}: {text}"))

    def submit(self, prompt: Any, max_tokens: int, cancel: Any = None) -> int:
        ids = token_list(prompt, "prompt")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int | np.integer):
            raise ValueError(f"submit: max_tokens must be an int >= 1, got {max_tokens!r}")
        handle = None if cancel is None else next(_handles)
        params = {"prompt": ids, "max_tokens": int(max_tokens), "cancel": handle}
        sid = int(self._request("lane_submit", params)["stream"])  # -32013 raises errors.LaneRefused
        if sid in self._streams:
            self.violation(
                f"lane_submit answered stream {sid}, which the host already holds [rule: fresh ids]"
            )
        self._streams[sid] = _Stream(ids, int(max_tokens), cancel, EventState(0, f"lane-{sid}"))
        if handle is not None:
            self._by_cancel[handle] = sid
        return sid

    def round(self) -> WireRoundReport:
        self.rounds += 1
        events: dict[str, Any] = {"decoded": [], "prefilled": [], "emitted": [], "cancelled": []}

        def on_engine(method: str, params: dict[str, Any]) -> dict[str, Any] | None:
            if method == "$/poll":
                sid = self._by_cancel.get(params.get("cancel", -1))
                if sid is None or sid not in self._streams:
                    self.violation(
                        f"$/poll during lane_round names cancel handle {params.get('cancel')!r}, which no "
                        "stream of this host was submitted with [rule: a stream polls its own token]"
                    )
                cancelled = bool(self._streams[sid].cancel.is_cancelled())
                if cancelled:
                    events["cancelled"].append(sid)
                return {"cancelled": cancelled}
            sid = params.get("stream")
            if sid not in self._streams:
                self.violation(
                    f"{method} during lane_round names stream {sid!r}, which the host does not hold"
                )
            s = self._streams[sid]
            if method == "$/forward":
                self._forward(sid, s, params["start"], params["tokens"], events)
                return None
            if method == "$/token":
                self._token(sid, s, params["token"], events)
                return None
            raise EngineRefused(ErrorCode.INVALID_REQUEST, f"{method} is not sent during lane_round")

        result = self._request("lane_round", {}, on_engine)
        prefilled = events["prefilled"]
        if len(prefilled) > 1:
            self.violation(f"lane_round ran {len(prefilled)} prefill chunks [rule: at most one per round]")
        report = WireRoundReport(
            self.rounds,
            tuple(events["decoded"]),
            tuple(prefilled[0]) if prefilled else None,
            tuple(events["emitted"]),
            tuple(int(s) for s in result["finished"]),
        )
        said = (list(result["decoded"]), result["prefilled"], list(result["emitted"]))
        seen = (
            list(report.decoded),
            list(report.prefilled) if report.prefilled else None,
            list(report.emitted),
        )
        if said != seen or result["round"] != self.rounds:
            self.violation(
                f"lane_round {self.rounds} answered round {result['round']}, decoded {said[0]}, prefilled "
                f"{said[1]}, emitted {said[2]}; its events show decoded {seen[0]}, prefilled {seen[1]}, emitted "
                f"{seen[2]} [rule: a round's reply agrees with its events]"
            )
        self._check_finished(report.finished, events)
        return report

    def _check_finished(self, finished: tuple[int, ...], events: dict[str, Any]) -> None:
        """`finished` holds exactly the streams the round's events end: a poll the harness answered true, or the
        token that reached the stream's max_tokens (protocol §4.14), each once (issue #48: the engine's list was
        taken on its word)."""
        ended = set(events["cancelled"])
        ended |= {
            sid
            for sid in events["emitted"]
            if len(self._streams[sid].tokens) >= self._streams[sid].max_tokens
        }
        if sorted(finished) != sorted(ended) or len(set(finished)) != len(finished):
            self.violation(
                f"lane_round {self.rounds} result finished is {list(finished)}; its events end streams "
                f"{sorted(ended)} (polls answered cancelled: {sorted(set(events['cancelled']))}; max_tokens reached: "
                f"{sorted(ended - set(events['cancelled']))}) [rule: finished lists the streams the round ended]"
            )
        for sid in finished:
            self._streams[sid].done = True

    def _forward(self, sid: int, s: _Stream, start: int, fed: list[int], events: dict[str, Any]) -> None:
        checked_ids(self.engine, fed, self.vocab, f"$/forward (stream {sid}) params.tokens")
        if start != len(s.fed):
            self.violation(
                f"stream {sid}: $/forward at {start}, but its reported forwards brought it to {len(s.fed)} "
                "[rule: a stream's forwards continue its history]"
            )
        if not s.tokens:
            want = s.prompt[start : start + len(fed)]
            if fed != want:
                self.violation(
                    f"stream {sid}: prefill $/forward at {start} fed {fed[:8]}..., its prompt has {want[:8]}... "
                    "[rule: a prefill forward feeds the prompt]"
                )
            s.prefill_chunks += 1
            events["prefilled"].append((sid, start, start + len(fed)))
        else:
            if fed != s.tokens[-1:] or start + 1 != len(s.prompt) + len(s.tokens):
                self.violation(
                    f"stream {sid}: decode $/forward at {start} fed {fed[:8]}; expected its previous token "
                    f"[{s.tokens[-1]}] at {len(s.prompt) + len(s.tokens) - 1} [rule: a decode forward feeds "
                    "the previous token]"
                )
            s.decode_forwards += 1
            events["decoded"].append(sid)
        s.fed.extend(fed)
        s.chunks.append(list(fed))
        s.fed_since_token = True
        s.stand_in.pos = start
        self.model.forward(np.asarray(fed, dtype=np.int64), s.stand_in)  # a proxy counts it; runs nothing

    def _token(self, sid: int, s: _Stream, token: int, events: dict[str, Any]) -> None:
        checked_ids(self.engine, [token], self.vocab, f"$/token (stream {sid}) params.token")
        if not s.fed_since_token or len(s.fed) < len(s.prompt):
            self.violation(
                f"stream {sid}: $/token {token} (token {len(s.tokens)}) with no forward reported since its last "
                f"token, or before its prompt was fed ({len(s.fed)} of {len(s.prompt)}) [rule: each token comes "
                "from a reported forward]"
            )
        if len(s.tokens) >= s.max_tokens:
            self.violation(f"stream {sid}: $/token beyond its max_tokens {s.max_tokens}")
        s.tokens.append(int(token))
        s.token_rounds.append(self.rounds)
        s.fed_since_token = False
        events["emitted"].append(sid)

    def cancel(self, stream: int) -> None:
        s = self._stream(stream)
        self._request("lane_cancel", {"stream": stream})
        if s.tokens:  # a decoding stream finishes; a prefilling one pauses (§4.14)
            s.done = True

    def resume(self, stream: int) -> None:
        self._stream(stream)
        self._request("lane_resume", {"stream": stream})

    def leave(self, stream: int) -> None:
        self._stream(stream)
        self._request("lane_leave", {"stream": stream})
        del self._streams[stream]

    def release(self) -> None:
        self._request("release_lane_host", {})

    # -- queries ------------------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        if self._status is None:
            status = self.engine.connection().request("lane_status", {"host": self.handle})
            held = sorted(int(s["stream"]) for s in status["streams"])
            if held != sorted(self._streams):
                self.violation(
                    f"lane_status lists streams {held}; the host was given {sorted(self._streams)} "
                    "(submitted and not left) [rule: the status lists every stream held]"
                )
            free, used, total = (status["pool"][k] for k in ("free", "used", "total"))
            if min(free, used) < 0 or total < 0:
                self.violation(f"lane_status pool free {free}, used {used}, total {total}: negative counts")
            if free + used != total or self._total not in (None, total):
                self.violation(
                    f"lane_status result pool: free {free} + used {used} is not total {total}, or total is not "
                    f"the {self._total} it first said [rule: the pool's pages are free or used, a fixed total]"
                )
            self._total = total
            for entry in status["streams"]:
                self._check_entry(entry)
            self._status = status
        return self._status

    def _check_entry(self, entry: dict[str, Any]) -> None:
        """One stream of lane_status against what the harness saw of it: the counts its events show, `done`
        exactly when a round finished it (or lane_cancel, while it decoded), a done stream's pages returned."""
        sid = int(entry["stream"])
        s = self._streams[sid]
        if entry["emitted"] != len(s.tokens) or entry["pos"] != len(s.fed):
            self.violation(
                f"lane_status: stream {sid} emitted {entry['emitted']} at position {entry['pos']}; its events "
                f"show {len(s.tokens)} tokens and {len(s.fed)} fed [rule: counts agree with the events]"
            )
        expected = ("done",) if s.done else ("decode",) if s.tokens else ("prefill", "paused")
        if entry["phase"] not in expected or (s.done and entry["pages"] != 0):
            self.violation(
                f"lane_status result streams[stream {sid}]: phase {entry['phase']!r} holding {entry['pages']} "
                f"pages; its events make it {' or '.join(expected)} ({len(s.tokens)} of {s.max_tokens} tokens, "
                f"{'finished' if s.done else 'not finished'}) [rule: a stream's phase follows its events; a done "
                "stream's pages are returned]"
            )

    def _entry(self, stream: int) -> dict[str, Any]:
        self._stream(stream)
        return next(s for s in self.status()["streams"] if s["stream"] == stream)

    def _stream(self, stream: int) -> _Stream:
        s = self._streams.get(stream)
        if s is None:
            raise StreamError(f"no stream {stream!r} on this host (never submitted, or it left)")
        return s

    def busy(self) -> bool:
        return bool(self.status()["busy"])

    def pool(self) -> tuple[int, int, int]:
        p = self.status()["pool"]
        return int(p["free"]), int(p["used"]), int(p["total"])

    def streams(self) -> tuple[int, ...]:
        self.status()
        return tuple(self._streams)

    def state_digest(self, stream: int) -> str:
        """The engine's lane_digest, checked (issue #48: a constant digest passed every comparison of states):
        one digest never names two histories (on this engine), and where the engine offers `state`, the digest is
        recomputed: a fresh state fed the stream's reported forwards, chunk by chunk, must have it (sha256 of the bytes
        state_bytes sends for it)."""
        s = self._stream(stream)
        conn = self.engine.connection()
        digest = str(conn.request("lane_digest", {"host": self.handle, "stream": stream})["digest"])
        seen = self.engine.lane_digests
        history = tuple(s.fed)
        if seen.setdefault(digest, history) != history:
            other = seen[digest]
            self.violation(
                f"lane_digest result digest {digest[:16]}... for stream {stream}, fed {len(history)} tokens, was "
                f"also the digest of a stream fed {len(other)} other tokens [rule: a digest names one state]"
            )
        if "state" in self.engine.capabilities:
            recomputed = self._recompute(s)
            if recomputed != digest:
                self.violation(
                    f"lane_digest result digest {digest[:16]}... for stream {stream}; a fresh state fed its "
                    f"{len(s.chunks)} reported forwards ({len(s.fed)} tokens) has digest {recomputed[:16]}... "
                    "[rule: a lane's digest is that of the state its reported forwards build]"
                )
        return digest

    def _recompute(self, s: _Stream) -> str:
        """sha256 of the bytes of a fresh state fed the stream's reported forwards, one forward per chunk (the
        harness's own requests, on the engine's model, not through the falsifier's proxy: they are not the
        stream's)."""
        conn = self.engine.connection()
        state = conn.request("new_state", {"model": self.model.handle})["state"]
        try:
            for chunk in s.chunks:
                conn.request("forward", {"state": state, "tokens": chunk})
            sent = conn.request("state_bytes", {"state": state})["bytes"]
            return hashlib.sha256(engine_bytes(self.engine, sent, "state_bytes result")).hexdigest()
        finally:
            conn.request("release_state", {"state": state})

    def stats(self, stream: int) -> WireStreamStats:
        s, entry = self._stream(stream), self._entry(stream)  # the entry checked by status()
        return WireStreamStats(
            str(entry["phase"]),
            len(s.fed),
            len(s.tokens),
            s.prefill_chunks,
            s.decode_forwards,
            int(entry["pages"]),
        )
