"""Make (or check) the HF golden data: transformers' Qwen3_5ForCausalLM run on two seeded checkpoints.

    tox -e golden                 # regenerate in memory; exit 1 if it drifted from the committed files
    tox -e golden -- --write      # rewrite tiny-0.npz, variant-7.npz and provenance.json

For each model and run (a prompt, cut into one or two calls on one DynamicCache), the npz holds the prompt's
tokens, the logits at every position, every decoder layer's output (forward hooks on model.model.layers: the
residual stream after the layer, before the final norm) and, after the last call, each GDN layer's conv and
recurrent state from the cache. float32 on CPU, eager attention, torch's own GDN kernels (never
flash-linear-attention), one torch thread.

Drift: the regenerated arrays must equal the committed ones within the error model of contracts/hf-golden-v1.yaml
(two runs of the same oracle may differ in rounding on another CPU, not by more); the checkpoints' config and
weights digests must be equal exactly. Exit codes: 0 no drift (or written), 1 drift, 2 bad usage.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.util
import json
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).parent
EPS32 = float(np.finfo(np.float32).eps)
HF_CHUNK = 64  # torch_chunk_gated_delta_rule's chunk size
# model -> runs: (name, prompt length, cut positions of a multi-call prefill)
RUNS: dict[str, list[tuple[str, int, list[int]]]] = {
    "tiny-0": [("one-75", 75, []), ("two-45", 45, [20])],
    "variant-7": [("one-5", 5, []), ("one-67", 67, []), ("two-37", 37, [14])],
}


def load_checkpoint_module() -> Any:
    spec = importlib.util.spec_from_file_location("hf_golden_checkpoint", HERE / "checkpoint.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_model(name: str, directory: Path) -> Path:
    if name == "tiny-0":
        from reference.tiny import write_tiny  # the weights generator only: HF computes everything below

        directory.mkdir(parents=True)
        write_tiny(directory, 0)
        return directory
    return load_checkpoint_module().write_checkpoint(directory)


def prompt(length: int, vocab: int) -> np.ndarray:
    return np.random.default_rng(1000 + length).integers(0, vocab, length).astype(np.int64)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_hf(path: Path) -> dict[str, np.ndarray]:
    import torch
    import transformers

    torch.set_num_threads(1)
    model, info = transformers.Qwen3_5ForCausalLM.from_pretrained(
        str(path), dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    bad = {k: v for k, v in info.items() if v and k != "error_msgs"} | (
        {"error_msgs": info["error_msgs"]} if info.get("error_msgs") else {}
    )
    assert not bad, f"{path}: HF did not load every tensor by name: {bad}"
    model.eval()
    config = model.config
    captured: list[torch.Tensor] = []

    def hook(_module: Any, _args: Any, output: Any) -> None:
        captured.append((output[0] if isinstance(output, tuple) else output).detach())

    for layer in model.model.layers:
        layer.register_forward_hook(hook)
    gdn = [i for i, t in enumerate(config.layer_types) if t == "linear_attention"]
    out: dict[str, np.ndarray] = {}
    for run, length, cuts in RUNS[path.name]:
        tokens = prompt(length, config.vocab_size)
        cache = transformers.DynamicCache(config=config)
        logits, hidden = [], []
        for a, b in zip([0, *cuts], [*cuts, length], strict=True):
            captured.clear()
            with torch.no_grad():
                res = model(torch.from_numpy(tokens[a:b])[None], cache=cache, use_cache=True)
            logits.append(res.logits[0].numpy())
            assert len(captured) == config.num_hidden_layers, len(captured)
            hidden.append(np.stack([h[0].numpy() for h in captured]))
        out[f"tokens/{run}"] = tokens
        out[f"logits/{run}"] = np.concatenate(logits).astype(np.float32)
        out[f"hidden/{run}"] = np.concatenate(hidden, axis=1).astype(np.float32)
        out[f"conv/{run}"] = np.stack([cache.get_conv_state(i, state_idx=0)[0].numpy() for i in gdn])
        out[f"recurrent/{run}"] = np.stack(
            [cache.get_recurrent_state(i, state_idx=0)[0].numpy() for i in gdn]
        )
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def n_red(config: dict[str, Any], tokens: int) -> int:
    """The longest float32 reduction in one layer (the error model's N; contracts/hf-golden-v1.yaml)."""
    return max(
        config["hidden_size"],
        config["intermediate_size"],
        config["linear_num_value_heads"] * config["linear_value_head_dim"],
        config["num_attention_heads"] * config["head_dim"],
        tokens,
    )


def drift(
    name: str, config: dict[str, Any], old: dict[str, np.ndarray], new: dict[str, np.ndarray]
) -> list[str]:
    """Every array whose regenerated value leaves the error model's bound around the committed one."""
    problems = []
    if sorted(old) != sorted(new):
        return [f"{name}: arrays {sorted(old)} committed, {sorted(new)} regenerated"]
    gdn = [i for i, t in enumerate(config["layer_types"]) if t == "linear_attention"]
    n_layers, dk = config["num_hidden_layers"], config["linear_key_head_dim"]
    for key in sorted(new):
        kind, run = key.split("/")
        a, b = old[key], new[key]
        if a.shape != b.shape or a.dtype != b.dtype:
            problems.append(f"{name} {key}: {a.dtype}{a.shape} committed, {b.dtype}{b.shape} regenerated")
            continue
        if kind == "tokens":
            if not np.array_equal(a, b):
                problems.append(f"{name} {key}: prompt tokens changed")
            continue
        T = len(old[f"tokens/{run}"])
        N = n_red(config, T)
        layers = (
            [n_layers] if kind == "logits" else range(n_layers) if kind == "hidden" else gdn
        )  # depth - 1 of each slice
        for s, layer in enumerate(layers):
            x, y = (a, b) if kind == "logits" else (a[s], b[s])
            budget = N * (layer + 1) + ((dk + HF_CHUNK) * T if kind == "recurrent" else 0)
            bound = EPS32 * budget * float(np.abs(x).max())
            diff = float(np.abs(x.astype(np.float64) - y).max())
            if diff > bound:
                problems.append(f"{name} {key} layer {layer}: drifted by {diff:.3g} > bound {bound:.3g}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Exit codes: 0 no drift (or --write done); 1 drift from the committed files; 2 bad usage.",
    )
    parser.add_argument("--check", action="store_true", help="compare with the committed files (the default)")
    parser.add_argument("--write", action="store_true", help="rewrite the committed files")
    args = parser.parse_args(argv)
    import torch
    import transformers

    provenance_path = HERE / "provenance.json"
    committed = json.loads(provenance_path.read_text()) if provenance_path.exists() else None
    models: dict[str, Any] = {}
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, runs in RUNS.items():
            path = write_model(name, Path(tmp) / name)
            config = json.loads((path / "config.json").read_text())
            arrays = run_hf(path)
            entry: dict[str, Any] = {
                "file": f"{name}.npz",
                "checkpoint": "reference.tiny.write_tiny(dir, seed=0), as reference.tiny_model(seed=0)"
                if name == "tiny-0"
                else "tests/data/hf_golden/checkpoint.py: write_checkpoint(dir), VARIANT_CONFIG, seed 7",
                "config_sha256": sha256(path / "config.json"),
                "weights_sha256": sha256(path / "model.safetensors"),
                "runs": [{"name": r, "tokens": n, "cuts": c} for r, n, c in runs],
            }
            models[name] = entry
            if args.write:
                npz = HERE / f"{name}.npz"
                to_save: dict[str, Any] = arrays
                np.savez_compressed(npz, **to_save)
                entry["npz_sha256"] = sha256(npz)  # the zip's bytes carry a time: --check compares arrays
                continue
            if committed is None or name not in committed["models"]:
                problems.append(f"{name}: no committed golden data (run with --write)")
                continue
            was = committed["models"][name]
            for key in ("config_sha256", "weights_sha256", "runs"):
                if was[key] != entry[key]:
                    problems.append(f"{name}: {key} is {entry[key]!r}, committed {was[key]!r}")
            with np.load(HERE / was["file"], allow_pickle=False) as npz:
                old = {k: npz[k] for k in npz.files}
            same = sum(np.array_equal(old[k], arrays[k]) for k in arrays if k in old)
            print(f"{name}: {same} of {len(arrays)} arrays bit-identical to the committed ones")
            problems += drift(name, config, old, arrays)
    if args.write:
        provenance = {
            "generator": "tests/data/hf_golden/make_hf_golden.py",
            "oracle": "transformers Qwen3_5ForCausalLM, float32, CPU, eager attention, torch GDN kernels, 1 thread",
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "models": models,
        }
        provenance_path.write_text(json.dumps(provenance, indent=1) + "\n")
        print(f"wrote {', '.join(m['file'] for m in models.values())} and provenance.json")
        return 0
    for p in problems:
        print(f"drift: {p}")
    print(f"golden: {'DRIFT' if problems else 'no drift'} ({len(problems)} problems)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
