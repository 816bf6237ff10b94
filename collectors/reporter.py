"""The reporter: one daemon thread per participant that reports every interval and applies the answer.

How it works and why
--------------------
Every round (``run_once``) the reporter

1. measures, for every shared limit this participant uses, ``usage`` = Δadmitted / Δt over the round (msgs and
   bytes per second, from the limiters' cumulative counters) and ``demand`` (below);
2. decides which usage entries to send (PIP-82 suppression, below) and builds one ``protocol.Report``:
   the usage entries, the keys left unchanged, bucket / queue / counter snapshots of every limiter, the offload
   and mutation-quota snapshots -- the report is sent every round whatever is suppressed, because it is also the
   heartbeat the control plane expires participants by (2 intervals) and what the dashboard shows;
3. POSTs it (``ControlPlaneClient``; short timeout) and applies the answer (``Applier``): new policies when the
   version moved; the usage entries the control plane holds nothing for (``usageMissing``) go in full next
   round (the report asks for no usage map: the shares come from grants). The control plane's
   ``reportIntervalSeconds`` and ``nextReportInSeconds`` (this participant's place in the interval) say when the
   next round comes: ``collectors.report_schedule``. (The tokens of shared limits come between reports, from the
   grant keeper: ``collectors.grants``; usage and demand are reported for the dashboard and the metrics.)

Demand and suppression: ``collectors.usage``; the report itself: ``collectors.report_builder``.

Failure
-------
Any ``ControlPlaneError`` keeps the last policies (fail-static) and puts the shared limits under the outage rules
(``collectors.grants``: the pool, then the static split ``safe`` -- the limit is held and nobody who was sending
stalls), logs once per outage (a warning, and an info line on recovery), and the next attempt waits
``Backoff`` (exponential from the interval, capped, jittered: ``collectors.report_schedule``) instead of the
interval. A restarted control plane re-learns what is spent before it hands out more (learning mode,
``controlplane.grants``). Nothing in the hot path ever waits on any of this.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import protocol as wire
from limiter.clock import Clock
from limiter.dispatch import DEFAULT_BACKOFF_S
from limiter.levels import PublishLimits
from limiter.mutation import MutationQuotaRegistry
from limiter.offload import OffloadThrottle
from limiter.policy import Level

from .apply import DISPATCH, PUBLISH, SHARED_LEVELS, Applier
from .client import ControlPlaneError, ParticipantClient
from .dispatching import DispatchLimits
from .identity import Identity
from .idle_limiters import IdleLimiters
from .report_builder import build_report
from .report_schedule import ReportSchedule
from .usage import Suppression, UsageMeter

__all__ = ["Reporter", "Sources"]

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class Sources:
    """What the reporter reads and drives, handed to it by the participant (``collectors.runtime``)."""

    identity: Identity
    clock: Clock
    applier: Applier
    limits: PublishLimits
    dispatch: DispatchLimits
    offload: OffloadThrottle
    mutation_quotas: MutationQuotaRegistry


class _OutageLog:
    """Logs the start of an outage once, its end once; attempts in between go to debug."""

    def __init__(self, url: str, now_s: Callable[[], float]):
        self.url, self._now_s = url, now_s
        self.since: float | None = None
        self.attempts = 0

    def failed(self, error: Exception) -> None:
        self.attempts += 1
        if self.since is None:
            self.since = self._now_s()
            log.warning("throttlescope: control plane %s unreachable (%s); keeping the last limits and retrying "
                        "with backoff (logged once until it is back)", self.url, error)
        else:
            log.debug("throttlescope: control plane still unreachable (%s)", error)

    def succeeded(self) -> bool:
        """True if this ends an outage (and logs it)."""
        if self.since is None:
            return False
        log.info("throttlescope: control plane %s reachable again after %.1f s (%d failed attempts)", self.url,
                 self._now_s() - self.since, self.attempts)
        self.since, self.attempts = None, 0
        return True


class Reporter:
    """Reports every interval and applies the answers; ``start()`` runs it on a daemon thread."""

    def __init__(self, participant: Sources, client: ParticipantClient, *, interval_s: float, tolerance_pct: float,
                 max_rounds: int, backoff_cap_s: Callable[[float], float], wall_s: Callable[[], float] = time.time,
                 rng: Callable[[], float] | None = None):
        self.p = participant
        self.client = client
        self.schedule = ReportSchedule(interval_s, backoff_cap_s, **({"rng": rng} if rng else {}))
        self.suppression = Suppression(tolerance_pct, max_rounds)
        self.meter = UsageMeter()
        self.idle = IdleLimiters()   # limiters nothing used for a while: forgotten after an answered round
        self._idle_keys: tuple[list, list] = ([], [])
        self._wall = wall_s
        self._now_s = lambda: participant.clock.now_ns() / 1e9
        self._outage = _OutageLog(client.url, self._now_s)
        self._last_round_s = self._now_s()
        self.seq = 0
        self.rounds = 0
        self.failures = 0
        self.last_error: str | None = None
        self.last_report: wire.Report | None = None
        self.last_answer: wire.ReportResponse | None = None
        self.ready = threading.Event()     # set by the first successful round
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._round_lock = threading.Lock()
        self._bug_logged = False

    # --- the thread ---------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="throttlescope-reporter", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 1.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            try:
                ok = self.run_once()
            except Exception:  # noqa: BLE001 - a bug must not kill the reporter; keep the limits, keep trying
                if not self._bug_logged:
                    log.exception("throttlescope: a report round failed unexpectedly; limits unchanged, retrying "
                                  "with backoff (further failures like this are logged at debug level)")
                    self._bug_logged = True
                else:
                    log.debug("throttlescope: report round failed again", exc_info=True)
                ok = False
            due = self.schedule.next_due(ok, due, time.monotonic())

    @property
    def interval_s(self) -> float:
        """The interval this participant reports in (the control plane's, once told)."""
        return self.schedule.interval_s

    # --- one round ----------------------------------------------------------------------------------------

    def run_once(self) -> bool:
        """Measure, report, apply. True if the control plane answered; False (limits unchanged) otherwise."""
        with self._round_lock:
            return self._round()

    def _round(self) -> bool:
        p = self.p
        now = self._now_s()
        self.rounds += 1
        snapshots, measured = self._measure(now)
        send, unchanged = self.suppression.plan(measured)
        self.seq += 1
        report = build_report(p.identity.to_wire(), self.seq, self._wall(), self.interval_s, p.applier.version,
                              send, unchanged, snapshots, fair=p.applier.grants.fair, offload=p.offload.snapshot(),
                              mutations=p.mutation_quotas.snapshot())
        self.last_report = report
        try:
            answer = self.client.report(report)
        except ControlPlaneError as e:
            self.failures += 1
            self.last_error = str(e)
            self.suppression.force()
            self._outage.failed(e)
            p.applier.grants.unreachable()
            p.applier.refresh()
            return False
        self._outage.succeeded()
        self.last_error = None
        self.last_answer = answer
        if answer.accepted:
            self.suppression.commit(send, unchanged)
        else:
            log.debug("throttlescope: report %d not accepted: %s", self.seq, answer.reason)
            self.suppression.force()
        self.suppression.force(k for k in answer.usageMissing if k in measured)
        p.applier.grants.reachable()
        p.applier.apply(answer.policies)
        was_s = self.interval_s
        if self.schedule.answered(answer.reportIntervalSeconds, answer.nextReportInSeconds, time.monotonic()):
            log.info("throttlescope: reporting every %g s, as the control plane asks (was %g s)", self.interval_s,
                     was_s)
            self.client.timeout_s = wire.report_timeout_s(self.interval_s)
        self.ready.set()
        self._forget_idle()
        return True

    def _forget_idle(self) -> None:
        """Drop the limiters this round found idle (``collectors.idle_limiters``)."""
        publish, dispatch = self._idle_keys
        self._idle_keys = ([], [])
        gone = [(PUBLISH, *key) for key in self.p.limits.forget(publish)]
        gone += [(DISPATCH, *key) for key in self.p.dispatch.forget(dispatch)]
        if gone:   # (the tracker lets them go at the next round's end: not seen then)
            log.debug("throttlescope: forgot %d limiters nothing used for %g s", len(gone), self.idle.idle_s)

    def _idle(self, direction: str, level: Level, name: str, admitted: float, held: bool,
              balance: tuple[float | None, float | None], now: float) -> bool:
        """Whether this round finds the limiter idle long enough to forget (not the broker's: every producer
        passes it; not a pool that holds tokens)."""
        pool = self.p.applier.pooled(level, direction, name) is not None
        held = held or level is Level.BROKER or (pool and any((b or 0.0) > 1e-9 for b in balance))
        return self.idle.look((direction, level, name), admitted, held, now)

    def _measure(self, now: float) -> tuple[dict, dict[str, wire.UsageValues]]:
        """Snapshots of every limiter, and this round's usage and demand for each reported shared limit."""
        p, applier = self.p, self.p.applier
        since = self._last_round_s
        self._last_round_s = now
        publish = p.limits.snapshots()
        producers = p.limits.producer_counts()
        measured: dict[str, wire.UsageValues] = {}
        seen = []
        idle_publish, idle_dispatch = [], []
        for s in publish:
            level = Level(s.level)
            balance = tuple(b.tokens for b in s.buckets)
            if self._idle(PUBLISH, level, s.name, s.admitted_msgs + s.admitted_bytes,
                          bool(producers.get((level, s.name)) or s.queue), balance, now):
                idle_publish.append((level, s.name))
            if level not in SHARED_LEVELS:
                continue
            key = wire.limit_key(level.value, PUBLISH, s.name)
            seen.append(key)
            values = self.meter.measure(key, now, s.admitted_msgs, s.admitted_bytes, s.throttle_time_s,
                                        producers.get((level, s.name), 0), s.rate,
                                        max(since, applier.created_at.get(key, since)))
            if applier.reports(level, PUBLISH, s.name):
                measured[key] = values
        dispatch = []
        backoff_s = float(p.dispatch.options.get("backoff_s", DEFAULT_BACKOFF_S))
        counts = p.dispatch.dispatcher_counts()
        for lim in p.dispatch.limiters():
            msgs, bytes_ = p.dispatch.admitted(lim.level, lim.name)
            dispatch.append((lim, lim.snapshot(), msgs, bytes_))
            if self._idle(DISPATCH, lim.level, lim.name, msgs + bytes_, bool(counts.get((lim.level, lim.name))),
                          lim.balance(), now):
                idle_dispatch.append((lim.level, lim.name))
            if lim.level not in SHARED_LEVELS:
                continue
            key = wire.limit_key(lim.level.value, DISPATCH, lim.name)
            seen.append(key)
            values = self.meter.measure(key, now, msgs, bytes_, lim.throttled_count * backoff_s,
                                        counts.get((lim.level, lim.name), 0), lim.rate,
                                        max(since, applier.created_at.get(key, since)))
            if applier.reports(lim.level, DISPATCH, lim.name):
                measured[key] = values
        self.meter.forget(seen)
        self.idle.end_round()
        self._idle_keys = (idle_publish, idle_dispatch)
        return {"publish": publish, "dispatch": dispatch}, measured
