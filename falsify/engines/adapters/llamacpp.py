"""llama.cpp as an engine under test, through llama-cpp-python (CPU, one thread by default).

`--engine llamacpp:PATH.gguf` serves that GGUF file (so does $FALSIFY_LLAMACPP_GGUF). Given none, and only where
the reference distribution is installed (reference_tiny.py), the tiny checkpoint the reference engine loads is
written as a llama.cpp `qwen35` GGUF by reference.gguf_io (tests/test_gguf_io.py holds it to what llama.cpp's own
converter writes: same tensors, metadata and bytes but for an ulp in ssm_a). Context: flash attention off, f32 K and V
cache, n_ctx 4096, n_batch = n_ctx (so one forward call is one llama_decode; llama.cpp splits it into ubatches
of 512 itself), and `use_extra_bufts=False` for the weights: Q4_K weights in an extra buffer type were reported
to crash any decode of 2+ tokens where that type is AMX. Not reproduced here: this CPU has no AMX, and its extra
type (CPU_REPACK, q4_K_8x8) decodes 1, 2 and 150 tokens, with logits that move by 0.08 (docs/llamacpp.md,
findings L1 and L6). Plain buffers keep one kernel path for every CPU.

model      `LlamaCppModel.forward(tokens, state)`: one llama_decode of the tokens on sequence 0 with logits for
           every token. A state's bytes are llama.cpp's own sequence state (llama_state_seq_get_data: the
           attention K/V cells and the Gated DeltaNet conv and recurrent state of seq 0). One context serves
           many states: the state a forward names is swapped into seq 0 (llama_state_seq_set_data) when another
           one sits there, after saving that one's bytes.
generate   `Llama.generate` itself, the loop users run (create_completion runs it too): greedy (temp 0) or the
           caller's sampler as a logits_processor leaving only its token finite, and the cancel token polled
           through `stopping_criteria`, which the loop calls after each forward and sample. Every forward the
           loop makes (Llama.eval) goes through `model.forward`, so a harness proxy on the model counts them.
           `llamacpp-abort` polls the token from llama_set_abort_callback instead: llama.cpp calls it while it
           computes a graph, so it aborts a decode mid-way.
prefill    the harness's SteppedPrefill over `model.forward`: one llama_decode per chunk at the cuts asked for.

Without a path, `llamacpp` serves the f32 GGUF, `llamacpp-q4k` the Q4_K one (every projection Q4_K) for every
load_model request, so the packs, which ask for the engine's float32 model, run on the quantized file. Not offered, with
reasons: `lanes`, `quant`, `model` (kernel twins), `sample` (see UNSUPPORTED).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import llama_cpp
import llama_cpp.llama_cpp as C
import numpy as np

from falsify.engines.adapters import reference_tiny
from falsify.engines.adapters.generate import AdapterSession, Measured
from falsify.engines.calls import GenerateCall
from falsify.engines.cancel import HarnessCancel
from falsify.engines.env_settings import threads as env_threads
from falsify.engines.prefill import SteppedPrefill
from falsify.engines.protocol import RunRecord
from falsify.engines.tokens import token_list

# llama.cpp's chunked Gated DeltaNet (build_delta_net_chunking, src/models/delta-net-base.cpp) groups a call's
# tokens into chunks of 64 aligned to the call's first token; a one-token call takes the recurrent path instead.
LLAMA_GDN_CHUNK = 64
N_CTX = 4096
STATE_MAGIC = b"LCQ3"
STATE_VERSION = 1
GGML_TYPE_F32 = 0

UNSUPPORTED = {
    "lanes": "llama-cpp-python has no lane host: no KV page pool shared by streams and no scheduler that runs "
    "one prefill chunk between other streams' decode steps (llama.cpp's server slots are not exposed)",
    "quant": "llama-cpp-python exposes no ggml Q4_K quantize/dequantize/matvec of single blocks to check",
    "model": "llama.cpp's Gated DeltaNet kernels are graph ops, not callable twins (gdn_kernels)",
    "trace": "llama-cpp-python exposes no per-layer hidden states to compare with transformers' trace",
    "sample": "llama.cpp's sampler chain draws from its own RNG inside llama_sampler_sample: there is no "
    "pick(logits, u) inverse CDF to map the harness's uniforms through",
}


class LlamaCppError(RuntimeError):
    """llama.cpp refused or failed a call; the message names the call and its return code."""


class DecodeAborted(LlamaCppError):
    """llama_decode returned 2: the abort callback stopped it. `kept`: positions the sequence held after it."""

    def __init__(self, message: str, kept: int) -> None:
        super().__init__(message)
        self.kept = kept


class LlamaCppEngine:
    """`falsify gate --engine llamacpp`: the f32 GGUF."""

    name = "llamacpp"
    weights = "f32"
    abort_callback = False
    capabilities = frozenset({"generate", "prefill"})

    def supports(self, capability: str) -> str | None:
        if capability in self.capabilities:
            return None
        return UNSUPPORTED.get(capability, f"the llama.cpp adapter has no {capability!r}")

    def __init__(self, gguf: str | None = None) -> None:
        named = gguf or os.environ.get("FALSIFY_LLAMACPP_GGUF")
        self.gguf = Path(named) if named else None
        if self.gguf is not None and not self.gguf.is_file():
            raise ValueError(f"{self.name}:{named}: no such GGUF file")

    @property
    def weights_source(self) -> str:
        if self.gguf is not None:
            return str(self.gguf)
        return reference_tiny.source(f"--engine {self.name}:PATH.gguf")

    def gguf_path(self, weights: str) -> Path:
        return self.gguf if self.gguf is not None else tiny_gguf(weights, f"--engine {self.name}:PATH.gguf")

    def load_model(self, weights: str = "f32") -> LlamaCppModel:
        if weights not in ("f32", "q4_k"):
            raise ValueError(f"the llama.cpp adapter loads weights 'f32' or 'q4_k', got {weights!r}")
        served = self.weights if self.weights != "f32" else weights
        return load(self.gguf_path(served), threads())

    def session(self, model: Any) -> LlamaCppSession:
        return LlamaCppSession(model, abort_callback=self.abort_callback)

    def cancel_token(self) -> type[HarnessCancel]:
        return HarnessCancel  # the falsifiers' instrument, not engine numerics

    def prefill(self, model: Any, state: LlamaCppState, prompt: Sequence[int], **kw: Any) -> SteppedPrefill:
        return SteppedPrefill.open(model, state, prompt, **kw)


class LlamaCppQ4KEngine(LlamaCppEngine):
    """`--engine llamacpp-q4k`: the Q4_K GGUF, whatever weights a falsifier asks for."""

    name = "llamacpp-q4k"
    weights = "q4_k"


class LlamaCppAbortEngine(LlamaCppEngine):
    """`--engine llamacpp-abort`: the cancel token polled from llama_set_abort_callback."""

    name = "llamacpp-abort"
    abort_callback = True


def threads() -> int:
    return env_threads("FALSIFY_LLAMACPP_THREADS", ValueError)


def tiny_gguf(weights: str, named: str = "--engine llamacpp:PATH.gguf") -> Path:
    """reference.tiny's checkpoint as a qwen35 GGUF in the cache dir, written once (atomically); a
    NoDefaultWeights error saying `named` where the reference distribution is not installed."""
    tiny = reference_tiny.reference_module("tiny", named)
    gguf_io = reference_tiny.reference_module("gguf_io", named)
    path = Path(tiny.cache_dir()) / f"tiny-0-v{tiny.TINY_VERSION}-{weights}.gguf"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        gguf_io.write_gguf(tiny.tiny_model(0), path, weights=weights)
    return path


_params_lock = threading.Lock()


@contextlib.contextmanager
def _model_params(**fields: Any) -> Iterator[None]:
    """Llama() builds its llama_model_params from llama_model_default_params() and exposes no use_extra_bufts:
    set the field on the defaults while it loads."""
    with _params_lock:
        original = C.llama_model_default_params

        def defaults() -> Any:
            params = original()
            for k, v in fields.items():
                setattr(params, k, v)
            return params

        C.llama_model_default_params = defaults
        try:
            yield
        finally:
            C.llama_model_default_params = original


@cache
def load(path: Path, n_threads: int = 1, extra_bufts: bool = False) -> LlamaCppModel:
    if not path.is_file():
        raise LlamaCppError(f"{path}: no such GGUF file")
    with _model_params(use_extra_bufts=extra_bufts):
        llama = llama_cpp.Llama(
            str(path),
            n_ctx=N_CTX,
            n_batch=N_CTX,
            n_ubatch=512,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            flash_attn=False,
            type_k=GGML_TYPE_F32,
            type_v=GGML_TYPE_F32,
            seed=0,
            verbose=False,
        )
    return LlamaCppModel(llama, path)


@dataclass(frozen=True, slots=True)
class LlamaCppConfig:
    vocab_size: int
    max_position_embeddings: int  # the context's n_ctx: llama.cpp's limit here, not the checkpoint's
    chunk_size: int  # LLAMA_GDN_CHUNK


class LlamaCppState:
    """One stream: `pos` tokens consumed. Its content sits in the context's seq 0 while it is the model's live
    state, else in `blob` (llama.cpp's sequence-state bytes)."""

    def __init__(self, model: LlamaCppModel, pos: int = 0, blob: bytes = b"") -> None:
        self.model = model
        self.pos = pos
        self.blob = blob
        self.released = False

    def seq_bytes(self) -> bytes:
        """llama.cpp's state of this sequence: llama_state_seq_get_data of seq 0 when live."""
        self._check_live()
        return self.model.read_seq() if self.model.live is self else self.blob

    def to_bytes(self) -> bytes:
        """Header (magic, version, pos, length), then llama.cpp's sequence-state bytes."""
        data = self.seq_bytes()
        return struct.pack("<4sIQQ", STATE_MAGIC, STATE_VERSION, self.pos, len(data)) + data

    def digest(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def copy(self) -> LlamaCppState:
        return LlamaCppState(self.model, self.pos, self.seq_bytes())

    def release(self) -> None:
        if self.model.live is self:
            self.model.live = None
        self.blob, self.released = b"", True

    def _check_live(self) -> None:
        if self.released:
            raise ValueError("LlamaCppState: used after release()")


class LlamaCppModel:
    """One llama.cpp context behind the Model protocol. Not thread-safe (one context)."""

    def __init__(self, llama: Any, path: Path | None = None) -> None:
        self.llama = llama
        self.path = path
        self.ctx = llama._ctx.ctx
        self.n_vocab = int(llama.n_vocab())
        self.config = LlamaCppConfig(self.n_vocab, int(llama.n_ctx()), LLAMA_GDN_CHUNK)
        self.live: LlamaCppState | None = None  # the state whose content is in seq 0
        self.decodes = 0  # llama_decode calls made by forward (the adapter's own count)

    def __repr__(self) -> str:
        return f"LlamaCppModel({self.path}, llama-cpp-python {llama_cpp.__version__})"

    def new_state(self, pool: Any = None) -> LlamaCppState:
        if pool is not None:
            raise ValueError("LlamaCppModel.new_state: llama.cpp sequences are not paged here; pass no pool")
        return LlamaCppState(self)

    # -- the context's sequence 0 ---------------------------------------------------------------------------

    def read_seq(self) -> bytes:
        size = C.llama_state_seq_get_size(self.ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        got = C.llama_state_seq_get_data(self.ctx, buf, size, 0)
        if got != size:
            raise LlamaCppError(f"llama_state_seq_get_data wrote {got} of {size} bytes")
        return bytes(buf)

    def activate(self, state: LlamaCppState) -> None:
        """Put `state` in seq 0, saving the state that was there."""
        state._check_live()
        if self.live is state:
            return
        if self.live is not None:
            self.live.blob = self.read_seq()
        C.llama_memory_clear(C.llama_get_memory(self.ctx), True)
        self.live = None
        if state.pos:
            data = (ctypes.c_uint8 * len(state.blob)).from_buffer_copy(state.blob)
            if C.llama_state_seq_set_data(self.ctx, data, len(state.blob), 0) != len(state.blob):
                raise LlamaCppError(f"llama_state_seq_set_data refused a state of {len(state.blob)} bytes")
        self.live = state

    def forward(self, tokens: Any, state: LlamaCppState) -> np.ndarray:
        """Logits f32[len(tokens), vocab]: one llama_decode of `tokens` at positions state.pos.. on seq 0."""
        ids = token_list(tokens, "tokens", self.n_vocab)
        if not isinstance(state, LlamaCppState) or state.model is not self:
            raise ValueError(
                f"forward: state must come from this model's new_state(), got {type(state).__name__}"
            )
        state._check_live()
        if not ids:
            return np.zeros((0, self.n_vocab), np.float32)
        if state.pos + len(ids) > self.config.max_position_embeddings:
            raise ValueError(
                f"forward: {state.pos} + {len(ids)} tokens exceed the context's n_ctx={self.config.max_position_embeddings}"
            )
        self.activate(state)
        n = len(ids)
        batch = C.llama_batch_init(n, 0, 1)
        try:
            for i, t in enumerate(ids):
                batch.token[i] = t
                batch.pos[i] = state.pos + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1
            batch.n_tokens = n
            rc = C.llama_decode(self.ctx, batch)
            self.decodes += 1
        finally:
            C.llama_batch_free(batch)
        if rc == 2:
            # llama.cpp keeps the ubatches it finished (finding L4: an aborted one-token decode leaves its token
            # in the sequence); drop them so the state is what state.pos says
            mem = C.llama_get_memory(self.ctx)
            kept = int(C.llama_memory_seq_pos_max(mem, 0)) + 1
            C.llama_memory_seq_rm(mem, 0, state.pos, -1)
            raise DecodeAborted(
                f"llama_decode of {n} tokens at position {state.pos} aborted by the callback; the sequence held "
                f"{kept} positions after it",
                kept,
            )
        if rc != 0:
            raise LlamaCppError(f"llama_decode of {n} tokens at position {state.pos} returned {rc}")
        state.pos += n
        ptr = C.llama_get_logits(self.ctx)
        return np.array(np.ctypeslib.as_array(ptr, shape=(n, self.n_vocab)), dtype=np.float32)


# -- generate -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LlamaCppRun(RunRecord):
    """What one generate call emitted and what it cost, as the adapter saw it (the harness counts its own)."""

    aborted_decodes: int = 0  # llama_decode calls the abort callback stopped (llamacpp-abort)
    kept_after_abort: int = -1  # positions llama.cpp's sequence held right after the aborted decode


class LlamaCppSession(AdapterSession[LlamaCppRun]):
    """`Llama.generate` behind the Session protocol. Each call starts from a fresh state (no prefix reuse)."""

    record = LlamaCppRun

    def __init__(self, model: Any, abort_callback: bool = False) -> None:
        self.model = model  # an LlamaCppModel, or a harness proxy around one
        self.abort_callback = abort_callback

    def _generate(self, call: GenerateCall) -> Measured:
        vocab = self.model.config.vocab_size
        ids, stops, cancel, on_token = call.prompt, set(call.stops), call.cancel, call.on_token

        llama = self.model.llama
        state = self.model.new_state()
        self.model.activate(state)  # saves whatever state sat in seq 0 before generate's reset() clears it
        calls: list[
            tuple[int, int]
        ] = []  # (tokens fed, position before) of every forward, the adapter's view

        def eval_through_model(tokens: Sequence[int]) -> None:
            """Llama.eval's bookkeeping around one model.forward (so a proxy on the model sees it)."""
            batch = [int(t) for t in tokens]
            if not batch:
                return
            n_past = llama.n_tokens
            calls.append((len(batch), state.pos))
            self.model.forward(batch, state)
            llama.input_ids[n_past : n_past + len(batch)] = batch
            llama.n_tokens = n_past + len(batch)
            llama._requires_eval = False

        tokens: list[int] = []
        aborted = 0
        kept_after_abort = -1
        abort_cb = None
        llama.n_tokens = 0  # no prefix reuse: generate resets the (already fresh) memory
        llama.eval = eval_through_model
        if self.abort_callback:
            abort_cb = C.ggml_abort_callback(lambda _data: bool(cancel.is_cancelled()))
            C.llama_set_abort_callback(self.model.ctx, abort_cb, None)
        try:
            stopping = None
            if not self.abort_callback:
                stopping = llama_cpp.StoppingCriteriaList([lambda _ids, _logits: bool(cancel.is_cancelled())])
            processors = (
                None if call.sampler is None else llama_cpp.LogitsProcessorList([_only(call.sampler, vocab)])
            )
            loop = llama.generate(
                ids,
                temp=0.0,
                repeat_penalty=1.0,
                reset=True,
                stopping_criteria=stopping,
                logits_processor=processors,
            )
            try:
                for token in loop:
                    tokens.append(int(token))
                    if on_token is not None:
                        on_token(int(token))
                    if int(token) in stops or len(tokens) >= call.max_tokens:
                        break
            except DecodeAborted as exc:
                aborted += 1
                kept_after_abort = exc.kept
            finally:
                loop.close()
        finally:
            del llama.eval  # the class's own eval again
            if abort_cb is not None:
                C.llama_set_abort_callback(self.model.ctx, C.ggml_abort_callback(), None)  # NULL: no callback
        prefill = [c for c in calls if c[1] < len(ids)]
        decode = [c for c in calls if c[1] >= len(ids)]
        # an aborted decode was started and its work thrown away: it counts as a forward that produced nothing
        extra = {"aborted_decodes": aborted, "kept_after_abort": kept_after_abort}
        return Measured(tokens, prefill, decode, forwards=len(calls), extra=extra)


def _only(sampler: Callable[[np.ndarray], int], vocab: int) -> Callable[[Any, np.ndarray], np.ndarray]:
    """The caller's sampler as a logits processor: only its token stays finite, so greedy takes it."""

    def process(_input_ids: Any, logits: np.ndarray) -> np.ndarray:
        token = int(sampler(np.array(logits, dtype=np.float32)))
        if not 0 <= token < vocab:
            raise ValueError(f"sampler returned token id {token}, outside the vocabulary [0, {vocab})")
        out = np.full_like(logits, -np.inf)
        out[token] = 0.0
        return out

    return process
