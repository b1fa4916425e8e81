"""HF transformers as an engine under test: Qwen3_5ForCausalLM, CPU, eager attention, float32.

`--engine hf:DIR` loads the Qwen3.5 checkpoint in DIR (config.json + *.safetensors) with `from_pretrained`;
`--engine hf` loads the tiny checkpoint the reference engine loads (reference.tiny.tiny_model(seed=0)) where the
reference distribution is installed (reference_tiny.py). Nothing of the reference engine's numerics is used.

generate   `model.generate` itself, greedy or with the caller's sampler (a LogitsProcessor that leaves only the
           sampled token finite), with the cancel token polled the only way its loop allows: a StoppingCriteria,
           which the loop calls after each forward and token append. Forwards are counted by a forward pre-hook
           on the model (tokens fed, cache position before the call), polls by the token itself, emitted
           tokens by a streamer, so the Run record is measured, not derived from the token count.
prefill    a stepped pass over the prompt through HF's DynamicCache: the harness's SteppedPrefill plans the cuts and
           calls HFModel.forward (one `model(input_ids=chunk, cache=...)` per chunk), the way generate's
           `prefill_chunk_size` feeds a long prompt. The state bytes are the
           cache's conv and recurrent state of each Gated DeltaNet layer and the K/V of each attention layer,
           serialised deterministically; the digest is their sha256.

It offers `generate` and `prefill`; transformers has no lane host (no page pool shared by streams, no scheduler
that runs one prefill chunk between other streams' decode steps), no Q4_K kernels, and the adapter does not
expose its GDN kernel twins, so `lanes`, `quant` and `model` are NOT APPLICABLE with those reasons.
"""

from __future__ import annotations

import copy
import hashlib
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers.generation.streamers import BaseStreamer

from falsify.engines.adapters import reference_tiny
from falsify.engines.adapters.generate import AdapterSession, Measured
from falsify.engines.calls import GenerateCall
from falsify.engines.cancel import HarnessCancel
from falsify.engines.env_settings import threads
from falsify.engines.prefill import SteppedPrefill
from falsify.engines.protocol import RunRecord
from falsify.engines.tokens import token_list

# The width torch_chunk_gated_delta_rule (transformers' Qwen3.5 fallback kernel without flash-linear-attention)
# pads and groups a call's tokens into, aligned to the call's first token: HF's chunk grid.
HF_GDN_CHUNK = 64
STATE_MAGIC = b"HFQ3"  # first bytes of HFState.to_bytes(), then a format version
STATE_VERSION = 1

UNSUPPORTED = {
    "lanes": "transformers has no lane host: no KV page pool shared by streams and no scheduler that runs one "
    "prefill chunk between other streams' decode steps",
    "quant": "transformers has no Q4_K (ggml block) quantize/dequantize/matvec to check",
    "model": "the HF adapter does not expose Gated DeltaNet kernel twins (gdn_kernels) to compare",
}


class HFEngine:
    """`falsify gate --engine hf`. One torch thread by default (FALSIFY_TORCH_THREADS to change)."""

    name = "hf"
    capabilities = frozenset({"generate", "prefill"})

    def __init__(self, checkpoint: str | None = None) -> None:
        torch.set_num_threads(threads("FALSIFY_TORCH_THREADS", ValueError))
        self.checkpoint = Path(checkpoint) if checkpoint else None
        if self.checkpoint is not None and not (self.checkpoint / "config.json").is_file():
            raise ValueError(f"hf:{checkpoint}: no config.json there (a Qwen3.5 checkpoint directory)")

    @property
    def weights_source(self) -> str:
        if self.checkpoint is not None:
            return str(self.checkpoint)
        return reference_tiny.source("--engine hf:CHECKPOINT_DIR")

    def supports(self, capability: str) -> str | None:
        if capability in self.capabilities:
            return None
        return UNSUPPORTED.get(capability, f"the HF adapter has no {capability!r}")

    def tiny_model_path(self) -> Path:
        """The checkpoint this engine loads: the one named, else the reference engine's tiny model."""
        if self.checkpoint is not None:
            return self.checkpoint
        tiny = reference_tiny.reference_module("tiny", "--engine hf:CHECKPOINT_DIR")
        return Path(tiny.tiny_model(seed=0))  # the checkpoint generator only: weights, not numerics

    def load_model(self, weights: str = "f32") -> HFModel:
        if weights != "f32":
            raise ValueError(
                f"the HF adapter loads float32 weights only (weights='f32'), got weights={weights!r}"
            )
        return _load(self.tiny_model_path())

    def session(self, model: HFModel) -> HFSession:
        return HFSession(model)

    def cancel_token(self) -> type[HarnessCancel]:
        # The token is the falsifiers' instrument (a budget, a flag any thread may set, a poll counter), not
        # engine numerics: every adapted engine is measured with the same one.
        return HarnessCancel

    def prefill(self, model: Any, state: HFState, prompt: Sequence[int], **kw: Any) -> SteppedPrefill:
        # The harness's stepper, driving HF's forward through the model interface (forward, new_state,
        # state.pos/copy/release). The falsifiers judge the cuts by the forward calls the harness counts, so a
        # planning slip here or in the reference engine's own planner shows as a finding, not as agreement.
        return SteppedPrefill.open(model, state, prompt, **kw)


@cache
def _load(path: Path) -> HFModel:
    hf = transformers.Qwen3_5ForCausalLM.from_pretrained(
        str(path), dtype=torch.float32, attn_implementation="eager"
    )
    return HFModel(hf.eval(), path)


@dataclass(frozen=True, slots=True)
class HFConfig:
    vocab_size: int
    max_position_embeddings: int
    chunk_size: int  # HF_GDN_CHUNK


class HFState:
    """One stream's DynamicCache and the number of tokens it has consumed."""

    def __init__(self, cache: Any, pos: int = 0) -> None:
        self.cache = cache
        self.pos = pos
        self.released = False

    def arrays(self) -> list[np.ndarray]:
        """What to_bytes() serialises, layer by layer: a GDN layer's conv state [conv_dim, K] and recurrent state
        [Hv, dk, dv], an attention layer's K and V [n_kv_heads, pos, head_dim]; empty before the first call."""
        self._check_live()
        out: list[np.ndarray] = []
        for layer in self.cache.layers:
            for name in ("conv_states", "recurrent_states"):
                states = getattr(layer, name, None)
                if states is not None:
                    out.append(_f32(states[0]))
            keys = getattr(layer, "keys", None)
            if keys is not None:
                out += [_f32(keys), _f32(layer.values)]
        return out

    def to_bytes(self) -> bytes:
        """Header (magic, version, pos, tensor count), then each tensor as its rank, dims and f32 LE values."""
        arrays = self.arrays()
        parts = [struct.pack("<4sIQI", STATE_MAGIC, STATE_VERSION, self.pos, len(arrays))]
        for a in arrays:
            parts.append(struct.pack(f"<I{a.ndim}Q", a.ndim, *a.shape))
            parts.append(np.ascontiguousarray(a, dtype="<f4").tobytes())
        return b"".join(parts)

    def digest(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def copy(self) -> HFState:
        self._check_live()
        return HFState(copy.deepcopy(self.cache), self.pos)

    def release(self) -> None:
        self.cache = None
        self.released = True

    def _check_live(self) -> None:
        if self.released:
            raise ValueError("HFState: used after release()")


def _f32(t: Any) -> np.ndarray:
    """A cache tensor of batch 1 as float32 numpy, batch axis dropped; None (never written) as an empty array."""
    if t is None:
        return np.zeros((0,), np.float32)
    a = t.detach().to(torch.float32).cpu().numpy()
    assert a.shape[0] == 1, f"HF cache tensor of batch {a.shape[0]}; the adapter runs batch 1"
    return a[0]


class HFModel:
    """The HF module behind the Model protocol: new_state() and forward(tokens, state) -> logits."""

    def __init__(self, hf: Any, path: Path | None = None) -> None:
        self.hf = hf
        self.path = path
        c = hf.config
        self.config = HFConfig(int(c.vocab_size), int(c.max_position_embeddings), HF_GDN_CHUNK)

    def __repr__(self) -> str:
        return f"HFModel({self.path}, {type(self.hf).__name__}, float32, eager)"

    def new_state(self, pool: Any = None) -> HFState:
        if pool is not None:
            raise ValueError("HFModel.new_state: HF caches are not paged; pass no pool")
        return HFState(transformers.DynamicCache(config=self.hf.config))

    def forward(self, tokens: Any, state: HFState) -> np.ndarray:
        """Logits f32[len(tokens), vocab]; one HF forward call that advances `state.cache` by len(tokens)."""
        ids = token_list(tokens, "tokens", self.config.vocab_size)
        if not isinstance(state, HFState):
            raise ValueError(
                f"forward: state must be an HFState from new_state(), got {type(state).__name__}"
            )
        state._check_live()
        if not ids:
            return np.zeros((0, self.config.vocab_size), np.float32)
        if state.pos + len(ids) > self.config.max_position_embeddings:
            raise ValueError(
                f"forward: {state.pos} + {len(ids)} tokens exceed max_position_embeddings="
                f"{self.config.max_position_embeddings}"
            )
        with torch.no_grad():
            out = self.hf(input_ids=torch.tensor([ids], dtype=torch.long), cache=state.cache, use_cache=True)
        state.pos += len(ids)
        return np.array(out.logits[0].to(torch.float32).numpy(), dtype=np.float32)


# -- generate -----------------------------------------------------------------------------------------------


class _ForwardMeter:
    """A forward pre-hook: (tokens fed, cache position before the call) for every model forward.

    sink: the harness's forward counter (CountingModel.record) when the session was given the harness's model
    proxy: HF's generate loop calls the torch module directly, so the proxy's own `forward` never sees its calls.
    """

    def __init__(self, sink: Callable[[int, Any, Any], None] | None = None) -> None:
        self.calls: list[tuple[int, int]] = []
        self.sink = sink

    def __call__(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
        cache_obj = kwargs.get("cache", kwargs.get("past_key_values"))
        start = int(cache_obj.get_seq_length()) if cache_obj is not None else 0
        self.calls.append((int(ids.shape[-1]), start))
        if self.sink is not None:
            self.sink(start, ids[0].tolist(), cache_obj if cache_obj is not None else self)


class _CancelCriterion(transformers.StoppingCriteria):
    """The cancel token as a StoppingCriteria: generate calls it once per step, after the forward and the append."""

    def __init__(self, token: Any) -> None:
        self.token = token

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        stop = bool(self.token.is_cancelled())
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool)


class _Sampled(transformers.LogitsProcessor):
    """The caller's sampler (logits f32[vocab] -> token id) inside greedy decoding: only its token stays finite."""

    def __init__(self, sampler: Callable[[np.ndarray], int]) -> None:
        self.sampler = sampler

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        token = int(self.sampler(scores[0].detach().to(torch.float32).numpy().copy()))
        if not 0 <= token < scores.shape[-1]:
            raise ValueError(
                f"sampler returned token id {token}, outside the vocabulary [0, {scores.shape[-1]})"
            )
        out = torch.full_like(scores, float("-inf"))
        out[:, token] = 0.0
        return out


class _Emitted(BaseStreamer):
    """Collects the tokens generate streams, after its first put (the prompt), and hands each to on_token."""

    def __init__(self, on_token: Callable[[int], object] | None) -> None:
        self.on_token = on_token
        self.seen_prompt = False
        self.tokens: list[int] = []

    def put(self, value: Any) -> None:
        if not self.seen_prompt:
            self.seen_prompt = True
            return
        for t in value.reshape(-1).tolist():
            self.tokens.append(int(t))
            if self.on_token is not None:
                self.on_token(int(t))

    def end(self) -> None:
        pass


class HFSession(AdapterSession[RunRecord]):
    """`model.generate` behind the Session protocol. Each call starts from an empty cache (no prefix reuse)."""

    record = RunRecord

    def __init__(self, model: HFModel) -> None:
        self.model = model

    def _generate(self, call: GenerateCall) -> Measured:  # measured around model.generate
        ids, stops = call.prompt, call.stops
        config = transformers.GenerationConfig(
            do_sample=False,
            num_beams=1,
            max_new_tokens=call.max_tokens,  # HF generate needs max_new_tokens >= 1
            eos_token_id=stops or None,
            pad_token_id=stops[0] if stops else 0,
        )
        meter, streamer = _ForwardMeter(getattr(self.model, "record", None)), _Emitted(call.on_token)
        hook = self.model.hf.register_forward_pre_hook(meter, with_kwargs=True)
        try:
            with torch.no_grad():
                out = self.model.hf.generate(
                    input_ids=torch.tensor([ids], dtype=torch.long),
                    attention_mask=torch.ones((1, len(ids)), dtype=torch.long),
                    generation_config=config,
                    stopping_criteria=transformers.StoppingCriteriaList([_CancelCriterion(call.cancel)]),
                    logits_processor=transformers.LogitsProcessorList(
                        [] if call.sampler is None else [_Sampled(call.sampler)]
                    ),
                    streamer=streamer,
                )
        finally:
            hook.remove()
        tokens = [int(t) for t in out[0, len(ids) :].tolist()]
        assert tokens == streamer.tokens, (tokens, streamer.tokens)  # what was streamed is what was returned
        prefill = [c for c in meter.calls if c[1] == 0]
        decode = [c for c in meter.calls if c[1] > 0 and c[0] == 1]
        if len(prefill) + len(decode) != len(meter.calls):
            raise RuntimeError(f"HF generate made forward calls the adapter cannot classify: {meter.calls}")
        # every forward's logits go through token selection; one that produced no token in the output was wasted
        return Measured(tokens, prefill, decode, forwards=len(meter.calls))


# -- stepped prefill ----------------------------------------------------------------------------------------
