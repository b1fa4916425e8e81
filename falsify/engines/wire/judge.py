"""The judge of one `generate` over the wire: it counts the events the engine sends during the call (`$/poll`,
`$/forward`, `$/sample`, `$/token`) as the harness sees them, answers the engine's requests from the harness's own
cancel token and sampler, and ends the connection with a ProtocolViolation on an event stream that cannot be true
(a token with no forward reported before it, a forward that skips positions or feeds other tokens than the prompt
or the previous token, a result contradicting the events). The `Run` it builds is what the falsifiers judge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np

from falsify.engines.wire import errors
from falsify.engines.wire.connection import Connection, EngineRefused
from falsify.engines.wire.events import EventState, WireRun, checked_ids, checked_logits
from falsify.engines.wire.messages import ErrorCode


class Judge:
    """Counts one generate's events and checks that they can be true."""

    def __init__(
        self,
        session: Any,  # the WireSession (client.py) the generate runs in
        prompt: list[int],
        max_tokens: int,
        stops: frozenset[int],
        cancel: Any,
        sampler: Callable[[np.ndarray], int] | None,
        on_token: Callable[[int], object] | None,
    ) -> None:
        self.session, self.prompt, self.max_tokens, self.stops = session, prompt, max_tokens, stops
        self.cancel, self.sampler, self.on_token = cancel, sampler, on_token
        self.tokens: list[int] = []
        self.prefill_forwards = 0
        self.decode_forwards = 0
        self.positions: list[int] = []
        self.first_start: int | None = None
        self.unused = 0  # forwards behind the newest logits while no token has come from them
        self.wasted = 0
        self.fed_since_token = False
        self.sampled: int | None = None
        self.request_id: int | None = None

    def violation(self, text: str) -> NoReturn:
        conn: Connection = self.session.engine.connection()
        conn.fail(errors.ProtocolViolation(f"engine {self.session.engine.spec}: {text}"))

    def on_engine(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        if self.request_id is None:
            self.request_id = params["request"]
        elif params["request"] != self.request_id:
            self.violation(f"{method} names request {params['request']}, not the generate in flight")
        if method == "$/poll":
            return {"cancelled": bool(self.cancel.is_cancelled())}
        if method == "$/forward":
            self.forward(params["start"], params["tokens"])
            return None
        if method == "$/sample":
            if self.sampler is None:
                raise EngineRefused(
                    ErrorCode.INVALID_REQUEST, "$/sample: this generate asked for sampler greedy"
                )
            vocab = self.session.model.config.vocab_size
            logits = checked_logits(self.session.engine, params["logits"], "$/sample logits", (vocab,))
            self.sampled = int(self.sampler(logits))
            return {"token": self.sampled}
        self.token(params["token"])  # $/token
        return None

    def forward(self, start: int, fed: list[int]) -> None:
        checked_ids(self.session.engine, fed, self.session.model.config.vocab_size, "$/forward params.tokens")
        history = self.session.history
        if start > len(history):
            self.violation(
                f"$/forward at position {start}, but the forwards reported so far brought the state to "
                f"{len(history)}: {start - len(history)} token(s) were fed with no $/forward"
            )
        if not self.tokens:
            expected = self.prompt[start : start + len(fed)]
            if fed != expected:
                self.violation(
                    f"prefill $/forward at {start} fed {fed[:8]}..., the prompt has {expected[:8]}... there"
                )
            self.prefill_forwards += 1
            if self.first_start is None:
                self.first_start = start
            self.unused += 1
        else:
            if fed != [self.tokens[-1]] or start != len(history):
                self.violation(
                    f"decode $/forward at {start} fed {fed[:8]}; expected the previous token [{self.tokens[-1]}] "
                    f"at {len(history)}"
                )
            self.decode_forwards += 1
            self.positions.append(start)
            self.wasted += self.unused
            self.unused = 1
        del history[start:]
        history.extend(fed)
        self.fed_since_token = True
        # replayed through the falsifier's model object, so a harness proxy counts it (runs nothing)
        self.session.model.forward(np.asarray(fed, dtype=np.int64), EventState(start, self.session.handle))

    def token(self, token: int) -> None:
        checked_ids(
            self.session.engine, [token], self.session.model.config.vocab_size, "$/token params.token"
        )
        if not self.fed_since_token:
            holds_prompt = not self.tokens and self.session.history == self.prompt
            if not holds_prompt:
                self.violation(
                    f"$/token {token} (token {len(self.tokens)}) with no $/forward reported since the last"
                )
        if self.sampler is not None and self.sampled is None:
            self.violation(
                f"$/token {token} (token {len(self.tokens)}) without first asking the harness's sampler "
                '($/sample) [rule: with sampler "harness", each token is the one $/sample answered]'
            )
        if self.sampler is not None and self.sampled != token:
            self.violation(f"$/token {token}, but the harness's sampler ($/sample) answered {self.sampled}")
        self.sampled = None
        self.tokens.append(token)
        self.unused = 0
        self.fed_since_token = False
        if self.on_token is not None:
            self.on_token(token)

    def finish(self, result: dict[str, Any], polls: int) -> WireRun:
        vocab = self.session.model.config.vocab_size
        checked_ids(self.session.engine, result["tokens"], vocab, "generate result tokens")
        if list(result["tokens"]) != self.tokens:
            self.violation(
                f"generate returned tokens {result['tokens'][:8]}..., $/token reported {self.tokens[:8]}..."
            )
        if self.tokens and self.tokens[-1] in self.stops:
            stop = "stop_token"
        elif len(self.tokens) >= self.max_tokens:
            stop = "max_tokens"
        else:
            stop = "cancelled"
        if result["stop_reason"] != stop:
            self.violation(f"generate says it stopped for {result['stop_reason']}; its events say {stop}")
        reused = len(self.prompt) if self.tokens and self.prefill_forwards == 0 else self.first_start or 0
        return WireRun(
            tokens=tuple(self.tokens),
            emitted=len(self.tokens),
            decode_forwards=self.decode_forwards,
            prefill_forwards=self.prefill_forwards,
            polls=polls,
            positions=tuple(self.positions),
            wasted_forwards=self.wasted + self.unused,
            stop_reason=stop,
            prompt_len=len(self.prompt),
            reused=reused,
            claims=dict(result.get("claims", {})),
        )
