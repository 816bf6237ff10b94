"""End to end in headless Chromium (Debian's, driven by Playwright): every page renders live data (with
``THROTTLESCOPE_SCREENSHOTS=1``, as ``make screenshots`` sets it, each is saved to docs/screenshots/), and a topic's
publish limit changed on the Limits page (single-user mode) shows up in the audit log and is applied by a running
participant. Then a dashboard for a team (token sign-in): a tenant admin of acme signs in, changes an acme
namespace's rate (applied, audited under its name) and finds globex's editors read-only; a viewer can change
nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect, sync_playwright

from dashboard import app
from tests.controlplane.conftest import ADMIN, REPO, clean_env, free_port

from .conftest import Participant, Stack, history_ready, start_stack, stop_process, stop_stack, wait_for

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = REPO / "docs" / "screenshots"
# the README's pictures are taken on demand, not by every run: a run of the suite left the checkout changed, and
# letting the charts draw for a picture took 25 s of it
SHOOT = os.environ.get("THROTTLESCOPE_SCREENSHOTS") == "1"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGES = {"overview": "Overview", "buckets": "Buckets", "fairness": "Fairness", "offload": "Offload and mutations"}
TOPIC = "acme/web/clicks"
RUNTIME = "tests.dashboard.runtime_participant"


class Dashboard:
    def __init__(self, stack: Stack, log: Path, **env_extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = clean_env(**(env_extra or stack.env()), THROTTLESCOPE_DASHBOARD_REFRESH="2")
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamlit", "run", "dashboard/app.py", "--server.headless", "true",
                 "--server.port", str(self.port), "--server.address", "127.0.0.1",
                 "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
                cwd=REPO, env=env, stdout=out, stderr=out)
        self.log = log

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"streamlit exited: {self.log.read_text()[-2000:]}")
        try:
            return httpx.get(self.url + "/_stcore/health", timeout=1).text == "ok"
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        stop_process(self.proc)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Dashboard, object]]:
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is missing: install Debian's chromium (apt-get install -y chromium)")

    base = tmp_path_factory.mktemp("browser")
    stack = start_stack(base, participants=0)
    stack.participants += [   # real participants: the runtime of collectors/ under load
        Participant(stack.cp, base / f"runtime{i}.log", command=[sys.executable, "-m", RUNTIME],
                    THROTTLESCOPE_APP_ID="app-e2e", THROTTLESCOPE_EXECUTOR_ID=str(i)) for i in (1, 2)]
    dash = Dashboard(stack, base / "streamlit.log")
    pw = context = None
    try:
        wait_for(dash.ready, 30, "streamlit to serve")
        wait_for(lambda: history_ready(stack.cp), 30, "throttled history")
        pw = sync_playwright().start()
        context = pw.chromium.launch_persistent_context(
            str(base / "chromium-profile"), executable_path=str(CHROMIUM), headless=True, args=ARGS,
            viewport={"width": 1440, "height": 1000})
        yield stack, dash, context
    finally:
        if context is not None:
            context.close()
        if pw is not None:
            pw.stop()
        dash.stop()
        stop_stack(stack)


def _open(context, url: str, title: str):  # type: ignore[no-untyped-def]
    page = context.new_page()
    page.goto(url)
    page.get_by_role("heading", name=title, exact=True).wait_for(timeout=20000)
    return page


def _shoot(page, name: str, settle_ms: int = 0) -> None:  # type: ignore[no-untyped-def]
    """Save ``page`` as docs/screenshots/``name``.png (with ``SHOOT`` only), ``settle_ms`` after it drew."""
    if not SHOOT:
        return
    page.wait_for_timeout(settle_ms)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.mouse.move(2, 2)           # no hover toolbar in the picture
    page.wait_for_timeout(1500)     # let plotly finish drawing
    height = page.evaluate("() => Math.max(...[...document.querySelectorAll('[data-testid=stMain] *')]"
                           ".map(e => e.getBoundingClientRect().bottom))")
    page.set_viewport_size({"width": 1440, "height": int(min(max(height + 40, 900), 4000))})
    page.wait_for_timeout(800)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def test_every_page_renders_live_data(browser) -> None:  # type: ignore[no-untyped-def]
    _, dash, context = browser
    for path, title in PAGES.items():
        page = _open(context, f"{dash.url}/{'' if path == 'overview' else path}", title)
        # (a visible one: a page's first chart may be one a rerun left hidden, e.g. a stale element Streamlit
        # keeps while it redraws)
        page.locator(".js-plotly-plot >> visible=true").first.wait_for(timeout=20000)
        assert page.get_by_text("Traceback").count() == 0
        if path == "overview":
            page.get_by_text("Participants alive").wait_for()
            page.get_by_text(re.compile(r"^\d+ s ago$")).first.wait_for()
            page.get_by_role("heading", name="Shared limits").wait_for(timeout=20000)
            page.get_by_text(re.compile(r": usage vs share$")).first.wait_for(timeout=20000)
        # (the offload chart samples at each refresh: its picture waits for a curve; the overview's shared limits
        # read each participant over its last 5-11 s: its picture waits for the start's burst to leave that span)
        _shoot(page, path, settle_ms={"offload": 8000, "overview": 12000}.get(path, 0))
        page.close()


def test_every_page_opens_at_its_own_url_and_the_root_at_the_overview(browser) -> None:  # type: ignore[no-untyped-def]
    _, dash, context = browser
    for name, title, _ in app.PAGES:       # a bookmark of any page, the first one's included
        page = _open(context, f"{dash.url}/{name}", title)
        page.wait_for_timeout(1500)         # the dialog comes with the first answer, if it comes
        assert page.get_by_text("Page not found").count() == 0, name
        assert page.url == f"{dash.url}/{name}"
        page.close()
    page = _open(context, dash.url, "Overview")
    page.wait_for_url(f"{dash.url}/overview", timeout=10000)
    expect(page.get_by_role("link", name="Overview")).to_have_attribute("href", re.compile(r"/overview$"))
    assert page.get_by_text("Page not found").count() == 0
    page.close()


def test_change_a_topic_limit_and_see_it_applied(browser) -> None:  # type: ignore[no-untyped-def]
    stack, dash, context = browser
    admin = stack.cp.client(ADMIN)
    before = admin.get("/v1/policies").json()["version"]
    page = _open(context, f"{dash.url}/limits", "Limits")
    page.get_by_role("tab", name="Topics").click()
    panel = page.get_by_role("tabpanel", name="Topics")
    expect(panel.get_by_role("combobox", name="Topic", exact=True)).to_have_value(TOPIC)
    limit = panel.get_by_role("spinbutton", name="Topic publish limit, messages per period")
    limit.fill("25")
    limit.press("Enter")
    page.wait_for_timeout(500)
    panel.get_by_role("button", name="Review change").click()
    page.get_by_text("Confirm the change").wait_for(timeout=10000)
    _shoot(page, "limits-confirm")
    page.get_by_role("button", name="Confirm").click()
    page.get_by_text(re.compile(r"Changed topic acme/web/clicks publishRate: policy version \d+")).wait_for(
        timeout=10000)
    version = admin.get("/v1/policies").json()["version"]
    assert version == before + 1
    assert admin.get(f"/admin/v2/persistent/{TOPIC}/publishRate").json()["publishThrottlingRateInMsg"] == 25
    entry = admin.get("/admin/v2/audit", params={"limit": 1}).json()["entries"][0]
    assert entry["policyVersion"] == version and entry["newValue"]["publishThrottlingRateInMsg"] == 25
    # the audit entry on the page, then the running participant on the new version (page and control plane)
    page.get_by_text(f"v{version}: PUT /admin/v2/persistent/{TOPIC}/publishRate").wait_for(timeout=10000)
    wait_for(lambda: all(p["appliedPolicyVersion"] == version
                         for p in admin.get("/v1/state/participants").json()["participants"]), 20,
             "the participant to apply the new version")
    page.get_by_text("2 of 2").wait_for(timeout=15000)
    page.get_by_text("all applied").wait_for(timeout=15000)
    wait_for(lambda: (rows := [b for b in admin.get("/v1/state/buckets").json()["buckets"]
                               if b["name"] == TOPIC and b["level"] == "topic"])
             and all(b["msgs"]["capacity"] == pytest.approx(25) for b in rows), 20,
             "every participant's topic pool at the new limit")
    time.sleep(0.5)
    _shoot(page, "limits")
    page.close()


@pytest.fixture(scope="module")
def team(browser, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A second dashboard on the same control plane, for a team: token sign-in, no admin token at hand."""
    stack, _, _ = browser
    admin = stack.cp.client(ADMIN)
    tokens = {name: admin.put(f"/admin/v2/principals/{name}", json={"role": role}).json()["token"]
              for name, role in (("acme-admin", "tenant-admin"), ("vic", "viewer"))}
    assert admin.put("/admin/v2/tenants/acme", json={"adminRoles": ["acme-admin"]}).status_code == 204
    assert admin.put("/admin/v2/namespaces/globex/web/publishRate",
                     json={"publishThrottlingRateInMsg": 30}).status_code == 204
    base = tmp_path_factory.mktemp("team")
    dash = Dashboard(stack, base / "streamlit.log", THROTTLESCOPE_URL=stack.cp.url,
                     THROTTLESCOPE_DASHBOARD_AUTH="token", THROTTLESCOPE_DATA_DIR=str(base))
    try:
        wait_for(dash.ready, 30, "the team's streamlit to serve")
        yield dash, tokens
    finally:
        dash.stop()


def _sign_in(context, dash: Dashboard, token: str, who: str):  # type: ignore[no-untyped-def]
    page = _open(context, f"{dash.url}/limits", "Limits")
    page.get_by_text("Sign in (in the sidebar) to change limits.").wait_for(timeout=20000)
    page.get_by_label("Your token", exact=True).fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_text(f"Signed in as {who}").wait_for(timeout=20000)
    return page


def _pick(page, combobox, option: str) -> None:  # type: ignore[no-untyped-def]
    """Open ``combobox`` and pick ``option``; again if a live refresh redrew the page under the click (the
    list then closes before the option is there)."""
    for _ in range(5):
        combobox.scroll_into_view_if_needed()
        combobox.click()
        choice = page.get_by_role("option", name=option)
        try:
            choice.wait_for(timeout=2000)
        except PlaywrightTimeout:
            continue
        choice.click()
        return
    raise AssertionError(f"the option {option!r} never showed")


def _read_only(panel, reason: str) -> None:  # type: ignore[no-untyped-def]
    panel.get_by_text(re.compile("Read-only for you: .*" + re.escape(reason))).wait_for(timeout=10000)
    expect(panel.get_by_role("button", name="Review change")).to_be_disabled()


def test_a_tenant_admin_changes_its_namespace_and_finds_other_tenants_read_only(  # type: ignore[no-untyped-def]
        browser, team) -> None:
    stack, _, context = browser
    dash, tokens = team
    admin = stack.cp.client(ADMIN)
    page = _sign_in(context, dash, tokens["acme-admin"], "acme-admin (tenant admin of acme)")
    page.get_by_role("tab", name="Namespaces").click()
    panel = page.get_by_role("tabpanel", name="Namespaces")
    expect(panel.get_by_role("combobox", name="Namespace", exact=True)).to_have_value("acme/web")
    limit = panel.get_by_role("spinbutton", name="Namespace publish limit, messages per period")
    limit.fill("35")
    limit.press("Enter")
    page.wait_for_timeout(500)
    panel.get_by_role("button", name="Review change").click()
    page.get_by_role("button", name="Confirm").click()
    page.get_by_text(re.compile(r"Changed namespace acme/web publishRate: policy version \d+")).wait_for(timeout=10000)
    version = admin.get("/v1/policies").json()["version"]
    assert admin.get("/admin/v2/namespaces/acme/web/publishRate").json()["publishThrottlingRateInMsg"] == 35
    entry = admin.get("/admin/v2/audit", params={"limit": 1}).json()["entries"][0]
    assert (entry["actor"], entry["policyVersion"]) == ("acme-admin", version)
    page.get_by_text(f"v{version}: PUT /admin/v2/namespaces/acme/web/publishRate by acme-admin").wait_for(
        timeout=10000)       # the audit log's latest line, under the tenant admin's name
    wait_for(lambda: all(p["appliedPolicyVersion"] == version
                         for p in admin.get("/v1/state/participants").json()["participants"]), 20,
             "the participants to apply the tenant admin's change")
    # globex: visible, read-only, with the control plane's reason
    _pick(page, panel.get_by_role("combobox", name="Namespace", exact=True), "globex/web")
    _read_only(panel, "it is not named in the adminRoles of tenant 'globex'")
    for tab, reason in (("Resource groups", "resource groups are super-user only"),
                        ("Broker and offload", "broker settings are super-user only"),
                        ("Mutation quotas", "mutation quotas are super-user only")):
        page.get_by_role("tab", name=tab).click()
        _read_only(page.get_by_role("tabpanel", name=tab), reason)
    page.get_by_role("tab", name="Namespaces").click()
    _shoot(page, "limits-tenant-admin")
    assert admin.get("/admin/v2/namespaces/globex/web/publishRate").json()["publishThrottlingRateInMsg"] == 30
    page.close()


def test_a_viewer_can_change_nothing(browser, team) -> None:  # type: ignore[no-untyped-def]
    stack, _, context = browser
    dash, tokens = team
    admin = stack.cp.client(ADMIN)
    total = admin.get("/admin/v2/audit").json()["total"]
    page = _sign_in(context, dash, tokens["vic"], "vic (viewer)")
    for tab in ("Resource groups", "Namespaces", "Topics", "Subscriptions", "Broker and offload", "Mutation quotas"):
        page.get_by_role("tab", name=tab).click()
        panel = page.get_by_role("tabpanel", name=tab)
        expect(panel.get_by_role("button", name="Review change")).to_be_disabled()
        panel.get_by_text(re.compile("Read-only for you: viewer 'vic' may not")).wait_for(timeout=10000)
    assert admin.get("/admin/v2/audit").json()["total"] == total
    page.get_by_role("button", name="Sign out").click()
    page.get_by_label("Your token", exact=True).wait_for(timeout=10000)
    page.close()
