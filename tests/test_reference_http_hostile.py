"""The reference's own HTTP servers facing a hostile local client (issue #27): `python -m reference.serve --http`
(the wire protocol) and `--openai`. Each bad request is a named 4xx/5xx within a bounded time, the server keeps
serving, and a client that stalls or idles is dropped after the handler's timeout (lowered here to 0.5 s; 30 s
in the servers). In process, on 127.0.0.1; each test is bounded by SIGALRM."""

from __future__ import annotations

import json
import os
import select
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from testkit_hang_bound import hang_bound

from reference import openai_server, serve

IDLE = 0.5


@pytest.fixture(autouse=True)
def _alarm() -> Iterator[None]:
    with hang_bound(20, "a server or its client"):
        yield


def _run(server: Any) -> Iterator[int]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        thread.join(5)
        server.server_close()


@pytest.fixture(scope="module")
def model() -> Any:
    from reference.model import load_model
    from reference.tiny import tiny_model

    return load_model(tiny_model(seed=0), weights="f32")


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setattr(serve._Handler, "timeout", IDLE)
    yield from _run(serve._Server(("127.0.0.1", 0)))


@pytest.fixture
def oai(monkeypatch: pytest.MonkeyPatch, model: Any) -> Iterator[int]:
    from reference.openai_batcher import Batcher

    monkeypatch.setattr(openai_server._Handler, "timeout", IDLE)
    yield from _run(openai_server._Server(0, Batcher(model, slots=1)))


def exchange(port: int, data: bytes, wait: float = 5.0) -> bytes:
    """Send raw bytes; everything the server sends back until it closes (or `wait` passes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(data)
        out = b""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            out += chunk
    return out


def post(path: str, body: bytes, length: object = None, extra: str = "") -> bytes:
    n = len(body) if length is None else length
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {n}\r\n{extra}\r\n"
    return head.encode() + body


GOOD = {"/rpc": b'{"id": 1, "method": "x"}', "/v1/completions": b'{"prompt": [300], "max_tokens": 1}'}
FRAMING = [
    ("negative-length", -1, "", b" 400 ", b"Content-Length must be a number of bytes, got '-1'"),
    ("huge-length", 10**15, "", b" 413 ", b"a body of 1000000000000000 bytes; at most 16777216 are taken"),
    ("letters-length", "abc", "", b" 400 ", b"Content-Length must be a number of bytes, got 'abc'"),
    ("chunked", None, "Transfer-Encoding: chunked\r\n", b" 501 ", b"Transfer-Encoding is not supported"),
    ("stalled-body", 10_000, "", b" 408 ", b"the body ended after"),
]


@pytest.mark.parametrize("kind", ["wire", "oai"])
@pytest.mark.parametrize(
    ("length", "extra", "status", "named"), [c[1:] for c in FRAMING], ids=[c[0] for c in FRAMING]
)
def test_a_bad_length_is_refused_before_the_body_is_read(
    kind: str, length: object, extra: str, status: bytes, named: bytes, request: pytest.FixtureRequest
) -> None:
    port = request.getfixturevalue(kind)
    path = "/rpc" if kind == "wire" else "/v1/completions"
    t0 = time.monotonic()
    out = exchange(port, post(path, GOOD[path], length, extra))
    assert out.split(b"\r\n", 1)[0].startswith(b"HTTP/1.0") and status in out.split(b"\r\n", 1)[0], out[:200]
    assert named in out, out[:400]
    assert time.monotonic() - t0 < 4  # the stalled body: the 0.5 s timeout, not the client's patience
    assert exchange(port, post(path, GOOD[path])).startswith(b"HTTP/1.0 "), "the server stopped serving"


@pytest.mark.parametrize("kind", ["wire", "oai"])
def test_an_idle_or_dribbling_connection_is_dropped(kind: str, request: pytest.FixtureRequest) -> None:
    port = request.getfixturevalue(kind)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(8)]
    for sock in idle:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n")  # headers never finished
    path = "/rpc" if kind == "wire" else "/v1/completions"
    assert exchange(port, post(path, GOOD[path])).startswith(b"HTTP/1.0 "), "idle clients starved the server"
    t0 = time.monotonic()
    for sock in idle:
        assert sock.recv(1) == b"", "the server kept an idle connection"
        sock.close()
    assert time.monotonic() - t0 < 4


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b"[" * 100_000 + b"]" * 100_000, b"not JSON: maximum recursion depth exceeded"),
        (b'{"id": ' + b"9" * 5000 + b"}", b"not JSON: Exceeds the limit (4300 digits)"),
        (b'{"method": "\xff"}', b"not JSON: &#x27;utf-8&#x27; codec can"),
    ],
    ids=["nested-100000", "5000-digits", "not-utf8"],
)
def test_the_wire_server_answers_a_line_that_is_not_json_with_its_parse_error(
    wire: int, body: bytes, named: bytes
) -> None:
    out = exchange(wire, post("/rpc", body))
    assert out.startswith(b"HTTP/1.0 400 ") and b'"code": -32700' in out, out[:300]
    assert named in out or named.replace(b"&#x27;", b"'") in out, out[:400]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "the body is nested too deeply to be a request"),
        ({"prompt": [300], "max_tokens": 1, "n": 1000}, "n: this server returns one choice per request (1), got 1000"),
        ({"prompt": [300], "max_tokens": 1, "n": True}, "n: this server returns one choice per request (1), got True"),
        ({"prompt": [300], "max_tokens": 1, "best_of": 2}, "best_of: this server returns one choice per request (1), got 2"),
        ({"prompt": [300], "max_tokens": 1, "logprobs": 10**9}, "logprobs: at most 20 alternatives per token, got 1000000000"),
        ({"messages": [{"role": "user", "content": "a"}], "max_tokens": 1, "logprobs": True, "top_logprobs": 21}, "top_logprobs: at most 20 alternatives per token, got 21"),
        ({"prompt": [300], "max_tokens": 1, "top_p": 5}, "top_p: expected a number in (0, 1], got 5.0"),
        ({"prompt": [300], "max_tokens": 1, "top_p": 0}, "top_p: expected a number in (0, 1], got 0.0"),
        ({"prompt": [300], "max_tokens": 10**30}, "exceeds the context of"),
        ({"prompt": [300], "max_tokens": 1, "temperature": 5e-324}, "temperature: expected 0 (greedy) or a number >= 1e-06, got 5e-324"),
        ({"prompt": [300], "max_tokens": 1, "temperature": 9.99e-7}, "temperature: expected 0 (greedy) or a number >= 1e-06, got 9.99e-07"),
    ],
    ids=["nested", "n", "n-bool", "best_of", "logprobs", "top_logprobs", "top_p-5", "top_p-0", "max_tokens", "temperature-5e-324", "temperature-under-floor"],
)  # fmt: skip
def test_the_openai_server_refuses_what_it_cannot_serve_by_name(oai: int, body: Any, named: str) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    path = "/v1/chat/completions" if b'"messages"' in raw else "/v1/completions"
    out = exchange(oai, post(path, raw))
    assert out.startswith(b"HTTP/1.0 400 "), out[:300]
    assert json.loads(out.partition(b"\r\n\r\n")[2])["error"]["message"].startswith(named) or named in str(
        out
    )


def test_the_openai_server_still_serves_the_edges_it_allows(oai: int) -> None:
    """n 1, top_p 1, 20 alternatives: the limits refuse what is past them, not what is at them."""
    body = {"prompt": [300], "max_tokens": 1, "n": 1, "best_of": 1, "top_p": 1, "logprobs": 20}
    out = exchange(oai, post("/v1/completions", json.dumps(body).encode()))
    assert out.startswith(b"HTTP/1.0 200 "), out[:300]
    reply = json.loads(out.partition(b"\r\n\r\n")[2])
    # 20 alternatives, keyed by their text: pieces that detokenize alike share one key, so at most 20 show.
    assert len(reply["choices"]) == 1 and 1 < len(reply["choices"][0]["logprobs"]["top_logprobs"][0]) <= 20


def dribbled(port: int, head: bytes, body: bytes | None, every: float = 0.2) -> tuple[int, bytes]:
    """Send `head` (dribbled itself when body is None), then `body` one byte every `every` s, until the server
    answers or hangs up: (bytes sent dribbling, what the server sent)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        if body is not None:
            sock.sendall(head)
        sent = 0
        for byte in head if body is None else body:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            sent += 1
            ready, _, _ = select.select([sock], [], [], every)
            if ready:
                break
        try:
            return sent, sock.recv(200)
        except OSError:
            return sent, b""


@pytest.mark.parametrize("kind", ["wire", "oai"])
@pytest.mark.parametrize("what", ["body", "head"])
def test_one_deadline_bounds_a_request_however_its_bytes_are_spread(
    kind: str, what: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #48: each recv had the idle timeout, so a byte every 5 s held a connection past the documented 30 s;
    the request's deadline (lowered here to 1 s) ends it whatever the pace. Each byte comes well within the idle
    timeout (0.2 s of 2 s), so only the deadline can end it: 200 bytes at 0.2 s would take 40 s."""
    handler = serve._Handler if kind == "wire" else openai_server._Handler
    monkeypatch.setattr(handler, "timeout", 2.0)
    monkeypatch.setattr(handler, "request_timeout", 1.0)
    port = request.getfixturevalue(kind)
    path = "/rpc" if kind == "wire" else "/v1/completions"
    body = b" " * 200
    head = (
        post(path, b"", len(body))
        if what == "body"
        else post(path, b"", 0).replace(b"Host: x", b"Host: " + b"x" * 200)
    )
    sent, answer = dribbled(port, head, body if what == "body" else None)
    assert sent < 200, "the server took a dribbled request for as long as it came"
    assert answer == b"" or b" 408 " in answer.split(b"\r\n", 1)[0], answer[:200]
    assert exchange(port, post(path, GOOD[path])).startswith(b"HTTP/1.0 "), "the server stopped serving"


@pytest.mark.parametrize("kind", ["wire", "oai"])
def test_bodies_are_bounded_in_total_across_connections(
    kind: str, model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #48: six concurrent 16 MiB prompts took the OpenAI server from 50 to 640 MB; each body was bounded,
    not their sum. Lowered here to 120 bytes in all: a body of 80 held mid-read leaves room for 40, not another 80.
    The refused request sends its headers only (a body the server never reads would reset the connection and
    could hide the 503); the waits on the budget are bounded by the 20 s alarm."""
    from reference.openai_batcher import Batcher

    handler = serve._Handler if kind == "wire" else openai_server._Handler
    monkeypatch.setattr(handler, "max_bodies", 120)
    monkeypatch.setattr(handler, "timeout", 15.0)  # the holder is dropped only when it hangs up
    monkeypatch.setattr(handler, "request_timeout", 15.0)
    server: Any = (
        serve._Server(("127.0.0.1", 0))
        if kind == "wire"
        else openai_server._Server(0, Batcher(model, slots=1))
    )
    path = "/rpc" if kind == "wire" else "/v1/completions"
    small = GOOD[path]
    assert len(small) <= 40
    for port in _run(server):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as holder:
            holder.sendall(post(path, b"", 80))  # headers and no body yet: the server holds 80 bytes for it
            while getattr(server, "body_budget", None) is None or server.body_budget.held != 80:
                time.sleep(0.01)
            refused = exchange(port, post(path, b"", 80))
            assert refused.split(b"\r\n", 1)[0].startswith(b"HTTP/1.0 503 "), refused[:200]
            assert b"busy: the bodies being read take 120 bytes in all" in refused, refused[:300]
            assert exchange(port, post(path, small)).startswith(b"HTTP/1.0 200"), (
                "a body within the rest is served"
            )
        while server.body_budget.held:  # the holder hung up: its read ends (408) and gives its 80 bytes back
            time.sleep(0.01)
        assert exchange(port, post(path, small + b" " * (80 - len(small)))).startswith(b"HTTP/1.0 200")


def burst(port: int, request: bytes, n: int, bound: float) -> tuple[int, dict[str, int]]:
    """n clients connect at once (non-blocking, one burst of SYNs), each sends `request` and reads to the end:
    (how many answered 200, the socket errors met by name and count)."""
    socks = []
    sel = selectors.DefaultSelector()
    for _ in range(n):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        socks.append(sock)
        sel.register(sock, selectors.EVENT_WRITE, b"")
    answers: list[bytes] = []
    failed: dict[str, int] = {}
    deadline = time.monotonic() + bound
    try:
        while len(answers) + sum(failed.values()) < n and time.monotonic() < deadline:
            for key, event in sel.select(0.2):
                client = key.fileobj
                assert isinstance(client, socket.socket)
                sock = client
                try:
                    if event & selectors.EVENT_WRITE:
                        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                        if err:
                            raise OSError(err, os.strerror(err))
                        sock.send(request)
                        sel.modify(sock, selectors.EVENT_READ, b"")
                    elif chunk := sock.recv(65536):
                        sel.modify(sock, selectors.EVENT_READ, key.data + chunk)
                    else:
                        answers.append(key.data)
                        sel.unregister(sock)
                except OSError as exc:
                    failed[exc.strerror or str(exc)] = failed.get(exc.strerror or str(exc), 0) + 1
                    sel.unregister(sock)
    finally:
        for sock in socks:
            sock.close()
        sel.close()
    return sum(a.startswith(b"HTTP/1.0 200") for a in answers), failed


@pytest.mark.parametrize("kind", ["wire", "oai"])
def test_200_concurrent_loopback_clients_are_all_answered(kind: str, request: pytest.FixtureRequest) -> None:
    """Issue #48: with socketserver's listen backlog of 5, a burst of 200 clients left ~40 % reset or unanswered
    (measured: 108 of 200 answered within 60 s on the wire server); the backlog is LISTEN_BACKLOG. Loopback, 200
    clients, one request each; the pass criterion is every answer a 200, the 15 s only bounds a failing run."""
    port = request.getfixturevalue(kind)
    one = post("/rpc", GOOD["/rpc"]) if kind == "wire" else b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    answered, failed = burst(port, one, 200, bound=15.0)
    assert (answered, failed) == (200, {}), f"{answered} of 200 answered 200; socket errors {failed}"
