"""GET /v1/state/shared: per shared limit, each participant's demand, usage and share (its fair rate from the grant
windows, what it was granted in the last window) and the limit's utilisation -- GrantBook.shares on a manual
clock, and the endpoint through a real control plane."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from controlplane.grants import GrantBook
from limiter import ManualClock
from protocol import GrantAsk, PolicySet, ResourceGroup
from tests.controlplane.conftest import ADMIN, PARTICIPANT, ControlPlane, report, usage

RG = "resource_group:publish:rg"
POLICIES = PolicySet(version=1, resourceGroups={"rg": ResourceGroup(publishRateInMsgs=100, publishRateInBytes=-1)})


def ask(rate: float, wants: float, level: str = "resource_group", name: str = "rg") -> list[GrantAsk]:
    return [GrantAsk(level=level, name=name, direction="publish", wants_msgs=wants, rate_msgs_per_s=rate)]


@pytest.mark.unit
def test_shares_are_the_fair_rates_and_grants_the_book_answered() -> None:
    clock = ManualClock()
    book = GrantBook(0.25, None, clock=clock.now_s)
    a = book.answer("a", ask(30, 10), POLICIES)[0]
    b = book.answer("b", ask(120, 30), POLICIES)[0]
    clock.advance(0.1)
    got = book.shares({RG: ["a", "b", "idle"]}, POLICIES)[RG]
    assert got["windowSeconds"] == 1.0 and got["askers"] == 2
    assert got["msgs"] == {"limitPerSecond": 100.0, "granted": pytest.approx(a.msgs + b.msgs)}
    assert got["bytes"] == {"limitPerSecond": None, "granted": None}        # bytes are not limited
    # max-min fair by the wanted rates: a wants 30 of 100, b gets the other 70
    assert got["holders"]["a"]["msgs"] == {"granted": pytest.approx(a.msgs), "fairPerSecond": pytest.approx(30)}
    assert got["holders"]["b"]["msgs"] == {"granted": pytest.approx(b.msgs), "fairPerSecond": pytest.approx(70)}
    assert got["holders"]["idle"]["msgs"] == {"granted": 0.0, "fairPerSecond": 0.0}   # did not ask: no share
    assert got["holders"]["a"]["bytes"] == {"granted": None, "fairPerSecond": None}
    clock.advance(1.0)          # the window slid past every grant and ask
    after = book.shares({}, POLICIES)[RG]
    assert after["askers"] == 0 and after["msgs"]["granted"] == 0 and after["holders"] == {}


@pytest.mark.unit
def test_a_limit_nobody_asked_about_has_no_window_and_an_unset_one_is_unlimited() -> None:
    book = GrantBook(0.25, None, clock=ManualClock().now_s)
    got = book.shares({RG: ["a"], "tenant:publish:acme": ["a"]}, POLICIES)
    assert got[RG]["windowSeconds"] is None and got[RG]["msgs"] == {"limitPerSecond": 100.0, "granted": None}
    assert got[RG]["holders"]["a"]["msgs"] == {"granted": None, "fairPerSecond": None}
    assert got["tenant:publish:acme"]["msgs"]["limitPerSecond"] is None     # no tenant limit: unlimited


@pytest.fixture(scope="module")
def cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(tmp_path_factory.mktemp("shared-state") / "data", ["--report-interval", "60"])
    plane.start()
    try:
        admin = plane.client(ADMIN)
        rate = {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": -1, "ratePeriodInSecond": 1}
        assert admin.put("/admin/v2/tenants/acme/publishRate", json=rate).status_code in (201, 204)
        topic = {**rate, "publishThrottlingRateInMsg": 50}
        assert admin.put("/admin/v2/persistent/acme/web/clicks/publishRate", json=topic).status_code in (201, 204)
        yield plane
    finally:
        plane.kill()


def grant(c: httpx.Client, pid: str, rate: float, wants: float) -> float:
    r = c.post("/v1/grant", json={"participant_id": pid, "asks": [
        {"level": "tenant", "name": "acme", "direction": "publish", "wants_msgs": wants, "rate_msgs_per_s": rate}]})
    assert r.status_code == 200, r.text
    return r.json()["grants"][0]["msgs"]


@pytest.mark.integration
def test_the_endpoint_joins_usage_and_demand_with_grants_and_fair_shares(cp: ControlPlane) -> None:
    part = cp.client(PARTICIPANT)
    for pid, used, wanted in (("a", 30, 30), ("b", 70, 120)):
        body = report(pid, usage=[usage("acme", used, wanted, level="tenant"),
                                  usage("acme/web", used, wanted, level="namespace"),
                                  usage("acme/web/clicks", used / 2, wanted / 2, level="topic")])
        assert part.post("/v1/report", json=body).json()["accepted"]
    granted = {"a": grant(part, "a", 30, 10), "b": grant(part, "b", 120, 30), "c": grant(part, "c", 120, 5)}
    doc = cp.client(ADMIN).get("/v1/state/shared").json()
    limits = {lim["key"]: lim for lim in doc["limits"]}
    assert list(limits) == ["tenant:publish:acme", "namespace:publish:acme/web", "topic:publish:acme/web/clicks"]

    tenant = limits["tenant:publish:acme"]
    assert tenant["limitMsgsPerSecond"] == 100 and tenant["limitBytesPerSecond"] == "unlimited"
    assert tenant["usageMsgsPerSecond"] == 100 and tenant["demandMsgsPerSecond"] == 150
    assert tenant["utilisation"] == pytest.approx(1.0) and tenant["utilisationBytes"] is None
    assert tenant["askers"] == 3 and tenant["windowSeconds"] == 1
    assert tenant["grantedMsgsInWindow"] == pytest.approx(sum(granted.values()))
    assert tenant["grantedMsgsToOthers"] == pytest.approx(granted["c"])     # c asks but reports no usage of it
    people = {p["participantId"]: p for p in tenant["participants"]}
    assert set(people) == {"a", "b"}
    assert (people["a"]["demandMsgsPerSecond"], people["a"]["usageMsgsPerSecond"]) == (30, 30)
    assert people["a"]["grantedMsgsInWindow"] == pytest.approx(granted["a"])
    # max-min fair by the rates asked for (30, 120, 120 of 100): a keeps its 30, b and c split the other 70
    assert people["a"]["shareMsgsPerSecond"] == pytest.approx(30)
    assert people["b"]["shareMsgsPerSecond"] == pytest.approx(35)
    assert people["b"]["shareBytesPerSecond"] == "unlimited"

    namespace = limits["namespace:publish:acme/web"]     # a namespace policy is per topic: no shared total
    assert namespace["limitMsgsPerSecond"] == "unlimited" and namespace["utilisation"] is None
    assert {p["shareMsgsPerSecond"] for p in namespace["participants"]} == {"unlimited"}

    topic = limits["topic:publish:acme/web/clicks"]      # limited, but nobody asked for its grants
    assert topic["limitMsgsPerSecond"] == 50 and topic["utilisation"] == pytest.approx(1.0)
    assert topic["windowSeconds"] is None and topic["grantedMsgsInWindow"] is None
    assert {p["shareMsgsPerSecond"] for p in topic["participants"]} == {None}


@pytest.mark.integration
def test_it_is_a_documented_read_for_every_principal(cp: ControlPlane) -> None:
    op = httpx.get(cp.url + "/openapi.json").json()["paths"]["/v1/state/shared"]["get"]
    assert op["x-required-role"] == "reader" and "utilisation" in op["description"]
    assert cp.client(None).get("/v1/state/shared").status_code == 401
    assert cp.client(PARTICIPANT).get("/v1/state/shared").status_code == 200

