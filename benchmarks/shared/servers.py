"""Throwaway servers on loopback for the shared-limit benchmark: a control plane (restartable on the same port and
data directory) and Debian's ``redis-server`` (no persistence). Both are ended by ``close``."""

from __future__ import annotations

import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from controlplane.launcher import end, env_without_settings, free_port, spawn

__all__ = ["ControlPlaneServer", "RedisServer"]


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


class RedisServer:
    def __init__(self) -> None:
        self.binary = shutil.which("redis-server")
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        if self.binary is None:
            raise RuntimeError("redis-server was not found (Debian: apt-get install redis-server)")
        self.proc = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        self.close()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout_s:g} s")

    def close(self) -> None:
        end(self.proc)
