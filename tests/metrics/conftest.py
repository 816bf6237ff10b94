"""Fixtures for the metrics tests: a collector over a real LiveState on a manual clock, report builders, a real
control plane (tests/controlplane's ControlPlane), and the Debian prometheus/promtool binaries (skipped when
missing, with the way to install them)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from controlplane.grants import GrantBook
from controlplane.state import LiveState
from metrics.collector import ThrottlescopeCollector
from protocol import PolicySet, Report
from tests.controlplane.conftest import ControlPlane

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
INSTALL_HINT = "apt-get install prometheus (Debian's package; scripts/system-deps.sh installs it for make test)"


@dataclass
class Env:
    """A collector registered on a fresh registry, over a LiveState whose clock the test moves (and a grant book,
    when given)."""

    now: list[float]
    live: LiveState
    collector: ThrottlescopeCollector
    registry: CollectorRegistry
    policies: list[PolicySet] = field(default_factory=list)

    def send(self, report: Report) -> None:
        accepted, reason = self.live.ingest(report)
        assert accepted, reason

    def value(self, metric: str, /, **labels: str) -> float | None:
        return self.registry.get_sample_value(metric, labels)

    def advance(self, seconds: float) -> None:
        self.now[0] += seconds


@pytest.fixture
def make_env() -> Callable[..., Env]:
    def make(topic_labels: bool = True, policies: PolicySet | None = None, grants: GrantBook | None = None) -> Env:
        now = [1_000_000.0]
        live = LiveState(1.0, clock=lambda: now[0])
        holder = [policies or PolicySet(version=1)]
        collector = ThrottlescopeCollector(live, lambda: holder[0], topic_labels=topic_labels, grants=grants)
        live.listener = collector
        registry = CollectorRegistry(auto_describe=True)
        registry.register(collector)
        return Env(now, live, collector, registry, holder)
    return make


def report(env: Env, pid: str, seq: int, **more: Any) -> Report:
    """A valid report from ``pid`` sent now (on the env's clock)."""
    return Report.model_validate({
        "participant": {"participant_id": pid, "application_id": "app", "executor_id": pid, "host": "h", "pid": 1},
        "seq": seq, "sent_at": env.now[0], "interval_s": 1.0, **more})


def counters(level: str = "topic", name: str = "acme/web/clicks", kind: str = "publish", throttled: int = 0,
             seconds: float = 0.0, msgs: float = 0.0, bytes_: float = 0.0) -> dict[str, Any]:
    return {"level": level, "name": name, "kind": kind, "throttled_count": throttled,
            "throttle_time_seconds_total": seconds, "admitted_msgs_total": msgs, "admitted_bytes_total": bytes_}


def bucket(level: str = "topic", name: str = "acme/web/clicks", kind: str = "publish", tokens: float = 0.0,
           rate: float = 10.0, capacity: float = 10.0, period_s: float = 1.0, bytes_: dict | None = None) -> dict:
    return {"level": level, "name": name, "kind": kind,
            "msgs": {"tokens": tokens, "rate": rate, "capacity": capacity, "period_s": period_s}, "bytes": bytes_}


@pytest.fixture
def start_cp(tmp_path: Path) -> Iterator[Callable[..., ControlPlane]]:
    """Factory: a real control plane (uvicorn on a free loopback port); every one is killed afterwards."""
    planes: list[ControlPlane] = []

    def start(args: list[str] | None = None, env: dict[str, str] | None = None) -> ControlPlane:
        cp = ControlPlane(tmp_path / f"data{len(planes)}", ["--report-interval", "1", *(args or [])], env)
        planes.append(cp)
        return cp.start()

    yield start
    for cp in planes:
        cp.kill()


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not found: {INSTALL_HINT}")
    return path


@pytest.fixture
def promtool() -> str:
    return _binary("promtool")


@pytest.fixture
def prometheus_bin() -> str:
    return _binary("prometheus")
