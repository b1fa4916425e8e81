"""DSSE envelopes (secure-systems-lab/dsse, envelope.md and protocol.md) over a bundle's in-toto statements,
signed with Ed25519 through the `cryptography` package (no hand-rolled crypto).

    evidence.dsse.jsonl   one envelope per line of evidence.intoto.jsonl, same order:
                          {"payload": base64(statement line), "payloadType": "application/vnd.in-toto+json",
                           "signatures": [{"keyid": sha256 of the public key's raw 32 bytes, "sig": base64}]}

The signature is over PAE(payloadType, payload) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body, LEN the
ASCII decimal byte length. Verification re-derives PAE from the envelope's own payloadType and payload and checks
the signature BEFORE it looks at the payload; only then is the payload compared with the statement line it covers.
Ed25519 signatures are deterministic, so signing the same bundle twice gives the same bytes.

Keys are PEM files: the private key PKCS#8 (unencrypted; keep it in the CI secret store), the public key
SubjectPublicKeyInfo. `falsify keygen PATH` writes PATH (mode 0600) and PATH.pub.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from falsify.evidence import SIGNATURES, STATEMENTS
from falsify.evidence.tree import EvidenceError
from falsify.untrusted import boundedjson, safefile

PAYLOAD_TYPE = "application/vnd.in-toto+json"
MAX_KEY_BYTES = 64 * 2**10  # a PEM Ed25519 key is ~120 bytes: anything past this is not one
MAX_JSON_BYTES = 256 << 20  # a statements file (as verify bounds it)
STATEMENT_NAMES = ("test-result", "contract-evidence", "release-report")


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:  # pragma: no cover - cryptography is a core dependency
        raise EvidenceError("signing needs the `cryptography` package (pip install cryptography)") from None
    return serialization, ed25519


def keyid(public_key: Any) -> str:
    serialization, _ = _crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def load_private_key(path: Path) -> Any:
    serialization, ed25519 = _crypto()
    return _load_key(
        path,
        "the signing key",
        lambda data: serialization.load_pem_private_key(data, password=None),
        "an unencrypted PEM private key",
        ed25519.Ed25519PrivateKey,
    )


def load_public_key(path: Path) -> Any:
    serialization, ed25519 = _crypto()
    return _load_key(
        path,
        "the public key",
        serialization.load_pem_public_key,
        "a PEM public key",
        ed25519.Ed25519PublicKey,
    )


def _load_key(path: Path, what: str, parse: Callable[[bytes], Any], form: str, kind: type) -> Any:
    """The Ed25519 key in a PEM file, or an EvidenceError naming the file and what is wrong with it."""
    try:
        data = safefile.read_bytes(path, limit=MAX_KEY_BYTES, what=what.removeprefix("the "))
    except safefile.FileLayerError as exc:
        raise EvidenceError(str(exc)) from None
    try:
        key = parse(data)
    except (ValueError, TypeError) as exc:
        raise EvidenceError(f"{path}: not {form} ({exc})") from None
    if not isinstance(key, kind):
        raise EvidenceError(f"{path}: {what} must be Ed25519, got {type(key).__name__}")
    return key


def keygen(path: Path) -> tuple[Path, Path]:
    """Write a new Ed25519 key pair: `path` (private, PKCS#8 PEM, mode 0600) and `path`.pub (public)."""
    serialization, ed25519 = _crypto()
    if path.name in ("", ".", "..") or os.path.isdir(path):
        raise EvidenceError(
            f"{path}: a directory, not a file name for the private key "
            "(e.g. `falsify keygen keys/evidence` writes keys/evidence and keys/evidence.pub)"
        )
    public_path = path.with_name(path.name + ".pub")
    for p in (path, public_path):
        if os.path.lexists(p):  # a dangling symlink too: nothing is ever written through one
            raise EvidenceError(f"{p}: already exists; keygen never overwrites a key")
    key = ed25519.Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:
        safefile.create(path, private_pem, mode=0o600, what="private key")
        try:
            safefile.create(public_path, public_pem, what="public key")
        except safefile.FileLayerError:
            os.unlink(path)  # no half pair left behind
            raise
    except safefile.FileLayerError as exc:
        raise EvidenceError(str(exc)) from None
    return path, public_path


def statement_lines(statements: bytes) -> list[bytes]:
    return [line for line in statements.split(b"\n") if line]


def envelopes(statements: bytes, private_key: Any) -> bytes:
    """The signatures file for a statements file: one DSSE envelope per statement line."""
    kid = keyid(private_key.public_key())
    out = []
    for line in statement_lines(statements):
        sig = private_key.sign(pae(PAYLOAD_TYPE, line))
        envelope = {
            "payload": base64.b64encode(line).decode("ascii"),
            "payloadType": PAYLOAD_TYPE,
            "signatures": [{"keyid": kid, "sig": base64.b64encode(sig).decode("ascii")}],
        }
        out.append(json.dumps(envelope, sort_keys=True, separators=(",", ":")))
    return ("\n".join(out) + "\n").encode("ascii")


def sign_bundle(bundle: Path, private_key: Any) -> Path:
    """Write the bundle's signatures file from its statements file, once that is checked to be one
    (check_statements): a signature vouches for what it covers, so nothing else is ever signed."""
    statements = bundle / STATEMENTS
    target = bundle / SIGNATURES
    try:
        data = safefile.read_bytes(statements, limit=MAX_JSON_BYTES, what="statements file")
        check_statements(data, str(statements))
        safefile.replace(target, envelopes(data, private_key), what="signatures file")
    except safefile.FileLayerError as exc:
        raise EvidenceError(str(exc)) from None
    return target


def check_statements(data: bytes, what: str) -> None:
    """DATA is a statements file as `falsify evidence` writes it, else one EvidenceError line naming WHAT and the
    line: three newline-terminated lines, each an in-toto Statement v1 (verify's STATEMENT_SCHEMA) of the
    test-result, contract-evidence and release-report types in that order, the release report's `statements`
    recording the sha256 of lines 1 and 2 as they are (an edited line no longer matches)."""
    from falsify.evidence import CONTRACT_EVIDENCE_TYPE, RELEASE_REPORT_TYPE, TEST_RESULT_TYPE
    from falsify.evidence.verify import shape_problems

    expected = (TEST_RESULT_TYPE, CONTRACT_EVIDENCE_TYPE, RELEASE_REPORT_TYPE)
    lines = data.split(b"\n")
    complete, empty = len(lines) - 1, b"" in lines[:-1]
    if lines[-1] != b"" or complete != len(expected) or empty:
        found = f"{complete} line(s)" + (", one of them empty" if empty else "")
        found += " and one not terminated by a newline" if lines[-1] else ""
        raise EvidenceError(
            f"{what}: not a statements file of `falsify evidence` ({len(expected)} newline-terminated "
            f"lines expected, found {found})"
        )
    statements = []
    for i, (line, kind) in enumerate(zip(lines, expected, strict=False)):
        where = f"{what}: line {i + 1}"
        try:
            statement = boundedjson.loads(line, what=where, max_bytes=MAX_JSON_BYTES)
        except boundedjson.JsonFormatError as exc:
            raise EvidenceError(str(exc)) from None
        problems = shape_problems(statement)
        if problems:
            raise EvidenceError(
                f"{where}: not an in-toto Statement v1: {' '.join(problems[0].split())[:160]}"
            )
        if statement["predicateType"] != kind:
            raise EvidenceError(
                f"{where}: predicateType {boundedjson.show(statement['predicateType'])}, expected {kind}"
            )
        statements.append(statement)
    release = boundedjson.Field(what, "line 3 predicate")
    predicate = statements[2]["predicate"]
    for key in ("generatedAt", "decision", "summary"):
        release[key].need_str(predicate.get(key))
    recorded = release.get(predicate, "statements", "list", [])
    for i, line in enumerate(lines[:2]):
        entry = release["statements"][i]
        record = entry.need_dict(recorded[i] if i < len(recorded) else None)
        digest = entry["digest"].need_dict(record.get("digest"))
        if entry["digest"]["sha256"].need_str(digest.get("sha256")) != hashlib.sha256(line).hexdigest():
            raise EvidenceError(
                f"{what}: line {i + 1} is not the statement the release report (line 3) records: edited since "
                "`falsify evidence` wrote it (run `falsify verify` on the bundle)"
            )


def _name(i: int) -> str:
    return f"statement {i + 1} ({STATEMENT_NAMES[i] if i < len(STATEMENT_NAMES) else 'extra'})"


def check_envelopes(statements: bytes, signatures: bytes | None, public_key: Any) -> list[str]:
    """Problems with the signatures of a statements file, each naming the statement; [] when every statement
    carries a valid signature by `public_key` over exactly its own bytes."""
    from cryptography.exceptions import InvalidSignature

    if signatures is None:
        return [
            f"{SIGNATURES}: missing — the bundle is unsigned (sign it with `falsify evidence --sign KEY`)"
        ]
    kid = keyid(public_key)
    lines = statement_lines(statements)
    raw = [line for line in signatures.split(b"\n") if line]
    problems = []
    if len(raw) != len(lines):
        problems.append(f"{SIGNATURES}: {len(raw)} envelope(s) for {len(lines)} statement(s)")
    for i, line in enumerate(lines):
        if i >= len(raw):
            problems.append(f"{_name(i)}: no envelope")
            continue
        try:
            envelope = boundedjson.loads(raw[i], what="envelope")
        except boundedjson.JsonFormatError as exc:
            problems.append(f"{_name(i)}: {exc}")
            continue
        if not isinstance(envelope, dict):
            problems.append(f"{_name(i)}: envelope is not a JSON object")
            continue
        payload_type, payload_b64 = envelope.get("payloadType"), envelope.get("payload")
        sigs = envelope.get("signatures")
        if not isinstance(payload_type, str) or not isinstance(payload_b64, str):
            problems.append(f"{_name(i)}: envelope lacks a string payloadType and payload")
            continue
        try:
            payload = base64.b64decode(payload_b64, validate=True)
        except (binascii.Error, ValueError):
            problems.append(f"{_name(i)}: payload is not base64")
            continue
        if not isinstance(sigs, list) or not sigs:
            problems.append(f"{_name(i)}: no signature")
            continue
        ours = [s for s in sigs if isinstance(s, dict) and s.get("keyid") == kid]
        if not ours:
            problems.append(
                f"{_name(i)}: no signature by key {kid[:16]}… (signed by another key, or not at all)"
            )
            continue
        verified = False
        for s in ours:
            try:
                sig = base64.b64decode(str(s.get("sig", "")), validate=True)
                public_key.verify(sig, pae(payload_type, payload))
                verified = True
                break
            except (binascii.Error, ValueError, InvalidSignature):
                continue
        if not verified:
            problems.append(f"{_name(i)}: signature does not verify with key {kid[:16]}…")
            continue
        # Only a verified envelope's content is read.
        if payload_type != PAYLOAD_TYPE:
            problems.append(f"{_name(i)}: payloadType {payload_type!r}, expected {PAYLOAD_TYPE!r}")
        if payload != line:
            problems.append(f"{_name(i)}: the signed payload is not the statement in {STATEMENTS}")
    return problems
