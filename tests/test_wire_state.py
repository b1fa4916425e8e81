"""The `state` capability over the wire (docs/engine-protocol.md §4.11), on `python -m reference.serve`: forward
logits, state bytes and digests equal the in-process reference engine's bit for bit, copies are independent, a
bad token id is refused as ValueError before the state moves, and the handshake names the engine."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator

import numpy as np
import pytest

from falsify.engines.wire.client import WireEngine
from reference.engine import ReferenceEngine


@pytest.fixture(scope="module")
def wire() -> Iterator[WireEngine]:
    engine = WireEngine(f"exec:{sys.executable} -m reference.serve")
    yield engine
    engine.close()


def test_forward_logits_and_state_match_in_process(wire: WireEngine) -> None:
    assert wire.supports("generate") is None
    assert wire.info == {"name": "reference", "version": "0.1.0"} and "state" in wire.capabilities
    local = ReferenceEngine().load_model("f32")
    remote = wire.load_model("f32")
    assert remote.config.vocab_size == local.config.vocab_size
    prompt = [int(t) for t in np.random.default_rng(75).integers(0, local.config.vocab_size, 75)]
    ls, rs = local.new_state(), remote.new_state()
    for cut in (prompt[:63], prompt[63:], [7]):  # a chunk, the rest, a decode step
        want = local.forward(np.asarray(cut, np.int64), ls)
        got = remote.forward(cut, rs)
        assert got is not None and got.dtype == np.float32 and got.shape == want.shape
        assert np.array_equal(got, want), f"max |diff| {np.max(np.abs(got - want))}"
        assert rs.pos == ls.pos
    assert rs.to_bytes() == ls.to_bytes()
    assert rs.digest() == ls.digest() == hashlib.sha256(ls.to_bytes()).hexdigest()


def test_copies_are_independent_and_bad_ids_leave_the_state(wire: WireEngine) -> None:
    model = wire.load_model("f32")
    state = model.new_state()
    model.forward([1, 2, 3], state)
    copy = state.copy()
    before = state.digest()
    model.forward([4], copy)
    assert state.digest() == before and copy.pos == 4 and state.pos == 3
    with pytest.raises(ValueError, match="512"):
        model.forward([1, 512], state)
    assert state.digest() == before
    copy.release()
    state.release()
