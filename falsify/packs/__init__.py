"""Built-in contract packs (package data): each folder holds contracts/*.yaml, falsifiers/test_*.py and pack.toml.

Falsifiers here import only `falsify` and reach the engine only through the `engine` fixture; they run under the
harness (falsify/contracts/packs.py finds them; the pytest plugin collects them).
"""
