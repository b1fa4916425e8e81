"""reference/tiny.py: the seeded checkpoint's bytes, its tensor draws, and the cache directory it lives in.

The bytes of seed 0 are checked against the sha256 tests/data/hf_golden/provenance.json recorded for the checkpoint
HF transformers computed the golden logits on: a change to the generator shows here before it shows as a logit
mismatch (and then TINY_VERSION must move).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors import safe_open

import reference.tiny as tiny
from reference.config import Config, ConfigError
from reference.tiny import TINY_CONFIG, TINY_VERSION, cache_dir, tiny_model, tiny_tensors, write_tiny
from reference.weights import expected_shapes

PROVENANCE = Path(__file__).parent / "data" / "hf_golden" / "provenance.json"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache" / "falsify"  # not there yet: tiny_model makes it, parents included
    monkeypatch.setenv("FALSIFY_CACHE", str(root))
    return root


def test_seed_0_is_the_checkpoint_hf_ran_on(tmp_path: Path) -> None:
    recorded = json.loads(PROVENANCE.read_text())["models"]["tiny-0"]
    write_tiny(tmp_path, 0)
    assert sha256(tmp_path / "config.json") == recorded["config_sha256"]
    assert sha256(tmp_path / "model.safetensors") == recorded["weights_sha256"]
    text = (tmp_path / "config.json").read_text()
    assert json.loads(text) == TINY_CONFIG and text.endswith("}\n") and '\n  "vocab_size": 512,' in text


def test_safetensors_header_says_pytorch_format(tmp_path: Path) -> None:
    # transformers' from_pretrained refuses a safetensors file whose metadata lacks format pt/tf/flax/mlx
    write_tiny(tmp_path, 5)
    with safe_open(str(tmp_path / "model.safetensors"), framework="numpy") as f:
        assert f.metadata() == {"format": "pt"}
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F16"}  # noqa: SIM118 (not a mapping)


def test_a_bad_config_names_raw_config_and_writes_nothing(tmp_path: Path) -> None:
    raw = {k: v for k, v in TINY_CONFIG.items() if k != "vocab_size"}
    with pytest.raises(ConfigError) as e:
        write_tiny(tmp_path, 0, raw)
    assert str(e.value) == "raw_config: missing key 'vocab_size'"
    assert list(tmp_path.iterdir()) == []


def spread(t: dict[str, np.ndarray], key: str) -> tuple[float, float]:
    return float(t[key].mean()), float(t[key].std())


class TestTensors:
    def test_names_shapes_and_dtype(self) -> None:
        c = Config.from_dict(TINY_CONFIG)
        t = tiny_tensors(c, 0)
        want = {"model." + k: v for k, v in expected_shapes(c).items()} | {"lm_head.weight": (512, 256)}
        assert {k: v.shape for k, v in t.items()} == want
        assert {v.dtype for v in t.values()} == {np.dtype(np.float32)}

    def test_distributions_follow_the_docstring(self) -> None:
        t = tiny_tensors(Config.from_dict(TINY_CONFIG), 3)
        gdn = "model.layers.0.linear_attn."
        a = np.exp(np.concatenate([t[f"model.layers.{i}.linear_attn.A_log"] for i in range(3)]))
        assert a.min() >= 0.002 and a.max() <= 0.05  # A ∈ [0.002, 0.05]
        # means and standard deviations: loose bounds against the N(mu, sigma) each kind is drawn from
        dt = np.concatenate([t[f"model.layers.{i}.linear_attn.dt_bias"] for i in range(3)])
        assert abs(dt.mean()) < 0.4 and 0.25 < dt.std() < 0.8  # N(0, 0.5), 12 values
        mean, std = spread(t, gdn + "norm.weight")  # gated norm: 1 + N(0, 0.1), 64 values
        assert 0.95 < mean < 1.05 and 0.06 < std < 0.14
        for key in (
            "model.norm.weight",
            "model.layers.3.self_attn.q_norm.weight",
        ):  # (1 + w) norms: N(0, 0.1)
            mean, std = spread(t, key)
            assert abs(mean) < 0.05 and 0.06 < std < 0.14, key
        mean, std = spread(t, gdn + "conv1d.weight")  # N(0, 1/sqrt(kernel 4)), 2048 values
        assert abs(mean) < 0.05 and 0.45 < std < 0.55
        mean, std = spread(t, "model.embed_tokens.weight")  # untied: N(0, 1)
        assert abs(mean) < 0.02 and 0.97 < std < 1.03
        for key in ("lm_head.weight", gdn + "in_proj_qkv.weight", "model.layers.1.mlp.down_proj.weight"):
            mean, std = spread(t, key)  # N(0, 1/fan_in), fan_in 256
            assert abs(mean) < 0.005 and 0.0625 * 0.97 < std < 0.0625 * 1.03, key

    def test_tied_embedding_is_scaled_like_a_head(self) -> None:
        c = Config.from_dict({**TINY_CONFIG, "tie_word_embeddings": True})
        t = tiny_tensors(c, 0)
        assert "lm_head.weight" not in t and len(t) == len(expected_shapes(c))
        mean, std = spread(t, "model.embed_tokens.weight")  # doubles as the lm_head: N(0, 1/sqrt(hidden))
        assert abs(mean) < 0.005 and 0.0625 * 0.97 < std < 0.0625 * 1.03

    def test_seeds_differ_and_repeat(self) -> None:
        c = Config.from_dict(TINY_CONFIG)
        a, b, again = tiny_tensors(c, 0), tiny_tensors(c, 1), tiny_tensors(c, 0)
        assert all(np.array_equal(a[k], again[k]) for k in a)
        assert not any(np.array_equal(a[k], b[k]) for k in a)


class TestCache:
    def test_cache_dir(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("FALSIFY_CACHE", str(tmp_path / "x"))
        assert cache_dir() == tmp_path / "x"
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        for unset in (monkeypatch.delenv, lambda name: monkeypatch.setenv(name, "")):
            unset("FALSIFY_CACHE")
            assert cache_dir() == tmp_path / "home" / ".cache" / "falsify"

    def test_default_seed_is_0_and_parents_are_made(self, cache: Path) -> None:
        path = tiny_model()
        assert path == cache / f"tiny-0-v{TINY_VERSION}" and TINY_VERSION == 1
        assert sha256(path / "model.safetensors") == sha256(tiny_model(0) / "model.safetensors")
        assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors"]

    @pytest.mark.parametrize("seed", [-1, True, 1.0, "0", None])
    def test_bad_seed(self, cache: Path, seed: Any) -> None:
        with pytest.raises(ValueError) as e:
            tiny_model(seed)
        assert str(e.value) == f"tiny_model: seed must be an int >= 0, got {seed!r}"
        assert not cache.exists()

    @pytest.mark.parametrize("lost", ["config.json", "model.safetensors"])
    def test_a_damaged_entry_is_rewritten(self, cache: Path, lost: str) -> None:
        path = tiny_model(2)
        whole = {p.name: p.read_bytes() for p in path.iterdir()}
        (path / lost).unlink()
        assert tiny_model(2) == path
        assert {p.name: p.read_bytes() for p in path.iterdir()} == whole
        assert [p.name for p in cache.iterdir()] == [path.name]

    def test_two_processes_repairing_one_entry(self, cache: Path, monkeypatch) -> None:
        path = tiny_model(3)
        (path / "config.json").unlink()
        real_rmtree = tiny.shutil.rmtree

        def other_process_removes_it_first(target: Path, **kw: Any) -> None:
            if Path(target) == path and path.exists():
                real_rmtree(path)  # the other process's rmtree of the damaged entry wins the race
            real_rmtree(target, **kw)

        monkeypatch.setattr(tiny.shutil, "rmtree", other_process_removes_it_first)
        assert tiny_model(3) == path and sorted(p.name for p in path.iterdir()) == [
            "config.json",
            "model.safetensors",
        ]

    def test_writes_into_a_hidden_sibling_then_renames(self, cache: Path, monkeypatch) -> None:
        seen: list[Path] = []

        def spy(directory: Path, seed: int) -> None:
            seen.append(directory)
            assert sorted(cache.iterdir()) == [directory]  # nothing under the final name yet
            write_tiny(directory, seed)

        monkeypatch.setattr(tiny, "write_tiny", spy)
        path = tiny_model(4)
        (tmp,) = seen
        assert tmp.parent == cache and tmp.name.startswith(".tiny-4-")  # same file system: rename is atomic
        assert [p.name for p in cache.iterdir()] == ["tiny-4-v1"] and (path / "config.json").is_file()

    def test_another_process_finishing_first_wins(self, cache: Path, monkeypatch) -> None:
        def racing(directory: Path, seed: int) -> None:
            write_tiny(directory, seed)
            other = cache / f"tiny-{seed}-v{TINY_VERSION}"  # the other process renames its copy first
            other.mkdir()
            write_tiny(other, seed)
            (other / "by-the-other").touch()

        monkeypatch.setattr(tiny, "write_tiny", racing)
        path = tiny_model(6)
        assert (path / "by-the-other").is_file() and (path / "model.safetensors").is_file()
        assert [p.name for p in cache.iterdir()] == [path.name]  # our copy removed, no temp dir left

    def test_a_failed_write_leaves_nothing(self, cache: Path, monkeypatch) -> None:
        def full_disk(directory: Path, seed: int) -> None:
            (directory / "config.json").write_text("{")
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(tiny, "write_tiny", full_disk)
        with pytest.raises(OSError, match="No space left"):
            tiny_model(8)
        assert list(cache.iterdir()) == []
