"""The mutation job: many control mutations -- creating partition directories -- under a KIP-599 mutation quota.

How it works and why
--------------------
The job plans a catalog of partition directories, ``<root>/table=<t>/date=<d>/hour=<h>`` for ``tables`` x
``days`` x ``hours``, groups them into requests of ``per_request`` directories (a request creating n
partitions is n mutations, as KIP-599 counts a CreateTopics request of n partitions), and spreads the requests
over ``partitions`` Spark tasks. Each task takes this worker's quota for (``user``, ``client_id``) --
``participant().mutation_quota(user, client_id)``, resolved with Kafka's precedence from the control plane's
``/admin/v2/quotas/mutations``; None = unlimited -- and runs every request through
``limiter.call_with_mutation_quota``: a strict quota below zero raises ``ThrottlingQuotaExceeded`` with its
throttle time, nothing is recorded, and the call sleeps that long and retries, until ``timeout_s``.

Idempotent: a request creates only the directories that do not exist yet and is charged only for those, so a
retried task or a rerun creates every directory once and charges each creation once. ``duration_s`` stops a
task before its next request (the rest is left for a rerun).

Every request is an event (wall time after it succeeded, mutations, whether it had to wait); the summary has
mutations planned and done, and per participant the count, achieved rate and retries; ``events`` holds the
requests, for measurements. (The quota is per participant: N workers together may mutate N times as fast.)
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from limiter.mutation import call_with_mutation_quota

from .common import (
    Deadline,
    optional_positive,
    per_participant,
    positive,
    ready_participant,
    summarize,
    task_info,
)

__all__ = ["MutationConfig", "run_mutation", "plan_directories"]


@dataclass(frozen=True)
class MutationConfig:
    root: str
    tables: int = 4
    days: int = 7
    hours: int = 24
    first_day: str = "2024-01-01"
    user: str = "spark"
    client_id: str = "throttlescope-mutation"
    per_request: int = 1
    timeout_s: float = 60.0
    duration_s: float | None = None
    partitions: int | None = None
    ready_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        for name in ("tables", "days", "hours", "per_request"):
            positive(name, getattr(self, name), integer=True)
        if self.hours > 24:
            raise ValueError(f"hours must be 1..24, got {self.hours}")
        positive("timeout_s", self.timeout_s)
        optional_positive("duration_s", self.duration_s)
        optional_positive("partitions", self.partitions, integer=True)
        if not self.user or not self.client_id:
            raise ValueError("user and client_id must not be empty")


def plan_directories(config: MutationConfig) -> list[str]:
    """Every partition directory of the catalog, relative to the root, in creation order."""
    import datetime

    start = datetime.date.fromisoformat(config.first_day)
    return [f"table=t{t:03d}/date={start + datetime.timedelta(days=d)}/hour={h:02d}"
            for t in range(config.tables) for d in range(config.days) for h in range(config.hours)]


def _create(root: Path, names: list[str]) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(exist_ok=True)


def mutate_partition(requests: Iterable[list[str]], config: MutationConfig, deadline_at: float) -> Iterator[dict]:
    """The ``mapPartitions`` body: run each request under the quota; one result dict per task."""
    task = task_info()
    p = ready_participant(config.ready_timeout_s)
    deadline = Deadline.until(deadline_at)
    root = Path(config.root)
    events: list[tuple[float, int, bool]] = []
    done = existing = retries = left = 0
    for request in requests:
        if deadline.passed():
            left += len(request)
            continue
        missing = [n for n in request if not (root / n).is_dir()]
        existing += len(request) - len(missing)
        if not missing:
            continue
        waits = [0]

        def sleep(delay_s: float, waits: list[int] = waits) -> None:
            waits[0] += 1
            time.sleep(delay_s)

        quota = p.mutation_quota(config.user, config.client_id)
        call_with_mutation_quota(quota, len(missing), lambda names=missing: _create(root, names), config.timeout_s,
                                 sleep=sleep)
        events.append((time.time(), len(missing), waits[0] > 0))
        done += len(missing)
        retries += waits[0]
    quota = p.mutation_quota(config.user, config.client_id)
    yield {"participant": p.participant_id, "partition": task.partition, "done": done, "existing": existing,
           "left": left, "retries": retries, "events": events,
           "quota_per_s": None if quota is None else quota.quota_per_s}


def run_mutation(spark: Any, config: MutationConfig) -> dict[str, Any]:
    """Run the mutation job on ``spark``; returns its summary (``events``: every request)."""
    names = plan_directories(config)
    requests = [names[i:i + config.per_request] for i in range(0, len(names), config.per_request)]
    parts = min(len(requests), config.partitions or spark.sparkContext.defaultParallelism)
    Path(config.root).mkdir(parents=True, exist_ok=True)
    started = time.time()
    deadline_at = float("inf") if config.duration_s is None else started + config.duration_s
    rows = spark.sparkContext.parallelize(requests, parts).mapPartitions(
        lambda it: mutate_partition(it, config, deadline_at)).collect()
    ended = time.time()
    def add(agg: dict[str, Any], r: Mapping[str, Any]) -> None:
        agg["mutations"] += r["done"]
        agg["retries"] += r["retries"]
        agg["quota_per_s"] = r["quota_per_s"]

    participants = per_participant(rows, {"mutations": 0, "retries": 0, "quota_per_s": None}, add,
                                   "mutations", "mutations_per_s", 2)
    return summarize("mutation", records_in=len(names), records_out=sum(r["done"] for r in rows), bytes_in=None,
                     bytes_out=0, started_s=started, ended_s=ended, unit="mutations",
                     existing=sum(r["existing"] for r in rows), not_done=sum(r["left"] for r in rows),
                     requests=len(requests), participants=participants, config=asdict(config),
                     events=[(r["participant"], *e) for r in rows for e in r["events"]])
