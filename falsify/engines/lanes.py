"""What a lane host (the engine protocol's LaneHost) derives from its rounds, defined once for every host: the wire
client's (falsify/engines/wire/lanes.py, from the engine's events) and the reference engine's (reference/lanes.py,
from its own lanes). A host gives `busy()`, `round()` and `_stream(stream)`, its record of a stream's tokens and the
round each came in; LaneRounds gives `run`, `tokens` and `decode_gaps` (the observable the serving pack's lane
contracts judge).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from itertools import pairwise
from typing import Protocol


class StreamRecord(Protocol):
    tokens: list[int]  # the stream's emitted tokens
    token_rounds: list[int]  # the round each of them came in


class LaneRounds(ABC):
    @abstractmethod
    def busy(self) -> bool:
        """Whether a round would do any work."""

    @abstractmethod
    def round(self) -> object:
        """One decode step for every decoding stream, then at most one prefill chunk."""

    @abstractmethod
    def _stream(self, stream: int) -> StreamRecord:
        """The stream's record; StreamError when the host has no such stream."""

    def run(self, max_rounds: int = 1_000_000) -> int:
        """Rounds until idle; returns how many ran."""
        n = 0
        while self.busy() and n < max_rounds:
            self.round()
            n += 1
        return n

    def tokens(self, stream: int) -> list[int]:
        return list(self._stream(stream).tokens)

    def decode_gaps(self, stream: int) -> list[int]:
        """For each emitted token after the first, the rounds since the stream's previous token."""
        return [b - a for a, b in pairwise(self._stream(stream).token_rounds)]
