"""Where the send happens: a job's rows sent from Python to a real HTTP server under a topic limit, measured at the
server.

The other Spark rows count what the limiter admitted, in the function that holds it. A user's job sends after
that, and where it sends decides what the server sees: ``df.mapInArrow(throttle_arrow(t), schema).foreach(post)``
runs ``post`` in another Python worker, fed pickled rows in lumps. Three ways (``shared/send_ways.py``), each on
``local[2]``: two tasks of ``ROWS / 2`` rows, one request a row, a topic limit of ``LIMIT_PER_S`` msgs/s, the
server (``shared/sink_server.py``, of a capacity that never refuses) recording when each request came.

Per way: the worst 1-s window at the server / the limit (goal for the helpers' ways: <= 1.05, plus one acquire, a
40th of the limit's second), the mean from the first request to the last / the limit (goal >= 0.97), and how long
after the job's start the first request came.

Run: ``python -m benchmarks --only sends`` or ``python -m benchmarks.bench_sends [--quick]``.
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
from .shared.send_ways import WAYS, send
from .shared.sink_server import SinkServer
from .shared.windows import worst_window_ratio

SECTION = "sends"
LIMIT_PER_S = 500
ROWS = 6000           # 12 s at the limit
QUICK_ROWS = 2000
ONE_ACQUIRE = 1 / 40  # of the limit's second: a send's slice (``Producer.most_per_acquire``)
GOAL_WORST, GOAL_MEAN = 1.05 + ONE_ACQUIRE, 0.97


def measure(spark: Any, admin: Any, way: str, topic: str, rows: int) -> dict[str, float]:
    """One job sending ``rows`` rows ``way``: the server's figures."""
    admin.post(f"/admin/v2/persistent/{topic}/publishRate",
               json={"publishThrottlingRateInMsg": LIMIT_PER_S}).raise_for_status()
    server = SinkServer(1e9).start()
    try:
        started = time.time()
        send(spark, way, topic, server.url, rows)
        answers = sorted(server.answers)
    finally:
        server.close()
    t0, t1 = answers[0][0], answers[-1][0]
    events = [(t, float(n)) for t, n, _ in answers]
    return {"worst": worst_window_ratio(events, LIMIT_PER_S, t0, t1),
            "mean": sum(n for _, n in events) / max(1e-9, t1 - t0) / LIMIT_PER_S,
            "first_s": t0 - started, "received": sum(n for _, n in events)}


def run(quick: bool = False) -> list[dict[str, Any]]:
    if shutil.which("java") is None:
        return [row(SECTION, "skipped: Java not found", float("nan"), "", "", None)]
    from .bench_shared import Bench

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    rows = QUICK_ROWS if quick else ROWS
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-sends-") as tmp:
        bench = Bench(quick, Path(tmp))
        try:
            bench.use("local[2]")
            for i, way in enumerate(WAYS):
                m = measure(bench.spark, bench.admin, way, f"sends{i}/ns/api", rows)
                print(f"  sends [{way}]: {m}", file=sys.stderr, flush=True)
                ours = way != WAYS[0]
                name = f"{rows:,} rows, 2 tasks, a request a row, topic limit {LIMIT_PER_S} msgs/s [{way}]"
                note = f"{m['received']:,.0f} of {rows:,} rows received; the first {m['first_s']:.1f} s after the start"
                out += [row(SECTION, f"{name}: worst 1-s window at the server / limit", m["worst"], "x",
                            f"<= {GOAL_WORST:g}" if ours else "", m["worst"] <= GOAL_WORST if ours else None, note),
                        row(SECTION, f"{name}: mean at the server / limit", m["mean"], "x",
                            f">= {GOAL_MEAN:g}" if ours else "", m["mean"] >= GOAL_MEAN if ours else None,
                            "from the first request to the last")]
        finally:
            bench.close()
    return out


if __name__ == "__main__":
    for r in run("--quick" in sys.argv[1:]):
        print(r)
