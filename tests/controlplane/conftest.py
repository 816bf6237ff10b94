"""A real control plane (``python -m controlplane``, uvicorn) on a free loopback port, and report builders."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from controlplane.launcher import end, env_without_settings, free_port, spawn

ADMIN = "admin-token-for-tests-0123456789"
PARTICIPANT = "participant-token-for-tests-0123"
REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 20.0


def clean_env(**extra: str) -> dict[str, str]:
    return env_without_settings(**extra)


class ControlPlane:
    """One ``python -m controlplane`` subprocess; ``start`` waits for /healthz (bounded), ``stop``/``kill`` end it."""

    def __init__(self, data_dir: Path, args: list[str] | None = None, env: dict[str, str] | None = None,
                 tokens: bool = True) -> None:
        self.data_dir = data_dir
        self.args = args or []
        self.env = clean_env(**({"THROTTLESCOPE_ADMIN_TOKEN": ADMIN, "THROTTLESCOPE_TOKEN": PARTICIPANT}
                                if tokens else {}), **(env or {}))
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.starts = 0
        self._clients: list[httpx.Client] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def stderr_path(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.stderr.{self.starts}"

    def start(self, keep_port: bool = False) -> ControlPlane:
        """Start (again) and wait for /healthz; a fresh free port unless ``keep_port`` and it had one."""
        if not (keep_port and self.port):
            self.port = free_port()
        self.starts += 1
        self.proc = spawn(self.port, self.data_dir, self.args, self.env, self.stderr_path, cwd=REPO,
                          timeout_s=START_TIMEOUT_S)
        return self

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def client(self, token: str | None = ADMIN, **headers: str) -> httpx.Client:
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        c = httpx.Client(base_url=self.url, headers=headers, timeout=10)
        self._clients.append(c)
        return c

    def _end(self, sig: int) -> None:
        for c in self._clients:
            c.close()
        self._clients.clear()
        end(self.proc, sig)
        self.proc = None

    def stop(self) -> None:
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        self._end(signal.SIGKILL)


@pytest.fixture
def start_cp(tmp_path: Path) -> Iterator[Any]:
    """Factory: ``start_cp(args=[...], env={...}, tokens=True, data_dir=None)``; every one is ended afterwards."""
    planes: list[ControlPlane] = []

    def start(args: list[str] | None = None, env: dict[str, str] | None = None, tokens: bool = True,
              data_dir: Path | None = None) -> ControlPlane:
        cp = ControlPlane(data_dir or tmp_path / f"data{len(planes)}", args, env, tokens)
        planes.append(cp)
        return cp.start()

    yield start
    for cp in planes:
        cp.kill()


@pytest.fixture(scope="module")
def shared_cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """One control plane per test module (tests must not depend on absolute versions)."""
    cp = ControlPlane(tmp_path_factory.mktemp("shared") / "data", ["--report-interval", "1"])
    try:
        yield cp.start()
    finally:
        cp.kill()


def report(pid: str = "p1", seq: int = 1, applied: int = 0, sent_at: float | None = None,
           usage: list[dict[str, Any]] | None = None, **more: Any) -> dict[str, Any]:
    """A valid report (JSON-ready) for participant ``pid``."""
    return {
        "participant": {"participant_id": pid, "application_id": "app-1", "executor_id": "1", "host": "localhost",
                        "pid": 4242},
        "seq": seq, "sent_at": time.time() if sent_at is None else sent_at, "interval_s": 1.0,
        "applied_policy_version": applied, "usage": usage or [], **more,
    }


def usage(name: str, msgs: float, demand: float | None = None, level: str = "resource_group",
          direction: str = "publish") -> dict[str, Any]:
    return {"level": level, "name": name, "direction": direction, "usage_msgs_per_s": msgs,
            "demand_msgs_per_s": msgs if demand is None else demand}
