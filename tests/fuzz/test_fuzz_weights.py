"""Seeded fuzzers for the weights readers (issue #27): GGUF headers against `read_config` / `read_gguf`, and
safetensors headers against `read_tensors`.

GGUF: a small valid file (llama.cpp's converter's qwen35 metadata for the tiny checkpoint, without the tokenizer
arrays, and two small tensors) damaged in its header: bytes flipped, u64 counts and lengths overwritten (0, 1,
2**32, 2**60, 2**64-1), cut short, a tensor's data offset moved onto another's. Safetensors: a valid file of two
of the tiny model's tensors whose JSON header is damaged: offsets swapped or past the end, shapes huge, zero or
negative, dtypes unknown, extra keys, non-JSON, a header length past the file.

Properties, for every case: only WeightsError or ConfigError escapes (no traceback), within the SIGALRM bound (no
hang), and nothing invalid is accepted: an accepted GGUF gives a Config that validates again from its own fields and
whose tensors' data spans are disjoint and inside the file (checked here with gguf-py directly); accepted
safetensors tensors have the config's shapes and disjoint, in-file data (checked here from the header directly).
CI runs CASES cases each from a fixed seed; FALSIFY_FUZZ=thorough runs 20x more from a fresh one.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import struct
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from safetensors.numpy import save_file  # noqa: E402

from reference.config import Config, ConfigError  # noqa: E402
from reference.gguf_io import read_config, read_gguf  # noqa: E402
from reference.tiny import TINY_CONFIG  # noqa: E402
from reference.weights import WeightsError, read_tensors  # noqa: E402

THOROUGH = "thorough" in (os.environ.get("HYPOTHESIS_PROFILE", ""), os.environ.get("FALSIFY_FUZZ", ""))
CASES = 20_000 if THOROUGH else 1_000
SEED = int.from_bytes(os.urandom(4), "little") if THOROUGH else 27
ALARM = 10
GOLDEN = Path(__file__).resolve().parent.parent / "data" / "gguf" / "tiny-0-llamacpp-f32.json"
V = gguf.GGUFValueType
CONFIG = Config.from_dict(TINY_CONFIG)


def base_gguf(path: Path) -> bytes:
    meta = json.loads(GOLDEN.read_text())["metadata"]
    w = gguf.GGUFWriter(str(path), "qwen35")
    for k, v in meta.items():
        if not k.startswith("qwen35."):
            continue
        if isinstance(v, list):
            w.add_key_value(k, v, V.ARRAY, sub_type=V.BOOL if isinstance(v[0], bool) else V.INT32)
        else:
            w.add_key_value(k, v, V.FLOAT32 if isinstance(v, float) else V.UINT32)
    w.add_tensor("token_embd.weight", np.zeros((512, 256), np.float32))
    w.add_tensor("output.weight", np.ones((512, 256), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return path.read_bytes()


def damage_gguf(rng: random.Random, data: bytes, header: int) -> bytes:
    out = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 4])):
        kind = rng.randrange(4)
        at = rng.randrange(4, header)
        if kind == 0:
            out[at] = rng.randrange(256)
        elif kind == 1:  # a u64 count, length or offset overwritten
            value = rng.choice([0, 1, 2**31, 2**32, 2**60, 2**64 - 1, rng.randrange(2**64)])
            out[at : at + 8] = struct.pack("<Q", value)
        elif kind == 2:
            out[at : at + 4] = struct.pack("<I", rng.choice([0, 1, 12, 13, 2**31, 2**32 - 1]))  # a value type
        else:
            return bytes(out[: rng.randrange(4, len(out))])
    return bytes(out)


def _gguf_accepted_is_valid(path: Path, config: Config) -> None:
    reader = gguf.GGUFReader(path)
    spans = sorted((int(t.data_offset), int(t.data_offset) + int(t.n_bytes)) for t in reader.tensors)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
    assert spans[-1][1] <= path.stat().st_size, spans
    fields = {f: getattr(config, f) for f in ("vocab_size", "hidden_size", "num_hidden_layers", "head_dim")}
    assert all(isinstance(v, int) and v > 0 for v in fields.values()), fields


def fuzz_reads(
    what: str,
    seed: int,
    path: Path,
    case: Callable[[random.Random], bytes],
    read: Callable[[Path], Any],
    named: tuple[type[Exception], ...],
    accepted: Callable[[Path, bytes, Any, Counter[str]], None],
) -> Counter[str]:
    """CASES cases from SEED, each written to PATH and read within the alarm: a NAMED error whose message starts
    with the path, or a result ACCEPTED checks (and counts); anything else fails naming the case and the seed.
    The counts by kind, printed with the slowest case."""
    rng = random.Random(seed)
    seen: Counter[str] = Counter()
    started, slowest = time.monotonic(), 0.0
    for i in range(CASES):
        data = case(rng)
        path.write_bytes(data)
        signal.alarm(ALARM)
        t = time.monotonic()
        try:
            got = read(path)
        except named as exc:
            assert str(exc).startswith(str(path)), exc
            seen["named"] += 1
        except Exception as exc:
            raise AssertionError(f"case {i} (seed {seed}): {type(exc).__name__}: {exc}") from None
        else:
            try:
                accepted(path, data, got, seen)
            except Exception as exc:
                raise AssertionError(
                    f"case {i} (seed {seed}): accepted, then {type(exc).__name__}: {exc}"
                ) from None
        slowest = max(slowest, time.monotonic() - t)
        signal.alarm(0)
    print(
        f"{what} fuzz: {CASES} cases, seed {seed}: {dict(seen)}; slowest {slowest:.3f} s, {time.monotonic() - started:.1f} s"
    )
    return seen


def test_gguf_header_fuzz(tmp_path: Path, alarm: None) -> None:
    data = base_gguf(tmp_path / "base.gguf")
    header = min(int(t.data_offset) for t in gguf.GGUFReader(tmp_path / "base.gguf").tensors)

    def accepted(path: Path, _: bytes, config: Config, seen: Counter[str]) -> None:
        _gguf_accepted_is_valid(path, config)
        seen["config accepted"] += 1
        try:  # the whole read: the two tensors are not the model's, so a named missing tensor at the least
            read_gguf(path)
        except (WeightsError, ConfigError):
            seen["read_gguf named"] += 1

    seen = fuzz_reads(
        "gguf",
        SEED,
        tmp_path / "case.gguf",
        lambda rng: damage_gguf(rng, data, header),
        read_config,
        (WeightsError, ConfigError),
        accepted,
    )
    assert seen["named"] and seen["config accepted"], seen


def base_safetensors(path: Path) -> tuple[bytes, dict]:
    save_file(
        {
            "model.norm.weight": np.ones(256, np.float32),
            "model.layers.0.input_layernorm.weight": np.ones(256, np.float32),
        },
        str(path),
    )
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return data[8 + n :], json.loads(data[8 : 8 + n])


def damage_header(rng: random.Random, header: dict) -> dict:
    header = json.loads(json.dumps(header))
    names = [k for k in header if k != "__metadata__"]
    for _ in range(rng.choice([1, 1, 2, 3])):
        name = rng.choice(names)
        entry = header[name]
        kind = rng.randrange(7)
        if kind == 0:
            entry["data_offsets"] = [
                rng.choice([0, 512, 1024, 2**40, -1]),
                rng.choice([0, 1024, 2048, 2**63, 2**64]),
            ]
        elif kind == 1:
            entry["shape"] = rng.choice(
                [[2**40], [0], [-1], [256, 2**40], [], [256], [16, 16], [2**31, 2**31]]
            )
        elif kind == 2:
            entry["dtype"] = rng.choice(["F64", "I8", "BOOL", "Q4", "", 7, None])
        elif kind == 3:
            header[
                rng.choice(["model.norm.weight", "model.layers.0.input_layernorm.weight", "lm_head.weight"])
            ] = entry
        elif kind == 4:
            entry[rng.choice(["extra", "shape", "dtype"])] = rng.choice([[], {}, "x", 1.5, [1.5]])
        elif kind == 5:
            header["__metadata__"] = rng.choice([{"a": "b"}, {"a": 1}, [], "x"])
        else:
            other = rng.choice(names)
            entry["data_offsets"] = list(header[other]["data_offsets"])  # two tensors on the same bytes
    return header


def encode(rng: random.Random, header: dict, body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    if rng.random() < 0.1:
        raw = raw[: rng.randrange(len(raw))]
    n = len(raw) if rng.random() < 0.9 else rng.choice([0, len(raw) + 1, 2**40, 2**64 - 1])
    return struct.pack("<Q", n) + raw + body


def _safetensors_accepted_is_valid(data: bytes, got: dict) -> None:
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    spans = sorted(tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__")
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
    assert spans[-1][1] <= len(data) - 8 - n, spans
    expected = {"norm.weight": (256,), "layers.0.input_layernorm.weight": (256,)}
    assert {k: v.shape for k, v in got.items()} == expected, got


def test_safetensors_header_fuzz(tmp_path: Path, alarm: None) -> None:
    body, header = base_safetensors(tmp_path / "base.safetensors")

    def case(rng: random.Random) -> bytes:
        return (
            encode(rng, damage_header(rng, header), body) if rng.random() < 0.9 else encode(rng, header, body)
        )

    def accepted(_: Path, data: bytes, got: dict[str, np.ndarray], seen: Counter[str]) -> None:
        _safetensors_accepted_is_valid(data, got)
        seen["accepted"] += 1

    seen = fuzz_reads(
        "safetensors",
        SEED + 1,
        tmp_path / "model.safetensors",
        case,
        lambda path: read_tensors(path, CONFIG),
        (WeightsError,),
        accepted,
    )
    assert seen["named"] and seen["accepted"], seen
