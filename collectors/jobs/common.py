"""What every job shares: the task's participant, atomic output, deadlines, summaries and rate measurement.

How it works and why
--------------------
A job runs its throttled work inside Spark tasks (Python workers). Each task starts with
``ready_participant()``: this worker's participant (``collectors.runtime``), after waiting -- bounded -- for its
first answer from the control plane and running one extra report round, so the limits an operator set just
before the job are the ones the task starts under (a reused worker may otherwise hold policies one report
interval old). Without a control plane it returns at once and the limiters enforce local limits only.

Output is written atomically: to a hidden temporary file named after the task attempt, then ``os.replace``d
onto a name that depends only on *what* was written (partition, micro-batch, segment), never on the attempt.
A retried or speculative attempt therefore replaces the file of the failed one instead of adding a second
copy: Spark's at-least-once task execution plus an idempotent sink is exactly-once output. Readers skip names
starting with ``.`` or ``_`` (as Spark and Arrow do), so a half-written file is never read.

Rates. A summary's ``*_per_s`` figures are totals over elapsed wall time -- what an operator sees. Tests need
the rate *under throttling*, without the start-up burst (a bucket starts with up to one period's tokens):

- ``rate_between(times, amounts, t0, t1)`` -- amount admitted in ``[t0, t1)`` per second; used with a window
  that starts after the first second(s) for continuously refilled buckets (publish);
- ``steady_rate(times, amounts, waited)`` -- between the first and the last event that had to wait for the
  limiter: for limiters refilled once per period or window (dispatch, offload) a waiting read resumes right
  at a period boundary, so ``[first, last)`` spans whole periods and excludes the initial full bucket and
  the partial first period (several readers resuming at one boundary: ``burst_gap_s`` keeps the first);
  for the KIP-599 mutation quota it excludes the initial burst.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ready_participant", "task_info", "TaskInfo", "Deadline", "atomic_write", "atomic_write_table",
           "atomic_write_text", "summarize", "format_summary", "rate_between", "steady_rate", "split_evenly",
           "positive", "optional_positive", "spark_session", "driver_on_loopback", "visible_files"]

def ready_participant(timeout_s: float | None = None, refresh: bool = True) -> Any:
    """This worker's participant, with the control plane's current policies applied (bounded wait: ``timeout_s``,
    else its THROTTLESCOPE_READY_TIMEOUT_S)."""
    from collectors.runtime import participant

    p = participant()
    if p.reporter is not None:
        p.wait_ready(p.config.ready_timeout_s if timeout_s is None else timeout_s)
        if refresh:
            p.report_now()
    return p


@dataclass(frozen=True)
class TaskInfo:
    partition: int
    attempt: int
    stage: int

    @property
    def tag(self) -> str:
        """Unique per attempt: names temporary files."""
        return f"s{self.stage}-p{self.partition}-a{self.attempt}-{os.getpid()}"


def task_info() -> TaskInfo:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:  # called outside a task (a test on the driver)
        return TaskInfo(0, 0, -1)
    return TaskInfo(ctx.partitionId(), ctx.attemptNumber(), ctx.stageId())


class Deadline:
    """A wall-clock bound; ``None`` = unbounded."""

    def __init__(self, duration_s: float | None, start_s: float | None = None):
        self.start_s = time.time() if start_s is None else start_s
        self.at_s = math.inf if duration_s is None else self.start_s + duration_s

    @classmethod
    def until(cls, at_s: float) -> Deadline:
        """The bound at wall time ``at_s`` (``math.inf``: none) -- the driver computes it, the tasks obey it."""
        deadline = cls(None)
        deadline.at_s = at_s
        return deadline

    def remaining_s(self) -> float:
        return self.at_s - time.time()

    def passed(self) -> bool:
        return time.time() >= self.at_s

    def timeout_s(self) -> float | None:
        """For a blocking call: None when unbounded, else the time left (>= 0)."""
        return None if math.isinf(self.at_s) else max(0.0, self.remaining_s())


def atomic_write(path: str | Path, write: Callable[[Path], Any], tag: str) -> Path:
    """``write(tmp)`` a hidden temporary beside ``path``, then rename it onto ``path`` (replacing it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{tag}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def atomic_write_table(table: Any, path: str | Path, tag: str) -> Path:
    import pyarrow.parquet as pq

    return atomic_write(path, lambda tmp: pq.write_table(table, tmp), tag)


def atomic_write_text(path: str | Path, text: str, tag: str = "w") -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text), f"{tag}-{os.getpid()}")


def visible_files(directory: str | Path, pattern: str) -> list[Path]:
    """Files matching ``pattern`` that are not hidden or temporary (``.``/``_`` prefixes), sorted."""
    return sorted(p for p in Path(directory).glob(pattern)
                  if p.is_file() and not p.name.startswith((".", "_")))


def split_evenly(items: Sequence[Any], parts: int, weight: Callable[[Any], float] = lambda _: 1.0) -> list[list]:
    """``items`` in at most ``parts`` non-empty groups of about equal total ``weight`` (largest first, greedy)."""
    groups: list[list] = [[] for _ in range(max(1, min(parts, len(items))))]
    loads = [0.0] * len(groups)
    for item in sorted(items, key=weight, reverse=True):
        i = loads.index(min(loads))
        groups[i].append(item)
        loads[i] += weight(item)
    return [g for g in groups if g]


def positive(name: str, value: Any, integer: bool = False) -> Any:
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok or not math.isfinite(value) or value <= 0:
        kind = "a whole number" if integer else "a number"
        raise ValueError(f"{name} must be {kind} > 0, got {value!r}")
    return value


def optional_positive(name: str, value: Any, integer: bool = False) -> Any:
    return None if value is None else positive(name, value, integer)


def summarize(job: str, *, records_in: int, records_out: int, bytes_in: int | None, bytes_out: int,
              started_s: float, ended_s: float, unit: str = "records", **extra: Any) -> dict[str, Any]:
    """The summary every job prints and returns: totals, elapsed wall time, achieved rates, job details.
    ``bytes_in`` None: not known without reading everything (left out)."""
    elapsed = max(1e-9, ended_s - started_s)
    return {"job": job, "unit": unit, "records_in": int(records_in), "records_out": int(records_out),
            "bytes_in": None if bytes_in is None else int(bytes_in), "bytes_out": int(bytes_out),
            "elapsed_s": round(elapsed, 3),
            "records_out_per_s": round(records_out / elapsed, 2), "bytes_out_per_s": round(bytes_out / elapsed, 1),
            **extra}


def format_summary(summary: Mapping[str, Any], skip: Iterable[str] = ("events",)) -> str:
    """Human-readable lines: scalars first, then nested tables as ``key: {...}`` JSON lines."""
    skip = set(skip)
    lines = [f"throttlescope {summary.get('job', 'job')} summary"]
    nested = []
    for key, value in summary.items():
        if key in skip or key == "job":
            continue
        if isinstance(value, Mapping | list):
            nested.append((key, value))
        else:
            lines.append(f"  {key:<22} {value}")
    for key, value in nested:
        if isinstance(value, Mapping):
            lines.append(f"  {key}:")
            lines += [f"    {k:<36} {json.dumps(v, default=str)}" for k, v in value.items()]
        else:
            lines.append(f"  {key}: {json.dumps(value, default=str)}")
    return "\n".join(lines)


def per_participant(rows: Iterable[Mapping[str, Any]], start: Mapping[str, Any],
                    add: Callable[[dict[str, Any], Mapping[str, Any]], None], amount: str, rate_key: str,
                    digits: int) -> dict[str, dict[str, Any]]:
    """Each participant's totals over its tasks' result rows (``add`` folds one row into a copy of ``start``), plus
    ``rate_key``: ``amount`` per second from its first event to its last (None without two distinct times)."""
    participants: dict[str, dict[str, Any]] = {}
    spans: dict[str, tuple[float, float]] = {}
    for r in rows:
        pid = r["participant"]
        add(participants.setdefault(pid, dict(start)), r)
        if r["events"]:
            first, last = spans.get(pid, (math.inf, 0.0))
            spans[pid] = (min(first, r["events"][0][0]), max(last, r["events"][-1][0]))
    for pid, agg in participants.items():
        first, last = spans.get(pid, (math.inf, 0.0))
        span = last - first
        agg[rate_key] = round(agg[amount] / span, digits) if span > 0 else None
    return participants


def rate_between(times: Sequence[float], amounts: Sequence[float], t0: float, t1: float) -> float:
    """Amount per second of the events with ``t0 <= t < t1``."""
    if t1 <= t0:
        raise ValueError(f"an empty window: [{t0}, {t1})")
    return sum(a for t, a in zip(times, amounts, strict=True) if t0 <= t < t1) / (t1 - t0)


def steady_rate(times: Sequence[float], amounts: Sequence[float], waited: Sequence[bool],
                burst_gap_s: float | None = None) -> tuple[float, float, float]:
    """(rate, t_first, t_last) between the first and the last event that waited for its limiter (see the
    module essay). ``burst_gap_s``: waiting events closer than this belong to one burst (several readers
    resuming at the same period boundary) and only its first counts -- the boundary. Raises ValueError when
    fewer than two events (bursts) waited: the limit never bound."""
    waits = sorted(t for t, w in zip(times, waited, strict=True) if w)
    if burst_gap_s is not None:
        waits = [t for i, t in enumerate(waits) if i == 0 or t - waits[i - 1] >= burst_gap_s]
    if len(waits) < 2 or waits[-1] <= waits[0]:
        raise ValueError(f"{len(waits)} event(s) waited for the limiter: it did not bind, no steady rate")
    return rate_between(times, amounts, waits[0], waits[-1]), waits[0], waits[-1]


_ON_THIS_MACHINE = ("spark://127.0.0.1:", "spark://localhost:")


def driver_on_loopback(master: str, environ: MutableMapping[str, str] | None = None) -> bool:
    """Have the driver of a master on this machine listen on loopback only; True if it will.

    Spark's driver binds its RPC and block manager to the address the host name resolves to, and its UI (which can
    kill jobs) to every interface, unless ``SPARK_LOCAL_IP`` says otherwise -- read from the environment of the JVM
    that pyspark starts, so it is set here, before the session. For ``local``, ``local[N]``, ``local-cluster[..]``
    and a standalone master on loopback only: a driver whose executors run on other hosts must listen where they
    reach it. A ``SPARK_LOCAL_IP`` already set is the operator's choice and stays (False if it is not loopback)."""
    environ = os.environ if environ is None else environ
    if not (master.startswith("local") or master.startswith(_ON_THIS_MACHINE)):
        return False
    environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return environ["SPARK_LOCAL_IP"] in ("127.0.0.1", "localhost", "::1")


def spark_session(master: str = "local[2]", app_name: str = "throttlescope", url: str | None = None,
                  token: str | None = None, conf: Mapping[str, str] | None = None, **env: str) -> Any:
    """A SparkSession whose executors reach the control plane (``collectors.spark.configure``); a driver of a
    master on this machine listens on loopback only (``driver_on_loopback``)."""
    from pyspark.sql import SparkSession

    from collectors.spark import configure

    driver_on_loopback(master)
    builder = SparkSession.builder.master(master).appName(app_name)
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    configure(builder, url, token, **env)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
