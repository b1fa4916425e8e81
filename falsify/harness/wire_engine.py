"""What the pytest plugin does for a wire engine (falsify/engines/wire): a break during a falsifier as that
falsifier's row, a fresh engine for the next one (issue #46), and the run's wire coverage.

A break is the engine's connection ending: a crash, a ProtocolViolation, a timeout (falsify/engines/wire/errors.py).
Before issue #46 one break made every later prediction an ERROR row, and the row of the test that broke could name
hypothesis instead of the break: a stateful program replayed on a dead connection fails elsewhere, and hypothesis
reports that as `FlakyStrategyDefinition` or `Flaky`. Now the test that broke is one ERROR row naming the break,
what the engine sent last and the claims it was falsifying; the next falsifier starts a fresh engine process
(WireEngine.restart, within its budget of restarts a run). A call the falsifier itself left (its callback raised,
its time ran out: errors.CallAbandoned) is no break: the row is the falsifier's own, and the next call starts a
fresh engine, counted against no budget.
"""

from __future__ import annotations

from typing import Any

from falsify.contracts.corpus import Corpus
from falsify.engines.wire import errors

CLAIM_CHARS = 150  # of each claim a break's row quotes


class WireBreak(Exception):
    """A wire engine's connection broke during a falsifier: an ERROR row, never FAIL. Its text leads with the error
    and what it broke in, so a row clipped at 1,000 characters keeps them: "ProtocolViolation while falsifying
    FALSIFY-X: engine ...: the rule it broke; the engine's last message: {...}. Claims: FALSIFY-X: ..."."""

    def __init__(self, error: BaseException, ids: list[str], corpus: Corpus, last: str) -> None:
        self.name = type(error).__name__
        _, _, body = str(error).partition(": ")  # a WireError's text starts with its name
        said = f"; the engine's last message: {last}" if last else ""
        claims = "; ".join(
            f"{pid}: {_clip(' '.join(corpus.predictions[pid].claim.split()))}"
            for pid in ids
            if pid in corpus.predictions
        )
        super().__init__(f"{self.name} while falsifying {', '.join(ids)}: {body}{said}. Claims: {claims}")


def restart_broken(engine: Any) -> None:
    """Before a falsifier: a wire engine whose connection broke in an earlier test is started afresh, within its
    budget (after it, every call raises one error naming the budget and the last break). Other engines have no
    `restart` and are left alone."""
    restart = getattr(engine, "restart", None)
    if restart is not None and failure(engine) is not None:
        restart()


def failure(engine: Any) -> Any:
    """The error that ended a wire engine's connection, else None (and None for an engine that is not a wire one)."""
    return getattr(engine, "failure", None)


def wire_break(engine: Any, before: Any, ids: list[str], corpus: Corpus) -> WireBreak | None:
    """The break to report for a falsifier that raised, if the engine's connection broke during it (`before` is
    `failure(engine)` as the test began). Whatever reached the plugin (the break itself, hypothesis' Flaky after
    replaying on the dead connection, a falsifier's own error), the row names the break."""
    broke = failure(engine)
    if broke is None or broke is before or isinstance(broke, errors.CallAbandoned):
        return None  # no break; or the falsifier left a call (its callback raised, its time ran out): its own row
    return WireBreak(broke, ids, corpus, getattr(engine, "last_message", str)())


def row_message(message: str) -> str:
    """pytest's one-line crash message as a row shows it: without the module path pytest puts before a WireBreak
    or a wire error, whose own text starts with its name ("EngineCrashed: EngineCrashed: ...")."""
    head, _, rest = message.partition(": ")
    if head == f"{WireBreak.__module__}.{WireBreak.__name__}":
        return rest
    module, _, name = head.rpartition(".")
    if module == errors.__name__ and rest.startswith(f"{name}: "):
        return rest
    return message


def _clip(text: str) -> str:
    return text if len(text) <= CLAIM_CHARS else text[: CLAIM_CHARS - 1] + "…"


def coverage(engine: Any) -> dict[str, Any] | None:
    """For a wire engine: the agreed version's messages and errors this run exercised (in every engine process it
    started), those it did not, and how many times the engine was restarted after a break; None for another."""
    seen = getattr(engine, "wire_seen", None)
    if seen is None or not engine.version:  # not a wire engine, or one that never started
        return None
    from falsify.engines.wire.conformance import spec_parts, unexercised

    parts = [p for p in spec_parts(engine.version) if p not in ("shutdown", "exit")]
    missing = unexercised(seen(), parts)
    return {
        "exercised": len(parts) - len(missing),
        "of": len(parts),
        "unexercised": missing,
        "restarts": engine.restarts,
    }


def coverage_line(cov: dict[str, Any]) -> str:
    """`coverage`'s record as one line: "wire protocol: 8 of 35 messages and errors exercised; unexercised: ...",
    and the restarts, if any (the plugin's line, and the gate's from results.json)."""
    missing = [str(m) for m in cov.get("unexercised", ()) if isinstance(m, str)]
    line = f"wire protocol: {cov.get('exercised')} of {cov.get('of')} messages and errors exercised"
    line += f"; unexercised: {', '.join(missing)}" if missing else "; none unexercised"
    restarts = cov.get("restarts")
    return line + (f"; the engine restarted {restarts} times after wire breaks" if restarts else "")
