"""A hand-moved clock for ``LiveState`` (which reads wall time through a callable), and reports sent at its time.

Unit tests of the live state move time themselves (``clock.t += 0.9``) instead of sleeping, so staleness and
expiry are exact and instant.
"""

from __future__ import annotations

from typing import Any

from protocol import Report

from .conftest import report


class FakeClock:
    """``clock()`` is ``clock.t`` (seconds), which only the test changes."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def report_at(clock: FakeClock, **kw: Any) -> Report:
    """A validated ``Report`` (see ``conftest.report`` for ``kw``) sent at the clock's current time."""
    return Report.model_validate(report(sent_at=clock.t, **kw))
