"""Views built a step at a time: a generator that yields ``None`` at each pause and returns the view.

The views that grow with participants x limits are built on the event loop (``controlplane.renders`` says why), so
they pause every so many entries and let the loop answer reports between their steps; ``run`` drives one to its
end at once, for a caller off the loop (and the tests).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

__all__ = ["Steps", "run", "STEP_ENTRIES", "STEP_PEERS"]

STEP_ENTRIES = 1000   # entries (a participant's bucket, its use of a shared limit) a view builds between pauses
STEP_PEERS = 200      # participants described between pauses
T = TypeVar("T")
Steps = Generator[None, None, T]   # a view built a step at a time: None at each pause, the view as its return


def run(steps: Steps[T]) -> T:
    """Drive ``steps`` to its end without pausing: the view, for a caller off the event loop."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
