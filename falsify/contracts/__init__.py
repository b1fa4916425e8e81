"""Contracts as data: safe YAML with line numbers (yamlfile), the JSON Schema check and ids (corpus), the static
checks of formulas and corners (formula_checks), the formula language and its evaluator (formula), and `falsify
lint` (lint).

Owns: everything about reading and validating contract and mutant files. May import: falsify.errors,
falsify.project, falsify.table. Nothing here knows about pytest, engines or mutant runs.
"""
