"""GET /v1/state/resourcegroups and /metrics under grants: a participant's allocation of a resource group is what
the grant book grants it (its fair rate, as GET /v1/state/shared shows it), not PIP-82's usage-based split. The
app runs in this process with its live state and grant book on manual clocks (nothing sleeps)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from controlplane.app import create_app
from controlplane.auth import Tokens
from controlplane.config import Settings
from controlplane.grants import GrantBook
from controlplane.state import LiveState
from limiter import ManualClock

from .conftest import ADMIN, PARTICIPANT, report, usage
from .fake_clock import FakeClock

pytestmark = pytest.mark.unit
LIMIT = 100.0


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    clock = FakeClock()
    app = create_app(Settings(data_dir=tmp_path), Tokens(admin=ADMIN, participant=PARTICIPANT),
                     live=LiveState(1.0, clock), grants=GrantBook(1.0, None, clock=ManualClock().now_s))
    with TestClient(app) as c:
        c.headers["Authorization"] = f"Bearer {ADMIN}"
        assert c.put("/admin/v2/resourcegroups/rg-g", json={"publishRateInMsgs": LIMIT}).status_code == 201
        c.headers["Authorization"] = f"Bearer {PARTICIPANT}"
        # usages 70/30, both wanting 70: PIP-82's fair split would be 50/50
        for pid, used in (("ga", 70), ("gb", 30)):
            r = c.post("/v1/report", json=report(pid, sent_at=clock.t, usage=[usage("rg-g", used, 70)]))
            assert r.status_code == 200 and r.json()["accepted"], r.text
        yield c


def allocated(c: TestClient) -> dict[str, float]:
    [group] = [g for g in c.get("/v1/state/resourcegroups").json()["resourceGroups"] if g["name"] == "rg-g"]
    return {p: v["allocation_msgs_per_s"] for p, v in group["publish"]["participants"].items()}


def test_allocations_are_the_grant_books_shares_and_fit_in_the_limit(client: TestClient) -> None:
    assert allocated(client) == {"ga": pytest.approx(50), "gb": pytest.approx(50)}   # no grants yet: PIP-82
    # they ask for grants wanting 30 and 120 msgs/s: max-min fair, 30 and the other 70
    for pid, rate in (("ga", 30), ("gb", 120)):
        r = client.post("/v1/grant", json={"participant_id": pid, "asks": [
            {"level": "resource_group", "name": "rg-g", "direction": "publish", "wants_msgs": 5,
             "rate_msgs_per_s": rate}]})
        assert r.status_code == 200 and r.json()["grants"][0]["msgs"] > 0, r.text
    [shared] = [s for s in client.get("/v1/state/shared").json()["limits"] if s["key"] == "resource_group:publish:rg-g"]
    book = {p["participantId"]: p["shareMsgsPerSecond"] for p in shared["participants"]}
    alloc = allocated(client)
    assert alloc == book == {"ga": pytest.approx(30), "gb": pytest.approx(70)}
    assert sum(alloc.values()) <= LIMIT * (1 + 1e-12)
    metric = 'throttlescope_resource_group_calculated_quota{dimension="msgs",monitoring_class="publish",' \
             'resource_group="rg-g"}'
    line = next(x for x in client.get("/metrics").text.splitlines() if x.startswith(metric))
    assert float(line.split()[-1]) == pytest.approx(sum(book.values()))


def test_a_goodbye_takes_the_participant_out_of_the_safe_split(client: TestClient) -> None:
    def ask(pid: str, wants: float) -> dict:
        r = client.post("/v1/grant", json={"participant_id": pid, "asks": [
            {"level": "resource_group", "name": "rg-g", "direction": "publish", "wants_msgs": wants,
             "rate_msgs_per_s": LIMIT}]})
        assert r.status_code == 200, r.text
        return r.json()["grants"][0]

    ask("ga", 5)
    assert ask("gb", 5)["safe_msgs_per_s"] == pytest.approx(LIMIT / 2)
    ask("ga", 0)                                   # ga's task ended: it is back with the next one
    assert ask("gb", 5)["safe_msgs_per_s"] == pytest.approx(LIMIT / 2)
    assert client.post("/v1/goodbye", json={"participant_id": "ga"}).status_code == 204
    assert ask("gb", 5)["safe_msgs_per_s"] == pytest.approx(LIMIT)


@pytest.mark.parametrize("sent_s, allowed", [(12.5, True), (None, True), (-1.0, False), ("soon", False)])
def test_an_ask_says_when_it_was_sent_as_a_number_of_seconds_or_not_at_all(client: TestClient, sent_s: object,
                                                                           allowed: bool) -> None:
    r = client.post("/v1/grant", json={"participant_id": "ga", "sent_s": sent_s, "asks": [
        {"level": "resource_group", "name": "rg-g", "direction": "publish", "wants_msgs": 5,
         "rate_msgs_per_s": LIMIT, "held_msgs": 0, "spent": [{"ago_s": 0.01, "msgs": 3}]}]})
    if allowed:
        assert r.status_code == 200 and r.json()["grants"][0]["msgs"] > 0, r.text
    else:
        assert r.status_code == 422 and "sent_s" in r.text, r.text
