"""Choosing the engine under test: a registered name (`reference`, `hf`), a registered name with its argument
(`llamacpp:PATH.gguf`: the name's factory is called with the text after the colon), `module:factory`, or a wire
engine in any language: `exec:"CMD ARGS"` (a subprocess speaking docs/engine-protocol.md on stdio) or
`http://HOST:PORT`, or an OpenAI-compatible server: `openai+http://127.0.0.1:PORT` or `openai+exec:CMD`
(falsify/engines/adapters/openai.py).

Which engine: `--engine`, else the FALSIFY_ENGINE environment variable, else `engine` in [tool.falsify]; none of
the three is an error (never a silent default). An engine that cannot be imported or made, or that says it supports
a capability without the methods that capability needs, is an `EngineError`: every command reports it as one line
and exits 2 before any test runs.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from falsify.engines.protocol import CAPABILITIES, missing
from falsify.errors import FalsifyError, terminal_safe

REGISTERED = {
    # The reference engine ships as its own distribution (falsify-harness-reference), not in the harness wheel.
    "reference": "reference.engine:ReferenceEngine",
    "hf": "falsify.engines.adapters.hf:HFEngine",
    "broken": "falsify.engines.adapters.broken:BrokenEngine",
    "llamacpp": "falsify.engines.adapters.llamacpp:LlamaCppEngine",
    "llamacpp-q4k": "falsify.engines.adapters.llamacpp:LlamaCppQ4KEngine",
    "llamacpp-abort": "falsify.engines.adapters.llamacpp:LlamaCppAbortEngine",
}
ENV = "FALSIFY_ENGINE"
# How to get what a registered engine imports, by the top-level module that was missing. Each names what exists:
# the reference engine's distribution (falsify-harness-reference) is on no package index; it builds from a checkout.
INSTALL_HINTS = {
    "reference": "the reference engine is its own distribution: pip install ./packaging/reference from a falsify "
    "checkout",
    "torch": "engine hf needs torch and transformers: pip install torch transformers (tox -e oracle in a checkout)",
    "transformers": "engine hf needs torch and transformers: pip install torch transformers (tox -e oracle in a "
    "checkout)",
    "llama_cpp": "the llamacpp engines need llama-cpp-python: pip install llama-cpp-python (tox -e llamacpp builds "
    "it from its sdist; docs/llamacpp.md)",
}


def install_hint(missing_module: str) -> str:
    """How to install the module an engine could not import ("" when falsify knows no better than the error)."""
    return INSTALL_HINTS.get(missing_module.partition(".")[0], "")


def engine_forms(
    default: str | None = f"${ENV}, then engine in [tool.falsify]; no default beyond those",
) -> str:
    """The help text of every command's --engine: each form load_engine accepts, then where the default comes
    from (None: the command has no default)."""
    forms = (
        f"a registered name ({', '.join(REGISTERED)}), or one given its weights (llamacpp:PATH.gguf, "
        "hf:CHECKPOINT_DIR); module:factory (your own, imported from the project root "
        'or src/); exec:"CMD ARGS" (a wire engine in any language, spoken to on stdio); http://HOST:PORT (a '
        "running wire engine; docs/engine-protocol.md); or an OpenAI-compatible server, openai+http://127.0.0.1:PORT "
        "or openai+exec:CMD (docs/openai-serving.md)"
    )
    return f"engine under test: {forms}" + (f" (default: {default})" if default else "")


class EngineError(FalsifyError):
    """The engine named on the command line cannot be loaded. str() is one terminal-safe line: it quotes the spec,
    the engine's own exceptions and its stderr."""

    def __init__(self, message: str) -> None:
        super().__init__(terminal_safe(message))


def resolve_engine(option: str | None, configured: str | None, where: str = "[tool.falsify]") -> str:
    """--engine, else FALSIFY_ENGINE, else the project's `engine`; an error naming all three when none is set."""
    spec = option or os.environ.get(ENV) or configured
    if not spec:
        raise EngineError(
            f'no engine under test: pass --engine module:factory, set {ENV}, or add engine = "module:factory" '
            f"to {where}"
        )
    check_spec(spec)
    return spec


def check_spec(spec: str) -> None:
    """An EngineError naming the spec when it breaks the syntax of every engine form (falsify/engines/specs.py)."""
    from falsify.engines.specs import spec_problem

    problem = spec_problem(spec, tuple(REGISTERED))
    if problem:
        shown = spec if len(spec) <= 200 else f"{spec[:120]}…({len(spec):,} characters)"
        raise EngineError(f"engine {shown!r}: {problem}")


@contextmanager
def importable(roots: Iterable[Path]) -> Iterator[None]:
    """The project's own modules importable as `python -m pytest` from its root sees them (root, then src/)."""
    added = [str(r) for r in roots if str(r) not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for path in added:
            if path in sys.path:
                sys.path.remove(path)


def is_wire(spec: str) -> bool:
    return spec.startswith(("exec:", "http://"))


def is_openai(spec: str) -> bool:
    return spec.startswith("openai+")


def load_engine(spec: str, roots: Iterable[Path] = ()) -> Any:
    check_spec(spec)
    if is_openai(spec):
        from falsify.engines.adapters.openai import OpenAIEngine

        try:
            return OpenAIEngine(spec)
        except FalsifyError as exc:
            raise EngineError(str(exc)) from None
    if is_wire(spec):
        from falsify.engines.wire.client import WireEngine
        from falsify.engines.wire.transports import TransportError, split_command

        if spec.startswith("exec:"):
            try:  # a command that cannot be split is the spec's error, before any run tries to start it
                split_command(spec[len("exec:") :])
            except TransportError as exc:
                raise EngineError(f"engine {spec!r}: {exc}") from None
        return WireEngine(spec)
    name, colon, argument = spec.partition(":")
    arguments: tuple[str, ...] = ()
    if colon and name in REGISTERED:  # a registered engine given its argument: llamacpp:PATH.gguf
        target, arguments = REGISTERED[name], (argument,)
    else:
        target = REGISTERED.get(spec, spec)
    if ":" not in target:
        raise EngineError(
            f'unknown engine {spec!r}: use one of {", ".join(REGISTERED)}, module:factory, exec:"CMD ARGS", '
            "http://HOST:PORT, openai+http://127.0.0.1:PORT or openai+exec:CMD"
        )
    module_name, _, attr = target.partition(":")
    if not module_name or module_name.startswith(".") or not attr:
        raise EngineError(
            f"engine {spec!r}: expected module:factory, an absolute module name and the name of a factory in it "
            "(e.g. my_engine:make)"
        )
    with importable(roots):
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            hint = install_hint(exc.name or "")
            raise EngineError(
                f"engine {spec!r}: cannot import {module_name}: {_raised(exc, name=False)}"
                + (f" ({hint})" if hint else "")
            ) from None
        # The engine's own module: a SyntaxError, or a sys.exit() or Ctrl-C while it imports, is one line and
        # falsify's exit 2, never a traceback or the engine's exit code.
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            raise EngineError(f"engine {spec!r}: importing {module_name} raised {_raised(exc)}") from None
        factory = getattr(module, attr, None)
        if factory is None:
            raise EngineError(f"engine {spec!r}: {module_name} has no {attr!r}")
        if not callable(factory):
            raise EngineError(
                f"engine {spec!r}: {target} is not callable (a class or a function making the engine)"
            )
        try:
            engine = factory(*arguments)
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # the engine's own code: one line
            called = f"{target}({', '.join(map(repr, arguments))})"
            raise EngineError(f"engine {spec!r}: {called} raised {_raised(exc)}") from None
    for needed in ("name", "supports"):
        if not hasattr(engine, needed):
            raise EngineError(
                f"engine {spec!r}: the object {target} made has no {needed!r} (see docs/engines.md)"
            )
    return engine


@dataclass(frozen=True, slots=True)
class Conformance:
    capability: str
    supported: bool
    reason: str  # why not, when not supported
    lacking: tuple[str, ...]  # methods a supported capability needs and the engine lacks


def _raised(exc: BaseException, *, name: bool = True) -> str:
    """An exception from the engine's code on one line: `SystemExit(7)`, `SyntaxError: invalid syntax (x.py,
    line 1)`."""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r})"
    text = " ".join(str(exc).split())
    if not name:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def conformance(engine: Any) -> list[Conformance]:
    """One row per capability: does the engine claim it, and does it have the methods the claim needs."""
    rows = []
    for capability in CAPABILITIES:
        try:
            reason = engine.supports(capability)
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            raise EngineError(
                f"engine {getattr(engine, 'name', '?')!r}: supports({capability!r}) raised {_raised(exc)}"
            ) from None
        supported = reason is None
        lacking = (
            tuple(m for m in missing(engine, capability) if m not in ("name", "supports"))
            if supported
            else ()
        )
        rows.append(Conformance(capability, supported, "" if supported else str(reason), lacking))
    return rows


def probe_wire(spec: str) -> None:
    """Before a run: can the wire engine be reached at all? `exec:` starts it, shakes hands and shuts it down;
    `http://` opens a TCP connection to its port (a running server is not sent `initialize` twice, nor `exit`).
    An engine that cannot start is then one line and exit 2, not an ERROR in every row. An engine that starts
    and later fails is still judged in the run: each prediction it touches is an ERROR naming the failure."""
    check_spec(spec)  # http://[::1 was urlsplit's ValueError traceback here
    if spec.startswith("http://"):
        import socket
        from urllib.parse import urlsplit

        parts = urlsplit(spec)
        host, port = parts.hostname, parts.port
        if not host or port is None:
            raise EngineError(f"engine URL {spec!r}: expected http://HOST:PORT")
        try:
            socket.create_connection((host, port), timeout=10).close()
        except (OSError, UnicodeError) as exc:  # UnicodeError: a host name idna cannot encode
            raise EngineError(f"engine {spec!r}: cannot connect to {host}:{port}: {exc}") from None
        return
    if spec.startswith("exec:"):
        from falsify.engines.wire.client import WireEngine
        from falsify.engines.wire.errors import WireError

        engine = WireEngine(spec)
        try:
            engine.connection()
        except WireError as exc:
            raise EngineError(f"engine {spec!r} did not start: {_one_line(str(exc))}") from None
        finally:
            engine.close()


def _one_line(text: str, tail: int = 400) -> str:
    """The error on one line; of the engine's stderr it carries (a traceback, often), the last `tail` characters."""
    head, sep, stderr = text.partition("; stderr:")
    stderr = " ".join(stderr.split())
    if len(stderr) > tail:
        stderr = "…" + stderr[-tail:]
    return " ".join(head.split()) + (f"; stderr: {stderr}" if sep else "")


def with_boundary(engine: Any) -> Any:
    """`engine`, wrapped by the boundary mutant FALSIFY_BOUNDARY_MUTANT names, if any: `falsify mutants` sets it for
    a boundary mutant's own pytest run (falsify/engines/boundary). An unknown name is an EngineError."""
    from falsify.engines.boundary.catalogue import ENV as BOUNDARY_ENV

    name = os.environ.get(BOUNDARY_ENV)
    if not name:
        return engine
    from falsify.engines.boundary.wrappers import BoundaryError, wrap

    try:
        return wrap(engine, name)
    except BoundaryError as exc:
        raise EngineError(f"{BOUNDARY_ENV}: {exc}") from None


def check_engine(spec: str, roots: Iterable[Path] = ()) -> Any:
    """load_engine, then refuse an engine that claims a capability without its methods. A wire engine's
    capabilities come from its handshake, checked (and reported per prediction) when the run starts."""
    # A check only reads the engine: importing it must not leave __pycache__ in the project (falsify mutants
    # promises an untouched working tree, and runs this check before any scratch copy exists).
    previous, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        engine = load_engine(spec, roots)
    finally:
        sys.dont_write_bytecode = previous
    if is_wire(spec):
        return engine
    broken = [r for r in conformance(engine) if r.lacking]
    if broken:
        detail = "; ".join(f"{r.capability} lacks {', '.join(r.lacking)}" for r in broken)
        raise EngineError(
            f"engine {spec!r} claims capabilities it does not implement: {detail} "
            "(run `falsify engine check` for the table)"
        )
    return engine
