"""Mutation: semantic mutants, the planted bugs described by the project's mutant files (semantic/), mutmut in a
scratch copy (mutmut), and the Stryker mutation-testing report both write (stryker).

Names: "mutant files" are the YAML data (the project's `mutants/` folder); this package is the code that runs them;
mutmut's own working folder (it insists on `./mutants/`) only ever exists inside a scratch copy.

Owns: running planted bugs against the falsifiers. May import: the base modules, falsify.contracts,
falsify.engines, falsify.harness.
"""
