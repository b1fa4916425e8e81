"""Unit tests of prefill planning: cuts, chunk widths, kept-prefix choice, refusals."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.engine import ReferenceEngine
from reference.prefill import KeptPrefix, Prefill, PrefillError, chunk_width, next_cut, plan_cuts


@pytest.fixture(scope="module")
def model() -> Any:
    return ReferenceEngine().load_model("f32")


class Invariant:
    """A model whose output does not depend on where calls are cut: it may change chunk width mid-pass."""

    chunk_invariant = True

    def __init__(self, model: Any) -> None:
        self.model = model
        self.config = model.config

    def new_state(self, pool: Any = None) -> Any:
        return self.model.new_state(pool)

    def forward(self, tokens: Any, state: Any) -> np.ndarray:
        return self.model.forward(tokens, state)


def test_plan_cuts_examples() -> None:
    assert plan_cuts(0, 150, 64) == (64, 128, 150)
    assert plan_cuts(0, 128, 64) == (64, 128)
    assert plan_cuts(0, 1, 64) == (1,)
    assert plan_cuts(0, 150, 64, [100]) == (64, 100, 150)
    assert plan_cuts(0, 300, 64, [100]) == (64, 100, 164, 228, 292, 300)  # the grid restarts at a mark
    assert plan_cuts(100, 300, 128) == (228, 300)
    assert plan_cuts(5, 5, 64) == ()


@settings(max_examples=200, deadline=None)
@given(
    end=st.integers(1, 2000),
    width=st.sampled_from([64, 128, 256]),
    marks=st.lists(st.integers(1, 1999), max_size=6),
    data=st.data(),
)
def test_cuts_are_memoryless(end: int, width: int, marks: list[int], data: st.DataObject) -> None:
    """A pass resumed from any of its cuts plans exactly the rest of the whole pass's cuts."""
    marks = sorted({m for m in marks if m < end})
    whole = plan_cuts(0, end, width, marks)
    assert whole[-1] == end and list(whole) == sorted(set(whole))
    assert set(marks) <= set(whole)
    assert all(b - a <= width for a, b in zip((0, *whole), whole, strict=False))
    i = data.draw(st.integers(0, len(whole) - 1))
    assert plan_cuts(whole[i], end, width, marks) == whole[i + 1 :]
    assert next_cut(whole[i - 1] if i else 0, end, width, marks) == whole[i]


def test_chunk_cap_must_sit_on_the_models_grid(model: Any) -> None:
    assert chunk_width(model, None) == 64
    assert chunk_width(model, 192) == 192
    with pytest.raises(PrefillError, match="chunk_cap 100 is not a multiple of the model's chunk_size 64"):
        chunk_width(model, 100)
    with pytest.raises(PrefillError, match="chunk_cap must be an int >= 1"):
        chunk_width(model, 0)
    assert chunk_width(Invariant(model), 100) == 100  # an invariant model may cut anywhere


def test_width_requests_move_cuts_only_on_an_invariant_model(model: Any) -> None:
    prompt = list(range(1, 200))
    fixed = Prefill.open(model, model.new_state(), prompt, chunk_cap=64)
    fixed.step(width=128)
    fixed.step(width=32)
    assert fixed.pos == 128 and fixed.cuts == (64, 128, 192, 199)
    free = Prefill.open(Invariant(model), model.new_state(), prompt, chunk_cap=64)
    free.step(width=128)
    assert free.pos == 128 and free.cuts == (128, 199)


def test_bad_prompts_and_marks_are_refused(model: Any) -> None:
    with pytest.raises(PrefillError, match=r"^prompt is empty: a prefill needs at least one token$"):
        Prefill.open(model, model.new_state(), [])
    with pytest.raises(PrefillError, match=r"^prompt\[1\] = 512 is outside the vocabulary \[0, 512\)$"):
        Prefill.open(model, model.new_state(), [0, 512])
    with pytest.raises(
        PrefillError, match=r"marks must lie strictly inside the prompt \(0, 10\), got \[10\]"
    ):
        Prefill.open(model, model.new_state(), list(range(10)), marks=[10])
    state = model.new_state()
    model.forward(np.arange(10), state)
    with pytest.raises(PrefillError, match="already holds 10 tokens; a prompt of 10 tokens"):
        Prefill.open(model, state, list(range(10)))
    done = Prefill.open(model, model.new_state(), [1, 2])
    done.run()
    with pytest.raises(PrefillError, match="already done"):
        done.step()


def test_kept_prefix_restore_takes_the_longest_strictly_extended(model: Any) -> None:
    prompt = list(range(3, 140))
    first = Prefill.open(model, model.new_state(), prompt, marks=[10, 70])
    first.run()
    short, long_ = first.kept
    assert (len(short.tokens), len(long_.tokens)) == (10, 70)
    passed = model.new_state()
    resumed = Prefill.open(model, passed, [*prompt[:70], 5, 6], kept=first.kept)
    assert resumed.pos == 70 and resumed.state is not passed and passed.released
    assert resumed.state.digest() == long_.state.digest()
    other = Prefill.open(model, model.new_state(), [*prompt[:40], 1], kept=first.kept)  # diverges at 40
    assert other.pos == 10
    same = Prefill.open(model, model.new_state(), prompt[:70], kept=[long_, short])  # equal: not strictly
    assert same.pos == 10
    unrelated = Prefill.open(model, model.new_state(), [9] * 20, kept=KeptPrefix(short.tokens, short.state))
    assert unrelated.pos == 0  # the snapshot's tokens are not a prefix of this prompt


@pytest.mark.parametrize("cap", [0, -64, True, 64.0, 2.5, "64"])
def test_a_chunk_cap_that_is_not_an_int_of_at_least_one_is_refused_by_name(model: Any, cap: Any) -> None:
    with pytest.raises(PrefillError, match=rf"^chunk_cap must be an int >= 1, got {re.escape(repr(cap))}$"):
        chunk_width(Invariant(model), cap)


def test_the_grid_refusal_says_why_and_an_invariant_model_takes_a_width_of_one(model: Any) -> None:
    with pytest.raises(
        PrefillError,
        match=r"^chunk_cap 100 is not a multiple of the model's chunk_size 64: cuts off that grid would change "
        r"the state bytes$",
    ):
        chunk_width(model, 100)
    pf = Prefill.open(Invariant(model), model.new_state(), [4, 5, 6], chunk_cap=1)
    assert pf.width == 1 and pf.cuts == (1, 2, 3)
    assert chunk_width(Invariant(model), np.int64(2)) == 2  # type: ignore[arg-type]
    assert type(chunk_width(model, np.int64(128))) is int  # type: ignore[arg-type]


def test_a_fresh_pass_has_no_logits_and_keeps_chunk_logits_only_when_asked(model: Any) -> None:
    prompt = list(range(1, 100))
    pf = Prefill.open(model, model.new_state(), prompt, chunk_cap=128)
    assert pf.width == 128 and pf.logits is None and pf.chunk_logits is None and pf.chunks_run == 0
    assert pf.run() is True and pf.chunk_logits is None and pf.logits is not None
    kept = Prefill.open(model, model.new_state(), prompt, keep_logits=True)
    kept.run()
    assert kept.chunk_logits is not None and [c.shape[0] for c in kept.chunk_logits] == [64, 35]
    np.testing.assert_array_equal(kept.chunk_logits[-1][-1], kept.logits)


def test_run_says_whether_the_pass_completed(model: Any) -> None:
    from reference.cancel import CancelToken

    pf = Prefill.open(model, model.new_state(), list(range(1, 140)))
    assert pf.run(CancelToken.with_budget(2)) is False and pf.pos == 128 and pf.chunks_run == 2
    assert pf.run(CancelToken.with_budget(5)) is True and pf.done and pf.chunks_run == 3


@pytest.mark.parametrize(
    ("prompt", "shown"),
    [
        ([1.5, 2.0], r"prompt\[0\] is 1.5, not an int token id"),
        ([[1, 2]], r"prompt\[0\] is \[1, 2\], not an int token id"),
        (np.zeros((0, 3), np.int64), r"prompt is empty: a prefill needs at least one token"),
        ([1, True], r"prompt\[1\] is True, not an int token id"),
    ],
)
def test_a_prompt_that_is_not_a_flat_list_of_ints_is_refused(model: Any, prompt: Any, shown: str) -> None:
    with pytest.raises(PrefillError, match=rf"^{shown}$"):
        Prefill.open(model, model.new_state(), prompt)


def test_marks_and_starts_lie_strictly_inside_the_prompt(model: Any) -> None:
    prompt = list(range(1, 11))
    for name in ("marks", "starts"):
        for bad in ([0], [10], [-1, 3]):
            with pytest.raises(
                PrefillError,
                match=rf"^{name} must lie strictly inside the prompt \(0, 10\), got \[{bad[0]}\]$",
            ):
                Prefill.open(model, model.new_state(), prompt, **{name: bad})  # type: ignore[arg-type]
    edge = Prefill.open(model, model.new_state(), prompt, marks=[1], starts=[9])
    assert edge.cuts == (1, 9, 10)
    edge.run()
    assert [k.tokens for k in edge.kept] == [(1,)]


def test_a_snapshot_no_further_than_the_state_is_not_restored(model: Any) -> None:
    prompt = list(range(3, 40))
    first = Prefill.open(model, model.new_state(), prompt, marks=[10])
    first.run()
    state = model.new_state()
    model.forward(np.asarray(prompt[:10]), state)
    resumed = Prefill.open(model, state, prompt, kept=first.kept)  # the snapshot holds what the state holds
    assert resumed.state is state and not state.released and resumed.pos == 10


def test_a_width_change_on_an_invariant_model_keeps_the_planned_starts(model: Any) -> None:
    pf = Prefill.open(Invariant(model), model.new_state(), list(range(1, 200)), chunk_cap=64, starts=[150])
    pf.step(width=128)
    assert pf.cuts == (128, 150, 199)
