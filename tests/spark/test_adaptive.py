"""An adaptive limit in a real Spark job against a real HTTP sink of unknown capacity (loopback): the tasks report
every answer through the public helper, and the cluster finds the capacity together; the same limit without
adaptation overruns the sink. Loose margins for a noisy 2-core machine; ``benchmarks/bench_adaptive.py`` holds
the tight goals."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from benchmarks.bench_adaptive import per_second
from benchmarks.shared import jobs
from benchmarks.shared.adaptive_kinds import sender_fn
from benchmarks.shared.sink_server import SinkServer
from tests.spark.conftest import ok

pytestmark = [pytest.mark.spark, pytest.mark.integration]

# long enough for a start that read the sink low (its first second, the stream just started): the rate then climbs
# from the deepest cut on the curve, and takes 0.9 of the sink 2-7 s in (the benchmark, its last seven runs)
SECONDS = 16


def run(spark: Any, admin: httpx.Client, kind: str) -> tuple[list[int], list[int]]:
    topic = f"adapt-{kind}/ns/api"
    ok(admin.post(f"/admin/v2/persistent/{topic}/publishRate",
                  json={"publishThrottlingRateInMsg": 2000, "adaptive": kind == "ours"}))
    # the exact wait in retry-after-ms too: a whole second's pause for every refusal costs the learnt rate a second
    # of sending each time (the benchmark measures both sinks; this test holds the mechanism, with loose margins)
    sink = SinkServer(700, retry_after_ms=True).start()
    started: dict[str, float] = {}
    try:
        jobs.stream(spark, sender_fn(kind, topic, sink.url), 2, 2000, SECONDS, lambda t0: started.update(t0=t0))
        return per_second(list(sink.answers), started["t0"], SECONDS)
    finally:
        sink.close()


def test_an_adaptive_limit_finds_an_http_sinks_capacity_and_the_same_limit_without_overruns_it(
        spark: Any, admin: httpx.Client) -> None:
    taken, refused = run(spark, admin, "ours")
    seen = f"taken per second {taken}, refused {refused}"           # (whole: pytest would cut the lists short)
    # over the last 10 s, not 6: this sink's sawtooth and Spark's micro-batches swing a second from 200 to 740.
    # 24 runs here (the suite's control plane, report interval 0.25 s) took 0.60-0.91 of the sink over them,
    # median 0.82; over the last 6 s 0.68-0.93, and a floor of 0.75 there failed 4 of them. (The same machine's
    # job without adaptation, flooding the sink, took 0.81 of it in the benchmark: Spark's pauses bound them all)
    last_t, last_r = sum(taken[-10:]), sum(refused[-10:])
    assert last_t >= 0.5 * 700 * 10, seen    # found: over half the capacity (tasks adapting alone take a quarter)
    assert last_r <= 0.05 * (last_t + last_r), seen                 # and few sends refused once found
    taken, refused = run(spark, admin, "none")
    seen = f"taken per second {taken}, refused {refused}"
    assert sum(refused) > 0.3 * (sum(taken) + sum(refused)), seen   # 2,000/s at a sink of 700/s
