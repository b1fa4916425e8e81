"""The engine protocol (falsify/engines/protocol.py) and the deliberately broken adapter (falsify/engines/adapters/broken.py).

The broken adapter polls the cancel token after the decode forward, the bug apr-serve-cancellation-v1 was written
against. The same falsifiers that pass on the reference engine must turn the gate red on it, naming
FALSIFY-SERVE-CANCEL-002 (decode_forwards == emitted - 1).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from testkit_gate_cli import failing_budget_cancel_gate

import falsify
from falsify.engines.adapters.broken import BrokenEngine
from falsify.engines.loading import EngineError, load_engine
from falsify.engines.protocol import CAPABILITIES, SERVER_CAPABILITIES, Engine, missing

ROOT = Path(__file__).resolve().parents[1]


def test_reference_engine_offers_every_capability_it_claims() -> None:
    engine = load_engine("reference")
    assert isinstance(engine, Engine)
    for capability in CAPABILITIES:
        if capability in SERVER_CAPABILITIES:  # the reference's HTTP server offers these (openai+http://...)
            assert engine.supports(capability) == f"reference engine has no {capability!r}"
            continue
        assert engine.supports(capability) is None
        assert missing(engine, capability) == [], capability


def test_missing_names_what_an_engine_lacks() -> None:
    class Bare:
        name = "bare"

        def supports(self, capability: str) -> str | None:
            return None

        def session(self, model: object) -> None:
            return None

    assert missing(Bare(), "generate") == ["load_model", "cancel_token"]
    assert missing(object(), "quant") == ["name", "supports", "q4_k"]
    with pytest.raises(ValueError, match="unknown capability 'lane'"):
        missing(Bare(), "lane")


def test_broken_engine_offers_generate_only_and_says_why_not_the_rest() -> None:
    engine = load_engine("falsify.engines.adapters.broken:BrokenEngine")
    assert isinstance(engine, BrokenEngine) and engine.name == "broken"
    assert engine.supports("generate") is None and missing(engine, "generate") == []
    for capability in ("quant", "model", "prefill", "lanes"):
        reason = engine.supports(capability)
        assert reason and capability in reason


@pytest.mark.parametrize("budget", [0, 1, 3])
def test_broken_session_wastes_the_forward_that_finds_the_cancel(budget: int) -> None:
    engine = BrokenEngine()
    model = engine.load_model("f32")
    token = engine.cancel_token().with_budget(budget)
    run = engine.session(model).generate([1, 2, 3, 4], 10, cancel=token)
    # the bug, measured: n tokens from n decode forwards plus the prefill, the last forward thrown away
    assert (run.emitted, run.decode_forwards, run.prefill_forwards) == (budget, budget, 1)
    assert run.wasted_forwards == 1 and run.stop_reason == "cancelled"
    if budget:
        with pytest.raises(falsify.ContractViolation, match="FALSIFY-SERVE-CANCEL-002"):
            falsify.check(
                "FALSIFY-SERVE-CANCEL-002",
                emitted=run.emitted,
                decode_forwards=run.decode_forwards,
                n=budget,
                max_tokens=10,
            )


def test_broken_session_is_the_reference_loop_when_nothing_cancels() -> None:
    """The bug is only in the cancel path: uncancelled runs equal the reference engine's token for token."""
    broken, reference = BrokenEngine(), load_engine("reference")
    model = reference.load_model("f32")
    ours = broken.session(model).generate([5, 6, 7], 6)
    theirs = reference.session(model).generate([5, 6, 7], 6)
    assert ours.tokens == theirs.tokens
    assert (ours.decode_forwards, ours.wasted_forwards, ours.stop_reason) == (5, 0, "max_tokens")


def test_unknown_engine_is_a_clear_error() -> None:
    with pytest.raises(EngineError, match="unknown engine 'nope'"):
        load_engine("nope")
    with pytest.raises(EngineError, match="has no 'Missing'"):
        load_engine("falsify.engines.adapters.broken:Missing")


@pytest.mark.parametrize(
    ("spec", "source", "message"),
    [
        (":x", None, r"engine ':x': expected module:factory"),
        (".x:y", None, r"engine '\.x:y': expected module:factory"),
        ("x:", None, r"engine 'x:': expected module:factory"),
        (
            'exec:"python3',
            None,
            r"engine 'exec:\"python3': exec: cannot split the command .*No closing quotation",
        ),
        ("exec:", None, r"engine 'exec:': exec: needs a command"),
        ("badeng:make", "def (:\n", r"importing badeng raised SyntaxError: .*badeng\.py, line 1"),
        ("badeng:make", "import sys\nsys.exit(5)\n", r"importing badeng raised SystemExit\(5\)"),
        (
            "badeng:make",
            "import sys\ndef make():\n    sys.exit(7)\n",
            r"badeng:make\(\) raised SystemExit\(7\)",
        ),
        (
            "badeng:make",
            "def make():\n    raise KeyboardInterrupt\n",
            r"badeng:make\(\) raised KeyboardInterrupt",
        ),
    ],
    ids=[
        "no-module",
        "relative",
        "no-factory",
        "unbalanced-quote",
        "no-command",
        "syntax",
        "exit-on-import",
        "exit-in-factory",
        "interrupt-in-factory",
    ],
)
def test_an_engine_spec_that_cannot_load_is_one_line_naming_the_spec_and_the_cause(
    tmp_path: Path, spec: str, source: str | None, message: str
) -> None:
    if source is not None:
        (tmp_path / "badeng.py").write_text(source)
    try:
        with pytest.raises(EngineError, match=message) as raised:
            load_engine(spec, (tmp_path,))
    finally:
        sys.modules.pop("badeng", None)  # a module that imported is cached: the next case writes its own
    assert "\n" not in str(raised.value)


def test_gate_fails_on_the_broken_engine_naming_the_emitted_minus_one_prediction(tmp_path: Path) -> None:
    """`falsify gate --engine module:factory`, restricted to the budget-cancel falsifier to stay quick."""
    proc, rows = failing_budget_cancel_gate("falsify.engines.adapters.broken:BrokenEngine", tmp_path, ROOT)
    assert rows["FALSIFY-SERVE-CANCEL-002"]["outcome"] == "FAIL"
    failed = rows["FALSIFY-SERVE-CANCEL-002"]["values"]
    assert failed["decode_forwards"] == failed["emitted"], failed  # the poll-after-forward signature
    # the same run's other claims still hold: the gate names the broken claim, not everything
    assert rows["FALSIFY-SERVE-CANCEL-001"]["outcome"] == "PASS"
    assert "FALSIFY-SERVE-CANCEL-002" in proc.stdout and "gate: FAIL" in proc.stdout


def test_a_registered_name_passes_the_text_after_its_colon_to_its_factory() -> None:
    """`llamacpp:PATH.gguf`: the registered factory is called with PATH.gguf (broken takes none, so it refuses)."""
    with pytest.raises(EngineError, match=r"BrokenEngine\('x\.gguf'\) raised TypeError"):
        load_engine("broken:x.gguf")


def test_without_the_reference_distribution_the_default_weights_are_one_named_error(tmp_path: Path) -> None:
    """In a process where `reference` is not importable (no checkout on the path), the adapters' fallback says what
    to install or pass; the broken engine's model (the reference engine's, found by name) is an EngineError."""
    import subprocess
    import sys

    code = (
        "from falsify.engines.adapters import reference_tiny as r\n"
        "from falsify.engines.loading import EngineError, load_engine\n"
        "print(r.installed()); print(r.source('--engine x:PATH'))\n"
        "try:\n    r.reference_module('tiny', '--engine x:PATH')\n"
        "except r.NoDefaultWeights as exc:\n    print(exc)\n"
        "try:\n    load_engine('broken').load_model()\n"
        "except EngineError as exc:\n    print(exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    installed, source, fallback, broken = done.stdout.splitlines()
    assert installed == "False"
    assert source.startswith("none: --engine x:PATH (falsify-harness-reference, whose tiny model")
    assert fallback.startswith(
        "no weights named (--engine x:PATH) and the default, the reference engine's tiny"
    )
    assert fallback.endswith("pip install ./packaging/reference (distribution falsify-harness-reference)")
    assert broken.startswith("engine 'reference': cannot import reference.engine")


def test_install_hints_name_packages_by_the_module_that_was_missing() -> None:
    from falsify.engines.loading import install_hint

    assert "pip install ./packaging/reference" in install_hint("reference.engine")
    assert "pip install torch transformers" in install_hint("torch")
    assert install_hint("transformers.models") == install_hint("torch")
    assert "pip install llama-cpp-python" in install_hint("llama_cpp")
    assert install_hint("numpy") == ""


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, 7.0),
        ("2.5", 2.5),
        ("x", "FALSIFY_TEST_SECONDS='x' is not a number"),
        ("0", "FALSIFY_TEST_SECONDS='0' must be a number of seconds from 0.01 to 604800"),
        ("nan", "FALSIFY_TEST_SECONDS='nan' must be a number of seconds from 0.01 to 604800"),
        ("inf", "FALSIFY_TEST_SECONDS='inf' must be a number of seconds from 0.01 to 604800"),
        ("1e308", "FALSIFY_TEST_SECONDS='1e308' must be a number of seconds from 0.01 to 604800"),
    ],
)
def test_an_adapters_number_setting_is_its_default_a_positive_number_or_its_named_error(
    monkeypatch: pytest.MonkeyPatch, raw: str | None, expected: float | str
) -> None:
    from falsify.engines.env_settings import seconds as positive_number

    class SettingError(Exception):
        pass

    if raw is None:
        monkeypatch.delenv("FALSIFY_TEST_SECONDS", raising=False)
    else:
        monkeypatch.setenv("FALSIFY_TEST_SECONDS", raw)
    if isinstance(expected, float):
        assert positive_number("FALSIFY_TEST_SECONDS", 7.0, SettingError) == expected
    else:
        with pytest.raises(SettingError) as info:
            positive_number("FALSIFY_TEST_SECONDS", 7.0, SettingError)
        assert str(info.value) == expected
