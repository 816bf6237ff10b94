"""Real control plane (tests/controlplane's helper, plus restart on the same port) and real participant processes.

``Run`` starts participant processes (``tests/collectors/participant_proc.py``, one OS process each) against a
control plane and reads back what they wrote: per process, (wall time, messages admitted so far, local rate of
the watched limiter). ``rate(i, t0, t1)`` / ``aggregate(t0, t1)`` are admitted msgs/s over a window,
interpolated between samples (50 ms apart), so processes need not sample in step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.controlplane.conftest import ADMIN, PARTICIPANT, REPO, ControlPlane, clean_env

INTERVAL_S = 0.25
MAX_ROUNDS = 5

__all__ = ["ADMIN", "PARTICIPANT", "INTERVAL_S", "MAX_ROUNDS", "RestartableControlPlane", "Run", "Samples"]


class RestartableControlPlane(ControlPlane):
    """``start()`` picks a free loopback port the first time and keeps it on every restart (same data dir)."""

    def start(self) -> RestartableControlPlane:  # type: ignore[override]
        return super().start(keep_port=True)  # type: ignore[return-value]


@pytest.fixture
def cp(tmp_path: Path) -> Iterator[RestartableControlPlane]:
    plane = RestartableControlPlane(tmp_path / "cpdata", ["--report-interval", str(INTERVAL_S)])
    plane.start()
    try:
        yield plane
    finally:
        plane.kill()


class Samples:
    def __init__(self, path: Path):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        self.head = next(r for r in rows if r.get("event") == "start")
        self.ended = any(r.get("event") == "end" for r in rows)
        self.rows = [r for r in rows if "t" in r]
        assert self.rows, f"{path} has no samples"

    @property
    def started(self) -> float:
        """When this process started sending (its first sample)."""
        return self.rows[0]["t"]

    @property
    def participant_id(self) -> str:
        return self.head["participant_id"]

    def count_at(self, t: float, key: str = "n") -> float:
        """The running total ``key`` (messages admitted, or seconds waited in acquire) at ``t``, interpolated."""
        rows = self.rows
        if t <= rows[0]["t"]:
            return rows[0][key]
        for prev, cur in zip(rows, rows[1:], strict=False):
            if cur["t"] >= t:
                span = cur["t"] - prev["t"]
                return prev[key] + ((t - prev["t"]) / span if span > 0 else 1.0) * (cur[key] - prev[key])
        return rows[-1][key]

    def rate_between(self, t0: float, t1: float) -> float:
        return (self.count_at(t1) - self.count_at(t0)) / (t1 - t0)

    def waited_between(self, t0: float, t1: float) -> float:
        """The share of [t0, t1] this process spent waiting in ``acquire`` (held by the limiter)."""
        return (self.count_at(t1, "waited_s") - self.count_at(t0, "waited_s")) / (t1 - t0)

    def local_rate_at(self, t: float) -> float:
        before = [r for r in self.rows if r["t"] <= t]
        return (before[-1] if before else self.rows[0])["rate"]

    def first_time(self, predicate, after: float) -> float | None:
        return next((r["t"] for r in self.rows if r["t"] >= after and predicate(r)), None)


class Run:
    """Participant processes started together (``start_at``), each with its own demand phases."""

    def __init__(self, cp: ControlPlane, tmp_path: Path, lead_s: float = 1.5, interval_s: float = INTERVAL_S):
        self.cp, self.dir = cp, tmp_path
        self.env = clean_env(THROTTLESCOPE_URL=cp.url, THROTTLESCOPE_TOKEN=PARTICIPANT,
                             THROTTLESCOPE_REPORT_INTERVAL_S=str(interval_s),
                             THROTTLESCOPE_REPORT_MAX_ROUNDS=str(MAX_ROUNDS), THROTTLESCOPE_APP_ID="it")
        self.start_at = time.time() + lead_s
        self.procs: list[subprocess.Popen[bytes]] = []
        self.outs: list[Path] = []

    def add(self, topic: str, phases: list[list[float]], duration_s: float, watch: list[str] | None = None,
            hard_exit: bool = False, start_at: float | None = None) -> int:
        """Start one participant process; it sends from ``start_at`` (default: the run's) for ``duration_s``."""
        i = len(self.procs)
        out = self.dir / f"p{i}.jsonl"
        spec: dict[str, Any] = {"topic": topic, "phases": phases, "duration": duration_s, "out": str(out),
                                "start_at": start_at or self.start_at, "watch": watch, "hard_exit": hard_exit}
        err = open(self.dir / f"p{i}.stderr", "wb")  # noqa: SIM115 - closed with the process
        self.procs.append(subprocess.Popen([sys.executable, "-m", "tests.collectors.participant_proc",
                                            json.dumps(spec)], cwd=REPO, env=self.env, stdout=err, stderr=err))
        err.close()
        self.outs.append(out)
        return i

    def wait(self, timeout_s: float = 60.0) -> list[Samples]:
        deadline = time.monotonic() + timeout_s
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for i, p in enumerate(self.procs):
            assert p.returncode == 0, f"participant {i} exited {p.returncode}: {self.stderr(i)}"
        return [Samples(out) for out in self.outs]

    def head(self, i: int, timeout_s: float = 15.0) -> dict[str, Any]:
        """The start line process ``i`` wrote (its participant id), waiting for it while the process runs."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.outs[i].exists():
                for line in self.outs[i].read_text().splitlines():
                    if '"event": "start"' in line:
                        return json.loads(line)
            if self.procs[i].poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"participant {i} wrote no start line: {self.stderr(i)}")

    def stderr(self, i: int) -> str:
        return (self.dir / f"p{i}.stderr").read_text(errors="replace")[-3000:]

    def sleep_until(self, offset_s: float) -> None:
        time.sleep(max(0.0, self.start_at + offset_s - time.time()))

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def at(self, offset_s: float) -> float:
        return self.start_at + offset_s


@pytest.fixture
def run_factory(tmp_path: Path) -> Iterator[Any]:
    runs: list[Run] = []

    def make(cp: ControlPlane, lead_s: float = 1.5) -> Run:
        run = Run(cp, tmp_path, lead_s)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.kill_all()


def aggregate(samples: list[Samples], t0: float, t1: float) -> float:
    return sum(s.rate_between(t0, t1) for s in samples)


def admin(cp: ControlPlane) -> httpx.Client:
    return cp.client(ADMIN)


def env_without_throttlescope() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("THROTTLESCOPE_")}
