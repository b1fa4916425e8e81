"""Engines in any language: the harness's side of the wire protocol (docs/engine-protocol.md).

client (WireEngine: the engine protocol of falsify/engines/protocol.py over the wire, with the harness judging
the engine's events), connection (one conversation: ids, timeout, schema checks), transports (exec: stdio, http),
messages (version, error codes, array encoding, schemas/), errors (the named failures).
"""
