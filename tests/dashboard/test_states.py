"""The dashboard when there is nothing to show, when the control plane is down, and when nobody is signed in."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.controlplane.conftest import ADMIN, PARTICIPANT, ControlPlane, free_port, report

from .conftest import APP

pytestmark = [pytest.mark.integration, pytest.mark.parallel]
PAGES = ("overview", "buckets", "fairness", "offload", "limits")


@pytest.fixture(scope="module")
def empty_cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane that generated its own token files, with no participant and no change yet."""
    cp = ControlPlane(tmp_path_factory.mktemp("empty") / "data", tokens=False)
    try:
        yield cp.start()
    finally:
        cp.stop()


def pages() -> Iterator[tuple[str, AppTest]]:
    at = AppTest.from_file(str(APP), default_timeout=30).run()
    for page in PAGES:
        if page != "overview":
            at.switch_page(f"views/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
        yield page, at


def test_no_data_yet_says_what_to_start_and_single_user_mode_uses_the_data_dirs_token(
        empty_cp: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THROTTLESCOPE_URL", empty_cp.url)
    monkeypatch.setenv("THROTTLESCOPE_DATA_DIR", str(empty_cp.data_dir))
    monkeypatch.delenv("THROTTLESCOPE_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("THROTTLESCOPE_TOKEN", raising=False)
    for page, at in pages():
        mode = " ".join(i.value for i in at.sidebar.info)
        assert "Single-user local mode" in mode and "admin (super-user)" in mode, page
        assert "with the admin token from the data dir" in mode, page
        if page == "limits":
            assert not at.warning and not at.button(key="mq.review").disabled
            assert at.button(key="topic.review").disabled          # no topic known yet: type one
            at.text_input(key="topic.target.typed").set_value("acme/web/new").run()
            assert not at.button(key="topic.review").disabled
            applied = next(m for m in at.metric if m.label.startswith("Participants on policy version"))
            assert (applied.value, applied.delta) == ("0 of 0", "no participant")
            assert any(c.value == "No change yet." for c in at.caption)
        else:
            info = " ".join(i.value for i in at.info)
            assert "`make run`" in info and f"THROTTLESCOPE_URL={empty_cp.url}" in info, page
            assert "spark.executorEnv.THROTTLESCOPE_URL" in info, page
    overview = next(at for page, at in pages() if page == "overview")
    assert {m.label: m.value for m in overview.metric}["Participants alive"] == "0"


def test_a_control_plane_that_is_down_is_reported_on_every_page(monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{free_port()}"       # nothing listens there
    monkeypatch.setenv("THROTTLESCOPE_URL", url)
    monkeypatch.setenv("THROTTLESCOPE_ADMIN_TOKEN", ADMIN)
    for page, at in pages():
        assert any(f"The control plane at {url} does not answer" in e.value for e in at.error), page
        assert any("python -m controlplane" in i.value for i in at.info), page
        assert any(f"Control plane down: {url}" in e.value for e in at.sidebar.error), page
    overview = next(at for page, at in pages() if page == "overview")
    assert {m.label: m.value for m in overview.metric} == {"Control plane": "down"}


def test_reads_without_a_token_ask_to_sign_in_and_the_signed_in_token_is_used(
        empty_cp: ControlPlane, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    admin = (empty_cp.data_dir / "admin.token").read_text().strip()
    monkeypatch.setenv("THROTTLESCOPE_URL", empty_cp.url)
    monkeypatch.setenv("THROTTLESCOPE_DATA_DIR", str(tmp_path))      # no token files here
    monkeypatch.delenv("THROTTLESCOPE_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("THROTTLESCOPE_TOKEN", raising=False)
    at = AppTest.from_file(str(APP), default_timeout=30).run()
    assert not at.exception
    assert any("Sign in (in the sidebar) as a principal" in w.value for w in at.warning)
    assert "Participants alive" not in {m.label for m in at.metric}
    at.sidebar.text_input(key="signin.token").set_value("not-a-token-0123456789").run()
    at.sidebar.button(key="signin.submit").click().run()
    assert any("Sign-in refused: an unknown token" in e.value for e in at.sidebar.error)
    at.sidebar.text_input(key="signin.token").set_value(admin).run()
    at.sidebar.button(key="signin.submit").click().run()
    assert not at.exception and not at.warning and not at.sidebar.error
    assert {m.label: m.value for m in at.metric}["Participants alive"] == "0"


def test_stale_data_is_flagged_when_participants_stop_reporting(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    cp = ControlPlane(tmp_path / "data", ["--report-interval", "0.2"]).start()
    try:
        assert cp.client(PARTICIPANT).post("/v1/report", json=report()).json()["accepted"]
        time.sleep(1.0)       # > 3 report intervals: the participant expired, its last report is old
        monkeypatch.setenv("THROTTLESCOPE_URL", cp.url)
        monkeypatch.setenv("THROTTLESCOPE_ADMIN_TOKEN", ADMIN)
        at = AppTest.from_file(str(APP), default_timeout=30).run()
        assert not at.exception
        m = {x.label: (x.value, x.delta) for x in at.metric}
        assert m["Participants alive"] == ("0", "1 departed") and m["Data freshness"][1] == "stale"
        assert any(re.match(r"Data is stale: the last report arrived \d+ s ago \(reports are due every 0.2 s\)",
                            w.value) for w in at.warning), [w.value for w in at.warning]
    finally:
        cp.stop()
