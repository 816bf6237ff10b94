"""Debian's prometheus against the real ``/metrics``: every PromQL expression of the Grafana dashboard and of the
rules returns data.

A real control plane (uvicorn, free loopback port, reads closed), three real participant processes throttled at
every level (tests/metrics/participant.py: greedy producers under broker, resource-group, tenant, namespace and
topic limits, dispatch under broker/topic/subscription limits, offload, a mutation quota, one stuck bucket), and
``prometheus`` started here with the shipped deploy/prometheus.yml (copied next to a data directory holding the
participant token, target and intervals rewritten to this control plane and 1 s), which loads the shipped rules.
One participant is SIGKILLed (participants lost); at the end the control plane is killed (control plane down).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from metrics.catalogue import CATALOGUE
from tests.controlplane.conftest import ADMIN, PARTICIPANT, clean_env, free_port

from . import promql
from .conftest import REPO
from .test_deploy import deploy_copy

pytestmark = pytest.mark.prometheus
CP_DOWN = "ThrottlescopeControlPlaneDown"
COUNTERS = [m.exposed for m in CATALOGUE if m.type == "counter"] + [m.name + "_count" for m in CATALOGUE
                                                                 if m.type == "histogram"]


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, why: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:g}s. {why()}")
        time.sleep(0.25)


def start_participant(url: str, pid: str, roles: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.metrics.participant", "--url", url, "--token", PARTICIPANT, "--id", pid,
             "--roles", roles, "--interval", "0.5"], cwd=REPO, env=clean_env(), stdout=out, stderr=out)


def prometheus_config(deploy: Path, cp_port: int) -> Path:
    path = deploy / "prometheus.yml"
    text = path.read_text()
    for old, new in (('"127.0.0.1:8000"', f'"127.0.0.1:{cp_port}"'), ("scrape_interval: 5s", "scrape_interval: 1s"),
                     ("evaluation_interval: 5s", "evaluation_interval: 1s")):
        assert text.count(old) == 1, f"deploy/prometheus.yml no longer has {old!r} once"
        text = text.replace(old, new)
    path.write_text(text)
    return path


def test_every_dashboard_and_rule_query_returns_data(start_cp, prometheus_bin: str, promtool: str,
                                                     tmp_path: Path) -> None:
    started = time.monotonic()
    cp = start_cp()
    admin = cp.client(ADMIN)
    assert admin.put("/admin/v2/resourcegroups/rg-gold",
                     json={"publishRateInMsgs": 80, "publishRateInBytes": 1_000_000}).status_code == 201
    assert admin.post("/admin/v2/namespaces/acme/shop/resourcegroup/rg-gold").status_code == 204
    assert admin.post("/admin/v2/persistent/acme/api/sink/publishRate",   # (participant pb reports its sink's answers)
                      json={"publishThrottlingRateInMsg": 200, "adaptive": True}).status_code == 204
    roles = {"pa": "publish,dispatch,offload,mutation,stuck", "pb": "publish,adaptive", "pc": "publish"}
    procs = {pid: start_participant(cp.url, pid, r, tmp_path / f"{pid}.log") for pid, r in roles.items()}
    prom_port, prom_log = free_port(), tmp_path / "prometheus.log"
    prom: subprocess.Popen[bytes] | None = None
    try:
        reader = cp.client(PARTICIPANT)
        wait_for("3 live participants",
                 lambda: len(reader.get("/v1/state/participants").json()["participants"]) == 3, 30,
                 lambda: " ".join((tmp_path / f"{p}.log").read_text() for p in procs))
        config = prometheus_config(deploy_copy(tmp_path, PARTICIPANT), cp.port)
        with open(prom_log, "wb") as log:
            prom = subprocess.Popen([prometheus_bin, f"--config.file={config}",
                                     f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                     f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
                                    cwd=tmp_path, stdout=log, stderr=log)
        api = httpx.Client(base_url=f"http://127.0.0.1:{prom_port}", timeout=10)
        logs = lambda: prom_log.read_text(errors="replace")[-3000:]  # noqa: E731

        def query(expr: str) -> list[dict[str, Any]]:
            r = api.get("/api/v1/query", params={"query": expr})
            assert r.status_code == 200 and r.json()["status"] == "success", f"{expr}: {r.text}"
            return r.json()["data"]["result"]

        def target_up() -> bool:
            try:
                targets = api.get("/api/v1/targets").json()["data"]["activeTargets"]
            except (httpx.TransportError, ValueError, KeyError):
                return False
            return len(targets) == 1 and targets[0]["health"] == "up"

        wait_for("the control plane target up (bearer token from the data directory)", target_up, 20, logs)
        wait_for("3 scrapes", lambda: query('count_over_time(up{job="throttlescope"}[1m]) >= 3'), 15, logs)

        procs["pc"].send_signal(signal.SIGKILL)  # lost: no goodbye, expires after 2 report intervals
        procs["pc"].wait(10)
        wait_for("the killed participant expired",
                 lambda: query('throttlescope_participants_departed_total{reason="expired"} >= 1'), 15, logs)

        rules = [r for g in api.get("/api/v1/rules").json()["data"]["groups"] for r in g["rules"]]
        assert len(rules) == len(promql.rule_exprs()), "Prometheus did not load every rule of deploy/rules"
        exprs = {e: "dashboard" for e in promql.dashboard_exprs()}
        exprs.update({r["query"]: r["name"] for r in rules if r["name"] != CP_DOWN})
        down_expr = next(r["query"] for r in rules if r["name"] == CP_DOWN)

        def empty() -> list[str]:
            return [e for e in exprs if not query(e)]
        wait_for("every dashboard and rule query returning data", lambda: not empty(), 30,
                 lambda: f"empty: {empty()}")
        counts = {e: len(query(e)) for e in exprs}

        # totals never went backwards, although a participant was killed and others came and went
        for name in COUNTERS:
            assert [r["value"][1] for r in query(f"sum(resets({name}[5m]))")] == ["0"], name
        # the real scrape passes promtool's lint
        text = reader.get("/metrics").text
        lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        assert lint.returncode == 0, lint.stdout + lint.stderr

        cp.kill()
        wait_for("ThrottlescopeControlPlaneDown's expression returning data", lambda: query(down_expr), 15, logs)
        counts[down_expr] = len(query(down_expr))
        print(f"\n{len(counts)} queries, all with data, in {time.monotonic() - started:.1f}s:")
        for e, n in counts.items():
            print(f"  {n:3d} series  [{exprs.get(e, CP_DOWN)}] {e}")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(10)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait(10)
