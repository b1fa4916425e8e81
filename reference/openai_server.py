"""The reference engine behind an OpenAI-compatible HTTP API, on 127.0.0.1 only.

    python -m reference.serve --openai --port 8080 [--slots 4] [--chunk 64]

Endpoints: GET /v1/models, POST /v1/completions and /v1/chat/completions (streamed as server-sent events with
`"stream": true`, else one JSON body), GET /metrics (the server's own counters, Prometheus text) and /health.
Request fields: prompt (a string or a list of token ids) or messages, max_tokens (default 16), temperature
(0: greedy), top_p, top_k, seed, stop (a string or a list), logprobs (completions: the number of top logprobs;
chat: true, with top_logprobs), and `return_token_ids` (vLLM's extension: each choice, and each streamed chunk,
carries its `token_ids`). Requests run in continuous batches over `--slots` lanes (reference/openai_batcher.py).
One choice per request: `n` or `best_of` other than 1 is a 400, as are more than 20 logprob alternatives, a
top_p outside (0, 1] and a temperature between 0 and the sampler's floor (reference/sampling.py, 1e-6). Request framing (Content-Length, timeouts) is reference/http_guard.py's.

A client that closes its connection cancels its request: the scheduler looks at every request's socket before
each round (readable with nothing to read is a closed peer), and a failed write means the same.

Stop strings: a streamed reply holds back any text that may be the start of a stop string, and sends the held
tokens in order once they cannot be; text from the stop string on is never sent.
"""

from __future__ import annotations

import argparse
import json
import queue
import select
import socket
import sys
import time
import uuid
from http.server import ThreadingHTTPServer
from typing import Any

from reference.http_guard import LISTEN_BACKLOG, GuardedHandler
from reference.openai_batcher import Batcher, Detokenizer, Job, Token, encode, piece
from reference.sampling import MIN_TEMPERATURE

MODEL_ID = "reference-tiny"
WATCH = 0.002  # seconds between looks at the client's socket while no token is ready
MAX_TOP_LOGPROBS = 20  # alternatives per token, as the OpenAI API caps top_logprobs


class BadRequest(ValueError):
    pass


class Gone(Exception):
    """The client closed its connection."""


def _int(body: dict[str, Any], key: str, default: int | None, low: int) -> int | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise BadRequest(f"{key}: expected an integer >= {low}, got {value!r}")
    return value


def _float(body: dict[str, Any], key: str, default: float | None) -> float | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise BadRequest(f"{key}: expected a number >= 0, got {value!r}")
    return float(value)


def _stops(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    stops = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise BadRequest(f"stop: expected a non-empty string or a list of them, got {stop!r}")
    return stops


def _prompt(body: dict[str, Any], chat: bool, vocab: int) -> list[int]:
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages: expected a non-empty list of {role, content}")
        text = ""
        for i, m in enumerate(messages):
            if not (
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            ):
                raise BadRequest(f"messages[{i}]: expected {{role, content}} strings")
            text += f"{m['role']}: {m['content']}\n"
        return encode(text + "assistant:")
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt:
        return encode(prompt)
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise BadRequest(f"prompt: token id {bad[0]} is outside the vocabulary [0, {vocab})")
        return list(prompt)
    raise BadRequest("prompt: expected a non-empty string or a non-empty list of token ids")


def job_of(body: dict[str, Any], chat: bool, vocab: int) -> Job:
    """The scheduler's job for a request body; BadRequest names the field."""
    # chat: logprobs true and top_logprobs N; completions: logprobs N
    top = (
        (_int(body, "top_logprobs", 0, 0) if body.get("logprobs") else 0)
        if chat
        else _int(body, "logprobs", None, 0)
    )
    if top is not None and top > MAX_TOP_LOGPROBS:
        key = "top_logprobs" if chat else "logprobs"
        raise BadRequest(f"{key}: at most {MAX_TOP_LOGPROBS} alternatives per token, got {top}")
    for key in ("n", "best_of"):  # one choice per request: a request for more is refused, never half-served
        if key in body and (isinstance(body[key], bool) or body[key] != 1):
            raise BadRequest(f"{key}: this server returns one choice per request (1), got {body[key]!r}")
    temperature = _float(body, "temperature", 0.0) or 0.0
    if 0 < temperature < MIN_TEMPERATURE:  # the sampler's floor (reference/sampling.py), refused by name here
        raise BadRequest(
            f"temperature: expected 0 (greedy) or a number >= {MIN_TEMPERATURE:g}, got {body['temperature']!r}"
        )
    top_p = _float(body, "top_p", None)
    if top_p is not None and not 0 < top_p <= 1:
        raise BadRequest(f"top_p: expected a number in (0, 1], got {top_p!r}")
    return Job(
        prompt=_prompt(body, chat, vocab),
        max_tokens=_int(body, "max_tokens", 16, 1) or 16,
        temperature=temperature,
        top_p=top_p,
        top_k=_int(body, "top_k", None, 1),
        seed=_int(body, "seed", None, 0),
        top_logprobs=top or 0,
    )


def _text(token: int) -> str:
    return piece(token).decode("utf-8", errors="replace")


def held_back(text: str, stops: list[str]) -> int:
    """How many characters at the end of `text` may be the start of a stop string (so must not be sent yet)."""
    keep = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), keep, -1):
            if text.endswith(stop[:n]):
                keep = n
                break
    return keep


class Reply:
    """One request's tokens as the client sees them: stop strings applied, text sent in order."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = stops
        self.detok = Detokenizer()
        self.sent_text = ""
        self.pending: list[
            tuple[Token | None, str]
        ] = []  # tokens not yet sent, with their text (None: a UTF-8 tail)
        self.sent: list[tuple[Token, str]] = []
        self.stopped = False

    def add(self, token: Token | None) -> list[tuple[Token | None, str]]:
        """Take one token (None: the end; flush what is held). Returns the (token, text) pieces to send now."""
        if token is not None:
            self.pending.append((token, self.detok.add(token.id)))
        else:
            tail = self.detok.flush()
            if tail:
                self.pending.append((None, tail))
        held = "".join(t for _, t in self.pending)
        whole = self.sent_text + held
        for stop in self.stops:
            at = whole.find(stop, max(0, len(self.sent_text) - len(stop) + 1))
            if at >= 0:
                self.stopped = True
                return self._take(at - len(self.sent_text), cut=True)
        keep = 0 if token is None else held_back(whole, self.stops)
        return self._take(len(held) - keep, cut=False)

    def _take(self, chars: int, cut: bool) -> list[tuple[Token | None, str]]:
        """Send the pending tokens whose text ends within `chars` characters (cut: and the one holding it)."""
        out: list[tuple[Token | None, str]] = []
        while self.pending:
            token, text = self.pending[0]
            if len(text) > chars and not (cut and chars > 0):
                break
            text = text[: max(chars, 0)] if cut else text
            self.pending.pop(0)
            chars -= len(text)
            out.append((token, text))
            if cut and chars <= 0:
                break
        for token, text in out:
            self.sent_text += text
            if token is not None:
                self.sent.append((token, text))
        return out


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, port: int, batcher: Batcher) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.batcher = batcher

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-reply is routine here (the disconnect predictions do it on purpose)."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(GuardedHandler):
    server: _Server

    def setup(self) -> None:
        super().setup()
        # Each token is its own small write: without TCP_NODELAY, Nagle's algorithm holds one until the client's
        # delayed ACK (up to 40 ms on Linux) and a stream's first token arrives late.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing ------------------------------------------------------------------------------------------------
    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": {"message": message, "type": "invalid_request_error", "code": status}})

    def _closed(self) -> bool:
        """The client closed its side: the socket reads as ready with nothing in it."""
        sock = self.connection
        try:
            ready, _, _ = select.select([sock], [], [], 0)
            return bool(ready) and sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _next(self, job: Job) -> Token | str:
        """The job's next event, watching the client meanwhile; Gone when it left."""
        while True:
            try:
                return job.events.get(timeout=WATCH)
            except queue.Empty:
                if self._closed():
                    raise Gone from None

    def _send(self, data: bytes) -> None:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            raise Gone from None

    # -- endpoints -----------------------------------------------------------------------------------------------
    def do_GET(self) -> None:
        batcher = self.server.batcher
        if self.path == "/v1/models":
            self._json(
                200, {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "owned_by": "falsify"}]}
            )
        elif self.path == "/health":
            self._json(200, {"status": "ok"})
        elif self.path == "/metrics":
            lines = [
                "# the reference server's own counters (a self-report)",
                f"reference:tokens_predicted_total {batcher.tokens_predicted}",
                f"reference:prompt_tokens_total {batcher.prompt_tokens}",
                f"reference:requests_processing {batcher.busy_slots()}",
            ]
            data = ("\n".join(lines) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._error(404, f"no GET {self.path}")

    def do_POST(self) -> None:
        chat = self.path == "/v1/chat/completions"
        if not chat and self.path != "/v1/completions":
            self._error(404, f"no POST {self.path}")
            return
        try:
            body = json.loads(self.body() or b"null")
            if not isinstance(body, dict):
                raise BadRequest("the body must be a JSON object")
            job = job_of(body, chat, self.server.batcher.vocab)
            stops = _stops(body)
            job.watch = self._closed
            self.server.batcher.add(job)
        except ValueError as exc:  # BadRequest, not UTF-8 or JSON, a 5,000-digit integer
            self._error(400, str(exc))
            return
        except RecursionError:
            self._error(400, "the body is nested too deeply to be a request")
            return
        try:
            self._serve(job, body, chat, stops)
        except Gone:
            job.hung_up = True

    def _serve(self, job: Job, body: dict[str, Any], chat: bool, stops: list[str]) -> None:
        stream = bool(body.get("stream"))
        want_ids = bool(body.get("return_token_ids"))
        logprobs = bool(body.get("logprobs")) if chat else body.get("logprobs") is not None
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:12]
        head = {"id": rid, "created": int(time.time()), "model": MODEL_ID}
        reply = Reply(stops)
        finish: str | None = None
        if stream:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            if chat:
                self._event(head, chat, {"index": 0, "delta": {"role": "assistant"}, "finish_reason": None})
        while finish is None:
            event = self._next(job)
            if isinstance(event, str):
                if event.startswith("error: "):
                    if stream:
                        self._send(
                            b"data: " + json.dumps({"error": {"message": event[7:]}}).encode() + b"\n\n"
                        )
                    else:
                        self._error(400, event[7:])
                    return
                finish = "stop" if event == "cancelled" else event
                out = reply.add(None)
            else:
                out = reply.add(event)
                if reply.stopped:
                    finish = "stop"
                    job.gone()
            if stream:
                for token, text in out:
                    choice = self._choice(
                        chat, True, text, [] if token is None else [(token, text)], logprobs, want_ids
                    )
                    self._event(head, chat, choice | {"finish_reason": None})
        n = len(reply.sent)
        usage = {
            "prompt_tokens": len(job.prompt),
            "completion_tokens": n,
            "total_tokens": len(job.prompt) + n,
        }
        if stream:
            final = self._choice(chat, True, "", [], False, False) | {"finish_reason": finish}
            self._event(head | {"usage": usage}, chat, final)
            self._send(b"data: [DONE]\n\n")
            return
        choice = self._choice(chat, False, reply.sent_text, reply.sent, logprobs, want_ids) | {
            "finish_reason": finish
        }
        kind = "chat.completion" if chat else "text_completion"
        self._json(200, head | {"object": kind, "choices": [choice], "usage": usage})

    def _event(self, head: dict[str, Any], chat: bool, choice: dict[str, Any]) -> None:
        kind = "chat.completion.chunk" if chat else "text_completion"
        self._send(b"data: " + json.dumps(head | {"object": kind, "choices": [choice]}).encode() + b"\n\n")

    @staticmethod
    def _choice(
        chat: bool, stream: bool, text: str, tokens: list[tuple[Token, str]], logprobs: bool, want_ids: bool
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0}
        if chat:
            choice["delta" if stream else "message"] = (
                {"content": text} if stream else {"role": "assistant", "content": text}
            )
        else:
            choice["text"] = text
        if want_ids:
            choice["token_ids"] = [t.id for t, _ in tokens]
        if not logprobs:
            choice["logprobs"] = None
        elif chat:
            choice["logprobs"] = {
                "content": [
                    {
                        "token": _text(t.id),
                        "logprob": t.logprob,
                        "bytes": list(piece(t.id)),
                        "top_logprobs": [
                            {"token": _text(i), "logprob": lp, "bytes": list(piece(i))} for i, lp in t.top
                        ],
                    }
                    for t, _ in tokens
                ]
            }
        else:
            offsets, at = [], 0
            for _, s in tokens:
                offsets.append(at)
                at += len(s)
            choice["logprobs"] = {
                "tokens": [_text(t.id) for t, _ in tokens],
                "token_logprobs": [t.logprob for t, _ in tokens],
                "top_logprobs": [{_text(i): lp for i, lp in t.top} for t, _ in tokens],
                "text_offset": offsets,
            }
        return choice


def serve(
    port: int, slots: int = 4, chunk: int | None = None, announce: Any = None, vocab: int | None = None
) -> None:
    from reference.model import load_model
    from reference.tiny import tiny_model

    model = load_model(tiny_model(seed=0), weights="f32")
    server = _Server(port, Batcher(model, slots=slots, chunk_cap=chunk, vocab=vocab))
    print(
        f"reference.serve --openai: listening on http://127.0.0.1:{server.server_address[1]} "
        f"({slots} slots, model {MODEL_ID})",
        file=sys.stderr,
        flush=True,
    )
    if announce is not None:
        announce(server)
    try:
        server.serve_forever()
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reference.serve --openai",
        description="the reference engine behind an OpenAI-compatible API on 127.0.0.1",
    )
    parser.add_argument("--port", type=int, required=True, help="TCP port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--slots", type=int, default=4, help="requests decoded at once (lanes); default 4")
    parser.add_argument(
        "--chunk", type=int, default=None, help="prefill chunk cap in tokens (default: the model's)"
    )
    parser.add_argument(
        "--vocab",
        type=int,
        default=None,
        help="serve only the first N token ids (another vocabulary: prompts past it are refused, replies never "
        "reach it); default the model's",
    )
    args = parser.parse_args(argv)
    if args.slots < 1:
        parser.error(f"--slots must be >= 1, got {args.slots}")
    if args.vocab is not None and not 259 <= args.vocab <= 512:
        parser.error(
            f"--vocab must hold the byte tokens and at most the model's 512 ids (259..512), got {args.vocab}"
        )
    try:
        serve(args.port, args.slots, args.chunk, vocab=args.vocab)
    except KeyboardInterrupt:
        return 0
    return 0
