"""PacedDispatcher: a ``Dispatcher`` that keeps its own backoff, for callers that poll instead of sleeping.

How it works and why
--------------------
``Dispatcher.plan_read`` answers a refused read with ``ReadPlan.backoff_s`` -- a decision handed to the caller,
not a sleep. A caller with one thread per subscription simply sleeps that long (``collectors.jobs.consumer``).
A caller that serves several subscriptions from one loop (or steps them on a ``ManualClock``, as the dispatch
tests and benchmark do) must instead remember, per subscription, when it may ask again: asking sooner would
count another throttled read at the level and, in Pulsar's model, is not what a dispatcher does.

``PacedDispatcher.plan_read(permits)`` is that memory: it returns ``None`` while the last refusal's backoff runs
(without asking the limiters), ``None`` again when the limiters refuse now (starting a new backoff), and the
``ReadPlan`` to read otherwise. ``charge`` settles a plan as ``Dispatcher.charge`` does.
"""

from __future__ import annotations

import math

from .clock import Clock, seconds_to_ns
from .dispatch import Dispatcher, ReadPlan

__all__ = ["PacedDispatcher"]


class PacedDispatcher:
    """``dispatcher`` asked only when its backoff has run out on ``clock`` (see the module essay)."""

    def __init__(self, dispatcher: Dispatcher, clock: Clock):
        self.dispatcher = dispatcher
        self._clock = clock
        self._retry_at_ns: float = -math.inf  # no refusal yet: the first ask goes through

    def plan_read(self, permits: int, has_backlog: bool = True) -> ReadPlan | None:
        """The plan to read, or None while backing off (the refused plan's ``backoff_s`` from when it came)."""
        now_ns = self._clock.now_ns()  # whole nanoseconds: a backoff ends exactly on a ManualClock step
        if now_ns < self._retry_at_ns:
            return None
        plan = self.dispatcher.plan_read(permits, has_backlog)
        if plan.backoff_s:
            self._retry_at_ns = now_ns + seconds_to_ns(plan.backoff_s)
            return None
        return plan

    def charge(self, msgs: int, bytes_: int, entries: int, plan: ReadPlan) -> None:
        """What the read of ``plan`` really delivered (see ``Dispatcher.charge``)."""
        self.dispatcher.charge(msgs, bytes_, entries, plan)
