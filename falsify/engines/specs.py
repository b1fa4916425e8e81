"""The syntax of an engine spec, checked before anything is imported, started or connected to.

Every form (docs/cli.md, `--engine`): a registered name, `NAME:ARGUMENT`, `module:factory`, `exec:CMD ARGS`,
`http://HOST:PORT[/PATH]`, `openai+http://LOOPBACK:PORT[/PATH]` and `openai+exec:CMD`. A spec that breaks its form
is one line naming the spec and what is wrong with it (exit 2): before, `http://[::1` ended in urlsplit's
ValueError traceback, `openai+exec:nosuchprogram` in Popen's FileNotFoundError inside pytest.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import shutil
from urllib.parse import urlsplit

MAX_SPEC = 4096  # characters: a command line a shell takes is shorter than the kernel's argument limit anyway
LOOPBACK = ("127.0.0.1", "localhost", "::1")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_URL_PATH = re.compile(r"(?:/(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})*)*")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def spec_problem(spec: str, registered: tuple[str, ...] = ()) -> str | None:
    """What is wrong with the engine spec's syntax; None when it has one of the forms. `registered`: the names
    that take an argument after a colon (`llamacpp:PATH.gguf`)."""
    if len(spec) > MAX_SPEC:
        return f"is {len(spec):,} characters long; an engine spec has at most {MAX_SPEC:,}"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in spec):
        return "holds a control character (a NUL, newline or escape); an engine spec is one line of text"
    if spec != spec.strip():
        return "starts or ends with white space"
    if spec.startswith("openai+"):
        rest = spec.removeprefix("openai+")
        if rest.startswith("exec:"):
            return command_problem(rest.removeprefix("exec:"), must_exist=True)
        if rest.startswith("http://"):
            return url_problem(rest, loopback=True)
        return "expected openai+http://127.0.0.1:PORT (loopback only) or openai+exec:CMD"
    if spec.startswith("exec:"):
        return command_problem(spec.removeprefix("exec:"), must_exist=False)
    if spec.startswith("http://"):
        return url_problem(spec, loopback=False)
    name, colon, _ = spec.partition(":")
    if name in registered:
        return None
    scheme = _SCHEME.match(spec)
    if scheme:
        return (
            f"{scheme.group(0)} is no engine form: a wire engine is http://HOST:PORT (plain HTTP), an "
            "OpenAI-compatible server openai+http://127.0.0.1:PORT"
        )
    if not colon:
        return None  # a registered name or not: load_engine names the ones it knows
    module, _, factory = spec.partition(":")
    if not module or not all(part.isidentifier() for part in module.split(".")) or not factory.isidentifier():
        return (
            "expected module:factory, an absolute module name (dotted identifiers) and the name of a factory "
            "in it (e.g. my_engine:make)"
        )
    return None


def command_problem(command: str, *, must_exist: bool) -> str | None:
    """What is wrong with an `exec:` command: it cannot be split as a POSIX shell splits it, is empty, or (for a
    command falsify starts in the run's pytest, `openai+exec:`) names a program that is not there to run."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
        return f"exec: cannot split the command as a shell would: {exc}"
    if not argv:
        # each form's words as they were: openai+exec:'s adapter said "names no command"
        return (
            "exec: names no command"
            if must_exist
            else 'exec: needs a command, e.g. exec:"python -m reference.serve"'
        )
    program = argv[0]
    if must_exist and "{port}" not in program and shutil.which(program) is None:
        return f"exec: {program!r} is not a program found on PATH (or an executable file)"
    return None


def url_problem(url: str, *, loopback: bool) -> str | None:
    """What is wrong with `http://HOST:PORT[/PATH]`: not a URL, no host or port, a port out of 1..65535 or not
    plain digits, a host that is no host name or IP address, a user name, a query or a fragment."""
    expected = "openai+http://127.0.0.1:PORT (loopback only)" if loopback else "http://HOST:PORT"
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError as exc:  # an unclosed IPv6 bracket
        return f"not a URL ({exc}); expected {expected}"
    if parts.scheme != "http" or not host:
        return f"expected {expected}"
    if "@" in parts.netloc:
        return f"carries a user name or password; expected {expected}"
    port_text = parts.netloc.rpartition("]")[2] if parts.netloc.startswith("[") else parts.netloc
    port_text = port_text.rpartition(":")[2] if ":" in port_text else ""
    if not port_text:
        return f"names no port; expected {expected}"
    if (
        not (port_text.isascii() and port_text.isdigit())
        or len(port_text) > 5
        or not 1 <= int(port_text) <= 65535
    ):
        return f"port {port_text[:20]!r} is not a number from 1 to 65535"
    if parts.query or parts.fragment or url.endswith(("?", "#")) or not _URL_PATH.fullmatch(parts.path):
        return "expected http://HOST:PORT or http://HOST:PORT/PATH (no query, fragment or space)"
    if not _is_host(host, bracketed=parts.netloc.startswith("[")):
        return f"host {host[:80]!r} is neither an IP address nor a host name"
    if loopback and host not in LOOPBACK:
        return f"host {host!r} is not the loopback; expected {expected}"
    return None


def _is_host(host: str, *, bracketed: bool) -> bool:
    if bracketed:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return False
        return True
    return len(host) <= 253 and _HOST_NAME.fullmatch(host) is not None
