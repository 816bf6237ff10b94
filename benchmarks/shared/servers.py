"""Throwaway servers on loopback for the shared-limit benchmark: a control plane (restartable on the same port and
data directory) and Debian's ``redis-server`` (no persistence). Both are ended by ``close``."""

from __future__ import annotations

import secrets
import signal
import subprocess
from pathlib import Path

import httpx

from controlplane.launcher import RedisServer, end, env_without_settings, free_port, spawn

__all__ = ["ControlPlaneServer", "RedisServer", "ReplicatedControlPlane"]


class ControlPlaneServer:
    def __init__(self, data_dir: Path, interval_s: float, log_path: Path | None = None):
        self.data_dir, self.interval_s, self.log_path = data_dir, interval_s, log_path
        self.admin_token, self.token = secrets.token_hex(16), secrets.token_hex(16)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ControlPlaneServer:
        env = env_without_settings(THROTTLESCOPE_ADMIN_TOKEN=self.admin_token, THROTTLESCOPE_TOKEN=self.token)
        self.proc = spawn(self.port, self.data_dir, ["--report-interval", str(self.interval_s)], env=env,
                          log_path=self.log_path)
        return self

    def kill(self) -> None:
        end(self.proc, signal.SIGKILL)

    def close(self) -> None:
        end(self.proc)

    def admin(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.admin_token}"}, timeout=10)


class ReplicatedControlPlane:
    """``replicas`` control planes on one loopback port (``--reuse-port``), their grants and reports shared
    through a Redis of their own, one data directory: what ``make run-replicated`` starts. The interface of
    ``ControlPlaneServer`` (``url``, ``token``, ``admin``, ``close``), plus ``kill_replica`` and their
    ``redis``."""

    def __init__(self, data_dir: Path, interval_s: float, log_dir: Path, replicas: int = 3):
        self.data_dir, self.interval_s, self.log_dir, self.replicas = data_dir, interval_s, log_dir, replicas
        self.admin_token, self.token = secrets.token_hex(16), secrets.token_hex(16)
        self.port = free_port()
        self.redis = RedisServer()
        self.procs: list[subprocess.Popen[bytes] | None] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ReplicatedControlPlane:
        self.redis.start()
        env = env_without_settings(THROTTLESCOPE_ADMIN_TOKEN=self.admin_token, THROTTLESCOPE_TOKEN=self.token,
                                   THROTTLESCOPE_REDIS_URL=self.redis.url, THROTTLESCOPE_REUSE_PORT="1")
        self.procs = [spawn(self.port, self.data_dir, ["--report-interval", str(self.interval_s)], env=env,
                            log_path=self.log_dir / f"replica{i}.log") for i in range(self.replicas)]
        return self

    def kill_replica(self, i: int = 0) -> None:
        """SIGKILL replica ``i`` (the others go on serving the address)."""
        end(self.procs[i], signal.SIGKILL)
        self.procs[i] = None

    def close(self) -> None:
        for proc in self.procs:
            end(proc)
        self.redis.close()

    def admin(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.admin_token}"}, timeout=10)
