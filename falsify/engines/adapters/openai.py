"""An OpenAI-compatible HTTP server as the engine under test: `--engine openai+http://127.0.0.1:PORT`.

The harness speaks the API servers already offer (llama.cpp's llama-server, vLLM, SGLang, llama_cpp.server, the
reference's `python -m reference.serve --openai`), with no adapter inside the server:

    openai+http://127.0.0.1:8080            a server already running on the loopback
    openai+exec:CMD ... {port} ...          a server this engine starts from CMD (shell-split, `{port}` replaced by
                                            a free loopback port), waits for, and stops by its PID at exit
                                            (and, on Linux, which exits when this process dies)

The model is `--engine-model` ($FALSIFY_ENGINE_MODEL), else the first id `/v1/models` lists. Only the loopback is
accepted: a server elsewhere is refused before any request.

`complete` runs one request on /v1/completions or /v1/chat/completions, streamed (SSE) or not, and returns what
the client saw: text, token ids where the server returns them (`token_ids`, vLLM's `return_token_ids`, asked for
on every request), the logprob entries' token strings and logprobs, finish_reason, the usage claim, and the
arrival time of every streamed token. `open_stream` gives the raw stream for a client that reads k tokens and
hangs up. `self_report()` reads the server's own counters where it offers them (Prometheus /metrics, llama-server's
/slots): a claim the falsifiers compare with their measurements, never the measurement itself.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any, TypeVar
from urllib.parse import urlsplit

from falsify.engines import process_tree
from falsify.engines.adapters import openai_model
from falsify.engines.adapters.openai_replies import (
    REQUEST_TIMEOUT,
    Completion,
    DeadlineMissed,
    OpenAIError,
    StatusError,
    _body,
    _chunk_has_token,
    _counter,
    _first_choice,
    _json,
    _reading,
    _sse_data,
    _streamed,
    _timeout,
    _whole,
)
from falsify.engines.deadline_http import DeadlineConnection

T = TypeVar("T")

MODEL_ENV = "FALSIFY_ENGINE_MODEL"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
START_TIMEOUT = 120.0  # seconds a started server has to answer /v1/models
GET_TIMEOUT = 30.0
CONCURRENCY_TOKENS = 1000
CONCURRENCY_TRIES = 3  # alike measures before a server is judged to have one slot
CONCURRENCY_MIN_TOKENS = (
    100  # a shorter stream (it met an end-of-text token) does not outlast a one-token request
)


def text_prompt(ids: list[int]) -> str:
    """A token-id prompt as text for a server that takes no ids: one ASCII letter per id (a byte-level vocabulary,
    such as the tiny model's, reads it as one token per id; a real model's tokenizer merges letters, so the prompt
    is shorter in tokens there)."""
    return "".join(chr(ord("a") + t % 26) for t in ids)


class Stream:
    """An open SSE reply: read tokens one at a time, then `close()` the connection (a client hanging up)."""

    def __init__(
        self,
        conn: DeadlineConnection,
        response: http.client.HTTPResponse | None,
        t0: float,
        timeout: float = REQUEST_TIMEOUT,
        watch: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> None:
        self.conn, self.response, self.t0 = conn, response, t0
        self.watch = watch  # the engine's: a missed deadline stops it asking the server anything more
        self.timeout = timeout  # the whole stream's, from the request on
        # The socket itself: once a reply without a length arrives, http.client hands it to the response and
        # the connection no longer holds it.
        self.sock = conn.sock
        self.tokens = 0
        self.times: list[float] = []
        self.done = False

    def next_token(self) -> bool:
        """Read until the next chunk that carries text or a token; False at the end of the stream."""
        with self.watch(), _reading("the stream", self.timeout):
            if self.response is None:
                self.response = self.conn.getresponse()
            while not self.done:
                data = _sse_data(self.response)
                if data is None or data == "[DONE]":
                    self.done = True
                    break
                choice = _first_choice(_json(data, "a streamed chunk"))
                if choice is None or not _chunk_has_token(choice):
                    continue
                self.tokens += 1
                self.times.append(time.perf_counter() - self.t0)
                return True
            return False

    def close(self) -> None:
        """Hang up: shut the socket both ways and close it, as a client that goes away does."""
        if self.sock is not None:
            with contextlib.suppress(OSError):  # already shut by the server
                self.sock.shutdown(socket.SHUT_RDWR)
            self.sock.close()
        if self.response is not None:
            self.response.close()
        self.conn.close()


class OpenAIEngine:
    name = "openai"
    capabilities = frozenset({"openai", "one_slot", "parallel_slots", "metrics"})

    def __init__(self, spec: str, model: str | None = None) -> None:
        self.spec = spec
        self.process: subprocess.Popen[bytes] | None = None
        self.mark: str | None = None  # the started server's FALSIFY_ENGINE_MARK
        self.log: IO[bytes] | None = None  # what a server started by openai+exec: writes
        self._concurrency: tuple[bool | None, str] | None = None
        self.timeout = _timeout()
        # the first missed deadline, said once on stderr: every later request fails at once with it, so a server
        # that stops answering costs one deadline, not one per request (issue #48: a hung batcher held a gate
        # past 20 minutes, 900 s per falsifier, with nothing on screen)
        self.missed: str | None = None
        self._missed_lock = threading.Lock()
        rest = spec.removeprefix("openai+")
        if rest.startswith("exec:"):
            port = _free_port()
            try:
                words = shlex.split(rest[len("exec:") :])
            except ValueError as exc:
                raise OpenAIError(f"engine {spec!r}: exec: cannot be split into words ({exc})") from None
            argv = [a.replace("{port}", str(port)) for a in words]
            if not argv:
                raise OpenAIError(f"engine {spec!r}: exec: names no command")
            self.host, self.port = "127.0.0.1", port
            # In a session and process group of its own, marked (falsify/engines/process_tree.py): close() ends
            # the group and whatever carries the mark (a wrapper script's server, a child that setsid away, a
            # daemon), and `falsify gate` / `mutants` end them from the record should this process be killed
            # first; on Linux the server is also told to exit with this process (PR_SET_PDEATHSIG).
            # Its output goes to a file of its own, not the user's terminal (a server's log, or a control sequence,
            # is not falsify's output); its tail is quoted, on one line, when it exits before answering.
            self.log = tempfile.TemporaryFile()  # noqa: SIM115 -- the server's for its lifetime; close() closes it
            try:
                self.process, self.mark = process_tree.start(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=self.log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=_exit_with_parent,
                )
            except (OSError, ValueError) as exc:  # no such program, not executable, a name too long
                self.log.close()
                raise OpenAIError(
                    f"engine {spec!r}: exec: cannot start {argv[0]!r}: {getattr(exc, 'strerror', None) or exc}"
                ) from None
            atexit.register(self.close)
        else:
            try:
                url = urlsplit(rest)
                port_ = url.port
            except ValueError as exc:  # a port out of range or not a number, a broken IPv6 literal
                raise OpenAIError(f"engine {spec!r}: not a URL ({exc})") from None
            if url.scheme != "http" or url.hostname not in LOOPBACK or port_ is None:
                raise OpenAIError(
                    f"engine {spec!r}: expected openai+http://127.0.0.1:PORT (loopback only) or openai+exec:CMD"
                )
            self.host, self.port = url.hostname, port_
        self.model = model or os.environ.get(MODEL_ENV) or self._first_model()
        self.text_prompts: str | None = None
        self._text_tried = False
        self._served: openai_model.ServedModel | None = None

    # -- the served model, learned from the server (falsify/engines/adapters/openai_model.py) ----------------------
    def served(self) -> openai_model.ServedModel:
        """Which token ids a prompt may hold and the context, learned once from the server."""
        if self._served is None:
            self._served = openai_model.learn(self)
        return self._served

    def prompt(self, seed: int, n: int) -> list[int]:
        """n token ids, fixed by seed, within the served model's vocabulary."""
        return openai_model.prompt(self.served(), seed, n)

    def fits(self, prompt_tokens: int, max_tokens: int) -> bool:
        """Whether a request of this size fits the context the server says it has (True where it says none)."""
        context = self.served().context
        return context is None or prompt_tokens + max_tokens <= context

    def pieces(self, reply: Completion) -> list[str] | None:
        """The text of each of the reply's tokens, where the server lets the client know it."""
        return openai_model.pieces(self, reply)

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        """POST a JSON body, the reply's JSON (StatusError for a status other than 200)."""
        conn = self._conn(min(GET_TIMEOUT, self.timeout))
        try:
            with _reading(f"POST {path}", min(GET_TIMEOUT, self.timeout)):
                self._post(conn, path, body)
                return _json(_body(self._answer(conn, path), f"POST {path}"), f"POST {path}'s reply")
        finally:
            conn.close()

    def supports(self, capability: str) -> str | None:
        if capability == "openai":
            return None
        if capability in ("one_slot", "parallel_slots"):
            parallel, detail = self.concurrency()
            if parallel is None:
                return detail
            if parallel == (capability == "parallel_slots"):
                return None
            return f"measured: {detail}"
        if capability == "metrics":
            report = self.self_report() or {}
            return (
                None
                if "tokens_predicted_total" in report
                else "the server publishes no tokens-predicted counter (/metrics)"
            )
        return f"an OpenAI-compatible server is reached only through its HTTP API, not {capability!r}"

    def concurrency(self) -> tuple[bool | None, str]:
        """Whether the server runs two requests at once, measured once per engine: a one-token request sent after
        a long stream's first token either ends long before that stream (parallel slots: in under half the
        stream's remaining time) or waits for it (one slot). Only parallel slots can end a request inside another's
        stream, so one such measure decides; "one slot" takes CONCURRENCY_TRIES alike, so that a loaded machine
        stalling the short request once does not pass for a one-slot server."""
        if self._concurrency is None:
            try:
                self._concurrency = self._measured_concurrency()
            except OpenAIError as exc:  # neither topology is shown: both NOT APPLICABLE with the reason
                self._concurrency = (None, f"not measured: {exc}")
        return self._concurrency

    def _measured_concurrency(self) -> tuple[bool, str]:
        serial: list[str] = []
        for seed in range(
            1, 6
        ):  # a stream that ends early (an end-of-text token) measures nothing: another prompt
            while len(serial) < CONCURRENCY_TRIES:
                got = self._measure_concurrency(seed)
                if got is None:
                    break
                if got[0]:
                    return got
                serial.append(got[1])
        if serial:
            return False, f"{serial[-1]}; one slot in {len(serial)} of {len(serial)} measures"
        raise OpenAIError(
            f"engine {self.spec!r}: 5 streams of max_tokens up to {CONCURRENCY_TOKENS} each ended before "
            f"{CONCURRENCY_MIN_TOKENS} tokens: whether the server runs two requests at once is not measured"
        )

    def _measure_concurrency(self, seed: int) -> tuple[bool, str] | None:
        context = self.served().context
        tokens = CONCURRENCY_TOKENS if context is None else min(CONCURRENCY_TOKENS, context - 8)
        long = self.open_stream(self.prompt(seed, 8), tokens)
        long.next_token()
        t0 = time.perf_counter()
        done: list[float] = []

        def short() -> None:
            self.complete(self.prompt(2, 8), 1)
            done.append(time.perf_counter() - t0)

        waiter = threading.Thread(target=short)
        waiter.start()
        while long.next_token():
            pass
        long_end = time.perf_counter() - t0
        long.close()
        waiter.join(REQUEST_TIMEOUT)
        if long.tokens < CONCURRENCY_MIN_TOKENS:
            return None
        # One slot: the short request waits for the stream, so both end together (ratio near 1); parallel
        # slots: it ends while the stream still has most of its tokens to go (ratio near 0).
        parallel = bool(done) and done[0] < 0.5 * long_end
        detail = (
            f"a one-token request sent after a {long.tokens}-token stream's first token took "
            f"{done[0] if done else float('nan'):.3f} s, the stream's rest {long_end:.3f} s: "
            f"{'parallel slots' if parallel else 'one slot'} (parallel when under half)"
        )
        return parallel, detail

    def _output_tail(self, limit: int = 400) -> str:
        """`; output: ...`, the last `limit` bytes the started server wrote, on one line ("" when none)."""
        log = self.log
        if log is None:
            return ""
        try:
            log.seek(max(0, log.seek(0, os.SEEK_END) - limit))
            text = " ".join(log.read(limit).decode("utf-8", "replace").split())
        except (OSError, ValueError):
            return ""
        return f"; output: {text}" if text else ""

    def close(self) -> None:
        """Stop the server this engine started (by its PID), if any."""
        proc, self.process = self.process, None
        log, self.log = self.log, None
        if log is not None:
            log.close()
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):  # then killed with the group below
                proc.wait(10)
        process_tree.end_group(proc.pid, self.mark)  # the rest of the group, and what left it
        proc.wait(10)

    # -- requests -------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        """Refuse at once once a deadline was missed; remember (and say) the first one missed inside."""
        if self.missed is not None:
            raise DeadlineMissed(self.missed)
        try:
            yield
        except DeadlineMissed as exc:
            with self._missed_lock:
                first = self.missed is None
                if first:
                    self.missed = (
                        f"engine {self.spec!r} stopped answering: {exc}; every later request fails at once"
                    )
            if first:
                print(f"falsify: {self.missed}", file=sys.stderr, flush=True)
            raise DeadlineMissed(self.missed or str(exc)) from None

    def _conn(self, timeout: float | None = None) -> DeadlineConnection:
        """A connection whose whole exchange ends within `timeout` (default: the request timeout)."""
        return DeadlineConnection(self.host, self.port, time.monotonic() + (timeout or self.timeout))

    def get(self, path: str) -> tuple[int, bytes]:
        """Status and body of GET `path` (at most MAX_BODY bytes). OSError when the server cannot be reached (the
        start-up wait retries on it); OpenAIError for a reply too slow, too large or not HTTP."""
        with self.watch():
            return self._get(path)

    def _get(self, path: str) -> tuple[int, bytes]:
        conn = self._conn(min(GET_TIMEOUT, self.timeout))
        try:
            conn.request("GET", path)
            with _reading(f"GET {path}", min(GET_TIMEOUT, self.timeout)):
                response = conn.getresponse()
                return response.status, _body(response, f"GET {path}")
        finally:
            conn.close()

    def _first_model(self) -> str:
        deadline = time.monotonic() + (START_TIMEOUT if self.process is not None else 10)
        while True:
            try:
                status, body = self.get("/v1/models")
                break
            except OSError as exc:
                if self.process is not None and self.process.poll() is not None:
                    raise OpenAIError(
                        f"engine {self.spec!r}: the server exited with {self.process.returncode} before answering"
                        + self._output_tail()
                    ) from None
                if time.monotonic() > deadline:
                    raise OpenAIError(f"engine {self.spec!r}: no answer from /v1/models: {exc}") from None
                time.sleep(0.2)
        try:
            models = _json(body, "/v1/models")["data"]
            if not isinstance(models[0]["id"], str):
                raise TypeError("a model id must be a string")
            return models[0]["id"]
        except (OpenAIError, KeyError, IndexError, TypeError):
            raise OpenAIError(
                f"engine {self.spec!r}: /v1/models answered {status} without a model id: {body[:200]!r}"
            ) from None

    def _text_instead(self, prompt: list[int] | str, refusal: OpenAIError) -> bool:
        """The OpenAI API takes a prompt as an array of token ids; a server that refuses one (llama_cpp.server
        0.3.36 declares `prompt: str | list[str]`) gets every prompt as text instead, one ASCII letter per id
        (`text_prompt`), and `text_prompts` says why. Tried once, on the first refused token-id prompt: True when
        the request should be sent again as text."""
        if not isinstance(prompt, list) or self.text_prompts is not None or self._text_tried:
            return False
        self._text_tried = True
        self.text_prompts = f"{refusal}; prompts go as text, one ASCII letter per token id"
        return True

    def _text_refused(self) -> None:
        """Text fared no better: back to token ids (the first refusal is the error to report)."""
        self.text_prompts = None

    def body(
        self,
        prompt: list[int] | str,
        max_tokens: int,
        *,
        chat: bool = False,
        stream: bool = False,
        temperature: float = 0.0,
        seed: int | None = None,
        stop: list[str] | None = None,
        logprobs: int = 0,
    ) -> dict[str, Any]:
        """The request body; a token-id prompt only goes to /v1/completions (chat takes text)."""
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": stream,
            "return_token_ids": True,
        }
        if chat:
            body["messages"] = [{"role": "user", "content": prompt}]
            if logprobs:
                body |= {"logprobs": True, "top_logprobs": logprobs}
        else:
            body["prompt"] = text_prompt(prompt) if self.text_prompts and isinstance(prompt, list) else prompt
            if logprobs:
                body["logprobs"] = logprobs
        if stream:
            # the OpenAI API sends usage in a stream only when asked (a last chunk with empty choices)
            body["stream_options"] = {"include_usage": True}
        if seed is not None:
            body["seed"] = seed
        if stop:
            body["stop"] = stop
        return body

    def open_stream(
        self, prompt: list[int] | str, max_tokens: int, *, wait: bool = True, **kw: Any
    ) -> Stream:
        """Send a streamed request; return when the response headers arrive (wait=False: as soon as it is sent,
        for a client that hangs up before the server answered anything)."""
        with self.watch():
            return self._text_fallback(prompt, lambda: self._open_stream(prompt, max_tokens, wait=wait, **kw))

    def _text_fallback(self, prompt: list[int] | str, send: Callable[[], T]) -> T:
        """send(); a token-id prompt refused with a status other than 200 is sent again once as text, and text
        prompts stay on only when that succeeds (else the first refusal is reported)."""
        try:
            return send()
        except StatusError as refusal:
            if not self._text_instead(prompt, refusal):
                raise
            try:
                got = send()
            except OpenAIError:
                self._text_refused()
                raise refusal from None
            print(f"falsify: engine {self.spec!r}: {self.text_prompts}", file=sys.stderr)
            return got

    @staticmethod
    def _post(conn: DeadlineConnection, path: str, body: dict[str, Any]) -> None:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})

    @staticmethod
    def _answer(conn: DeadlineConnection, path: str) -> http.client.HTTPResponse:
        response = conn.getresponse()
        if response.status != 200:
            raise StatusError(
                f"POST {path} answered {response.status}: {response.read(300)!r}", response.status
            )
        return response

    def _open_stream(
        self, prompt: list[int] | str, max_tokens: int, *, wait: bool = True, **kw: Any
    ) -> Stream:
        """Send a streamed request; return when the response headers arrive (wait=False: as soon as it is sent,
        for a client that hangs up before the server answered anything)."""
        chat = bool(kw.get("chat"))
        path = "/v1/chat/completions" if chat else "/v1/completions"
        conn = self._conn()
        t0 = time.perf_counter()
        try:
            with _reading(f"POST {path}", self.timeout):
                self._post(conn, path, self.body(prompt, max_tokens, stream=True, **kw))
                if not wait:
                    return Stream(conn, None, t0, self.timeout, self.watch)
                response = self._answer(conn, path)
        except BaseException:
            conn.close()
            raise
        return Stream(conn, response, t0, self.timeout, self.watch)

    def complete(self, prompt: list[int] | str, max_tokens: int, **kw: Any) -> Completion:
        """One request, read to its end."""
        with self.watch():
            reply = self._text_fallback(prompt, lambda: self._complete(prompt, max_tokens, **kw))
        vocab = None if self._served is None else self._served.vocab
        bad = [t for t in reply.token_ids or () if vocab is not None and t >= vocab]
        if bad:
            raise OpenAIError(
                f"choices[0].token_ids: {bad[0]} is outside the served vocabulary of {vocab} (the server refuses "
                "prompt ids from there on)"
            )
        return reply

    def _complete(self, prompt: list[int] | str, max_tokens: int, **kw: Any) -> Completion:
        chat, stream = bool(kw.get("chat")), bool(kw.get("stream"))
        path = "/v1/chat/completions" if chat else "/v1/completions"
        conn = self._conn()
        t0 = time.perf_counter()
        try:
            with _reading(f"POST {path}", self.timeout):
                self._post(conn, path, self.body(prompt, max_tokens, **kw))
                response = self._answer(conn, path)
                if not stream:
                    reply = _json(_body(response, f"POST {path}"), f"POST {path}'s reply")
                    seconds = time.perf_counter() - t0
                    return _whole(reply, seconds)
                return _streamed(response, t0)
        finally:
            conn.close()

    # -- the server's self-report ---------------------------------------------------------------------------------
    def self_report(self) -> dict[str, float] | None:
        """The server's own counters, where it offers them: Prometheus /metrics lines ending in
        tokens_predicted_total / generation_tokens_total (llama-server, vLLM, the reference), prompt_tokens_total,
        the running-requests gauge (vLLM's num_requests_running, llama-server's and the reference's
        requests_processing) and llama-server's /slots (`slots_processing`: slots it says are busy). None when it
        offers none."""
        report: dict[str, float] = {}
        try:
            status, body = self.get("/metrics")
            if status == 200:
                for line in body.decode("utf-8", "replace").splitlines():
                    if line.startswith("#") or " " not in line:
                        continue
                    key, _, value = line.rpartition(" ")
                    name = key.split("{")[0]
                    for suffixes, key in METRICS:
                        if name.endswith(suffixes):
                            report[key] = report.get(key, 0.0) + _counter(value, f"/metrics {name}")
            status, body = self.get("/slots")
            if status == 200:
                slots = _json(body, "/slots")
                if isinstance(slots, list):
                    if not all(isinstance(s, dict) for s in slots):
                        raise OpenAIError("/slots: expected a list of objects")
                    report["slots_processing"] = float(sum(s.get("is_processing") is True for s in slots))
        except OSError:
            return report or None
        return report or None


# The self-report's keys and the Prometheus names that feed them (summed over label sets: vLLM labels each by
# engine and model): tokens decoded, prompt tokens processed, requests running now (a gauge).
METRICS = (
    (("tokens_predicted_total", "generation_tokens_total"), "tokens_predicted_total"),
    (("prompt_tokens_total",), "prompt_tokens_total"),
    ((":num_requests_running", ":requests_processing"), "requests_running"),
)


def _exit_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux prctl PR_SET_PDEATHSIG; elsewhere nothing)."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


# -- reading replies ----------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
