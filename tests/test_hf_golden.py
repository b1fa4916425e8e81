"""Falsifiers of contracts/hf-golden-v1.yaml: the engine against HF transformers' committed outputs, no torch.

The golden data (tests/data/hf_golden/, made by make_hf_golden.py in `tox -e golden`) holds, per checkpoint and run,
the prompt, HF's logits at every position, every decoder layer's output and each GDN layer's conv and recurrent
state after the run. The checkpoints are rebuilt here (the tiny model from the engine, the variant by
tests/data/hf_golden/checkpoint.py) and must have the recorded digests, so the comparison is on the same weights.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# the generator's own error model (N, HF's chunk) and variant checkpoint: one copy, in tests/data/hf_golden/
from data.hf_golden.make_hf_golden import HF_CHUNK, load_checkpoint_module, n_red, sha256

import falsify

DATA = Path(__file__).parent / "data" / "hf_golden"
PROVENANCE = json.loads((DATA / "provenance.json").read_text())
RUNS = [(m, r["name"]) for m, entry in PROVENANCE["models"].items() for r in entry["runs"]]


@pytest.fixture(scope="module")
def checkpoints(engine, tmp_path_factory) -> dict[str, Path]:
    paths = {
        "tiny-0": Path(engine.tiny_model_path()),
        "variant-7": load_checkpoint_module().write_checkpoint(tmp_path_factory.mktemp("variant-7")),
    }
    for name, path in paths.items():
        recorded = PROVENANCE["models"][name]
        for file, key in (("config.json", "config_sha256"), ("model.safetensors", "weights_sha256")):
            assert sha256(path / file) == recorded[key], (
                f"{name}: {path / file} is not the checkpoint the golden data was made on ({key} differs); "
                "if the generator changed on purpose, run `tox -e golden -- --write`"
            )
    return paths


@pytest.fixture(scope="module")
def goldens(engine, checkpoints: dict[str, Path]) -> dict[str, tuple[dict, dict, Any]]:
    """model -> (config, golden arrays, the loaded model)."""
    out = {}
    for name, path in checkpoints.items():
        with np.load(DATA / PROVENANCE["models"][name]["file"], allow_pickle=False) as npz:
            golden_all = {k: npz[k] for k in npz.files}
        config = json.loads((path / "config.json").read_text())
        out[name] = (config, golden_all, engine.load_checkpoint(path, weights="f32"))
    return out


@pytest.fixture
def traces(engine, goldens) -> Any:
    """(model, run) -> (config, golden arrays, engine arrays, the case every check records), the engine run call
    by call as HF was.

    Run inside each test, not once per module: mutmut credits a function to the test during which it ran, and
    a mutant is re-checked only by the tests credited with its function."""

    def run(name: str, run_name: str) -> tuple[dict, dict, dict, dict]:
        config, golden_all, model = goldens[name]
        (run,) = [r for r in PROVENANCE["models"][name]["runs"] if r["name"] == run_name]
        golden = {k.split("/")[0]: v for k, v in golden_all.items() if k.endswith("/" + run_name)}
        tokens = golden["tokens"]
        state = model.new_state()
        calls = [
            engine.trace(model, tokens[a:b], state)
            for a, b in itertools.pairwise([0, *run["cuts"], len(tokens)])
        ]
        ours = {
            "logits": np.concatenate([c["logits"] for c in calls]),
            "hidden": np.concatenate([c["hidden"] for c in calls], axis=1),
            "conv": calls[-1]["conv"],
            "recurrent": calls[-1]["recurrent"],
        }
        # what every HFGOLD check records of the run: its tolerance's N, the model and the run
        case = {"n_red": n_red(config, len(tokens)), "model": name, "run": run_name}
        return config, golden, ours, case

    return run


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape, f"engine {a.shape} vs HF {b.shape}"
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())


def scale(x: np.ndarray) -> float:
    return float(np.abs(x).max())


@pytest.mark.falsifies("FALSIFY-HFGOLD-001")
@pytest.mark.parametrize(("model", "run"), RUNS)
def test_logits_match_hf_golden(traces, model: str, run: str) -> None:
    config, golden, ours, case = traces(model, run)
    falsify.check(
        "FALSIFY-HFGOLD-001",
        logit_diff=max_abs(ours["logits"], golden["logits"]),
        logit_scale=scale(golden["logits"]),
        n_layers=config["num_hidden_layers"],
        **case,
    )


@pytest.mark.falsifies("FALSIFY-HFGOLD-002")
@pytest.mark.parametrize(("model", "run"), RUNS)
def test_each_layer_matches_hf_golden(traces, model: str, run: str) -> None:
    """In layer order: the first violation is the first layer that diverges (the later ones inherit it)."""
    config, golden, ours, case = traces(model, run)
    assert len(golden["hidden"]) == config["num_hidden_layers"] > 0
    for layer, (h_ours, h_hf) in enumerate(zip(ours["hidden"], golden["hidden"], strict=True)):
        falsify.check(
            "FALSIFY-HFGOLD-002",
            hidden_diff=max_abs(h_ours, h_hf),
            hidden_scale=scale(h_hf),
            layer=layer,
            layer_type=config["layer_types"][layer],
            **case,
        )


@pytest.mark.falsifies("FALSIFY-HFGOLD-003")
@pytest.mark.parametrize(("model", "run"), RUNS)
def test_gdn_states_match_hf_golden(traces, model: str, run: str) -> None:
    config, golden, ours, case = traces(model, run)
    gdn = [i for i, t in enumerate(config["layer_types"]) if t == "linear_attention"]
    assert gdn and len(golden["conv"]) == len(golden["recurrent"]) == len(gdn)
    T = len(golden["tokens"])
    for slot, layer in enumerate(gdn):
        falsify.check(
            "FALSIFY-HFGOLD-003",
            conv_diff=max_abs(ours["conv"][slot], golden["conv"][slot]),
            conv_scale=scale(golden["conv"][slot]),
            recurrent_diff=max_abs(ours["recurrent"][slot], golden["recurrent"][slot]),
            recurrent_scale=scale(golden["recurrent"][slot]),
            recurrence_terms=(config["linear_key_head_dim"] + HF_CHUNK) * T,
            layer=layer,
            **case,
        )


def test_golden_files_are_the_recorded_ones() -> None:
    """The committed npz files are the ones provenance.json describes (its sha256 is taken right after writing)."""
    for name, entry in PROVENANCE["models"].items():
        assert sha256(DATA / entry["file"]) == entry["npz_sha256"], (
            f"{entry['file']} changed since {name} was made"
        )
    total = sum((DATA / e["file"]).stat().st_size for e in PROVENANCE["models"].values())
    assert total < 2 * 2**20, f"golden data is {total} bytes; keep it under 2 MiB"
