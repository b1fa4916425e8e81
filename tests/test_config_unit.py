"""reference/config.py in isolation: Qwen3_5TextConfig's defaults, every accepted spelling, every error's text.

Defaults are checked against the values transformers documents for Qwen3_5TextConfig
(models/qwen3_5/configuration_qwen3_5.py), written out here by hand, not read back from reference/.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from reference.config import DEFAULT_CHUNK_SIZE, LAYER_TYPES, MAX_CONFIG_BYTES, Config, ConfigError
from reference.tiny import TINY_CONFIG

# the keys a Qwen3.5 config.json must carry; everything else has a default
REQUIRED = {
    "vocab_size": 512,
    "hidden_size": 256,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def parse(**changes: Any) -> Config:
    """TINY_CONFIG with `changes` (a value of None removes the key)."""
    raw = {**TINY_CONFIG, **changes}
    return Config.from_dict({k: v for k, v in raw.items() if v is not None})


def error(raw: Any, source: str | None = None) -> str:
    with pytest.raises(ConfigError) as e:
        Config.from_dict(raw) if source is None else Config.from_dict(raw, source=source)
    return str(e.value)


def test_tiny_config_reads_field_by_field() -> None:
    c = Config.from_dict(TINY_CONFIG)
    assert (c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers) == (512, 256, 256, 4)
    assert (c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (4, 2, 64)
    assert (c.linear_conv_kernel_dim, c.linear_key_head_dim, c.linear_value_head_dim) == (4, 64, 64)
    assert (c.linear_num_key_heads, c.linear_num_value_heads) == (2, 4)
    assert c.layer_types == ("linear_attention",) * 3 + ("full_attention",)
    assert c.max_position_embeddings == 16384 and c.rms_norm_eps == 1e-6 and c.rope_theta == 10000.0
    assert c.partial_rotary_factor == 0.25 and c.tie_word_embeddings is False
    assert c.chunk_size == DEFAULT_CHUNK_SIZE == 64
    # derived sizes, by hand: 64 * 0.25; 2 * 2 * 64 + 4 * 64; 4 * 64
    assert (c.rotary_dim, c.conv_dim, c.value_dim) == (16, 512, 256)
    assert (c.gdn_layers, c.attn_layers) == ((0, 1, 2), (3,))


def test_extra_keeps_only_the_keys_the_engine_does_not_read() -> None:
    raw = {
        **TINY_CONFIG,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.25,
        "full_attention_interval": 4,
        "bos_token_id": 1,
    }
    assert Config.from_dict(raw).extra == {
        "architectures": ["Qwen3_5ForCausalLM"],
        "dtype": "float32",
        "bos_token_id": 1,
    }


def test_qwen3_5_text_config_defaults() -> None:
    c = Config.from_dict(dict(REQUIRED))
    assert c.head_dim == 64 and isinstance(c.head_dim, int)  # hidden_size // num_attention_heads
    assert (c.linear_conv_kernel_dim, c.linear_key_head_dim, c.linear_value_head_dim) == (4, 128, 128)
    assert (c.linear_num_key_heads, c.linear_num_value_heads) == (16, 32)
    assert c.rms_norm_eps == 1e-6 and c.max_position_embeddings == 32768
    assert c.tie_word_embeddings is False and c.chunk_size == 64
    assert c.rope_theta == 10000.0 and c.partial_rotary_factor == 0.25
    # full_attention_interval 4: every 4th layer is full attention
    assert c.layer_types == ("linear_attention",) * 3 + ("full_attention",)
    assert c.extra == {}


def test_head_dim_default_floors() -> None:
    c = Config.from_dict({**REQUIRED, "hidden_size": 258})  # 258 / 4 heads = 64.5
    assert c.head_dim == 64 and type(c.head_dim) is int


def test_optional_keys_are_read_when_given() -> None:
    c = parse(rms_norm_eps=1e-5, max_position_embeddings=4096, chunk_size=32, tie_word_embeddings=True)
    assert parse(linear_conv_kernel_dim=3).linear_conv_kernel_dim == 3
    assert (c.rms_norm_eps, c.max_position_embeddings, c.chunk_size) == (1e-5, 4096, 32)
    assert c.tie_word_embeddings is True


def test_int_given_for_a_float_key_becomes_float() -> None:
    c = parse(rms_norm_eps=1)
    assert c.rms_norm_eps == 1.0 and type(c.rms_norm_eps) is float
    assert "key 'rms_norm_eps' is True, expected float" in error({**TINY_CONFIG, "rms_norm_eps": True})


def test_bool_is_not_an_int() -> None:
    assert error({**TINY_CONFIG, "chunk_size": True}) == "config: key 'chunk_size' is True, expected int"


def test_full_attention_interval_builds_layer_types() -> None:
    c = parse(layer_types=None, full_attention_interval=2)
    assert c.layer_types == ("linear_attention", "full_attention") * 2
    assert (c.gdn_layers, c.attn_layers) == ((0, 2), (1, 3))
    assert error({**REQUIRED, "full_attention_interval": 0}) == (
        "config: key 'full_attention_interval' is 0, expected > 0"
    )


def test_model_type_spellings() -> None:
    assert parse(model_type="qwen3_5").hidden_size == 256  # the multimodal type name, unwrapped
    assert parse(model_type=None).hidden_size == 256
    assert error({**TINY_CONFIG, "model_type": "qwen2"}) == (
        "config: key 'model_type' is 'qwen2', expected 'qwen3_5_text'"
    )


def test_unsupported_switches() -> None:
    assert error({**TINY_CONFIG, "hidden_act": "gelu"}) == (
        "config: key 'hidden_act' is 'gelu'; only 'silu' is supported"
    )
    assert error({**TINY_CONFIG, "attention_bias": True}) == (
        "config: key 'attention_bias' is true; biased attention projections are not supported"
    )
    assert parse(attention_bias=None, hidden_act=None).hidden_size == 256


def test_missing_and_mistyped_keys() -> None:
    for key in REQUIRED:
        raw = {k: v for k, v in TINY_CONFIG.items() if k != key}
        assert error(raw) == f"config: missing key {key!r}"
    assert error({**TINY_CONFIG, "vocab_size": 512.0}) == "config: key 'vocab_size' is 512.0, expected int"
    assert error({**TINY_CONFIG, "rms_norm_eps": 0.0}) == "config: key 'rms_norm_eps' is 0.0, expected > 0"
    assert error({**TINY_CONFIG, "tie_word_embeddings": 1}) == (
        "config: key 'tie_word_embeddings' is 1, expected bool"
    )


def test_top_level_must_be_an_object() -> None:
    assert error([1, 2]) == "config: top level is list, expected an object"
    assert error("x", source="here.json") == "here.json: top level is str, expected an object"


class TestMultimodal:
    def outer(self, **outer: Any) -> dict[str, Any]:
        text = {k: v for k, v in TINY_CONFIG.items() if k not in ("tie_word_embeddings", "model_type")}
        return {"model_type": "qwen3_5", **outer, "text_config": text}

    def test_tie_word_embeddings_comes_from_the_outer_config(self) -> None:
        assert Config.from_dict(self.outer(tie_word_embeddings=True)).tie_word_embeddings is True
        assert Config.from_dict(self.outer(tie_word_embeddings=False)).tie_word_embeddings is False
        assert Config.from_dict(self.outer()).tie_word_embeddings is False  # neither says: untied

    def test_the_text_config_wins(self) -> None:
        raw = self.outer(tie_word_embeddings=False)
        raw["text_config"]["tie_word_embeddings"] = True
        assert Config.from_dict(raw).tie_word_embeddings is True

    def test_errors_name_the_source(self) -> None:
        raw = self.outer()
        del raw["text_config"]["vocab_size"]
        assert error(raw, source="m/config.json") == "m/config.json: missing key 'vocab_size'"


class TestRope:
    def test_rope_parameters(self) -> None:
        c = parse(rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5})
        assert (c.rope_theta, c.partial_rotary_factor, c.rotary_dim) == (1e6, 0.5, 32)

    def test_rope_scaling_is_the_older_spelling(self) -> None:
        c = parse(rope_parameters=None, rope_scaling={"type": "default", "rope_theta": 5e5})
        assert (c.rope_theta, c.partial_rotary_factor) == (5e5, 0.25)
        assert error({**REQUIRED, "rope_scaling": {"type": "linear", "factor": 2.0}}) == (
            "config: key 'rope_parameters.rope_type' is 'linear'; only 'default' is supported"
        )

    def test_top_level_values_and_their_types(self) -> None:
        c = parse(rope_parameters=None, rope_theta=500000, partial_rotary_factor=1)
        assert (c.rope_theta, c.partial_rotary_factor, c.rotary_dim) == (500000.0, 1.0, 64)
        assert type(c.rope_theta) is float and type(c.partial_rotary_factor) is float

    def test_nested_values_win_over_top_level(self) -> None:
        c = parse(rope_parameters={"rope_theta": 2e4, "partial_rotary_factor": 0.5}, rope_theta=3e4)
        assert (c.rope_theta, c.partial_rotary_factor) == (2e4, 0.5)

    @pytest.mark.parametrize(
        ("key", "value"),
        [
            ("rope_theta", 0),
            ("rope_theta", -1.0),
            ("rope_theta", True),
            ("rope_theta", "1e4"),
            ("partial_rotary_factor", 0.0),
            ("partial_rotary_factor", False),
            ("partial_rotary_factor", None),
        ],
    )
    def test_not_a_positive_number(self, key: str, value: Any) -> None:
        msg = error({**REQUIRED, "rope_parameters": {key: value}})
        assert msg == f"config: key {key!r} is {value!r}, expected a number > 0"

    def test_partial_rotary_factor_at_most_one(self) -> None:
        assert error({**REQUIRED, "partial_rotary_factor": 1.5}) == (
            "config: key 'partial_rotary_factor' is 1.5, expected <= 1"
        )

    def test_rope_parameters_must_be_an_object(self) -> None:
        assert error({**REQUIRED, "rope_parameters": [1]}) == (
            "config: key 'rope_parameters' is [1], expected an object"
        )

    def test_mrope_is_refused(self) -> None:
        assert error({**REQUIRED, "rope_parameters": {"mrope_interleaved": True}}) == (
            "config: key 'rope_parameters.mrope_interleaved' is set; not supported"
        )
        assert (
            Config.from_dict({**REQUIRED, "rope_parameters": {"mrope_interleaved": False}}).rope_theta == 1e4
        )


class TestShapes:
    def test_layer_types(self) -> None:
        assert error({**TINY_CONFIG, "layer_types": "linear_attention"}) == (
            "config: key 'layer_types' must be a list of num_hidden_layers=4 entries"
        )
        assert error({**TINY_CONFIG, "layer_types": ["full_attention"] * 3 + ["attention"]}) == (
            f"config: key 'layer_types[3]' is 'attention', expected one of {LAYER_TYPES}"
        )

    def test_head_groups(self) -> None:
        assert error({**TINY_CONFIG, "num_key_value_heads": 3}) == (
            "config: num_attention_heads=4 is not a multiple of num_key_value_heads"
        )
        assert error({**TINY_CONFIG, "linear_num_value_heads": 3}) == (
            "config: linear_num_value_heads is not a multiple of linear_num_key_heads"
        )

    def test_rotary_dim_must_be_even(self) -> None:
        # 6 * 0.5 = 3 (odd) although 6 / 0.5 = 12 is even
        raw = {**TINY_CONFIG, "head_dim": 6, "rope_parameters": {"partial_rotary_factor": 0.5}}
        assert error(raw) == "config: rotary dim head_dim * partial_rotary_factor = 3 must be even"
        assert parse(head_dim=6, rope_parameters={"partial_rotary_factor": 1 / 3}).rotary_dim == 2


class TestFromFile:
    def write(self, tmp_path: Path, text: str | bytes) -> Path:
        path = tmp_path / "config.json"
        path.write_bytes(text.encode() if isinstance(text, str) else text)
        return path

    def test_reads_the_file(self, tmp_path: Path) -> None:
        assert Config.from_file(self.write(tmp_path, json.dumps(TINY_CONFIG))) == Config.from_dict(
            TINY_CONFIG
        )

    def test_errors_name_the_file(self, tmp_path: Path) -> None:
        path = self.write(tmp_path, json.dumps({**TINY_CONFIG, "hidden_size": -2}))
        with pytest.raises(ConfigError) as e:
            Config.from_file(str(path))
        assert str(e.value) == f"{path}: key 'hidden_size' is -2, expected > 0"

    def test_unreadable(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match=r"^.*nope\.json: no config\.json$"):
            Config.from_file(tmp_path / "nope.json")
        with pytest.raises(ConfigError, match=r": not readable JSON \("):
            Config.from_file(self.write(tmp_path, b"\xff\xfe{"))
        with pytest.raises(ConfigError, match=r"config\.json: not readable JSON \(Expecting"):
            Config.from_file(self.write(tmp_path, "{nope"))
        with pytest.raises(ConfigError, match=r"^.*: not a regular file$"):
            Config.from_file(tmp_path)  # a directory

    def test_hostile_files_are_named_without_hanging(self, tmp_path: Path) -> None:
        fifo = tmp_path / "fifo.json"
        os.mkfifo(fifo)
        with pytest.raises(ConfigError, match=r"^.*fifo\.json: not a regular file$"):
            Config.from_file(fifo)  # open() would block until a writer came
        with pytest.raises(ConfigError, match=r"^/dev/zero: not a regular file$"):
            Config.from_file("/dev/zero")
        big = self.write(tmp_path, b" " * (MAX_CONFIG_BYTES + 1))
        with pytest.raises(
            ConfigError, match=rf"^.*config\.json: over {MAX_CONFIG_BYTES} bytes; not a config\.json$"
        ):
            Config.from_file(big)
        with pytest.raises(ConfigError, match=r"not readable JSON \(Expecting value"):
            Config.from_file(
                self.write(tmp_path, b" " * MAX_CONFIG_BYTES)
            )  # exactly the limit: read, then parsed
        with pytest.raises(ConfigError, match=r"config\.json: not readable JSON \(Exceeds the limit"):
            Config.from_file(self.write(tmp_path, '{"hidden_size": ' + "9" * 5000 + "}"))
        with pytest.raises(ConfigError, match=r"config\.json: not readable JSON \(maximum recursion depth"):
            Config.from_file(self.write(tmp_path, "[" * 100_000 + "]" * 100_000))
        # A repeated key, at any depth: one reader takes the first, Python the last (issue #27).
        for doubled in ('{"vocab_size": -1, "vocab_size": 8}', '{"rope_parameters": {"a": 1, "a": 1}}'):
            with pytest.raises(
                ConfigError, match=r"config\.json: not readable JSON \(a key appears twice in one object\)$"
            ):
                Config.from_file(self.write(tmp_path, doubled))
        (tmp_path / "dangling.json").symlink_to(tmp_path / "absent")
        with pytest.raises(ConfigError, match=r"^.*dangling\.json: no config\.json$"):
            Config.from_file(tmp_path / "dangling.json")
        loop = tmp_path / "loop.json"
        loop.symlink_to(loop)  # open() fails with ELOOP, an OSError that is no FileNotFoundError
        with pytest.raises(ConfigError) as e:
            Config.from_file(loop)
        assert (
            str(e.value)
            == f"{loop}: not readable JSON ([Errno 40] Too many levels of symbolic links: '{loop}')"
        )

    def test_the_read_asks_for_one_byte_past_the_bound(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """However big the file, at most MAX_CONFIG_BYTES + 1 bytes are read: enough to tell it is too big."""
        big = self.write(tmp_path, b" " * (MAX_CONFIG_BYTES + 64))
        asked: list[int | None] = []
        real_open = Path.open

        class Recording:  # the real file, its read sizes noted
            def __init__(self, f: Any) -> None:
                self.f = f

            def __enter__(self) -> Recording:
                return self

            def __exit__(self, *exc: object) -> None:
                self.f.close()

            def read(self, n: int | None = -1) -> bytes:
                asked.append(n)
                return bytes(self.f.read(n))

        monkeypatch.setattr(Path, "open", lambda p, *a, **k: Recording(real_open(p, *a, **k)))
        with pytest.raises(ConfigError, match=rf"config\.json: over {MAX_CONFIG_BYTES} bytes"):
            Config.from_file(big)
        assert asked == [MAX_CONFIG_BYTES + 1]
