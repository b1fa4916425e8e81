"""Boundary mutants: engine-independent planted bugs, injected at the engine's boundary instead of in its source.

A semantic mutant edits the engine's code, so only a project that writes one can prove a pack prediction able to
fail on its engine. A boundary mutant is a toxic in Toxiproxy's sense: one named bug class (a prediction's
`catches`) injected by a wrapper around the adopter's engine object, in process, whatever the engine's language
(a wire engine's client is such an object too). The engine is never edited:

    catalogue.py   the boundary mutants as data: id (the bug class), what it does, the capability it wraps, the
                   pack predictions it must turn red
    wrappers.py    the wrappers, switched on in the falsifiers' pytest by FALSIFY_BOUNDARY_MUTANT=<id>

A boundary proof is weaker than a source mutant's: it shows the prediction's check reaches this engine and fails on
the bug class, not that the engine's own code is tested (docs/mutants.md, "Boundary mutants").
"""

from falsify.engines.boundary.catalogue import CATALOGUE, ENV, ID_PREFIX, REPORT_FILE, BoundaryMutant, by_id

__all__ = ["CATALOGUE", "ENV", "ID_PREFIX", "REPORT_FILE", "BoundaryMutant", "by_id"]
