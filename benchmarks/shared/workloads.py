"""The shared-limit benchmark's workloads, the rows one run of a workload makes, and their runs (``run_all``).

A ``Workload`` is one Spark job shape under one shared limit (``LIMIT`` msgs/s): a stream through the helpers
(``partitions`` tasks, ``rate-micro-batch`` of ``rows_per_batch`` rows, a window's worth unless said), a batch job
(``sizes``: rows per partition), the project's own publish job (``job="publish"``), or streams of several
applications, each its own driver (``apps``: two jobs of one tenant, ``shared/apps.py``); ``during`` is what happens
mid-run: a live ``cut`` to 30 % and back, the control plane ``kill``ed and restarted, (on the cluster) one
``executor`` SIGKILLed, or (control-plane replicas, ``benchmarks/bench_replicas.py``) one ``replica`` SIGKILLed or
their ``redis`` restarted empty. ``where`` says which Spark ran it: ``local[2]`` or ``cluster`` (a standalone
cluster of 2 workers, one executor each).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from limiter.producer import ACQUIRE_SHARE

from ..common import row
from . import jobs, windows

__all__ = ["Workload", "workloads", "rows_for", "against_redis", "run_all", "LIMIT",
           "INTERVAL_S", "WARMUP_S", "STREAM_REPEATS", "one_acquire", "SECTION", "only_error", "WHERE"]

SECTION = "shared"
WHERE = ("local[2]", "cluster")   # where a workload runs (``workloads(cluster=...)``)
LIMIT = 1000.0
INTERVAL_S = 1.0
WARMUP_S = 5.0
STREAM_REPEATS = 3   # runs of each stream whose mean has a goal (the rows: the median, and the worst window of all)


def one_acquire(kind: str, limit_per_s: float = LIMIT) -> float:
    """The largest acquire of ``kind``, over the limit (``limit_per_s``): a window's goal allows one above 1.05 of
    it. Ours splits an Arrow batch into sends of a 40th of the limit where that is less than the batch
    (``Producer.most_per_acquire``; the publish job sends 25 records at a time): its windows are held to 1.075 at
    1,000 a second, 1.06 at 10,000 (a send is the batch's 100 rows there), and so does ``redis-sliced``. The others
    charge each 100-row batch whole: 0.1 of 1,000 a second, 0.01 of 10,000."""
    batch = jobs.ARROW_ROWS / limit_per_s
    return min(ACQUIRE_SHARE, batch) if kind in ("ours", "redis-sliced") else batch


@dataclass
class Workload:
    name: str
    level: str                      # "topic", "tenant" or "resource_group"
    kinds: tuple[str, ...]
    partitions: int = 2
    topics: tuple[str, ...] = ("bench/a/t0",)
    sizes: list[int] | None = None  # a batch job with these partition sizes (else a stream)
    pace_per_task: float = 0.0      # demand below the limit
    during: str | None = None       # "cut", "kill" (the control plane), "executor" (one, on the cluster),
    #                                 "replica" (one of several) or "redis" (the replicas' Redis, restarted)
    job: str = "helpers"            # "helpers" (mapInArrow through the public helpers) or "publish" (the job)
    # runs of each kind; the rows show each figure's median (the worst window: the worst of all). Spark's pause
    # after it loses an executor (1-1.7 s, or none) moved one run's figures after the kill by up to 0.1
    repeats: int = 1
    span_s: float | None = None     # the measuring span after the warm-up, if not the benchmark's own
    limit_per_s: float = LIMIT      # the shared limit (its live cut: 0.3 of it)
    rows_per_batch: int | None = None   # a stream's rows per micro-batch (None: a window's worth of its limit)
    # several applications, each its own driver on local[1] (``apps``), application i sending to topics[i], its
    # tasks paced to apps[i] rows a second each (0: as fast as the limit lets them)
    apps: tuple[float, ...] = ()
    slots: int = 1                  # each application's task slots (``local[slots]``): its Python workers at once
    helper: str = "arrow"           # ours' helper: ``throttle_arrow``, or ``throttle_rows`` over the rows ("rows")
    commit_s: float = 0.0           # a stream's commit on the driver after each micro-batch (``jobs.stream``)
    notes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.rows_per_batch is None:
            self.rows_per_batch = int(self.limit_per_s)


def workloads(quick: bool, cluster: bool = False) -> list[Workload]:
    three = ("bench/b/t0", "bench/b/t1", "bench/b/t2")
    rows = 10_000 if quick else 24_000
    # a stream's mean moves by +-2 % from one run to the next (where Spark's gaps fall against the window's echo):
    # 8 runs of the tenant stream read 0.972-0.985, and one run alone once read 0.965
    runs = 1 if quick else STREAM_REPEATS
    return [
        Workload("stream, 1 topic, 2 tasks", "topic", ("ours", "static", "redis"), repeats=runs),
        Workload("stream, 1 topic, 4 tasks", "topic", ("ours", "static", "redis"), partitions=4, repeats=runs),
        Workload("stream, 3 topics, tenant limit, 4 tasks", "tenant", ("ours", "static", "redis"), partitions=4,
                 topics=three, repeats=runs),
        Workload("stream, 3 topics, resource group, 4 tasks", "resource_group", ("ours",), partitions=4,
                 topics=three, repeats=runs),
        Workload("batch, 64 short tasks", "topic", ("ours", "static", "redis"), partitions=64,
                 sizes=[rows // 64] * 64),
        Workload("batch, 8 tasks, one 10x", "topic", ("ours",), partitions=8,
                 sizes=[rows * 10 // 17] + [rows // 17] * 7),
        Workload("publish job, stream, 1 topic, 2 tasks", "topic", ("ours",), job="publish", repeats=runs),
        Workload("publish job, batch, 3 topics, tenant limit, 4 tasks", "tenant", ("ours",), partitions=4,
                 topics=three, sizes=[rows // 4] * 4, job="publish"),
        # (its throttle time is a few waits of a few ms: one run on the cluster read 1.09 % and the next 0.43 %,
        # Redis 0.92 % and 0.59 % beside them)
        Workload("stream, demand 60 % of the limit", "topic", ("ours", "static", "redis"),
                 pace_per_task=0.3 * LIMIT, repeats=runs),
        # nearer the limit: two tasks paced to 0.4 of it each deliver 0.86-0.89 of it between them (a task's first
        # batch goes at once), the windows touching it at moments; a task's 100-row batches come 0.25 s apart
        Workload("stream, demand 80 % of the limit", "topic", ("ours", "static", "redis"),
                 pace_per_task=0.4 * LIMIT, repeats=runs),
        # (at the cut limit a micro-batch lasts 3.3 s, and where Spark's gaps fall moved one run's mean during a cut
        # of 10 s, three micro-batches, by +-0.025: the cut lasts half the span, and the span is twice the others').
        # Quick, not the others' 10 s either: that left 0.5 s after the raise, 2 s counted off, and a lump in it read
        # "1.465 of the limit after the raise"; 24 s leaves 4 s, a 12-s cut. Three runs (two moved more than kinds)
        Workload("stream, live cut to 30 % and back", "topic", ("ours", "redis"), during="cut",
                 repeats=runs, span_s=24.0 if quick else 40.0),
        Workload("stream, control plane killed and restarted", "topic", ("ours",), partitions=4, during="kill"),
        # ten times the others' limit: an Arrow batch of 100 rows is a hundredth of it, so Redis's acquires are as
        # fine as ours (at 1,000 a second each of its acquires is a tenth of the limit, ours a 40th), and what each
        # limiter lets through beyond the limit is its own, not its acquire's
        Workload("stream, 1 topic, 4 tasks, a limit of 10,000 a second", "topic", ("ours", "static", "redis"),
                 partitions=4, limit_per_s=10 * LIMIT, repeats=runs),
    ] + ([] if cluster else [
        # two micro-batches a window: on local[2] Spark's own pace (no limiter) is 1.08-1.46x the limit (four runs);
        # on the cluster, whose micro-batches take longer to start, about the limit itself (0.98x): none binds there
        Workload("stream, 1 topic, 4 tasks, micro-batches of half the limit", "topic", ("ours", "static", "redis"),
                 partitions=4, rows_per_batch=int(LIMIT) // 2, repeats=runs),
        # a micro-batch of a window and a half: the others' last a whole window, and simulated (two workers, Spark's
        # gaps) ours read 1.0 of the limit there but 0.985-0.988 where the sends of one last 1.33-3.3 windows
        Workload("stream, 1 topic, 2 tasks, micro-batches of 1.5x the limit", "topic", ("ours", "static", "redis"),
                 rows_per_batch=3 * int(LIMIT) // 2, repeats=runs),
        # two jobs of one tenant, each its own driver (one core each: the cluster's two would be the first's),
        # one as fast as the limit lets it, one a trickle of about a tenth of the limit: the trickle's share
        # must not strand what it does not send
        # (and Redis charged in ours' slices: its lead here is the size of its acquire -- a trickle's whole batch
        # waits for the room the greedy job's sends leave, and its backlog fills that job's gaps)
        Workload("two applications, tenant limit: a stream beside a trickle", "tenant",
                 ("ours", "static", "redis", "redis-sliced", "none"), topics=three[:2], apps=(0.0, 0.1 * LIMIT),
                 repeats=runs),
        # the row helper (``rdd.mapPartitions``' rows, charged 100 at a time by default, in sends of a 40th of the
        # limit when that is less), in the same stream's tasks
        Workload("stream, 1 topic, 2 tasks, throttle_rows", "topic", ("ours",), helper="rows", repeats=runs),
        # a cluster of many executors' Python workers, each a participant back at every micro-batch's start (this
        # host's two cores run them in turn): one application on local[16], a task of each micro-batch on each
        Workload("stream, 1 topic, 16 workers", "topic", ("ours", "static", "redis", "none"), partitions=16,
                 apps=(0.0,), slots=16, repeats=runs),
        # the same whose driver commits each micro-batch in 0.3 s (offsets to an external table, a checkpoint on
        # remote storage): Spark's gaps of 0.25-0.45 s here become 0.55-0.75 s, as on a cluster, or on this host
        # when it is busy (the 16-worker stream then read 0.89-0.90 of the limit, Redis 0.997)
        Workload("stream, 1 topic, 16 workers, a commit of 0.3 s", "topic", ("ours", "static", "redis", "none"),
                 partitions=16, apps=(0.0,), slots=16, repeats=runs, commit_s=0.3),
    ]) + ([
        Workload("stream, one executor killed", "topic", ("ours", "static", "redis"), during="executor",
                 repeats=1 if quick else 3),
        Workload("publish job, batch, one executor killed", "topic", ("ours",), sizes=[rows // 2] * 2,
                 job="publish", during="executor"),
    ] if cluster else [])


def only_error(only: Iterable[str], where: tuple[str, ...], kinds: set[str], quick: bool) -> str | None:
    """What is wrong with running the workloads named in ``only`` on ``where`` (of ``WHERE``) by ``kinds``, or
    None: each must exist, run on one of those places and be run by one of those kinds."""
    found: dict[str, tuple[list[str], tuple[str, ...]]] = {}
    for place in WHERE:
        for w in workloads(quick, cluster=place == "cluster"):
            found.setdefault(w.name, ([], w.kinds))[0].append(place)
    for name in only:
        if name not in found:
            return f"--only: no workload is named {name!r}; the workloads are: " + "; ".join(map(repr, found))
        places, its_kinds = found[name]
        if not set(places) & set(where):
            return f"--only: {name!r} runs on {' and '.join(places)} only, and --where says {', '.join(where)}"
        if not kinds & set(its_kinds):
            return (f"--only: {name!r} is run by {', '.join(its_kinds)} only, and --kind says "
                    f"{', '.join(sorted(kinds))}")
    return None


def _spread(r: dict[str, float], key: str, digits: int) -> str:
    """'the median of N runs (lowest-highest)' of figure ``key`` over repeated runs (``windows.combined``);
    '' for one run."""
    if f"{key}_low" not in r:
        return ""
    return f"the median of {r['runs']:.0f} runs ({r[key + '_low']:.{digits}f}-{r[key + '_high']:.{digits}f})"


def rows_for(w: Workload, kind: str, where: str, r: dict[str, float], section: str = SECTION,
             own_pace: float | None = None) -> list[dict[str, Any]]:
    """The table rows of one run of ``w`` by ``kind`` on ``where`` (its figures ``r``, see ``Bench.run``), in
    the README table's ``section``. ``own_pace``: the mean of the ``none`` kind on the same workload in the same
    run (Spark's own pace, no limiter: the job's demand), if it ran: ours' mean is to be 0.97 of the limit where
    that demand exceeds it, else 0.97 of the demand."""
    label = f"{w.name} [{kind}, {where}]"
    # a worst window's goal (a mean above it is a limit that did not hold)
    most = 1.05 + one_acquire(kind, w.limit_per_s)
    out = []
    if "lost" in r:
        out.append(row(section, f"{label}: records lost / sent twice", r["lost"] + r["twice"], "records", "= 0",
                       r["lost"] + r["twice"] == 0, f"{r['lost']:.0f} lost, {r['twice']:.0f} sent twice"))
    if w.during == "executor":
        runs = f"; the median of {r['runs']:.0f} runs" if "runs" in r else ""
        # the publish job's figures count what was delivered: the killed attempt's sends are not in them
        out.append(row(section, f"{label}: mean after the kill / limit", r["after_mean"], "x", "", None,
                       ("the survivor, then the executor the master starts again" if w.job != "publish" else
                        "delivered records only: the killed attempt's sends are sent again by its retry") + runs))
        if "after_running_mean" in r:
            goal = kind == "ours"
            out.append(row(section, f"{label}: mean after the kill while a task ran / limit",
                           r["after_running_mean"], "x", ">= 0.9" if goal else "",
                           r["after_running_mean"] >= 0.9 if goal else None,
                           f"less {r['after_paused_s']:.1f} s in which Spark ran no task (longer than "
                           f"{windows.PAUSE_S:g} s: the replacement executor starting){runs}"))
        if w.job == "publish":
            out.append(row(section, f"{label}: worst 1-s window / limit", r["worst"], "x", f"<= {most:.4g}",
                           r["worst"] <= most, "delivered records only"))
            return out
    if w.pace_per_task:
        demand = w.pace_per_task * w.partitions / w.limit_per_s
        spread = _spread(r, "throttled", 4)
        out.append(row(section, f"{label}: throttle time / task time", r["throttled"], "x",
                       "< 0.01" if kind == "ours" else "", r["throttled"] < 0.01 if kind == "ours" else None,
                       "time the tasks waited for the limiter while the aggregate was below it"
                       + (f"; {spread}" if spread else "")))
        out.append(row(section, f"{label}: delivered / demanded", r["mean"] / demand, "x", "", None,
                       "Spark's gaps between micro-batches count against every kind alike"))
    elif w.during == "cut":
        runs, goal = f"the median of {r['runs']:.0f} runs" if "runs" in r else "", kind == "ours"
        out.append(row(section, f"{label}: time for the cut to hold", r["hold_s"], "s",
                       f"<= {2 * INTERVAL_S:g}" if goal else "", r["hold_s"] <= 2 * INTERVAL_S if goal else None,
                       "the longest of its runs" if runs else ""))
        for what, key, note in (("during the cut / cut limit", "cut_mean", runs),
                                ("after the raise / limit", "raised_mean", "")):
            out.append(row(section, f"{label}: mean {what}", r[key], "x", ">= 0.97" if goal else "",
                           r[key] >= 0.97 if goal else None, note))
    elif w.during == "replica":
        out.append(row(section, f"{label}: longest stall around the kill", r["gap_around_s"], "s", "<= 2",
                       r["gap_around_s"] <= 2))
        out.append(row(section, f"{label}: mean from the kill on / limit", r["after_mean"], "x", ">= 0.9",
                       r["after_mean"] >= 0.9, "the participants of the dead replica move to the others"))
    elif w.during in ("kill", "redis"):
        what = "the control plane's outage" if w.during == "kill" else "the Redis outage (1 s, back empty)"
        out.append(row(section, f"{label}: longest stall around the outage", r["outage_gap_s"], "s", "<= 2",
                       r["outage_gap_s"] <= 2, what))
        out.append(row(section, f"{label}: mean during the outage / limit", r["outage_mean"], "x"))
        out.append(row(section, f"{label}: worst 1-s window after the restart / limit", r["after_worst"], "x",
                       f"<= {most:.4g}", r["after_worst"] <= most))
        return out
    else:
        # (with an executor killed, the whole run's mean holds Spark's own pause: the goal is on the one above)
        goal = kind == "ours" and w.during != "executor"
        spread = _spread(r, "mean", 3) if w.during != "executor" else ""
        if "unused_gaps" in r:   # where the rest of the limit went (windows.unused_room)
            spread = "; ".join(filter(None, (spread, f"unused: {100 * r['unused_gaps']:.2f} points while no task "
                                                      f"ran, {100 * r['unused_waiting']:.2f} while a task waited")))
        if "spark_gap_s" in r:   # Spark's own pace beside it (``micro_batches``: a mean moves with the host's gaps)
            spread = "; ".join(filter(None, (spread, f"Spark's gap between micro-batches {r['spark_gap_s']:.2f} s on "
                                                      "average")))
        low = 0.97 * min(1.0, own_pace) if own_pace is not None else 0.97
        if kind == "none":
            spread = "; ".join(filter(None, ("no limiter: Spark's own pace, the job's demand", spread)))
        elif own_pace is not None:
            spread = "; ".join(filter(None, (spread, f"Spark's own pace (no limiter, this run): {own_pace:.3f} of "
                                                     "the limit" + (", the goal 0.97 of it" if own_pace < 1 else ""))))
        out.append(row(section, f"{label}: mean admitted / limit", r["mean"], "x",
                       f"{low:.3g}-{most:.4g}" if goal else "", low <= r["mean"] <= most if goal else None, spread))
    goal = kind == "ours"
    out.append(row(section, f"{label}: worst 1-s window / limit", r["worst"], "x",
                   f"<= {most:.4g}" if goal else "", r["worst"] <= most if goal else None,
                   f"the worst of {r['runs']:.0f} runs" if "runs" in r else ""))
    if "paced_wait_s" in r:
        out.append(row(section, f"{label}: a paced task's batch, mean wait for the limiter",
                       1000 * r["paced_wait_s"], "ms", "", None,
                       f"p90 {1000 * r['paced_wait_p90_s']:.3g} ms; from the source's hand-over to its last row, "
                       "its slices' waits summed (the trickle's 100-row batches)"))
    if "requests_per_s" in r:
        out.append(row(section, f"{label}: grant requests per participant per second", r["requests_per_s"], "/s",
                       "", None, "asks and give-backs of a worker's participant over its tasks (and a report a "
                       "second)"))
    return out


def against_redis(w: Workload, where: str, ours: dict[str, float], redis: dict[str, float], section: str = SECTION,
                  peer: str = "redis") -> list[dict[str, Any]]:
    """The rows of ours beside the central exact limiter on one workload (each kind's figures, see ``Bench.run``):
    ours must be at least as fully used -- its mean admitted (during the cut, on a live cut) at least Redis's,
    where demand exceeds the limit and no executor is killed -- and at least as accurate: its worst 1-s window
    at most Redis's. In points of the limit, ours less Redis. None for demand below the limit: every window is
    then below it, and so is every mean. ``peer`` "redis-sliced" (Redis charged in ours' slices): the same rows,
    measured only -- they say what the goals' rows owe to the size of an acquire."""
    if w.pace_per_task:
        return []
    label, out = f"{w.name} [{where}]", []
    goals = peer == "redis"
    runs = {int(r.get("runs", 1)) for r in (ours, redis)}
    each = runs.pop() if len(runs) == 1 else 1
    used = "cut_mean" if w.during == "cut" else None if w.during else "mean"
    if used and used in ours and used in redis:
        diff = 100 * (ours[used] - redis[used])
        during = " during the cut" if used == "cut_mean" else ""
        out.append(row(section, f"{label}: mean admitted{during}, ours - {peer}", diff, "points",
                       ">= 0" if goals else "", diff >= 0 if goals else None,
                       f"the medians of {each} runs each" if each > 1 else ""))
    if "worst" in ours and "worst" in redis:
        diff = 100 * (ours["worst"] - redis["worst"])
        out.append(row(section, f"{label}: worst 1-s window, ours - {peer}", diff, "points",
                       "<= 0" if goals else "", diff <= 0 if goals else None,
                       f"the worst of {each} runs each" if each > 1 else ""))
    return out


def run_all(bench: Any, todo: list[Workload], only: set[str] | None, kinds: set[str] | None
            ) -> list[dict[str, Any]]:
    """The rows of every workload of ``todo`` (those named in ``only``, if given) run by each of its kinds (those
    in ``kinds``, if given) on ``bench`` (``bench_shared.Bench``), ``repeats`` times each, in rounds of one run of
    each kind: a drift of the host over the minutes a workload takes, or a first run's warm-up, falls on every kind
    alike. A kind that fails is a failed row, and runs no more; ours beside Redis where both ran."""
    rows = []
    for w in (w for w in todo if not only or w.name in only):
        runs: dict[str, list[dict[str, float]]] = {k: [] for k in w.kinds if not kinds or k in kinds}
        for kind in [k for _ in range(w.repeats) for k in runs]:
            try:
                if kind in runs:
                    runs[kind].append(bench.run(w, kind))
            except Exception as e:  # noqa: BLE001 - one failed workload is a failed row, not a failed table
                del runs[kind]
                rows.append(row(SECTION, f"{w.name} [{kind}, {bench.where}] failed: {type(e).__name__}: {e}"[:200],
                                float("nan"), "", "", False))
        figures = {kind: windows.combined(done) for kind, done in runs.items()}
        own_pace = figures.get("none", {}).get("mean")   # (the job's demand, where the workload runs it)
        for kind, r in figures.items():
            print(f"  {w.name} [{kind}, {bench.where}]: {r}", file=sys.stderr, flush=True)
            rows += rows_for(w, kind, bench.where, r, own_pace=own_pace)
        for peer in ("redis", "redis-sliced"):
            if "ours" in figures and peer in figures:
                rows += against_redis(w, bench.where, figures["ours"], figures[peer], peer=peer)
    return rows
