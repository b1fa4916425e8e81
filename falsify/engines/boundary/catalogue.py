"""The boundary mutants as data: each is one bug class, named as the predictions' `catches` name it, the engine
capability whose objects it wraps, and the pack predictions it must turn red (its `kills`, as a mutant file's).

Kept apart from wrappers.py so that lint and the mutants runner read the catalogue without importing numpy or
building a wrapper.
"""

from __future__ import annotations

from dataclasses import dataclass

ENV = "FALSIFY_BOUNDARY_MUTANT"  # the id switched on in the falsifiers' pytest (harness/plugin.py wraps the engine)
ID_PREFIX = "boundary-"  # a boundary mutant's id in a mutant run and its report: boundary-<class>
# Its "file" in the Stryker report: no file of the project, so no staleness check reads it as one (proven.py)
REPORT_FILE = "<falsify boundary mutants>"


@dataclass(frozen=True, slots=True)
class BoundaryMutant:
    id: str  # the bug class it plants, as `catches` names it
    description: str
    capability: str  # the engine capability whose objects it wraps; an engine without it is not mutated
    kills: tuple[str, ...]  # pack predictions it must turn red


def _cancel(n: int) -> str:
    return f"FALSIFY-SERVE-CANCEL-{n:03d}"


def _prefill(n: int) -> str:
    return f"FALSIFY-SERVE-PREFILL-{n:03d}"


def _sample(n: int) -> str:
    return f"FALSIFY-SERVE-SAMPLE-{n:03d}"


CATALOGUE: tuple[BoundaryMutant, ...] = (
    BoundaryMutant(
        "poll-after-forward",
        "the poll that finds the run cancelled comes after the forward: that forward runs and is thrown away (a "
        "decode forward on the last emitted token, or the prompt's prefill when nothing was emitted)",
        "generate",
        (_cancel(2), _cancel(4), _cancel(8), _cancel(10)),
    ),
    BoundaryMutant(
        "poll-deleted",
        "the cancel token is never polled: the engine is given no token, so a cancelled run goes on",
        "generate",
        (_cancel(1), _cancel(3), _cancel(4), _cancel(9)),
    ),
    BoundaryMutant(
        "forward-after-last-token",
        "a run that ends by max_tokens or a stop token feeds its last token through one more decode forward",
        "generate",
        (_cancel(5), _cancel(7), _cancel(8)),
    ),
    BoundaryMutant(
        "record-misses-a-decode",
        "the run record (and a wire engine's claims) counts one decode forward fewer than ran",
        "generate",
        (_cancel(11),),
    ),
    BoundaryMutant(
        "cancel-flushes-stale-token",
        "a cancelled run flushes one more token before it stops, its last token again (sampled from the logits it "
        "already held)",
        "generate",
        (_cancel(6),),
    ),
    BoundaryMutant(
        "session-decode-keeps-stale-logits",
        "a run on a used session takes its first token from stale logits: the first token of the session's "
        "earlier run",
        "generate",
        (_cancel(13),),
    ),
    BoundaryMutant(
        "state-reset-between-chunks",
        "each prefill chunk after the first computes its logits as if the state had been reset (on a fresh "
        "state); the state itself still advances",
        "prefill",
        (_prefill(1), _prefill(2), _prefill(11)),
    ),
    BoundaryMutant(
        "prefill-polls-after-the-chunk",
        "a stepped prefill's run(cancel) polls the cancel token after each chunk instead of before it: a cancel "
        "seen at the poll before chunk k + 1 lets that chunk run",
        "prefill",
        (_prefill(3),),
    ),
    BoundaryMutant(
        "cut-at-multiples-of-the-cap",
        "a prefill chunk that crosses a multiple of chunk_cap is cut there too (two forward calls)",
        "prefill",
        (_prefill(21),),
    ),
    BoundaryMutant(
        "state-copy-aliases",
        "a state's copy() returns the state itself, not an independent copy",
        "prefill",
        (_prefill(20),),
    ),
    BoundaryMutant(
        "temperature-ignored",
        "the sampler samples at temperature 1 whatever it was given (bad temperatures are still refused)",
        "sample",
        (_sample(1), _sample(2), _sample(3)),
    ),
    BoundaryMutant(
        "top-k-ignored",
        "the sampler keeps every token whatever top_k it was given (a bad top_k is still refused)",
        "sample",
        (_sample(1), _sample(2), _sample(3)),
    ),
    BoundaryMutant(
        "top-p-ignored",
        "the sampler keeps every token whatever top_p it was given (a bad top_p is still refused)",
        "sample",
        (_sample(1), _sample(2), _sample(3)),
    ),
    BoundaryMutant(
        "top-p-unchecked",
        "a top_p outside (0, 1] is not refused: the sampler runs as if none was given",
        "sample",
        (_sample(5),),
    ),
    BoundaryMutant(
        "greedy-in-half-precision",
        "greedy picks the largest logit after rounding the logits to float16",
        "sample",
        (_sample(4),),
    ),
)


def by_id(mutant_id: str) -> BoundaryMutant | None:
    return next((m for m in CATALOGUE if m.id == mutant_id), None)
