"""controlplane.launcher: what the suite and the benchmarks start control planes with (its happy path runs in
every control-plane test); here, its failures."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from controlplane.launcher import end, env_without_settings, free_port, spawn

pytestmark = [pytest.mark.integration, pytest.mark.parallel]


def test_a_control_plane_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "cp.log"
    with pytest.raises(RuntimeError, match=r"exited with 2: .*--report-interval must be a number of seconds"):
        spawn(free_port(), tmp_path / "data", ["--report-interval", "0"], env_without_settings(), log)


def test_end_stops_it_and_is_safe_to_repeat(tmp_path: Path) -> None:
    port = free_port()
    proc = spawn(port, tmp_path / "data", env=env_without_settings(THROTTLESCOPE_OPEN_READS="1"))
    assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    end(proc, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    end(proc)   # already gone: nothing to do
    end(None)


def test_env_without_settings_drops_only_throttlescope_variables() -> None:
    env = env_without_settings({"THROTTLESCOPE_URL": "x", "PATH": "/bin"}, THROTTLESCOPE_TOKEN="t")
    assert env == {"PATH": "/bin", "THROTTLESCOPE_TOKEN": "t"}
