"""Falsifier of contract hf-config-v1 (contracts/hf-config-v1.yaml): spellings of config.json that transformers reads
as one model, each written beside the tiny checkpoint's weights and loaded through the engine (`load_checkpoint`).
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import falsify

PROMPT = np.random.default_rng(11).integers(0, 512, 40)  # past the fourth layer's attention, in one chunk


def _interval(c: dict[str, Any]) -> dict[str, Any]:
    c = {k: v for k, v in c.items() if k != "layer_types"}
    return c | {"full_attention_interval": 4}


def _left_out(c: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in c.items() if k != "layer_types"}


def _rope(c: dict[str, Any]) -> dict[str, Any]:
    return c | {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5}}


def _rope_top(c: dict[str, Any]) -> dict[str, Any]:
    c = {k: v for k, v in c.items() if k != "rope_parameters"}
    return c | {"rope_theta": 1e6, "partial_rotary_factor": 0.5}


def _tied(c: dict[str, Any]) -> dict[str, Any]:
    return c | {"tie_word_embeddings": True}


def _wrapped(c: dict[str, Any]) -> dict[str, Any]:
    text = {k: v for k, v in c.items() if k not in ("tie_word_embeddings", "architectures")}
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "tie_word_embeddings": True,
        "text_config": text,
    }


# group -> its spellings, the first being the one the others are compared with
GROUPS = {
    "tiny": [
        ("layer-types-listed", lambda c: c),
        ("full-attention-interval", _interval),
        ("layer-types-left-out", _left_out),
    ],
    "rope-1e6": [("rope-parameters", _rope), ("rope-at-top-level", _rope_top)],
    "tied": [("flat", _tied), ("text-config-wrapper", _wrapped)],
}


@pytest.fixture(scope="module")
def logits_of(engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tiny = Path(engine.tiny_model_path())
    base = json.loads((tiny / "config.json").read_text())
    root = tmp_path_factory.mktemp("config-spellings")

    done: dict[str, np.ndarray] = {}

    def run(name: str, spell: Any) -> np.ndarray:
        """The logits of spelling `name` (each spelling loaded once a module)."""
        if name in done:
            return done[name]
        where = root / name
        where.mkdir()
        (where / "config.json").write_text(json.dumps(spell(copy.deepcopy(base))))
        for weights in tiny.glob("*.safetensors"):
            shutil.copyfile(weights, where / weights.name)
        model = engine.load_checkpoint(where, weights="f32")
        done[name] = np.asarray(model.forward(PROMPT, model.new_state()), np.float64)
        return done[name]

    return run


@pytest.mark.falsifies("FALSIFY-CONFIG-001")
@pytest.mark.parametrize("group", list(GROUPS))
def test_every_spelling_of_a_config_runs_its_model(logits_of: Any, group: str) -> None:
    tiny = logits_of("layer-types-listed", GROUPS["tiny"][0][1])
    first_name, first = GROUPS[group][0]
    reference = logits_of(first_name, first)
    differs = group == "tiny" or not np.array_equal(reference, tiny)
    for name, spell in GROUPS[group]:
        ours = logits_of(name, spell)
        falsify.check(
            "FALSIFY-CONFIG-001",
            max_abs_diff=float(np.abs(ours - reference).max()),
            tokens=len(PROMPT),
            group_differs=bool(differs),
            group=group,
            spelling=name,
        )
