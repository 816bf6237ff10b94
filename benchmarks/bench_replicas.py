"""Control-plane replicas on the workload users run: a Spark stream through the helpers under one shared limit.

Three replicas on one address with their Redis (``make run-replicated``'s), on the stream of the shared-limit
benchmark (``rate-micro-batch``, 4 tasks, one topic's limit of 1,000 msgs/s, demand above it, ``local[2]``):
undisturbed, with one replica SIGKILLed mid-stream (its participants move to the others), and with their Redis
SIGKILLed and started again empty a second later (the grants are gone: the replicas re-learn) -- side by side
with one control-plane process (``make run``'s) on the same stream, undisturbed and SIGKILLed and restarted 6 s
later (what a supervisor does for a process that dies). And what one grant ask costs a replica (its
limit's windows read from Redis and written back) against one process (in memory), in CPU.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import row
from .shared.workloads import Workload, rows_for

SECTION = "replicas"
REPLICAS = 3
ASKS = 2_000


def workloads() -> list[Workload]:
    return [Workload(f"stream, 1 topic, 4 tasks, {REPLICAS} replicas", "topic", ("ours",), partitions=4),
            Workload(f"stream, 1 topic, 4 tasks, {REPLICAS} replicas, one killed", "topic", ("ours",),
                     partitions=4, during="replica"),
            Workload(f"stream, 1 topic, 4 tasks, {REPLICAS} replicas, Redis restarted", "topic", ("ours",),
                     partitions=4, during="redis")]


def ask_cpu_s(redis_url: str) -> dict[str, float]:
    """CPU seconds per grant ask (one limit, five participants asking in turn): one process, and a replica."""
    from controlplane.grant_tables import RedisTable
    from controlplane.grants import GrantBook
    from protocol import GrantAsk, PolicySet

    policies = PolicySet.model_validate({"version": 1, "topics": {
        "t/ns/x": {"publishRate": {"publishThrottlingRateInMsg": 1000}}}})
    ask = [GrantAsk(level="topic", name="t/ns/x", direction="publish", wants_msgs=10, rate_msgs_per_s=200)]
    out = {}
    for kind, book in (("process", GrantBook(1.0)),
                       ("replica", GrantBook(1.0, clock=time.time,
                                             table=RedisTable(redis_url, prefix="bench:asks:")))):
        for k in range(200):   # five holders, their windows filled
            book.answer(f"p{k % 5}", ask, policies)
        t = time.process_time()
        for k in range(ASKS):
            book.answer(f"p{k % 5}", ask, policies)
        out[kind] = (time.process_time() - t) / ASKS
    return out


def run(quick: bool = False) -> list[dict[str, Any]]:
    if shutil.which("java") is None or shutil.which("redis-server") is None:
        return [row(SECTION, "skipped: Java or redis-server not found", float("nan"), "", "", None)]
    from .bench_shared import Bench

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
        alone = [Workload("stream, 1 topic, 4 tasks, one process", "topic", ("ours",), partitions=4),
                 Workload("stream, 1 topic, 4 tasks, one process, killed and restarted 6 s later", "topic",
                          ("ours",), partitions=4, during="kill")]
        for replicas, todo in ((0, alone), (REPLICAS, workloads())):
            work = Path(tmp) / f"r{replicas}"
            work.mkdir()
            bench = Bench(quick, work, replicas=replicas)
            try:
                bench.use("local[2]")
                for w in todo:
                    try:
                        r = bench.run(w, "ours")
                    except Exception as e:  # noqa: BLE001 - one failed workload is a failed row
                        rows.append(row(SECTION, f"{w.name} failed: {type(e).__name__}: {e}"[:200], float("nan"),
                                        "", "", False))
                        continue
                    print(f"  {w.name}: {r}", file=sys.stderr, flush=True)
                    rows += rows_for(w, "ours", "local[2]", r, SECTION)
                if replicas:
                    cost = ask_cpu_s(bench.cp.redis.url)
                    rows.append(row(SECTION, "a grant ask's CPU: one process", cost["process"] * 1e6, "us"))
                    rows.append(row(SECTION, "a grant ask's CPU: a replica (windows in Redis)",
                                    cost["replica"] * 1e6, "us", "", None,
                                    "read, answered on and written back in one optimistic transaction"))
                    rows.append(row(SECTION, "a grant ask's CPU: replica / one process",
                                    cost["replica"] / cost["process"], "x"))
            finally:
                bench.close()
    return rows


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    for r in run(args.quick):
        print(f"{r['name']:<90} {r['value']:10.3f} {r['unit']:<3} {r['goal']:<8} {r['ok']}")
