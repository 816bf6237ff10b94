"""ThrottleTracker: one pause switch, many reasons (Pulsar's ServerCnxThrottleTracker, PIP-322).

How it works and why
--------------------
Several independent limiters may want the same producer paused at once: the topic's rate, the broker's rate, a
resource group, too many pending publish requests, too much buffered memory. If each of them switched the
producer on and off directly, the first to clear would resume a producer another one still holds -- the bug
Pulsar had with Netty's autoread flag. So limiters never pause anyone themselves. They ``mark`` a reason on the
producer's ``ThrottleTracker`` and ``unmark`` it when it clears; the tracker pauses on the first reason and
resumes when the last one clears, calling ``on_pause`` / ``on_resume`` exactly at those two transitions.

Two kinds of reason (``ThrottleReason.reentrant``):
- *rate* reasons are reentrant, counted: each limiter level may mark the same reason more than once (every send
  that finds the bucket empty enqueues the producer once more) and must unmark it as often.
- *capacity* reasons are on/off: a second ``mark`` of a reason already on is dropped (and ``mark`` returns
  False), a single ``unmark`` clears it.

Consistency rules
-----------------
1. The producer is paused iff the sum of all reason counts is > 0.
2. ``on_pause`` runs on the 0 -> 1 transition, ``on_resume`` on the 1 -> 0 transition, each exactly once, in
   order, outside the tracker's lock (so a callback may call back into the tracker).
3. An ``unmark`` of a reason whose count is already 0 is a bug in the caller: it is counted in
   ``mismatched_unmarks``, logged once per reason, and changes nothing (the count never goes negative).

Worked example: topic rate marks (total 1: pause), broker rate marks (2), topic rate marks again (3), topic
unmarks twice (1), broker unmarks (0: resume). A stray topic unmark now is counted as a mismatch; still 0.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from enum import Enum

__all__ = ["ThrottleReason", "ThrottleTracker"]

log = logging.getLogger(__name__)


class ThrottleReason(Enum):
    """Why a producer is paused. ``level`` names the limiter level for metrics (PIP-406 ``reason`` label)."""

    BROKER_RATE = ("broker", True)
    RESOURCE_GROUP_RATE = ("resource_group", True)
    TENANT_RATE = ("tenant", True)
    NAMESPACE_RATE = ("namespace", True)
    TOPIC_RATE = ("topic", True)
    PENDING_PUBLISH_REQUESTS = ("pending_publish_requests", False)
    PUBLISH_BUFFER_MEMORY = ("publish_buffer_memory", False)
    OUTBOUND_BUFFER_FULL = ("outbound_buffer_full", False)

    def __init__(self, level: str, reentrant: bool):
        self.level = level
        self.reentrant = reentrant


class ThrottleTracker:
    """Counts throttle reasons for one producer holder and switches it between running and paused."""

    def __init__(
        self,
        on_pause: Callable[[], None] | None = None,
        on_resume: Callable[[], None] | None = None,
        name: str = "",
    ):
        self.name = name
        self._on_pause = on_pause
        self._on_resume = on_resume
        self._counts: dict[ThrottleReason, int] = {}
        self._total = 0
        self._lock = threading.Lock()
        self._transitions = threading.Lock()  # keeps callbacks in transition order
        self.mismatched_unmarks = 0
        self._warned: set[ThrottleReason] = set()

    def mark(self, reason: ThrottleReason) -> bool:
        """Add one count of ``reason``; False if it was an on/off reason already on (nothing changed)."""
        with self._transitions:
            with self._lock:
                count = self._counts.get(reason, 0)
                if count and not reason.reentrant:
                    return False
                self._counts[reason] = count + 1
                self._total += 1
                paused_now = self._total == 1
            if paused_now and self._on_pause:
                self._on_pause()
            return True

    def unmark(self, reason: ThrottleReason) -> bool:
        """Remove one count of ``reason``; False (and reported) if it had none."""
        with self._transitions:
            with self._lock:
                count = self._counts.get(reason, 0)
                if count == 0:
                    self.mismatched_unmarks += 1
                    first = reason not in self._warned
                    self._warned.add(reason)
                else:
                    if count == 1:
                        del self._counts[reason]
                    else:
                        self._counts[reason] = count - 1
                    self._total -= 1
                    resumed_now = self._total == 0
            if count == 0:
                if first:
                    log.error("throttle tracker %r: unmark of %s without a matching mark (ignored; further "
                              "mismatches are only counted)", self.name, reason.name)
                return False
            if resumed_now and self._on_resume:
                self._on_resume()
            return True

    @property
    def throttled(self) -> bool:
        return self._total > 0

    def count(self, reason: ThrottleReason) -> int:
        return self._counts.get(reason, 0)

    def reasons(self) -> dict[ThrottleReason, int]:
        with self._lock:
            return dict(self._counts)

    def __repr__(self) -> str:
        held = ", ".join(f"{r.name}={c}" for r, c in self.reasons().items())
        return f"ThrottleTracker({self.name!r}, {held or 'running'})"
