"""A stand-in participant for the dashboard tests: real limiters, real reports, policies applied live.

``python -m tests.dashboard.participant --url URL [--app APP] [--executor ID] [--max-seconds S]`` (the participant
token in THROTTLESCOPE_TOKEN). Until ``collectors/runtime.py`` can be started the same way, this process plays a
Spark Python worker: it owns a ``limiter.PublishLimits`` (on a ManualClock advanced with real time, so the load
is reproducible), producers on a few topics that want more than their limits (throttled at the topic,
resource-group and tenant levels), an ``OffloadThrottle`` and a ``MutationQuotaRegistry``. Every report
interval it builds a ``protocol.Report`` from their snapshots, posts it to ``/v1/report``, applies the
policy document it gets back when the version moved, and reports that version as applied. SIGTERM says goodbye.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import time
from typing import Any

import httpx

from limiter import Level, ManualClock, PublishLimits, Rate
from limiter.mutation import MutationQuotaConfig, MutationQuotaRegistry, ThrottlingQuotaExceeded
from limiter.offload import OffloadThrottle
from limiter.quota import DEFAULT_STRATEGY, local_quotas
from protocol import PolicySet, Report, limit_key

# topic -> [(producer, wanted msgs/s)]
LOAD = {
    "acme/web/clicks": [("clicks-1", 30.0), ("clicks-2", 30.0), ("clicks-3", 10.0)],
    "acme/web/views": [("views-1", 12.0)],
    "acme/batch/export": [("export-1", 40.0), ("export-2", 25.0)],
    "beta/etl/load": [("load-1", 25.0), ("load-2", 8.0)],
}
MSG_BYTES = 200
BATCH = 8.0             # producers send batches: a send may overdraw a bucket (debt)
READ_BYTES = 32 * 1024
MUTATIONS = (("alice", "etl-1", 4.0, 8.0), ("bob", "console", 0.5, 1.0))   # user, client, per second, per request
STEPS = 10


def _rate(msgs: float, byts: float, period: int = 1) -> Rate | None:
    return Rate(msgs, byts, period) if msgs > 0 or byts > 0 else None


class Participant:
    def __init__(self, url: str, token: str, app: str, executor: str, interval: float) -> None:
        self.client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=5)
        self.who = {"participant_id": f"{app}/{executor}/{socket.gethostname()}/{os.getpid()}",
                    "application_id": app, "executor_id": executor, "host": socket.gethostname(), "pid": os.getpid()}
        self.interval = interval
        self.clock = ManualClock(start_s=time.time())
        self.limits = PublishLimits(clock=self.clock)
        self.producers = {p: (topic, want, self.limits.producer(topic, p))
                          for topic, ps in LOAD.items() for p, want in ps}
        self.backlog = dict.fromkeys(self.producers, 0.0)
        self.mutation_backlog = {(u, c): 0.0 for u, c, _, _ in MUTATIONS}
        self.offload = OffloadThrottle(-1, window_s=0.5, clock=self.clock)
        self.mutations = MutationQuotaRegistry(clock=self.clock)
        self.applied, self.seq = 0, 0
        self.attached: set[tuple[Level, str]] = set()
        self.rg_quota: dict[str, Rate | None] = {}
        self.wanted: dict[tuple[str, str], float] = {}      # (level, name) -> msgs wanted this interval
        self.before: dict[tuple[str, str], float] = {}      # (level, name) -> admitted msgs at the last report

    def apply(self, ps: PolicySet) -> None:
        s = ps.brokerSettings
        self.limits.set_limit(Level.BROKER, "broker", _rate(s.get("brokerPublishThrottlingMaxMessageRate", 0),
                                                            s.get("brokerPublishThrottlingMaxByteRate", 0)))
        self.limits.set_topic_policy(Level.BROKER, None, _rate(s.get("maxPublishRatePerTopicInMessages", 0),
                                                               s.get("maxPublishRatePerTopicInBytes", 0)))
        for topic in LOAD:
            tenant, ns = topic.split("/")[0], "/".join(topic.split("/")[:2])
            for level, name, pol in ((Level.TOPIC, topic, ps.topics.get(topic)),
                                     (Level.NAMESPACE, ns, ps.namespaces.get(ns))):
                pr = pol.publishRate if pol else None
                self.limits.set_topic_policy(level, name, None if pr is None else _rate(
                    pr.publishThrottlingRateInMsg, pr.publishThrottlingRateInByte, pr.ratePeriodInSecond))
            tp = ps.tenants.get(tenant)
            pr = tp.publishRate if tp else None
            self.limits.set_limit(Level.TENANT, tenant, None if pr is None else _rate(
                pr.publishThrottlingRateInMsg, pr.publishThrottlingRateInByte, pr.ratePeriodInSecond))
        wanted = {(Level.NAMESPACE, k): g for k, g in ps.namespaceResourceGroups.items()}
        wanted.update({(Level.TENANT, k): g for k, g in ps.tenantResourceGroups.items()})
        for key in self.attached - set(wanted):
            self.limits.attach_resource_group(key[0], key[1], None)
        for key, group in wanted.items():
            self.limits.attach_resource_group(key[0], key[1], group)
        self.attached = set(wanted)
        self.rg_quota = {g: _rate(rg.publishRateInMsgs, rg.publishRateInBytes) for g, rg in ps.resourceGroups.items()}
        for g, rate in self.rg_quota.items():
            self.limits.set_limit(Level.RESOURCE_GROUP, g, rate)
        self.offload.bytes_per_s = float(s.get("managedLedgerOffloadBrokerFlowPermitsPerSecond", -1))
        self.mutations.apply({(m.user, m.clientId): MutationQuotaConfig(m.quotaPerSecond, m.windowSeconds,
                                                                         m.samples, m.strict)
                              for m in ps.mutationQuotas if m.quotaPerSecond > 0})
        self.applied = ps.version

    def step(self, dt: float) -> None:
        """One slice of load: every producer tries to send what it wants in ``dt``; offload and mutations too."""
        self.clock.advance(dt)
        for name, (topic, want, producer) in self.producers.items():
            msgs = want * dt
            tenant, ns = topic.split("/")[0], "/".join(topic.split("/")[:2])
            group = self.limits.resource_group_of(topic)
            for key in (("topic", topic), ("namespace", ns), ("tenant", tenant),
                        *((("resource_group", group),) if group else ())):
                self.wanted[key] = self.wanted.get(key, 0.0) + msgs
            self.backlog[name] = min(self.backlog[name] + msgs, 4 * BATCH)
            if self.backlog[name] >= BATCH and producer.try_acquire(msgs=BATCH, bytes=BATCH * MSG_BYTES):
                self.backlog[name] -= BATCH
        if self.offload.calculate_delay_s() == 0:
            self.offload.after_read(self.offload.before_read(1, READ_BYTES), READ_BYTES)
        else:
            self.offload.cancel_read(self.offload.before_read(1, READ_BYTES))
        for user, client, per_s, batch in MUTATIONS:
            self.mutation_backlog[(user, client)] += per_s * dt
            if self.mutation_backlog[(user, client)] >= batch:
                try:
                    self.mutations.record(user, client, batch)
                    self.mutation_backlog[(user, client)] -= batch
                except ThrottlingQuotaExceeded:
                    self.mutation_backlog[(user, client)] = min(self.mutation_backlog[(user, client)], 2 * batch)

    def report(self) -> dict[str, Any]:
        self.seq += 1
        snaps = self.limits.snapshots()
        buckets, queues, counters, usage = [], [], [], []
        for s in snaps:
            dims = {b.dimension: {"tokens": b.tokens, "rate": b.rate, "capacity": b.capacity, "period_s": b.period_s}
                    for b in s.buckets}
            buckets.append({"level": s.level, "name": s.name, "kind": s.kind, **dims})
            if s.queue:
                queues.append({"level": s.level, "name": s.name, "length": len(s.queue),
                               "entries": [{"producer": q.producer, "waiting_s": q.waiting_s} for q in s.queue]})
            counters.append({"level": s.level, "name": s.name, "kind": s.kind, "throttled_count": s.throttled_count,
                             "throttle_time_seconds_total": s.throttle_time_s,
                             "admitted_msgs_total": s.admitted_msgs, "admitted_bytes_total": s.admitted_bytes})
            if s.level in ("resource_group", "tenant", "namespace"):
                key = (s.level, s.name)
                admitted = s.admitted_msgs - self.before.get(key, 0.0)
                self.before[key] = s.admitted_msgs
                wanted = max(self.wanted.pop(key, 0.0), admitted)
                usage.append({"level": s.level, "name": s.name, "direction": "publish",
                              "usage_msgs_per_s": admitted / self.interval,
                              "usage_bytes_per_s": admitted * MSG_BYTES / self.interval,
                              "demand_msgs_per_s": wanted / self.interval,
                              "demand_bytes_per_s": wanted * MSG_BYTES / self.interval})
        o = self.offload.snapshot()
        mutation = [{"user": m["user"] or "*", "client_id": m["client_id"] or "*", "tokens": m["tokens"],
                     "rate": m["mutation_rate_per_s"], "throttle_time_s": m["throttle_time_s"]}
                    for m in self.mutations.snapshot()]
        body = {"participant": self.who, "seq": self.seq, "sent_at": time.time(), "interval_s": self.interval,
                "applied_policy_version": self.applied, "usage": usage, "buckets": buckets, "queues": queues,
                "counters": counters, "mutation_quotas": mutation,
                "offload": {"limit_bytes_per_s": self.offload.bytes_per_s if self.offload.bytes_per_s > 0 else -1,
                            "limited_total": o.reads_limited, "read_bytes_total": o.bytes_total,
                            "offload_time_seconds_total": o.offload_time_s, "reading_max_bytes": o.reading_max_bytes,
                            "errors_total": o.errors, "rate_bytes_per_s": o.offload_rate_bytes_per_s}}
        return Report.model_validate(body).model_dump(mode="json")

    def tick(self) -> None:
        for _ in range(STEPS):
            self.step(self.interval / STEPS)
        response = self.client.post("/v1/report", json=self.report())
        response.raise_for_status()
        answer = response.json()
        if answer.get("policies") is not None:
            self.apply(PolicySet.model_validate(answer["policies"]))
        self.share(answer.get("usage", {}))
        self.interval = float(answer.get("reportIntervalSeconds", self.interval))

    def share(self, usage: dict[str, dict[str, dict[str, float]]]) -> None:
        """PIP-82: this participant's local share of each resource group, from every participant's usage."""
        me = self.who["participant_id"]
        for group, rate in self.rg_quota.items():
            users = usage.get(limit_key("resource_group", "publish", group), {})
            if rate is None or rate.msgs <= 0 or me not in users:
                continue
            mine = local_quotas(DEFAULT_STRATEGY, rate.msgs, {p: u["usage_msgs_per_s"] for p, u in users.items()},
                                {p: u["demand_msgs_per_s"] for p, u in users.items()})[me]
            self.limits.set_limit(Level.RESOURCE_GROUP, group, Rate(max(mine, 0.001), rate.bytes, rate.period_s))

    def goodbye(self) -> None:
        with contextlib.suppress(httpx.HTTPError):
            self.client.post("/v1/goodbye", json={"participant_id": self.who["participant_id"]})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.dashboard.participant")
    p.add_argument("--url", required=True)
    p.add_argument("--app", default="app-dashboard-test")
    p.add_argument("--executor", default="1")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--max-seconds", type=float, default=600.0)
    args = p.parse_args(argv)
    me = Participant(args.url, os.environ["THROTTLESCOPE_TOKEN"], args.app, args.executor, args.interval)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    deadline = time.monotonic() + args.max_seconds
    next_at = time.monotonic()
    while not stop and time.monotonic() < deadline:
        try:
            me.tick()
        except httpx.HTTPError as e:
            print(f"participant: report failed: {e}", file=sys.stderr, flush=True)
        next_at += me.interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    me.goodbye()
    return 0


if __name__ == "__main__":
    sys.exit(main())
