"""Edits through the Limits page (AppTest) against a real control plane and a running participant: the change
lands in the control plane and its audit log, the participant applies it; bad values and refusals change nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from tests.controlplane.conftest import ADMIN

from .conftest import APP, Stack, start_stack, stop_stack, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.parallel]


@pytest.fixture(scope="module")
def limits_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = start_stack(tmp_path_factory.mktemp("limits"), participants=1)
    try:
        yield stack
    finally:
        stop_stack(stack)


@pytest.fixture
def env(limits_stack: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path) -> Stack:  # type: ignore[no-untyped-def]
    for k, v in limits_stack.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("THROTTLESCOPE_DATA_DIR", str(tmp_path))   # no token files there
    monkeypatch.delenv("THROTTLESCOPE_TOKEN", raising=False)
    return limits_stack


def limits_page() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=30).run()
    at.switch_page("views/limits.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def click(at: AppTest, key: str) -> AppTest:
    at.button(key=key).click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def audit_total(stack: Stack) -> int:
    return stack.cp.client(ADMIN).get("/admin/v2/audit").json()["total"]


def test_a_topic_limit_edited_on_the_page_is_stored_audited_and_applied(env: Stack) -> None:
    cp = env.cp.client(ADMIN)
    before, total = cp.get("/v1/policies").json()["version"], audit_total(env)
    at = limits_page()
    at.selectbox(key="topic.target").set_value("acme/web/views").run()
    at.number_input(key="topic.acme/web/views.publishRate.m").set_value(15).run()
    click(at, "topic.review")
    diff = next(d.value for d in at.dataframe if "changed" in d.value.columns)
    row = diff[diff["field"] == "publishThrottlingRateInMsg"].iloc[0]
    assert (row["old"], row["new"], row["changed"]) == ("(not set)", "15", "yes")
    assert cp.get("/admin/v2/persistent/acme/web/views/publishRate").status_code == 204   # not sent yet
    click(at, "limits.confirm")
    assert any(f"policy version {before + 1}" in s.value for s in at.success)
    assert cp.get("/admin/v2/persistent/acme/web/views/publishRate").json()["publishThrottlingRateInMsg"] == 15
    entry = cp.get("/admin/v2/audit", params={"limit": 1}).json()["entries"][0]
    assert audit_total(env) == total + 1 and entry["policyVersion"] == before + 1
    assert entry["endpoint"] == "/admin/v2/persistent/acme/web/views/publishRate" and entry["oldValue"] is None
    assert entry["actor"] == "admin"          # single-user mode: the bootstrap super-user of the admin token
    audit = next(d.value for d in at.dataframe if "endpoint" in d.value.columns)
    assert audit.iloc[0]["endpoint"] == entry["endpoint"] and audit.iloc[0]["version"] == before + 1
    wait_for(lambda: all(p["appliedPolicyVersion"] == before + 1
                         for p in cp.get("/v1/state/participants").json()["participants"]), 15, "the participant")

    def applied() -> tuple[str, str, str]:   # what the live part shows on its next refreshes
        at.run()
        m = next(m for m in at.metric if m.label.startswith(f"Participants on policy version {before + 1}"))
        return (m.value, m.delta, m.label) if m.value == "1 of 1" else ()  # type: ignore[return-value]

    value, delta, label = wait_for(applied, 10, "the page to show the participant on the new version")
    assert delta == "all applied" and "your change to topic acme/web/views publishRate" in label


def test_a_bad_value_shows_the_allowed_range_and_changes_nothing(env: Stack) -> None:
    cp = env.cp.client(ADMIN)
    total, old = audit_total(env), cp.get("/admin/v2/persistent/acme/web/clicks/publishRate").json()
    at = limits_page()
    at.selectbox(key="topic.target").set_value("acme/web/clicks").run()
    at.number_input(key="topic.acme/web/clicks.publishRate.m").set_value(-0.5).run()
    click(at, "topic.review")
    errors = [e.value for e in at.error]
    assert any("-0.5 is not allowed: a finite number >= 0, or -1 for unlimited" in e for e in errors), errors
    assert not [b for b in at.button if b.key == "limits.confirm"]        # no confirmation offered
    assert audit_total(env) == total
    assert cp.get("/admin/v2/persistent/acme/web/clicks/publishRate").json() == old


def test_a_refusal_shows_the_control_planes_reason_and_changes_nothing(env: Stack) -> None:
    cp = env.cp.client(ADMIN)
    assert cp.post("/admin/v2/brokers/configuration/dispatchThrottlingOnBatchMessageEnabled/true").status_code == 204
    total = audit_total(env)
    at = limits_page()
    at.selectbox(key="broker.name").set_value("preciseDispatcherFlowControl").run()
    at.toggle(key="broker.preciseDispatcherFlowControl").set_value(True).run()
    click(at, "broker.review")
    click(at, "limits.confirm")
    errors = [e.value for e in at.error]
    assert any("HTTP 409" in e and "mutually exclusive" in e and "Nothing was changed" in e for e in errors), errors
    assert audit_total(env) == total
    assert cp.get("/admin/v2/brokers/configuration/runtime").json()["preciseDispatcherFlowControl"] is False


def test_offload_permits_resource_groups_and_mutation_quotas_are_editable(env: Stack) -> None:
    cp = env.cp.client(ADMIN)
    at = limits_page()
    permits = "managedLedgerOffloadBrokerFlowPermitsPerSecond"
    at.selectbox(key="broker.name").set_value(permits).run()
    at.number_input(key=f"broker.{permits}").set_value(500000).run()
    click(click(at, "broker.review"), "limits.confirm")
    assert cp.get("/admin/v2/brokers/configuration/values").json()[permits] == 500000
    at.selectbox(key="rg.pick").set_value("+ new group").run()
    at.text_input(key="rg.new").set_value("rg-new").run()
    at.number_input(key="rg.rg-new.publishRateInMsgs").set_value(100).run()
    click(click(at, "rg.review"), "limits.confirm")
    assert cp.get("/admin/v2/resourcegroups/rg-new").json()["publishRateInMsgs"] == 100
    at.text_input(key="rg.rg-new.attach").set_value("acme/attached").run()       # the old side: none attached
    click(click(at, "rg.review"), "limits.confirm")
    assert cp.get("/admin/v2/namespaces/acme/attached/resourcegroup").text == "rg-new"
    at.text_input(key="mq.user").set_value("carol").run()
    at.number_input(key="mq.carol.<default>.q").set_value(7).run()
    click(click(at, "mq.review"), "limits.confirm")
    assert cp.get("/admin/v2/quotas/mutations/carol/<default>").json()["quotaPerSecond"] == 7
    wait_for(lambda: all((p["offload"] or {}).get("limit_bytes_per_s") == 500000
                         for p in cp.get("/v1/state/participants").json()["participants"]), 15,
             "the participant to apply the new offload permits")


def test_without_an_admin_token_the_page_offers_a_token_sign_in(env: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("THROTTLESCOPE_ADMIN_TOKEN")
    at = limits_page()
    assert any("Sign in (in the sidebar) to change limits" in w.value for w in at.warning)
    assert not [b for b in at.button if b.key == "topic.review"]      # reads need a principal too: no editor
    at.sidebar.text_input(key="signin.token").set_value(ADMIN).run()
    at.sidebar.button(key="signin.submit").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert [s.value for s in at.sidebar.success][-1] == "Signed in as admin (super-user)"
    assert not any("Sign in" in w.value for w in at.warning)
    assert not at.button(key="topic.review").disabled and not at.button(key="rg.review").disabled


def test_the_editors_say_what_is_stored_now_in_words(env: Stack) -> None:
    at = limits_page()
    at.selectbox(key="topic.target").set_value("acme/web/clicks").run()   # 40 msgs per period, bytes -1
    captions = [c.value for c in at.caption]
    assert "Now: messages per period 40, bytes per period unlimited" in captions, captions
    assert "Now: mutations per second 5" in captions        # <default> / <default>, seeded
    at.selectbox(key="topic.target").set_value("beta/etl/load").run()     # no policy of its own
    assert "Now: not set" in [c.value for c in at.caption]
    at.selectbox(key="rg.pick").set_value("rg-batch").run()
    assert ("Now: publish msgs/s 40, publish bytes/s unlimited, dispatch msgs/s unlimited, dispatch bytes/s "
            "unlimited") in [c.value for c in at.caption]


def test_a_broker_setting_that_is_a_choice_is_edited_as_text(env: Stack) -> None:
    cp = env.cp.client(ADMIN)
    at = limits_page()
    at.selectbox(key="broker.name").set_value("defaultQuotaStrategy").run()      # was: a number input, which failed
    assert not at.exception, [e.value for e in at.exception]
    assert at.text_input(key="broker.defaultQuotaStrategy").value == "fair"
    at.text_input(key="broker.defaultQuotaStrategy").set_value("proportional").run()
    click(click(at, "broker.review"), "limits.confirm")
    assert cp.get("/admin/v2/brokers/configuration/runtime").json()["defaultQuotaStrategy"] == "proportional"
    at.text_input(key="broker.defaultQuotaStrategy").set_value("fastest").run()
    click(click(at, "broker.review"), "limits.confirm")
    assert any("HTTP 4" in e.value and "Nothing was changed" in e.value for e in at.error)
    assert cp.post("/admin/v2/brokers/configuration/defaultQuotaStrategy/fair").status_code == 204


def test_editing_an_adaptive_rate_on_the_page_keeps_it_adaptive(env: Stack) -> None:
    cp = env.cp.client(ADMIN)
    url = "/admin/v2/persistent/acme/web/api/publishRate"
    assert cp.post(url, json={"publishThrottlingRateInMsg": 2000, "adaptive": True,
                              "adaptiveFloorInMsg": 50}).status_code == 204
    st.cache_data.clear()   # (the policies the page read for the test before, within the reads' 1-s cache)
    at = limits_page()
    at.selectbox(key="topic.target").set_value("acme/web/api").run()
    at.number_input(key="topic.acme/web/api.publishRate.m").set_value(1500).run()
    click(at, "topic.review")
    click(at, "limits.confirm")
    got = cp.get(url).json()
    assert (got["publishThrottlingRateInMsg"], got["adaptive"], got["adaptiveFloorInMsg"]) == (1500, True, 50)
    assert cp.delete(url).status_code == 204
