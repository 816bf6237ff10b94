"""metrics.allocation: a participant's allocation is its fair rate from the grant book when it asked in the window;
PIP-82's usage-based split of what the grant holders leave otherwise (the book itself on a manual clock)."""

from __future__ import annotations

import pytest

from controlplane.grants import GrantBook
from limiter import ManualClock
from limiter.quota import local_quotas
from metrics.allocation import allocations, shares
from protocol import GrantAsk, PolicySet, ResourceGroup, UsageValues, limit_key

pytestmark = pytest.mark.unit
KEY = limit_key("resource_group", "publish", "rg")


def policies(msgs: float) -> PolicySet:
    return PolicySet(version=1, resourceGroups={"rg": ResourceGroup(publishRateInMsgs=msgs)})


def users(**msgs: tuple[float, float]) -> dict[str, UsageValues]:
    """participant=(usage, demand) in msgs/s"""
    return {p: UsageValues(usage_msgs_per_s=u, demand_msgs_per_s=d) for p, (u, d) in msgs.items()}


def book_with(ps: PolicySet, **rates: float) -> GrantBook:
    clock = ManualClock()
    book = GrantBook(1.0, None, clock=clock.now_s)
    for pid, rate in rates.items():
        book.answer(pid, [GrantAsk(level="resource_group", name="rg", direction="publish", wants_msgs=1,
                                   rate_msgs_per_s=rate)], ps)
    return book


def test_without_grants_it_is_pip82() -> None:
    people = users(a=(70, 70), b=(30, 70))
    assert allocations(100, "fair", people, "msgs") == pytest.approx({"a": 50, "b": 50})
    assert allocations(100, "proportional", people, "msgs") == local_quotas("proportional", 100, {"a": 70, "b": 30})
    assert allocations(-1, "fair", people, "msgs") == {"a": -1, "b": -1}
    assert allocations(100, "fair", {}, "msgs") == {}
    assert shares(None, {KEY: people}, policies(100)) == {}


def test_holders_get_their_fair_rates_and_the_others_split_what_is_left() -> None:
    ps = policies(100)
    people = users(a=(70, 70), b=(30, 30), c=(5, 5))
    book = book_with(ps, a=30, b=120)         # c reports usage but asks for nothing
    got = shares(book, {KEY: people}, ps)[KEY]
    alloc = allocations(100, "fair", people, "msgs", got)
    assert alloc == {"a": pytest.approx(30), "b": pytest.approx(70), "c": 0.0}   # nothing left: 0, never "unlimited"
    assert alloc["a"] == got["holders"]["a"]["msgs"]["fairPerSecond"]
    book = book_with(ps, a=10)                # a wants 10: fair 10 + 90 / 2 (half the spare kept for a newcomer)
    alloc = allocations(100, "fair", people, "msgs", shares(book, {KEY: people}, ps)[KEY])
    assert alloc["a"] == pytest.approx(55)
    assert {p: alloc[p] for p in ("b", "c")} == pytest.approx(local_quotas("fair", 45, {"b": 30, "c": 5}))
    assert sum(alloc.values()) == pytest.approx(100)
    # an unlimited dimension is not under grants: -1 for everyone
    assert allocations(-1, "fair", people, "bytes", shares(book, {KEY: people}, ps)[KEY]) == dict.fromkeys(people, -1)
