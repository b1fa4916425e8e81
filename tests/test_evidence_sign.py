"""Signed evidence: DSSE envelopes over the bundle's statements (falsify/evidence/sign.py), through the CLI.

The bundle comes from tests/test_evidence.py's `built` fixture (one tiny project, one bundle per module)."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest
from test_evidence import Verify, built, copy, evidence_args, falsify_cli, verify

from falsify.evidence import SIGNATURES, STATEMENTS
from falsify.evidence.sign import PAYLOAD_TYPE, pae


def test_pae_is_the_dsse_spec_encoding() -> None:
    # protocol.md's worked example: PAE("http://example.com/HelloWorld", "hello world")
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    assert pae("", b"") == b"DSSEv1 0  0 "


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    proc = falsify_cli(tmp_path, "keygen", str(tmp_path / "k"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp_path / "k", tmp_path / "k.pub"


def test_keygen_writes_a_private_key_only_its_owner_reads_and_never_overwrites(
    keys: tuple[Path, Path], tmp_path: Path
) -> None:
    private, public = keys
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert b"BEGIN PRIVATE KEY" in private.read_bytes() and b"BEGIN PUBLIC KEY" in public.read_bytes()
    before = private.read_bytes()
    proc = falsify_cli(tmp_path, "keygen", str(private))
    assert proc.returncode == 2 and "already exists" in proc.stderr, proc.stderr
    assert private.read_bytes() == before


def signed(copy: Path, keys: tuple[Path, Path]) -> Path:
    """The copy's bundle rebuilt by `falsify evidence --from ... --sign KEY`."""
    root = copy / "proj"
    proc = falsify_cli(
        root,
        *evidence_args("evidence"),
        "--mutants-report",
        str(copy / "stryker.json"),
        "--sign",
        str(keys[0]),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root / "evidence"


def test_signed_bundle_verifies_with_the_public_key(
    copy: Path, keys: tuple[Path, Path], verify: Verify
) -> None:
    bundle = signed(copy, keys)
    envelopes = [json.loads(line) for line in (bundle / SIGNATURES).read_text().splitlines()]
    lines = (bundle / STATEMENTS).read_bytes().splitlines()
    assert len(envelopes) == len(lines) == 3
    for envelope, line in zip(envelopes, lines, strict=True):
        assert envelope["payloadType"] == PAYLOAD_TYPE
        assert base64.b64decode(envelope["payload"]) == line
    code, out = verify(copy / "proj", "evidence", "--key", str(keys[1]))
    assert code == 0, out
    assert "every statement's signature verifies" in out, out
    # Ed25519 is deterministic: signing again gives the same bytes (a rebuilt bundle stays comparable).
    first = (bundle / SIGNATURES).read_bytes()
    proc = falsify_cli(copy / "proj", "sign", "evidence", "--key", str(keys[0]))
    assert proc.returncode == 0, proc.stderr
    assert (bundle / SIGNATURES).read_bytes() == first


def _edit_envelope(bundle: Path, line: int, edit: object) -> None:
    path = bundle / SIGNATURES
    envelopes = [json.loads(x) for x in path.read_text().splitlines()]
    edit(envelopes[line])  # type: ignore[operator]
    path.write_text("".join(json.dumps(e) + "\n" for e in envelopes))


def _flip_sig(envelope: dict) -> None:
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[5] ^= 0x01
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()


def _flip_payload(envelope: dict) -> None:
    payload = bytearray(base64.b64decode(envelope["payload"]))
    payload[len(payload) // 2] ^= 0x01
    envelope["payload"] = base64.b64encode(bytes(payload)).decode()


def _drop_signature(envelope: dict) -> None:
    envelope["signatures"] = []


@pytest.mark.parametrize(
    ("line", "edit", "expected"),
    [
        (0, _flip_sig, "statement 1 (test-result): signature does not verify"),
        (1, _flip_payload, "statement 2 (contract-evidence): signature does not verify"),
        (2, _drop_signature, "statement 3 (release-report): no signature"),
    ],
    ids=["flipped-signature-byte", "flipped-payload-byte", "removed-signature"],
)
def test_a_tampered_envelope_fails_naming_the_statement(
    copy: Path,
    keys: tuple[Path, Path],
    verify: Verify,
    line: int,
    edit: object,
    expected: str,
) -> None:
    bundle = signed(copy, keys)
    _edit_envelope(bundle, line, edit)
    code, out = verify(copy / "proj", "evidence", "--key", str(keys[1]))
    assert code == 1, out
    assert expected in out, out


def test_a_wrong_key_fails_every_statement(
    copy: Path, keys: tuple[Path, Path], verify: Verify, tmp_path: Path
) -> None:
    signed(copy, keys)
    other = tmp_path / "other"
    assert falsify_cli(tmp_path, "keygen", str(other)).returncode == 0
    code, out = verify(copy / "proj", "evidence", "--key", str(other) + ".pub")
    assert code == 1, out
    for name in (
        "statement 1 (test-result)",
        "statement 2 (contract-evidence)",
        "statement 3 (release-report)",
    ):
        assert f"{name}: no signature by key" in out, out


def test_an_unsigned_bundle_fails_verify_with_a_key(
    copy: Path, keys: tuple[Path, Path], verify: Verify
) -> None:
    code, out = verify(copy / "proj", "evidence", "--key", str(keys[1]))
    assert code == 1, out
    assert f"{SIGNATURES}: missing — the bundle is unsigned" in out, out


def test_a_statement_edited_after_signing_fails_even_with_its_digest_story_intact(
    copy: Path,
    keys: tuple[Path, Path],
    verify: Verify,
) -> None:
    bundle = signed(copy, keys)
    lines = (bundle / STATEMENTS).read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2].replace('"decision":"GO"', '"decision":"NO-GO"', 1)
    (bundle / STATEMENTS).write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out = verify(copy / "proj", "evidence", "--key", str(keys[1]))
    assert code == 1, out
    assert "statement 3 (release-report): the signed payload is not the statement" in out, out


def test_a_key_that_is_not_a_pem_key_is_one_line(copy: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key\n")
    proc = falsify_cli(copy / "proj", "verify", "evidence", "--key", str(bad))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "not a PEM public key" in proc.stderr, proc.stderr
