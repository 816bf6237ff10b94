"""The control plane down for 12 s under a running Spark job: the job keeps its last limits, drops nothing, and
resumes reporting.

A local[2] job (``spark_outage_job.py``, its own process and JVM: the test takes the control plane away, which the
session-wide SparkSession of tests/spark must keep) sends ``ROWS`` ids through ``collectors.spark.throttle_rows``
under a topic limit of ``LIMIT`` msgs/s, shared by its two Python workers (two participants). Once both report,
the control plane is killed (SIGKILL), stays down ``OUTAGE_S`` = 12 s (six times the workers' longest backoff), and
comes back on the same port and data.

Shown: every id arrives exactly once; during the outage the job runs at the limit (within 5 %): each worker spends
the tokens it was granted, then runs at the static split the control plane last answered (the limit / 2 workers),
steadily; both workers notice the outage (rounds fail) and report again within seconds of the restart, with their
sequence numbers carried on; the job finishes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.controlplane.conftest import REPO, clean_env

from .conftest import ADMIN, PARTICIPANT, RestartableControlPlane
from .spark_outage_job import APP_ID

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(300)]
TOPIC = "reliability/outage/orders"
LIMIT = 200.0           # msgs/s over the whole job
OUTAGE_S = 12.0
BEFORE_S = 4.0          # steady running before the kill
ROWS = int(LIMIT * (BEFORE_S + OUTAGE_S + 10))


def job_participants(cp: RestartableControlPlane) -> dict[str, dict[str, Any]]:
    try:
        r = httpx.get(cp.url + "/v1/state/participants", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=2)
    except httpx.TransportError:
        return {}
    return {p["participantId"]: p for p in r.json()["participants"] if p["applicationId"] == APP_ID}


def wait_for(predicate: Any, timeout_s: float, what: str, proc: subprocess.Popen[bytes], log: Path) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return time.time()
        if proc.poll() is not None:
            raise AssertionError(f"the job ended (exit {proc.returncode}) while waiting for {what}: "
                                 f"{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def test_control_plane_down_12s_under_a_running_spark_job(tmp_path: Path) -> None:
    if shutil.which("java") is None:
        pytest.skip("Spark tests need Java 17 or 21 on PATH (`java` was not found)")
    cp = RestartableControlPlane(tmp_path / "cp", ["--report-interval", "0.5"])
    cp.start()
    out = tmp_path / "rows.json"
    log = tmp_path / "job.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        assert cp.client(ADMIN).post(f"/admin/v2/persistent/{TOPIC}/publishRate",
                                     json={"publishThrottlingRateInMsg": LIMIT}).status_code == 204
        with open(log, "wb") as f:   # a file, not a pipe: a full pipe would stall the job
            proc = subprocess.Popen([sys.executable, "-m", "tests.reliability.spark_outage_job", cp.url,
                                     PARTICIPANT, TOPIC, str(ROWS), str(out)], cwd=REPO, env=clean_env(),
                                    stdout=f, stderr=subprocess.STDOUT)
        wait_for(lambda: len(job_participants(cp)) == 2, 120, "both workers to report", proc, log)
        time.sleep(BEFORE_S)
        before = job_participants(cp)
        assert len(before) == 2
        t_kill = time.time()
        cp.kill()
        time.sleep(OUTAGE_S)
        assert proc.poll() is None, "the job ended during the outage: too few rows for the test"
        t_starting = time.time()   # a worker may be answered before start() returns (it waits for /healthz)
        cp.start()
        t_restart = time.time()
        t_back = wait_for(lambda: len(job_participants(cp)) == 2, 20, "both workers to report again", proc, log)
        after = job_participants(cp)
        assert proc.wait(timeout=120) == 0, log.read_text(errors="replace")[-3000:]
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        cp.kill()

    rows = json.loads(out.read_text())
    ids = sorted(r[0] for r in rows)
    assert ids == list(range(ROWS)), f"{ROWS - len(set(ids))} ids missing, {len(ids) - len(set(ids))} repeated"
    workers = sorted({r[2] for r in rows})
    assert len(workers) == 2 and set(workers) == set(before) == set(after)

    # during the outage: the job at the limit, each worker at the static split (its safe rate) throughout
    t0, t1 = t_kill + 2.0, t_restart - 0.5
    during = [r for r in rows if t0 <= r[1] < t1]
    rate = len(during) / (t1 - t0)
    print(f"\nOUTAGE {OUTAGE_S:g} s: {len(during)} rows in {t1 - t0:.1f} s = {rate:.1f}/s (limit {LIMIT:g}); "
          f"reporting again {t_back - t_restart:.1f} s after the restart; job ended "
          f"{max(r[1] for r in rows) - t_restart:.1f} s after it")
    assert abs(rate - LIMIT) <= 0.05 * LIMIT, f"{rate:.1f} rows/s during the outage, limit {LIMIT:g}"
    shares = []
    for w in workers:
        mine = [r for r in rows if r[2] == w]
        held = {r[3] for r in mine if t_kill + 2.0 <= r[1] < t_starting}
        spans = {v: (round(min(r[1] for r in mine if r[3] == v) - t_kill, 2),
                     round(max(r[1] for r in mine if r[3] == v) - t_kill, 2)) for v in held}
        assert len(held) == 1, (f"{w}: local rate moved during the outage: {held}; s after the kill (first, last) "
                                f"{spans}; the control plane started {t_starting - t_kill:.2f} s after the kill")
        safe = held.pop()
        assert 0 < safe < LIMIT
        shares.append(safe)
        assert not any(r[4] for r in mine if t_kill + 3.0 <= r[1] < t_starting), f"{w} did not notice the outage"
        assert max(r[5] for r in mine) > 0, f"{w}: no failed round recorded"
        assert any(r[4] for r in mine if r[1] >= t_back + 1.5), f"{w}: not connected again after the restart"
    assert abs(sum(shares) - LIMIT) <= 0.02 * LIMIT, f"the safe rates {shares} do not add up to the limit"
    # reporting resumed, the same participants carrying on (not new ones)
    assert t_back - t_restart < 10.0
    for pid, p in after.items():
        assert p["seq"] > before[pid]["seq"], (pid, before[pid]["seq"], p["seq"])
    assert max(r[1] for r in rows) > t_restart + 2.0, "the job did not run on after the restart"
