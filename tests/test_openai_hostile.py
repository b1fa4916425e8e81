"""A hostile OpenAI-compatible server against the harness's client (`openai+http://`, issue #27): every reply that
is not the API, is too large, too slow, or carries a field of the wrong type is a named OpenAIError within the
request's one deadline (FALSIFY_OPENAI_TIMEOUT), never a raw exception, a hang or a value taken at face value.
A real socket server on 127.0.0.1 answers each request with scripted bytes; each test is bounded by SIGALRM."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from falsify.engines.adapters.openai import OpenAIEngine, OpenAIError

Answer = bytes | Callable[[socket.socket], Any]


@pytest.fixture(autouse=True)
def _alarm(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def hung(signum: int, frame: object) -> None:
        raise AssertionError("the client hung past the test's 15 s bound")

    monkeypatch.setenv("FALSIFY_OPENAI_TIMEOUT", "1.5")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(15)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


class Hostile:
    """Answers every request on `path` (or "*") with the scripted bytes, or lets a callable write to the socket."""

    def __init__(self, answers: dict[str, Answer]) -> None:
        self.answers = answers
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.threads: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            t = threading.Thread(target=self._one, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                while (
                    len(body) < length
                ):  # the whole request read: closing on unread bytes sends a reset, which
                    chunk = conn.recv(65536)  # can destroy the reply before the client reads it
                    if not chunk:
                        return
                    body += chunk
                path = data.split(b" ", 2)[1].decode()
                answer = self.answers.get(path, self.answers.get("*"))
                if callable(answer):
                    answer(conn)
                elif answer is not None:
                    conn.sendall(answer)
                conn.shutdown(socket.SHUT_WR)  # end of reply; then wait for the client to hang up
                while conn.recv(65536):
                    pass
            except OSError:
                pass  # the client hung up: what a deadline does

    def close(self) -> None:
        self.sock.close()


def http(status: int, body: bytes, ctype: str = "application/json") -> bytes:
    return (
        f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    )


def sse(*events: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + b"".join(
        events
    )


def drip(head: bytes, byte: bytes, every: float) -> Callable[[socket.socket], None]:
    def write(conn: socket.socket) -> None:
        conn.sendall(head)
        for _ in range(200):
            conn.sendall(byte)
            time.sleep(every)

    return write


def flood(head: bytes, mib: int) -> Callable[[socket.socket], None]:
    def write(conn: socket.socket) -> None:
        conn.sendall(head)
        for _ in range(mib):
            conn.sendall(b"x" * 2**20)

    return write


DEEP = b"[" * 100_000 + b"]" * 100_000
NINES = b"9" * 5000
CHOICE = {"text": "a", "token_ids": [1], "finish_reason": "length"}


def reply(**fields: Any) -> bytes:
    return http(200, json.dumps({"choices": [CHOICE], **fields}).encode())


def choice(**fields: Any) -> bytes:
    return http(200, json.dumps({"choices": [{**CHOICE, **fields}]}).encode())


CASES: list[tuple[str, Answer, str, str]] = [
    # (id, the server's answer, how the client asks, the named error)
    ("5000-digit-int", http(200, b'{"choices":[{"text":"a","index":' + NINES + b"}]}"), "complete", "an integer of 5000 digits"),
    ("nested-100000", http(200, b'{"choices":' + DEEP + b"}"), "complete", "nested deeper than 64 levels"),
    ("nan-logprob", http(200, b'{"choices":[{"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[NaN]}}]}'), "logprobs", "NaN is not JSON"),
    ("not-utf8", http(200, b'{"choices":[{"text":"\xff\xfe"}]}'), "complete", "not UTF-8"),
    ("64-MiB-body", flood(b"HTTP/1.1 200 OK\r\nContent-Length: 67108864\r\n\r\n", 64), "complete", "a body over 16,777,216 bytes"),
    ("ids-bools", choice(token_ids=[True, False]), "complete", "choices[0].token_ids: expected a list of token ids"),
    ("ids-negative", choice(token_ids=[-5]), "complete", "choices[0].token_ids: expected a list of token ids"),
    ("ids-2^62", choice(token_ids=[3, 2**62]), "complete", "choices[0].token_ids: expected a list of token ids (ints in [0, 2"),
    ("ids-2^31", choice(token_ids=[2**31]), "complete", "choices[0].token_ids: expected a list of token ids (ints in [0, 2"),
    ("usage-string", reply(usage={"completion_tokens": "1"}), "complete", "usage.completion_tokens: expected an integer >= 0 or null, got '1'"),
    ("usage-true", reply(usage={"completion_tokens": True}), "complete", "usage.completion_tokens: expected an integer >= 0 or null, got True"),
    ("text-object", choice(text={"a": 1}), "complete", "choices[0].text: expected a string or null"),
    ("finish-number", choice(finish_reason=7), "complete", "choices[0].finish_reason: expected a string or null"),
    ("logprob-entry-int", http(200, b'{"choices":[{"message":{"content":"a"},"logprobs":{"content":[1]}}]}'), "logprobs", "logprobs.content: expected a list of objects"),
    ("logprob-null", choice(logprobs={"tokens": ["a"], "token_logprobs": [None]}), "logprobs", "logprobs.token_logprobs[]: expected a finite number"),
    ("sse-not-utf8", sse(b"data: \xff\xfe\n\n"), "stream", "a line that is not UTF-8"),
    ("sse-nested", sse(b"data: " + DEEP + b"\n\n"), "stream", "nested deeper than 64 levels"),
    ("sse-not-json", sse(b"data: {nope\n\n"), "stream", "a streamed chunk: not JSON"),
    ("sse-64-MiB-line", flood(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: ", 64), "stream", "a line over 1,048,576 bytes"),
    ("sse-dripped", drip(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", b":", 0.2), "stream", "no complete reply within 1.5 s"),
    ("endless-100-continue", drip(b"", b"HTTP/1.1 100 Continue\r\n\r\n", 0.02), "complete", "no complete reply within 1.5 s"),
    ("headers-dripped", drip(b"HTTP/1.1 200 OK\r\nX: ", b"a", 0.2), "complete", "no complete reply within 1.5 s"),
    ("open-stream-nan", sse(b'data: {"choices":[{"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[NaN]}}]}\n\n'), "open_stream", "NaN is not JSON"),
    ("open-stream-dripped", drip(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", b":", 0.2), "open_stream", "no complete reply within 1.5 s"),
    ("models-nested", http(200, b'{"data":' + DEEP + b"}"), "models", "without a model id"),
    ("models-64-MiB", flood(b"HTTP/1.1 200 OK\r\nContent-Length: 67108864\r\n\r\n", 64), "models", "GET /v1/models: a body over 16,777,216 bytes"),
    ("slots-nested", http(200, DEEP), "slots", "/slots: nested deeper than 64 levels"),
    ("slots-not-objects", http(200, b"[1, 2]"), "slots", "/slots: expected a list of objects"),
    ("metrics-nan", http(200, b"x_tokens_predicted_total nan\n", "text/plain"), "metrics", "is not a count"),
]  # fmt: skip


@pytest.mark.parametrize(("answer", "call", "named"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_hostile_reply_is_a_named_error_within_the_deadline(answer: Answer, call: str, named: str) -> None:
    routes: dict[str, Answer] = {"*": answer}
    if call in ("slots", "metrics"):
        routes = {"/slots": answer, "/metrics": http(404, b"")} if call == "slots" else {"/metrics": answer}
    server = Hostile(routes)
    try:
        engine = OpenAIEngine(
            f"openai+http://127.0.0.1:{server.port}", model=None if call == "models" else "m"
        )
        t0 = time.monotonic()
        with pytest.raises(OpenAIError, match=named.replace("[", r"\[").replace("(", r"\(")):
            if call == "complete":
                engine.complete([300], 4)
            elif call == "stream":
                engine.complete([300], 4, stream=True)
            elif call == "logprobs":
                engine.complete([300], 4, logprobs=2)
            elif call in ("slots", "metrics"):
                engine.self_report()
            elif call == "open_stream":
                stream = engine.open_stream([300], 4)
                try:
                    while stream.next_token():
                        pass
                finally:
                    stream.close()
        assert time.monotonic() - t0 < 5  # one deadline of 1.5 s, not one per read
    except OpenAIError as exc:
        assert call == "models" and named in str(exc), exc  # /v1/models is read while the engine is made
    finally:
        server.close()


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("openai+http://127.0.0.1:99999", "not a URL (Port out of range"),
        ("openai+http://[::1", "not a URL (Invalid IPv6 URL)"),
        ("openai+exec:'a", "exec: cannot be split into words (No closing quotation)"),
    ],
)
def test_a_malformed_engine_spec_is_named(spec: str, named: str) -> None:
    with pytest.raises(OpenAIError, match=named.replace("(", r"\(").replace(")", r"\)")):
        OpenAIEngine(spec, model="m")


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "soon"])
def test_the_timeout_variable_must_be_a_finite_positive_number(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FALSIFY_OPENAI_TIMEOUT", value)
    with pytest.raises(OpenAIError, match="FALSIFY_OPENAI_TIMEOUT="):
        OpenAIEngine("openai+http://127.0.0.1:9", model="m")


def test_a_well_formed_reply_is_still_read() -> None:
    """The checks refuse what is wrong, not what is right: a whole reply, a stream and a self-report."""
    body = {"choices": [CHOICE], "usage": {"completion_tokens": 1}}
    stream = sse(
        b'data: {"choices":[{"text":"a","token_ids":[7]}]}\n\n',
        b'data: {"choices":[{"text":"b","token_ids":[8],"finish_reason":"length"}],"usage":{"completion_tokens":2}}\n\n',
        b"data: [DONE]\n\n",
    )
    server = Hostile({"/v1/completions": http(200, json.dumps(body).encode()), "/metrics": http(200, b"a:tokens_predicted_total 12\n", "text/plain"), "/slots": http(200, b'[{"is_processing": true}, {}]')})  # fmt: skip
    streamed = Hostile({"*": stream})
    try:
        whole = OpenAIEngine(f"openai+http://127.0.0.1:{server.port}", model="m").complete([300], 1)
        assert (whole.text, whole.token_ids, whole.completion_tokens, whole.finish_reason) == (
            "a",
            (1,),
            1,
            "length",
        )
        report = OpenAIEngine(f"openai+http://127.0.0.1:{server.port}", model="m").self_report()
        assert report == {"tokens_predicted_total": 12.0, "slots_processing": 1.0}
        got = OpenAIEngine(f"openai+http://127.0.0.1:{streamed.port}", model="m").complete(
            [300], 2, stream=True
        )
        assert (got.text, got.token_ids, got.completion_tokens, got.chunks) == ("ab", (7, 8), 2, 2)
    finally:
        server.close()
        streamed.close()


def test_a_token_id_outside_the_measured_vocabulary_is_named() -> None:
    """Issue #48: where the client measured the served vocabulary (the server refuses prompt ids from 300 on), a
    reply's id 300 is refused by name; id 299 is read."""
    from falsify.engines.adapters.openai_model import ServedModel

    replies = [choice(token_ids=[5, 300]), choice(token_ids=[299])]
    servers = [Hostile({"*": answer}) for answer in replies]
    try:
        engines = [OpenAIEngine(f"openai+http://127.0.0.1:{s.port}", model="m") for s in servers]
        for engine in engines:
            engine._served = ServedModel(150, 300, 300, None, "measured")
        with pytest.raises(OpenAIError, match=r"token_ids: 300 is outside the served vocabulary of 300"):
            engines[0].complete([200], 2)
        assert engines[1].complete([200], 1).token_ids == (299,)
    finally:
        for s in servers:
            s.close()


def test_one_slot_is_judged_on_three_alike_measures_and_parallel_on_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only parallel slots can end a request inside another's stream, so one such measure decides; a loaded client
    that stalls the short request once must not pass for a one-slot server (tests/test_openai_pack.py's 4 slots
    were once measured as one). The measures here are scripted: (parallel, detail), or None for a stream that ended
    early."""

    def scripted(*measures: tuple[bool, str] | None) -> tuple[OpenAIEngine, list[int]]:
        engine = OpenAIEngine("openai+http://127.0.0.1:9", model="m")
        queue, seeds = list(measures), []

        def measure(seed: int) -> tuple[bool, str] | None:
            seeds.append(seed)
            return queue.pop(0)

        monkeypatch.setattr(engine, "_measure_concurrency", measure)
        return engine, seeds

    engine, seeds = scripted((False, "stalled"), (True, "parallel slots"))
    assert engine.concurrency() == (True, "parallel slots") and seeds == [1, 1]
    assert engine.concurrency() == (True, "parallel slots") and seeds == [1, 1]  # measured once per engine
    engine, seeds = scripted(None, (False, "a"), (False, "b"), (False, "c"))
    assert engine.concurrency() == (False, "c; one slot in 3 of 3 measures") and seeds == [1, 2, 2, 2]
    engine, seeds = scripted(None, None, None, None, None)
    parallel, detail = (
        engine.concurrency()
    )  # neither topology: both NOT APPLICABLE, never a hard exit (issue #47)
    assert parallel is None and detail.startswith("not measured: ") and "is not measured" in detail, detail
    assert engine.supports("one_slot") == engine.supports("parallel_slots") == detail
    assert seeds == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("call", ["complete", "stream", "open_stream"])
def test_a_server_that_stops_answering_costs_one_deadline_not_one_per_request(
    call: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #48: a hung batcher held a gate past 20 minutes, each request waiting out its own deadline. The first
    missed deadline is said once on stderr, and every later request (any kind) fails at once with it: the server
    is not contacted again."""
    accepted: list[int] = []

    def hang(conn: socket.socket) -> None:
        accepted.append(1)
        time.sleep(3)  # past the 1.5 s deadline, then hang up

    server = Hostile({"*": hang})
    try:
        engine = OpenAIEngine(f"openai+http://127.0.0.1:{server.port}", model="m")
        with pytest.raises(OpenAIError, match=r"stopped answering: .*no complete reply within 1.5 s"):
            if call == "open_stream":
                stream = engine.open_stream([300], 4, wait=False)
                try:
                    stream.next_token()
                finally:
                    stream.close()
            else:
                engine.complete([300], 4, stream=call == "stream")
        contacted = len(accepted)
        for again in (
            lambda: engine.complete([300], 4),
            lambda: engine.open_stream([300], 4),
            lambda: engine.get("/health"),
            engine.self_report,
        ):
            with pytest.raises(OpenAIError, match="every later request fails at once"):
                again()
        assert len(accepted) == contacted  # asked nothing more
        said = capsys.readouterr().err
        assert said.count("stopped answering") == 1, said
    finally:
        server.close()


def test_every_process_an_openai_exec_server_starts_ends_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #48: an `openai+exec:` server behind a wrapper script, or one that daemonizes a child, outlived
    `falsify engine check` and `gate` (only the started PID was stopped). The server runs in a session of its own;
    close() ends its group and whatever carries its FALSIFY_ENGINE_MARK."""
    import shlex
    import sys

    from falsify.engines import process_tree

    monkeypatch.setenv("FALSIFY_OPENAI_TIMEOUT", "60")
    sleeper = f"{sys.executable} -c 'import time; time.sleep(600)'"
    shell = f"(setsid {sleeper} &); {sleeper} & {sys.executable} -m reference.serve --openai --port {{port}}"
    signal.alarm(60)  # the tiny model's server starts in a few seconds; 60 s only bounds a failing run
    engine = OpenAIEngine(f"openai+exec:sh -c {shlex.quote(shell)}", model="m")
    assert engine.mark is not None
    while len(process_tree.marked(engine.mark)) < 4:  # the shell, the server and both sleepers
        time.sleep(0.05)
    engine.close()
    while process_tree.marked(engine.mark):
        time.sleep(0.05)
