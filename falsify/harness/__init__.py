"""The harness: `falsify.check` (checks), the pytest plugin that binds tests to predictions (plugin), one outcome
per prediction from a run's test results (results), and `falsify gate` (gate).

Owns: running falsifiers and judging them. May import: the base modules, falsify.contracts, falsify.engines.
"""
