"""Falsifiers of apr-serve-prefill-steps-v1, prefill half.

Stepped == whole == one forward call, kept prefixes, cancel between chunks, and cuts off the chunk grid.

Cuts are measured, not read back from the plan: the harness's CountingModel around the model logs every forward
call with the state it advanced and that state's position at the call; a cut is that position plus the tokens fed. The oracle for "the whole pass" is one model forward
call over the same tokens, which the model computes in internal chunks of chunk_size aligned to the call's
first token.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

import falsify
from falsify.harness.instruments import CountingModel


def cuts(rec: CountingModel, state: Any, since: int = 0) -> list[int]:
    """Where each forward call on `state` (from call `since` on) ended: its start position plus the tokens fed."""
    stream = rec.stream_of(state)
    return [c.start + len(c.tokens) for c in rec.calls[since:] if c.stream == stream]


def sha(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x, dtype="<f4").tobytes()).hexdigest()


def prompt_of(model: Any, n: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, model.config.vocab_size, n)]


def one_call(model: Any, tokens: list[int]) -> tuple[str, np.ndarray]:
    """State digest and logits of one forward call over `tokens` on a fresh state."""
    state = model.new_state()
    logits = model.forward(np.asarray(tokens, np.int64), state)
    return state.digest(), logits


@pytest.fixture(scope="module")
def model(engine: Any) -> Any:
    return engine.load_model("f32")


@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-001", requires=["prefill"])
@pytest.mark.parametrize(
    ("n", "chunk_cap"), [(1, 64), (63, 64), (150, 64), (257, 128), (500, 192), (600, 256)]
)
def test_stepped_equals_whole_and_one_call(engine: Any, model: Any, n: int, chunk_cap: int) -> None:
    rec = CountingModel(model)
    prompt = prompt_of(model, n, seed=n)
    # an engine without paged KV (no new_pool) shares nothing between streams: no pool then
    pool = model.new_pool(64, 16) if hasattr(model, "new_pool") else None
    other = model.new_state(pool)  # another stream on the same pool, advanced between two chunks
    stepped = engine.prefill(rec, model.new_state(pool), prompt, chunk_cap=chunk_cap, keep_logits=True)
    while not stepped.step():
        model.forward(np.asarray([n % 7], np.int64), other)
    # the whole pass on a private pool: which pages hold the KV must not matter
    whole = engine.prefill(rec, model.new_state(), prompt, chunk_cap=chunk_cap, keep_logits=True)
    whole.run()
    one_state, one_logits = one_call(model, prompt)
    falsify.check(
        "FALSIFY-SERVE-PREFILL-001",
        n=n,
        chunk_cap=chunk_cap,
        stepped_cuts=cuts(rec, stepped.state),
        whole_cuts=cuts(rec, whole.state),
        stepped_state=stepped.state.digest(),
        whole_state=whole.state.digest(),
        one_call_state=one_state,
        stepped_logits=sha(np.concatenate(stepped.chunk_logits)),
        whole_logits=sha(np.concatenate(whole.chunk_logits)),
        one_call_logits=sha(one_logits),
    )


@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-002", requires=["prefill"])
@pytest.mark.parametrize(("p", "n"), [(1, 75), (64, 150), (100, 301), (128, 129), (256, 400)])
def test_resume_from_kept_prefix(engine: Any, model: Any, p: int, n: int) -> None:
    rec = CountingModel(model)
    shared = prompt_of(model, p, seed=p)
    first = shared + prompt_of(model, 90, seed=p + 1)  # an earlier request sharing the first p tokens
    prompt = shared + prompt_of(model, n - p, seed=n)
    earlier = engine.prefill(model, model.new_state(), first, chunk_cap=64, marks=[p])
    earlier.run()
    (kept,) = earlier.kept
    kept_before = kept.state.digest()
    whole = engine.prefill(rec, model.new_state(), prompt, chunk_cap=64, marks=[p])
    whole.run()
    resumed = engine.prefill(rec, model.new_state(), prompt, chunk_cap=64, kept=earlier.kept)
    resumed_start = resumed.pos
    resumed.run()
    resumed_state = resumed.state.digest()
    one_state, _ = one_call(model, prompt)
    # The same kept prefix restored again for a prompt that goes on with other tokens (issue 45): a restore that
    # shares memory with the snapshot or with the first restore (a KV page, a cache array) lets this pass overwrite
    # the first one's bytes. Each restored state is compared with the whole pass of its own prompt.
    tail = prompt_of(model, n - p, seed=n + 7)
    if tail[0] == prompt[p]:
        tail[0] = (tail[0] + 1) % model.config.vocab_size
    second = engine.prefill(model, model.new_state(), shared + tail, chunk_cap=64, kept=earlier.kept)
    second.run()
    second_whole = engine.prefill(model, model.new_state(), shared + tail, chunk_cap=64, marks=[p])
    second_whole.run()
    falsify.check(
        "FALSIFY-SERVE-PREFILL-002",
        p=p,
        n=n,
        chunk_size=model.config.chunk_size,
        resumed_start=resumed_start,
        resumed_cuts=cuts(rec, resumed.state),
        whole_cuts=cuts(rec, whole.state),
        resumed_state=resumed_state,
        resumed_state_final=resumed.state.digest(),
        second_resumed_state=second.state.digest(),
        second_whole_state=second_whole.state.digest(),
        whole_state=whole.state.digest(),
        one_call_state=one_state,
        resumed_logits=sha(resumed.logits),
        whole_last_logits=sha(whole.logits),
        kept_before=kept_before,
        kept_after=kept.state.digest(),
    )


@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-003", requires=["prefill"])
@pytest.mark.parametrize(("k", "n"), [(1, 150), (2, 150), (3, 300), (2, 129)])
def test_cancel_between_chunks_then_resume(engine: Any, model: Any, k: int, n: int) -> None:
    rec = CountingModel(model)
    prompt = prompt_of(model, n, seed=k * 1000 + n)
    cancelled = engine.prefill(rec, model.new_state(), prompt, chunk_cap=64)
    stopped = cancelled.run(cancel=engine.cancel_token().with_budget(k))
    assert stopped is False  # the test's premise: the cancel fired before the pass ended
    cancelled_pos, cancelled_state = cancelled.pos, cancelled.state.digest()
    prefix_state, _ = one_call(model, prompt[:cancelled_pos])
    resumed = engine.prefill(rec, cancelled.state, prompt, chunk_cap=64)
    calls_before_resume = len(rec.calls)
    resumed.run()
    whole = engine.prefill(rec, model.new_state(), prompt, chunk_cap=64)
    whole.run()
    resumed_cuts = cuts(rec, resumed.state, since=calls_before_resume)
    falsify.check(
        "FALSIFY-SERVE-PREFILL-003",
        k=k,
        n=n,
        cancelled_pos=cancelled_pos,
        cancelled_state=cancelled_state,
        prefix_state=prefix_state,
        whole_cuts=cuts(rec, whole.state),
        resumed_cuts=resumed_cuts,
        resumed_state=resumed.state.digest(),
        whole_state=whole.state.digest(),
    )


@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-011", requires=["prefill"])
@pytest.mark.parametrize(
    ("n", "marks"), [(75, "every"), (150, [1, 2, 3, 37, 100, 149]), (299, [65, 130, 191])]
)
def test_cuts_off_the_grid_change_only_rounding(engine: Any, model: Any, n: int, marks: Any) -> None:
    prompt = prompt_of(model, n, seed=7 * n)
    _, uncut = one_call(model, prompt)
    cut = engine.prefill(
        model,
        model.new_state(),
        prompt,
        chunk_cap=64,
        marks=range(1, n) if marks == "every" else marks,
        keep_logits=True,
    )
    cut.run()
    diff = np.abs(np.concatenate(cut.chunk_logits) - uncut)
    falsify.check(
        "FALSIFY-SERVE-PREFILL-011",
        n=n,
        max_abs_diff=float(diff.max()),
        logits_scale=float(np.abs(uncut).max()),
    )


def digest_of(model: Any, *calls: list[int]) -> str:
    """The digest of a fresh state after these forward calls, in order: a history run again from nothing."""
    state = model.new_state()
    for tokens in calls:
        model.forward(np.asarray(tokens, np.int64), state)
    digest = str(state.digest())
    state.release()
    return digest


# Original and copy are advanced by DIFFERENT tokens (issue 45): a copy that shares the KV cache with its original
# (or a page, a conv or recurrent buffer) survives a check that advances both by the same tokens, since the second
# write stores the bytes the first one did. Here the original's tokens overwrite whatever the copy wrote in shared
# memory, and each state is compared with a fresh run of its own history. Lengths: a copy within one page (1), a
# page's last slot free (63, page size 16), a page boundary (64, nothing shared to write into), a long one.
@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-020", requires=["prefill"])
@pytest.mark.parametrize(("n", "k", "j"), [(1, 1, 1), (63, 2, 5), (64, 3, 1), (130, 70, 9)])
def test_a_copy_is_independent_of_its_state(engine: Any, model: Any, n: int, k: int, j: int) -> None:
    prompt, more, other = prompt_of(model, n, 21), prompt_of(model, k, 22), prompt_of(model, j, 23)
    if other[0] == more[0]:  # the first written position must differ, so the two histories do
        other[0] = (more[0] + 1) % model.config.vocab_size
    state = model.new_state()
    model.forward(np.asarray(prompt, np.int64), state)
    copy = state.copy()
    before = state.digest()
    model.forward(np.asarray(more, np.int64), copy)
    after, copied = state.digest(), copy.digest()
    model.forward(np.asarray(other, np.int64), state)
    falsify.check(
        "FALSIFY-SERVE-PREFILL-020",
        n=n,
        k=k,
        j=j,
        original_before=before,
        original_after=after,
        copy_after=copied,
        original_advanced=state.digest(),
        copy_final=copy.digest(),
        copy_fresh=digest_of(model, prompt, more),
        original_fresh=digest_of(model, prompt, other),
    )
    copy.release()
    state.release()


def rule_cuts(start: int, n: int, chunk_cap: int, planned: list[int]) -> list[int]:
    """The cuts engine-protocol.md section 4.12 gives, computed here: from pos, the first of pos + chunk_cap, the
    next planned position after pos, the end."""
    out, pos = [], start
    while pos < n:
        pos = min([pos + chunk_cap, n, *(p for p in planned if p > pos)])
        out.append(pos)
    return out


@pytest.mark.falsifies("FALSIFY-SERVE-PREFILL-021", requires=["prefill"])
@pytest.mark.parametrize(
    ("start", "n", "chunk_cap", "marks", "starts"),
    [
        (0, 300, 64, [], []),
        (10, 300, 64, [], []),  # off the cap's multiples from the first chunk
        (0, 300, 64, [10], []),  # a mark moves every later cut
        (0, 260, 128, [], [70, 75]),
        (63, 200, 64, [100], [150]),
        (130, 131, 64, [], []),
        (1, 400, 128, [5, 200], [6]),
    ],
)
def test_each_chunk_ends_at_pos_plus_the_cap(
    engine: Any, model: Any, start: int, n: int, chunk_cap: int, marks: list[int], starts: list[int]
) -> None:
    rec = CountingModel(model)
    prompt = prompt_of(model, n, seed=start + n)
    state = model.new_state()
    if start:
        model.forward(
            np.asarray(prompt[:start], np.int64), state
        )  # not through the proxy: not a cut of the pass
    since = len(rec.calls)
    pf = engine.prefill(rec, state, prompt, chunk_cap=chunk_cap, marks=marks, starts=starts)
    pf.run()
    measured = cuts(rec, pf.state, since)
    falsify.check(
        "FALSIFY-SERVE-PREFILL-021",
        pass_start=start,
        n=n,
        chunk_cap=chunk_cap,
        marks=marks,
        starts=starts,
        cuts=measured,
        planned_cuts=rule_cuts(start, n, chunk_cap, sorted({*marks, *starts})),
    )
    for kept in pf.kept:
        kept.state.release()
    pf.state.release()
