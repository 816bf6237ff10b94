"""The publish job on a real Spark standalone cluster (master + one worker on loopback), through the CLI.

The pip package of PySpark has no ``sbin/start-master.sh``; its own launcher ``bin/spark-class`` starts the
Master and Worker classes as subprocesses (each ``exec``s its JVM, so the process is the JVM). The job runs in
a subprocess -- a second SparkContext cannot live beside the session fixture's in this process -- and the
cluster is ended in a finalizer (SIGTERM so the worker stops its executors, then SIGKILL if need be).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from collectors.jobs import make_input, read_output
from tests.controlplane.conftest import REPO, clean_env, free_port
from tests.spark.conftest import PARTICIPANT, ok, require_java

pytestmark = [pytest.mark.spark, pytest.mark.integration]

START_TIMEOUT_S = 60.0
JOB_TIMEOUT_S = 150.0


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def _wait_for_worker(ui_port: int, procs: list[subprocess.Popen], logs: list[Path]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for proc, log in zip(procs, logs, strict=True):
            if proc.poll() is not None:
                raise AssertionError(f"{log.name} exited {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            state = httpx.get(f"http://127.0.0.1:{ui_port}/json/", timeout=2).json()
            if state.get("aliveworkers", 0) >= 1:
                return
        except (httpx.TransportError, ValueError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"no worker registered within {START_TIMEOUT_S} s: {logs[1].read_text()[-3000:]}")


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    require_java()
    from pyspark.find_spark_home import _find_spark_home

    spark_home = _find_spark_home()
    spark_class = str(Path(spark_home, "bin", "spark-class"))
    env = {**clean_env(), "SPARK_HOME": spark_home, "SPARK_LOCAL_IP": "127.0.0.1"}
    port, ui = free_port(), free_port()
    logs = [tmp_path / "master.log", tmp_path / "worker.log"]
    commands = [
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(ui)],
        [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--webui-port",
         str(free_port()), "--cores", "1", "--memory", "1g", "--work-dir", str(tmp_path / "work"),
         f"spark://127.0.0.1:{port}"],
    ]
    procs: list[subprocess.Popen] = []
    request.addfinalizer(lambda: [_end(p) for p in reversed(procs)])
    for command, log in zip(commands, logs, strict=True):
        with open(log, "wb") as out:
            procs.append(subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT))
    _wait_for_worker(ui, procs, logs)
    return f"spark://127.0.0.1:{port}"


def test_publish_job_on_a_standalone_cluster(cluster, spark_cp, admin, tmp_path: Path):
    ok(admin.post("/admin/v2/tenants/cluster/publishRate", json={"publishThrottlingRateInMsg": 1000}))
    total = make_input(tmp_path / "in", {"cluster/jobs/a": 1500, "cluster/jobs/b": 1500}, files=2)
    app = f"standalone-test-{os.getpid()}"
    env = {**clean_env(), "SPARK_LOCAL_IP": "127.0.0.1", "THROTTLESCOPE_APP_ID": app}
    proc = subprocess.run(
        [sys.executable, "-m", "collectors", "publish", "--master", cluster, "--source", "files",
         "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--partitions", "2",
         "--url", spark_cp.url, "--token", PARTICIPANT, "--app-name", app, "--json", "--batch-rows", "50",
         "--conf", "spark.executor.memory=512m", "--conf", "spark.ui.enabled=false"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-5000:]
    summary = json.loads(proc.stdout)

    ids = read_output(tmp_path / "out").column("id").to_pylist()
    assert sorted(ids) == sorted(pq.read_table(tmp_path / "in").column("id").to_pylist())
    assert summary["records_out"] == total == len(ids) and summary["tasks"] == 2
    # throttled on the cluster's executor: 3000 records at 1000/s need about 2 s beyond the initial bucket
    assert summary["send_window_s"] >= 1.5, summary
    assert summary["limiters"]["tenant:cluster"]["throttled"] > 0
    # the executor's Python workers reported to the control plane under the job's application id
    seen = httpx.get(f"{spark_cp.url}/v1/state/participants", timeout=5,
                     headers={"Authorization": f"Bearer {PARTICIPANT}"}).json()
    assert app in json.dumps(seen), seen
