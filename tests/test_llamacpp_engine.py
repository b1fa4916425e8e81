"""llama.cpp through llama-cpp-python (falsify/engines/adapters/llamacpp.py): numerics against the reference, and
the contracts' findings on it, each pinned so a llama.cpp upgrade that changes one is noticed (docs/llamacpp.md).

tox -e llamacpp (marker llamacpp; skipped without llama-cpp-python). Measured on llama-cpp-python 0.3.36 built
from its sdist (GGML_NATIVE on an AMD EPYC with AVX-512, no AMX), one thread. The converter tests also need
torch, transformers, sentencepiece and $FALSIFY_LLAMACPP_SRC (an unpacked sdist: tox -e llamacpp sets it up).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp")

from falsify.engines.adapters.llamacpp import (  # noqa: E402
    LlamaCppAbortEngine,
    LlamaCppEngine,
    LlamaCppModel,
    _model_params,
    load,
    tiny_gguf,
)
from falsify.engines.protocol import Engine, missing  # noqa: E402
from falsify.harness.instruments import CountingCancel, CountingModel  # noqa: E402
from reference.model import load_model  # noqa: E402
from reference.tiny import tiny_model  # noqa: E402

pytestmark = pytest.mark.llamacpp
ROOT = Path(__file__).resolve().parents[1]
PROMPT = [int(t) for t in np.random.default_rng(7).integers(0, 512, 150)]


@pytest.fixture(scope="module")
def engine() -> LlamaCppEngine:
    return LlamaCppEngine()


@pytest.fixture(scope="module")
def model(engine: LlamaCppEngine) -> LlamaCppModel:
    return engine.load_model("f32")


@pytest.fixture(scope="module")
def reference_logits() -> np.ndarray:
    ref = load_model(tiny_model(0), "f32")
    return ref.forward(PROMPT, ref.new_state())


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float64) - b).max())


def test_engine_offers_generate_and_prefill_and_says_why_not_the_rest(engine: LlamaCppEngine) -> None:
    assert isinstance(engine, Engine) and engine.name == "llamacpp"
    for capability in ("generate", "prefill"):
        assert engine.supports(capability) is None and missing(engine, capability) == []
    for capability, word in [
        ("lanes", "lane host"),
        ("quant", "Q4_K"),
        ("model", "kernels"),
        ("sample", "pick"),
    ]:
        assert word in (engine.supports(capability) or ""), capability


def test_f32_logits_match_the_reference(model: LlamaCppModel, reference_logits: np.ndarray) -> None:
    """The issue's bound: f32 within 1e-4 with flash attention off and an f32 KV cache (measured 7.8e-6)."""
    got = model.forward(PROMPT, model.new_state())
    err = max_abs(got, reference_logits)
    print(
        f"\nllama.cpp f32 vs reference: max-abs {err:.3g} on logits up to {np.abs(reference_logits).max():.3g}"
    )
    assert err <= 1e-4


def test_finding_llama_cpp_defaults_cost_accuracy(reference_logits: np.ndarray) -> None:
    """Finding L5: with llama.cpp's defaults (flash attention on, f16 K/V cache) the same file is 3.1e-4 off,
    past the 1e-4 bound; pinned as an order of magnitude (1e-4 .. 1e-2)."""
    with _model_params(use_extra_bufts=False):
        llama = llama_cpp.Llama(
            str(tiny_gguf("f32")), n_ctx=4096, n_batch=4096, n_threads=1, flash_attn=True, verbose=False
        )
    m = LlamaCppModel(llama)
    err = max_abs(m.forward(PROMPT, m.new_state()), reference_logits)
    print(f"\nllama.cpp defaults (flash attention, f16 KV) vs reference: {err:.3g}")
    assert 1e-4 < err < 1e-2


def test_greedy_tokens_equal_the_reference_engine(engine: LlamaCppEngine, model: LlamaCppModel) -> None:
    from falsify.engines.loading import load_engine

    reference = load_engine("reference")
    for seed in range(3):
        p = PROMPT[seed : 20 + seed]
        ours = engine.session(model).generate(p, 12)
        theirs = reference.session(reference.load_model("f32")).generate(p, 12)
        assert ours.tokens == theirs.tokens, (seed, ours.tokens, theirs.tokens)


def test_state_bytes_are_llama_cpps_sequence_state(model: LlamaCppModel) -> None:
    a, b = model.new_state(), model.new_state()
    model.forward(PROMPT[:40], a)
    model.forward(PROMPT[:40], b)  # swaps a out (its bytes saved) and b in
    assert a.to_bytes() == b.to_bytes() and a.pos == 40
    c = a.copy()
    model.forward([3], c)
    assert a.digest() == b.digest() != c.digest() and c.pos == 41
    with pytest.raises(ValueError, match=r"tokens\[1\] = 512 is outside the vocabulary"):
        model.forward([1, 512], model.new_state())
    a.release()
    with pytest.raises(ValueError, match="used after release"):
        a.to_bytes()


@pytest.mark.parametrize(
    ("cuts", "identical"),
    [((64,), True), ((25,), True), ((25, 40, 100), True), ((149,), False), ((39, 40), False)],
)
def test_finding_split_prefill_is_byte_identical_unless_a_call_has_one_token(
    model: LlamaCppModel, cuts: tuple[int, ...], identical: bool
) -> None:
    """Finding L3: calls of 2+ tokens run the chunked Gated DeltaNet and their cuts leave the state and logits
    byte-identical to one call, on the 64-token grid or not (25 + 15 too); a one-token call runs the recurrent
    path, and its state and logits differ in the last bits."""
    one = model.new_state()
    whole = model.forward(PROMPT, one)
    split = model.new_state()
    bounds = [0, *cuts, len(PROMPT)]
    logits = np.concatenate([model.forward(PROMPT[a:b], split) for a, b in itertools.pairwise(bounds)])
    same = split.to_bytes() == one.to_bytes() and np.array_equal(logits, whole)
    print(f"\ncuts {cuts}: identical {same}, max-abs {max_abs(logits, whole):.3g}")
    assert same is identical
    assert max_abs(logits, whole) <= 1e-4


@pytest.mark.parametrize("budget", [0, 1, 3, 8])
def test_finding_stopping_criteria_cancel_costs_a_thrown_away_forward(
    engine: LlamaCppEngine, model: LlamaCppModel, budget: int
) -> None:
    """Finding L2, the bug apr-serve-cancellation-v1 was written about: Llama.generate calls stopping_criteria
    after the forward and the sample, so a budget of n emits n tokens, runs n decode forwards (harness-counted)
    and throws the last one's token away; a budget of 0 still runs the prefill."""
    counting, cancel = CountingModel(model), CountingCancel.with_budget(budget)
    run = engine.session(counting).generate(PROMPT[:5], 16, cancel=cancel)
    prefill, decode = counting.split(5)
    assert (run.emitted, len(decode), len(prefill), cancel.polls) == (budget, budget, 1, budget + 1)
    assert [f.start for f in decode] == list(range(5, 5 + budget)) and run.stop_reason == "cancelled"
    assert run.wasted_forwards == 1 and (run.decode_forwards, run.prefill_forwards) == (budget, 1)


def test_finding_abort_callback_polls_inside_the_graph_and_leaves_the_token(model: LlamaCppModel) -> None:
    """Finding L4: llama_set_abort_callback is polled while llama.cpp computes a graph (about 140 times per
    one-token decode here), a cancel set after the 3rd token aborts the next decode, and llama.cpp leaves that
    aborted decode's token in the sequence (8 positions held for a state of 7); the adapter removes it."""
    cancel = CountingCancel()
    seen: list[int] = []

    def on_token(t: int) -> None:
        seen.append(t)
        if len(seen) == 3:
            cancel.cancel()

    counting = CountingModel(model)
    run = LlamaCppAbortEngine().session(counting).generate(PROMPT[:5], 16, cancel=cancel, on_token=on_token)
    prefill, decode = counting.split(5)
    assert run.emitted == 3 and run.aborted_decodes == 1 and [f.start for f in decode] == [5, 6, 7]
    assert run.kept_after_abort == 8  # positions 0..7: the aborted decode's token at 7 stayed
    assert cancel.polls > 10 * (len(prefill) + len(decode))  # many polls per forward, not one
    assert model.live is not None and model.live.pos == 7


def test_finding_q4k_depends_on_the_kernel_and_is_not_the_reference(reference_logits: np.ndarray) -> None:
    """Finding L6: on the same Q4_K file, llama.cpp's logits differ from the reference's (which multiplies float
    activations by the dequantized blocks) by far more than f32 rounding: llama.cpp's CPU k-quant dot products
    quantize the activations to Q8_K. Measured 0.22 at 150 tokens. With the extra buffer type (CPU_REPACK,
    q4_K_8x8 here), the logits move again, by 0.08 at 150 tokens vs plain CPU buffers."""
    path = tiny_gguf("q4_k")
    ours = load_model(path)  # stored Q4_K blocks
    ref = ours.forward(PROMPT, ours.new_state())
    plain, repacked = load(path, 1, False), load(path, 1, True)
    a = plain.forward(PROMPT, plain.new_state())
    b = repacked.forward(PROMPT, repacked.new_state())
    print(f"\nQ4_K: llama.cpp vs reference {max_abs(a, ref):.3g}; repacked vs plain {max_abs(a, b):.3g}")
    assert 1e-2 < max_abs(a, ref) < 1.0
    assert 1e-3 < max_abs(a, b) < 1.0
    assert (a.argmax(1) == ref.argmax(1)).mean() > 0.8


AMX_REPRO = """
import sys
from pathlib import Path
from falsify.engines.adapters.llamacpp import load
model = load(Path(sys.argv[1]), 1, True)  # use_extra_bufts=True: llama.cpp's default
for n in (1, 2, 150):
    model.forward(list(range(1, n + 1)), model.new_state())
print("decoded 1, 2 and 150 tokens")
"""


def test_finding_extra_buffer_types_on_this_cpu(tmp_path: Path) -> None:
    """Finding L1, the minimal reproduction: load a Q4_K GGUF with use_extra_bufts=True and decode 2+ tokens.
    The issue measured a segfault where the extra buffer type is AMX (an Intel CPU with amx_int8). This machine
    has no AMX: its extra buffer type is CPU_REPACK, and the same program decodes; the AMX branch below is the
    issue's report, not re-measured here."""
    amx = "amx_int8" in Path("/proc/cpuinfo").read_text()
    proc = subprocess.run(
        [sys.executable, "-c", AMX_REPRO, str(tiny_gguf("q4_k"))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if amx:
        assert proc.returncode == -11, (proc.returncode, proc.stderr[-2000:])  # SIGSEGV
    else:
        assert proc.returncode == 0 and "decoded 1, 2 and 150 tokens" in proc.stdout, proc.stderr[-2000:]


def converter_or_skip() -> Any:
    pytest.importorskip("torch")
    pytest.importorskip("sentencepiece")
    from falsify.engines.adapters import llamacpp_files

    try:
        llamacpp_files.converter_script()
    except llamacpp_files.ToolMissing as exc:
        pytest.skip(str(exc))
    return llamacpp_files


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    files = converter_or_skip()
    work = tmp_path_factory.mktemp("convert")
    return files.convert(tiny_model(0), work / "tiny-0-converter-f32.gguf", work)


def test_reference_and_llama_cpp_on_llama_cpps_own_conversion(
    converted: Path, reference_logits: np.ndarray
) -> None:
    """The file llama.cpp's converter wrote: the reference reads it to within 1e-6 of the checkpoint (ssm_a is
    an ulp off), llama.cpp runs it to within 1e-4 of the reference, and our export gives the same logits."""
    ours = load_model(converted)
    ref_on_theirs = ours.forward(PROMPT, ours.new_state())
    llama = load(converted, 1, False)
    llama_on_theirs = llama.forward(PROMPT, llama.new_state())
    exported = load(tiny_gguf("f32"), 1, False)
    llama_on_ours = exported.forward(PROMPT, exported.new_state())
    errs = (
        max_abs(ref_on_theirs, reference_logits),
        max_abs(llama_on_theirs, reference_logits),
        max_abs(llama_on_ours, llama_on_theirs),
    )
    print(
        f"\nconverter file: reference {errs[0]:.3g}, llama.cpp {errs[1]:.3g}; our export vs theirs in llama.cpp {errs[2]:.3g}"
    )
    assert errs[0] <= 1e-6 and errs[1] <= 1e-4 and errs[2] <= 1e-4


def test_llama_cpps_quantizer_writes_reference_q4k_blocks(converted: Path, tmp_path: Path) -> None:
    """llama.cpp's quantizer (llama_model_quantize, Q4_K_M, no importance matrix) on the converter's file: every
    Q4_K tensor's blocks equal reference.Q4_K.quantize of the same float32 tensor, byte for byte; the reference
    loads the file (Q6_K output, Q4_K embedding) and its stored and dequantized runs agree."""
    import gguf

    from falsify.engines.adapters.llamacpp_files import quantize
    from reference.q4k import Q4_K

    out = quantize(converted, tmp_path / "q4km.gguf", "Q4_K_M")
    source = {t.name: np.array(t.data, np.float32) for t in gguf.GGUFReader(converted).tensors}
    n = 0
    for t in gguf.GGUFReader(out).tensors:
        if t.tensor_type == gguf.GGMLQuantizationType.Q4_K:
            blocks = np.array(t.data, np.uint8)
            x = source[t.name].reshape(blocks.shape[0], -1)
            assert np.array_equal(blocks, Q4_K.quantize(np.ascontiguousarray(x))), t.name
            n += 1
    assert n >= 20
    stored, dense = load_model(out), load_model(out, "f32")
    a, b = stored.forward(PROMPT, stored.new_state()), dense.forward(PROMPT, dense.new_state())
    assert max_abs(a, b) <= 1e-4


# The findings of `falsify gate --engine E`, measured on llama-cpp-python 0.3.36 (docs/llamacpp.md).
GATE = {
    "llamacpp": {
        "FALSIFY-SERVE-CANCEL-001": "PASS",
        "FALSIFY-SERVE-CANCEL-002": "FAIL",  # L2: decode_forwards == emitted (8 == 8 at a budget of 8)
        "FALSIFY-SERVE-CANCEL-003": "PASS",
        "FALSIFY-SERVE-CANCEL-004": "FAIL",  # a budget of 0 still runs the prefill
        "FALSIFY-SERVE-CANCEL-005": "PASS",
        "FALSIFY-SERVE-CANCEL-006": "PASS",
        "FALSIFY-SERVE-CANCEL-007": "PASS",
        "FALSIFY-SERVE-CANCEL-008": "FAIL",  # a decode forward at the position after the last emitted token
        "FALSIFY-SERVE-CANCEL-009": "PASS",
        "FALSIFY-SERVE-CANCEL-010": "FAIL",  # one wasted forward per cancelled request
        "FALSIFY-SERVE-CANCEL-011": "PASS",  # the adapter's run record agrees with the harness's counts
        "FALSIFY-SERVE-CANCEL-012": "NOT APPLICABLE",  # each generate starts from a fresh state: nothing reused
        "FALSIFY-SERVE-CANCEL-013": "PASS",  # each generate starts afresh, so a used session emits what a fresh one does
        "FALSIFY-SERVE-PREFILL-001": "FAIL",  # L3: a one-token last chunk (257 = 2 x 128 + 1) is not byte-exact
        "FALSIFY-SERVE-PREFILL-002": "FAIL",  # L3: a resume of one token (129 from 128)
        "FALSIFY-SERVE-PREFILL-003": "PASS",
        "FALSIFY-SERVE-PREFILL-011": "PASS",
        "FALSIFY-SERVE-PREFILL-020": "PASS",  # a copied state is independent of the original
        "FALSIFY-SERVE-PREFILL-021": "PASS",  # the cut rule: the adapter steps with the harness's planner
    },
}
GATE["llamacpp-q4k"] = GATE["llamacpp"] | {
    "FALSIFY-SERVE-PREFILL-011": "FAIL"
}  # L6: off-grid cuts move Q4_K 0.05


@pytest.mark.parametrize("name", sorted(GATE))
def test_gate_reports_the_measured_findings(name: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "falsify.cli", "gate", "--engine", name, "--out", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "HYPOTHESIS_PROFILE": os.environ.get("HYPOTHESIS_PROFILE", "ci")},
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # FAILs exist: the gate is red
    rows = {r["id"]: r for r in json.loads((tmp_path / "gate.json").read_text())["predictions"]}
    got = {pid: rows[pid]["outcome"] for pid in GATE[name]}
    assert got == GATE[name], {pid: (got[pid], GATE[name][pid]) for pid in got if got[pid] != GATE[name][pid]}
    others = [r for pid, r in rows.items() if pid not in GATE[name]]
    assert others and all(r["outcome"] == "NOT APPLICABLE" and r["detail"] for r in others)
    values = rows["FALSIFY-SERVE-CANCEL-002"]["values"]
    assert values["decode_forwards"] == values["emitted"], values
