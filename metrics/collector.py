"""ThrottlescopeCollector: the participants' latest reports rendered as Prometheus metric families at scrape time.

How it works and why
--------------------
A Prometheus client-library custom collector (``collect()`` yields fresh metric families on every scrape; its
dependencies are passed in). It holds no copy of the reports: its ``source`` (the control plane's ``LiveState``)
hands it the latest report of every *live* participant, ``policies`` the current policy document, and ``grants``
(the control plane's ``GrantBook``) what it grants each participant of a shared limit -- a resource group's
calculated quota is the sum of ``metrics.allocation.allocations``, as ``/v1/state/resourcegroups`` shows them. Each
family is built from its ``metrics.catalogue`` entry (name, type, labels, help) and combined across participants
as the entry's ``across`` says: balances, rates, capacities and queue lengths are summed (the sum of the local
rates of a shared limit is its effective aggregate rate), ``*_min`` / ``*_max`` / waits take the extreme, and
counters are summed. Participants that left are simply no longer in the source, so their gauges stop being
exported at the next scrape.

Counters must never go backwards, though a participant's counters vanish when it leaves (goodbye or expiry) and
restart at 0 when its limiter or process restarts. So the collector is also the source's *listener*:

- ``departed(report, why)``: the participant's last counter values are banked into ``_retired``, keyed by
  (family, labels);
- ``replaced(previous, current)``: for every counter series of the previous report whose value in the new one
  is lower (or missing), the previous value is banked -- a reset, handled per participant before summing, as
  Prometheus' ``rate()`` handles resets per series.

A scrape exports, per series, ``retired + sum(live values)``. The listener is called under the source's lock
and ``collect`` reads the live reports and copies ``_retired`` inside one call of ``source.read_live``, i.e.
under that same lock: a participant is never in both (a spike, then a "reset") or in neither (a dip). The sums
are exact (``_retired`` is kept as Shewchuk partials, the total is ``math.fsum`` of partials and live values, the
correctly rounded exact sum), so float rounding cannot make a total step down by an ulp either.

Bounded labels only: no participant, pid or task label (see ``catalogue.LABELS``). With ``topic_labels=False``
(``THROTTLESCOPE_METRICS_TOPIC_LABELS=0``) every topic- and subscription-level name is folded into ``"*"``
before combining; resource groups are exported only when configured. Report latency is a client-library
``Histogram`` the control plane observes (``observe_report_latency``); its ``_created`` sample is left out. The
grant asks' delay is the grant book's own count (``GrantBook.ask_delays``), read at each scrape like its budget.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric as Family
from prometheus_client.utils import floatToGoString

from metrics.allocation import ShareSource, allocations, shares
from metrics.catalogue import (
    BY_NAME,
    CATALOGUE,
    FOLDED_NAME,
    HIDDEN_LEVELS,
    REPORT_LATENCY_BUCKETS,
)
from protocol import PolicySet, Report, UsageValues, limit_key, parse_limit_key

__all__ = ["ThrottlescopeCollector", "ReportSource", "DEPARTURE_REASONS"]

T = TypeVar("T")
Labels = tuple[str, ...]
Key = tuple[str, Labels]
DEPARTURE_REASONS = ("goodbye", "expired")
LATENCY = "throttlescope_report_latency_seconds"
ASK_DELAY = "throttlescope_grant_ask_delay_seconds"
_REDUCE: dict[str, Callable[[list[float]], float]] = {"sum": math.fsum, "min": min, "max": max, "count": math.fsum,
                                                      "control plane": math.fsum}
STEP_ENTRIES = 1000   # report entries (or series) a scrape works through between pauses: about 3-5 ms


Live = list[tuple[Report, Mapping[str, UsageValues]]]
_GROUP_PREFIX = "resource_group:"   # how limit_key(level, direction, name) starts at that level


class ReportSource(Protocol):
    def read_live(self, fn: Callable[[Live], T]) -> T:
        """Call ``fn`` with (latest report, shared-limit usage held for it by limit key) of every live participant,
        under the lock the listener runs under. The usage includes values kept for suppressed entries (PIP-82)."""


def _grow(partials: list[float], x: float) -> None:
    """Add ``x`` to an exact sum kept as non-overlapping float partials (Shewchuk; Python's msum recipe)."""
    i = 0
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo:
            partials[i] = lo
            i += 1
        x = hi
    partials[i:] = [x]


def _add_group_users(used: dict[str, dict[str, UsageValues]], participant_id: str,
                     usage: Mapping[str, UsageValues]) -> None:
    """Into ``used`` (resource-group limit key -> participant -> its usage): one live participant's."""
    for key, u in usage.items():
        if key.startswith(_GROUP_PREFIX):   # (not parsed: a scrape reads every live participant's keys)
            used[key][participant_id] = u


# a limiter's counter families and the field of ``LimiterCounters`` each is read from
_LIMITER_COUNTERS = (("throttlescope_throttled", "throttled_count"),
                     ("throttlescope_throttle_time_seconds", "throttle_time_seconds_total"),
                     ("throttlescope_admitted_messages", "admitted_msgs_total"),
                     ("throttlescope_admitted_bytes", "admitted_bytes_total"))


def _counters(report: Report) -> dict[Key, float]:
    """Every counter series one report carries, unfolded: (family, labels) -> value."""
    out: dict[Key, float] = {}
    for c in report.counters:
        labels = (c.level, c.kind, c.name)
        for family, field in _LIMITER_COUNTERS:
            out[family, labels] = float(getattr(c, field))
    out.update(_other_counters(report))
    return out


def _resets(previous: Report, current: Report) -> list[tuple[Key, float]]:
    """The counter series of ``previous`` whose value in ``current`` is lower or missing, with their values. (Its
    limiters' series pairwise, by limiter: a report of 1,000 limiters unfolded into two dicts of 4,000 series
    cost the control plane more than a tenth of its CPU a report.)"""
    now = {(c.level, c.kind, c.name): c for c in current.counters}
    out: list[tuple[Key, float]] = []
    for p in previous.counters:
        labels = (p.level, p.kind, p.name)
        c = now.get(labels)
        for family, field in _LIMITER_COUNTERS:
            was = getattr(p, field)
            if (getattr(c, field) if c is not None else 0.0) < was:
                out.append(((family, labels), float(was)))
    after = _other_counters(current)
    out.extend((k, v) for k, v in _other_counters(previous).items() if after.get(k, 0.0) < v)
    return out


def _other_counters(report: Report) -> dict[Key, float]:
    """The counter series of one report that are not a limiter's: dispatch throttles, offload."""
    out: dict[Key, float] = {}
    for level, n in report.dispatch_throttled.items():
        out["throttlescope_dispatch_throttled_events", (level,)] = float(n)
    o = report.offload
    if o is not None:
        out["brk_ledgeroffloader_ledger_offload_limited", ()] = float(o.limited_total)
        out["brk_ledgeroffloader_ledger_offload_time", ()] = float(o.offload_time_seconds_total)
        out["brk_ledgeroffloader_offload_error", ()] = float(o.errors_total)
        out["throttlescope_offload_read_bytes", ()] = float(o.read_bytes_total)
    return out


class _Values:
    """Values to combine, per family and label set."""

    def __init__(self) -> None:
        self.by: dict[str, dict[Labels, list[float]]] = defaultdict(lambda: defaultdict(list))

    def add(self, name: str, labels: Labels, value: float) -> None:
        self.by[name][labels].append(float(value))

    def series(self, name: str) -> defaultdict[Labels, list[float]]:
        """Labels -> values of family ``name``, to append to (a scrape adds a million values at 1,000 participants
        of 100 limits: one call of ``add`` each was a third of its CPU)."""
        return self.by[name]

    def extend(self, name: str, labels: Labels, values: Iterable[float]) -> None:
        self.by[name][labels].extend(values)

    def family(self, name: str) -> Family:
        *_, family = self.family_steps(name)
        return family

    def family_steps(self, name: str) -> Iterator[Family | None]:
        """The family of ``name``, last, after a ``None`` every ``STEP_ENTRIES`` series (a pause: see
        ``collect_steps``). Its values are taken out and let go series by series as they are read, so a second read
        of ``name`` finds none: freeing them all at once when the scrape ended held the loop (300 participants of
        1,000 limits: 100-210 ms at the scrape's last step, millions of floats, where the reports' p99 was 25 ms)."""
        spec = BY_NAME[name]
        family = (CounterMetricFamily if spec.type == "counter" else GaugeMetricFamily)(
            spec.name, spec.help, labels=list(spec.labels))
        reduce = _REDUCE[spec.across]
        series: list[Any] = sorted(self.by.pop(name, {}).items())
        for i, (labels, values) in enumerate(series):
            series[i] = None   # (its values freed as ``values`` moves on to the next series)
            family.add_metric(list(labels), reduce(values))
            if (i + 1) % STEP_ENTRIES == 0:
                yield None
        yield family


class ThrottlescopeCollector:
    """See the module essay. Register it on a ``CollectorRegistry``; make it the source's listener."""

    def __init__(self, source: ReportSource, policies: Callable[[], PolicySet], *, topic_labels: bool = True,
                 grants: ShareSource | None = None):
        self._source = source
        self._policies = policies
        self._grants = grants
        self.topic_labels = topic_labels
        self._lock = threading.Lock()
        self._retired: dict[Key, list[float]] = {}
        self._departed = dict.fromkeys(DEPARTURE_REASONS, 0)
        self._latency = Histogram(LATENCY, BY_NAME[LATENCY].help, buckets=REPORT_LATENCY_BUCKETS, registry=None)

    # ------------------------------------------------------------ the listener (called under the source's lock)

    def replaced(self, previous: Report, current: Report) -> None:
        """A participant's newer report replaced ``previous``: bank the counters that went down (resets)."""
        resets = _resets(previous, current)
        if resets:
            with self._lock:
                for key, value in resets:
                    self._bank(key, value)

    def departed(self, report: Report, why: str) -> None:
        """A participant left (``why``: goodbye or expired): bank its last counter values."""
        with self._lock:
            for key, value in _counters(report).items():
                self._bank(key, value)
            self._departed[why] = self._departed.get(why, 0) + 1

    def _bank(self, key: Key, value: float) -> None:
        name, labels = key
        _grow(self._retired.setdefault((name, self._fold(name, labels)), []), value)

    def observe_report_latency(self, seconds: float) -> None:
        self._latency.observe(seconds)

    # ------------------------------------------------------------ folding per-topic names

    def _fold(self, name: str, labels: Labels) -> Labels:
        spec = BY_NAME[name]
        if self.topic_labels or "level" not in spec.labels or "name" not in spec.labels:
            return labels
        level, at = labels[spec.labels.index("level")], spec.labels.index("name")
        if level not in HIDDEN_LEVELS:
            return labels
        return (*labels[:at], FOLDED_NAME, *labels[at + 1:])

    def _name(self, level: str, name: str) -> str:
        return FOLDED_NAME if not self.topic_labels and level in HIDDEN_LEVELS else name

    # ------------------------------------------------------------ the Collector contract

    def describe(self) -> list[Family]:
        return [_Values().family(m.name) if m.type != "histogram" else self._histogram() for m in CATALOGUE]

    def _freeze(self, live: Live) -> tuple[Live, dict[Key, list[float]], dict[str, int]]:
        with self._lock:
            return list(live), {k: list(v) for k, v in self._retired.items()}, dict(self._departed)

    def collect(self) -> Iterator[Family]:
        return (family for family in self.collect_steps() if family is not None)

    def collect_steps(self) -> Iterator[Family | None]:
        """``collect``'s families, with a ``None`` after every ``STEP_ENTRIES`` or so entries of work: a place to
        pause for whoever drives it (``controlplane.scrapes`` lets the event loop answer reports there)."""
        live, retired, departed = self._source.read_live(self._freeze)
        reports = [report for report, _ in live]
        policies = self._policies()
        values = _Values()
        for (name, labels), partials in retired.items():
            values.extend(name, labels, partials)
        for reason, n in departed.items():
            values.add("throttlescope_participants_departed", (reason,), n)
        # (the resource groups' usage is gathered report by report too: read in one step after them, 300
        # participants of a thousand limits held the event loop 16-32 ms in it)
        used: dict[str, dict[str, UsageValues]] = defaultdict(dict)
        work = 0
        for report, usage in live:
            work += len(report.counters) + len(report.buckets) + len(report.queues) + len(usage)
            if work >= STEP_ENTRIES:
                work = 0
                yield None
            _add_group_users(used, report.participant.participant_id, usage)
            self._limiter_counters(values, report)
            for (name, labels), value in _other_counters(report).items():
                values.add(name, self._fold(name, labels), value)
            self._buckets(values, report)
            self._queues(values, report)
            self._offload(values, report)
            for m in report.mutation_quotas:
                labels = (m.user, m.client_id)
                values.add("throttlescope_mutation_tokens", labels, m.tokens)
                values.add("throttlescope_mutation_rate", labels, m.rate)
                values.add("throttlescope_mutation_throttle_time_seconds", labels, m.throttle_time_s)
        book = shares(self._grants, used, policies)   # (read once a scrape: every limit in the book)
        self._resource_groups(values, used, book, policies)
        self._adaptive(values, book)
        if self._grants is not None:
            pace = self._grants.ask_pace()
            values.add("throttlescope_grant_busy_limits", (), pace["busyLimits"])
            values.add("throttlescope_grant_asks_per_limit", (), pace["asksPerLimitPerSecond"])
            values.add("throttlescope_grant_asks_budget", (), pace["budgetPerSecond"])
        self._participants(values, reports, policies)
        for m in CATALOGUE:
            if m.name == LATENCY:
                yield self._histogram()
            elif m.name == ASK_DELAY:
                yield self._ask_delays()
            else:
                yield from values.family_steps(m.name)

    # ------------------------------------------------------------ one report's gauges

    def _limiter_counters(self, values: _Values, report: Report) -> None:
        families = [(values.series(family), field) for family, field in _LIMITER_COUNTERS]
        for c in report.counters:
            labels = (c.level, c.kind, self._name(c.level, c.name))
            for series, field in families:
                series[labels].append(float(getattr(c, field)))

    def _buckets(self, values: _Values, report: Report) -> None:
        tokens, tokens_min, rate, capacity = (values.series(f"throttlescope_bucket_{what}")
                                              for what in ("tokens", "tokens_min", "rate", "capacity"))
        held: set[Labels] = set()
        for b in report.buckets:
            name = self._name(b.level, b.name)
            for dimension, snap in (("msgs", b.msgs), ("bytes", b.bytes)):
                if snap is None or snap.rate <= 0:  # unlimited
                    continue
                labels = (b.level, b.kind, name, dimension)
                tokens[labels].append(float(snap.tokens))
                tokens_min[labels].append(float(snap.tokens))
                rate[labels].append(snap.rate / snap.period_s)
                capacity[labels].append(float(snap.capacity))
                held.add((b.level, b.kind, name))
        for labels in held:  # one per participant, however many buckets were folded into it
            values.add("throttlescope_bucket_participants", labels, 1)

    def _queues(self, values: _Values, report: Report) -> None:
        for q in report.queues:
            labels = (q.level, self._name(q.level, q.name))
            values.add("throttlescope_queue_length", labels, max(q.length, len(q.entries)))
            values.add("throttlescope_queue_longest_wait_seconds", labels,
                       max((e.waiting_s for e in q.entries), default=0.0))

    def _offload(self, values: _Values, report: Report) -> None:
        o = report.offload
        if o is None:
            return
        values.add("brk_ledgeroffloader_ledger_reading_max_bytes", (), o.reading_max_bytes)
        values.add("brk_ledgeroffloader_offload_rate", (), o.rate_bytes_per_s)
        if o.limit_bytes_per_s > 0:
            values.add("throttlescope_offload_limit_bytes_per_second", (), o.limit_bytes_per_s)

    # ------------------------------------------------------------ across reports

    def _resource_groups(self, values: _Values, used: dict[str, dict[str, UsageValues]], book: dict[str, dict],
                         policies: PolicySet) -> None:
        for group, rg in policies.resourceGroups.items():
            strategy = policies.quota_strategy(group)
            for mc, quotas in (("publish", (rg.publishRateInMsgs, rg.publishRateInBytes)),
                               ("dispatch", (rg.dispatchRateInMsgs, rg.dispatchRateInBytes))):
                key = limit_key("resource_group", mc, group)
                users = used.get(key, {})
                values.add("throttlescope_resource_group_participants", (group, mc), len(users))
                for dimension, configured in zip(("msgs", "bytes"), quotas, strict=True):
                    labels = (group, mc, dimension)
                    usage = {p: getattr(u, f"usage_{dimension}_per_s") for p, u in users.items()}
                    demand = {p: getattr(u, f"demand_{dimension}_per_s") for p, u in users.items()}
                    total = math.fsum(usage.values())
                    values.add("throttlescope_resource_group_usage", labels, total)
                    values.add("throttlescope_resource_group_demand", labels, math.fsum(demand.values()))
                    if configured > 0:
                        values.add("throttlescope_resource_group_configured_quota", labels, configured)
                    if not users:
                        continue
                    values.add("throttlescope_resource_group_remote_usage", labels,
                               max(max(0.0, total - own) for own in usage.values()))
                    if configured > 0:
                        allocation = allocations(configured, strategy, users, dimension, book.get(key))
                        values.add("throttlescope_resource_group_calculated_quota", labels,
                                   math.fsum(allocation.values()))

    def _adaptive(self, values: _Values, book: dict[str, dict]) -> None:
        for key, entry in book.items():
            learnt = entry.get("adaptive")
            if not learnt:
                continue
            level, _, name = parse_limit_key(key)
            labels = (level, self._name(level, name))
            values.add("throttlescope_adaptive_rate", labels,
                       0.0 if learnt["pausedForSeconds"] > 0 else learnt["ratePerSecond"])
            values.add("throttlescope_adaptive_ceiling", labels, learnt["ceilingPerSecond"])
            values.add("throttlescope_adaptive_paused_seconds", labels, learnt["pausedForSeconds"])
            for outcome, field in (("ok", "ok"), ("throttled", "throttled"), ("error", "errors")):
                values.add("throttlescope_adaptive_outcomes", (*labels, outcome), learnt[field])

    def _participants(self, values: _Values, reports: list[Report], policies: PolicySet) -> None:
        applied = [r.applied_policy_version for r in reports]
        values.add("throttlescope_participants", (), len(reports))
        values.add("throttlescope_policy_version", (), policies.version)
        values.add("throttlescope_participants_outdated", (), sum(v != policies.version for v in applied))
        if applied:
            values.add("throttlescope_applied_policy_version_min", (), min(applied))
            values.add("throttlescope_applied_policy_version_max", (), max(applied))

    def _ask_delays(self) -> Family:
        """The grant book's histogram of its asks' delays (no asks, or no grant book: every bucket at 0)."""
        buckets, total = self._grants.ask_delays() if self._grants is not None else ([(math.inf, 0)], 0.0)
        family = HistogramMetricFamily(ASK_DELAY, BY_NAME[ASK_DELAY].help, unit="")
        family.add_metric([], [(floatToGoString(bound), count) for bound, count in buckets], total)
        return family

    def _histogram(self) -> Family:
        (family,) = self._latency.collect()
        family.samples = [s for s in family.samples if not s.name.endswith("_created")]
        return family
