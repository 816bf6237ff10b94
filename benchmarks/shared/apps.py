"""Several Spark applications under one shared limit, as two jobs of one tenant are: each its own driver process
(``python -m benchmarks.shared.apps CONFIG``) on ``local[1]`` -- one core each, the host's two -- with its own
executor and Python worker, so its own participant. (Or one application of many task slots, ``local[16]``: as
many Python workers, each a participant, as a cluster of many executors has.)

``run(apps, ...)`` starts one driver per ``App``, waits until every one has warmed its session up (``jobs.session``),
tells them all one moment to start, and waits for them to end. Each runs the stream workload (``jobs.stream``) of
one kind on its own topic, its tasks paced to its ``pace_per_task`` (0: as fast as the limit lets them), and
records its admissions into the one folder (``kinds.arrow_fn``), so the figures are the aggregate's, read as for
one application. A driver that fails stops the others, and its error says what its stderr said.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from collectors.jobs.common import positive

__all__ = ["App", "run", "READY_TIMEOUT_S"]

READY_TIMEOUT_S = 240.0   # a driver's JVM, its session and its warm-up (about 20 s here), on a busy host
WARM_UP_S = 10.0          # each driver's unmeasured stream before the common start
ROOT = Path(__file__).resolve().parents[2]   # the checkout: where ``python -m benchmarks...`` finds this package
START_DELAY_S = 0.5       # from telling the drivers the moment to that moment (each reads it from its stdin)


@dataclass(frozen=True)
class App:
    """One driver's part: ``kind``'s tasks (``kinds.arrow_fn``) sending to ``topic``."""
    kind: str
    topic: str
    partitions: int = 2
    rows_per_batch: int = 1000
    pace_per_task: float = 0.0   # rows a second a task (0: as fast as the limit lets it)
    limit_per_s: float = 0.0     # the static split's and Redis's own limit
    tasks: int = 1               # the static split: the limit over this many
    redis_url: str = ""
    redis_key: str = "shared"
    slots: int = 1               # its Spark's task slots (``local[slots]``): Python workers, each a participant
    commit_s: float = 0.0        # the driver's commit after each micro-batch (``jobs.stream``)

    def __post_init__(self) -> None:
        positive("slots", self.slots, integer=True)   # (the jobs' own check: a whole number > 0)


def run(apps: Sequence[App], url: str, token: str, work: Path, log_dir: Path, duration_s: float,
        report_interval_s: float = 1.0) -> float:
    """Run ``apps`` at once for ``duration_s``; returns the moment (unix time) they started."""
    drivers = []
    try:
        for i, app in enumerate(apps):
            config = {"app": asdict(app), "url": url, "token": token, "work": str(work), "log_dir": str(log_dir),
                      "duration_s": duration_s, "report_interval_s": report_interval_s}
            err = open(work / f"driver-{os.getpid()}-{i}.err", "w+")   # noqa: SIM115 - read back on failure
            drivers.append((subprocess.Popen([sys.executable, "-m", __name__, json.dumps(config)], text=True,
                                              cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err),
                            err))
        deadline = time.monotonic() + READY_TIMEOUT_S
        for proc, err in drivers:
            if not _ready(proc, deadline):
                raise RuntimeError(f"a driver did not warm up within {READY_TIMEOUT_S:g} s: {_tail(proc, err)}")
        start = time.time() + START_DELAY_S
        for proc, _ in drivers:
            proc.stdin.write(f"{start!r}\n")
            proc.stdin.flush()
        for proc, err in drivers:
            try:
                code = proc.wait(timeout=duration_s + START_DELAY_S + READY_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"a driver did not end in time: {_tail(proc, err)}") from None
            if code != 0:
                raise RuntimeError(f"a driver failed (exit {code}): {_tail(proc, err)}")
        return start
    finally:
        for proc, err in drivers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            err.close()


def _ready(proc: subprocess.Popen, deadline: float) -> bool:
    """Whether the driver said READY on stdout before ``deadline`` (``time.monotonic``); other lines are skipped,
    and a driver that ends first was not."""
    said, heard = [False], threading.Event()

    def read() -> None:
        for line in proc.stdout:
            if line.strip() == "READY":
                said[0] = True
                break
        heard.set()
    threading.Thread(target=read, daemon=True).start()
    heard.wait(max(0.0, deadline - time.monotonic()))
    return said[0]


def _tail(proc: subprocess.Popen, err: object, chars: int = 2000) -> str:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    err.seek(0)
    return err.read()[-chars:] or "(nothing on stderr)"


def main(argv: list[str]) -> None:
    """One driver: warm up, say READY, read the moment to start from stdin, run its stream until then plus the
    duration."""
    from . import jobs
    from .kinds import arrow_fn

    config = json.loads(argv[0])
    app = App(**config["app"])
    # (built before the session's seconds of start-up: a wrong kind is refused at once, by arrow_fn's own check)
    fn = arrow_fn(app.kind, (app.topic,), config["log_dir"], limit_per_s=app.limit_per_s, tasks=app.tasks,
                  redis_url=app.redis_url, redis_key=app.redis_key, pace_per_task=app.pace_per_task)
    spark = jobs.session(f"local[{app.slots}]", config["url"], config["token"], Path(config["work"]), app.partitions,
                         WARM_UP_S, report_interval_s=config["report_interval_s"],
                         app_name=f"throttlescope-bench-{app.topic.replace('/', '-')}")
    print("READY", flush=True)
    start = float(sys.stdin.readline())
    time.sleep(max(0.0, start - time.time()))
    try:
        jobs.stream(spark, fn, app.partitions, app.rows_per_batch, config["duration_s"] - (time.time() - start),
                    commit_s=app.commit_s)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
