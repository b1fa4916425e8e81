"""Making GGUF files with llama.cpp's own tools, for the llama.cpp adapter and its oracle tests.

llama.cpp's converter (convert_hf_to_gguf.py) ships in llama.cpp's source tree, not in the llama-cpp-python
wheel: `converter_script()` finds it in an unpacked llama-cpp-python sdist (vendor/llama.cpp/), named by
$FALSIFY_LLAMACPP_SRC. To convert the embedded tiny checkpoint it needs three things the checkpoint lacks:

  - a vocabulary: `spm_tokenizer_model` writes a SentencePiece tokenizer.model with the same tokens
    reference.gguf_io.vocab writes (<unk> <s> </s>, 256 byte tokens, then ▁t<id>). The converter's qwen35
    class reads only a GPT-2 BPE tokenizer.json whose pre-tokenizer hash it knows, which a made-up vocabulary
    cannot have, so the run points its set_vocab at the converter's own SentencePiece reader
    (`_set_vocab_sentencepiece`); tensors and every other key are the converter's unchanged;
  - float32 weights: the converter computes -exp(A_log) and 1 + w in the stored dtype, so on the fp16 file
    those land rounded to fp16 (2.8e-3 in the logits); `float32_copy` writes the same values as float32;
  - `--no-mtp`: the checkpoint has no multi-token-prediction head.

Quantizing uses llama.cpp's quantizer through llama-cpp-python's `llama_model_quantize`.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from falsify.errors import FalsifyError
from falsify.untrusted import boundedjson, safefile

CONVERTER = "vendor/llama.cpp/convert_hf_to_gguf.py"


MAX_CONFIG = 2**20  # bytes of a config.json
MAX_VOCAB = 2**22  # token ids a tokenizer is written for (real checkpoints: up to ~260,000)


class ToolMissing(RuntimeError):
    """A llama.cpp tool is not installed here; the message says how to get it."""


class CheckpointError(FalsifyError):
    """A checkpoint directory that cannot be converted: its config.json or a tensor file, named."""


def converter_script() -> Path:
    root = os.environ.get("FALSIFY_LLAMACPP_SRC")
    if not root:
        raise ToolMissing(
            "FALSIFY_LLAMACPP_SRC is not set: point it at an unpacked llama-cpp-python sdist "
            "(pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36, then tar xzf)"
        )
    script = Path(root) / CONVERTER
    if not script.is_file():
        raise ToolMissing(f"FALSIFY_LLAMACPP_SRC={root}: no {CONVERTER} there")
    return script


def spm_tokenizer_model(vocab_size: int) -> bytes:
    """A SentencePiece model whose pieces are reference.gguf_io.vocab(vocab_size)."""
    from sentencepiece import sentencepiece_model_pb2 as spm

    from falsify.engines.adapters.reference_tiny import reference_module

    gguf_io = reference_module("gguf_io", "--engine llamacpp:PATH.gguf")
    tokens, scores, types = gguf_io.vocab(vocab_size)
    model = spm.ModelProto()
    model.trainer_spec.model_type = spm.TrainerSpec.BPE
    model.trainer_spec.vocab_size = vocab_size
    model.trainer_spec.byte_fallback = True
    model.trainer_spec.unk_id, model.trainer_spec.bos_id, model.trainer_spec.eos_id = 0, 1, 2
    model.trainer_spec.pad_id = -1
    model.normalizer_spec.name = "identity"
    model.normalizer_spec.add_dummy_prefix = False
    for text, score, kind in zip(tokens, scores, types, strict=True):
        piece = model.pieces.add()
        piece.piece, piece.score, piece.type = text.decode(), score, kind
    return model.SerializeToString()


def checkpoint_config(checkpoint: Path) -> tuple[bytes, dict[str, Any]]:
    """The bytes and value of a checkpoint's config.json: a regular file of at most 1 MiB, bounded JSON, an
    object whose vocab_size is an int in 1..MAX_VOCAB (the tokenizer written for it has one piece per id)."""
    path = checkpoint / "config.json"
    try:
        data = safefile.read_bytes(path, limit=MAX_CONFIG, what="config.json")
        config = boundedjson.loads(data, what=str(path), max_bytes=MAX_CONFIG)
    except (safefile.FileLayerError, boundedjson.JsonFormatError) as exc:
        raise CheckpointError(str(exc)) from None
    vocab = config.get("vocab_size") if isinstance(config, dict) else None
    if isinstance(vocab, bool) or not isinstance(vocab, int) or not 0 < vocab <= MAX_VOCAB:
        raise CheckpointError(f"{path}: vocab_size must be an integer in 1..{MAX_VOCAB}, got {vocab!r}")
    return data, config


def float32_copy(checkpoint: Path, out: Path) -> Path:
    """The checkpoint's config.json and its tensors as float32 safetensors, plus a tokenizer.model."""
    from safetensors.numpy import load_file, save_file

    data, config = checkpoint_config(checkpoint)
    tensors: dict[str, np.ndarray] = {}
    for f in sorted(checkpoint.glob("*.safetensors")):
        if not stat.S_ISREG(
            os.lstat(f).st_mode
        ):  # a FIFO would block the reader, a link could leave the tree
            raise CheckpointError(f"{f}: not a regular file")
        tensors |= {k: v.astype(np.float32) for k, v in load_file(str(f)).items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_bytes(data)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "tokenizer.model").write_bytes(spm_tokenizer_model(config["vocab_size"]))
    return out


def convert(
    checkpoint: Path, out: Path, work: Path, python: str = sys.executable, timeout: float = 600
) -> Path:
    """llama.cpp's convert_hf_to_gguf.py on a float32 copy of `checkpoint`: an F32 GGUF at `out`."""
    script = converter_script()
    src = float32_copy(checkpoint, work / "f32-checkpoint")
    args = [str(script), str(src), "--outtype", "f32", "--no-mtp", "--outfile", str(out)]
    cmd = [python, "-c", _DRIVER, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0 or not out.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: " + " | ".join(tail))
    return out


# Runs convert_hf_to_gguf.py as its own __main__ with the qwen35 class's vocabulary read by the converter's
# SentencePiece routine (see the module docstring). sys.argv[1] is the script, the rest its arguments.
_DRIVER = """
import runpy, sys
from pathlib import Path
script = Path(sys.argv[1])
sys.path[0:0] = [str(script.parent), str(script.parent / "gguf-py")]
import conversion.qwen
conversion.qwen.Qwen3_5TextModel.set_vocab = lambda self: self._set_vocab_sentencepiece()
sys.argv = sys.argv[1:]
runpy.run_path(str(script), run_name="__main__")
"""


def quantize(src: Path, out: Path, ftype: str = "Q4_K_M") -> Path:
    """llama.cpp's quantizer (llama_model_quantize) on a GGUF: ftype Q4_K_M, Q4_K_S, Q8_0, ..."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.nthread = 1
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), params)
    if rc != 0 or not out.is_file():
        raise RuntimeError(f"llama_model_quantize({src}, {ftype}) returned {rc}")
    return out
