"""Shared limits on the Spark workloads people run: held (no 1-s window above the limit) and used (no stranded
quota), side by side with a static split and a central Redis limiter, in one run -- on ``local[2]`` and on a
standalone cluster of 2 workers (one executor each), started on loopback by the benchmark.

A real control plane (report interval 1 s, what users run) and a real ``redis-server`` start on loopback; one
SparkSession at a time is configured with ``collectors.spark.configure`` (which ships the library to the
executors; the benchmark's own package is added with ``addPyFile``). Each workload (``shared/workloads.py``) sets
one shared limit (1,000 msgs/s; one stream 10,000) and runs through ``mapInArrow`` (``shared/jobs.py``), each
task recording every admitted batch (``shared/kinds.py``); ``shared/windows.py`` turns the records into the
figures:

- mean admitted / limit over the measuring span (after ``WARMUP_S``), goal >= 0.97 where demand exceeds it (a
  workload that runs the ``none`` kind measures its demand: Spark's own pace with no limiter; where that is below
  the limit, ours' goal is 0.97 of it);
- the worst 1-s window / limit (windows start at every admission, so none is missed), goal <= 1.05 plus one
  acquire (``one_acquire``: ours sends 0.025 of the limit at a time, the others each 100-row batch, 0.1; at
  the one stream under 10,000 msgs/s each sends 100 rows, 0.01);
- with demand below the limit (60 %), the time the tasks waited for the limiter over their time, goal < 1 %;
- a live cut to 30 % and back: seconds until the cut holds, goal <= 2 report intervals (ours; Redis's tasks read
  its limit from Redis every second), and the mean during the cut;
- the control plane SIGKILLed mid-stream and restarted: the longest stall, and the worst window;
- on the cluster, one executor SIGKILLed mid-job: the mean afterwards, and the same leaving out the seconds in
  which Spark ran no task at all (goal >= 0.9: the limiter cannot admit rows while the master replaces the
  executor), and for the publish job every record delivered exactly once.
- beside Redis on each workload both ran (``against_redis``): ours' mean less Redis's, goal >= 0 (as fully
  used), and ours' worst window less Redis's, goal <= 0 (as accurate).

A stream whose mean has a goal runs ``STREAM_REPEATS`` times a kind: its row is the median, the spread in the note.
The kinds take turns, a run of each a round (``run_all``), so that a drift of the busy host over a workload's minutes
falls on each alike; until 2026-12-04 each kind ran its repeats in a row, ours first.

Kinds: ``ours`` (the helpers, a shared policy), ``static`` (limit / tasks per task), ``redis`` (``limits``' moving
window on Redis), on the two applications ``redis-sliced`` (Redis charged in ours' slices, ``shared/kinds.py``), and
on the workloads whose demand may not exceed the limit ``none`` (no limiter: Spark's own pace).
Cost per acquire, here: a producer's ``acquire`` against a Redis ``hit``. Replicas: Bench(3).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from collectors.__main__ import _positive_float  # (the jobs' own CLI check: > 0, or an error saying so)

from .common import row
from .shared import apps, jobs, micro_batches, windows
from .shared.cluster import StandaloneCluster
from .shared.kinds import KINDS, arrow_fn, cost_per_acquire_s, redis_limit_key
from .shared.servers import ControlPlaneServer, RedisServer, ReplicatedControlPlane
from .shared.task_logs import read_task_logs
from .shared.workloads import (
    INTERVAL_S,
    LIMIT,
    SECTION,
    WARMUP_S,
    WHERE,
    Workload,
    one_acquire,
    only_error,
    run_all,
    workloads,
)

SESSION_WARM_UP_TASKS = 8   # a new SparkSession's unmeasured stream (see ``jobs.session``)
SESSION_WARM_UP_S = 20.0


class Bench:
    def __init__(self, quick: bool, work: Path, replicas: int = 0,   # replicas: make run-replicated's
                 span_s: float | None = None, keep: Path | None = None):
        self.quick, self.work, self.keep = quick, work, keep   # keep: a folder for each run's records
        self.duration_s = span_s if span_s is not None else 10.0 if quick else 20.0
        self.cp: ControlPlaneServer | ReplicatedControlPlane = (
            ReplicatedControlPlane(work / "cp", INTERVAL_S, work, replicas) if replicas else
            ControlPlaneServer(work / "cp", INTERVAL_S, work / "cp.log")).start()
        self.redis = RedisServer().start()
        self.admin = self.cp.admin()
        self.cluster: StandaloneCluster | None = None
        self.spark: Any = None
        self.where = ""
        self.runs = 0

    def use(self, where: str) -> None:
        """Run the next workloads on ``where``: ``local[2]``, or ``cluster`` (started here, 2 workers x 1 core)."""
        if self.spark is not None:
            self.spark.stop()
            self.spark = None
        master = "local[2]"
        if where == "cluster":
            self.cluster = StandaloneCluster(self.work / "cluster", workers=2, cores=1, memory="1g").start()
            master = self.cluster.master_url
        self.spark, self.where = self._session(master), where

    def _session(self, master: str) -> Any:
        return jobs.session(master, self.cp.url, self.cp.token, self.work, SESSION_WARM_UP_TASKS, SESSION_WARM_UP_S,
                            report_interval_s=INTERVAL_S, warm_up_rows=int(LIMIT))

    def close(self) -> None:
        if self.spark is not None:
            self.spark.stop()
        if self.cluster is not None:
            self.cluster.close()
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
        limit = w.limit_per_s
        span_s = w.span_s or self.duration_s
        log_dir = Path(tempfile.mkdtemp(prefix="admitted-", dir=self.work))
        topics = self.set_limit(w, self.runs, limit) if kind == "ours" else w.topics
        fn = arrow_fn(kind, topics, str(log_dir), limit_per_s=limit, tasks=min(w.partitions, 2) if w.sizes
                      else w.partitions, redis_url=self.redis.url, redis_key=self.redis_key,
                      pace_per_task=w.pace_per_task, helper=w.helper)
        marks: dict[str, float] = {}
        started = time.time()
        during = self._during(w, kind, marks, span_s)
        delivery: dict[str, float] = {}
        if w.job == "publish":
            events = jobs.publish(self.spark, topics, str(log_dir), w.partitions, WARMUP_S + span_s,
                                  sum(w.sizes) if w.sizes else None, during, delivery)
        elif w.sizes is not None:
            jobs.batch(self.spark, fn, w.sizes)
        elif w.apps:   # (this session idles: each application is a driver of its own)
            each = [apps.App(kind, topic, w.partitions, w.rows_per_batch, pace, limit, len(w.apps) * w.slots,
                             self.redis.url, self.redis_key, w.slots, w.commit_s)
                    for topic, pace in zip(topics, w.apps, strict=True)]
            started = apps.run(each, self.cp.url, self.cp.token, self.work, log_dir, WARMUP_S + span_s, INTERVAL_S)
        else:
            jobs.stream(self.spark, fn, w.partitions, w.rows_per_batch, WARMUP_S + span_s, during, w.commit_s)
        logs = read_task_logs(log_dir)   # (every task file read once, for all the figures below)
        waits = logs.waits if w.job != "publish" else []
        steady = w.sizes is None and w.job != "publish" and not marks   # a stream under one constant limit
        if w.job != "publish":
            events = logs.events
        requests = windows.requests_per_s(log_dir, started, time.time())
        if self.keep is not None:
            words = "".join(c if c.isalnum() else " " for c in f"{self.where} {w.name}").split()
            slug = "-".join(words)   # e.g. local-2-stream-1-topic-2-tasks
            shutil.copytree(log_dir, self.keep / f"{self.runs:03d}-{kind}-{slug}")
        shutil.rmtree(log_dir, ignore_errors=True)
        if not events:
            raise RuntimeError(f"{w.name} ({kind}): nothing was admitted")
        if w.sizes is not None:
            (t0, t1), worst_span = windows.batch_spans(events)
        else:
            t0, t1 = started + WARMUP_S, min(events[-1][0], started + WARMUP_S + span_s)
            worst_span = (t0, t1)
        out = {"mean": windows.mean_ratio(events, limit, t0, t1),
               "worst": windows.worst_window_ratio(events, limit, *worst_span),
               "gap_s": windows.longest_gap_s(events, t0, t1)}
        if waits and w.sizes is None:
            out["throttled"] = windows.throttled_share(waits, len(w.apps) * w.slots or w.partitions, t0, t1)
        if paced_s := [waited for t, waited in logs.paced_batches if t0 <= t < t1]:   # (a trickle's batches: what it paid)
            out["paced_wait_s"] = statistics.mean(paced_s)
            out["paced_wait_p90_s"] = statistics.quantiles(paced_s, n=10)[-1] if len(paced_s) > 1 else paced_s[0]
        if "cut" in marks:
            out["hold_s"] = windows.hold_time_s(events, marks["cut"], 0.3 * limit, marks["raise"],
                                                slack=one_acquire(kind, limit) * limit)
            out["cut_mean"] = windows.mean_ratio(events, 0.3 * limit, marks["cut"] + 2 * INTERVAL_S, marks["raise"])
            out["raised_mean"] = windows.mean_ratio(events, limit, marks["raise"] + 2 * INTERVAL_S, t1)
        if steady:
            room = windows.unused_room(events, waits, logs.demand_spans, limit, t0, t1)
            out.update(unused_gaps=room["no task"], unused_waiting=room["a task waiting"])
            if len(gaps := micro_batches.gaps_s(logs.demand_spans, t0, t1)) >= 2:   # (Spark's pace: micro_batches)
                out["spark_gap_s"] = statistics.mean(gaps)
        out.update(delivery)
        if requests is not None:
            out["requests_per_s"] = requests
        if "executor_killed" in marks:
            out.update(windows.after_kill(events, logs.spans, limit, marks["executor_killed"] + 2 * INTERVAL_S, t1))
        if "replica_killed" in marks:
            killed = marks["replica_killed"]
            out["gap_around_s"] = windows.longest_gap_s(events, killed - 1.0, killed + 3.0)
            out["after_mean"] = windows.mean_ratio(events, limit, killed, t1)
        if "killed" in marks:
            out["outage_gap_s"] = windows.longest_gap_s(events, marks["killed"], marks["restarted"] + 3.0)
            out["outage_mean"] = windows.mean_ratio(events, limit, marks["killed"], marks["restarted"])
            out["after_worst"] = windows.worst_window_ratio(events, limit, marks["restarted"], t1)
        return out

    @property
    def redis_key(self) -> str:
        """The current run's key on the Redis limiter (a fresh window for each run)."""
        return f"run{self.runs}"

    def live_limit(self, w: Workload, kind: str, per_s: float) -> None:
        """Change the limit of the current run live: the shared policy (ours), or the Redis limiter's."""
        if kind == "redis":
            with redis.Redis.from_url(self.redis.url) as client:
                client.set(redis_limit_key(self.redis_key), per_s)
        else:
            self.set_limit(w, self.runs, per_s)

    def _during(self, w: Workload, kind: str, marks: dict[str, float], span_s: float
                ) -> Callable[[float], None] | None:
        if w.during == "cut":
            def cut(t0: float) -> None:
                time.sleep(WARMUP_S + span_s / 4)
                marks["cut"] = time.time()
                self.live_limit(w, kind, 0.3 * w.limit_per_s)
                time.sleep(span_s / 2)
                marks["raise"] = time.time()
                self.live_limit(w, kind, w.limit_per_s)
            return cut
        if w.during == "executor":
            def kill_executor(t0: float) -> None:
                # a batch job's t0 is its start, before Spark has started the tasks: they send from ~2 s on
                time.sleep((WARMUP_S if w.sizes is None else 4.0) + span_s / 4)
                marks["executor_killed"] = time.time()
                self.cluster.kill_executor(0)
            return kill_executor
        if w.during == "replica":
            def kill_replica(t0: float) -> None:
                time.sleep(WARMUP_S + span_s / 4)
                marks["replica_killed"] = time.time()
                self.cp.kill_replica(0)
            return kill_replica
        if w.during == "redis":   # the replicas' Redis: down for a second, back empty
            return self._outage(marks, lambda: self.cp.redis.close(signal.SIGKILL), self.cp.redis.start, 1.0, span_s)
        if w.during == "kill":
            return self._outage(marks, self.cp.kill, self.cp.start, 6.0, span_s)
        return None

    @staticmethod
    def _outage(marks: dict[str, float], kill: Callable[[], Any], start: Callable[[], Any], down_s: float,
                span_s: float) -> Callable[[float], None]:
        """A server SIGKILLed a quarter into the measuring span and started again ``down_s`` later."""
        def outage(t0: float) -> None:
            time.sleep(WARMUP_S + span_s / 4)
            marks["killed"] = time.time()
            kill()
            time.sleep(down_s)
            start()
            marks["restarted"] = time.time()
        return outage


def run(quick: bool = False, only: set[str] | None = None, kinds: set[str] | None = None,
        where: tuple[str, ...] = WHERE, span_s: float | None = None, keep: Path | None = None
        ) -> list[dict[str, Any]]:
    if shutil.which("java") is None:
        return [row(SECTION, "skipped: Java not found", float("nan"), "", "", None)]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="bench-shared-") as tmp:
        bench = Bench(quick, Path(tmp), span_s=span_s, keep=keep)
        rows = []
        try:
            for place in where:
                try:
                    bench.use(place)
                except Exception as e:  # noqa: BLE001 - a cluster that does not start is a failed row
                    rows.append(row(SECTION, f"{place}: did not start: {type(e).__name__}: {e}"[:200],
                                    float("nan"), "", "", False))
                    continue
                rows += run_all(bench, workloads(quick, cluster=place == "cluster"), only, kinds)
            cost = cost_per_acquire_s(bench.redis.url)
            rows.append(row(SECTION, "cost per acquire: throttlescope (local bucket)", cost["ours"] * 1e6, "us"))
            rows.append(row(SECTION, "cost per acquire: Redis moving window (one round trip)", cost["redis"] * 1e6,
                            "us"))
            rows.append(row(SECTION, "cost per acquire: throttlescope / Redis", cost["ours"] / cost["redis"], "x",
                            "<= 0.1", cost["ours"] / cost["redis"] <= 0.1))
        finally:
            bench.close()
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked: a typo in ``--only`` would otherwise run nothing."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", action="append", help="a workload's name (repeatable)")
    parser.add_argument("--kind", action="append", choices=KINDS, help="repeatable; default: all")
    parser.add_argument("--where", action="append", choices=WHERE, help="local[2] or cluster (default: both)")
    parser.add_argument("--span-s", type=_positive_float, help="seconds each stream is measured after its warm-up "
                        "(default 20; 10 with --quick): a longer span, a mean less moved by its ends")
    parser.add_argument("--keep-admitted", type=windows.new_folder, metavar="DIR",
                        help="keep each run's admission records in a folder of DIR (new or empty; "
                        "python -m benchmarks.shared.windows DIR shows their shape)")
    parser.add_argument("--write-readme", action="store_true",
                        help="merge these rows into README.md's table (by name; the other rows stay)")
    args = parser.parse_args(argv)
    wrong = only_error(args.only or (), tuple(args.where or WHERE), set(args.kind or KINDS), args.quick)
    if wrong:
        parser.error(wrong)
    return args


if __name__ == "__main__":
    import datetime

    args = parse_args()
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    got = run(args.quick, set(args.only) if args.only else None, set(args.kind) if args.kind else None,
              tuple(args.where) if args.where else WHERE, args.span_s, args.keep_admitted)
    for r in got:
        print(f"{r['name']:<90} {r['value']:10.3f} {r['unit']:<3} {r['goal']:<8} {r['ok']}")
    if args.write_readme:
        from .table import caption_place, measured_span, stale_comparison, write_rows_into_readme
        places = set(args.where or WHERE)   # (the caption says where, when the run was in one place)
        when = ("" if len(places) > 1 else f"on {caption_place(places.pop())} ") + measured_span(started)
        write_rows_into_readme(Path(__file__).resolve().parent.parent / "README.md", got, when,
                               f"shared ({' / '.join(sorted(args.only))})" if args.only else "shared",
                               stale=stale_comparison(got))
        print("rows merged into README.md", file=sys.stderr)
