"""A Spark standalone cluster on loopback -- one master, ``workers`` workers -- for the tests and benchmarks that
must run on real executors (separate JVMs, each with its own Python workers), not in local mode.

The pip package of PySpark has no ``sbin/start-master.sh``; its own launcher ``bin/spark-class`` starts the
Master and Worker classes as subprocesses (it ``exec``s the JVM, so each process is the JVM). Each worker offers
``cores`` cores, so an application asking for ``cores * workers`` cores gets one executor per worker. Executors
are children of their worker's JVM (``CoarseGrainedExecutorBackend``): ``kill_executor`` finds one there and
SIGKILLs it, what a lost node looks like to Spark (the master then starts a new executor on that worker).

``close`` ends the workers (SIGTERM, so each stops its executors) and then the master, SIGKILL if need be.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx

from controlplane.launcher import free_port

__all__ = ["StandaloneCluster", "ClusterError"]

START_TIMEOUT_S = 90.0
_EXECUTOR_CLASS = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"


class ClusterError(RuntimeError):
    """The cluster did not start, or an executor to kill was not found; the message holds the logs' tails."""


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (Linux: field 4 of /proc/<child>/stat)."""
    out: list[int] = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # the command name (field 2) may hold spaces and parentheses: read after its closing one
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _end(proc: subprocess.Popen[bytes], timeout_s: float = 15.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout_s)


class StandaloneCluster:
    def __init__(self, work_dir: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                 env: dict[str, str] | None = None):
        if workers < 1 or cores < 1:
            raise ValueError(f"a cluster needs at least one worker of one core (got {workers} x {cores})")
        self.work_dir, self.workers, self.cores, self.memory = Path(work_dir), workers, cores, memory
        self.env = env
        self.port, self.ui_port = free_port(), free_port()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def total_cores(self) -> int:
        return self.workers * self.cores

    def start(self) -> StandaloneCluster:
        from pyspark.find_spark_home import _find_spark_home

        spark_home = _find_spark_home()
        spark_class = str(Path(spark_home, "bin", "spark-class"))
        env = {**(self.env if self.env is not None else os.environ), "SPARK_HOME": spark_home,
               "SPARK_LOCAL_IP": "127.0.0.1"}
        self.work_dir.mkdir(parents=True, exist_ok=True)
        commands = [("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                "--port", str(self.port), "--webui-port", str(self.ui_port)])]
        commands += [(f"worker-{i}", [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                      "--webui-port", str(free_port()), "--cores", str(self.cores), "--memory",
                                      self.memory, "--work-dir", str(self.work_dir / f"worker-{i}"),
                                      self.master_url])
                     for i in range(self.workers)]
        try:
            for name, command in commands:
                log = self.work_dir / f"{name}.log"
                with open(log, "wb") as out:
                    self.procs.append(subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT))
                self.logs.append(log)
            self._wait_for_workers()
        except BaseException:
            self.close()
            raise
        return self

    def _tails(self) -> str:
        return "\n".join(f"--- {log.name}:\n{log.read_text(errors='replace')[-2000:]}" for log in self.logs)

    def state(self) -> dict:
        """The master's own view (its UI's ``/json/``): workers, running applications, cores in use."""
        return httpx.get(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5).json()

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for proc, log in zip(self.procs, self.logs, strict=True):
                if proc.poll() is not None:
                    raise ClusterError(f"{log.stem} exited {proc.returncode}\n{self._tails()}")
            try:
                if self.state().get("aliveworkers", 0) >= self.workers:
                    return
            except (httpx.TransportError, ValueError):
                pass
            time.sleep(0.5)
        raise ClusterError(f"{self.workers} worker(s) did not register within {START_TIMEOUT_S:g} s\n{self._tails()}")

    def executors(self) -> list[tuple[int, int]]:
        """``(worker index, executor pid)`` of every running executor JVM."""
        return [(i, pid) for i, worker in enumerate(self.procs[1:]) for pid in _children(worker.pid)
                if _EXECUTOR_CLASS in _cmdline(pid)]

    def kill_executor(self, worker: int = 0) -> int:
        """SIGKILL the executor of worker ``worker``; returns its pid."""
        pids = [pid for i, pid in self.executors() if i == worker]
        if not pids:
            raise ClusterError(f"worker {worker} runs no executor (running: {self.executors()})")
        os.kill(pids[0], signal.SIGKILL)
        return pids[0]

    def close(self) -> None:
        for proc in reversed(self.procs):
            _end(proc)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
