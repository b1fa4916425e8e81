"""The named errors of a wire engine. Each one ends the connection (the engine is stopped) and every later call
raises it again at once, so every prediction it touches is an ERROR row naming it, never a hang or a PASS."""

from __future__ import annotations

from falsify.errors import FalsifyError, terminal_safe


class WireError(FalsifyError):
    """Base: something between the harness and a wire engine went wrong. str() starts with the error's name and is
    one terminal-safe line: it quotes the engine's own words (an error message, its stderr), and those reach the
    gate's table, pytest's report and falsify's last line (ESC[2J in them cleared the user's screen)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{type(self).__name__}: {terminal_safe(message)}")

    def again(self) -> WireError:
        """A fresh copy of this error, to raise for a later call on the ended connection. The stored error raised
        again would carry every earlier raise's traceback and notes: hypothesis replaying a falsifier on a dead
        engine grew one traceback with each replay (quadratic: 6.7 s of a crashed engine's falsifier at load 2,
        and a 10,000-line report for each later test)."""
        copy = type(self).__new__(type(self))
        copy.args = self.args
        return copy


class EngineStartError(WireError):
    """The engine could not be started or reached (bad command, nothing listening)."""


class EngineCrashed(WireError):
    """The engine exited or closed the connection while the harness waited for it."""


class EngineTimeout(WireError):
    """No message from the engine within the timeout while the harness waited for one."""


class MalformedMessage(WireError):
    """A line that is not JSON, not a message of the protocol, or whose params/result break its schema."""


class OversizedMessage(WireError):
    """A line longer than the limit (FALSIFY_WIRE_MAX_LINE); reading stopped there."""


class ProtocolVersionMismatch(WireError):
    """The engine speaks another protocol version."""


class ProtocolViolation(WireError):
    """Well-formed messages in an order or with values the protocol forbids (a token with no forward reported
    before it, a forward that skips positions, a result contradicting the events, ...)."""


class CallAbandoned(WireError):
    """The harness left a call before its reply: a falsifier's callback (its sampler, `on_token`) raised, or its
    time ran out (--falsify-test-timeout). The engine is not at fault, but the conversation cannot go on in step
    (the engine is still in the call), so its process is stopped and the next call starts a fresh one, counted
    against no restart budget (WireEngine.connection)."""


class EngineErrorReply(WireError):
    """The engine answered a request with an error the harness cannot map to a Python error."""


class EngineRefusal(ValueError):
    """The engine answered INVALID_INPUT: it refused the values, as an in-process engine raises ValueError.

    Only `Connection` raises it, and only for that reply. Nothing the harness parses or checks raises a bare
    ValueError out of a wire call (a malformed line or array is a MalformedMessage), so a falsifier that expects
    a refusal cannot pass on a parsing failure. Not a WireError: the connection stays usable."""


class LaneRefused(RuntimeError):
    """Error -32013: a `lane_submit` the engine's lane host cannot fit (all lanes held, too few free pages); nothing
    was allocated. Not a WireError: the engine keeps serving, as an in-process host's LaneRefused."""
