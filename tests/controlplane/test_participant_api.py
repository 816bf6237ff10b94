"""Participants against a real control plane: reports, policies on version change, usage map, state, expiry."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from collectors.client import encoded
from protocol import ReportResponse

from .conftest import ADMIN, PARTICIPANT, ControlPlane, report, usage

pytestmark = [pytest.mark.integration, pytest.mark.parallel]
RG_KEY = "resource_group:publish:rg-p"


@pytest.fixture(scope="module")
def cp(shared_cp: ControlPlane) -> ControlPlane:
    admin = shared_cp.client(ADMIN)
    assert admin.put("/admin/v2/resourcegroups/rg-p", json={"publishRateInMsgs": 100}).status_code == 201
    assert admin.post("/admin/v2/namespaces/acme/web/resourcegroup/rg-p").status_code == 204
    return shared_cp


def send(c: httpx.Client, body: dict[str, Any]) -> ReportResponse:
    r = c.post("/v1/report", json=body)
    assert r.status_code == 200, r.text
    return ReportResponse.model_validate(r.json())


def test_policies_only_when_the_version_moved(cp: ControlPlane) -> None:
    part, admin = cp.client(PARTICIPANT), cp.client(ADMIN)
    first = send(part, report("pv", seq=1, applied=0))
    assert first.accepted and first.policies is not None and first.reportIntervalSeconds == 1.0
    assert first.nextReportInSeconds is not None and 0.5 <= first.nextReportInSeconds <= 1.5   # (its place in it)
    assert first.policies.version == first.policyVersion
    assert first.policies.resourceGroups["rg-p"].publishRateInMsgs == 100
    assert first.policies.namespaceResourceGroups["acme/web"] == "rg-p"
    assert first.policies.brokerSettings["dispatchThrottlingOnNonBacklogConsumerEnabled"] is True
    second = send(part, report("pv", seq=2, applied=first.policyVersion))
    assert second.policies is None and second.policyVersion == first.policyVersion
    admin.post("/admin/v2/persistent/acme/web/clicks/publishRate", json={"publishThrottlingRateInMsg": 9})
    third = send(part, report("pv", seq=3, applied=first.policyVersion))
    assert third.policyVersion == first.policyVersion + 1 and third.policies is not None
    assert third.policies.topics["acme/web/clicks"].publishRate is not None
    assert third.policies.topics["acme/web/clicks"].publishRate.publishThrottlingRateInMsg == 9
    assert send(part, report("pv", seq=4, applied=third.policyVersion)).policies is None
    assert part.get("/v1/policies").json() == third.policies.model_dump(mode="json")
    assert part.post("/v1/goodbye", json={"participant_id": "pv"}).status_code == 204


def test_usage_map_across_participants_and_allocation(cp: ControlPlane) -> None:
    part = cp.client(PARTICIPANT)
    send(part, report("ua", usage=[usage("rg-p", 70, 70), usage("only-a", 1)]))
    resp = send(part, report("ub", usage=[usage("rg-p", 30, 70)]))
    assert set(resp.usage) == {RG_KEY}
    assert resp.usage[RG_KEY]["ua"].usage_msgs_per_s == 70 and resp.usage[RG_KEY]["ub"].demand_msgs_per_s == 70
    groups = {g["name"]: g for g in part.get("/v1/state/resourcegroups").json()["resourceGroups"]}
    pub = groups["rg-p"]["publish"]
    assert pub["quotaMsgsPerSecond"] == 100 and groups["rg-p"]["namespaces"] == ["acme/web"]
    assert pub["participants"]["ua"]["allocation_msgs_per_s"] == pytest.approx(50)
    assert pub["participants"]["ub"]["allocation_msgs_per_s"] == pytest.approx(50)
    for pid in ("ua", "ub"):
        assert part.post("/v1/goodbye", json={"participant_id": pid}).status_code == 204
    assert part.post("/v1/goodbye", json={"participant_id": "ua"}).status_code == 404
    assert send(part, report("uc", usage=[usage("rg-p", 1)])).usage[RG_KEY].keys() == {"uc"}
    part.post("/v1/goodbye", json={"participant_id": "uc"})



def test_without_the_usage_map_the_answer_names_only_what_the_control_plane_lacks(cp: ControlPlane) -> None:
    part = cp.client(PARTICIPANT)
    other = "resource_group:publish:only-m"
    first = send(part, report("um", usage=[usage("rg-p", 20)], usage_unchanged=[other], usage_map=False))
    assert first.usage == {} and first.usageMissing == [other]      # nothing held for the unchanged key yet
    full = send(part, report("um", seq=2, usage=[usage("only-m", 5)], usage_unchanged=[RG_KEY], usage_map=False))
    assert full.usage == {} and full.usageMissing == []
    mapped = send(part, report("um", seq=3, usage_unchanged=[RG_KEY, other]))   # the map, as before, by default
    assert mapped.usage[RG_KEY]["um"].usage_msgs_per_s == 20 and mapped.usage[other]["um"].usage_msgs_per_s == 5
    assert part.post("/v1/goodbye", json={"participant_id": "um"}).status_code == 204


@pytest.mark.parametrize("body", [
    {"seq": 1},
    report("bad", extra_field=1),
    report("bad", usage_map="no"),                      # a JSON boolean, not a word that reads like one
    report("bad", usage=[usage("rg-p", -5)]),
    report("bad", usage=[usage("rg-p", 1), usage("rg-p", 2)]),
    report("bad", buckets=[{"level": "topic", "name": "x", "kind": "publish", "msgs": {"tokens": "many"}}]),
])
def test_malformed_report_is_422_and_stores_nothing(cp: ControlPlane, body: dict[str, Any]) -> None:
    part = cp.client(PARTICIPANT)
    before = part.get("/v1/state/participants").json()["participants"]
    r = part.post("/v1/report", json=body)
    assert r.status_code == 422 and r.json()["reason"]
    after = part.get("/v1/state/participants").json()["participants"]
    assert [p["participantId"] for p in after] == [p["participantId"] for p in before]
    assert "bad" not in {p["participantId"] for p in after}


def test_an_unknown_field_in_a_report_is_named_with_the_fields_allowed_there(cp: ControlPlane) -> None:
    part = cp.client(PARTICIPANT)
    body = report("uf", usage=[{**usage("rg-p", 1), "usage_rows_per_s": 3}])
    r = part.post("/v1/report", json=body)
    assert r.status_code == 422
    assert r.json()["reason"] == ("unknown field 'usage_rows_per_s' in usage.0; allowed: level, name, direction, "
                                  "usage_msgs_per_s, usage_bytes_per_s, demand_msgs_per_s, demand_bytes_per_s")


def test_stale_and_repeated_reports_are_ignored(cp: ControlPlane) -> None:
    part = cp.client(PARTICIPANT)
    resp = send(part, report("st", sent_at=time.time() - 10))
    assert not resp.accepted and "2 report intervals" in (resp.reason or "")
    assert "st" not in {p["participantId"] for p in part.get("/v1/state/participants").json()["participants"]}
    assert send(part, report("st", seq=5)).accepted
    resp = send(part, report("st", seq=5))
    assert not resp.accepted and "seq" in (resp.reason or "")
    part.post("/v1/goodbye", json={"participant_id": "st"})


def test_state_endpoints_show_buckets_queues_and_history(cp: ControlPlane) -> None:
    part = cp.client(PARTICIPANT)
    extras = {
        "buckets": [{"level": "topic", "name": "acme/web/clicks", "kind": "publish",
                     "msgs": {"tokens": 4.5, "rate": 10, "capacity": 10, "period_s": 1}}],
        "queues": [{"level": "topic", "name": "acme/web/clicks", "length": 3,
                    "entries": [{"producer": "task-1", "waiting_s": 0.3}, {"producer": "task-2", "waiting_s": 0.1}]}],
        "dispatch_throttled": {"subscription": 2},
        "mutation_quotas": [{"user": "u", "client_id": "c", "tokens": -2, "rate": 3, "throttle_time_s": 0.2}],
    }

    def counters(n: float) -> list[dict[str, Any]]:
        return [{"level": "topic", "name": "acme/web/clicks", "kind": "publish", "admitted_msgs_total": n,
                 "throttled_count": 1, "throttle_time_seconds_total": 0.25}]

    t0 = time.time()
    send(part, report("sv", seq=1, applied=0, sent_at=t0, counters=counters(100), **extras))
    send(part, report("sv", seq=2, applied=0, sent_at=t0 + 0.5, counters=counters(150), **extras))
    people = {p["participantId"]: p for p in part.get("/v1/state/participants").json()["participants"]}
    sv = people["sv"]
    assert sv["alive"] and sv["upToDate"] is False and sv["seq"] == 2 and sv["reports"] == 2
    assert sv["dispatchThrottled"] == {"subscription": 2} and sv["mutationQuotas"][0]["tokens"] == -2
    buckets = part.get("/v1/state/buckets").json()
    mine = [b for b in buckets["buckets"] if b["participantId"] == "sv"]
    assert mine[0]["msgs"]["tokens"] == 4.5 and mine[0]["bytes"] is None
    total = next(t for t in buckets["totals"] if t["name"] == "acme/web/clicks")
    assert total["msgs"]["tokens"] >= 4.5
    queues = [q for q in part.get("/v1/state/queues").json()["queues"] if q["participantId"] == "sv"]
    assert queues[0]["length"] == 3 and [e["producer"] for e in queues[0]["entries"]] == ["task-1", "task-2"]
    hist = part.get("/v1/state/history", params={"level": "topic", "name": "acme/web/clicks"}).json()
    points = hist["series"][0]["points"]
    assert any(p["admittedMsgsPerSecond"] == pytest.approx(100.0) for p in points)   # 50 msgs in 0.5 s
    assert points[-1]["tokensMsgs"] == 4.5
    assert part.get("/v1/state/history", params={"level": "galaxy"}).status_code == 422
    assert part.get("/v1/state/history", params={"seconds": 5000}).status_code == 422
    part.post("/v1/goodbye", json={"participant_id": "sv"})


def test_participants_expire_after_two_intervals(start_cp: Any) -> None:
    cp: ControlPlane = start_cp(args=["--report-interval", "0.2"])
    part = cp.client(PARTICIPANT)
    assert send(part, report("ex", usage=[usage("g", 5)])).reportIntervalSeconds == 0.2
    seen = time.monotonic()
    names = {p["participantId"] for p in part.get("/v1/state/participants").json()["participants"]}
    assert names == {"ex"}
    deadline = seen + 3.0
    while time.monotonic() < deadline:
        view = part.get("/v1/state/participants").json()
        if not view["participants"]:
            break
        time.sleep(0.05)
    gone_after = time.monotonic() - seen
    assert view["participants"] == [], "participant not removed within 3 s"
    assert gone_after >= 0.3   # not before 2 x 0.2 s (minus the time to read the first view)
    assert view["departed"][0]["participantId"] == "ex" and view["departed"][0]["departedBecause"] == "expired"
    assert send(part, report("other", usage=[usage("g", 1)])).usage["resource_group:publish:g"].keys() == {"other"}


def test_a_report_of_thousands_of_limits_goes_compressed_and_is_taken_whole(cp: ControlPlane) -> None:
    part = cp.client(PARTICIPANT)
    names = [f"t{i // 50}/ns{i}" for i in range(4000)]
    body = report("big", usage_map=False,
                  usage=[usage(n, i % 90 + 0.5, level="namespace") for i, n in enumerate(names)],
                  counters=[{"level": "namespace", "name": n, "kind": "publish", "admitted_msgs_total": 10 * i, "admitted_bytes_total": 1000 * i,
                             "throttle_time_seconds_total": 0.25} for i, n in enumerate(names)])
    raw = json.dumps(body).encode()
    assert len(raw) > 1024 * 1024                                       # as it is: more than a body may be
    r = part.post("/v1/report", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 413
    content, headers = encoded(raw)                                     # as a participant sends it
    assert headers["Content-Encoding"] == "gzip" and len(content) < len(raw) / 5
    answer = send_raw(part, content, headers)
    assert answer.accepted and answer.usage == {} and answer.usageMissing == []
    shared = {lim["name"]: lim for lim in part.get("/v1/state/shared").json()["limits"] if lim["level"] == "namespace"}
    assert set(names) <= set(shared)                                   # every one of them, none cut
    assert shared[names[-1]]["usageMsgsPerSecond"] == 3999 % 90 + 0.5
    assert part.post("/v1/goodbye", json={"participant_id": "big"}).status_code == 204


def send_raw(c: httpx.Client, content: bytes, headers: dict[str, str]) -> ReportResponse:
    r = c.post("/v1/report", content=content, headers=headers)
    assert r.status_code == 200, r.text
    return ReportResponse.model_validate(r.json())
