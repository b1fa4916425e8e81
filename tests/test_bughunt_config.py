"""Falsifier of contract hf-config-v1 (contracts/hf-config-v1.yaml): spellings of config.json that transformers reads
as one model, each written beside the tiny checkpoint's weights and loaded through the engine (`load_checkpoint`).
"""

from __future__ import annotations

import copy
import json
import shutil
import sys
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


class Spellings:
    """Each spelling written beside the tiny checkpoint's weights and loaded once: its logits over PROMPT, or None
    with the engine's error in `refused` when the engine would not load it."""

    def __init__(self, engine: Any, root: Path) -> None:
        self.engine, self.root = engine, root
        self.tiny = Path(engine.tiny_model_path())
        self.base = json.loads((self.tiny / "config.json").read_text())
        self.done: dict[str, np.ndarray | None] = {}
        self.refused: dict[str, str] = {}

    def logits(self, name: str, spell: Any) -> np.ndarray | None:
        if name in self.done:
            return self.done[name]
        where = self.root / name
        where.mkdir()
        (where / "config.json").write_text(json.dumps(spell(copy.deepcopy(self.base))))
        for weights in self.tiny.glob("*.safetensors"):
            shutil.copyfile(weights, where / weights.name)
        try:
            model = self.engine.load_checkpoint(where, weights="f32")
        except Exception as exc:  # a spelling transformers reads, refused: the claim fails, naming the error
            self.refused[name] = f"{type(exc).__name__}: {exc}"
            self.done[name] = None
            return None
        self.done[name] = np.asarray(model.forward(PROMPT, model.new_state()), np.float64)
        return self.done[name]


@pytest.fixture(scope="module")
def spellings(engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Spellings:
    return Spellings(engine, tmp_path_factory.mktemp("config-spellings"))


@pytest.mark.falsifies("FALSIFY-CONFIG-001")
@pytest.mark.parametrize("group", list(GROUPS))
def test_every_spelling_of_a_config_runs_its_model(spellings: Spellings, group: str) -> None:
    tiny = spellings.logits("layer-types-listed", GROUPS["tiny"][0][1])
    first_name, first = GROUPS[group][0]
    reference = spellings.logits(first_name, first)
    differs = group == "tiny" or (
        reference is not None and tiny is not None and not np.array_equal(reference, tiny)
    )
    for name, spell in GROUPS[group]:
        ours = spellings.logits(name, spell)
        both = ours is not None and reference is not None
        falsify.check(
            "FALSIFY-CONFIG-001",
            loaded=both,
            refusal=spellings.refused.get(name) or spellings.refused.get(first_name) or "",
            max_abs_diff=float(np.abs(ours - reference).max())
            if ours is not None and reference is not None
            else sys.float_info.max,
            tokens=len(PROMPT),
            group_differs=bool(differs),
            group=group,
            spelling=name,
        )
