"""Seeded fuzzers for what `verify --key` and `diff` read from a bundle (issue #27): DSSE envelope lines against
`check_envelopes`, and statement lines against `read_statements` (verify's parser), `load_evidence` and `diff`.

Each case damages valid lines one way or several (a byte flipped, cut short, an integer of thousands of digits,
nesting thousands deep, NaN, invalid UTF-8, a field swapped for a hostile value, random JSON, lines dropped or
repeated). Properties: no exception but EvidenceError escapes (check_envelopes returns its problems, never raises),
no case passes the SIGALRM bound, and nothing invalid is accepted: an envelope file with no problem carries, for
every statement, an envelope whose payload is exactly that statement and whose signature verifies over its PAE
with the key (checked again here, with `cryptography` directly). CI runs CASES cases from a fixed seed;
FALSIFY_FUZZ=thorough runs 20x more from a fresh one.
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ed25519

from falsify.evidence import CONTRACT_EVIDENCE_TYPE, RELEASE_REPORT_TYPE, STATEMENTS, TEST_RESULT_TYPE
from falsify.evidence.diff import diff, load_evidence
from falsify.evidence.sign import PAYLOAD_TYPE, check_envelopes, envelopes, pae
from falsify.evidence.tree import EvidenceError
from falsify.evidence.verify import read_statements

THOROUGH = "thorough" in (os.environ.get("HYPOTHESIS_PROFILE", ""), os.environ.get("FALSIFY_FUZZ", ""))
CASES = 20_000 if THOROUGH else 1_000
SEED = int.from_bytes(os.urandom(4), "little") if THOROUGH else 27
ALARM = 10
KEY = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
STATEMENT_LINES = [
    json.dumps(
        {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "reference/model.py", "digest": {"sha256": "ab" * 32}}],
            "predicateType": kind,
            "predicate": {"predictions": [{"id": "FALSIFY-X-001", "outcome": "PASS", "ms": 12.5}], "n": 3},
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    for kind in (
        TEST_RESULT_TYPE,
        CONTRACT_EVIDENCE_TYPE,
        RELEASE_REPORT_TYPE,
    )
]
HOSTILE: list[Any] = [None, True, 0, -1, 1.5, "", "x", [], {}, 2**64, "\u0000", [[[]]], {"sha256": "00"}]


def _number(rng: random.Random) -> bytes:
    return rng.choice(
        [b"9" * rng.randint(40, 6000), b"NaN", b"Infinity", b"1e999", b"-0", b"0." + b"1" * 300]
    )


def damage(rng: random.Random, line: bytes) -> bytes:
    kind = rng.randrange(9)
    if kind == 0:
        out = bytearray(line)
        out[rng.randrange(len(out))] = rng.choice([b for b in range(256) if b != 0x0A])
        return bytes(out)
    if kind == 1:
        return line[: rng.randrange(len(line))]
    if kind == 2:
        i = line.index(b":") + 1
        return (
            line[:i] + _number(rng) + b"," + line[i:]
            if rng.random() < 0.5
            else line[:i] + _number(rng) + line[i:]
        )
    if kind == 3:
        depth = rng.choice([10, 64, 65, 1000, 100_000])
        i = line.index(b":") + 1
        return line[:i] + b"[" * depth + b"0" + b"]" * depth + b"," + line[i:]
    if kind == 4:
        i = rng.randrange(len(line))
        return line[:i] + rng.choice([b"\xff", b"\xc3\x28", b"\\ud800", b"\x00"]) + line[i:]
    if kind == 5:  # a field swapped for a hostile value
        data = json.loads(line)
        field = rng.choice(sorted(data))
        data[field] = rng.choice(HOSTILE)
        return json.dumps(data).encode()
    if kind == 6:
        return json.dumps(rng.choice(HOSTILE)).encode()
    if kind == 7:  # whitespace only: the same JSON
        return json.dumps(json.loads(line), indent=None, separators=(", ", ": ")).encode()
    return line


def lines_case(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    out = [damage(rng, line) if rng.random() < 0.7 else line for line in lines]
    if rng.random() < 0.15:
        out = out[: rng.randrange(len(out) + 1)] + out[rng.randrange(len(out)) :]  # lines dropped or repeated
    return out


def _signed_for_every_statement(statements: list[bytes], signatures: list[bytes]) -> bool:
    """Independently of falsify: every statement has, at its index, an envelope over exactly it that verifies."""
    if len(signatures) != len(statements):
        return False
    public = KEY.public_key()
    for line, raw in zip(statements, signatures, strict=True):
        env = json.loads(raw)
        payload = base64.b64decode(env["payload"], validate=True)
        if payload != line or env["payloadType"] != PAYLOAD_TYPE:
            return False
        if not any(
            _verifies(public, s.get("sig", ""), pae(env["payloadType"], payload)) for s in env["signatures"]
        ):
            return False
    return True


def _verifies(public: Any, sig: str, message: bytes) -> bool:
    try:
        public.verify(base64.b64decode(sig, validate=True), message)
    except Exception:
        return False
    return True


def test_envelope_fuzz(alarm: None) -> None:
    statements = b"\n".join(STATEMENT_LINES) + b"\n"
    valid = [line for line in envelopes(statements, KEY).split(b"\n") if line]
    rng = random.Random(SEED)
    seen: Counter[str] = Counter()
    started, slowest = time.monotonic(), 0.0
    for i in range(CASES):
        signatures = lines_case(rng, valid)
        signal.alarm(ALARM)
        t = time.monotonic()
        problems = check_envelopes(statements, b"\n".join(signatures) + b"\n", KEY.public_key())
        slowest = max(slowest, time.monotonic() - t)
        signal.alarm(0)
        assert all(isinstance(p, str) and p for p in problems), problems
        if problems:
            seen["refused"] += 1
        else:
            assert _signed_for_every_statement(STATEMENT_LINES, signatures), (
                f"case {i}: accepted {signatures!r}"
            )
            seen["accepted"] += 1
    print(
        f"envelope fuzz: {CASES} cases, seed {SEED}: {dict(seen)}; slowest {slowest:.3f} s, {time.monotonic() - started:.1f} s"
    )
    assert seen["refused"] and seen["accepted"], seen


def test_statement_fuzz(tmp_path: Path, alarm: None) -> None:
    rng = random.Random(SEED + 1)
    seen: Counter[str] = Counter()
    started, slowest = time.monotonic(), 0.0
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / STATEMENTS).write_bytes(b"\n".join(STATEMENT_LINES) + b"\n")
    reference, subjects = load_evidence(tmp_path / "ok")
    for _ in range(CASES):
        lines = lines_case(rng, STATEMENT_LINES)
        bundle = tmp_path / "b"
        bundle.mkdir(exist_ok=True)
        (bundle / STATEMENTS).write_bytes(b"\n".join(lines) + b"\n")
        signal.alarm(ALARM)
        t = time.monotonic()
        for name, read in (("verify", read_statements), ("diff", load_evidence)):
            try:
                read(bundle)
            except EvidenceError as exc:
                assert str(exc), exc
                seen[f"{name} named"] += 1
                continue
            seen[f"{name} read"] += 1
            if name == "diff":  # what diff compares must be what diff reads: run it on the accepted bundle
                evidence, new_subjects = load_evidence(bundle)
                d = diff(reference, evidence, old_subjects=subjects, new_subjects=new_subjects)
                assert isinstance(d.compared, dict), d
        slowest = max(slowest, time.monotonic() - t)
        signal.alarm(0)
    print(
        f"statement fuzz: {CASES} cases, seed {SEED + 1}: {dict(seen)}; slowest {slowest:.3f} s, {time.monotonic() - started:.1f} s"
    )
    assert seen["verify named"] and seen["verify read"] and seen["diff named"] and seen["diff read"], seen
