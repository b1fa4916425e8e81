"""Falsifiers of apr-serve-prefill-steps-v1 for the lane host's serving paths: each stream's own cancel token
(FALSIFY-SERVE-PREFILL-012..016, the host's versions of CANCEL-001..004 and -010), rounds at full capacity (017)
and several prompts prefilling at once (018).

Polls and forwards are counted by the harness (falsify/packs/serving/falsifiers/lane_probe.py: a CountingModel proxy under the host and a
logged CountingCancel per stream), never read from the host's own stats. Every formula lives in the YAML.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import falsify
from falsify.packs.serving.falsifiers.lane_probe import LaneProbe, StreamMeasure, observe

PAGE_SIZE = 16
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def model(engine: Any) -> Any:
    return engine.load_model("f32")


def prompt_for(model: Any, first: int, n: int, seed: int) -> list[int]:
    """n tokens starting with `first` (the probe tells streams apart by their first token)."""
    rest = np.random.default_rng(seed).integers(0, model.config.vocab_size, max(n - 1, 0))
    return [first % model.config.vocab_size, *(int(t) for t in rest)]


HOST_CANCEL = [f"FALSIFY-SERVE-PREFILL-{i:03d}" for i in (12, 13, 14, 15, 16)]
# A job: (prompt length, max_tokens, the own token's budget or None, pause or None). A pause (k, held) cancels the
# stream once its k-th prefill chunk has run (the host pauses it mid-prefill), keeps it paused `held` rounds, then
# resumes it: its prefill goes on behind whatever else is queued, and its own token must not be polled again
# before its next chunk (the first token's one poll was made before the first chunk).
Job = tuple[int, int, int | None, tuple[int, int] | None]
jobs = st.lists(
    st.tuples(
        st.integers(1, 150),
        st.integers(1, 12),
        st.none() | st.integers(0, 8),
        st.none() | st.tuples(st.integers(1, 2), st.integers(0, 2)),
    ),
    min_size=1,
    max_size=4,
)
_runs: dict[tuple[Any, ...], list[tuple[StreamMeasure, int | None, int, bool]]] = {}


def run_pausing(probe: LaneProbe, pauses: dict[int, tuple[int, int]], limit: int = 400) -> set[int]:
    """Rounds until the host is idle and no stream waits paused; each stream of `pauses` is cancelled after its
    k-th prefill chunk and resumed `held` rounds later. Returns the streams that were paused and resumed."""
    chunks: dict[int, int] = {}
    waiting: dict[int, int] = {}  # paused stream -> rounds left before its resume
    resumed: set[int] = set()
    for _ in range(limit):
        for sid in [s for s, left in waiting.items() if left == 0]:
            del waiting[sid]
            probe.host.resume(sid)
            resumed.add(sid)
        if not probe.host.busy() and not waiting:
            return resumed
        report = probe.round()
        waiting = {s: left - 1 for s, left in waiting.items()}
        if report.prefilled:
            sid = report.prefilled[0]
            chunks[sid] = chunks.get(sid, 0) + 1
            pause = pauses.get(sid)
            if pause and chunks[sid] == pause[0] and probe.phase(sid) == "prefill" and sid not in resumed:
                probe.host.cancel(sid)
                waiting[sid] = pause[1]
    raise AssertionError(f"LaneProbe: host still busy after {limit} rounds")


def host_run(engine: Any, model: Any, jobs: list[Job], seed: int) -> list[Any]:
    """Every stream's measurements for one host run of `jobs` (cached: each prediction's test replays it)."""
    key = (id(engine), tuple(jobs), seed)
    if key not in _runs:
        probe = LaneProbe(engine, model, chunk_cap=64, pages=64, page_size=PAGE_SIZE, max_streams=4)
        ids = [probe.submit(prompt_for(model, i, n, seed + i), k, b) for i, (n, k, b, _) in enumerate(jobs)]
        resumed = run_pausing(probe, {sid: job[3] for sid, job in zip(ids, jobs, strict=True) if job[3]})
        _runs[key] = [
            (probe.stream(sid), job[2], job[1], sid in resumed) for sid, job in zip(ids, jobs, strict=True)
        ]
    return _runs[key]


@pytest.mark.parametrize(
    "pid", [pytest.param(p, marks=pytest.mark.falsifies(p), id=p.rsplit("-", 1)[1]) for p in HOST_CANCEL]
)
@SETTINGS
@given(jobs=jobs, seed=st.integers(0, 3))
@example(jobs=[(70, 12, 5, None), (9, 10, None, None), (130, 8, 0, None), (1, 6, 2, None)], seed=0)
@example(jobs=[(40, 9, 3, None), (40, 9, 7, None), (3, 4, 1, None), (100, 3, 0, None)], seed=1)
@example(  # cancelled before their first token
    jobs=[(150, 3, 0, None), (64, 2, 0, None), (1, 12, 0, None), (65, 5, 4, None)], seed=2
)
# Paused after a chunk, resumed, then polled (issue 45): resumed at once and alone in the queue; resumed behind two
# other prompts after a round paused; paused after its second of three chunks; a budget of 1 (the resumed stream's
# only token) and one a pause cannot reach (a one-chunk prompt).
@example(jobs=[(150, 6, 2, (1, 0)), (9, 10, None, None)], seed=0)
@example(jobs=[(130, 8, 3, (1, 1)), (140, 5, 1, (1, 0)), (100, 9, None, None), (20, 4, 2, (1, 0))], seed=1)
@example(jobs=[(150, 7, 4, (2, 2)), (129, 3, 1, (2, 0)), (65, 12, None, (1, 1))], seed=3)
def test_each_stream_polls_its_own_token_once_before_each_forward(
    engine: Any, model: Any, pid: str, jobs: list[Job], seed: int
) -> None:
    for m, budget, max_tokens, resumed in host_run(engine, model, jobs, seed):
        observe(pid, m, budget, max_tokens, resumed=resumed)


@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-017", "FALSIFY-SERVE-PREFILL-013")
@pytest.mark.parametrize("lanes", [2, 3, 4])
@pytest.mark.parametrize("with_budgets", [False, True], ids=["never", "budgets"])
def test_no_stream_is_skipped_when_every_lane_decodes(
    engine: Any, model: Any, lanes: int, with_budgets: bool
) -> None:
    probe = LaneProbe(engine, model, chunk_cap=64, pages=96, page_size=PAGE_SIZE, max_streams=lanes)
    # Prompts of 1, 1, 2 and 2 chunks reach decode in rounds 1, 2, 4 and 6 (one chunk per round); 10 tokens
    # each keeps them all decoding together for several rounds. With budgets of 9 + i (of 16 tokens), streams
    # stop on their own token, the first ones during full rounds.
    jobs = [(5 + 37 * i, 16, 9 + i) if with_budgets else (5 + 37 * i, 10, None) for i in range(lanes)]
    ids = [probe.submit(prompt_for(model, i, n, i), k, b) for i, (n, k, b) in enumerate(jobs)]
    probe.run()
    served = probe.full_rounds()
    falsify.check("FALSIFY-SERVE-PREFILL-017", full_rounds=len(served), served=served, lanes=lanes)
    for sid, (_, k, budget) in zip(ids, jobs, strict=True):
        observe("FALSIFY-SERVE-PREFILL-013", probe.stream(sid), budget, k)


@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-018")
@pytest.mark.parametrize("chunk_cap", [64, 128])
@pytest.mark.parametrize("lengths", [(200, 150, 300), (64, 65, 129, 1)], ids=["long", "edges"])
def test_several_prompts_prefilling_share_one_chunk_per_round(
    engine: Any, model: Any, chunk_cap: int, lengths: tuple[int, ...]
) -> None:
    probe = LaneProbe(engine, model, chunk_cap=chunk_cap, pages=128, page_size=PAGE_SIZE, max_streams=6)
    probe.submit(prompt_for(model, 100, 20, 9), 30)  # a stream that decodes throughout
    probe.round()
    for i, n in enumerate(lengths):
        probe.submit(prompt_for(model, i, n, i), 3)
    probe.run()
    chunks, fed, prefilling = probe.prefill_work()
    falsify.check(
        "FALSIFY-SERVE-PREFILL-018",
        prefill_chunks_per_round=chunks,
        prefill_tokens_per_round=fed,
        prefilling=prefilling,
        chunk_cap=chunk_cap,
    )
