"""Where in the interval each participant reports: a phase the control plane gives it, so that reports arrive
spread evenly over the interval instead of at random moments.

Why
---
Every participant reports once an interval. Left to chance (each starts when it starts, and after a change of
interval waits a random half to one and a half of the new one), the reports of many participants arrive as a
Poisson stream and meet: one that comes while another is being answered waits for it. Where a report is slow that
wait is the p99: 100 participants of 5,000 limits, told 30 s, take 53 ms of the loop a report and send 3.3 reports
a second, 18 % of a core, yet the slowest of the 25 reports in an 8-s window read 111-177 ms, each a report that
came while one or two others were answered. Told a phase each, the same participants' slowest read 57-94 ms (the
benchmark's curve). The answer to every report already says the interval to report at; it now also says when to
send the next one (``nextReportInSeconds``), and participants follow it, as they follow the interval.

The rule
--------
Each live participant holds a ``slot``: the least one free when it first reports (slots of departed participants
are given again, so ``n`` live participants hold about the slots 0..n-1, whatever came and went). Slot ``k``'s
phase is ``frac(k x GOLDEN)`` of the interval (``GOLDEN`` = (sqrt 5 - 1) / 2): the golden-ratio sequence, whose
first ``n`` points, for any ``n``, cut the interval into gaps of at most three lengths, the longest 2.6 times the
shortest -- so however many participants there are, and without moving any one of them as others come, the
reports stay about 0.45 to 1.46 of an even spacing apart. The answer tells each participant the time from now
to the next moment of its phase on the control plane's clock that is at least ``EARLIEST`` (a half) of the interval
away: a half to one and a half of the interval, one on average, so that a change of interval brings no reports
more than the participants' own random spread did (``collectors.report_schedule.SPREAD_FROM``).

Worked example: 100 participants told 30 s hold the slots 0..99; the gaps between their phases are 0.15, 0.24 or
0.39 s (0.50, 0.81 and 1.32 of the 0.3-s even spacing), so a report of 53 ms never waits for another. Slot 1's
phase is 0.618 x 30 = 18.54 s: answered at 3,000,000.00 s on the control plane's clock (a whole number of 30-s
intervals), told 18.54 s (at least 15); answered again at 3,000,018.60, told 29.94 s.

Consistency: the phase is reckoned on the control plane's clock and counted by the participant from the moment the
answer reached it, so a report lands at its phase plus the answer's way back and the time the participant takes to
build the next report -- the same few milliseconds every time, so the spacing holds. A participant that does not
read the field (an older one) keeps its own spread; one whose report failed keeps its backoff; a slot lives as
long as its participant does in ``controlplane.state.LiveState``, which alone takes and frees them.
"""

from __future__ import annotations

import heapq
import math

__all__ = ["ReportSlots", "next_report_in_s", "GOLDEN", "EARLIEST"]

GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
EARLIEST = 0.5   # of the interval: the soonest a participant is told to report again


def next_report_in_s(slot: int, interval_s: float, now_s: float) -> float:
    """Seconds from ``now_s`` to the next moment of ``slot``'s phase at least ``EARLIEST`` of ``interval_s`` away
    (less than one and a half intervals)."""
    phase_s = ((slot * GOLDEN) % 1.0) * interval_s
    earliest_s = now_s + EARLIEST * interval_s
    at_s = phase_s + math.ceil((earliest_s - phase_s) / interval_s) * interval_s
    return at_s - now_s


class ReportSlots:
    """The slots of the live participants: ``take`` gives a new participant the least free one, ``free`` returns
    it. Not thread-safe: its owner holds its lock."""

    def __init__(self) -> None:
        self._slot: dict[str, int] = {}
        self._freed: list[int] = []   # a heap: the least freed slot first
        self._next = 0                # no slot at or above this was ever taken

    def __len__(self) -> int:
        return len(self._slot)

    def take(self, participant_id: str) -> int:
        """The participant's slot, taken now if it has none."""
        slot = self._slot.get(participant_id)
        if slot is None:
            if self._freed:
                slot = heapq.heappop(self._freed)
            else:
                slot, self._next = self._next, self._next + 1
            self._slot[participant_id] = slot
        return slot

    def get(self, participant_id: str) -> int | None:
        return self._slot.get(participant_id)

    def free(self, participant_id: str) -> None:
        slot = self._slot.pop(participant_id, None)
        if slot is not None:
            heapq.heappush(self._freed, slot)
