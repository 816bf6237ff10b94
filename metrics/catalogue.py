"""The one catalogue of every metric the control plane exports: name, type, unit, labels, help, aggregation.

How it works and why
--------------------
Participants do not expose metrics themselves (Spark Python workers come and go by the second, and nothing could
scrape them); each one reports its limiters' state every interval (``protocol.Report``) and the control
plane's ``/metrics`` renders the latest reports of the live participants at scrape time
(``metrics.collector.ThrottlescopeCollector``). Every family it yields is declared here, once: the collector
builds its families from these entries (so a name, type, label list or help text cannot differ between code
and documentation), the reference table ``docs/metrics.md`` is generated from them
(``python -m metrics.catalogue --markdown > docs/metrics.md``; a test keeps the committed file equal), and tests
check that what is scraped is exactly what is declared.

Conventions (after the Prometheus naming conventions):

- one prefix, ``throttlescope_``, for ours; the PIP-211 offload metrics keep the seed's names
  (``brk_ledgeroffloader_*``) so that Pulsar operators find them;
- base units (seconds, bytes), in the name where the name has a unit;
- counters are declared by their *family* name and exposed with ``_total`` appended, as the Prometheus client
  library does (``CounterMetricFamily("brk_ledgeroffloader_ledger_offload_limited", ...)`` is scraped as
  ``brk_ledgeroffloader_ledger_offload_limited_total``); ``Metric.exposed`` is the name to query;
- bounded labels only (``LABELS``): never a pid, participant or task label. Values from many participants are
  combined at scrape time as ``Metric.across`` says (sum, min, max, count), and counters keep the totals of
  participants that left (see collector.py). Topic and subscription names can be folded into ``name="*"`` for
  large deployments (the control plane's THROTTLESCOPE_METRICS_TOPIC_LABELS=0).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Metric", "CATALOGUE", "BY_NAME", "LABELS", "PREFIX", "HIDDEN_LEVELS", "FOLDED_NAME",
    "REPORT_LATENCY_BUCKETS", "render_markdown", "main",
]

PREFIX = "throttlescope_"
HIDDEN_LEVELS = ("topic", "subscription")  # levels whose names are folded when per-topic labels are off
FOLDED_NAME = "*"
REPORT_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

MetricType = Literal["counter", "gauge", "histogram"]
Across = Literal["sum", "min", "max", "count", "control plane"]


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric family. ``name`` is the family name (counters without ``_total``); ``exposed`` is scraped."""

    name: str
    type: MetricType
    unit: str
    labels: tuple[str, ...]
    help: str
    across: Across
    source: str
    group: str

    @property
    def exposed(self) -> str:
        return self.name + "_total" if self.type == "counter" else self.name

    @property
    def samples(self) -> tuple[str, ...]:
        """The sample names a scrape carries for this family."""
        if self.type == "histogram":
            return (self.name + "_bucket", self.name + "_sum", self.name + "_count")
        return (self.exposed,)


LABELS: dict[str, str] = {
    "level": "the level of a limit: broker, resource_group, tenant, namespace, topic, subscription",
    "kind": "what the limiter throttles: publish (egress), dispatch (ingest/read), offload (bulk copy)",
    "name": "the limit's name at its level: 'broker', a resource group, 'tenant', 'tenant/ns', 'tenant/ns/topic', "
            "'tenant/ns/topic/subscription'; '*' for every topic and subscription when per-topic labels are off",
    "dimension": "msgs or bytes",
    "reason": "dispatch: the level that throttled the read (PIP-406 style); departures: goodbye or expired",
    "resource_group": "a configured resource group (PIP-82); groups that are not configured are not exported",
    "monitoring_class": "publish or dispatch (Pulsar's MonitoringClass)",
    "user": "a KIP-599 mutation quota user, as the participants report it (bounded by the configured quotas)",
    "client_id": "a KIP-599 mutation quota client id, as the participants report it (bounded by the configured "
                 "quotas)",
    "outcome": "how a send to the sink behind an adaptive limit ended: ok, throttled or error",
}

_BUCKET = ("level", "kind", "name", "dimension")
_LIMITER = ("level", "kind", "name")
_QUEUE = ("level", "name")
_RG = ("resource_group", "monitoring_class", "dimension")
_ADAPTIVE = ("level", "name")
_MUTATION = ("user", "client_id")
_SUM_GAUGE = "summed over live participants"


def _m(group: str, name: str, type_: MetricType, unit: str, labels: tuple[str, ...], across: Across, source: str,
       help_: str) -> Metric:
    return Metric(name, type_, unit, labels, help_, across, source, group)


CATALOGUE: tuple[Metric, ...] = (
    # ---------------------------------------------------------------- token buckets, per level
    _m("buckets", "throttlescope_bucket_tokens", "gauge", "tokens (msgs or bytes)", _BUCKET, "sum",
       "Report.buckets[].msgs|bytes.tokens",
       "Token balance of the limiter's bucket, summed over live participants (negative: debt being repaid)."),
    _m("buckets", "throttlescope_bucket_tokens_min", "gauge", "tokens (msgs or bytes)", _BUCKET, "min",
       "Report.buckets[].msgs|bytes.tokens",
       "Lowest token balance of the limiter's bucket on any one live participant (below 0: that one is in debt)."),
    _m("buckets", "throttlescope_bucket_rate", "gauge", "tokens per second", _BUCKET, "sum",
       "Report.buckets[].msgs|bytes.rate / period_s",
       "Refill rate of the limiter's bucket in tokens per second, summed over live participants: the effective "
       "aggregate rate (for a shared limit, the sum of the local shares)."),
    _m("buckets", "throttlescope_bucket_capacity", "gauge", "tokens (msgs or bytes)", _BUCKET, "sum",
       "Report.buckets[].msgs|bytes.capacity",
       "Capacity (largest balance) of the limiter's bucket, summed over live participants."),
    _m("buckets", "throttlescope_bucket_participants", "gauge", "participants", _LIMITER, "count",
       "Report.buckets[]",
       "Live participants that hold a bucket for this limiter (divide a summed gauge by it for the average)."),
    # ---------------------------------------------------------------- limiter counters, per level
    _m("limiters", "throttlescope_throttled", "counter", "throttle events", _LIMITER, "sum",
       "Report.counters[].throttled_count",
       "Times a producer was throttled (paused) by this limiter, summed over participants, departed ones "
       "included."),
    _m("limiters", "throttlescope_throttle_time_seconds", "counter", "seconds", _LIMITER, "sum",
       "Report.counters[].throttle_time_seconds_total",
       "Producer-seconds spent throttled by this limiter, summed over participants, departed ones included "
       "(its rate is the average number of paused producers)."),
    _m("limiters", "throttlescope_admitted_messages", "counter", "messages", _LIMITER, "sum",
       "Report.counters[].admitted_msgs_total",
       "Messages admitted through this limiter, summed over participants, departed ones included."),
    _m("limiters", "throttlescope_admitted_bytes", "counter", "bytes", _LIMITER, "sum",
       "Report.counters[].admitted_bytes_total",
       "Bytes admitted through this limiter, summed over participants, departed ones included."),
    # ---------------------------------------------------------------- fairness queues
    _m("queues", "throttlescope_queue_length", "gauge", "producers", _QUEUE, "sum",
       "Report.queues[].length",
       "Producers waiting in the limiter's FIFO fairness queue, summed over live participants."),
    _m("queues", "throttlescope_queue_longest_wait_seconds", "gauge", "seconds", _QUEUE, "max",
       "Report.queues[].entries[].waiting_s",
       "Longest time any producer now in the limiter's fairness queue has waited, over live participants."),
    # ---------------------------------------------------------------- resource groups (PIP-82)
    _m("resource groups", "throttlescope_resource_group_configured_quota", "gauge", "msgs or bytes per second",
       _RG, "control plane", "PolicySet.resourceGroups",
       "Configured quota of the resource group per second (absent when unlimited)."),
    _m("resource groups", "throttlescope_resource_group_calculated_quota", "gauge", "msgs or bytes per second",
       _RG, "sum", "GrantBook.shares fair rates; else Report.usage[level=resource_group] -> local_quotas",
       "The live participants' allocations, summed: the part of the configured quota handed out (Pulsar: "
       "calculated quota). A participant's allocation is its fair rate from the control plane's grant book when it "
       "asked for grants of the group in the window; otherwise the PIP-82 split of what those leave by usage."),
    _m("resource groups", "throttlescope_resource_group_usage", "gauge", "msgs or bytes per second", _RG, "sum",
       "Report.usage[level=resource_group].usage_*_per_s",
       "Local usage of the resource group, summed over live participants: the group's total usage "
       "(Pulsar: usage, summed over brokers)."),
    _m("resource groups", "throttlescope_resource_group_remote_usage", "gauge", "msgs or bytes per second", _RG,
       "max", "Report.usage[level=resource_group].usage_*_per_s",
       "Usage by the other participants as one participant sees it in the usage map (total minus its own), "
       "largest over live participants (Pulsar: remote usage)."),
    _m("resource groups", "throttlescope_resource_group_demand", "gauge", "msgs or bytes per second", _RG, "sum",
       "Report.usage[level=resource_group].demand_*_per_s",
       "Demand on the resource group (admitted plus throttled attempts), summed over live participants."),
    _m("resource groups", "throttlescope_resource_group_participants", "gauge", "participants",
       ("resource_group", "monitoring_class"), "count", "Report.usage[level=resource_group]",
       "Live participants that report usage of the resource group."),
    # ---------------------------------------------------------------- dispatch (PIP-406 style)
    _m("dispatch", "throttlescope_dispatch_throttled_events", "counter", "throttle events", ("reason",), "sum",
       "Report.dispatch_throttled",
       "Dispatch reads sent into backoff, by the level that throttled them (reason), summed over participants, "
       "departed ones included."),
    # ---------------------------------------------------------------- adaptive limits (limiter.adaptive)
    _m("adaptive limits", "throttlescope_adaptive_rate", "gauge", "msgs per second", _ADAPTIVE, "control plane",
       "GrantBook.shares adaptive.ratePerSecond",
       "The rate an adaptive limit learnt from the sink's answers, under its ceiling (0 while the sink asked for "
       "a pause): what the control plane grants."),
    _m("adaptive limits", "throttlescope_adaptive_ceiling", "gauge", "msgs per second", _ADAPTIVE, "control plane",
       "GrantBook.shares adaptive.ceilingPerSecond",
       "An adaptive limit's configured messages rate: the highest its learnt rate goes."),
    _m("adaptive limits", "throttlescope_adaptive_paused_seconds", "gauge", "seconds", _ADAPTIVE, "control plane",
       "GrantBook.shares adaptive.pausedForSeconds",
       "What is left of a pause the sink asked for (its Retry-After), for every sender of the limit."),
    _m("adaptive limits", "throttlescope_adaptive_outcomes", "counter", "sends", (*_ADAPTIVE, "outcome"),
       "control plane", "GrantAsk.outcomes, summed by the grant book",
       "Sends whose outcome the participants reported for an adaptive limit: ok (the sink took it), throttled "
       "(refused as too many: 429, 503), error (failed otherwise). Since the control plane started."),
    # ---------------------------------------------------------------- grant asks (controlplane.ask_pace)
    _m("grant asks", "throttlescope_grant_busy_limits", "gauge", "limits", (), "control plane",
       "GrantBook.ask_pace busyLimits",
       "Shared limits this control plane was asked for tokens in the last second: they share its budget of grant "
       "asks."),
    _m("grant asks", "throttlescope_grant_asks_per_limit", "gauge", "asks per second", (), "control plane",
       "GrantBook.ask_pace asksPerLimitPerSecond",
       "The grant asks a second each busy shared limit is to draw now: 100, or its part of the budget when more "
       "limits are busy than the budget gives 100 each (their participants then ask further apart, for longer "
       "chunks)."),
    _m("grant asks", "throttlescope_grant_asks_budget", "gauge", "asks per second", (), "control plane",
       "Settings.grant_asks_per_s (--grant-asks)",
       "The grant asks a second this control plane aims at over all its shared limits."),
    _m("grant asks", "throttlescope_grant_ask_delay_seconds", "histogram", "seconds", (), "control plane",
       "GrantRequest.sent_s",
       "How much later than its participant's quickest recent ask each grant ask reached the control plane (the "
       "participant's keeper, the network, this process's queue), in seconds. Its spends are dated by the "
       "participant's clock whatever the delay, but its answer reaches the pool that much later too."),
    # ---------------------------------------------------------------- offload (PIP-211, the seed's names)
    _m("offload", "brk_ledgeroffloader_ledger_offload_limited", "counter", "reads", (), "sum",
       "Report.offload.limited_total",
       "The number of times the ledger reading is restricted (offload reads delayed by the flow-permit limit), "
       "summed over participants, departed ones included."),
    _m("offload", "brk_ledgeroffloader_ledger_offload_time", "counter", "seconds", (), "sum",
       "Report.offload.offload_time_seconds_total",
       "The total time in seconds to read all the entries for offload (delays included), summed over "
       "participants, departed ones included."),
    _m("offload", "brk_ledgeroffloader_ledger_reading_max_bytes", "gauge", "bytes", (), "max",
       "Report.offload.reading_max_bytes",
       "The max number of bytes reading entries in the window, largest over live participants."),
    _m("offload", "brk_ledgeroffloader_offload_rate", "gauge", "bytes per second", (), "sum",
       "Report.offload.rate_bytes_per_s",
       "The rate of offloading in bytes per second (last complete window), summed over live participants."),
    _m("offload", "brk_ledgeroffloader_offload_error", "counter", "errors", (), "sum",
       "Report.offload.errors_total",
       "The number of failed operations to offload, summed over participants, departed ones included."),
    _m("offload", "throttlescope_offload_read_bytes", "counter", "bytes", (), "sum",
       "Report.offload.read_bytes_total",
       "Bytes read for offload, summed over participants, departed ones included."),
    _m("offload", "throttlescope_offload_limit_bytes_per_second", "gauge", "bytes per second", (), "sum",
       "Report.offload.limit_bytes_per_s",
       "Offload flow permits in bytes per second, summed over live participants that have a limit (absent when "
       "none has one; the limit is per process, PIP-211's broker-wide limit)."),
    # ---------------------------------------------------------------- mutation quotas (KIP-599)
    _m("mutations", "throttlescope_mutation_tokens", "gauge", "mutations", _MUTATION, "sum",
       "Report.mutation_quotas[].tokens",
       "KIP-599 mutation quota balance per user and client id, summed over live participants (negative: "
       "throttled)."),
    _m("mutations", "throttlescope_mutation_rate", "gauge", "mutations per second", _MUTATION, "sum",
       "Report.mutation_quotas[].rate",
       "Observed mutation rate per user and client id, summed over live participants."),
    _m("mutations", "throttlescope_mutation_throttle_time_seconds", "gauge", "seconds", _MUTATION, "max",
       "Report.mutation_quotas[].throttle_time_s",
       "KIP-599 throttle time per user and client id as Kafka reports it (strict: the last rejected request's, "
       "counting down, 0 after an accepted overdraw; permissive: -tokens / quota), longest over live participants."),
    # ---------------------------------------------------------------- participants and policies
    _m("participants", "throttlescope_participants", "gauge", "participants", (), "count", "live state",
       "Live participants (reported within the last 2 report intervals: the longest interval told, when a "
       "loaded control plane stretched it)."),
    _m("participants", "throttlescope_participants_departed", "counter", "participants", ("reason",),
       "control plane", "live state",
       "Participants removed, by reason: goodbye (said so) or expired (silent for 2 report intervals: lost)."),
    _m("participants", "throttlescope_policy_version", "gauge", "version", (), "control plane", "policy store",
       "Current policy version of the control plane."),
    _m("participants", "throttlescope_applied_policy_version_min", "gauge", "version", (), "min",
       "Report.applied_policy_version",
       "Oldest policy version a live participant has applied (0: none yet)."),
    _m("participants", "throttlescope_applied_policy_version_max", "gauge", "version", (), "max",
       "Report.applied_policy_version",
       "Newest policy version a live participant has applied."),
    _m("participants", "throttlescope_participants_outdated", "gauge", "participants", (), "count",
       "Report.applied_policy_version",
       "Live participants whose applied policy version is not the current one."),
    _m("participants", "throttlescope_report_latency_seconds", "histogram", "seconds", (), "control plane",
       "POST /v1/report",
       "Time the control plane took to handle one participant report (POST /v1/report), in seconds."),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in CATALOGUE}
assert len(BY_NAME) == len(CATALOGUE), "duplicate metric names in the catalogue"
assert all(set(m.labels) <= set(LABELS) for m in CATALOGUE), "a metric uses an undeclared label"

_ACROSS = {
    "sum": "sum over participants",
    "min": "lowest participant",
    "max": "highest participant",
    "count": "count of participants",
    "control plane": "control plane's own",
}

_INTRO = """\
# Metrics reference

<!-- Generated by `python -m metrics.catalogue --markdown > docs/metrics.md` from metrics/catalogue.py;
     do not edit by hand (tests/metrics/test_catalogue.py fails when this file and the catalogue differ). -->

The control plane serves every metric below at `GET /metrics` (Prometheus text format 0.0.4). Participants
(Spark Python workers, the driver) send their limiters' state in each report; `/metrics` renders the latest
reports of the live participants at scrape time. Participants are never a label: values are combined across
participants as the *across* column says. Participants that left stop being exported; counters keep their totals
(a departed or restarted participant's last values are kept), so a `_total` never goes backwards.

Names: one prefix `throttlescope_`; the PIP-211 offload metrics keep Pulsar's names `brk_ledgeroffloader_*`.
Counters are exposed with `_total` appended (the *query* column), as the Prometheus client library does.
Bucket gauges carry tokens in the unit of their `dimension` (messages or bytes).

## Scraping and auth

`/metrics` follows the control plane's read rule: open when reads are open (`--open-reads`,
`THROTTLESCOPE_OPEN_READS=1`), otherwise it needs any principal's token (a viewer's, the participant's) as
`Authorization: Bearer <token>`. Give Prometheus the participant token (read-only for everything but reports), or
a viewer's of its own (`python -m controlplane principals create prometheus --role viewer`):

```yaml
scrape_configs:
  - job_name: throttlescope
    static_configs:
      - targets: ["127.0.0.1:8000"]
    authorization:
      type: Bearer
      credentials_file: /path/to/data/participant.token   # or: credentials: <token>
```

`deploy/prometheus.yml` does this with the token file the control plane writes into its data directory.

## Large deployments: per-topic labels

Set `THROTTLESCOPE_METRICS_TOPIC_LABELS=0` on the control plane to fold every topic- and subscription-level
series into one with `name="*"` (sums and counters add up, min and max combine), so the number of series no
longer grows with the number of topics. Default `1`: one series per topic and subscription.

A scrape walks every live participant's latest report, so its cost grows with participants x limits: about 0.7 s
of CPU at 1,000 participants of 100 shared limits. The control plane renders it on its event loop a piece at a
time, answering reports in between, and holds rendering to a tenth of a core: a render that took more than 50 ms
is served again, unchanged, to the scrapes that come before a new one would exceed that share (at 1,000 x 100 the
samples are refreshed every 7 s at most, whatever the scrape interval). `/healthz` shows the last render's CPU
(`scrapeCpuSeconds`).

## Prometheus rules and Grafana

- `deploy/prometheus.yml`: scrapes the control plane and loads `deploy/rules/*.yml`. It is written for the
  defaults (127.0.0.1:8000, the token in `./data`); `make run-observability` starts Prometheus on a copy for the
  control plane's `THROTTLESCOPE_HOST`, `THROTTLESCOPE_PORT` and `THROTTLESCOPE_DATA_DIR`
  (`python -m metrics.scrape_config --host H --port P --data-dir D --out FILE`).
- `deploy/rules/recording.yml`: per-level rates (`throttlescope:throttled:rate1m`,
  `throttlescope:throttle_time_seconds:rate1m`, `throttlescope:admitted_messages:rate1m`, ...), the debt of the
  most indebted participant in seconds of refill (`throttlescope:bucket_debt_seconds`), resource-group usage over
  quota, report latency quantiles.
- `deploy/rules/alerts.yml`: `ThrottlescopeSustainedThrottling` (more than half a producer paused by one limit
  for 10 minutes), `ThrottlescopeTokensStuckBelowZero` (a bucket more than 1 s of refill in debt for 10 minutes),
  `ThrottlescopeParticipantsLost` (participants expired without a goodbye), `ThrottlescopeControlPlaneDown`.
  Unit tests: `promtool test rules deploy/rules/tests/rules_test.yml`.
- `deploy/grafana/`: a provisioned Prometheus datasource with the fixed uid `throttlescope-prometheus`, a
  dashboard provider, and `dashboards/throttlescope.json` (one row per level, dispatch, fairness queues, resource
  groups, offload, mutation quotas).
"""


def _row(m: Metric) -> str:
    labels = ", ".join(f"`{label}`" for label in m.labels) or "—"
    return f"| `{m.exposed}` | {m.type} | {m.unit} | {labels} | {_ACROSS[m.across]} | {m.help} |"


def render_markdown() -> str:
    """The reference table (docs/metrics.md), generated from ``CATALOGUE`` and ``LABELS``."""
    out = [_INTRO, "## Labels", "", "Every label is bounded; there is no pid, participant or task label.", "",
           "| label | values |", "|---|---|"]
    out += [f"| `{name}` | {text} |" for name, text in LABELS.items()]
    groups = list(dict.fromkeys(m.group for m in CATALOGUE))
    for group in groups:
        out += ["", f"## {group[0].upper()}{group[1:]}", "",
                "| query | type | unit | labels | across participants | help |", "|---|---|---|---|---|---|"]
        out += [_row(m) for m in CATALOGUE if m.group == group]
    out += ["", "## Sources", "", "Where each value comes from (fields of `protocol.Report` unless said).", "",
            "| metric | source |", "|---|---|"]
    out += [f"| `{m.exposed}` | {m.source} |" for m in CATALOGUE]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m metrics.catalogue",
                                     description="Print the metric catalogue.")
    parser.add_argument("--markdown", action="store_true", help="the reference table (docs/metrics.md)")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(render_markdown())
    else:
        for m in CATALOGUE:
            print(f"{m.exposed}\t{m.type}\t{','.join(m.labels)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
