"""The numpy model against HF transformers' Qwen3_5ForCausalLM on the same checkpoint (tox -e oracle).

Needs torch and transformers (never flash-linear-attention: HF then runs its own torch reference kernels).
Each comparison prints its measured max-abs error, which the README reports.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from reference.model import Model, load_model
from reference.tiny import TINY_CONFIG, tiny_model, write_tiny

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.oracle

TOLERANCE = 1e-4  # max-abs on logits of magnitude ~5; measured errors are ~1e-5 (see README)
PROMPT = 150


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared; one thread keeps torch's results and timing stable
    yield
    torch.set_num_threads(threads)


def hf_model(path: Path, state_dict: dict[str, np.ndarray] | None = None):
    model = transformers.Qwen3_5ForCausalLM.from_pretrained(
        str(path), dtype=torch.float32, attn_implementation="eager"
    )
    if state_dict is not None:
        missing, unexpected = model.load_state_dict(
            {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state_dict.items()}, strict=False
        )
        assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    return model.eval()


def hf_logits(model, tokens: np.ndarray, cache=None) -> np.ndarray:
    with torch.no_grad():
        out = model(torch.from_numpy(tokens.astype(np.int64))[None], cache=cache, use_cache=cache is not None)
    return out.logits[0].numpy()


def report(what: str, ours: np.ndarray, theirs: np.ndarray) -> float:
    err = float(np.abs(ours.astype(np.float64) - theirs).max())
    scale = float(np.abs(theirs).max())
    print(
        f"\n{what}: max-abs {err:.3g} on logits up to {scale:.3g} (ratio {err / scale:.3g}); tolerance {TOLERANCE}"
    )
    return err


def prompt(n: int = PROMPT, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, int(TINY_CONFIG["vocab_size"]), n)


@pytest.fixture(scope="module")
def path() -> Path:
    return tiny_model(0)


def test_dense_logits_match_hf(path: Path) -> None:
    ours = load_model(path, "f32")
    tokens = prompt()
    err = report("f32 vs HF", ours.forward(tokens, ours.new_state()), hf_logits(hf_model(path), tokens))
    assert err <= TOLERANCE


def test_q4k_logits_match_hf_on_dequantized_weights(path: Path) -> None:
    ours = load_model(path, "q4_k")
    tokens = prompt(seed=1)
    theirs = hf_logits(hf_model(path, ours.dense_state_dict()), tokens)
    err = report("q4_k vs HF on dequantized weights", ours.forward(tokens, ours.new_state()), theirs)
    assert err <= TOLERANCE
    # and the quantization itself moved the logits far more than that: the comparison is not vacuous
    assert (
        report("q4_k vs HF on the f16 weights", theirs, hf_logits(hf_model(path), tokens)) > 100 * TOLERANCE
    )


@pytest.mark.parametrize("cut", [64, 97])
def test_two_call_prefill_matches_hf(path: Path, cut: int) -> None:
    ours = load_model(path, "f32")
    hf = hf_model(path)
    tokens = prompt(seed=2)
    state = ours.new_state()
    split = np.concatenate([ours.forward(tokens[:cut], state), ours.forward(tokens[cut:], state)])
    assert report(f"f32 two calls (cut {cut}) vs HF one call", split, hf_logits(hf, tokens)) <= TOLERANCE
    cache = transformers.DynamicCache(config=hf.config)
    theirs = np.concatenate([hf_logits(hf, tokens[:cut], cache), hf_logits(hf, tokens[cut:], cache)])
    assert report(f"f32 two calls (cut {cut}) vs HF two calls with cache", split, theirs) <= TOLERANCE


def test_decode_steps_match_hf(path: Path) -> None:
    """HF decodes single tokens through its recurrent kernel and causal_conv1d_update: a second oracle path."""
    ours = load_model(path, "f32")
    hf = hf_model(path)
    tokens = prompt(PROMPT + 12, seed=3)
    state = ours.new_state()
    cache = transformers.DynamicCache(config=hf.config)
    mine = [ours.forward(tokens[:PROMPT], state)]
    theirs = [hf_logits(hf, tokens[:PROMPT], cache)]
    for t in range(PROMPT, len(tokens)):
        mine.append(ours.forward(tokens[t : t + 1], state))
        theirs.append(hf_logits(hf, tokens[t : t + 1], cache))
    assert (
        report("f32 prefill + 12 decode steps vs HF", np.concatenate(mine), np.concatenate(theirs))
        <= TOLERANCE
    )


def test_variant_config_matches_hf(tmp_path: Path) -> None:
    """Tied embeddings, Hv == Hk, full RoPE, another layer order and kernel: the mapping is not tuned to one shape."""
    config = {
        **TINY_CONFIG,
        "tie_word_embeddings": True,
        "linear_num_value_heads": 2,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 3,
        "num_key_value_heads": 1,
        "layer_types": ["full_attention", "linear_attention", "full_attention", "linear_attention"],
        "rope_parameters": {"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 1.0},
    }
    write_tiny(tmp_path, seed=7, raw_config=config)
    assert json.loads((tmp_path / "config.json").read_text())["tie_word_embeddings"] is True
    ours: Model = load_model(tmp_path, "f32")
    tokens = prompt(seed=4)
    err = report(
        "variant f32 vs HF", ours.forward(tokens, ours.new_state()), hf_logits(hf_model(tmp_path), tokens)
    )
    assert err <= TOLERANCE
