"""The reporter: one daemon thread per participant that reports every interval and applies the answer.

How it works and why
--------------------
Every round (``run_once``) the reporter

1. measures, for every shared limit this participant uses, ``usage`` = Δadmitted / Δt over the round (msgs and
   bytes per second, from the limiters' cumulative counters) and ``demand`` (below);
2. decides which usage entries to send (PIP-82 suppression, below) and builds one ``metrics.report.Report``:
   the usage entries, the keys left unchanged, bucket / queue / counter snapshots of every limiter, the offload
   and mutation-quota snapshots -- the report is sent every round whatever is suppressed, because it is also the
   heartbeat the control plane expires participants by (2 intervals) and what the dashboard shows;
3. POSTs it (``ControlPlaneClient``; short timeout) and applies the answer (``Applier``): new policies when the
   version moved. The control plane's ``reportIntervalSeconds`` is adopted, since its expiry rule counts in its
   intervals. (The tokens of shared limits come between reports, from the grant keeper: ``collectors.grants``;
   usage and demand are reported for the dashboard and the metrics.)

Demand
------
The limiters count what they admitted, not what producers wanted: a paused producer does not try. But a
limiter knows how long its producers waited in its queue (``throttle_time_s``, producer-seconds, including the
wait in progress), and PublishLimits how many producers are bound to it. Over a round of Δt with n producers,
``paused = Δthrottle_time / (n * Δt)`` is the fraction of time they were held by *this* level, and a producer
sends at its wanted pace while it runs, so ``demand = usage / max(0.05, 1 - paused)``: a participant admitted
300/s while paused 57 % of the time wanted about 700/s. (Pauses by *other* levels do not count: the demand at a
level is what would pass it if it did not limit.) Two corrections: a participant paused for at least half the
round asks for at least twice its current local rate -- PIP-82's "steal" step, which also lifts one that was
starved outright (usage 0, paused throughout) -- and the 0.05 floor bounds one round's estimate to 20 x usage.
For dispatch, a read sent into backoff counts as ``backoff_s`` of pause for one dispatcher.

What it cannot see, and why that is acceptable: a blocked ``acquire`` holds one send, not a backlog, so a
producer throttled on every send (it sends the moment it is released and is paused again at once) shows only
"paused nearly always"; its pace is unobservable and the estimate is the steal step or the 20 x cap. Between
throttles a producer runs in short bursts, so ``usage / running time`` counts n sends over n - 1 gaps and leans
high. Both errors point the same way -- a throttled participant asks for *more* than it has -- which is what
the fair split needs to move; an over-ask is corrected the next round, when the participant, no longer held,
reports its usage as its demand (and max-min fairness caps every ask at the water level anyway). Several
producers on one limiter share one estimate (their average pause). A cheap attempted-send counter would not help:
a paused producer does not attempt.

Suppression (PIP-82)
--------------------
Per shared limit, usage and demand are sent when either moved by more than the tolerance (5 %) since they were
last sent (``limiter.quota.need_to_report``, called for usage and for demand), or when the limit was left out for
``max_rounds - 1`` rounds in a row (the mandatory report every ``max_rounds``), or when a full report is forced.
Otherwise its key goes in ``usage_unchanged`` and the control plane keeps the values it holds. A full report is
forced after any failed or refused round (a restarted control plane has to re-learn usage), and for a key whose
answer's map lacks this participant (the control plane held nothing for it).

Failure
-------
Any ``ControlPlaneError`` keeps the last policies (fail-static) and puts the shared limits under the outage rules
(``collectors.grants``: the pool, then the static split ``safe`` -- the limit is held and nobody who was sending
stalls), logs once per outage (a warning, and an info line on recovery), and the next attempt waits
``Backoff`` (exponential from the interval, capped, jittered) instead of the interval. A restarted control plane
re-learns what is spent before it hands out more (learning mode, ``controlplane.grants``). Nothing in the hot path
ever waits on any of this.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from limiter.dispatch import DEFAULT_BACKOFF_S
from limiter.policy import Level, Rate
from limiter.publish import LimiterSnapshot
from limiter.quota import need_to_report
from metrics import report as wire

from .apply import DISPATCH, PUBLISH, SHARED_LEVELS
from .client import Backoff, ControlPlaneError, request_timeout_s
from .config import MAX_INTERVAL_S, MIN_INTERVAL_S

if TYPE_CHECKING:
    from .runtime import Participant

__all__ = ["Reporter", "Suppression", "UsageMeter", "estimate_demand", "demand_factor", "MIN_RUNNING_FRACTION",
           "STEAL_PAUSED"]

log = logging.getLogger(__name__)

MIN_RUNNING_FRACTION = 0.05   # demand <= 20 x usage in one round
STEAL_PAUSED = 0.5            # paused at least this long: ask for at least twice the current local rate


def demand_factor(paused_fraction: float) -> float:
    """demand / usage for producers held ``paused_fraction`` of the time: 1 / max(0.05, 1 - paused)."""
    return 1.0 / max(MIN_RUNNING_FRACTION, 1.0 - min(1.0, max(0.0, paused_fraction)))


def estimate_demand(usage: float, paused_fraction: float, local_rate_per_s: float = math.inf) -> float:
    """What producers wanted per second, from what they got (``usage``) and how long they were held (see the
    module essay): ``usage / max(0.05, 1 - paused)``, and at least twice the local rate when mostly paused."""
    demand = usage * demand_factor(paused_fraction)
    if paused_fraction >= STEAL_PAUSED and math.isfinite(local_rate_per_s):
        demand = max(demand, 2.0 * local_rate_per_s)
    return demand


@dataclass(slots=True)
class _Baseline:
    t: float
    msgs: float
    bytes: float
    paused_s: float


class UsageMeter:
    """Cumulative counters -> per-round rates (usage and demand) per limit key."""

    def __init__(self) -> None:
        self._base: dict[str, _Baseline] = {}

    def measure(self, key: str, now_s: float, admitted_msgs: float, admitted_bytes: float, paused_s: float,
                holders: int, rate: Rate, since_s: float) -> wire.UsageValues:
        """Cumulative counters in (``paused_s``: holder-seconds paused); ``since_s``: start of the window for a
        key seen for the first time. Usage and demand per second over the window out."""
        base = self._base.get(key) or _Baseline(min(since_s, now_s), 0.0, 0.0, 0.0)
        self._base[key] = _Baseline(now_s, admitted_msgs, admitted_bytes, paused_s)
        dt = now_s - base.t
        if dt <= 1e-3:
            return wire.UsageValues()
        um = max(0.0, admitted_msgs - base.msgs) / dt
        ub = max(0.0, admitted_bytes - base.bytes) / dt
        paused = max(0.0, paused_s - base.paused_s) / (dt * max(1, holders))
        return wire.UsageValues(usage_msgs_per_s=um, usage_bytes_per_s=ub,
                                demand_msgs_per_s=estimate_demand(um, paused, rate.msgs_per_s()),
                                demand_bytes_per_s=estimate_demand(ub, paused, rate.bytes_per_s()))

    def forget(self, keep: Iterable[str]) -> None:
        keep = set(keep)
        for key in [k for k in self._base if k not in keep]:
            del self._base[key]


def _values(v: wire.UsageValues) -> tuple[float, float, float, float]:
    return v.usage_msgs_per_s, v.usage_bytes_per_s, v.demand_msgs_per_s, v.demand_bytes_per_s


class Suppression:
    """PIP-82 report suppression per shared limit (see the module essay)."""

    def __init__(self, tolerance_pct: float, max_rounds: int):
        self.tolerance_pct, self.max_rounds = tolerance_pct, max_rounds
        self._last: dict[str, tuple[float, float, float, float]] = {}
        self._rounds: dict[str, int] = {}
        self._force_all = True
        self._force: set[str] = set()

    def force(self, keys: Iterable[str] | None = None) -> None:
        """Send these keys (None: every key) in full next round."""
        if keys is None:
            self._force_all = True
        else:
            self._force.update(keys)

    def plan(self, measured: dict[str, wire.UsageValues]) -> tuple[dict[str, wire.UsageValues], list[str]]:
        """(entries to send, keys to report as unchanged) for this round. Nothing changes until ``commit``."""
        send, unchanged = {}, []
        for key, values in measured.items():
            last = self._last.get(key)
            um, ub, dm, db = _values(values)
            rounds = self._rounds.get(key, 0) + 1
            if (self._force_all or key in self._force or last is None
                    or need_to_report(ub, last[1], um, last[0], self.tolerance_pct, rounds, self.max_rounds)
                    or need_to_report(db, last[3], dm, last[2], self.tolerance_pct)):
                send[key] = values
            else:
                unchanged.append(key)
        return send, unchanged

    def commit(self, sent: dict[str, wire.UsageValues], unchanged: list[str]) -> None:
        """The round was delivered and accepted."""
        for key, values in sent.items():
            self._last[key] = _values(values)
            self._rounds[key] = 0
        for key in unchanged:
            self._rounds[key] = self._rounds.get(key, 0) + 1
        for key in [k for k in self._last if k not in sent and k not in unchanged]:
            del self._last[key]
            self._rounds.pop(key, None)
        self._force_all = False
        self._force.difference_update(sent)


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

    def __init__(self, participant: Participant, client, *, interval_s: float, tolerance_pct: float,
                 max_rounds: int, backoff_cap_s: Callable[[float], float], wall_s: Callable[[], float] = time.time,
                 rng: Callable[[], float] | None = None):
        self.p = participant
        self.client = client
        self.interval_s = interval_s
        self._backoff_cap = backoff_cap_s
        self.backoff = Backoff(interval_s, backoff_cap_s(interval_s), **({"rng": rng} if rng else {}))
        self.suppression = Suppression(tolerance_pct, max_rounds)
        self.meter = UsageMeter()
        self._wall = wall_s
        self._now_s = lambda: participant.clock.now_ns() / 1e9
        self._outage = _OutageLog(getattr(client, "url", "?"), self._now_s)
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
                delay = self.interval_s if ok else self.backoff.next_delay_s()
            except Exception:  # noqa: BLE001 - a bug must not kill the reporter; keep the limits, keep trying
                if not self._bug_logged:
                    log.exception("throttlescope: a report round failed unexpectedly; limits unchanged, retrying "
                                  "with backoff (further failures like this are logged at debug level)")
                    self._bug_logged = True
                else:
                    log.debug("throttlescope: report round failed again", exc_info=True)
                delay = self.backoff.next_delay_s()
            now = time.monotonic()
            due = due + delay if due + delay > now else now + delay

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
        report = build_report(p, self.seq, self._wall(), self.interval_s, p.applier.version, send, unchanged,
                              snapshots)
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
        self.backoff.reset()
        self.last_error = None
        self.last_answer = answer
        if answer.accepted:
            self.suppression.commit(send, unchanged)
        else:
            log.debug("throttlescope: report %d not accepted: %s", self.seq, answer.reason)
            self.suppression.force()
        me = p.identity.participant_id
        self.suppression.force(k for k in measured if me not in (answer.usage.get(k) or {}))
        p.applier.grants.reachable()
        p.applier.apply(answer.policies)
        self._adopt_interval(answer.reportIntervalSeconds)
        self.ready.set()
        return True

    def _adopt_interval(self, interval_s: float) -> None:
        if interval_s == self.interval_s or not (MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S):
            return
        log.info("throttlescope: reporting every %g s, as the control plane asks (was %g s)", interval_s,
                 self.interval_s)
        self.interval_s = interval_s
        self.backoff = Backoff(interval_s, self._backoff_cap(interval_s))
        if hasattr(self.client, "timeout_s"):
            self.client.timeout_s = request_timeout_s(interval_s)

    def _measure(self, now: float) -> tuple[dict, dict[str, wire.UsageValues]]:
        """Snapshots of every limiter, and this round's usage and demand for each reported shared limit."""
        p, applier = self.p, self.p.applier
        since = self._last_round_s
        self._last_round_s = now
        publish = p.limits.snapshots()
        producers = p.limits.producer_counts()
        measured: dict[str, wire.UsageValues] = {}
        seen = []
        for s in publish:
            level = Level(s.level)
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
        return {"publish": publish, "dispatch": dispatch}, measured


# --- building the report ----------------------------------------------------------------------------------

def _label(s: str) -> bool:
    return 0 < len(s) <= wire.MAX_NAME and s.isprintable()


def _dim(tokens: float, rate: float, capacity: float, period_s: float) -> wire.DimensionSnapshot | None:
    if not all(math.isfinite(v) for v in (tokens, rate, capacity, period_s)) or period_s <= 0:
        return None
    return wire.DimensionSnapshot(tokens=tokens, rate=rate, capacity=capacity, period_s=period_s)


def _publish_parts(s: LimiterSnapshot, fair: tuple[float, float] | None = None) -> tuple:
    """``fair``: a pool's fair rates (msgs, bytes per second) from the control plane's grants, shown as its rate
    (a pool refills by grants, not by a rate of its own)."""
    def rate(b) -> float:
        if fair is None:
            return b.rate
        per_s = fair[0] if b.dimension == "msgs" else fair[1]
        return per_s * b.period_s if per_s >= 0 else b.rate
    dims = {b.dimension: _dim(b.tokens, rate(b), b.capacity, b.period_s) for b in s.buckets}
    bucket = (wire.BucketSnapshot(level=s.level, name=s.name, kind="publish", msgs=dims.get("msgs"),
                                  bytes=dims.get("bytes")) if dims else None)
    queue = (wire.QueueSnapshot(level=s.level, name=s.name, length=len(s.queue),
                                entries=[wire.QueueEntry(producer=e.producer, waiting_s=max(0.0, e.waiting_s))
                                         for e in s.queue[:wire.MAX_QUEUE_ENTRIES] if _label(e.producer)])
             if dims or s.queue else None)
    counters = wire.LimiterCounters(level=s.level, name=s.name, kind="publish", throttled_count=s.throttled_count,
                                    throttle_time_seconds_total=max(0.0, s.throttle_time_s),
                                    admitted_msgs_total=s.admitted_msgs, admitted_bytes_total=s.admitted_bytes)
    return bucket, queue, counters


def build_report(p: Participant, seq: int, sent_at: float, interval_s: float, applied_version: int,
                 send: dict[str, wire.UsageValues], unchanged: list[str], snapshots: dict) -> wire.Report:
    usage = []
    for key, v in send.items():
        level, direction, name = wire.parse_limit_key(key)
        if _label(name):
            usage.append(wire.SharedUsage(level=level, name=name, direction=direction,
                                          usage_msgs_per_s=v.usage_msgs_per_s, usage_bytes_per_s=v.usage_bytes_per_s,
                                          demand_msgs_per_s=v.demand_msgs_per_s,
                                          demand_bytes_per_s=v.demand_bytes_per_s))
    buckets, queues, counters = [], [], []
    for s in snapshots.get("publish", ()):
        if not _label(s.name):
            continue
        bucket, queue, counter = _publish_parts(s, p.applier.grants.fair(wire.limit_key(s.level, PUBLISH, s.name)))
        buckets += [bucket] if bucket else []
        queues += [queue] if queue else []
        counters.append(counter)
    throttled: dict[str, int] = {}
    for lim, snap, msgs, bytes_ in snapshots.get("dispatch", ()):
        if not _label(lim.name):
            continue
        rate = lim.rate
        msgs_dim = _dim(snap["msgs_tokens"], rate.msgs, rate.msgs, rate.period_s) if rate.msgs_limited else None
        bytes_dim = _dim(snap["bytes_tokens"], rate.bytes, rate.bytes, rate.period_s) if rate.bytes_limited else None
        if msgs_dim or bytes_dim:
            buckets.append(wire.BucketSnapshot(level=lim.level.value, name=lim.name, kind="dispatch",
                                               msgs=msgs_dim, bytes=bytes_dim))
        counters.append(wire.LimiterCounters(level=lim.level.value, name=lim.name, kind="dispatch",
                                             throttled_count=lim.throttled_count, admitted_msgs_total=msgs,
                                             admitted_bytes_total=bytes_))
        throttled[lim.level.value] = throttled.get(lim.level.value, 0) + lim.throttled_count
    o = p.offload.snapshot()
    offload = wire.OffloadStats(limit_bytes_per_s=o.bytes_per_s if o.bytes_per_s > 0 else -1,
                                limited_total=o.reads_limited, read_bytes_total=o.bytes_total,
                                offload_time_seconds_total=o.offload_time_s, reading_max_bytes=o.reading_max_bytes,
                                errors_total=o.errors)
    mutations = []
    for row in p.mutation_quotas.snapshot()[:wire.MAX_LIST]:
        user, client = row["user"] or "<any>", row["client_id"] or "<any>"
        if _label(user) and _label(client):
            mutations.append(wire.MutationQuotaSnapshot(
                user=user, client_id=client, tokens=row["tokens"], rate=max(0.0, row["mutation_rate_per_s"]),
                throttle_time_s=max(0.0, row["throttle_time_s"])))
    cap = wire.MAX_LIST
    return wire.Report(
        participant=p.identity.to_wire(), seq=seq, sent_at=sent_at, interval_s=interval_s,
        applied_policy_version=applied_version, usage=usage[:cap],
        usage_unchanged=[k for k in unchanged if _label(wire.parse_limit_key(k)[2])][:cap],
        buckets=buckets[:cap], queues=queues[:wire.MAX_QUEUES], counters=counters[:cap],
        dispatch_throttled=throttled, offload=offload, mutation_quotas=mutations)
