"""Real servers for the dashboard tests: a control plane (as tests/controlplane does), seeded policies, and a
participant process that reports real limiter snapshots. Every process listens on 127.0.0.1 and is stopped in a
finalizer."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from streamlit import config as streamlit_config

from tests.controlplane.conftest import ADMIN, PARTICIPANT, REPO, ControlPlane, clean_env

APP = REPO / "dashboard" / "app.py"
INTERVAL = "0.5"


def seed(cp: ControlPlane) -> None:
    """Policies that throttle the stand-in participant's producers at the topic, resource-group and tenant levels."""
    c = cp.client()
    rate = {"publishThrottlingRateInMsg": 40, "publishThrottlingRateInByte": -1, "ratePeriodInSecond": 1}
    for method, path, body in (
        ("PUT", "/admin/v2/persistent/acme/web/clicks/publishRate", rate),
        ("PUT", "/admin/v2/namespaces/acme/web/publishRate", {**rate, "publishThrottlingRateInMsg": 50}),
        ("PUT", "/admin/v2/resourcegroups/rg-batch", {"publishRateInMsgs": 40, "publishRateInBytes": -1,
                                                      "dispatchRateInMsgs": -1, "dispatchRateInBytes": -1}),
        ("POST", "/admin/v2/namespaces/acme/batch/resourcegroup/rg-batch", None),
        ("PUT", "/admin/v2/tenants/beta/publishRate", {**rate, "publishThrottlingRateInMsg": 20}),
        ("POST", "/admin/v2/brokers/configuration/managedLedgerOffloadBrokerFlowPermitsPerSecond/300000", None),
        ("PUT", "/admin/v2/quotas/mutations/alice/etl-1", {"quotaPerSecond": 2, "windowSeconds": 1, "samples": 2,
                                                           "strict": True}),
        ("PUT", "/admin/v2/quotas/mutations/<default>/<default>", {"quotaPerSecond": 5}),
    ):
        r = c.request(method, path, json=body)
        assert r.status_code in (201, 204), (path, r.status_code, r.text)


class Participant:
    """``python -m tests.dashboard.participant`` against ``cp`` (or ``command`` to run another participant)."""

    def __init__(self, cp: ControlPlane, log: Path, executor: str = "1", command: list[str] | None = None,
                 **env_extra: str) -> None:
        self.log = log
        env = clean_env(THROTTLESCOPE_TOKEN=PARTICIPANT, THROTTLESCOPE_URL=cp.url, **env_extra)
        cmd = command or [sys.executable, "-m", "tests.dashboard.participant", "--url", cp.url,
                          "--executor", executor, "--interval", INTERVAL, "--max-seconds", "300"]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=out)

    def stop(self) -> None:
        stop_process(self.proc)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Ask ``proc`` to end (SIGTERM), and kill it if it has not within 10 s: a test never leaves one behind."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def wait_for(check: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def history_ready(cp: ControlPlane, points: int = 3) -> bool:
    h = httpx.get(cp.url + "/v1/state/history", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=5).json()
    throttled = [s for s in h["series"] if any((p.get("throttledPerSecond") or 0) > 0 for p in s["points"])]
    return len(throttled) >= 2 and all(len(s["points"]) >= points for s in throttled)


class Stack:
    def __init__(self, cp: ControlPlane, participants: list[Participant]) -> None:
        self.cp, self.participants = cp, participants

    def env(self) -> dict[str, str]:
        return {"THROTTLESCOPE_URL": self.cp.url, "THROTTLESCOPE_ADMIN_TOKEN": ADMIN}


def start_stack(base: Path, participants: int = 2) -> Stack:
    cp = ControlPlane(base / "data", ["--report-interval", INTERVAL]).start()
    try:
        seed(cp)
        ps = [Participant(cp, base / f"participant{i}.log", executor=str(i + 1)) for i in range(participants)]
    except Exception:
        cp.kill()
        raise
    return Stack(cp, ps)


def stop_stack(stack: Stack) -> None:
    for p in stack.participants:
        p.stop()
    stack.cp.stop()


@pytest.fixture(autouse=True)
def loopback_dashboard() -> Iterator[None]:
    """AppTest runs the app as `make run` serves it: on 127.0.0.1 (single-user mode is allowed only there)."""
    before = streamlit_config.get_option("server.address")
    streamlit_config.set_option("server.address", "127.0.0.1")
    yield
    streamlit_config.set_option("server.address", before)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One seeded control plane with two reporting participants, shared by the read-only page tests."""
    s = start_stack(tmp_path_factory.mktemp("dashboard"))
    try:
        wait_for(lambda: history_ready(s.cp), 30, "throttled history from the participants")
        yield s
    finally:
        stop_stack(s)


@pytest.fixture
def dashboard_env(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    for k, v in {**stack.env(), "THROTTLESCOPE_DATA_DIR": str(stack.cp.data_dir)}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("PROMETHEUS_URL", raising=False)
    return stack
