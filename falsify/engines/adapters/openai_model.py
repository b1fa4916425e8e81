"""What the openai-serving falsifiers learn about the model a server loads (issue #47), never from the reference's
tiny GGUF: which token ids a prompt may hold, how long a request may be, and the text of each token of a reply.

- The prompt ids: [259, 512) (the tiny GGUF's ' t<id>' pieces, so the reference's prompts stay as they were) where
  the server takes id 511; else the upper half of the vocabulary the server takes, its size found by asking for a
  one-token reply to a one-id prompt (a server refuses an id outside its vocabulary with 400: vLLM, llama-server,
  the reference) and halving. A server that takes no token-id prompt (the engine sends text) keeps [259, 512).
- The context: `max_model_len` in /v1/models (vLLM), or /props' `n_ctx` (llama-server, per slot); else unknown.
- A reply's pieces: the logprob entries' token strings where they spell the reply's text, else each token id's
  text from /detokenize (vLLM: `{"prompt": ...}`, llama-server: `{"content": ...}`) where that spells it; else none.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from falsify.engines.adapters.openai_replies import Completion, OpenAIError, StatusError, _json

# `engine` below is falsify/engines/adapters/openai.py's OpenAIEngine (typed Any: that module imports this one)
OpenAIEngine = Any

LOW, HIGH = 259, 512  # the tiny GGUF's ' t<id>' pieces: the prompts' ids on any vocabulary of HIGH or more


@dataclass(frozen=True, slots=True)
class ServedModel:
    low: int  # prompt ids are drawn from [low, high)
    high: int
    vocab: (
        int | None
    )  # the vocabulary's size where it is under HIGH (found), else None (HIGH or more, or unknown)
    context: int | None  # tokens a request may hold, prompt and reply, where the server says
    detail: str  # how these were learned, for a reason or a log


def learn(engine: OpenAIEngine) -> ServedModel:
    context = _context(engine)
    vocab, how = _vocabulary(engine)
    if vocab is None:
        return ServedModel(LOW, HIGH, None, context, f"{how}; context {context or 'not said'}")
    low = vocab // 2
    return ServedModel(
        low,
        vocab,
        vocab,
        context,
        f"{how}; prompts use ids [{low}, {vocab}); context {context or 'not said'}",
    )


def prompt(model: ServedModel, seed: int, n: int) -> list[int]:
    """n token ids, fixed by seed, in the served model's [low, high)."""
    rng = random.Random(seed)
    return [rng.randrange(model.low, model.high) for _ in range(n)]


def _context(engine: OpenAIEngine) -> int | None:
    for path, keys in (
        ("/v1/models", ("data", 0, "max_model_len")),
        ("/props", ("default_generation_settings", "n_ctx")),
    ):
        try:
            status, body = engine.get(path)
            if status != 200:
                continue
            value: Any = _json(body, path)
            for key in keys:
                value = value[key]
        except (OSError, OpenAIError, KeyError, IndexError, TypeError):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _vocabulary(engine: OpenAIEngine) -> tuple[int | None, str]:
    """(the vocabulary's size where it is under HIGH, how it was learned)."""

    def text_instead(why: str) -> tuple[None, str]:
        """A server that refuses token-id prompts at all: the engine's text fallback (one letter per id) decides."""
        try:
            engine.complete([HIGH - 1], 1)
        except OpenAIError as exc:
            return None, f"the vocabulary is not measured ({exc}); prompts use ids [{LOW}, {HIGH})"
        return None, f"{why}; prompts go as text"

    def takes(token: int) -> bool:
        try:
            engine._complete([token], 1)
        except StatusError as exc:
            if exc.status == 400:
                return False
            raise
        return True

    try:
        if takes(HIGH - 1):
            return None, f"the server takes token id {HIGH - 1}: prompts use ids [{LOW}, {HIGH})"
    except StatusError as exc:  # not a 400: a server that takes no token ids (llama_cpp.server answers 500)
        return text_instead(str(exc))
    except OpenAIError as exc:
        return None, f"the vocabulary is not measured ({exc}); prompts use ids [{LOW}, {HIGH})"
    try:
        if not takes(0):
            return text_instead(f"the server refuses token ids {HIGH - 1} and 0 with 400")
        taken, refused = 0, HIGH - 1  # the largest id taken, the smallest refused
        while refused - taken > 1:
            mid = (taken + refused) // 2
            taken, refused = (mid, refused) if takes(mid) else (taken, mid)
    except OpenAIError as exc:
        return None, f"the vocabulary is not measured ({exc}); prompts use ids [{LOW}, {HIGH})"
    return (
        refused,
        f"the server takes ids up to {taken} (refuses {refused} with 400): a vocabulary of {refused}",
    )


def detokenize(engine: OpenAIEngine, ids: list[int]) -> str | None:
    """The text of `ids` from the server's /detokenize (vLLM, llama-server), None where it offers none."""
    try:
        reply = engine.post_json("/detokenize", {"model": engine.model, "tokens": ids})
    except (StatusError, OSError):
        return None
    text = reply.get("prompt", reply.get("content")) if isinstance(reply, dict) else None
    return text if isinstance(text, str) else None


def pieces(engine: OpenAIEngine, reply: Completion) -> list[str] | None:
    """The text of each of the reply's tokens, where the server lets the client know it: the logprob entries'
    strings if they spell the reply's text, else /detokenize of each token id if that does; else None."""
    if reply.pieces is not None and "".join(reply.pieces) == reply.text:
        return list(reply.pieces)
    if reply.token_ids:
        got = [detokenize(engine, [t]) for t in reply.token_ids]
        if all(p is not None for p in got) and "".join(p or "" for p in got) == reply.text:
            return [p or "" for p in got]
    return None
