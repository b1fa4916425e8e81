"""reference/openai_server.py and openai_batcher.py: the OpenAI-compatible API over the lane host, in process.

The server runs in a thread of this process on a free loopback port (shut down by the fixture); requests are
plain http.client calls, so these tests read what any client reads.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from reference.openai_batcher import EOS, Detokenizer, encode, piece
from reference.openai_server import Reply, held_back, main
from reference.serve import main as serve_main


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    from reference.openai_server import serve

    box: list[Any] = []
    ready = threading.Event()

    def announce(server: Any) -> None:
        box.append(server)
        ready.set()

    thread = threading.Thread(target=serve, args=(0, 2), kwargs={"announce": announce}, daemon=True)
    thread.start()
    assert ready.wait(120), "the server did not start"
    yield box[0]
    box[0].shutdown()


def post(server: Any, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=60)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        if response.getheader("Content-Type") == "text/event-stream":
            events = [line[6:] for line in data.decode().split("\n") if line.startswith("data: ")]
            return response.status, [e if e == "[DONE]" else json.loads(e) for e in events]
        return response.status, json.loads(data)
    finally:
        conn.close()


def get(server: Any, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=60)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


PROMPT = [300, 301, 302, 303, 304, 305]


# -- text ------------------------------------------------------------------------------------------------------------
def test_pieces_follow_the_gguf_vocabulary() -> None:
    assert [piece(t) for t in (0, 1, 2)] == [b"", b"", b""]
    assert piece(3) == b"\x00" and piece(3 + 0x41) == b"A" and piece(258) == b"\xff"
    assert piece(259) == b" t259" and piece(511) == b" t511"
    assert encode("Aé") == [3 + 0x41, 3 + 0xC3, 3 + 0xA9]


def test_the_detokenizer_holds_a_split_utf8_sequence_until_it_completes() -> None:
    d = Detokenizer()
    assert d.add(3 + 0xC3) == "" and d.add(3 + 0xA9) == "é"
    assert d.add(3 + 0xC3) == "" and d.add(300) == "\ufffd t300"
    assert d.add(3 + 0xE2) == "" and d.flush() == "\ufffd"


def test_held_back_is_the_longest_end_that_starts_a_stop_string() -> None:
    assert held_back("abc t3", [" t30"]) == 3
    assert held_back("abc", ["cd", "bcx"]) == 2
    assert held_back("abc", ["x"]) == 0
    assert held_back("abc", []) == 0


def tok(i: int) -> Any:
    from reference.openai_batcher import Token

    return Token(i, -1.0, ())


def test_a_reply_cuts_at_the_stop_string_and_sends_held_tokens_in_order() -> None:
    reply = Reply([" t301 t302#"])
    assert reply.add(tok(300)) == [(tok(300), " t300")]
    assert reply.add(tok(301)) == []  # " t301" may start the stop string: held
    assert reply.add(tok(302)) == []
    assert reply.add(tok(303)) == [(tok(301), " t301"), (tok(302), " t302"), (tok(303), " t303")]
    assert not reply.stopped and reply.sent_text == " t300 t301 t302 t303"
    reply = Reply(["t302"])
    assert reply.add(tok(301)) == [(tok(301), " t301")]
    assert reply.add(tok(302)) == [(tok(302), " ")]  # the token that holds the stop sends what precedes it
    assert reply.stopped and reply.sent_text == " t301 "
    reply = Reply([" t302"])
    reply.add(tok(301))
    assert reply.add(tok(302)) == [] and reply.stopped and [t.id for t, _ in reply.sent] == [301]


def test_the_end_flushes_held_text() -> None:
    reply = Reply([" t3019"])
    assert reply.add(tok(301)) == []
    assert reply.add(None) == [(tok(301), " t301")]


# -- the API ---------------------------------------------------------------------------------------------------------
def test_models_health_metrics_and_unknown_paths(server: Any) -> None:
    status, body = get(server, "/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "reference-tiny"
    assert get(server, "/health")[0] == 200
    status, body = get(server, "/metrics")
    assert status == 200 and b"reference:tokens_predicted_total " in body
    assert get(server, "/nope")[0] == 404
    assert post(server, "/v1/nope", {})[0] == 404


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"prompt": [], "max_tokens": 2}, "prompt: expected a non-empty string"),
        ({"prompt": [1, 512]}, "token id 512 is outside the vocabulary [0, 512)"),
        ({"prompt": [1], "max_tokens": 0}, "max_tokens: expected an integer >= 1, got 0"),
        ({"prompt": [1], "temperature": -1}, "temperature: expected a number >= 0, got -1"),
        ({"prompt": [1], "stop": [""]}, "stop: expected a non-empty string or a list of them"),
        ({"prompt": [1], "max_tokens": 20000}, "exceeds the context of 16384"),
    ],
)
def test_a_bad_request_is_a_400_naming_its_field(server: Any, body: dict[str, Any], message: str) -> None:
    status, reply = post(server, "/v1/completions", body)
    assert status == 400 and message in reply["error"]["message"], reply


def test_a_completion_gives_text_ids_logprobs_and_usage(server: Any) -> None:
    from reference.model import load_model
    from reference.session import Session
    from reference.tiny import tiny_model

    status, reply = post(
        server,
        "/v1/completions",
        {"prompt": PROMPT, "max_tokens": 6, "logprobs": 2, "return_token_ids": True},
    )
    assert status == 200
    choice = reply["choices"][0]
    expected = Session(load_model(tiny_model(seed=0), weights="f32")).generate(PROMPT, 6).tokens
    assert choice["token_ids"] == list(expected)  # the lane host's tokens are the in-process session's
    assert choice["finish_reason"] == "length" and reply["usage"]["completion_tokens"] == 6
    d = Detokenizer()
    assert choice["text"] == "".join(d.add(t) for t in expected) + d.flush()
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 6
    assert all(x <= 0 for x in lp["token_logprobs"]) and lp["text_offset"][0] == 0


def test_stream_and_whole_agree_on_both_endpoints(server: Any) -> None:
    for path, body in (
        ("/v1/completions", {"prompt": PROMPT, "logprobs": 1}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "logprobs": True}),
    ):
        body = body | {"max_tokens": 8, "return_token_ids": True}
        _, whole = post(server, path, body)
        _, events = post(server, path, body | {"stream": True})
        assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "length"
        chunks = [e["choices"][0] for e in events[:-1]]
        ids = [t for c in chunks for t in c.get("token_ids", [])]
        assert ids == whole["choices"][0]["token_ids"]
        if path.endswith("chat/completions"):
            text = "".join(c["delta"].get("content", "") for c in chunks)
            assert chunks[0]["delta"] == {"role": "assistant"}
            assert text == whole["choices"][0]["message"]["content"]
        else:
            assert "".join(c["text"] for c in chunks) == whole["choices"][0]["text"]


def test_seeded_sampling_repeats_and_the_seed_matters(server: Any) -> None:
    def run(seed: int) -> list[int]:
        body = {
            "prompt": PROMPT,
            "max_tokens": 12,
            "temperature": 1.0,
            "seed": seed,
            "return_token_ids": True,
        }
        return list(post(server, "/v1/completions", body)[1]["choices"][0]["token_ids"])

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_end_of_generation_stops_the_reply() -> None:
    from reference.openai_batcher import Batcher, Job

    batcher = Batcher.__new__(Batcher)  # _sample alone: no scheduler thread
    batcher.tokens_predicted, batcher._rows, batcher.vocab = 0, [], 512
    job = Job(prompt=[1], max_tokens=4)
    job.sampler = lambda row: EOS
    assert batcher._sample(job, np.zeros(512, np.float32)) == EOS
    assert job.events.get_nowait().id == EOS and job.events.get_nowait() == "stop" and job.cancel.peek()
    job = Job(prompt=[1], max_tokens=1)  # EOS as the last allowed token: the run ends by length anyway
    job.sampler = lambda row: EOS
    batcher._sample(job, np.zeros(512, np.float32))
    assert job.events.get_nowait().id == EOS and job.events.empty() and not job.cancel.peek()


def open_and_hang_up(server: Any, body: dict[str, Any], wait: float) -> None:
    sock = socket.create_connection(("127.0.0.1", server.server_address[1]))
    data = json.dumps(body).encode()
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    time.sleep(wait)
    sock.close()


def settle(server: Any) -> int:
    batcher = server.batcher
    for _ in range(400):
        if batcher.busy_slots() == 0:
            break
        time.sleep(0.01)
    assert batcher.busy_slots() == 0, "a request still holds its slot"
    return int(batcher.tokens_predicted)


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_hangs_up_while_decoding_stops_its_request(server: Any, stream: bool) -> None:
    before = settle(server)
    open_and_hang_up(server, {"prompt": PROMPT, "max_tokens": 2000, "stream": stream}, 0.3)
    after = settle(server)
    # 0.3 s at well under a second per token is far fewer than 2000 tokens: the request was stopped
    assert 1 <= after - before < 1500, after - before


def test_a_client_that_hangs_up_during_prefill_stops_its_prompt(server: Any) -> None:
    batcher = server.batcher
    settle(server)
    prompt_before = batcher.prompt_tokens
    open_and_hang_up(server, {"prompt": [300 + i % 200 for i in range(8000)], "max_tokens": 4}, 0.3)
    after = settle(server)
    assert batcher.prompt_tokens - prompt_before < 8000  # the prompt's prefill stopped part way
    assert after == settle(server)


def test_main_refuses_bad_slots_and_serve_dispatches_openai(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--port", "0", "--slots", "0"])
    assert exc.value.code == 2 and "--slots must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        serve_main(["--openai", "--port", "x"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("usage: python -m reference.serve --openai")
    assert "argument --port: invalid int value: 'x'" in err


# -- the harness's client (falsify/engines/adapters/openai.py) against it -------------------------------------------
def test_the_openai_engine_reads_what_the_server_sends(server: Any) -> None:
    from falsify.engines.adapters.openai import OpenAIEngine

    engine = OpenAIEngine(f"openai+http://127.0.0.1:{server.server_address[1]}")
    assert engine.model == "reference-tiny" and engine.supports("openai") is None
    assert engine.body([3, 4], 2, stream=True)["stream_options"] == {"include_usage": True}
    assert "stream_options" not in engine.body([3, 4], 2)
    whole = engine.complete(PROMPT, 5, logprobs=1)
    streamed = engine.complete(PROMPT, 5, logprobs=1, stream=True)
    assert whole.token_ids == streamed.token_ids and len(whole.token_ids or ()) == 5
    assert engine.text_prompts is None  # the reference takes token-id prompts, as the OpenAI API does
    assert whole.logprobs == streamed.logprobs and whole.text == streamed.text
    assert (whole.finish_reason, whole.completion_tokens, whole.chunks) == ("length", 5, 0)
    assert (
        len(streamed.token_times) == 5 and streamed.chunks >= 6
    )  # five tokens, the finish chunk (a UTF-8 tail)
    stream = engine.open_stream(PROMPT, 3)
    assert [stream.next_token() for _ in range(4)] == [True, True, True, False]
    stream.close()
    assert (engine.self_report() or {}).get("tokens_predicted_total", 0) >= 13
    parallel, detail = engine.concurrency()
    assert parallel and "parallel slots" in detail  # the fixture's server has 2 slots
    assert engine.supports("parallel_slots") is None and engine.supports("one_slot") == f"measured: {detail}"
    assert "not 'lanes'" in str(engine.supports("lanes"))


def test_a_server_that_refuses_token_ids_gets_text_prompts() -> None:
    """llama_cpp.server 0.3.36 refuses a token-array prompt: the engine then sends one ASCII letter per id (checked
    against that server in tests/test_real_servers.py)."""
    from falsify.engines.adapters.openai import OpenAIEngine, text_prompt

    assert text_prompt([0, 1, 25, 26, 259, 511]) == "abzazr"
    engine = object.__new__(OpenAIEngine)
    engine.model, engine.text_prompts = "m", "refused"
    assert engine.body([0, 1, 25], 4)["prompt"] == "abz"
    assert engine.body("as it is", 4)["prompt"] == "as it is"
    engine.text_prompts = None
    assert engine.body([0, 1, 25], 4)["prompt"] == [0, 1, 25]


@pytest.mark.parametrize(
    "spec",
    ["openai+http://10.0.0.1:80", "openai+http://127.0.0.1", "openai+https://127.0.0.1:1", "openai+exec:"],
)
def test_the_openai_engine_refuses_anything_but_the_loopback(spec: str) -> None:
    from falsify.engines.loading import EngineError, load_engine

    with pytest.raises(EngineError, match=r"loopback only|names no command"):
        load_engine(spec)


def test_the_engine_learns_a_smaller_vocabulary_and_the_pieces_of_a_reply(server: Any) -> None:
    """Issue #47: the pack's prompts and stop strings come from the server, not the tiny GGUF. The reference with
    its own 512 ids keeps [259, 512) (one request: id 511 is taken); with --vocab 300 the engine finds 300 by
    halving, draws prompts from [150, 300), and measures the topology (a prompt id of 511 was refused with 400,
    and the gate exited 2 before any prediction ran). A reply's pieces are its tokens' text."""
    from falsify.engines.adapters.openai import OpenAIEngine
    from reference.openai_server import serve

    full = OpenAIEngine(f"openai+http://127.0.0.1:{server.server_address[1]}")
    model = full.served()
    assert (model.low, model.high, model.vocab, model.context) == (259, 512, None, None), model
    reply = full.complete(full.prompt(4000, 12), 12, logprobs=1)
    pieces = full.pieces(reply)
    assert pieces is not None and "".join(pieces) == reply.text and len(pieces) == len(reply.logprobs or ())

    box: list[Any] = []
    ready = threading.Event()

    def announce(small: Any) -> None:
        box.append(small)
        ready.set()

    thread = threading.Thread(
        target=serve, args=(0, 2), kwargs={"announce": announce, "vocab": 300}, daemon=True
    )
    thread.start()
    assert ready.wait(120), "the server did not start"
    try:
        engine = OpenAIEngine(f"openai+http://127.0.0.1:{box[0].server_address[1]}")
        model = engine.served()
        assert (model.low, model.high, model.vocab) == (150, 300, 300), model
        assert "a vocabulary of 300" in model.detail, model.detail
        ids = engine.prompt(7, 64)
        assert all(150 <= t < 300 for t in ids) and engine.prompt(7, 64) == ids
        reply = engine.complete(ids, 24, logprobs=1)
        assert all(t < 300 for t in reply.token_ids or ()), reply.token_ids  # replies never reach past it
        assert engine.supports("parallel_slots") is None, engine.concurrency()
    finally:
        box[0].shutdown()


def test_the_vocabulary_option_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("258", "513"):
        with pytest.raises(SystemExit) as exc:
            main(["--port", "0", "--vocab", bad])
        assert exc.value.code == 2 and "--vocab must hold the byte tokens" in capsys.readouterr().err
