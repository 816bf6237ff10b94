"""What the sinks answered this participant's sends: the signals an adaptive limit learns from.

A task that sends to a sink (an HTTP API, a database) behind a shared limit says how each send ended
(``Participant.report_outcome``): taken, refused as too many (429, 503; with the sink's Retry-After), or failed
otherwise. ``OutcomeLog`` adds them up per limit the topic passes that can be adaptive (its topic's and its
tenant's publish limits: ``protocol.rules``), and the grant keeper hands each limit's sum to the control plane
with that limit's next ask (``GrantAsk.outcomes``), where one ``limiter.adaptive.AdaptiveRate`` per limit learns
from every participant's. A refusal wakes the keeper, which asks at once for that limit (the control plane cuts
the rate for everyone at the first signal of an event, and answers a Retry-After as a pause to every asker).
A process that sends with no producer of its own on the limit tells its sums in asks of their own that want
nothing (a refusal at once, the rest within a quarter second): Spark runs the ``post`` of
``df.mapInArrow(throttle_arrow(topic), ...).foreach(post)`` in another Python worker than the limiter. Its sends
are not paced, nor held through a pause (``collectors.spark``: send where the rows are throttled), but what the
sink answered them is news for every sender.
Sums are small and bounded: three counts and a longest Retry-After per limit, whatever the number of sends.
"""

from __future__ import annotations

import email.utils
import math
import threading
import time
from collections.abc import Callable, Mapping

from limiter.adaptive import Outcome, checked_outcome
from limiter.levels import split_topic
from protocol import Outcomes, limit_key

__all__ = ["OutcomeLog", "retry_after_s", "retry_after_from", "MS_HEADERS"]

# a sink's wait in milliseconds, read before ``Retry-After`` (whole seconds in HTTP: a token bucket that is a few
# milliseconds short says "1"): what Azure's services send and its SDKs read first, in this order
MS_HEADERS = ("retry-after-ms", "x-ms-retry-after-ms")


def retry_after_s(value: str | None, now_s: float | None = None) -> float | None:
    """An HTTP ``Retry-After`` in seconds (delay-seconds or an HTTP date), None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            at = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = at.timestamp() - (time.time() if now_s is None else now_s)
    return max(0.0, seconds) if math.isfinite(seconds) else None


def retry_after_from(headers: Mapping[str, str]) -> float | None:
    """The wait a sink's answer asks for, in seconds: its ``retry-after-ms`` (or ``x-ms-retry-after-ms``) if it
    sent a readable one, else its ``Retry-After``; None if none. ``headers``: any mapping whose ``get`` ignores
    case (httpx's and requests' headers do); the names are tried as written here too."""
    for name in MS_HEADERS:
        value = headers.get(name)
        if value:
            try:
                ms = float(value.strip())
            except ValueError:
                continue
            if math.isfinite(ms) and ms >= 0:
                return ms / 1000.0
    return retry_after_s(headers.get("Retry-After"))


def adaptive_keys(topic: str) -> tuple[str, str]:
    """The keys of the limits of ``topic`` ('tenant/ns/topic') that can be adaptive: its topic's, its tenant's."""
    tenant, _, full = split_topic(topic)
    return limit_key("topic", "publish", full), limit_key("tenant", "publish", tenant)


class OutcomeLog:
    """Outcome sums per limit key, since the limit's last answered ask. Thread-safe (tasks add, the keeper
    takes)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        # key -> [ok, throttled, errors, longest Retry-After or -1, slowest send taken or -1, first added at]
        self._sums: dict[str, list[float]] = {}

    def add(self, topic: str, outcome: Outcome | str, n: float = 1, retry_after_s: float | None = None,
            latency_s: float | None = None) -> Outcome:
        """``n`` sends to ``topic`` ended with ``outcome`` (``latency_s``: how long the slowest took); returns it
        parsed."""
        outcome, n, retry_after_s, latency_s = checked_outcome(outcome, n, retry_after_s, latency_s)
        counts = tuple(n if outcome is o else 0.0 for o in (Outcome.OK, Outcome.THROTTLED, Outcome.ERROR))
        slowest = latency_s if outcome is Outcome.OK else None
        with self._lock:
            for key in adaptive_keys(topic):
                self._merge(key, counts, retry_after_s, slowest)
        return outcome

    def waiting(self) -> list[str]:
        """The limits with sums waiting to be told."""
        with self._lock:
            return list(self._sums)

    def since(self, key: str) -> float:
        """When the oldest sum waiting for ``key`` was added (the clock's time; inf: none waits)."""
        with self._lock:
            sums = self._sums.get(key)
            return math.inf if sums is None else sums[5]

    def urgent(self, key: str) -> bool:
        """Whether a refusal waits to be told for ``key``."""
        with self._lock:
            sums = self._sums.get(key)
            return sums is not None and sums[1] > 0

    def take(self, key: str) -> Outcomes | None:
        """The sums of ``key`` for an ask (None: nothing since the last), cleared here; ``restore`` them if the
        ask is not answered."""
        with self._lock:
            sums = self._sums.pop(key, None)
        if sums is None:
            return None
        return Outcomes(ok=sums[0], throttled=sums[1], errors=sums[2], retry_after_s=sums[3] if sums[3] >= 0 else None,
                        slowest_s=sums[4] if sums[4] >= 0 else None)

    def restore(self, key: str, said: Outcomes) -> None:
        """Put back what an unanswered ask carried (added to what came since)."""
        with self._lock:
            self._merge(key, (said.ok, said.throttled, said.errors), said.retry_after_s, said.slowest_s)

    def _merge(self, key: str, counts: tuple[float, float, float], retry_after_s: float | None,
               slowest_s: float | None) -> None:
        """Add (ok, throttled, errors) to ``key``'s sums and keep the longest Retry-After and slowest send (under
        the lock)."""
        sums = self._sums.get(key)
        if sums is None:
            sums = self._sums[key] = [0.0, 0.0, 0.0, -1.0, -1.0, self._clock()]
        for i, count in enumerate(counts):
            sums[i] += count
        if retry_after_s is not None:
            sums[3] = max(sums[3], retry_after_s)
        if slowest_s is not None:
            sums[4] = max(sums[4], slowest_s)

    def forget(self, keep: set[str]) -> None:
        """Drop the sums of limits no pool of this participant holds (nobody asks for them)."""
        with self._lock:
            for key in [k for k in self._sums if k not in keep]:
                del self._sums[key]
