"""End to end in headless Chromium (Debian's, driven by Playwright): every page renders live data (screenshots
saved to docs/screenshots/), and a topic's publish limit changed on the Limits page shows up in the audit log and
is applied by a running participant."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.controlplane.conftest import ADMIN, REPO, clean_env, free_port

from .conftest import Participant, Stack, history_ready, start_stack, stop_process, stop_stack, wait_for

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = REPO / "docs" / "screenshots"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGES = {"overview": "Overview", "buckets": "Buckets", "fairness": "Fairness", "offload": "Offload and mutations"}
TOPIC = "acme/web/clicks"
RUNTIME = "tests.dashboard.runtime_participant"


class Dashboard:
    def __init__(self, stack: Stack, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = clean_env(**stack.env(), THROTTLESCOPE_DASHBOARD_REFRESH="2")
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


def _shoot(page, name: str) -> None:  # type: ignore[no-untyped-def]
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
        page.locator(".js-plotly-plot").first.wait_for(timeout=20000)
        assert page.get_by_text("Traceback").count() == 0
        if path == "overview":
            page.get_by_text("Participants alive").wait_for()
            page.get_by_text(re.compile(r"^\d+ s ago$")).first.wait_for()
        if path == "offload":
            page.wait_for_timeout(8000)     # the offload chart samples at each refresh
        _shoot(page, path)
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
    wait_for(lambda: any(b["name"] == TOPIC and b["level"] == "topic" and b["msgs"]["rate"] == pytest.approx(25, abs=1)
                         for b in admin.get("/v1/state/buckets").json()["totals"]), 20,
             "the participants' topic buckets at the new rate (their shares add up to it)")
    time.sleep(0.5)
    _shoot(page, "limits")
    page.close()
