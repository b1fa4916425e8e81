"""FALSIFY-SERVE-PREFILL-004 sizes its long prompt to the engine's declared context (issue #46): it submitted a
fixed 1,100-token prompt, an ERROR on a 1,024-position engine. The reference engine, declaring a smaller context,
is judged on prompts that fit it, and one whose context holds no long prompt is NOT APPLICABLE, the engine's
reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from testkit_gate_cli import run_serving_falsifiers

from falsify.contracts.packs import falsifiers_dir

ROOT = Path(__file__).resolve().parent.parent

SMALL = '''\
from dataclasses import replace

from reference.engine import ReferenceEngine

CONTEXT = {context}


class Declared:
    """The reference's model, declaring a context of CONTEXT positions."""

    def __init__(self, model):
        self._model = model
        self.config = replace(model.config, max_position_embeddings=CONTEXT)

    def __getattr__(self, name):
        return getattr(self._model, name)


class Engine(ReferenceEngine):
    def load_model(self, weights="f32"):
        return Declared(super().load_model(weights))
'''


@pytest.mark.parametrize(("context", "outcome", "prompt_len"), [(300, "passed", 299), (200, "skipped", None)])
def test_prefill_004_fits_its_prompt_to_the_declared_context(
    tmp_path: Path, context: int, outcome: str, prompt_len: int | None
) -> None:
    (tmp_path / "small.py").write_text(SMALL.format(context=context), encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text('[tool.falsify]\npacks = ["serving"]\n', encoding="utf-8")
    run, tests = run_serving_falsifiers(
        tmp_path,
        "small:Engine",
        str(falsifiers_dir("serving") / "test_lanes_host.py"),
        "-k",
        "test_decode_waits_at_most_one_chunk",
        timeout=600,
    )
    assert len(tests) == 3, run.stdout[-3000:]
    for nid, record in tests.items():
        assert record["outcome"] == outcome, (nid, record, run.stdout[-2000:])
        if prompt_len is not None:  # every case, 1,100 tokens wanted included, ran a prompt that fits
            values = record["observations"]["FALSIFY-SERVE-PREFILL-004"]["last_values"]
            assert values["prompt_len"] == prompt_len, values
        else:
            assert record["not_applicable"] == (
                "FALSIFY-SERVE-PREFILL-004 cannot be shown on this engine: the engine's context (200 positions) "
                "holds no prompt of 256 tokens, the shortest long prompt the claim is about"
            )
