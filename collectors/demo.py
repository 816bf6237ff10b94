"""The demo collector behind ``make run``: a multi-tenant Spark workload that keeps every limiter busy.

How it works and why
--------------------
``python -m collectors.demo`` waits for the control plane, seeds a set of limits the first time (never over an
operator's later edits: it seeds only a store that has no resource group yet), and then runs, on one local Spark
session, rounds of:

- the publish job (rate source, several keyed producers per task), one stream per topic of six topics of three
  tenants, each on its own driver thread -- throttled at topic, namespace-default, tenant and resource-group
  level at once, so the fairness queues have members. One stream per topic: a micro-batch ends when its slowest
  topic is sent, so one stream over all six left every limit but the tightest idle for the rest of each batch
  (the demo's shared limits were used at 0.8). Each stream's micro-batch holds ``BATCH_S`` seconds of its topic
  at its seeded limit (``DEMO_RATES_PER_S``): the gap between two batches is a small part of it, and the
  streams' gaps fall at different times, so a tenant's or a resource group's limit stays busy through them;
- beside it on a second driver thread: the offload job (ledgers copied hot -> cold under the flow permits), the
  mutation job (partition directories created under a KIP-599 quota) and the dispatch job (a backlog read by two
  subscriptions under topic and subscription dispatch limits).

Every Python worker is a participant, so the dashboard shows a resource group split across participants. Work
files live under ``<data-dir>/demo`` and are replaced each round, so the demo can run for days.

The seeded limits (msgs/s unless said otherwise):

=====================================  ================================================================
acme (tenant aggregate)                600
acme/web (namespace: each topic)       250; acme/web/clicks has its own topic policy of 150
globex/etl (resource group rg-etl)     publish 400, dispatch 300, attached to the namespace
initech/data/blobs (topic)             100,000 bytes/s
offload flow permits                   1,000,000 bytes/s
mutations of (spark, demo)             5/s, window 1 s, 11 samples, strict
backlog topic dispatch                 200; subscription dispatch 120 each
=====================================  ================================================================
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from limiter.producer import ACQUIRE_SHARE
from protocol.settings import ConfigError, ControlPlaneAccess

from .jobs.publish import DEMO_TOPICS, PublishConfig, run_publish

__all__ = ["SEED", "seed", "main"]

log = logging.getLogger("throttlescope.demo")

RATE = {"publishThrottlingRateInByte": -1}
# The msgs/s each of the publish job's DEMO_TOPICS gets under the seeded limits: clicks 150, views 250, logs 200
# (acme's 600 less those two), orders and payments 200 each (rg-etl's 400), blobs 500 (100,000 bytes/s of
# PAYLOAD_BYTES payloads) -- each topic's stream gets BATCH_S seconds of it per micro-batch
DEMO_RATES_PER_S = (150, 250, 200, 200, 200, 500)
PAYLOAD_BYTES = 200
SLOTS_PER_JOB = 2   # tasks of each side job
BATCH_S = 60.0  # of sending at its seeded limit per micro-batch of a topic's stream (the gap between two: ~1 s)
MASTER = f"local[{len(DEMO_RATES_PER_S) + SLOTS_PER_JOB}]"   # a slot for each topic's stream and the side jobs
SEED: list[tuple[str, str, dict[str, Any] | None]] = [
    ("PUT", "/admin/v2/resourcegroups/rg-etl", {"publishRateInMsgs": 400, "publishRateInBytes": -1,
                                                "dispatchRateInMsgs": 300, "dispatchRateInBytes": -1}),
    ("PUT", "/admin/v2/namespaces/globex/etl/resourcegroup/rg-etl", None),
    ("POST", "/admin/v2/tenants/acme/publishRate", {"publishThrottlingRateInMsg": 600, **RATE}),
    ("POST", "/admin/v2/namespaces/acme/web/publishRate", {"publishThrottlingRateInMsg": 250, **RATE}),
    ("POST", "/admin/v2/persistent/acme/web/clicks/publishRate", {"publishThrottlingRateInMsg": 150, **RATE}),
    ("POST", "/admin/v2/persistent/initech/data/blobs/publishRate",
     {"publishThrottlingRateInMsg": -1, "publishThrottlingRateInByte": 100_000}),
    ("POST", "/admin/v2/brokers/configuration/managedLedgerOffloadBrokerFlowPermitsPerSecond/1000000", None),
    ("PUT", "/admin/v2/quotas/mutations/spark/demo", {"quotaPerSecond": 5, "windowSeconds": 1, "samples": 11,
                                                      "strict": True}),
    ("POST", "/admin/v2/persistent/demo/backlog/events/dispatchRate",
     {"dispatchThrottlingRateInMsg": 200, "dispatchThrottlingRateInByte": -1, "ratePeriodInSecond": 1}),
    ("POST", "/admin/v2/persistent/demo/backlog/events/subscriptionDispatchRate",
     {"dispatchThrottlingRateInMsg": 120, "dispatchThrottlingRateInByte": -1, "ratePeriodInSecond": 1}),
]


def _token(name: str, given: str | None, data_dir: Path, file: str, deadline: float) -> str:
    """The token given (by its variable ``name``), else the file the control plane writes at its first start
    (waited for)."""
    if given:
        return given
    path = data_dir / file
    while not path.exists():
        if time.time() > deadline:
            raise SystemExit(f"demo: no {name} in the environment and no {path} (is the control plane running "
                             "with this --data-dir?)")
        time.sleep(0.2)
    return path.read_text().strip()


def wait_healthy(url: str, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.time() > deadline:
            raise SystemExit(f"demo: the control plane at {url} did not answer /healthz within {timeout_s:.0f} s")
        time.sleep(0.3)


def seed(admin: httpx.Client) -> bool:
    """Apply SEED unless the store already has a resource group (then the operator's limits stand)."""
    if admin.get("/admin/v2/resourcegroups").json():
        return False
    for method, path, body in SEED:
        response = admin.request(method, path, json=body)
        if response.status_code >= 300:
            raise SystemExit(f"demo: seeding {method} {path} failed: {response.status_code} {response.text}")
    return True


def _rounds(spark: Any, pool: str, what: str, one_round: Callable[[int], None], stop: threading.Event,
            ends_at: float | None = None) -> None:
    """Run ``one_round(round_no)`` (1, 2, ...) in scheduler pool ``pool`` until ``stop`` (or ``ends_at``); a
    round that fails is logged and retried after 5 s: one stream's failure must not stop the demo's others."""
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)   # its turn beside the other pools
    round_no = 0
    while not stop.is_set() and (ends_at is None or time.time() < ends_at):
        round_no += 1
        try:
            one_round(round_no)
        except Exception:  # noqa: BLE001 - see the docstring
            log.exception("demo: a round of %s failed; retrying", what)
            stop.wait(5)


SIDE_POOL = "side-jobs"


def _publish_pool(topic: str) -> str:
    return f"publish-{topic}"


def write_pools(path: Path, pools: list[str]) -> Path:
    """The fair scheduler's allocation file naming the demo's pools (``spark.scheduler.allocation.file``): one
    FIFO pool of weight 1 per driver thread, as Spark makes an unnamed one, but named, so Spark does not warn for
    each at its first job; and what each pool gets is written down."""
    from xml.sax.saxutils import quoteattr

    body = "".join(f"  <pool name={quoteattr(pool)}><schedulingMode>FIFO</schedulingMode><weight>1</weight>"
                   "<minShare>0</minShare></pool>\n" for pool in pools)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'<?xml version="1.0"?>\n<allocations>\n{body}</allocations>\n', encoding="utf-8")
    return path


def _fresh(path: Path) -> Path:
    """``path``, emptied: a round's output alternates between two directories (the last one stays readable)."""
    shutil.rmtree(path, ignore_errors=True)
    return path


def _side_jobs(spark: Any, work: Path, stop: threading.Event) -> None:
    from .jobs.dispatch import DispatchConfig, make_backlog, run_dispatch
    from .jobs.mutation import MutationConfig, run_mutation
    from .jobs.offload import OffloadConfig, make_ledgers, run_offload

    def one_round(round_no: int) -> None:
        base = _fresh(work / f"side-{round_no % 2}")
        make_ledgers(base / "hot", count=8, size_bytes=1_000_000)
        run_offload(spark, OffloadConfig(hot=str(base / "hot"), cold=str(base / "cold"), duration_s=30,
                                         partitions=SLOTS_PER_JOB))
        run_mutation(spark, MutationConfig(root=str(base / "tables"), tables=2, days=2, hours=12, user="spark",
                                           client_id="demo", duration_s=30, partitions=SLOTS_PER_JOB))
        make_backlog(base / "backlog", {"demo/backlog/events": 1}, entries=400)
        run_dispatch(spark, DispatchConfig(backlog=str(base / "backlog"), output=str(base / "delivered"),
                                           subscriptions=("billing", "audit"), duration_s=30))

    _rounds(spark, SIDE_POOL, "the side jobs", one_round, stop)


def _publish_rounds(spark: Any, work: Path, topic: str, rate_per_s: float, round_s: float, ends_at: float | None,
                    stop: threading.Event) -> None:
    """Rounds of the publish job's stream over one topic, until ``ends_at`` (or ``stop``)."""
    slug = topic.replace("/", "-")

    def one_round(round_no: int) -> None:
        out = _fresh(work / f"publish-{slug}-{round_no % 2}")
        length = round_s if ends_at is None else max(1.0, min(round_s, ends_at - time.time()))
        config = PublishConfig(output=str(out), duration_s=length, topics=(topic,), partitions=1,
                               producers_per_topic=3, payload_bytes=PAYLOAD_BYTES,
                               rows_per_batch=max(1, int(rate_per_s * BATCH_S)),
                               # (the producers' own rule, ``most_per_acquire``: clicks' 150 msgs/s sent 100
                               # records a send, the job's default then -- two thirds of its second)
                               batch_rows=max(1, round(rate_per_s * ACQUIRE_SHARE)))
        summary = run_publish(spark, config)
        log.info("demo: %s round %d: %s records out", topic, round_no, summary.get("records_out"))

    _rounds(spark, _publish_pool(topic), f"the publish stream of {topic}", one_round, stop, ends_at)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m collectors.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="the control plane (default: THROTTLESCOPE_URL, else http://127.0.0.1:8000)")
    parser.add_argument("--data-dir", help="where its token files are (default: THROTTLESCOPE_DATA_DIR, else ./data)")
    parser.add_argument("--master", default=MASTER,
                        help="Spark master (default %(default)s: the tasks mostly wait on their limiters; a slot for "
                             "each topic's publish stream and for the side jobs' tasks, so none waits for a slot)")
    parser.add_argument("--round-s", type=float, default=300.0,
                        help="length of one publish round of each stream (s; its output is then replaced)")
    parser.add_argument("--duration-s", type=float, default=None, help="stop after this long (default: never)")
    parser.add_argument("--startup-timeout-s", type=float, default=120.0)
    args = parser.parse_args(argv)
    if args.round_s <= 0 or (args.duration_s is not None and args.duration_s <= 0):
        parser.error("--round-s and --duration-s must be > 0 seconds")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    log.setLevel(logging.INFO)
    try:
        settings = ControlPlaneAccess.from_flags(args, {"url": "--url", "data_dir": "--data-dir"})
    except ConfigError as e:
        parser.error(str(e))
    url, data_dir = settings.url or "", settings.data_dir
    deadline = time.time() + args.startup_timeout_s
    wait_healthy(url, args.startup_timeout_s)
    admin_token = _token("THROTTLESCOPE_ADMIN_TOKEN", settings.admin_token, data_dir, "admin.token", deadline)
    token = _token("THROTTLESCOPE_TOKEN", settings.token, data_dir, "participant.token", deadline)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin_token}"}, timeout=10) as admin:
        log.info("demo: %s", "seeded the demo limits" if seed(admin) else "limits already configured; kept")
    os.environ.update(THROTTLESCOPE_URL=url, THROTTLESCOPE_TOKEN=token)

    from .jobs.common import spark_session

    work = data_dir / "demo"
    pools = write_pools(work / "fair-pools.xml", [SIDE_POOL] + [_publish_pool(topic) for topic in DEMO_TOPICS])
    spark = spark_session(args.master, "throttlescope-demo", url, token,
                          conf={"spark.scheduler.mode": "FAIR",   # each driver thread's pool gets its turn
                                "spark.scheduler.allocation.file": str(pools.resolve()),
                                # its batch side jobs are small; each stream would say AQE is off for streams
                                "spark.sql.adaptive.enabled": "false"})
    stop = threading.Event()
    side = threading.Thread(target=_side_jobs, args=(spark, work, stop), name="demo-side-jobs", daemon=True)
    side.start()
    ends_at = None if args.duration_s is None else time.time() + args.duration_s
    streams = [threading.Thread(target=_publish_rounds, args=(spark, work, topic, rate, args.round_s, ends_at, stop),
                                name=f"demo-publish-{topic}", daemon=True)
               for topic, rate in zip(DEMO_TOPICS, DEMO_RATES_PER_S, strict=True)]
    for thread in streams:
        thread.start()
    try:
        for thread in streams:
            while thread.is_alive():
                thread.join(0.5)   # (in steps: Ctrl-C reaches the main thread between them)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
