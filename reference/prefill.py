"""Stepped prefill: a prompt's forward pass cut into planned chunks, run one chunk per `step` call.

The whole pass is `Prefill.open` then `step` until it reports done (`run`); a lane host calls `step` once per
round so that other streams decode between two chunks. Both drivers run the same chunk body over the same
cuts, so a reply never depends on which driver ran it.

A cut is where one `model.forward` call ends and the next begins. `forward` groups tokens into internal chunks
of `config.chunk_size` aligned to the call's first token, so a pass is byte-identical to one forward call only
if every cut lies on that grid: the chunk width must be a multiple of `chunk_size`. Cuts are memoryless: the
next cut depends only on the current position, so a pass resumed from any of its cuts (after a cancel, or from
a kept prefix) cuts exactly as the whole pass does from there. Chunked prefill as in Sarathi-Serve (arXiv
2403.02310) and llama.cpp's server, which feeds a prompt `n_batch` tokens per `llama_decode`.

The pass is the harness's stepped prefill (falsify.engines.prefill.SteppedPrefill: the checks of the prompt, marks
and starts, the restore of a kept prefix, what a chunk's logits are kept as, and `run`; issue #29, the harness owns
its instruments); this module plans the cuts ahead (`plan_cuts`: `Prefill.cuts`, `chunks_run`, `remaining_cuts()`),
lets a chunk-invariant model change the width between chunks, and makes each chunk's forward call itself.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from falsify.engines.prefill import Kept as KeptPrefix
from falsify.engines.prefill import PrefillError, SteppedPrefill, chunk_invariant, chunk_width

__all__ = ["KeptPrefix", "Prefill", "PrefillError", "chunk_invariant", "chunk_width", "next_cut", "plan_cuts"]


def next_cut(pos: int, end: int, width: int, planned: Sequence[int]) -> int:
    """Where the chunk starting at `pos` ends: the first of pos + width, the next planned start, the end.

    planned: sorted positions at which a chunk must start (kept marks and requested starts).
    """
    i = bisect.bisect_right(planned, pos)
    stop = planned[i] if i < len(planned) else end
    return min(pos + width, stop, end)


def plan_cuts(start: int, end: int, width: int, planned: Iterable[int] = ()) -> tuple[int, ...]:
    """Chunk ends of a pass over positions [start, end); each chunk ends at `next_cut` of its start."""
    marks = sorted(set(planned))
    cuts = []
    pos = start
    while pos < end:
        pos = next_cut(pos, end, width, marks)
        cuts.append(pos)
    return tuple(cuts)


class Prefill(SteppedPrefill):
    """One prompt's prefill over one stream state: `open`, then `step` until done.

    After open, `state` is the stream's state (a restored copy when a kept prefix was used). `logits` holds
    the last forwarded token's logits (f32[vocab]) once a chunk has run; `kept` collects a KeptPrefix at each
    mark; `cuts` are the chunk ends planned from `start`, of which `chunks_run` have run.
    """

    def __init__(
        self, model: Any, state: Any, prompt: tuple[int, ...], width: int, planned: list[int], marks: set[int]
    ) -> None:
        super().__init__(model, state, prompt, width, planned, marks)
        self.start = int(state.pos)
        self.cuts = plan_cuts(self.start, len(prompt), width, planned)
        self.chunks_run = 0

    def step(self, width: int | None = None) -> bool:
        """Run exactly one chunk; True when the pass is done. The chunk's forward call is the engine's own (where
        mutants/state-reset-between-chunks.yaml plants its bug); `ran` records what it gave.

        width: a new chunk width from here on; ignored (the cuts never move) unless the model declares chunk
        invariance.
        """
        if self.done:
            raise PrefillError(f"prefill of {len(self.prompt)} tokens is already done")
        if width is not None and chunk_invariant(self.model) and width != self.width:
            self.width = chunk_width(self.model, width)
            self.cuts = self.cuts[: self.chunks_run] + plan_cuts(
                self.pos, len(self.prompt), self.width, self.planned
            )
        start, end = self.pos, self.cuts[self.chunks_run]
        # [end - start, vocab]
        logits = self.model.forward(np.asarray(self.prompt[start:end], np.int64), self.state)
        self.chunks_run += 1
        assert self.state.pos == end, (self.state.pos, end)
        self.ran(end, logits)
        return self.done

    def remaining_cuts(self) -> tuple[int, ...]:
        return self.cuts[self.chunks_run :]
