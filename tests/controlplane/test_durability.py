"""Restarts keep everything (SIGKILL included), concurrent writers lose nothing, tokens, start-up errors."""

from __future__ import annotations

import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from .conftest import ADMIN, REPO, ControlPlane, clean_env, free_port

pytestmark = [pytest.mark.integration, pytest.mark.parallel]
V2 = "/admin/v2"


def populate(cp: ControlPlane, token: str = ADMIN) -> None:
    a = cp.client(token)
    for r in (
        a.put(f"{V2}/resourcegroups/rg1", json={"publishRateInMsgs": 100, "dispatchRateInBytes": 1e6}),
        a.post(f"{V2}/namespaces/acme/web/resourcegroup/rg1"),
        a.post(f"{V2}/tenants/acme/resourcegroup/rg1"),
        a.post(f"{V2}/tenants/acme/publishRate", json={"publishThrottlingRateInMsg": 500}),
        a.post(f"{V2}/namespaces/acme/web/dispatchRate", json={"dispatchThrottlingRateInMsg": 50}),
        a.post(f"{V2}/persistent/acme/web/clicks/subscriptionDispatchRate", json={"dispatchThrottlingRateInMsg": 5}),
        a.post(f"{V2}/brokers/configuration/brokerPublishThrottlingMaxByteRate/123456"),
        a.put(f"{V2}/quotas/mutations/%3Cdefault%3E/%3Cdefault%3E", json={"quotaPerSecond": 3}),
    ):
        assert r.status_code in (201, 204), r.text


def snapshot(cp: ControlPlane, token: str = ADMIN) -> dict[str, Any]:
    c = cp.client(token)
    return {"policies": c.get("/v1/policies").json(), "audit": c.get(f"{V2}/audit").json(),
            "effective": c.get(f"{V2}/persistent/acme/web/clicks/effectiveLimits").json()}


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_restart_keeps_everything(start_cp: Any, how: str) -> None:
    cp: ControlPlane = start_cp()
    populate(cp)
    before = snapshot(cp)
    assert before["policies"]["version"] == 9 and before["audit"]["total"] == 8
    getattr(cp, how)()          # SIGTERM, or SIGKILL right after the last acknowledged write
    cp.start()
    assert snapshot(cp) == before
    r = cp.client().delete(f"{V2}/tenants/acme/resourcegroup")
    assert r.status_code == 204 and r.headers["X-Policy-Version"] == "10"


def test_generated_tokens_printed_once_mode_0600_and_kept(start_cp: Any, tmp_path: Path) -> None:
    cp: ControlPlane = start_cp(tokens=False, data_dir=tmp_path / "gen")
    admin_file, part_file = cp.data_dir / "admin.token", cp.data_dir / "participant.token"
    admin, participant = admin_file.read_text().strip(), part_file.read_text().strip()
    for f in (admin_file, part_file):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
    first = cp.stderr()
    assert first.count(admin) == 1 and first.count(participant) == 1
    populate(cp, admin)
    assert cp.client(participant).put(f"{V2}/resourcegroups/x", json={}).status_code == 403
    cp.kill()
    cp.start()
    assert admin not in cp.stderr() and participant not in cp.stderr()
    assert cp.client(admin).get(f"{V2}/resourcegroups").json() == ["rg1"]
    assert cp.client(participant).get(f"{V2}/resourcegroups").status_code == 200


def test_concurrent_writers_lose_no_update(start_cp: Any) -> None:
    cp: ControlPlane = start_cp()
    threads_n, per_thread = 8, 25
    acked: list[tuple[str, int, int]] = []     # (key, value, version)
    failures: list[str] = []
    lock = threading.Lock()

    def writer(t: int) -> None:
        c = cp.client()
        for i in range(per_thread):
            key = "shared" if i % 2 else f"t{t}-{i}"
            value = t * 1000 + i
            r = c.put(f"{V2}/resourcegroups/{key}", json={"publishRateInMsgs": value})
            with lock:
                if r.status_code in (201, 204):
                    acked.append((key, value, int(r.headers["X-Policy-Version"])))
                else:
                    failures.append(f"{r.status_code} {r.text}")

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not failures and len(acked) == threads_n * per_thread
    assert sorted(v for _, _, v in acked) == list(range(2, 2 + threads_n * per_thread))  # one version each
    admin = cp.client()
    assert admin.get("/healthz").json()["policyVersion"] == 1 + threads_n * per_thread
    for key, value, _ in acked:
        if key != "shared":
            assert admin.get(f"{V2}/resourcegroups/{key}").json()["publishRateInMsgs"] == value
    last_shared = max((v, value) for key, value, v in acked if key == "shared")[1]
    assert admin.get(f"{V2}/resourcegroups/shared").json()["publishRateInMsgs"] == last_shared
    assert admin.get(f"{V2}/audit", params={"limit": 1}).json()["total"] == threads_n * per_thread


@pytest.mark.parametrize(("args", "env", "needle"), [
    (["--port", "99999"], {}, "--port must be a port number 1..65535"),
    (["--report-interval", "-1"], {}, "--report-interval must be a number of seconds"),
    ([], {"THROTTLESCOPE_PORT": "abc"}, "THROTTLESCOPE_PORT must be an integer"),
    ([], {"THROTTLESCOPE_ADMIN_TOKEN": "short"}, "THROTTLESCOPE_ADMIN_TOKEN must be 16"),
])
def test_bad_settings_exit_non_zero_with_a_message(tmp_path: Path, args: list[str], env: dict[str, str],
                                                   needle: str) -> None:
    argv = [sys.executable, "-m", "controlplane", "--data-dir", str(tmp_path / "d")]
    if "--port" not in args:
        argv += ["--port", str(free_port())] if "THROTTLESCOPE_PORT" not in env else []
    done = subprocess.run([*argv, *args], cwd=REPO, env=clean_env(**env), capture_output=True, text=True,
                          timeout=30)
    assert done.returncode != 0
    assert needle in done.stderr
