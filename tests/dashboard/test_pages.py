"""AppTest on every page against a real control plane with two reporting participants (seeded by conftest)."""

from __future__ import annotations

import re
import threading
import time

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from tests.controlplane.conftest import ADMIN, PARTICIPANT

from .conftest import APP, Stack

pytestmark = [pytest.mark.integration, pytest.mark.parallel]


def run(page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=30).run()
    if page:
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    no_raw_unlimited(at)
    return at


def no_raw_unlimited(at: AppTest) -> None:
    """No limit, quota or permit on the page reads None, NaN, -1 (or 0) where it is unlimited."""
    for d in at.dataframe:
        for column in d.value.columns:
            if any(word in column for word in ("limit", "quota", "permits")):
                shown = d.value[column]
                assert not shown.isna().any(), column
                assert not shown.astype(str).isin(["-1", "-1.0", "None", "nan"]).any(), (column, list(shown))
    texts = [e.value for e in (*at.markdown, *at.caption)] + [m.value for m in at.metric]
    assert not [t for t in texts if "-1 = unlimited" in str(t) or "None" in str(t)]


def metrics(at: AppTest) -> dict[str, tuple[str, str]]:
    return {m.label: (m.value, m.delta) for m in at.metric}


def frame(at: AppTest, column: str):  # type: ignore[no-untyped-def]
    """The first dataframe on the page that has ``column``."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def test_overview_shows_health_participants_freshness_and_the_most_throttled(dashboard_env: Stack) -> None:
    cp = dashboard_env.cp.client(ADMIN)
    at = run()
    assert [t.value for t in at.title] == ["Overview"]
    m = metrics(at)
    assert m["Control plane"][0] == "up"
    assert m["Participants alive"][0] == "2"
    assert m["Data freshness"][0].endswith("s ago") and m["Data freshness"][1] == "live"
    assert m["Policy version"][0] == str(cp.get("/healthz").json()["policyVersion"])
    top = frame(at, "throttle s/s")
    # which of the throttled limiters made the window depends on timing; the topic is throttled throughout
    assert "topic acme/web/clicks" in set(top["target"]) and len(top) >= 2
    # (each row was held back in the window: throttled in it, or still waiting on a throttle from just before it)
    assert ((top["throttled"] > 0) | (top["throttle s/s"] > 0)).all()
    shared = len(cp.get("/v1/state/shared").json()["limits"])
    assert len(at.get("plotly_chart")) == 3 + min(shared, 6)      # and one per shared limit (6 at most)
    assert not at.warning   # fresh data: no staleness warning
    assert [s.value for s in at.sidebar.success][0].startswith(f"Control plane up: {dashboard_env.cp.url}")


class Asking:
    """The running participants asking for grants of tenant beta's limit (20 msgs/s) every 0.2 s, as the
    participant runtime does (the stand-in participants enforce their limits locally and ask for none)."""

    def __init__(self, stack: Stack) -> None:
        self.cp = stack.cp.client(PARTICIPANT)
        self.ids = [p["participantId"] for p in self.cp.get("/v1/state/participants").json()["participants"]]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            for pid in self.ids:
                self.cp.post("/v1/grant", json={"participant_id": pid, "asks": [
                    {"level": "tenant", "name": "beta", "direction": "publish", "wants_msgs": 2,
                     "rate_msgs_per_s": 33}]})
            self.stop.wait(0.2)

    def __enter__(self) -> Asking:
        self.thread.start()
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


def test_overview_shows_each_shared_limit_its_use_and_each_participants_share(dashboard_env: Stack) -> None:
    with Asking(dashboard_env) as asking:
        st.cache_data.clear()   # (the test before read the overview within the reads' 1-s cache: before any ask)
        at = run()
    assert "Shared limits" in [s.value for s in at.subheader]
    limits = frame(at, "shared limit").set_index("shared limit")
    assert {"tenant acme", "tenant beta", "resource group rg-batch", "namespace acme/web"} <= set(limits.index)
    beta = limits.loc["tenant beta"]     # (the stand-ins' usage moves with their batches: any status may show)
    assert beta["limit msgs/s"] in (20, "20") and float(beta["use %"]) >= 0 and beta["granted msgs/s"] != "no grant"
    assert re.fullmatch(r"ok|over the limit by [\d.,]+ msgs/s|stranded: [\d.,]+ msgs/s unused while demand waits",
                        beta["status"])
    assert limits.loc["resource group rg-batch", "granted msgs/s"] == "no grant"      # nobody asks for its grants
    for name in ("namespace acme/web", "tenant acme"):                         # no shared total is set for them
        assert tuple(limits.loc[name, ["limit msgs/s", "use %", "status"]]) == ("unlimited",) * 3
    granted = [d.value for d in at.dataframe if "share msgs/s" in d.value.columns
               and not d.value["share msgs/s"].astype(str).isin(["no grant", "unlimited"]).any()]
    [shares] = granted                     # tenant beta's: the only limit anybody asks grants of
    assert set(shares["participant"]) == set(asking.ids)
    assert shares["share msgs/s"].astype(float).tolist() == pytest.approx([10.0, 10.0])   # 20 split in two
    assert (shares["demand msgs/s"].astype(float) >= shares["usage msgs/s"].astype(float) - 1e-6).all()


def test_buckets_lists_every_level_and_filters_by_level_and_name(dashboard_env: Stack) -> None:
    totals = dashboard_env.cp.client(ADMIN).get("/v1/state/buckets").json()["totals"]
    at = run("buckets")
    table = frame(at, "msgs tokens")
    assert set(table["level"]) == {t["level"] for t in totals} >= {"broker", "resource_group", "tenant", "namespace",
                                                                     "topic"}
    assert set(table["name"]) == {t["name"] for t in totals}
    clicks = table[table["name"] == "acme/web/clicks"].iloc[0]
    assert clicks["participants"] == 2 and clicks["msgs limit"] in (80, "80")   # 40 msgs/s on each participant
    assert set(table["bytes limit"]) == {"unlimited"}                   # no byte limit is set anywhere
    assert len(at.get("plotly_chart")) >= 9
    at.multiselect(key="buckets.levels").set_value(["topic"]).run()
    at.text_input(key="buckets.name").set_value("clicks").run()
    assert not at.exception
    table = frame(at, "msgs tokens")
    assert list(table["name"]) == ["acme/web/clicks"]
    assert len(at.get("plotly_chart")) == 3
    assert any(md.value.startswith("**topic acme/web/clicks**") for md in at.markdown)


def test_fairness_shows_queues_shares_jain_and_resource_group_split(dashboard_env: Stack) -> None:
    at = run("fairness")
    assert [t.value for t in at.title] == ["Fairness"]
    jains = {k: v for k, v in metrics(at).items() if k.startswith("Jain's index")}
    assert {"Jain's index, namespace acme/web", "Jain's index, tenant acme"} <= set(jains)
    assert all(0 < float(v[0]) <= 1 for v in jains.values())
    assert any(md.value.startswith("**rg-batch**: publish 40 msgs/s, unlimited; dispatch unlimited, unlimited")
               for md in at.markdown)
    groups = frame(at, "quota msgs/s")
    assert set(groups["group"]) == {"rg-batch"} and groups["participant"].nunique() == 2
    assert groups["quota msgs/s"].sum() == pytest.approx(40, abs=1)     # the group's quota, split
    assert (groups["demand msgs/s"] >= groups["usage msgs/s"] - 1e-6).all()
    queued = [d.value for d in at.dataframe if "waiting s" in d.value.columns]
    for q in queued:   # queues come and go with the load; when there is one, it is in order
        assert (q.groupby(["queue", "participant"])["position"].apply(lambda s: list(s) == list(range(1, len(s) + 1)))
                .all())
        assert set(q["producer"]) <= {"clicks-1", "clicks-2", "clicks-3", "views-1", "export-1", "export-2",
                                      "load-1", "load-2"}


def test_offload_and_mutations_show_permits_limited_reads_and_quotas(dashboard_env: Stack) -> None:
    at = run("offload")
    m = metrics(at)
    assert m["Flow permits per process"][0] == "300,000 B/s"
    assert int(m["Limited reads"][0].replace(",", "")) > 0
    offload = frame(at, "permits bytes/s")
    assert len(offload) == 2 and (offload["permits bytes/s"] == 300000).all()
    mutations = frame(at, "throttle s")
    assert {("alice", "etl-1"), ("bob", "console")} <= set(zip(mutations["user"], mutations["client id"], strict=True))
    assert len(at.get("plotly_chart")) == 2


def test_limits_shows_the_audit_log_and_who_applied_the_current_version(dashboard_env: Stack) -> None:
    total = dashboard_env.cp.client(ADMIN).get("/admin/v2/audit").json()["total"]
    at = run("limits")
    audit = frame(at, "endpoint")
    assert len(audit) == total >= 8
    assert "/admin/v2/persistent/acme/web/clicks/publishRate" in set(audit["endpoint"])
    applied = next(v for k, v in metrics(at).items() if k.startswith("Participants on policy version"))
    assert applied == ("2 of 2", "all applied")
