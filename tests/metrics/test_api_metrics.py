"""``GET /metrics`` on a real control plane: auth, format, report latency, departures, the topic-label switch,
and ``promtool check metrics`` on a real scrape."""

from __future__ import annotations

import subprocess
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from metrics.catalogue import CATALOGUE
from tests.controlplane.conftest import ADMIN, PARTICIPANT, ControlPlane

from .conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.parallel]


def body(pid: str, seq: int, **more) -> dict:
    return {"participant": {"participant_id": pid, "application_id": "app", "executor_id": "1", "host": "h",
                            "pid": 7},
            "seq": seq, "sent_at": time.time(), "interval_s": 1.0, **more}


def scrape(cp: ControlPlane, token: str | None = PARTICIPANT) -> dict[tuple[str, tuple], float]:
    r = cp.client(token).get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(r.text) for s in f.samples}


def test_metrics_needs_a_token_unless_reads_are_open(start_cp) -> None:
    cp = start_cp()
    r = cp.client(None).get("/metrics")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert cp.client("not-a-token-0123456789").get("/metrics").status_code == 403
    assert cp.client(PARTICIPANT).get("/metrics").status_code == 200
    assert cp.client(ADMIN).get("/metrics").status_code == 200
    op = cp.client(ADMIN).get("/openapi.json").json()["paths"]["/metrics"]["get"]
    assert op["x-required-role"] == "reader"
    opened = start_cp(["--open-reads"])
    assert opened.client(None).get("/metrics").status_code == 200


def test_reports_are_rendered_timed_and_their_totals_kept_after_goodbye(start_cp) -> None:
    cp = start_cp()
    part = cp.client(PARTICIPANT)
    assert cp.client(None).get("/healthz").json()["scrapeCpuSeconds"] is None   # nothing rendered yet
    before = scrape(cp)
    assert 0 <= cp.client(None).get("/healthz").json()["scrapeCpuSeconds"] < 5   # the render's CPU
    assert before["throttlescope_report_latency_seconds_count", ()] == 0
    assert {name for name, _ in before} <= {sample for m in CATALOGUE for sample in m.samples}
    counters = [{"level": "topic", "name": "acme/web/clicks", "kind": "publish", "throttled_count": 4,
                 "throttle_time_seconds_total": 1.5, "admitted_msgs_total": 10, "admitted_bytes_total": 100}]
    buckets = [{"level": "topic", "name": "acme/web/clicks", "kind": "publish",
                "msgs": {"tokens": -2, "rate": 5, "capacity": 5}}]
    assert part.post("/v1/report", json=body("w1", 1, counters=counters, buckets=buckets)).status_code == 200
    assert part.post("/v1/report", json=body("w2", 1, counters=counters)).status_code == 200
    labels = (("kind", "publish"), ("level", "topic"), ("name", "acme/web/clicks"))
    during = scrape(cp)
    assert during["throttlescope_report_latency_seconds_count", ()] == 2
    assert during["throttlescope_throttled_total", labels] == 8
    assert during["throttlescope_bucket_tokens", (("dimension", "msgs"), *labels)] == -2
    assert during["throttlescope_participants", ()] == 2
    assert part.post("/v1/goodbye", json={"participant_id": "w1"}).status_code == 204
    after = scrape(cp)
    assert after["throttlescope_throttled_total", labels] == 8
    assert ("throttlescope_bucket_tokens", (("dimension", "msgs"), *labels)) not in after
    assert after["throttlescope_participants_departed_total", (("reason", "goodbye"),)] == 1
    assert after["throttlescope_participants", ()] == 1


def test_topic_labels_switched_off(start_cp) -> None:
    cp = start_cp(env={"THROTTLESCOPE_METRICS_TOPIC_LABELS": "0"})
    counters = [{"level": "topic", "name": f"acme/web/t{i}", "kind": "publish", "throttled_count": i}
                for i in range(5)]
    assert cp.client(PARTICIPANT).post("/v1/report", json=body("w", 1, counters=counters)).status_code == 200
    got = {k: v for k, v in scrape(cp).items() if k[0] == "throttlescope_throttled_total"}
    assert got == {("throttlescope_throttled_total", (("kind", "publish"), ("level", "topic"), ("name", "*"))): 10}


def test_a_bad_topic_labels_setting_stops_the_start(start_cp) -> None:
    with pytest.raises(RuntimeError, match="THROTTLESCOPE_METRICS_TOPIC_LABELS must be one of 1/true/yes/on or 0/false/no/off, got 'sometimes'"):
        start_cp(env={"THROTTLESCOPE_METRICS_TOPIC_LABELS": "sometimes"})


@pytest.mark.prometheus
def test_promtool_check_metrics_passes_on_a_real_scrape(start_cp, promtool: str) -> None:
    cp = start_cp()
    part = cp.client(PARTICIPANT)
    full = body("w", 1, buckets=[{"level": "broker", "name": "broker", "kind": "publish",
                                  "msgs": {"tokens": 1, "rate": 5, "capacity": 5},
                                  "bytes": {"tokens": 10, "rate": 50, "capacity": 50}}],
                counters=[{"level": "broker", "name": "broker", "kind": "publish", "throttled_count": 1}],
                queues=[{"level": "broker", "name": "broker", "length": 1,
                         "entries": [{"producer": "p", "waiting_s": 0.1}]}],
                dispatch_throttled={"topic": 1}, offload={"limit_bytes_per_s": 10, "limited_total": 1},
                mutation_quotas=[{"user": "u", "client_id": "c", "tokens": -1, "throttle_time_s": 0.1}])
    assert part.post("/v1/report", json=full).status_code == 200
    text = part.get("/metrics").text
    out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60,
                         cwd=REPO)
    assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), out.stdout + out.stderr
