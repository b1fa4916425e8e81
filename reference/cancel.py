"""A cancel token a generation loop polls before each forward pass: the harness's counting token
(falsify.engines.cancel.HarnessCancel, issue #29: the harness owns its instruments and the engine uses them),
under the reference engine's name.

Three kinds of token share one class:
  - `CancelToken()`: cancelled by `cancel()`, which any thread may call;
  - `CancelToken.with_budget(n)`: also cancels by itself once n polls have been answered false, so a test can
    stop a run after exactly n tokens without racing a thread;
  - `CancelToken.never()`: never cancels, and its polls cost nothing and are not counted (it reports 0 polls).

`is_cancelled()` is the poll a generation loop makes and counts; `peek()` is for onlookers (another thread, a
test) and counts nothing, so looking at a token never changes what the run observes.
"""

from __future__ import annotations

from falsify.engines.cancel import HarnessCancel


class CancelToken(HarnessCancel):
    __slots__ = ()
