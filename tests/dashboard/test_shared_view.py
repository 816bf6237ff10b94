"""The overview's shared-limits section on plain data: rows per limit and per participant from /v1/state/shared
(its JSON, read through the dashboard's model), over-admission and stranded quota first, unlimited and no-grant
values in words, and the usage-vs-share chart."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard import derive_shared, figures

from .answers import shared

pytestmark = pytest.mark.unit


def who(pid: str, demand: float, usage: float, share: Any, granted: Any = 0.0) -> dict[str, Any]:
    return {"participantId": pid, "demandMsgsPerSecond": demand, "usageMsgsPerSecond": usage,
            "shareMsgsPerSecond": share, "grantedMsgsInWindow": granted, "demandBytesPerSecond": 0.0,
            "usageBytesPerSecond": 0.0, "shareBytesPerSecond": "unlimited", "grantedBytesInWindow": "unlimited"}


def limit_json(level: str, name: str, cap: Any, people: list[dict[str, Any]], byts: Any = "unlimited",
          granted: Any = None, window: float | None = 1.0) -> dict[str, Any]:
    usage = sum(p["usageMsgsPerSecond"] for p in people)
    return {"key": f"{level}:publish:{name}", "level": level, "direction": "publish", "name": name,
            "limitMsgsPerSecond": cap, "limitBytesPerSecond": byts, "windowSeconds": window, "askers": len(people),
            "usageMsgsPerSecond": usage, "demandMsgsPerSecond": sum(p["demandMsgsPerSecond"] for p in people),
            "usageBytesPerSecond": 0.0, "demandBytesPerSecond": 0.0, "grantedMsgsInWindow": granted,
            "grantedBytesInWindow": "unlimited",
            "utilisation": None if cap == "unlimited" else usage / cap,
            "utilisationBytes": None if byts == "unlimited" else 0.0, "participants": people}


DOC = shared([
    limit_json("namespace", "acme/web", "unlimited", [who("a", 10, 10, "unlimited", "unlimited")], granted="unlimited"),
    limit_json("resource_group", "rg", 100.0, [who("a", 60, 59, 60, 15), who("b", 40, 40, 40, 10)], granted=99.5),
    limit_json("tenant", "acme", 100.0, [who("a", 10, 10, 50, 12), who("b", 120, 50, 50, 50)], granted=62),
    limit_json("topic", "acme/web/clicks", 50.0, [who("a", 40, 40, None, None), who("b", 40, 40, None, None)],
               window=None)])
FREE, FINE, STRANDED, OVER = DOC.limits


def test_over_admission_and_stranded_quota_are_named_and_come_first() -> None:
    assert derive_shared.status(OVER) == ("over the limit", 30.0)
    assert derive_shared.status(STRANDED) == ("stranded", 40.0)     # 40 of 100 unused, b wants 70 more
    assert derive_shared.status(FINE) == ("ok", 0.0) and derive_shared.status(FREE) == ("unlimited", 0.0)
    rows = derive_shared.summary_rows(DOC)
    assert [r["shared limit"] for r in rows] == ["topic acme/web/clicks", "tenant acme", "resource group rg",
                                                 "namespace acme/web"]
    assert rows[0] == {"shared limit": "topic acme/web/clicks", "limit msgs/s": 50.0, "admitted msgs/s": 80.0,
                       "demand msgs/s": 80.0, "granted msgs/s": "no grant", "use %": 160.0, "participants": 2,
                       "adaptive": "off", "status": "over the limit by 30 msgs/s"}
    assert rows[1]["status"] == "stranded: 40 msgs/s unused while demand waits" and rows[1]["use %"] == 60.0
    assert rows[1]["granted msgs/s"] == 62.0
    assert (rows[2]["status"], rows[2]["use %"]) == ("ok", 99.0)
    assert rows[3] == {"shared limit": "namespace acme/web", "limit msgs/s": "unlimited", "admitted msgs/s": 10.0,
                       "demand msgs/s": 10.0, "granted msgs/s": "unlimited", "use %": "unlimited",
                       "participants": 1, "adaptive": "off", "status": "unlimited"}


def test_the_summary_without_its_participants_shows_the_same_rows() -> None:
    # what the pages read (data.shared_summary): nobody listed, how many counted
    summary = shared([{**limit.model_dump(mode="json"), "participants": [], "participantCount": len(limit.participants)}
                      for limit in DOC.limits])
    assert derive_shared.summary_rows(summary) == derive_shared.summary_rows(DOC)
    assert derive_shared.summary_tables(summary) == derive_shared.summary_tables(DOC)


def test_participant_rows_show_demand_usage_share_and_who_strands_the_quota() -> None:
    assert derive_shared.participant_rows(STRANDED) == [
        {"participant": "a", "demand msgs/s": 10.0, "usage msgs/s": 10.0, "share msgs/s": 50.0,
         "granted in window": 12.0, "unused share msgs/s": 40.0, "held back msgs/s": 0.0},
        {"participant": "b", "demand msgs/s": 120.0, "usage msgs/s": 50.0, "share msgs/s": 50.0,
         "granted in window": 50.0, "unused share msgs/s": 0.0, "held back msgs/s": 70.0}]
    [row] = derive_shared.participant_rows(FREE)
    assert (row["share msgs/s"], row["granted in window"]) == ("unlimited", "unlimited")
    assert {r["share msgs/s"] for r in derive_shared.participant_rows(OVER)} == {"no grant"}


def test_a_limit_set_in_bytes_only_is_shown_in_bytes() -> None:
    only_bytes = limit_json("tenant", "beta", "unlimited", [who("a", 1, 1, "unlimited")], byts=1000.0)
    only_bytes["participants"][0].update(usageBytesPerSecond=980.0, demandBytesPerSecond=1500.0,
                                         shareBytesPerSecond=800.0)
    only_bytes.update(usageBytesPerSecond=980.0, demandBytesPerSecond=1500.0, utilisationBytes=0.98)
    [byts] = shared([only_bytes]).limits
    assert derive_shared.dimension(byts) == "bytes" and derive_shared.dimension(FINE) == "msgs"
    assert derive_shared.chart(byts) == ("tenant beta", 1000.0, "B/s")
    assert derive_shared.chart(FREE) == ("namespace acme/web", "unlimited", "msgs/s")
    [row] = derive_shared.summary_rows(shared([only_bytes]))
    assert (row["limit B/s"], row["admitted B/s"], row["status"]) == (1000.0, 980.0, "ok")
    [who_row] = derive_shared.participant_rows(byts)
    assert (who_row["share B/s"], who_row["held back B/s"]) == (800.0, 520.0)
    # beside limits in messages: a table per unit, every row with its table's columns (none left empty)
    tables = derive_shared.summary_tables(shared([only_bytes, *(limit.model_dump() for limit in DOC.limits)]))
    assert list(tables) == ["msgs/s", "B/s"] and [r["shared limit"] for r in tables["B/s"]] == ["tenant beta"]
    assert len(tables["msgs/s"]) == len(DOC.limits)
    for rows in tables.values():
        assert all(row.keys() == rows[0].keys() for row in rows)
    assert derive_shared.summary_tables(shared([])) == {}


def test_the_chart_draws_usage_against_share_per_participant_and_in_all_with_the_limit_line() -> None:
    rows = derive_shared.participant_rows(STRANDED)
    fig = figures.shared_limit_figure(rows, 100.0)
    bars = {t.name: (list(t.y), list(t.x)) for t in fig.data}     # horizontal: participants on y
    assert bars["usage"] == (["a", "b", "all participants"], [10.0, 50.0, 60.0])
    assert bars["share"][1] == [50.0, 50.0, 100.0] and bars["demand"][1] == [10.0, 120.0, 130.0]
    [line] = fig.layout.shapes
    assert (line.x0, line.x1, line.line.dash) == (100.0, 100.0, "dash")
    assert [a.text for a in fig.layout.annotations] == ["limit 100 msgs/s"]
    unlimited = figures.shared_limit_figure(derive_shared.participant_rows(FREE), "unlimited")
    assert not unlimited.layout.shapes and [a.text for a in unlimited.layout.annotations] == ["limit: unlimited"]
    assert [t.name for t in unlimited.data if t.name == "share" and t.x[0] is None] == ["share"]   # no bar
    assert figures.shared_limit_figure([], 10.0).layout.annotations[0].text == "no participant reports this limit"


def test_an_adaptive_limit_shows_the_rate_it_learnt_against_its_ceiling_and_any_pause() -> None:
    learnt = {"ratePerSecond": 665.4, "ceilingPerSecond": 2000.0, "floorPerSecond": 50.0, "pausedForSeconds": 0.0,
              "changedBy": "decrease", "ok": 9000, "throttled": 40, "errors": 0}
    api = limit_json("topic", "acme/web/api", 665.4, [who("a", 900, 600, 332.7, 80)], granted=600)
    [row] = derive_shared.summary_rows(shared([{**api, "adaptive": learnt}]))
    assert row["adaptive"] == "665 of 2,000/s (decrease)" and row["limit msgs/s"] == 665.4
    paused = {**learnt, "pausedForSeconds": 0.84, "changedBy": "retry-after"}
    [row] = derive_shared.summary_rows(shared([{**api, "adaptive": paused}]))
    assert row["adaptive"] == "665 of 2,000/s (retry-after), paused 0.8 s"
