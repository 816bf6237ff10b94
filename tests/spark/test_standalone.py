"""The publish job on a real Spark standalone cluster of 2 workers on loopback (``benchmarks.shared.cluster``),
through the CLI: one executor per worker, each with its own Python workers -- the case local mode cannot show.

The executors' Python workers cannot import the editable install of this checkout: a ``sitecustomize`` on their
PYTHONPATH removes its finder, so the library they run is the archive ``configure()`` ships (as on a cluster whose
nodes have no throttlescope). The job runs in a subprocess -- a second SparkContext cannot live beside the session
fixture's in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from benchmarks.shared.cluster import StandaloneCluster
from benchmarks.shared.windows import worst_window_ratio
from collectors.jobs import make_input, read_output
from tests.controlplane.conftest import REPO, clean_env
from tests.spark.conftest import PARTICIPANT, ok, require_java

pytestmark = [pytest.mark.spark, pytest.mark.integration]

JOB_TIMEOUT_S = 180.0
LIMIT = 1000.0
BATCH_ROWS = 50
HIDE_EDITABLE = ("import sys\n"
                 "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')]\n")


@pytest.fixture(scope="module")
def no_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PYTHONPATH directory whose sitecustomize hides this checkout's editable install; checked to work."""
    path = tmp_path_factory.mktemp("no-install")
    (path / "sitecustomize.py").write_text(HIDE_EDITABLE)
    probe = subprocess.run([sys.executable, "-c", "import collectors"], cwd=path, capture_output=True, text=True,
                           env={**clean_env(), "PYTHONPATH": str(path)}, timeout=60)
    assert probe.returncode != 0 and "No module named 'collectors'" in probe.stderr, probe
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> StandaloneCluster:
    require_java()
    with StandaloneCluster(tmp_path_factory.mktemp("cluster"), workers=2, cores=1, memory="1g",
                           env=clean_env()) as running:
        yield running


def _publish(cluster: StandaloneCluster, cp_url: str, app: str, tmp_path: Path, no_install: Path,
             ) -> subprocess.Popen[str]:
    env = {**clean_env(), "SPARK_LOCAL_IP": "127.0.0.1", "THROTTLESCOPE_APP_ID": app}
    return subprocess.Popen(
        [sys.executable, "-m", "collectors", "publish", "--master", cluster.master_url, "--source", "files",
         "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--partitions", "2",
         "--url", cp_url, "--token", PARTICIPANT, "--app-name", app, "--json", "--batch-rows", str(BATCH_ROWS),
         "--conf", "spark.executor.memory=512m", "--conf", "spark.ui.enabled=false",
         "--conf", f"spark.cores.max={cluster.total_cores}", "--conf", f"spark.executorEnv.PYTHONPATH={no_install}"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen[str]) -> dict:
    try:
        out, err = proc.communicate(timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    assert proc.returncode == 0, err[-6000:]
    return json.loads(out)


def _participants(cp_url: str, app: str, departed: bool = False) -> list[dict]:
    """The participants of application ``app`` the control plane knows: live ones, and with ``departed`` those
    that said goodbye (a Python worker leaves when its job ends)."""
    seen = httpx.get(f"{cp_url}/v1/state/participants", timeout=5,
                     headers={"Authorization": f"Bearer {PARTICIPANT}"}).json()
    return [p for p in seen["participants"] + (seen["departed"] if departed else [])
            if p["applicationId"] == app]


def _admitted_windows(output: Path) -> float:
    """The worst 1-s window of what was delivered, over the limit (from each record's ``sent_at``)."""
    sent = sorted(read_output(output).column("sent_at").to_pylist())
    events = [(t, 1.0) for t in sent]
    return worst_window_ratio(events, LIMIT, sent[0], sent[-1])


def test_publish_job_on_two_executors_holds_a_shared_tenant_limit(cluster, spark_cp, admin, tmp_path: Path,
                                                                  no_install: Path):
    ok(admin.post("/admin/v2/tenants/cluster/publishRate", json={"publishThrottlingRateInMsg": LIMIT}))
    total = make_input(tmp_path / "in", {"cluster/jobs/a": 2500, "cluster/jobs/b": 2500}, files=2)
    app = f"standalone-test-{os.getpid()}"
    summary = _finish(_publish(cluster, spark_cp.url, app, tmp_path, no_install))

    ids = read_output(tmp_path / "out").column("id").to_pylist()
    assert sorted(ids) == sorted(pq.read_table(tmp_path / "in").column("id").to_pylist())
    assert summary["records_out"] == total == len(ids) and summary["tasks"] == 2
    # two executors, one limit: 5,000 records at 1,000/s take about 4 s beyond the first tokens, not 2
    assert summary["participants"] == 2, summary
    assert summary["send_window_s"] >= 3.0, summary
    assert summary["records_out"] / summary["send_window_s"] >= 0.9 * LIMIT, summary    # and used
    assert _admitted_windows(tmp_path / "out") <= 1.2 + BATCH_ROWS / LIMIT
    assert summary["limiters"]["tenant:cluster"]["throttled"] > 0
    # the executors' Python workers ran the shipped library and reported under the job's application id
    assert len({p["participantId"] for p in _participants(spark_cp.url, app, departed=True)}) >= 2


def test_an_executor_killed_mid_job_loses_no_record_and_the_survivor_keeps_the_limit(
        cluster, spark_cp, admin, tmp_path: Path, no_install: Path):
    ok(admin.post("/admin/v2/tenants/clusterkill/publishRate", json={"publishThrottlingRateInMsg": LIMIT}))
    total = make_input(tmp_path / "in", {"clusterkill/jobs/a": 6000, "clusterkill/jobs/b": 6000}, files=2)
    app = f"standalone-kill-{os.getpid()}"
    proc = _publish(cluster, spark_cp.url, app, tmp_path, no_install)
    killed: list[int] = []

    def kill_once_both_send() -> None:
        deadline = time.monotonic() + JOB_TIMEOUT_S / 2
        while time.monotonic() < deadline and proc.poll() is None:
            if len(_participants(spark_cp.url, app)) >= 2:
                time.sleep(3.0)            # both tasks well into their 6,000 records (about 12 s each)
                killed.append(cluster.kill_executor(0))
                return
            time.sleep(0.25)

    killer = threading.Thread(target=kill_once_both_send, daemon=True)
    killer.start()
    summary = _finish(proc)
    killer.join(timeout=10)
    assert killed, "the job ended before both executors sent: nothing was killed"

    # the killed task was run again (on the survivor or a new executor): every record delivered exactly once
    ids = read_output(tmp_path / "out").column("id").to_pylist()
    assert len(ids) == len(set(ids)) == total
    assert sorted(ids) == sorted(pq.read_table(tmp_path / "in").column("id").to_pylist())
    assert summary["records_out"] == total, summary
    # the limit held while one executor was gone and its grants were still out
    assert _admitted_windows(tmp_path / "out") <= 1.2 + BATCH_ROWS / LIMIT
