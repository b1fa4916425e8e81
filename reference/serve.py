"""The reference engine served over the wire protocol (docs/engine-protocol.md), on stdio or HTTP.

    python -m reference.serve                 # JSON lines on stdin/stdout (falsify --engine exec:"python -m reference.serve")
    python -m reference.serve --http 8765     # POST /rpc on 127.0.0.1:8765 (falsify --engine http://127.0.0.1:8765)
    python -m reference.serve --openai --port 8080   # an OpenAI-compatible API (reference/openai_server.py)

It implements the protocol from the document, as an engine in another language would, and shares no code with
the harness's client (falsify/engines/wire): the same reference Session runs behind it, its model wrapped so each
forward is reported (`$/forward`) before it runs, its cancel token a `$/poll` to the harness, its sampler the
harness's (`$/sample`) when the request asks for it. Capabilities: generate, state, prefill; with protocol 1.1
also lanes and sample (reference/serve_lanes.py).

Exit codes: 0 after `exit` following `shutdown` (or stdin closed), 1 after `exit` without `shutdown`, 2 bad
arguments.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import IO, Any

import numpy as np

from reference.http_guard import LISTEN_BACKLOG, GuardedHandler

PROTOCOL_VERSION = "falsify-engine/1.2"
# The capabilities each version this server speaks carries (1.1 adds lanes and sample: reference/serve_lanes.py;
# 1.2 adds no capability, only the batched calls of BATCHED).
CAPABILITIES = {"falsify-engine/1": ["generate", "state", "prefill"]}
CAPABILITIES["falsify-engine/1.1"] = [*CAPABILITIES["falsify-engine/1"], "lanes", "sample"]
CAPABILITIES[PROTOCOL_VERSION] = CAPABILITIES["falsify-engine/1.1"]
BATCHED = ("sample_draws",)  # 1.2 only
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = (
    -32700,
    -32600,
    -32601,
    -32602,
    -32603,
)
UNSUPPORTED_PROTOCOL_VERSION, SERVER_NOT_INITIALIZED = -32001, -32002
INVALID_INPUT, UNKNOWN_HANDLE = -32010, -32011


class Refusal(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Link:
    """The way back to the harness while a request is served: notifications and requests of the engine's own,
    each message one line written to `out` (stdout, or the HTTP response being served)."""

    out: Any

    def send(self, message: dict[str, Any]) -> None:
        self.out.write(_dump(message))
        self.out.flush()

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"method": method, "params": params})

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


class _Reporting:
    """The model as the Session sees it: reports each forward to the harness, then runs it."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.config = model.config
        self.report: Callable[[int, list[int]], None] | None = None

    def new_state(self, pool: Any = None) -> Any:
        return self.model.new_state(pool)

    def new_pool(self, pages: int, page_size: int) -> Any:
        return self.model.new_pool(pages, page_size)

    def forward(self, tokens: Any, state: Any) -> np.ndarray:
        if self.report is not None:
            self.report(int(state.pos), [int(t) for t in np.asarray(tokens).reshape(-1)])
        return self.model.forward(tokens, state)


class _Poll:
    """The cancel token the Session polls: each poll asks the harness."""

    def __init__(self, link: Link, request: int) -> None:
        self.link, self.request, self.polls = link, request, 0

    def is_cancelled(self) -> bool:
        self.polls += 1
        return bool(self.link.request("$/poll", {"request": self.request})["cancelled"])


def _f32(array: np.ndarray) -> dict[str, Any]:
    a = np.ascontiguousarray(array, dtype="<f4")
    return {"dtype": "float32", "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode("ascii")}


def _need(params: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = params.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise Refusal(
            INVALID_PARAMS, f"params.{key}: expected {getattr(kind, '__name__', kind)}, got {value!r}"
        )
    return value


def _ids(params: dict[str, Any], key: str) -> list[int]:
    value = _need(params, key, list)
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise Refusal(INVALID_PARAMS, f"params.{key}: expected an array of integers")
    return value


class Engine:
    """The protocol's state: handles for models, sessions and states, and one method per request."""

    def __init__(self) -> None:
        self.initialized = False
        self.shut_down = False
        self.handles: dict[str, Any] = {}
        self._next = 0
        self.version = PROTOCOL_VERSION

    def _new(self, kind: str, obj: Any) -> str:
        self._next += 1
        handle = f"{kind}-{self._next}"
        self.handles[handle] = obj
        return handle

    def _get(self, params: dict[str, Any], key: str, kind: str) -> Any:
        handle = _need(params, key, str)
        if not handle.startswith(kind + "-") or handle not in self.handles:
            raise Refusal(UNKNOWN_HANDLE, f"params.{key}: no {kind} {handle!r}")
        return self.handles[handle]

    def serve(self, method: str, params: dict[str, Any], rid: int, link: Link) -> dict[str, Any]:
        if method == "initialize":
            version = _need(params, "protocolVersion", str)
            if version not in CAPABILITIES:
                raise Refusal(
                    UNSUPPORTED_PROTOCOL_VERSION,
                    f"this engine speaks {' and '.join(CAPABILITIES)}, not {version}",
                )
            self.initialized, self.version = True, version
            return {
                "protocolVersion": version,
                "engine": {"name": "reference", "version": "0.1.0"},
                "capabilities": CAPABILITIES[version],
            }
        if not self.initialized:
            raise Refusal(SERVER_NOT_INITIALIZED, f"{method} before initialize")
        if self.shut_down:
            raise Refusal(INVALID_REQUEST, f"{method} after shutdown")
        handler = getattr(self, "do_" + method, None) if method.isidentifier() else None
        if handler is None and method.isidentifier() and self.version != "falsify-engine/1":
            from reference.serve_lanes import Serving

            if method not in BATCHED or self.version == PROTOCOL_VERSION:
                handler = getattr(Serving(self, Refusal), "do_" + method, None)
        if handler is None:
            raise Refusal(METHOD_NOT_FOUND, f"no method {method!r}")
        try:
            return handler(params, rid, link)
        except ValueError as exc:  # the reference refuses bad values with ValueError
            raise Refusal(INVALID_INPUT, str(exc)) from None

    def do_shutdown(self, params: dict[str, Any], rid: int, link: Link) -> dict[str, Any]:
        self.shut_down = True
        return {}

    def do_load_model(self, params: dict[str, Any], rid: int, link: Link) -> dict[str, Any]:
        from reference.model import load_model
        from reference.tiny import tiny_model

        weights = _need(params, "weights", str)
        if weights not in ("f32", "q4_k"):
            raise Refusal(INVALID_PARAMS, f"params.weights: 'f32' or 'q4_k', got {weights!r}")
        path = params.get("path")
        model = load_model(tiny_model(seed=0) if path is None else path, weights=weights)
        c = model.config
        return {
            "model": self._new("model", model),
            "config": {
                "vocab_size": c.vocab_size,
                "max_position_embeddings": c.max_position_embeddings,
                "chunk_size": c.chunk_size,
            },
        }

    def do_new_session(self, params: dict[str, Any], rid: int, link: Link) -> dict[str, Any]:
        from reference.session import Session

        model = self._get(params, "model", "model")
        return {"session": self._new("session", Session(_Reporting(model)))}

    def do_release_session(self, params: dict[str, Any], rid: int, link: Link) -> dict[str, Any]:
        self._get(params, "session", "session").state.release()
        del self.handles[params["session"]]
        return {}

    def do_generate(self, params: dict[str, Any], rid: int, link: Link) -> dict[str, Any]:
        from reference.sampling import greedy

        session = self._get(params, "session", "session")
        prompt, stops = _ids(params, "prompt"), _ids(params, "stop_tokens")
        max_tokens = _need(params, "max_tokens", int)
        kind = params.get("sampler")
        if kind not in ("greedy", "harness"):
            raise Refusal(INVALID_PARAMS, f"params.sampler: 'greedy' or 'harness', got {kind!r}")

        def sample(logits: np.ndarray) -> int:
            return int(link.request("$/sample", {"request": rid, "logits": _f32(logits)})["token"])

        def report(start: int, tokens: list[int]) -> None:
            link.notify("$/forward", {"request": rid, "start": start, "tokens": tokens})

        session.model.report = report
        try:
            run = session.generate(
                prompt,
                max_tokens,
                cancel=_Poll(link, rid),
                stop_tokens=stops,
                sampler=greedy if kind == "greedy" else sample,
                on_token=lambda t: link.notify("$/token", {"request": rid, "token": int(t)}),
            )
        finally:
            session.model.report = None
        return {
            "tokens": list(run.tokens),
            "stop_reason": str(run.stop_reason),
            "claims": {
                "decode_forwards": run.decode_forwards,
                "prefill_forwards": run.prefill_forwards,
                "polls": run.polls,
                "reused": run.reused,
            },
        }

    def do_new_state(self, params: dict[str, Any], rid: int, link: Link) -> dict[str, Any]:
        state = self._get(params, "model", "model").new_state()
        return {"state": self._new("state", (params["model"], state)), "pos": state.pos}

    def do_copy_state(self, params: dict[str, Any], rid: int, link: Link) -> dict[str, Any]:
        model, state = self._get(params, "state", "state")
        copy = state.copy()
        return {"state": self._new("state", (model, copy)), "pos": copy.pos}

    def do_release_state(self, params: dict[str, Any], rid: int, link: Link) -> dict[str, Any]:
        self._get(params, "state", "state")[1].release()
        del self.handles[params["state"]]
        return {}

    def do_forward(self, params: dict[str, Any], rid: int, link: Link) -> dict[str, Any]:
        model_handle, state = self._get(params, "state", "state")
        tokens = _ids(params, "tokens")
        if not tokens:
            raise Refusal(INVALID_PARAMS, "params.tokens: at least one token")
        # the model checks and converts the ids, as in process: an id past int64 is its ValueError (INVALID_INPUT)
        logits = self.handles[model_handle].forward(tokens, state)
        return {"logits": _f32(logits), "pos": state.pos}

    def do_prefill_open(self, params: dict[str, Any], rid: int, link: Link) -> dict[str, Any]:
        from reference.prefill import KeptPrefix, Prefill

        model_handle, state = self._get(params, "state", "state")
        kept = []
        for i, item in enumerate(_need(params, "kept", list)):
            if not isinstance(item, dict):
                raise Refusal(INVALID_PARAMS, f"params.kept[{i}]: an object")
            kept.append(KeptPrefix(tuple(_ids(item, "tokens")), self._get(item, "state", "state")[1]))
        cap = params.get("chunk_cap")
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool)):
            raise Refusal(INVALID_PARAMS, "params.chunk_cap: an integer or null")
        wrapper = _Reporting(self.handles[model_handle])
        pf = Prefill.open(
            wrapper,
            state,
            _ids(params, "prompt"),
            chunk_cap=cap,
            kept=kept,
            marks=_ids(params, "marks"),
            starts=_ids(params, "starts"),
            keep_logits=bool(params.get("keep_logits")),
        )
        handle = params["state"] if pf.state is state else self._new("state", (model_handle, pf.state))
        prefill = self._new("prefill", (pf, wrapper, model_handle, [0]))
        return {"prefill": prefill, "state": handle, "pos": pf.pos, "done": pf.done}

    def do_prefill_step(self, params: dict[str, Any], rid: int, link: Link) -> dict[str, Any]:
        pf, wrapper, model_handle, seen = self._get(params, "prefill", "prefill")
        wrapper.report = lambda start, tokens: link.notify(
            "$/forward", {"request": rid, "start": start, "tokens": tokens}
        )
        try:
            done = pf.step()
        finally:
            wrapper.report = None
        kept = [
            {"tokens": list(k.tokens), "state": self._new("state", (model_handle, k.state))}
            for k in pf.kept[seen[0] :]
        ]
        seen[0] = len(pf.kept)
        chunk = pf.chunk_logits[-1] if pf.chunk_logits else None
        return {
            "done": done,
            "pos": pf.pos,
            "logits": _f32(pf.logits),
            "chunk_logits": None if chunk is None else _f32(chunk),
            "kept": kept,
        }

    def do_state_bytes(self, params: dict[str, Any], rid: int, link: Link) -> dict[str, Any]:
        state = self._get(params, "state", "state")[1]
        return {"bytes": base64.b64encode(state.to_bytes()).decode("ascii"), "pos": state.pos}

    def do_state_digest(self, params: dict[str, Any], rid: int, link: Link) -> dict[str, Any]:
        state = self._get(params, "state", "state")[1]
        return {"digest": hashlib.sha256(state.to_bytes()).hexdigest(), "pos": state.pos}


def _classify(line: bytes) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(message, error reply): a parsed message, or the error to send back for a line that is not one."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as exc:  # not UTF-8 or JSON, a 5,000-digit integer, deep nesting
        return None, {"id": None, "error": {"code": PARSE_ERROR, "message": f"not JSON: {exc}"}}
    if not isinstance(message, dict) or not (
        isinstance(message.get("method"), str)
        or ("id" in message and ("result" in message or "error" in message))
    ):
        return None, {
            "id": None,
            "error": {"code": INVALID_REQUEST, "message": "not a request, response or notification"},
        }
    return message, None


def _answer(engine: Engine, message: dict[str, Any], link: Link) -> dict[str, Any]:
    rid = message["id"]
    params = message.get("params", {})
    try:
        if not isinstance(params, dict):
            raise Refusal(INVALID_PARAMS, "params must be an object")
        return {"id": rid, "result": engine.serve(message["method"], params, rid, link)}
    except Refusal as refusal:
        return {"id": rid, "error": {"code": refusal.code, "message": str(refusal)}}
    except Exception as exc:  # an engine bug: reported to the harness, never a dead engine
        return {"id": rid, "error": {"code": INTERNAL_ERROR, "message": f"{type(exc).__name__}: {exc}"}}


def _dump(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n"


# -- stdio ---------------------------------------------------------------------------------------------------------
class StdioLink(Link):
    def __init__(self, inp: IO[bytes], out: IO[bytes]) -> None:
        self.inp, self.out = inp, out
        self._next = 0

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        mine = self._next
        self.send({"id": mine, "method": method, "params": params})
        while True:  # the harness sends nothing but replies (and notifications) while a request is in flight
            line = self.inp.readline()
            if not line:
                raise SystemExit(1)
            message, error = _classify(line)
            if message is None:
                assert error is not None
                self.send(error)
                continue
            if "method" in message:
                if "id" in message:
                    self.send({"id": message["id"], "error": {"code": INVALID_REQUEST, "message": "busy"}})
                continue  # $/cancelRequest: our requests are answered promptly; nothing to cancel
            if message.get("id") == mine:
                if "error" in message:
                    raise RuntimeError(f"the harness refused {method}: {message['error'].get('message')}")
                return message["result"]


def serve_stdio(inp: IO[bytes], out: IO[bytes]) -> int:
    engine, link = Engine(), StdioLink(inp, out)
    for line in iter(inp.readline, b""):
        message, error = _classify(line)
        if message is None:
            assert error is not None
            link.send(error)
            continue
        if "method" not in message:
            continue  # a stray reply: nothing of ours is waiting for it
        if "id" not in message:
            if message["method"] == "exit":
                return 0 if engine.shut_down else 1
            continue
        link.send(_answer(engine, message, link))
    return 0


# -- HTTP ----------------------------------------------------------------------------------------------------------
class HttpLink(Link):
    """Writes to the response stream of the request being served; replies to our requests arrive as POSTs."""

    def __init__(self, server: _Server, out: Any) -> None:  # the handler's wfile
        self.server, self.out = server, out

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        mine, slot = self.server.open_slot()
        self.send({"id": mine, "method": method, "params": params})
        if not slot[0].wait(300):
            raise RuntimeError(f"no reply to {method} from the harness in 300 s")
        reply = slot[1]
        if "error" in reply:
            raise RuntimeError(f"the harness refused {method}: {reply['error'].get('message')}")
        return reply["result"]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _Handler)
        self.engine = Engine()
        self.busy = threading.Lock()  # one harness request at a time, as on stdio
        self.slots: dict[int, list[Any]] = {}
        self._next = 0
        self._lock = threading.Lock()
        self.exit_code = 0

    def open_slot(self) -> tuple[int, list[Any]]:
        with self._lock:
            self._next += 1
            slot: list[Any] = [threading.Event(), None]
            self.slots[self._next] = slot
            return self._next, slot


class _Handler(GuardedHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # stdout/stderr stay quiet; the harness reads nothing from them over HTTP

    def do_POST(self) -> None:
        if self.path != "/rpc":
            self.send_error(404, "POST /rpc")
            return
        message, error = _classify(self.body())
        if (
            message is None
        ):  # the parse error a stdio engine would send back, as the 400's reason (ASCII JSON)
            self.send_error(400, json.dumps(error))
            return
        if "id" not in message or "method" not in message:
            self.send_response(204)
            self.end_headers()
            self._not_a_request(message)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()
        self.wfile.flush()
        link = HttpLink(self.server, self.wfile)
        with self.server.busy:
            link.send(_answer(self.server.engine, message, link))

    def _not_a_request(self, message: dict[str, Any]) -> None:
        if "method" not in message:  # a reply to one of our requests
            slot = self.server.slots.pop(message.get("id"), None)  # type: ignore[arg-type]
            if slot is not None:
                slot[1] = message
                slot[0].set()
        elif message["method"] == "exit":
            self.server.exit_code = 0 if self.server.engine.shut_down else 1
            threading.Thread(target=self.server.shutdown, daemon=True).start()


def serve_http(port: int, host: str = "127.0.0.1") -> int:
    server = _Server((host, port))
    print(
        f"reference.serve: listening on http://{host}:{server.server_address[1]}", file=sys.stderr, flush=True
    )
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return server.exit_code


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["--openai"]:  # the OpenAI-compatible API (reference/openai_server.py), its own options
        from reference.openai_server import main as openai_main

        return openai_main(given[1:])
    parser = argparse.ArgumentParser(
        prog="python -m reference.serve",
        description="the reference engine over the falsify engine protocol (docs/engine-protocol.md)",
        epilog="exit: 0 after shutdown + exit (or stdin closed), 1 after exit without shutdown, 2 bad arguments",
    )
    parser.add_argument(
        "--http", type=int, metavar="PORT", help="serve HTTP on 127.0.0.1:PORT (0: any free port)"
    )
    args = parser.parse_args(given)
    if args.http is not None:
        return serve_http(args.http)
    return serve_stdio(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    sys.exit(main())
