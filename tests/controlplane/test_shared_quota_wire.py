"""Wire additions for the shared quota: suppressed usage (usage_unchanged), quotaStrategy per resource
group, the defaultQuotaStrategy broker setting."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from controlplane.state import LiveState
from protocol import PolicySet, Report, ResourceGroup

from .conftest import ADMIN, PARTICIPANT, ControlPlane, report, usage
from .fake_clock import FakeClock, report_at

KEY = "resource_group:publish:g"


@pytest.mark.unit
def test_unchanged_usage_keeps_the_values_held() -> None:
    clock = FakeClock()
    live = LiveState(1.0, clock)
    live.ingest(report_at(clock, pid="a", seq=1, usage=[usage("g", 10, 30), usage("h", 5)]))
    live.ingest(report_at(clock, pid="b", seq=1, usage=[usage("g", 20)]))
    clock.t += 0.9
    live.ingest(report_at(clock, pid="a", seq=2, usage_unchanged=[KEY]))   # still uses g, same values; h dropped
    got = live.usage_map([KEY, "resource_group:publish:h"])
    assert got[KEY]["a"].usage_msgs_per_s == 10 and got[KEY]["a"].demand_msgs_per_s == 30
    assert set(got[KEY]) == {"a", "b"} and got["resource_group:publish:h"] == {}
    fresh = LiveState(1.0, clock)                                        # e.g. a restarted control plane
    fresh.ingest(report_at(clock, pid="a", seq=3, usage_unchanged=[KEY]))
    assert fresh.usage_map([KEY]) == {KEY: {}}                           # nothing held: left out


@pytest.mark.unit
@pytest.mark.parametrize("unchanged,why", [
    ([KEY, KEY], "duplicate"), (["galaxy:publish:g"], "pattern"), (["resource_group:publish"], "pattern"),
    ([KEY], "both in usage and in usage_unchanged")])
def test_bad_unchanged_keys_are_rejected(unchanged: list[str], why: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=why):
        Report.model_validate(report(usage=[usage("g", 1)] if "both" in why else [], usage_unchanged=unchanged))


@pytest.mark.unit
def test_strategy_of_a_policy_set() -> None:
    ps = PolicySet(version=1, resourceGroups={"f": ResourceGroup(), "p": ResourceGroup(quotaStrategy="proportional"),
                                              "x": ResourceGroup(quotaStrategy="future")})
    assert (ps.quota_strategy(), ps.quota_strategy("f"), ps.quota_strategy("p"), ps.quota_strategy("x")) == (
        "fair", "fair", "proportional", "fair")
    ps.brokerSettings["defaultQuotaStrategy"] = "proportional"
    assert ps.quota_strategy("f") == "proportional" and ps.quota_strategy("p") == "proportional"


@pytest.mark.integration
def test_quota_strategy_through_the_admin_api(start_cp: Any) -> None:
    cp: ControlPlane = start_cp()
    admin, part = cp.client(ADMIN), cp.client(PARTICIPANT)
    url = "/admin/v2/resourcegroups/rg-s"
    assert admin.put(url, json={"publishRateInMsgs": 100, "quotaStrategy": "proportional"}).status_code == 201
    assert admin.get(url).json()["quotaStrategy"] == "proportional"
    r = admin.put(url, json={"publishRateInMsgs": 100, "quotaStrategy": "banana"})
    assert r.status_code == 422 and "fair" in r.text
    assert admin.put(url, json={"publishRateInMsgs": 100}).status_code == 204
    assert admin.get(url).json()["quotaStrategy"] == "proportional"     # not sent: unchanged (read-modify-write)
    assert admin.put(url, json={"quotaStrategy": None}).status_code == 204
    assert "quotaStrategy" not in admin.get(url).json()                  # null: back to the broker default
    name = "defaultQuotaStrategy"
    assert admin.get("/admin/v2/brokers/configuration/runtime").json()[name] == "fair"
    r = admin.post(f"/admin/v2/brokers/configuration/{name}/sometimes")
    assert r.status_code == 412 and "'fair', 'proportional'" in r.json()["reason"]
    assert admin.post(f"/admin/v2/brokers/configuration/{name}/Proportional").status_code == 204
    assert admin.get("/admin/v2/brokers/configuration/values").json()[name] == "proportional"
    assert admin.put("/admin/v2/namespaces/acme/web/resourcegroup/rg-s").status_code == 204
    eff = admin.get("/admin/v2/persistent/acme/web/t/effectiveLimits").json()
    assert {a["quotaStrategy"] for a in eff["aggregates"]} == {"proportional"}
    policies = part.get("/v1/policies").json()
    assert policies["brokerSettings"][name] == "proportional"
    # the dashboard's allocation follows the group's strategy: usages 70/30, both want 70 -> stays 70/30
    for pid, used in (("a", 70), ("b", 30)):
        part.post("/v1/report", json=report(pid, usage=[usage("rg-s", used, 70)])).raise_for_status()
    state = part.get("/v1/state/resourcegroups").json()
    group = next(g for g in state["resourceGroups"] if g["name"] == "rg-s")
    assert group["strategy"] == "proportional" and state["strategy"] == "proportional"
    alloc = {p: v["allocation_msgs_per_s"] for p, v in group["publish"]["participants"].items()}
    assert alloc == {"a": pytest.approx(70), "b": pytest.approx(30)}
    assert admin.delete(f"/admin/v2/brokers/configuration/{name}").status_code == 204
    state = part.get("/v1/state/resourcegroups").json()
    group = next(g for g in state["resourceGroups"] if g["name"] == "rg-s")
    alloc = {p: v["allocation_msgs_per_s"] for p, v in group["publish"]["participants"].items()}
    assert group["strategy"] == "fair" and alloc == {"a": pytest.approx(50), "b": pytest.approx(50)}
    # a report with suppressed usage is answered with the held values
    r = part.post("/v1/report", json=report("a", seq=2, usage_unchanged=["resource_group:publish:rg-s"]))
    assert r.status_code == 200 and r.json()["usage"]["resource_group:publish:rg-s"]["a"]["usage_msgs_per_s"] == 70
