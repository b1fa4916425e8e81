"""falsify/engines/prefill.py, the harness's stepped prefill (the hf and llamacpp adapters' `engine.prefill`), on the
reference engine's model: the forward calls the harness counts, the logits and the state bytes are those of the
reference engine's own planner for the same request, and every refusal names its argument."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from falsify.engines.cancel import HarnessCancel
from falsify.engines.prefill import Kept, PrefillError, SteppedPrefill
from falsify.harness.instruments import CountingModel
from reference.engine import ReferenceEngine
from reference.prefill import Prefill


@pytest.fixture(scope="module")
def model() -> Any:
    return ReferenceEngine().load_model("f32")


def calls(counting: CountingModel) -> list[tuple[int, int]]:
    return [(c.start, len(c.tokens)) for c in counting.calls]


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(2, 150),
    cap=st.sampled_from([None, 64, 128]),
    raw_marks=st.lists(st.integers(1, 149), max_size=3),
    raw_starts=st.lists(st.integers(1, 149), max_size=2),
)
def test_the_same_request_forwards_the_same_calls_as_the_reference_planner(
    model: Any, n: int, cap: int | None, raw_marks: list[int], raw_starts: list[int]
) -> None:
    prompt = [(7 * i + 3) % model.config.vocab_size for i in range(n)]
    marks, starts = [m for m in raw_marks if m < n], [s for s in raw_starts if s < n]
    ours, theirs = CountingModel(model), CountingModel(model)
    kw: dict[str, Any] = {"chunk_cap": cap, "marks": marks, "starts": starts, "keep_logits": True}
    mine = SteppedPrefill.open(ours, model.new_state(), prompt, **kw)
    ref = Prefill.open(theirs, model.new_state(), prompt, **kw)
    assert mine.run() is True and ref.run() is True
    assert calls(ours) == calls(theirs)
    assert mine.chunk_logits is not None and ref.chunk_logits is not None
    assert len(mine.chunk_logits) == len(ref.chunk_logits)
    for a, b in zip(mine.chunk_logits, ref.chunk_logits, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(mine.logits, ref.logits)
    assert mine.state.digest() == ref.state.digest()
    assert [k.tokens for k in mine.kept] == [k.tokens for k in ref.kept]
    assert [k.state.digest() for k in mine.kept] == [k.state.digest() for k in ref.kept]


def test_a_cancelled_pass_resumes_with_the_cuts_of_the_whole_pass(model: Any) -> None:
    prompt = list(range(1, 200))
    counting = CountingModel(model)
    cut = SteppedPrefill.open(counting, model.new_state(), prompt, chunk_cap=64, marks=[100])
    token = HarnessCancel.with_budget(2)
    assert cut.run(token) is False and cut.pos == 100 and token.polls == 3
    assert calls(counting) == [(0, 64), (64, 36)]
    resumed = SteppedPrefill.open(counting, cut.state, prompt, chunk_cap=64)
    assert resumed.run(HarnessCancel.never()) is True and resumed.done
    assert calls(counting)[2:] == [(100, 64), (164, 35)]
    whole = SteppedPrefill.open(model, model.new_state(), prompt, chunk_cap=64, marks=[100])
    whole.run()
    assert resumed.state.digest() == whole.state.digest()


def test_the_kept_prefix_restored_is_the_one_the_reference_planner_restores(model: Any) -> None:
    """The longest snapshot the prompt strictly extends (equal to the prompt: not strictly; diverging: no), copied,
    the state passed in released: for each prompt, the same position and bytes as reference.prefill."""
    base = list(range(3, 140))
    ours = SteppedPrefill.open(model, model.new_state(), base, marks=[10, 70])
    theirs = Prefill.open(model, model.new_state(), base, marks=[10, 70])
    ours.run(), theirs.run()
    assert [len(k.tokens) for k in ours.kept] == [10, 70]
    prompts = [[*base[:70], 5, 6], [*base[:40], 1], base[:70], [9] * 20]
    for prompt in prompts:
        passed = model.new_state()
        mine = SteppedPrefill.open(model, passed, prompt, kept=ours.kept[::-1])
        ref = Prefill.open(model, model.new_state(), prompt, kept=theirs.kept[::-1])
        assert mine.pos == ref.pos and mine.state.digest() == ref.state.digest(), prompt[:3]
        assert (mine.state is not passed) == passed.released == (mine.pos > 0)
    assert ours.kept[1].state.pos == 70  # restoring copied the snapshot, never advanced it
    single = SteppedPrefill.open(
        model, model.new_state(), [*base[:12], 1], kept=Kept(ours.kept[0].tokens, ours.kept[0].state)
    )
    assert single.pos == 10


def test_logits_are_kept_per_chunk_only_when_asked(model: Any) -> None:
    prompt = list(range(1, 100))
    pf = SteppedPrefill.open(model, model.new_state(), prompt, chunk_cap=128)
    assert pf.logits is None and pf.chunk_logits is None
    assert pf.step() is True and pf.chunk_logits is None and pf.logits is not None
    kept = SteppedPrefill.open(model, model.new_state(), prompt, keep_logits=True)
    assert kept.step() is False and kept.step() is True
    assert kept.chunk_logits is not None and [c.shape[0] for c in kept.chunk_logits] == [64, 35]
    np.testing.assert_array_equal(kept.chunk_logits[-1][-1], kept.logits)


@pytest.mark.parametrize("cap", [0, -64, True, 64.0, "64"])
def test_a_chunk_cap_that_is_not_an_int_of_at_least_one_is_refused_by_name(model: Any, cap: Any) -> None:
    with pytest.raises(PrefillError, match=rf"^chunk_cap must be an int >= 1, got {re.escape(repr(cap))}$"):
        SteppedPrefill.open(model, model.new_state(), [1, 2], chunk_cap=cap)


def test_refusals_name_the_argument(model: Any) -> None:
    def refused(match: str, prompt: Any, state: Any = None, **kw: Any) -> None:
        with pytest.raises(PrefillError, match=match):
            SteppedPrefill.open(model, state or model.new_state(), prompt, **kw)

    refused(
        r"^chunk_cap 100 is not a multiple of the model's chunk_size 64: cuts off that grid",
        [1, 2],
        chunk_cap=100,
    )
    refused(r"^prompt is empty: a prefill needs at least one token$", [])
    refused(r"^prompt\[1\] = 512 is outside the vocabulary \[0, 512\)$", [0, 512])
    refused(r"^marks must lie strictly inside the prompt \(0, 10\), got \[10\]$", list(range(10)), marks=[10])
    refused(r"^starts must lie strictly inside the prompt \(0, 10\), got \[0\]$", list(range(10)), starts=[0])
    state = model.new_state()
    model.forward(np.arange(10), state)
    refused(
        r"^the state already holds 10 tokens; a prompt of 10 tokens must extend it", list(range(10)), state
    )
    done = SteppedPrefill.open(model, model.new_state(), [1, 2])
    assert done.run() is True
    with pytest.raises(PrefillError, match=r"^prefill of 2 tokens is already done$"):
        done.step()


def test_a_forward_that_does_not_advance_the_state_by_the_chunk_is_refused(model: Any) -> None:
    class Lagging:
        config = model.config

        def forward(self, tokens: Any, state: Any) -> Any:
            return model.forward(np.asarray(tokens)[:-1], state)

    with pytest.raises(PrefillError, match=r"forward of \[0, 5\) left the state at 4"):
        SteppedPrefill.open(Lagging(), model.new_state(), [1, 2, 3, 4, 5]).step()
