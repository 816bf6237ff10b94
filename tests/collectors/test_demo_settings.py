"""The demo driver's settings: flags over THROTTLESCOPE_* variables, a bad one refused before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.demo import main
from protocol.settings import ControlPlaneAccess

pytestmark = pytest.mark.unit


def test_flags_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THROTTLESCOPE_URL", "http://cp.example:8000/")
    monkeypatch.setenv("THROTTLESCOPE_DATA_DIR", "/srv/cp")
    monkeypatch.setenv("THROTTLESCOPE_TOKEN", "p" * 20)
    s = ControlPlaneAccess.from_env()
    assert (s.url, s.data_dir, s.token, s.admin_token) == ("http://cp.example:8000", Path("/srv/cp"), "p" * 20, None)
    s = ControlPlaneAccess.from_flags({"url": "http://127.0.0.1:9", "data_dir": None},
                                      {"url": "--url", "data_dir": "--data-dir"})
    assert s.url == "http://127.0.0.1:9" and "p" * 20 not in repr(s)


def test_a_bad_flag_stops_the_demo_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--url", "cp.example:8000"])
    assert e.value.code == 2
    assert "--url must be the control plane's base URL, http(s)://host[:port][/path], got 'cp.example:8000'" in \
        capsys.readouterr().err
