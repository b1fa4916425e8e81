"""Falsifiers of falsify/packs/gdn/contracts/gated-delta-net-v1.yaml. Everything comes from the `engine` fixture."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import falsify

ODD_LENGTHS = [63, 75, 150, 500]
HK, HV, DK, DV = 2, 4, 16, 24  # kernel-level heads: Hv = 2 Hk exercises the value-head -> key-head mapping


def twin_inputs(seed: int, length: int, max_log_decay: float):
    """q, k (l2-normalised, q scaled by dk^-0.5 as the model feeds them), v, g, beta, initial state."""
    rng = np.random.default_rng(seed)

    def unit(x: np.ndarray) -> np.ndarray:
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    q = (unit(rng.normal(size=(length, HK, DK))) * DK**-0.5).astype(np.float32)
    k = unit(rng.normal(size=(length, HK, DK))).astype(np.float32)
    v = rng.normal(size=(length, HV, DV)).astype(np.float32)
    g = (-rng.uniform(0.0, max_log_decay, (length, HV))).astype(np.float32)
    beta = rng.uniform(0.0, 1.0, (length, HV)).astype(np.float32)
    state = rng.normal(size=(HV, DK, DV)).astype(np.float32)
    return q, k, v, g, beta, state


def twins(engine, seed: int, length: int, max_log_decay: float, chunk_size: int):
    """The engine's two GDN kernels on the same twin_inputs: ((o, state) token by token, (o, state) chunked)."""
    kernels = engine.gdn_kernels()
    q, k, v, g, beta, s0 = twin_inputs(seed, length, max_log_decay)
    recurrent = kernels.naive_recurrent_gated_delta_rule(q, k, v, g, beta, s0)
    chunked = kernels.chunk_gated_delta_rule(q, k, v, g, beta, s0, chunk_size=chunk_size)
    return recurrent, chunked


def check_state_at_cut(engine, seed: int, cut: int, max_log_decay: float, chunk_size: int) -> None:
    """FALSIFY-GDN-002: the chunked kernel's state after `cut` tokens is the recurrent one's."""
    (_, s_ref), (_, s) = twins(engine, seed, cut, max_log_decay, chunk_size)
    falsify.check(
        "FALSIFY-GDN-002",
        state_diff=max_abs(s, s_ref),
        state_scale=float(np.abs(s_ref).max()),
        cut=cut,
        chunk_size=chunk_size,
    )


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max(initial=0.0))


def state_diff(a, b) -> float:
    xs, ys = a.arrays(), b.arrays()
    assert [x.shape for x in xs] == [y.shape for y in ys], "states of different layout"
    return max((max_abs(x, y) for x, y in zip(xs, ys, strict=True)), default=0.0)


def prompt(length: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(1000 + seed).integers(0, 512, length)


@pytest.fixture(scope="module")
def model(engine):
    return engine.load_model(weights="f32")


lengths = st.one_of(st.sampled_from([1, 2, 63, 64, 65, 75, 150, 500]), st.integers(1, 500))


@pytest.mark.falsifies("FALSIFY-GDN-001")
@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    length=lengths,
    chunk_size=st.integers(1, 128),
    max_log_decay=st.sampled_from([0.0, 0.05, 1.0, 8.0]),
)
def test_twins_agree(engine, seed: int, length: int, chunk_size: int, max_log_decay: float) -> None:
    (o_ref, _), (o, _) = twins(engine, seed, length, max_log_decay, chunk_size)
    assert o.shape == o_ref.shape == (length, HV, DV)
    falsify.check(
        "FALSIFY-GDN-001",
        out_diff=max_abs(o, o_ref),
        out_scale=float(np.abs(o_ref).max()),
        length=length,
        chunk_size=chunk_size,
        max_log_decay=max_log_decay,
    )


@pytest.mark.falsifies("FALSIFY-GDN-002")
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), cut=lengths, chunk_size=st.integers(1, 128))
def test_chunked_state_at_cut_is_recurrent_state(engine, seed: int, cut: int, chunk_size: int) -> None:
    check_state_at_cut(engine, seed, cut, 1.0, chunk_size)


@pytest.mark.falsifies("FALSIFY-GDN-002")
@pytest.mark.parametrize("cut", ODD_LENGTHS)
def test_chunked_state_at_odd_cuts(engine, cut: int) -> None:
    check_state_at_cut(engine, cut, cut, 0.05, 64)


@pytest.mark.falsifies("FALSIFY-GDN-003")
@pytest.mark.parametrize(("weights", "length"), [*(("f32", n) for n in ODD_LENGTHS), ("q4_k", 75)])
def test_causality(engine, weights: str, length: int) -> None:
    model = engine.load_model(weights=weights)
    tokens = prompt(length)
    reference = model.forward(tokens, model.new_state())
    chunk = model.config.chunk_size
    for p in sorted({1, chunk - 1, chunk, length // 2 + 1, length - 1}):
        if not 0 < p < length:
            continue
        changed = tokens.copy()
        changed[p:] = (changed[p:] + 1 + np.arange(length - p)) % model.config.vocab_size
        logits = model.forward(changed, model.new_state())
        falsify.check("FALSIFY-GDN-003", earlier_diff=max_abs(logits[:p], reference[:p]), length=length, p=p)


@pytest.mark.falsifies("FALSIFY-GDN-004")
@pytest.mark.parametrize("length", ODD_LENGTHS)
def test_decay_in_unit_interval(model, length: int) -> None:
    decays = model.gdn_decays(prompt(length, seed=4))
    assert decays.size, "the model has no GDN layer to observe"
    falsify.check(
        "FALSIFY-GDN-004", min_decay=float(decays.min()), max_decay=float(decays.max()), length=length
    )


@pytest.mark.falsifies("FALSIFY-GDN-005")
@pytest.mark.parametrize(("weights", "length"), [*(("f32", n) for n in ODD_LENGTHS), ("q4_k", 75)])
def test_prefill_equals_decode(engine, weights: str, length: int) -> None:
    model = engine.load_model(weights=weights)
    tokens = prompt(length, seed=5)
    whole = model.new_state()
    logits = model.forward(tokens, whole)
    stepped = model.new_state()
    steps = np.concatenate([model.forward(tokens[i : i + 1], stepped) for i in range(length)])
    assert whole.pos == stepped.pos == length
    falsify.check(
        "FALSIFY-GDN-005",
        logit_diff=max_abs(steps, logits),
        state_diff=state_diff(stepped, whole),
        length=length,
    )


def run_split(model, tokens: np.ndarray, cuts: list[int]):
    state = model.new_state()
    bounds = [0, *cuts, len(tokens)]
    logits = np.concatenate([model.forward(tokens[a:b], state) for a, b in itertools.pairwise(bounds)])
    return logits, state


@pytest.mark.falsifies("FALSIFY-GDN-006")
@pytest.mark.parametrize(("weights", "length"), [*(("f32", n) for n in ODD_LENGTHS), ("q4_k", 150)])
def test_split_at_chunk_cuts_is_byte_identical(engine, weights: str, length: int) -> None:
    model = engine.load_model(weights=weights)
    chunk = model.config.chunk_size
    tokens = prompt(length, seed=6)
    whole = model.new_state()
    logits = model.forward(tokens, whole)
    aligned = list(range(chunk, length, chunk))
    for cuts in ([aligned[0]] if aligned else [], aligned, aligned[1::2]):
        split, state = run_split(model, tokens, cuts)
        falsify.check(
            "FALSIFY-GDN-006",
            logit_diff=max_abs(split, logits),
            same_state=state.to_bytes() == whole.to_bytes(),
            length=length,
            cuts=cuts,
        )


@pytest.mark.falsifies("FALSIFY-GDN-007")
@pytest.mark.parametrize("length", ODD_LENGTHS)
def test_split_anywhere_matches(model, length: int) -> None:
    tokens = prompt(length, seed=7)
    whole = model.new_state()
    logits = model.forward(tokens, whole)
    rng = np.random.default_rng(length)
    for cuts in ([1], [length - 1], [3, 40], sorted(set(rng.integers(1, length, 5).tolist()))):
        split, state = run_split(model, tokens, cuts)
        falsify.check(
            "FALSIFY-GDN-007",
            logit_diff=max_abs(split, logits),
            state_diff=state_diff(state, whole),
            length=length,
            cuts=cuts,
        )


@pytest.mark.falsifies("FALSIFY-GDN-008")
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_bad_token_id(model, data) -> None:
    vocab = model.config.vocab_size
    bad_id = data.draw(st.one_of(st.integers(-(2**31), -1), st.integers(vocab, 2**31)), label="bad_id")
    position = data.draw(st.integers(0, 74), label="position")
    state = model.new_state()
    model.forward(prompt(20, seed=8), state)
    before = state.to_bytes()
    tokens = prompt(75, seed=9)
    tokens[position] = bad_id
    try:
        model.forward(tokens, state)
    except ValueError as e:
        raised, message = True, str(e)
    else:
        raised, message = False, ""
    falsify.check(
        "FALSIFY-GDN-008",
        raised=raised,
        names_token=str(bad_id) in message and f"position {position}" in message,
        state_unchanged=state.to_bytes() == before,
        bad_id=bad_id,
        position=position,
    )
