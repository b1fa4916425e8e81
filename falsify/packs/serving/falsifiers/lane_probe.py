"""The harness's instruments around a lane host: what the host falsifiers judge, measured outside the host.

    probe = LaneProbe(engine, model, chunk_cap=64, pages=64, page_size=16, max_streams=4)
    sid = probe.submit(prompt, max_tokens, budget=3)   # the stream gets its own LoggedCancel token
    probe.round()                                      # host.round(), logged
    probe.stream(sid)                                  # polls and forwards of that stream, harness-counted
    probe.full_rounds(), probe.prefill_work()          # per-round measurements

The host runs on a `CountingModel` proxy of the engine's model (every forward call recorded before it runs) and
each stream is given a `LoggedCancel`, a `CountingCancel` that also notes, at every poll, how many forward calls
the proxy had seen and what it answered. Together they order each stream's polls against its forwards. A forward
call belongs to the stream whose prompt starts with the call's first token at position 0 (submit refuses a
prompt whose first token another stream already started with), and is a prefill call while the tokens that
stream has fed so far are fewer than its prompt. The host's phases are read only to choose which rounds to look at
(a round that began with every lane decoding); what is judged is counted here.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

import falsify
from falsify.harness.instruments import CountingCancel, CountingModel


class LoggedCancel(CountingCancel):
    """A harness cancel token that logs, per poll, the proxy's forward count at the poll and the answer."""

    __slots__ = ("answers", "marks", "model")

    def __init__(self, model: CountingModel, budget: int | None = None) -> None:
        super().__init__(budget)
        self.model = model
        self.marks: list[int] = []  # forward calls the proxy had recorded when each poll was made
        self.answers: list[bool] = []

    def is_cancelled(self) -> bool:
        mark = self.model.forwards
        answer = super().is_cancelled()
        self.marks.append(mark)
        self.answers.append(answer)
        return answer


@dataclass(frozen=True, slots=True)
class RoundLog:
    calls: tuple[int, int]  # [start, end) indices into the proxy's calls made during the round
    polls: dict[int, tuple[int, int]]  # stream -> [first, end) indices of its token's polls made in the round
    decoding: tuple[int, ...]  # streams the host had decoding when the round began
    prefilling: tuple[int, ...]  # streams the host had prefilling when the round began


@dataclass(frozen=True, slots=True)
class StreamMeasure:
    """One stream's observables, every count the harness's."""

    prompt_len: int
    emitted: int
    host_polls: int
    polls_before_prefill: int
    polls_before_decode: list[int]
    prefill_forwards: int
    decode_forwards: int
    decode_positions: list[int]
    wasted_forwards: int


class LaneProbe:
    """A lane host on a counting proxy, each stream with its own logged token, every round logged."""

    def __init__(self, engine: Any, model: Any, **host_kw: Any) -> None:
        self.host_kw = host_kw
        self.model = CountingModel(model)
        self.host = engine.lane_host(self.model, **host_kw)
        self.prompts: dict[int, list[int]] = {}
        self.tokens: dict[int, LoggedCancel] = {}
        self.first: dict[int, int] = {}  # a prompt's first token -> its stream
        self.rounds: list[RoundLog] = []
        self.emitted: dict[int, int] = {}  # tokens of streams that left (the host forgets them)
        self._owned: tuple[Any, list[tuple[int, bool, int]]] | None = None  # _owners() as of the last call

    @property
    def lanes(self) -> int:
        return int(self.host_kw.get("max_streams", 8))

    def submit(self, prompt: list[int], max_tokens: int, budget: int | None = None) -> int:
        """Submit with the stream's own harness token; LaneRefused propagates."""
        if prompt and prompt[0] in self.first:
            raise ValueError(
                f"LaneProbe: first token {prompt[0]} already starts stream {self.first[prompt[0]]}"
            )
        token = LoggedCancel(self.model, budget)
        sid = self.host.submit(prompt, max_tokens, cancel=token)
        self.prompts[sid], self.tokens[sid], self.first[prompt[0]] = list(prompt), token, sid
        self._owned = None  # a new first token may own calls: attribute them all again
        return sid

    def leave(self, sid: int) -> None:
        self.emitted[sid] = len(self.host.tokens(sid))
        self.host.leave(sid)

    def phase(self, sid: int) -> str:
        return str(self.host.stats(sid).phase)

    def round(self) -> Any:
        live = self.host.streams()
        decoding = tuple(s for s in live if self.phase(s) == "decode")
        prefilling = tuple(s for s in live if self.phase(s) == "prefill")
        before = {s: len(t.marks) for s, t in self.tokens.items()}
        start = self.model.forwards
        report = self.host.round()
        polls = {s: (n, len(self.tokens[s].marks)) for s, n in before.items()}
        self.rounds.append(RoundLog((start, self.model.forwards), polls, decoding, prefilling))
        return report

    def run(self, limit: int = 400) -> None:
        """Rounds until the host is idle; at most `limit` (a host that stops serving a stream must not hang us)."""
        for _ in range(limit):
            if not self.host.busy():
                return
            self.round()
        raise AssertionError(f"LaneProbe: host still busy after {limit} rounds")

    def _owners(self) -> list[tuple[int, bool, int]]:
        """For every recorded call: (stream, is a prefill call, tokens that stream had fed before it). Kept until
        the next call or submit: a state machine's invariants read every stream after each step."""
        calls = self.model.calls
        last = calls[-1] if calls else None  # the call object itself: any new call, or a reset(), replaces it
        if self._owned is None or self._owned[0] is not last:
            self._owned = (last, self._attribute(calls))
        return self._owned[1]

    def _attribute(self, calls: list[Any]) -> list[tuple[int, bool, int]]:
        by_ordinal: dict[int, int] = {}
        fed: dict[int, int] = {}
        out = []
        for c in calls:
            if c.stream not in by_ordinal:
                if c.start != 0 or not c.tokens or c.tokens[0] not in self.first:
                    raise AssertionError(f"LaneProbe: a forward call {c} belongs to no submitted stream")
                by_ordinal[c.stream] = self.first[c.tokens[0]]
            sid = by_ordinal[c.stream]
            before = fed.get(sid, 0)
            out.append((sid, before < len(self.prompts[sid]), before))
            fed[sid] = before + len(c.tokens)
        return out

    def stream(self, sid: int) -> StreamMeasure:
        owners = self._owners()
        mine = [(g, prefill, before) for g, (s, prefill, before) in enumerate(owners) if s == sid]
        prefill = [g for g, is_prefill, _ in mine if is_prefill]
        decode = [(g, before) for g, is_prefill, before in mine if not is_prefill]
        marks = self.tokens[sid].marks
        polls_before_decode = []
        order = [g for g, _, _ in mine]
        previous = {g: p for p, g in pairwise([-1, *order])}  # each call -> the stream's call before it
        for g, _ in decode:
            polls_before_decode.append(sum(previous[g] < m <= g for m in marks))
        emitted = self.emitted[sid] if sid in self.emitted else len(self.host.tokens(sid))
        prompt_len = len(self.prompts[sid])
        prefill_fed = sum(len(self.model.calls[g].tokens) for g in prefill)
        finished_prefill = int(prefill_fed >= prompt_len)
        return StreamMeasure(
            prompt_len=prompt_len,
            emitted=emitted,
            host_polls=len(marks),
            polls_before_prefill=sum(m <= prefill[0] for m in marks) if prefill else len(marks),
            polls_before_decode=polls_before_decode,
            prefill_forwards=len(prefill),
            decode_forwards=len(decode),
            decode_positions=[before for _, before in decode],
            wasted_forwards=finished_prefill + len(decode) - emitted,
        )

    def full_rounds(self) -> list[int]:
        """For each round that began with every lane decoding: the lanes served (exactly one decode forward, or
        stopped by their own token's poll in that round)."""
        owners = self._owners()
        served = []
        for r in self.rounds:
            if len(r.decoding) != self.lanes:
                continue
            n = 0
            for sid in r.decoding:
                forwards = sum(1 for g in range(*r.calls) if owners[g][0] == sid and not owners[g][1])
                stopped = any(self.tokens[sid].answers[slice(*r.polls[sid])])
                n += (forwards == 1 and not stopped) or (forwards == 0 and stopped)
            served.append(n)
        return served

    def prefill_work(self) -> tuple[list[int], list[int], int]:
        """Per round: prefill calls and the prompt tokens they fed; and the most streams prefilling at a round's
        start."""
        owners = self._owners()
        calls = self.model.calls
        chunks, fed = [], []
        for r in self.rounds:
            mine = [g for g in range(*r.calls) if owners[g][1]]
            chunks.append(len(mine))
            fed.append(sum(len(calls[g].tokens) for g in mine))
        return chunks, fed, max((len(r.prefilling) for r in self.rounds), default=0)


def observe(
    pid: str, m: StreamMeasure, budget: int | None, max_tokens: int, *, resumed: bool | None = None
) -> None:
    """Check `pid` on one stream when the stream is in its domain (012, 014-016: cancelled by its own token).
    `resumed`: whether the stream's prefill was paused and resumed (None: not told; no corner is reached)."""
    bounds = {"max_tokens": max_tokens, **({} if budget is None else {"n": budget})}
    if resumed is not None:
        bounds["resumed"] = resumed
    cancelled = budget is not None and budget < max_tokens
    # the stream's forwards as the harness counted them, as 013 and 015 name them
    forwards = {
        "measured_prefill_forwards": m.prefill_forwards,
        "measured_decode_forwards": m.decode_forwards,
    }
    if pid == "FALSIFY-SERVE-PREFILL-013":
        falsify.check(
            pid,
            polls_before_decode=m.polls_before_decode,
            polls_before_prefill=m.polls_before_prefill,
            decode_positions=m.decode_positions,
            stream_prompt_len=m.prompt_len,
            emitted=m.emitted,
            **forwards,
            **bounds,
        )
    elif pid == "FALSIFY-SERVE-PREFILL-012" and cancelled and budget:
        falsify.check(pid, emitted=m.emitted, **bounds)
    elif pid == "FALSIFY-SERVE-PREFILL-014" and cancelled:
        falsify.check(pid, host_polls=m.host_polls, emitted=m.emitted, **bounds)
    elif pid == "FALSIFY-SERVE-PREFILL-015" and cancelled and budget == 0:
        falsify.check(pid, emitted=m.emitted, host_polls=m.host_polls, max_tokens=max_tokens, **forwards)
    elif pid == "FALSIFY-SERVE-PREFILL-016" and cancelled:
        falsify.check(pid, wasted_forwards=m.wasted_forwards, n=budget)


class CancelAndLeave:
    """Two rules for a lane-host state machine (hypothesis.stateful; mix in before RuleBasedStateMachine): cancel
    a live stream, or let one leave and forget it. The machine keeps `host` and `jobs` (stream id -> its request)
    and says how a stream leaves in `leave_stream` (the host's own leave, or the probe's that measures it first).
    Shared by the pack's lane-host machine and the reference engine's unit test of its LaneHost."""

    host: Any
    jobs: dict[int, Any]

    def leave_stream(self, sid: int) -> None:
        self.host.leave(sid)

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        self.host.cancel(data.draw(st.sampled_from(sorted(self.jobs))))

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.jobs)))
        self.leave_stream(sid)
        del self.jobs[sid]
