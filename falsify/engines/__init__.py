"""Engines: the protocol an engine implements (protocol), loading one by name or module:factory (loading), and
adapters for engines no one here wrote (adapters/).

Owns: the boundary between the harness and an engine. May import: the base modules and falsify.contracts.
"""
