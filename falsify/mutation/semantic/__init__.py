"""`falsify mutants`: planted bugs as data, each applied in a scratch copy and required to turn its predictions red.

targets.py     what a mutant names, and the one matcher that finds it (a statement by its tokens, op text)
edits.py       libcst statement edits (move, delete, replace, swap, insert) with their examples
scratch.py     scratch copies and the process groups run in them; forkserver.py forks warm pytest runs
probe.py       the pytest plugin inside each run: where the edited module came from, early stop
runner.py      control, one mutant, all mutants in parallel -> MutantResult (KILLED/SURVIVED/STALE/...)
remote.py      the Ray task: one mutant in a warm worker's scratch directory (falsify/mutation/executors.py)
report.py      rows, kill matrix, verdict, Stryker-schema report (falsify/mutation/stryker.py)
cli.py         the command
"""
