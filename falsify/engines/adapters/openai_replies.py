"""Reading an OpenAI-compatible server's replies (issue #27): bounded bodies and SSE lines, every JSON document
through the bounded reader, and the fields the falsifiers read checked for the API's types. A reply is data to
check: anything else is an OpenAIError naming the field."""

from __future__ import annotations

import contextlib
import http.client
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from falsify.engines.env_settings import OPENAI_TIMEOUT, openai_timeout
from falsify.errors import FalsifyError, terminal_safe
from falsify.untrusted import boundedjson

TIMEOUT_ENV = "FALSIFY_OPENAI_TIMEOUT"
REQUEST_TIMEOUT = (
    OPENAI_TIMEOUT  # seconds one request may take, all of it: connect, headers, body ($TIMEOUT_ENV)
)
# What a reply may cost the harness: a body, one SSE line, one event's data.
MAX_BODY = 16 * 2**20
MAX_SSE_LINE = 2**20
MAX_EVENT = 16 * 2**20


class OpenAIError(FalsifyError):
    """The server refused a request, answered something that is not the API, or could not be reached. str() is one
    terminal-safe line: it quotes the server's answer."""

    def __init__(self, message: str) -> None:
        super().__init__(terminal_safe(message))


class StatusError(OpenAIError):
    """The server answered a request with a status other than 200."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Completion:
    """One request as the client saw it."""

    text: str
    token_ids: tuple[int, ...] | None  # when the server returns ids
    pieces: tuple[str, ...] | None  # the logprob entries' token strings, when logprobs were asked for
    logprobs: tuple[float, ...] | None
    finish_reason: str | None
    completion_tokens: int | None  # usage.completion_tokens: the server's claim
    chunks: int  # SSE data chunks with a choice (0 when not streamed)
    token_times: tuple[float, ...]  # seconds from sending the request to each streamed token's arrival
    seconds: float  # sending the request to the end of the reply

    @property
    def tokens(self) -> tuple[Any, ...]:
        """What identifies the emitted tokens: ids where returned, else logprob token strings."""
        if self.token_ids is not None:
            return self.token_ids
        return self.pieces if self.pieces is not None else ()

    @property
    def n_tokens(self) -> int | None:
        """Tokens counted from the reply itself (ids or logprob entries); None when it carries neither."""
        if self.token_ids is not None:
            return len(self.token_ids)
        return None if self.pieces is None else len(self.pieces)


class DeadlineMissed(OpenAIError):
    """A request's whole exchange did not end within its deadline: the server stopped answering (issue #48). The
    engine that sees one asks the server nothing more (OpenAIEngine.missed)."""


def _timeout() -> float:
    return openai_timeout(OpenAIError)


@contextlib.contextmanager
def _reading(what: str, timeout: float) -> Iterator[None]:
    """Transport failures while talking to the server, as one named OpenAIError: a deadline passed (the whole
    exchange, however slowly the bytes came), a reply that is not HTTP, a connection reset."""
    try:
        yield
    except TimeoutError:
        raise DeadlineMissed(
            f"{what}: no complete reply within {timeout:g} s ({TIMEOUT_ENV}; the whole exchange, not each read)"
        ) from None
    except (http.client.HTTPException, ConnectionError) as exc:
        raise OpenAIError(f"{what}: the server broke the exchange ({type(exc).__name__}: {exc})") from None


def _body(response: http.client.HTTPResponse, what: str) -> bytes:
    data = response.read(MAX_BODY + 1)
    if len(data) > MAX_BODY:
        raise OpenAIError(f"{what}: a body over {MAX_BODY:,} bytes")
    return data


def _json(data: bytes | str, what: str) -> Any:
    """One document from the server through the bounded reader: any failure is an OpenAIError naming it."""
    try:
        return boundedjson.loads(data, what=what, max_bytes=MAX_BODY)
    except boundedjson.JsonFormatError as exc:
        raise OpenAIError(str(exc)) from None


def _counter(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise OpenAIError(f"{what}: {text[:40]!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise OpenAIError(f"{what}: {text[:40]!r} is not a count (finite, >= 0)")
    return value


def _sse_data(response: http.client.HTTPResponse) -> str | None:
    """The next `data:` payload of a server-sent event stream; None at its end. A line over MAX_SSE_LINE bytes,
    an event over MAX_EVENT, or bytes that are not UTF-8 are an OpenAIError."""
    data: list[str] = []
    size = 0
    while True:
        line = response.readline(MAX_SSE_LINE + 1)
        if len(line) > MAX_SSE_LINE:
            raise OpenAIError(f"the event stream sent a line over {MAX_SSE_LINE:,} bytes")
        if not line:
            return "\n".join(data) if data else None
        try:
            text = line.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as exc:
            raise OpenAIError(f"the event stream sent a line that is not UTF-8 (byte {exc.start})") from None
        if not text:
            if data:
                return "\n".join(data)
            continue
        if text.startswith("data:"):
            data.append(text[5:].lstrip(" "))
            size += len(text)
            if size > MAX_EVENT:
                raise OpenAIError(f"the event stream sent an event over {MAX_EVENT:,} bytes")


def _first_choice(chunk: Any) -> dict[str, Any] | None:
    if isinstance(chunk, dict) and "error" in chunk:
        raise OpenAIError(f"the stream carried an error: {str(chunk['error'])[:300]}")
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    return choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None


# The fields a falsifier reads, each of the type the API gives it or an OpenAIError naming it: a server's reply is
# data to check, and `True` for a token count or `{"a": 1}` for a text must not pass as one (issue #27).
def _str_or_none(value: Any, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise OpenAIError(f"{what}: expected a string or null, got {repr(value)[:80]}")
    return value


def _count(value: Any, what: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise OpenAIError(f"{what}: expected an integer >= 0 or null, got {repr(value)[:80]}")
    return value


def _content(choice: dict[str, Any]) -> str:
    for key in ("delta", "message"):
        part = choice.get(key)
        if isinstance(part, dict):
            return _str_or_none(part.get("content"), f"choices[0].{key}.content") or ""
    return _str_or_none(choice.get("text"), "choices[0].text") or ""


def _logprob(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise OpenAIError(f"{what}: expected a finite number, got {repr(value)[:80]}")
    return float(value)


def _logprob_entries(choice: dict[str, Any]) -> tuple[list[str], list[float]] | None:
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return None
    if isinstance(lp.get("content"), list):  # chat
        entries = lp["content"]
        if not all(isinstance(e, dict) for e in entries):
            raise OpenAIError("choices[0].logprobs.content: expected a list of objects")
        return (
            [str(_str_or_none(e.get("token"), "logprobs.content[].token")) for e in entries],
            [_logprob(e.get("logprob"), "logprobs.content[].logprob") for e in entries],
        )
    if isinstance(lp.get("tokens"), list):  # completions
        values = lp.get("token_logprobs") or []
        if not isinstance(values, list):
            raise OpenAIError("choices[0].logprobs.token_logprobs: expected a list")
        return (
            [str(_str_or_none(t, "logprobs.tokens[]")) for t in lp["tokens"]],
            [_logprob(x, "logprobs.token_logprobs[]") for x in values],
        )
    return None


# A token id no served vocabulary reaches: llama.cpp's llama_token is an int32, vLLM's vocabularies are under 2^20
# (issue #48: ids of 2^62 were taken as they came). Where the served vocabulary is measured, the client checks
# the ids against it too (openai.py, OpenAIEngine.complete).
MAX_TOKEN_ID = 2**31


def _ids(choice: dict[str, Any]) -> list[int] | None:
    ids = choice.get("token_ids")
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t < MAX_TOKEN_ID for t in ids
    ):
        raise OpenAIError(
            f"choices[0].token_ids: expected a list of token ids (ints in [0, 2^31)), got {repr(ids)[:80]}"
        )
    return list(ids)


def _chunk_has_token(choice: dict[str, Any]) -> bool:
    """Whether a streamed chunk carries a token: by its ids where it has them, else its logprob entries, else
    its text (a chunk of text alone, such as a held UTF-8 tail, is no token when ids or logprobs are there)."""
    ids, entries = _ids(choice), _logprob_entries(choice)
    if ids is not None:
        return bool(ids)
    if entries is not None:
        return bool(entries[0])
    return bool(_content(choice))


def _whole(reply: Any, seconds: float) -> Completion:
    choice = _first_choice(reply)
    if choice is None:
        raise OpenAIError(f"a reply without choices: {str(reply)[:300]}")
    entries = _logprob_entries(choice)
    ids = _ids(choice)
    usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
    assert isinstance(reply, dict)  # _first_choice found a choice in it
    return Completion(
        text=_content(choice),
        token_ids=None if ids is None else tuple(ids),
        pieces=None if entries is None else tuple(entries[0]),
        logprobs=None if entries is None else tuple(entries[1]),
        finish_reason=_str_or_none(choice.get("finish_reason"), "choices[0].finish_reason"),
        completion_tokens=_count(usage.get("completion_tokens"), "usage.completion_tokens"),
        chunks=0,
        token_times=(),
        seconds=seconds,
    )


def _streamed(response: http.client.HTTPResponse, t0: float) -> Completion:
    text, pieces, logprobs = [], [], []
    ids: list[int] | None = []
    has_entries = False
    finish, usage_tokens, chunks, times = None, None, 0, []
    while True:
        data = _sse_data(response)
        if data is None or data == "[DONE]":
            break
        chunk = _json(data, "a streamed chunk")
        if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict):
            usage_tokens = _count(chunk["usage"].get("completion_tokens"), "usage.completion_tokens")
        choice = _first_choice(chunk)
        if choice is None:
            continue
        chunks += 1
        if _chunk_has_token(choice):
            times.append(time.perf_counter() - t0)
            got = _ids(choice)
            if got is None:
                ids = None
            elif ids is not None:
                ids.extend(got)
        text.append(_content(choice))
        entries = _logprob_entries(choice)
        if entries is not None:
            has_entries = True
            pieces.extend(entries[0])
            logprobs.extend(entries[1])
        finish = _str_or_none(choice.get("finish_reason"), "choices[0].finish_reason") or finish
    return Completion(
        text="".join(text),
        token_ids=None if ids is None else tuple(ids),
        pieces=tuple(pieces) if has_entries else None,
        logprobs=tuple(logprobs) if has_entries else None,
        finish_reason=finish,
        completion_tokens=usage_tokens,
        chunks=chunks,
        token_times=tuple(times),
        seconds=time.perf_counter() - t0,
    )
