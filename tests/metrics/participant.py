"""A real participant process for the metrics tests: real limiter objects throttled at several levels, reporting.

``python -m tests.metrics.participant --url URL --token TOKEN --id ID --roles publish,dispatch,offload,...``

Until the participant runtime (collectors/) exists, this drives the limiter library directly: greedy producer
threads under ``limiter.PublishLimits`` (throttled at broker, resource group, tenant, namespace and topic
levels), dispatchers under broker/topic/subscription ``DispatchRateLimiter``s, an ``OffloadThrottle`` and a
KIP-599 ``MutationQuota``; a ``stuck`` topic limiter is driven far below zero once (Pulsar #23920's symptom).
Every interval it POSTs a ``protocol.Report`` built from the limiters' snapshots to ``/v1/report`` with the
participant token, and sets its resource-group bucket to its local share of the quota computed from the usage
map in the answer (PIP-82). SIGTERM: goodbye, then exit.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections import defaultdict

import httpx

from limiter import Level, Producer, PublishLimits, PublishRateLimiter, Rate
from limiter.dispatch import Dispatcher, DispatchRateLimiter
from limiter.mutation import MutationQuota, ThrottlingQuotaExceeded
from limiter.offload import OffloadThrottle
from limiter.quota import local_quotas
from protocol import (
    BucketSnapshot,
    DimensionSnapshot,
    LimiterCounters,
    MutationQuotaSnapshot,
    OffloadStats,
    Participant,
    PolicySet,
    QueueEntry,
    QueueSnapshot,
    Report,
    ReportResponse,
    SharedUsage,
    limit_key,
)

RG = "rg-gold"
ADAPTIVE_TOPIC = "acme/api/sink"   # the metrics test makes its publishRate adaptive
RG_KEY = limit_key("resource_group", "publish", RG)
TOPICS = {  # topic -> greedy producers; the level that binds each follows from the limits in Publish
    "acme/web/clicks": 4,   # topic: 20/s
    "acme/web/views": 1,    # namespace acme/web: 30/s, 10 left after clicks
    "acme/shop/orders": 2,  # resource group rg-gold (attached to acme/shop): this participant's share
    "acme/api/calls": 1,    # tenant acme: 120/s, what the three above leave
    "beta/x/y": 1,          # broker: 300/s, what acme leaves
}


class Publish:
    def __init__(self, stop: threading.Event) -> None:
        self.limits = PublishLimits()
        self.limits.set_limit(Level.BROKER, "broker", Rate(msgs=300))
        self.limits.set_limit(Level.TENANT, "acme", Rate(msgs=120))
        self.limits.set_limit(Level.NAMESPACE, "acme/web", Rate(msgs=30))
        self.limits.set_topic_policy(Level.TOPIC, "acme/web/clicks", Rate(msgs=20, bytes=4000))
        self.limits.attach_resource_group(Level.NAMESPACE, "acme/shop", RG)
        self.limits.set_limit(Level.RESOURCE_GROUP, RG, Rate(msgs=20))  # until the first usage map
        self.stop = stop
        self.last: tuple[float, float, float, float] | None = None  # time, msgs, bytes, throttle seconds
        for topic, n in TOPICS.items():
            for i in range(n):
                producer = self.limits.producer(topic, name=f"{topic}#{i}")
                threading.Thread(target=self._run, args=(producer,), daemon=True).start()

    def _run(self, producer: Producer) -> None:
        while not self.stop.is_set():
            producer.acquire(1, 100, timeout_s=0.2)

    def usage(self) -> list[SharedUsage]:
        snap = self.limits.limiter(Level.RESOURCE_GROUP, RG).snapshot()
        now = time.monotonic()
        cur = (now, snap.admitted_msgs, snap.admitted_bytes, snap.throttle_time_s)
        prev, self.last = self.last, cur
        if prev is None or now <= prev[0]:
            return [SharedUsage(level="resource_group", name=RG, direction="publish")]
        dt = now - prev[0]
        msgs, bytes_ = (cur[1] - prev[1]) / dt, (cur[2] - prev[2]) / dt
        paused = min(1.0, max(0.0, (cur[3] - prev[3]) / dt / TOPICS["acme/shop/orders"]))
        wish = 1 / max(0.1, 1 - paused)
        return [SharedUsage(level="resource_group", name=RG, direction="publish", usage_msgs_per_s=msgs,
                            usage_bytes_per_s=bytes_, demand_msgs_per_s=msgs * wish, demand_bytes_per_s=bytes_ * wish)]

    def apply(self, me: str, answer: ReportResponse, policies: PolicySet | None) -> None:
        users = answer.usage.get(RG_KEY, {})
        if policies is None or RG not in policies.resourceGroups or me not in users:
            return
        configured = policies.resourceGroups[RG].publishRateInMsgs
        quotas = local_quotas(policies.quota_strategy(RG), configured,
                              {p: u.usage_msgs_per_s for p, u in users.items()},
                              {p: u.demand_msgs_per_s for p, u in users.items()})
        self.limits.set_limit(Level.RESOURCE_GROUP, RG, Rate(msgs=quotas[me]))


def _publish_parts(limiters: list[PublishRateLimiter]) -> tuple[list, list, list]:
    buckets, queues, counters = [], [], []
    for snap in (lim.snapshot() for lim in limiters):
        dims = {b.dimension: DimensionSnapshot(tokens=b.tokens, rate=b.rate, capacity=b.capacity,
                                               period_s=b.period_s) for b in snap.buckets}
        if dims:
            buckets.append(BucketSnapshot(level=snap.level, name=snap.name, kind=snap.kind, **dims))
        queues.append(QueueSnapshot(level=snap.level, name=snap.name, length=len(snap.queue),
                                    entries=[QueueEntry(producer=e.producer, waiting_s=e.waiting_s)
                                             for e in snap.queue[:256]]))
        counters.append(LimiterCounters(level=snap.level, name=snap.name, kind=snap.kind,
                                        throttled_count=snap.throttled_count,
                                        throttle_time_seconds_total=snap.throttle_time_s,
                                        admitted_msgs_total=snap.admitted_msgs, admitted_bytes_total=snap.admitted_bytes))
    return buckets, queues, counters


class Dispatch:
    def __init__(self, stop: threading.Event) -> None:
        broker = DispatchRateLimiter(Rate(msgs=200), Level.BROKER, "broker")
        topic = DispatchRateLimiter(Rate(msgs=60), Level.TOPIC, "acme/web/clicks")
        sub = DispatchRateLimiter(Rate(msgs=15), Level.SUBSCRIPTION, "acme/web/clicks/audit")
        other = DispatchRateLimiter(Rate(msgs=1000), Level.TOPIC, "acme/api/calls")
        self.limiters = [broker, topic, sub, other]
        self.stop = stop
        self.lock = threading.Lock()
        self.admitted: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.backoff_s: dict[int, float] = defaultdict(float)
        for d in (Dispatcher(broker=broker, topic=topic, subscription=sub), Dispatcher(broker=broker, topic=topic),
                  Dispatcher(broker=broker, topic=other)):
            threading.Thread(target=self._run, args=(d,), daemon=True).start()

    def _run(self, d: Dispatcher) -> None:
        while not self.stop.is_set():
            plan = d.plan_read(20)
            if plan.entries == 0:
                start = time.monotonic()
                time.sleep(0.05)
                by = next(lim for lim in d.levels if lim.level == plan.throttled_by)
                with self.lock:
                    self.backoff_s[id(by)] += time.monotonic() - start
                continue
            d.charge(plan.entries, plan.entries * 100, plan.entries, plan)
            with self.lock:
                for lim in d.levels:
                    self.admitted[id(lim)][0] += plan.entries
                    self.admitted[id(lim)][1] += plan.entries * 100
            time.sleep(0.005)

    def parts(self) -> tuple[list, list, dict[str, int]]:
        buckets, counters, throttled = [], [], defaultdict(int)
        for lim in self.limiters:
            s = lim.snapshot()
            buckets.append(BucketSnapshot(level=s["level"], name=s["name"], kind="dispatch", msgs=DimensionSnapshot(
                tokens=s["msgs_tokens"], rate=s["msgs_limit"], capacity=s["msgs_limit"], period_s=s["period_s"])))
            with self.lock:
                msgs, bytes_ = self.admitted[id(lim)]
                backoff = self.backoff_s[id(lim)]
            counters.append(LimiterCounters(level=s["level"], name=s["name"], kind="dispatch",
                                            throttled_count=s["throttled_count"], throttle_time_seconds_total=backoff,
                                            admitted_msgs_total=msgs, admitted_bytes_total=bytes_))
            throttled[s["level"]] += s["throttled_count"]
        return buckets, counters, dict(throttled)


class Offload:
    def __init__(self, stop: threading.Event) -> None:
        self.throttle = OffloadThrottle(bytes_per_s=50_000)
        self.stop = stop
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop.is_set():
            ticket = self.throttle.before_read(entries=10)
            time.sleep(min(ticket.delay_s, 0.5))
            self.throttle.after_read(ticket, 10_000)

    def stats(self) -> OffloadStats:
        s = self.throttle.snapshot()
        return OffloadStats(limit_bytes_per_s=s.bytes_per_s, limited_total=s.reads_limited,
                            read_bytes_total=s.bytes_total, offload_time_seconds_total=s.offload_time_s,
                            reading_max_bytes=s.reading_max_bytes, errors_total=s.errors,
                            rate_bytes_per_s=s.offload_rate_bytes_per_s)


class Mutations:
    def __init__(self, stop: threading.Event) -> None:
        self.quota = MutationQuota(quota_per_s=5, window_s=1, samples=2, strict=True)
        self.stop = stop
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.quota.record(3)
                time.sleep(0.05)
            except ThrottlingQuotaExceeded as e:
                time.sleep(min(e.throttle_time_s, 0.2))

    def snapshot(self) -> MutationQuotaSnapshot:
        q = self.quota
        return MutationQuotaSnapshot(user="alice", client_id="etl", tokens=q.tokens(), rate=q.mutation_rate_per_s(),
                                     throttle_time_s=q.throttle_time_s())


def stuck_limiter() -> PublishRateLimiter:
    """A topic limiter 400 s of refill in debt: one send of 2000 messages at 5 msgs/s."""
    limiter = PublishRateLimiter(Rate(msgs=5), level=Level.TOPIC, name="bulk/load/backfill")
    Producer("backfill", [limiter]).try_acquire(2000, 0)
    return limiter


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--id", required=True)
    p.add_argument("--roles", default="publish")
    p.add_argument("--interval", type=float, default=0.5)
    args = p.parse_args(argv)
    roles = set(args.roles.split(","))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    publish = Publish(stop) if "publish" in roles else None
    dispatch = Dispatch(stop) if "dispatch" in roles else None
    offload = Offload(stop) if "offload" in roles else None
    mutations = Mutations(stop) if "mutation" in roles else None
    extra = [stuck_limiter()] if "stuck" in roles else []
    who = Participant(participant_id=args.id, application_id="app-metrics-test", executor_id=args.id,
                      host=socket.gethostname(), pid=os.getpid())
    client = httpx.Client(base_url=args.url, headers={"Authorization": f"Bearer {args.token}"}, timeout=5)
    seq, applied, policies = 0, 0, None
    while not stop.wait(args.interval):
        seq += 1
        buckets, queues, counters = _publish_parts((publish.limits.limiters() if publish else []) + extra)
        dispatched: dict[str, int] = {}
        if dispatch is not None:
            more_buckets, more_counters, dispatched = dispatch.parts()
            buckets, counters = buckets + more_buckets, counters + more_counters
        report = Report(participant=who, seq=seq, sent_at=time.time(), interval_s=args.interval,
                        applied_policy_version=applied, usage=publish.usage() if publish else [],
                        buckets=buckets, queues=queues, counters=counters, dispatch_throttled=dispatched,
                        offload=offload.stats() if offload else None,
                        mutation_quotas=[mutations.snapshot()] if mutations else [])
        try:
            r = client.post("/v1/report", json=report.model_dump(mode="json"))
        except httpx.TransportError:
            continue  # fail-static: keep enforcing, keep trying
        if r.status_code != 200:
            print(f"participant {args.id}: report answered {r.status_code}: {r.text}", file=sys.stderr, flush=True)
            continue
        answer = ReportResponse.model_validate(r.json())
        if answer.policies is not None:
            policies, applied = answer.policies, answer.policies.version
        if publish is not None:
            publish.apply(args.id, answer, policies)
        if "adaptive" in roles:   # grants of an adaptive limit, with what its sink answered (every 5th: a 429)
            said = {"ok": 10, "throttled": 1 if seq % 5 == 0 else 0}
            with contextlib.suppress(httpx.TransportError):
                client.post("/v1/grant", json={"participant_id": args.id, "asks": [
                    {"level": "topic", "name": ADAPTIVE_TOPIC, "direction": "publish", "wants_msgs": 10,
                     "rate_msgs_per_s": 20, "outcomes": said}]})
    with contextlib.suppress(httpx.TransportError):
        client.post("/v1/goodbye", json={"participant_id": args.id})
    return 0


if __name__ == "__main__":
    sys.exit(main())
