"""Protocol 1.1's capabilities `lanes` and `sample` in the reference server (docs/engine-protocol.md §4.14-4.15).

reference.serve.Engine hands these requests here. A lane host is the reference LaneHost over a model wrapper that
reports each stream's forward (`$/forward` with `stream`) before running it; each stream's cancel token is a
`$/poll` naming the handle the harness gave at `lane_submit`; each stream's sampler is greedy, reporting its token
(`$/token` with `stream`). The sampler requests run reference.sampling's Sampler and greedy on the logits and
uniforms the harness sends.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np

from reference.lanes import LaneHost, LaneRefused, StreamError
from reference.sampling import Sampler, greedy

INVALID_PARAMS, INVALID_INPUT, LANE_REFUSED = -32602, -32010, -32013
MAX_DRAWS = 1 << 16  # 1.2: the most draws one sample_draws asks for
NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _Context:
    """The request being served (its id and the way back to the harness), while a lane_round runs."""

    def __init__(self) -> None:
        self.link: Any = None
        self.rid = 0


class _LaneModel:
    """The model as the lane host sees it: reports each forward with its stream, then runs it."""

    def __init__(self, model: Any, ctx: _Context) -> None:
        self.model, self.ctx, self.config = model, ctx, model.config
        self.streams: dict[int, int] = {}  # id(state) -> stream
        self.last_state: Any = None

    def new_pool(self, pages: int, page_size: int) -> Any:
        return self.model.new_pool(pages, page_size)

    def new_state(self, pool: Any = None) -> Any:
        self.last_state = self.model.new_state(pool)
        return self.last_state

    def forward(self, tokens: Any, state: Any) -> np.ndarray:
        ids = [int(t) for t in np.asarray(tokens).reshape(-1)]
        params = {
            "request": self.ctx.rid,
            "start": int(state.pos),
            "tokens": ids,
            "stream": self.streams[id(state)],
        }
        self.ctx.link.notify("$/forward", params)
        return self.model.forward(tokens, state)


class _LanePoll:
    """A stream's cancel token: each poll asks the harness about the token with this handle."""

    def __init__(self, ctx: _Context, handle: int) -> None:
        self.ctx, self.handle = ctx, handle

    def is_cancelled(self) -> bool:
        reply = self.ctx.link.request("$/poll", {"request": self.ctx.rid, "cancel": self.handle})
        return bool(reply["cancelled"])


class _Host:
    def __init__(self, host: LaneHost, model: _LaneModel, ctx: _Context) -> None:
        self.host, self.model, self.ctx = host, model, ctx


class _Refusals:
    """The server's Refusal class (reference.serve's, which is `__main__`'s under `python -m reference.serve`)."""

    cls: Any = None


def _refuse(code: int, message: str) -> Exception:
    return _Refusals.cls(code, message)


def _int(params: dict[str, Any], key: str, nullable: bool = False) -> Any:
    value = params.get(key)
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _refuse(
            INVALID_PARAMS,
            f"params.{key}: expected an integer{' or null' if nullable else ''}, got {value!r}",
        )
    return value


def _array(params: dict[str, Any], key: str, dtype: str) -> np.ndarray:
    obj, name = params.get(key), {"<f4": "float32", "<f8": "float64"}[dtype]
    if not isinstance(obj, dict) or obj.get("dtype") != name:
        raise _refuse(INVALID_PARAMS, f"params.{key}: expected a {name} array object")
    try:
        raw = base64.b64decode(obj["data"], validate=True)
        shape = tuple(int(n) for n in obj["shape"])
    except (KeyError, TypeError, ValueError, binascii.Error):
        raise _refuse(INVALID_PARAMS, f"params.{key}: bad data or shape") from None
    size = np.dtype(dtype).itemsize
    if len(raw) != size * int(np.prod(shape, dtype=np.int64)):
        raise _refuse(INVALID_PARAMS, f"params.{key}: {len(raw)} bytes for shape {list(shape)}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _number(params: dict[str, Any], key: str) -> Any:
    value = params.get(key)
    return NON_FINITE.get(value, value) if isinstance(value, str) else value


class Serving:
    """The 1.1 requests, on the handles of `engine` (a reference.serve.Engine)."""

    def __init__(self, engine: Any, refusal: type[Exception]) -> None:
        self.engine = engine
        _Refusals.cls = refusal

    def host(self, params: dict[str, Any]) -> _Host:
        return self.engine._get(params, "host", "host")

    # -- lanes -------------------------------------------------------------------------------------------------
    def do_lane_host(self, params: dict[str, Any], rid: int, link: Any) -> dict[str, Any]:
        model = self.engine._get(params, "model", "model")
        kw = {k: _int(params, k, nullable=True) for k in ("chunk_cap", "pages", "page_size", "max_streams")}
        ctx = _Context()
        wrapper = _LaneModel(model, ctx)
        host = LaneHost(wrapper, **{k: v for k, v in kw.items() if v is not None})
        return {"host": self.engine._new("host", _Host(host, wrapper, ctx))}

    def do_lane_submit(self, params: dict[str, Any], rid: int, link: Any) -> dict[str, Any]:
        h = self.host(params)
        prompt = self.engine_ids(params, "prompt")
        max_tokens = _int(params, "max_tokens")
        handle = _int(params, "cancel", nullable=True)
        holder: list[int] = []

        def sample(logits: np.ndarray) -> int:
            token = greedy(logits)
            h.ctx.link.notify("$/token", {"request": h.ctx.rid, "token": token, "stream": holder[0]})
            return token

        cancel = None if handle is None else _LanePoll(h.ctx, handle)
        try:
            sid = h.host.submit(prompt, max_tokens, cancel=cancel, sample=sample)
        except LaneRefused as exc:
            raise _refuse(LANE_REFUSED, str(exc)) from None
        holder.append(sid)
        h.model.streams[id(h.model.last_state)] = sid
        return {"stream": sid}

    def engine_ids(self, params: dict[str, Any], key: str) -> list[int]:
        value = params.get(key)
        if not isinstance(value, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in value
        ):
            raise _refuse(INVALID_PARAMS, f"params.{key}: expected an array of integers")
        return value

    def do_lane_round(self, params: dict[str, Any], rid: int, link: Any) -> dict[str, Any]:
        h = self.host(params)
        h.ctx.link, h.ctx.rid = link, rid
        try:
            report = h.host.round()
        finally:
            h.ctx.link = None
        return {
            "round": report.round,
            "decoded": list(report.decoded),
            "prefilled": None if report.prefilled is None else list(report.prefilled),
            "emitted": list(report.emitted),
            "finished": list(report.finished),
        }

    def _on_stream(self, params: dict[str, Any], action: str) -> dict[str, Any]:
        h = self.host(params)
        try:
            getattr(h.host, action)(_int(params, "stream"))
        except StreamError as exc:
            raise ValueError(str(exc)) from None
        return {}

    def do_lane_cancel(self, params: dict[str, Any], rid: int, link: Any) -> dict[str, Any]:
        return self._on_stream(params, "cancel")

    def do_lane_resume(self, params: dict[str, Any], rid: int, link: Any) -> dict[str, Any]:
        return self._on_stream(params, "resume")

    def do_lane_leave(self, params: dict[str, Any], rid: int, link: Any) -> dict[str, Any]:
        return self._on_stream(params, "leave")

    def do_lane_status(self, params: dict[str, Any], rid: int, link: Any) -> dict[str, Any]:
        host = self.host(params).host
        free, used, total = host.pool()
        streams = []
        for sid in host.streams():
            s = host.stats(sid)
            streams.append(
                {
                    "stream": sid,
                    "phase": str(s.phase),
                    "pos": s.pos,
                    "emitted": s.emitted,
                    "pages": s.pages,
                }
            )
        return {"busy": host.busy(), "pool": {"free": free, "used": used, "total": total}, "streams": streams}

    def do_lane_digest(self, params: dict[str, Any], rid: int, link: Any) -> dict[str, Any]:
        host = self.host(params).host
        try:
            return {"digest": host.state_digest(_int(params, "stream"))}
        except StreamError as exc:
            raise ValueError(str(exc)) from None

    def do_release_lane_host(self, params: dict[str, Any], rid: int, link: Any) -> dict[str, Any]:
        host = self.host(params).host
        for sid in host.streams():
            host.leave(sid)
        del self.engine.handles[params["host"]]
        return {}

    # -- sample ------------------------------------------------------------------------------------------------
    def do_new_sampler(self, params: dict[str, Any], rid: int, link: Any) -> dict[str, Any]:
        seed = _int(params, "seed")
        sampler = Sampler(_number(params, "temperature"), params.get("top_k"), seed, _number(params, "top_p"))
        return {"sampler": self.engine._new("sampler", sampler)}

    def do_sample_pick(self, params: dict[str, Any], rid: int, link: Any) -> dict[str, Any]:
        sampler = self.engine._get(params, "sampler", "sampler")
        u = _array(params, "u", "<f8").reshape(-1)
        return {"tokens": [int(t) for t in sampler.pick(_array(params, "logits", "<f4"), u)]}

    def do_sample_draw(self, params: dict[str, Any], rid: int, link: Any) -> dict[str, Any]:
        sampler = self.engine._get(params, "sampler", "sampler")
        return {"token": int(sampler(_array(params, "logits", "<f4")))}

    def do_sample_draws(self, params: dict[str, Any], rid: int, link: Any) -> dict[str, Any]:
        """1.2: `count` successive draws on one row, each what one sample_draw answers."""
        sampler = self.engine._get(params, "sampler", "sampler")
        logits = _array(params, "logits", "<f4")
        count = _int(params, "count")
        if not 1 <= count <= MAX_DRAWS:  # the schema's bounds (sample_draws.params.schema.json)
            raise _refuse(INVALID_PARAMS, f"params.count: {count} is not in [1, {MAX_DRAWS}]")
        return {"tokens": [int(sampler(logits)) for _ in range(count)]}

    def do_greedy_pick(self, params: dict[str, Any], rid: int, link: Any) -> dict[str, Any]:
        return {"token": greedy(_array(params, "logits", "<f4"))}
