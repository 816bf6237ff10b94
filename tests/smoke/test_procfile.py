"""The whole Procfile, as `make run` starts it: control plane, dashboard and the demo Spark collector; and
Procfile.replicated, as `make run-replicated` does (three control-plane replicas on one address and Redis); and
both Procfile and Procfile.observability, as `make run-observability` does (Prometheus scraping the control plane).

Starts honcho on free loopback ports with a temporary data directory, waits for health, checks that the
dashboard answers, that /metrics shows throttling, that the collector's admitted rates follow the seeded limits
(collectors/demo.py), and that stopping honcho leaves no process of its group behind. On other ports and another
data directory than the defaults, so that a setting a process does not follow shows.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.controlplane.conftest import free_port

pytestmark = [pytest.mark.integration, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]


def wait_for(check, timeout_s, what):
    deadline = time.time() + timeout_s
    last = None
    while time.time() < deadline:
        try:
            result = check()
            if result:
                return result
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as e:
            last = e
        time.sleep(0.5)
    raise AssertionError(f"{what} not within {timeout_s} s (last error: {last!r})")


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.skipif(shutil.which("java") is None, reason="the demo collector runs Spark: install Java 17")
@pytest.mark.parametrize("procfile", ["Procfile", "Procfile.replicated", "Procfile.observability"])
def test_the_procfile_runs_shows_throttling_and_stops_cleanly(tmp_path, procfile):
    if procfile == "Procfile.replicated" and shutil.which("redis-server") is None:
        pytest.skip("make run-replicated needs Debian's redis-server")
    if procfile == "Procfile.observability" and shutil.which("prometheus") is None:
        pytest.skip("make run-observability needs Debian's prometheus")
    web_port, cp_port, prometheus_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("THROTTLESCOPE_", "PORT", "PROMETHEUS_"))}
    env.update(THROTTLESCOPE_PORT=str(cp_port), THROTTLESCOPE_DATA_DIR=str(tmp_path / "data"),
               THROTTLESCOPE_REDIS_PORT=str(free_port()), PROMETHEUS_PORT=str(prometheus_port))
    if procfile == "Procfile.observability":   # as the Makefile's run-observability puts them together
        (tmp_path / "Procfile.all").write_text((REPO / "Procfile").read_text() + (REPO / procfile).read_text())
        procfile = str(tmp_path / "Procfile.all")
        env.update(PROMETHEUS_URL=f"http://127.0.0.1:{prometheus_port}")
    # honcho's output goes to a file: an unread pipe fills up (64 kB of Spark's and Streamlit's logs) and then
    # blocks honcho's printer, so that it can no longer stop its processes on Ctrl-C
    log_path = tmp_path / "honcho.log"
    log = log_path.open("wb")
    honcho = subprocess.Popen([sys.executable, "-m", "honcho", "start", "-f", procfile, "-d", str(REPO), "-p",
                               str(web_port)],
                              cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{cp_port}"
    try:
        wait_for(lambda: httpx.get(f"{url}/healthz", timeout=2).status_code == 200, 60, "control plane health")
        wait_for(lambda: httpx.get(f"http://127.0.0.1:{web_port}/_stcore/health", timeout=2).text == "ok", 60,
                 "the dashboard on $PORT")
        assert "<title>" in httpx.get(f"http://127.0.0.1:{web_port}/", timeout=5).text.lower() + "<title>"
        token = (tmp_path / "data" / "participant.token").read_text().strip()
        auth = {"Authorization": f"Bearer {token}"}

        def throttled_levels():
            text = httpx.get(f"{url}/metrics", headers=auth, timeout=5).text
            levels = {m.group(1) for m in re.finditer(
                r'^throttlescope_throttled_total\{[^}]*level="(\w+)"[^}]*\} ([0-9.e+]+)$', text, re.M)
                if float(m.group(0).rsplit(" ", 1)[1]) > 0}
            return levels if {"topic", "tenant"} <= levels else None

        levels = wait_for(throttled_levels, 150, "throttling at topic and tenant level in /metrics")

        targets = {("topic", "acme/web/clicks"): 150, ("tenant", "acme"): 600, ("resource_group", "rg-etl"): 400}

        def admitted_totals():
            """Every target's admitted counter from one scrape, and the moment of that scrape."""
            before = time.monotonic()
            text = httpx.get(f"{url}/metrics", headers=auth, timeout=5).text
            moment = (before + time.monotonic()) / 2
            totals = {}
            for level, name in targets:
                pattern = (r'^throttlescope_admitted_messages_total\{kind="publish",'
                           rf'level="{level}",name="{re.escape(name)}"\}} ([0-9.e+]+)$')
                match = re.search(pattern, text, re.M)
                totals[level, name] = float(match.group(1)) if match else 0.0
            return moment, totals

        # The admitted rate over 10 s, from the counters Prometheus would scrape. A counter moves when a
        # participant's report arrives (once a second), so a plain difference over 10 s may hold 11 reports' worth:
        # the rate is read between the first and the last scrape that saw it move, which hold whole report intervals.
        samples = [admitted_totals()]
        while samples[-1][0] - samples[0][0] < 10:
            time.sleep(0.2)
            samples.append(admitted_totals())
        for target, limit in targets.items():
            moved = [i for i in range(1, len(samples)) if samples[i][1][target] != samples[i - 1][1][target]]
            assert len(moved) >= 2, (target, "its admitted counter did not move twice in 10 s")
            (t0, first), (t1, last) = samples[moved[0]], samples[moved[-1]]
            rate = (last[target] - first[target]) / (t1 - t0)
            assert 0 < rate <= limit * 1.1, (target, rate, limit)
        history = httpx.get(f"{url}/v1/state/history", headers=auth, timeout=5,
                            params={"level": "topic", "name": "acme/web/clicks"}).json()
        assert history["series"] and history["series"][0]["points"]
        assert levels >= {"topic", "tenant"}
        if "PROMETHEUS_URL" in env:   # the control plane of these settings scraped, with their token

            def scraped():
                targets = httpx.get(f"{env['PROMETHEUS_URL']}/api/v1/targets", timeout=5).json()["data"]
                return [(t["scrapeUrl"], t["health"], t["lastError"]) for t in targets["activeTargets"]]

            wait_for(lambda: scraped() == [(f"{url}/metrics", "up", "")], 30, f"Prometheus scraping {url}")
        said = log_path.read_text(errors="replace")   # every pool has run its first job by now
        assert "which has not been configured" not in said, "a scheduler pool of the demo is not in its file"
    finally:
        os.killpg(honcho.pid, signal.SIGINT)  # what Ctrl-C in `make run` does
        try:
            honcho.wait(45)
        except subprocess.TimeoutExpired:
            alive = subprocess.run(["ps", "-o", "pid,etime,args", "-g", str(honcho.pid)], capture_output=True,
                                   text=True).stdout
            os.killpg(honcho.pid, signal.SIGKILL)
            honcho.wait(10)
            pytest.fail(f"honcho did not stop within 45 s of Ctrl-C; still running:\n{alive}\n"
                        f"the end of its output:\n{log_path.read_text(errors='replace')[-3000:]}")
        finally:
            log.close()
        wait_for(lambda: not group_alive(honcho.pid), 30, "every process of the Procfile to exit")
