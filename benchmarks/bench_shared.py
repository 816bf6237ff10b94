"""Shared limits on the Spark workloads people run: held (no 1-s window above the limit) and used (no stranded
quota), side by side with a static split and a central Redis limiter, in one run.

A real control plane (report interval 1 s, what users run) and a real ``redis-server`` start on loopback; one
local[2] SparkSession is configured with ``collectors.spark.configure``. Each workload sets one shared limit
(1,000 msgs/s) and runs through ``mapInArrow`` (``shared/jobs.py``), each task recording every admitted batch
(``shared/kinds.py``); ``shared/windows.py`` turns the records into the figures:

- mean admitted / limit over the measuring span (after ``WARMUP_S``), goal >= 0.97 where demand exceeds it;
- the worst 1-s window / limit (windows start at every admission, so none is missed), goal <= 1.05 plus one
  acquire (100 rows = 0.1 of the limit: ``ONE_ACQUIRE``);
- with demand below the limit (60 %), delivered / demanded, goal >= 0.99 (throttled below 1 % of the time);
- a live cut to 30 % and back: seconds until the cut holds, goal <= 2 report intervals;
- the control plane SIGKILLed mid-stream and restarted: the longest stall, and the worst window.

Kinds: ``ours`` (the helpers and a shared policy), ``static`` (limit / tasks per task), ``redis`` (the
moving window of ``limits`` on Redis, one round trip per acquire). Cost per acquire is measured in this
process: a leased producer's ``acquire`` under a non-binding bucket against one Redis ``hit``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import row
from .shared import jobs, windows
from .shared.kinds import arrow_fn
from .shared.servers import ControlPlaneServer, RedisServer

SECTION = "shared"
LIMIT = 1000.0
INTERVAL_S = 1.0
WARMUP_S = 5.0
ONE_ACQUIRE = jobs.ARROW_ROWS / LIMIT


@dataclass
class Workload:
    name: str
    level: str                      # "topic", "tenant" or "resource_group"
    kinds: tuple[str, ...]
    partitions: int = 2
    topics: tuple[str, ...] = ("bench/a/t0",)
    sizes: list[int] | None = None  # a batch job with these partition sizes (else a stream)
    pace_per_task: float = 0.0      # demand below the limit
    during: str | None = None       # "cut" or "kill"
    job: str = "helpers"            # "helpers" (mapInArrow through the public helpers) or "publish" (the job)
    notes: dict[str, Any] = field(default_factory=dict)


def workloads(quick: bool) -> list[Workload]:
    three = ("bench/b/t0", "bench/b/t1", "bench/b/t2")
    rows = 10_000 if quick else 24_000
    return [
        Workload("stream, 1 topic, 2 tasks", "topic", ("ours", "static", "redis")),
        Workload("stream, 1 topic, 4 tasks", "topic", ("ours", "static", "redis"), partitions=4),
        Workload("stream, 3 topics, tenant limit, 4 tasks", "tenant", ("ours", "static", "redis"), partitions=4,
                 topics=three),
        Workload("stream, 3 topics, resource group, 4 tasks", "resource_group", ("ours",), partitions=4,
                 topics=three),
        Workload("batch, 64 short tasks", "topic", ("ours", "static", "redis"), partitions=64,
                 sizes=[rows // 64] * 64),
        Workload("batch, 8 tasks, one 10x", "topic", ("ours",), partitions=8,
                 sizes=[rows * 10 // 17] + [rows // 17] * 7),
        Workload("publish job, stream, 1 topic, 2 tasks", "topic", ("ours",), job="publish"),
        Workload("publish job, batch, 3 topics, tenant limit, 4 tasks", "tenant", ("ours",), partitions=4,
                 topics=three, sizes=[rows // 4] * 4, job="publish"),
        Workload("stream, demand 60 % of the limit", "topic", ("ours", "static", "redis"),
                 pace_per_task=0.3 * LIMIT),
        Workload("stream, live cut to 30 % and back", "topic", ("ours",), during="cut"),
        Workload("stream, control plane killed and restarted", "topic", ("ours",), partitions=4, during="kill"),
    ]


class Bench:
    def __init__(self, quick: bool, work: Path):
        self.quick, self.work = quick, work
        self.duration_s = 10.0 if quick else 20.0
        self.cp = ControlPlaneServer(work / "cp", INTERVAL_S, work / "cp.log").start()
        self.redis = RedisServer().start()
        self.admin = self.cp.admin()
        self.spark = self._session()
        self.runs = 0

    def _session(self) -> Any:
        from pyspark.sql import SparkSession

        from collectors.spark import configure

        builder = (SparkSession.builder.master("local[2]").appName("throttlescope-bench-shared")
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.shuffle.partitions", "2")
                   .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(jobs.ARROW_ROWS)))
        configure(builder, self.cp.url, self.cp.token, THROTTLESCOPE_REPORT_INTERVAL_S=str(INTERVAL_S))
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        # the first streaming query of a session spends seconds starting up: not in any measured run
        with tempfile.TemporaryDirectory(prefix="warm-up-", dir=self.work) as log_dir:
            jobs.stream(spark, arrow_fn("static", ("warm/up/t",), log_dir, limit_per_s=1e9), 2, 100, 3.0)
        return spark

    def close(self) -> None:
        self.spark.stop()
        self.cp.close()
        self.redis.close()

    # --- policies -------------------------------------------------------------------------------------------

    def set_limit(self, w: Workload, run: int, per_s: float) -> tuple[str, ...]:
        """Set the shared limit for run ``run`` of ``w``; returns the topics the run sends to (fresh names, so
        no run inherits another's leases)."""
        tenant = f"t{run}"
        topics = tuple(f"{tenant}/{t.split('/', 1)[1]}" for t in w.topics)
        namespaces = sorted({t.rsplit("/", 1)[0] for t in topics})
        if w.level == "topic":
            for t in topics:
                self._ok(self.admin.post(f"/admin/v2/persistent/{t}/publishRate",
                                         json={"publishThrottlingRateInMsg": per_s}))
        elif w.level == "tenant":
            self._ok(self.admin.post(f"/admin/v2/tenants/{tenant}/publishRate",
                                     json={"publishThrottlingRateInMsg": per_s}))
        else:
            self._ok(self.admin.put(f"/admin/v2/resourcegroups/rg{run}", json={"publishRateInMsgs": per_s}))
            for ns in namespaces:
                self._ok(self.admin.post(f"/admin/v2/namespaces/{ns}/resourcegroup/rg{run}"))
        return topics

    @staticmethod
    def _ok(r: Any) -> None:
        if r.status_code >= 300:
            raise RuntimeError(f"{r.request.method} {r.request.url}: {r.status_code} {r.text}")

    # --- one run ----------------------------------------------------------------------------------------------

    def run(self, w: Workload, kind: str) -> dict[str, float]:
        self.runs += 1
        log_dir = Path(tempfile.mkdtemp(prefix="admitted-", dir=self.work))
        topics = self.set_limit(w, self.runs, LIMIT) if kind == "ours" else w.topics
        fn = arrow_fn(kind, topics, str(log_dir), limit_per_s=LIMIT, tasks=min(w.partitions, 2) if w.sizes
                      else w.partitions, redis_url=self.redis.url, redis_key=f"run{self.runs}",
                      pace_per_task=w.pace_per_task)
        marks: dict[str, float] = {}
        started = time.time()
        if w.job == "publish":
            events = jobs.publish(self.spark, topics, str(log_dir), w.partitions, WARMUP_S + self.duration_s,
                                  sum(w.sizes) if w.sizes else None)
        elif w.sizes is not None:
            jobs.batch(self.spark, fn, w.sizes)
        else:
            jobs.stream(self.spark, fn, w.partitions, int(LIMIT), WARMUP_S + self.duration_s,
                        self._during(w, kind, marks))
        if w.job != "publish":
            events = windows.read_events(log_dir)
        shutil.rmtree(log_dir, ignore_errors=True)
        if not events:
            raise RuntimeError(f"{w.name} ({kind}): nothing was admitted")
        if w.sizes is not None:   # a batch job: its span, less the start-up and the last half second
            t0, t1 = events[0][0] + 2.0, events[-1][0] - 0.5
        else:
            t0, t1 = started + WARMUP_S, min(events[-1][0], started + WARMUP_S + self.duration_s)
        out = {"mean": windows.mean_ratio(events, LIMIT, t0, t1),
               "worst": windows.worst_window_ratio(events, LIMIT, t0, t1),
               "gap_s": windows.longest_gap_s(events, t0, t1)}
        if "cut" in marks:
            out["hold_s"] = windows.hold_time_s(events, marks["cut"], 0.3 * LIMIT, marks["raise"],
                                                slack=jobs.ARROW_ROWS)
            out["cut_mean"] = windows.mean_ratio(events, 0.3 * LIMIT, marks["cut"] + 2 * INTERVAL_S, marks["raise"])
            out["raised_mean"] = windows.mean_ratio(events, LIMIT, marks["raise"] + 2 * INTERVAL_S, t1)
        if "killed" in marks:
            out["outage_gap_s"] = windows.longest_gap_s(events, marks["killed"], marks["restarted"] + 3.0)
            out["outage_mean"] = windows.mean_ratio(events, LIMIT, marks["killed"], marks["restarted"])
            out["after_worst"] = windows.worst_window_ratio(events, LIMIT, marks["restarted"], t1)
        return out

    def _during(self, w: Workload, kind: str, marks: dict[str, float]) -> Callable[[float], None] | None:
        if w.during == "cut":
            def cut(t0: float) -> None:
                time.sleep(WARMUP_S + self.duration_s / 4)
                marks["cut"] = time.time()
                self.set_limit(w, self.runs, 0.3 * LIMIT)
                time.sleep(self.duration_s / 2)
                marks["raise"] = time.time()
                self.set_limit(w, self.runs, LIMIT)
            return cut
        if w.during == "kill":
            def kill(t0: float) -> None:
                time.sleep(WARMUP_S + self.duration_s / 4)
                marks["killed"] = time.time()
                self.cp.kill()
                time.sleep(6.0)
                self.cp.start()
                marks["restarted"] = time.time()
            return kill
        return None

    # --- cost per acquire ---------------------------------------------------------------------------------

    def cost_per_acquire_s(self) -> dict[str, float]:
        from limiter import Producer, PublishRateLimiter, Rate

        from .shared.kinds import _redis_acquire

        producer = Producer("cost", [PublishRateLimiter(Rate(1e12, -1, 1))])
        n = 20_000
        t = time.perf_counter()
        for _ in range(n):
            producer.acquire(msgs=100)
        ours = (time.perf_counter() - t) / n
        acquire = _redis_acquire(self.redis.url, 1e9, "cost")
        m = 2_000
        t = time.perf_counter()
        for _ in range(m):
            acquire(1)
        return {"ours": ours, "redis": (time.perf_counter() - t) / m}


def _rows(w: Workload, kind: str, r: dict[str, float]) -> list[dict[str, Any]]:
    label = f"{w.name} [{kind}]"
    out = []
    if w.pace_per_task:
        demand = w.pace_per_task * w.partitions / LIMIT
        out.append(row(SECTION, f"{label}: delivered / demanded", r["mean"] / demand, "x",
                       ">= 0.99" if kind == "ours" else "", r["mean"] / demand >= 0.99 if kind == "ours" else None))
    elif w.during == "cut":
        out.append(row(SECTION, f"{label}: time for the cut to hold", r["hold_s"], "s", f"<= {2 * INTERVAL_S:g}",
                       r["hold_s"] <= 2 * INTERVAL_S))
        out.append(row(SECTION, f"{label}: mean during the cut / cut limit", r["cut_mean"], "x", ">= 0.97",
                       r["cut_mean"] >= 0.97))
        out.append(row(SECTION, f"{label}: mean after the raise / limit", r["raised_mean"], "x", ">= 0.97",
                       r["raised_mean"] >= 0.97))
    elif w.during == "kill":
        out.append(row(SECTION, f"{label}: longest stall around the outage", r["outage_gap_s"], "s", "<= 2",
                       r["outage_gap_s"] <= 2))
        out.append(row(SECTION, f"{label}: mean during the outage / limit", r["outage_mean"], "x"))
        out.append(row(SECTION, f"{label}: worst 1-s window after the restart / limit", r["after_worst"], "x",
                       f"<= {1.05 + ONE_ACQUIRE:.2f}", r["after_worst"] <= 1.05 + ONE_ACQUIRE))
        return out
    else:
        goal = kind == "ours"
        out.append(row(SECTION, f"{label}: mean admitted / limit", r["mean"], "x", ">= 0.97" if goal else "",
                       r["mean"] >= 0.97 if goal else None))
    goal = kind == "ours"
    out.append(row(SECTION, f"{label}: worst 1-s window / limit", r["worst"], "x",
                   f"<= {1.05 + ONE_ACQUIRE:.2f}" if goal else "", r["worst"] <= 1.05 + ONE_ACQUIRE if goal else None))
    return out


def run(quick: bool = False, only: set[str] | None = None, kinds: set[str] | None = None) -> list[dict[str, Any]]:
    if shutil.which("java") is None:
        return [row(SECTION, "skipped: Java not found", float("nan"), "", "", None)]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="bench-shared-") as tmp:
        bench = Bench(quick, Path(tmp))
        rows = []
        try:
            for w in workloads(quick):
                if only and w.name not in only:
                    continue
                for kind in w.kinds:
                    if kinds and kind not in kinds:
                        continue
                    try:
                        r = bench.run(w, kind)
                    except Exception as e:  # noqa: BLE001 - one failed workload is a failed row, not a failed table
                        rows.append(row(SECTION, f"{w.name} [{kind}] failed: {type(e).__name__}: {e}"[:200],
                                        float("nan"), "", "", False))
                        continue
                    print(f"  {w.name} [{kind}]: {r}", file=sys.stderr, flush=True)
                    rows += _rows(w, kind, r)
            cost = bench.cost_per_acquire_s()
            rows.append(row(SECTION, "cost per acquire: throttlescope (local bucket)", cost["ours"] * 1e6, "us"))
            rows.append(row(SECTION, "cost per acquire: Redis moving window (one round trip)", cost["redis"] * 1e6,
                            "us"))
            rows.append(row(SECTION, "cost per acquire: throttlescope / Redis", cost["ours"] / cost["redis"], "x",
                            "<= 0.1", cost["ours"] / cost["redis"] <= 0.1))
        finally:
            bench.close()
    return rows


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", action="append", help="a workload's name (repeatable)")
    parser.add_argument("--kind", action="append", help="ours, static or redis (repeatable; default: all)")
    args = parser.parse_args()
    for r in run(args.quick, set(args.only) if args.only else None, set(args.kind) if args.kind else None):
        print(f"{r['name']:<90} {r['value']:10.3f} {r['unit']:<3} {r['goal']:<8} {r['ok']}")
