"""Every page has its own URL, the first one's included (the browser test opens each; here, what st.navigation is
given), and the app's root opens the overview."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from dashboard.app import PAGES
from tests.controlplane.conftest import free_port

from .conftest import APP

pytestmark = pytest.mark.unit


def test_every_page_is_served_at_its_name_and_the_root_is_a_hidden_page() -> None:
    at = AppTest.from_string(
        "import streamlit as st\n"
        "from dashboard.app import pages\n"
        "st.json([[p.url_path, p.title, p.visibility] for p in pages()])\n").run()
    assert not at.exception, [e.value for e in at.exception]
    got = json.loads(at.json[0].value)
    listed = [[name, title, "visible"] for name, title, _ in PAGES]
    # a default page is served at the root ("") whatever its url_path: the first page must not be it
    assert got == [["", PAGES[0][1], "hidden"], *listed]


def test_the_root_opens_the_overview(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THROTTLESCOPE_URL", f"http://127.0.0.1:{free_port()}")   # nothing listens: "down"
    at = AppTest.from_file(str(APP), default_timeout=30).run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.value for t in at.title] == ["Overview"]
    assert [m.value for m in at.metric if m.label == "Control plane"] == ["down"]
