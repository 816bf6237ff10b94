"""Signing in to the dashboard (AppTest) against a real control plane: a token sign-in, OpenID Connect (the
signed-in identity seeded as AppTest's ``st.user``; the dashboard calls as its proxy principal), and the
single-user mode that refuses to run on a public address. Every edit is made with the signed-in principal's
rights and audited under its name; editors it may not use are read-only with the control plane's reason."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from streamlit import config as streamlit_config
from streamlit.testing.v1 import AppTest

from dashboard import data
from tests.controlplane.conftest import ADMIN, ControlPlane

from .conftest import APP, seed
from .test_limits import click, limits_page

pytestmark = [pytest.mark.integration, pytest.mark.parallel]
REVIEWS = ("rg.review", "namespace.review", "topic.review", "sub.review", "broker.review", "mq.review")
AUTH = {"redirect_uri": "http://127.0.0.1:8501/oauth2callback", "cookie_secret": "s" * 32, "client_id": "x",
        "client_secret": "y", "server_metadata_url": "http://127.0.0.1:1/.well-known/openid-configuration"}


class Team:
    def __init__(self, cp: ControlPlane) -> None:
        self.cp, self.admin = cp, cp.client(ADMIN)
        self.tokens = {name: self.admin.put(f"/admin/v2/principals/{name}", json={"role": role}).json()["token"]
                       for name, role in (("acme-admin", "tenant-admin"), ("vic", "viewer"), ("dash", "proxy"),
                                          ("ana@acme.com", "tenant-admin"))}
        assert self.admin.put("/admin/v2/tenants/acme",
                              json={"adminRoles": ["acme-admin", "ana@acme.com"]}).status_code == 204
        r = self.admin.put("/admin/v2/namespaces/globex/web/publishRate", json={"publishThrottlingRateInMsg": 30})
        assert r.status_code == 204

    def last(self) -> dict[str, Any]:
        return self.admin.get("/admin/v2/audit", params={"limit": 1}).json()["entries"][0]


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    cp = ControlPlane(tmp_path_factory.mktemp("signin") / "data").start()
    try:
        seed(cp)
        yield Team(cp)
    finally:
        cp.stop()


@pytest.fixture
def env(team: Team, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Team:
    monkeypatch.setenv("THROTTLESCOPE_URL", team.cp.url)
    monkeypatch.setenv("THROTTLESCOPE_DATA_DIR", str(tmp_path))      # no admin.token: no single-user mode
    for var in ("THROTTLESCOPE_ADMIN_TOKEN", "THROTTLESCOPE_DASHBOARD_AUTH", "THROTTLESCOPE_DASHBOARD_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    return team


def sign_in(token: str) -> AppTest:
    at = limits_page()
    at.sidebar.text_input(key="signin.token").set_value(token).run()
    at.sidebar.button(key="signin.submit").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def read_only(at: AppTest) -> dict[str, str]:
    """Review button key -> the read-only reason shown in its form (only for disabled buttons)."""
    return {b.key: "" for b in at.button if b.key in REVIEWS and b.disabled} | {
        "reasons": " | ".join(i.value for i in at.info if i.value.startswith("Read-only for you"))}


def test_a_tenant_admin_changes_its_own_tenant_and_sees_the_others_read_only(env: Team) -> None:
    at = sign_in(env.tokens["acme-admin"])
    assert [s.value for s in at.sidebar.success][-1] == "Signed in as acme-admin (tenant admin of acme)"
    assert any("Change limits live as acme-admin (tenant admin of acme)" in c.value for c in at.caption)
    at.selectbox(key="namespace.target").set_value("acme/web").run()
    at.number_input(key="namespace.acme/web.publishRate.m").set_value(45).run()
    click(click(at, "namespace.review"), "limits.confirm")
    assert env.admin.get("/admin/v2/namespaces/acme/web/publishRate").json()["publishThrottlingRateInMsg"] == 45
    entry = env.last()
    assert (entry["actor"], entry["endpoint"]) == ("acme-admin", "/admin/v2/namespaces/acme/web/publishRate")
    at.selectbox(key="namespace.target").set_value("globex/web").run()
    shown = read_only(at)
    assert {"namespace.review", "rg.review", "broker.review", "mq.review"} <= set(shown)
    assert "not named in the adminRoles of tenant 'globex'" in shown["reasons"]
    assert "resource groups are super-user only" in shown["reasons"]
    assert "broker settings are super-user only" in shown["reasons"]
    assert "mutation quotas are super-user only" in shown["reasons"]
    assert env.admin.get("/admin/v2/namespaces/globex/web/publishRate").json()["publishThrottlingRateInMsg"] == 30


def test_a_viewer_can_change_nothing(env: Team) -> None:
    total = env.admin.get("/admin/v2/audit").json()["total"]
    at = sign_in(env.tokens["vic"])
    assert [s.value for s in at.sidebar.success][-1] == "Signed in as vic (viewer)"
    at.selectbox(key="namespace.target").set_value("acme/web").run()
    shown = read_only(at)
    assert set(REVIEWS) - {"sub.review", "topic.review"} <= set(shown), shown
    assert "a viewer only reads" in shown["reasons"]
    assert env.admin.get("/admin/v2/audit").json()["total"] == total


def test_a_revoked_token_signs_the_person_out(env: Team) -> None:
    made = env.admin.put("/admin/v2/principals/temp", json={"role": "viewer"}).json()["token"]
    at = sign_in(made)
    assert [s.value for s in at.sidebar.success][-1] == "Signed in as temp (viewer)"
    assert env.admin.delete("/admin/v2/principals/temp").status_code == 204
    data.clear_cache()      # the reads are cached for one second: the rerun after that
    at.run()
    assert not [s for s in at.sidebar.success if s.value.startswith("Signed in")]
    assert any("the token of viewer 'temp' was revoked" in w.value for w in at.sidebar.warning), \
        [w.value for w in at.sidebar.warning]
    assert [t.key for t in at.sidebar.text_input] == ["signin.token"]


def test_oidc_sign_in_acts_for_the_identity_through_the_dashboards_proxy(env: Team,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THROTTLESCOPE_DASHBOARD_TOKEN", env.tokens["dash"])
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.secrets["auth"] = AUTH
    at.user = {"is_logged_in": False}
    at.run()
    assert [b.key for b in at.sidebar.button] == ["signin.login"]        # Streamlit's st.login
    at.user = {"is_logged_in": True, "email": "ana@acme.com"}
    at.switch_page("views/limits.py").run()
    assert not at.exception, [e.value for e in at.exception]
    signed_in = [s.value for s in at.sidebar.success][-1]
    assert signed_in == "Signed in as ana@acme.com (tenant admin of acme, through dash)"
    at.selectbox(key="namespace.target").set_value("acme/web").run()
    at.number_input(key="namespace.acme/web.publishRate.m").set_value(46).run()
    click(click(at, "namespace.review"), "limits.confirm")
    assert env.last()["actor"] == "ana@acme.com (via dash)"
    at.user = {"is_logged_in": True, "email": "bob@globex.com"}            # signed in, but not a principal
    at.run()
    assert any("signed in as 'bob@globex.com', but X-Original-Principal 'bob@globex.com' is not an active principal"
               in w.value for w in at.sidebar.warning), [w.value for w in at.sidebar.warning]


def test_single_user_mode_refuses_a_public_address(env: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THROTTLESCOPE_ADMIN_TOKEN", ADMIN)
    streamlit_config.set_option("server.address", "0.0.0.0")     # put back by conftest's loopback_dashboard
    at = limits_page()
    assert any("single-user mode is only for a dashboard that listens on a loopback address" in w.value
               for w in at.sidebar.warning)
    assert [t.key for t in at.sidebar.text_input] == ["signin.token"] and not at.sidebar.info
