"""deploy/: the dashboard's datasource and names, the rules (promtool check and unit tests), prometheus.yml."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from metrics.catalogue import CATALOGUE
from metrics.scrape_config import main as scrape_config_main
from metrics.scrape_config import render, scrape_target

from . import promql
from .conftest import DEPLOY

KNOWN = {sample for m in CATALOGUE for sample in m.samples} | set(promql.recorded_names())
LEVELS = ("broker", "resource_group", "tenant", "namespace", "topic", "subscription")


@pytest.mark.unit
def test_every_panel_and_query_uses_the_provisioned_datasource() -> None:
    uid = promql.fixed_datasource_uid()
    assert uid == "throttlescope-prometheus"
    panels = promql.panels()
    assert panels
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": uid}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": uid}, panel["title"]


@pytest.mark.unit
def test_the_dashboard_has_panels_per_level_queues_groups_offload_and_mutations() -> None:
    rows = [p["title"] for p in promql.dashboard()["panels"] if p["type"] == "row"]
    exprs = promql.dashboard_exprs()
    for level in LEVELS:
        assert any(f'level="{level}"' in e for e in exprs), level
    for topic in ("Fairness queues", "Resource groups", "Offload", "Mutation quotas", "Dispatch"):
        assert any(r.startswith(topic) for r in rows), topic
    ids = [p["id"] for p in promql.dashboard()["panels"]]
    assert len(ids) == len(set(ids))


@pytest.mark.unit
def test_every_name_in_the_dashboard_and_rules_is_a_catalogue_sample_or_a_recorded_series() -> None:
    exprs = promql.dashboard_exprs() + promql.rule_exprs()
    assert len(promql.rule_exprs()) == len(promql.recorded_names()) + 4  # 4 alerts
    for expr in exprs:
        for name in promql.NAME.findall(expr):
            assert name in KNOWN, f"{name!r} in {expr!r} is neither in metrics/catalogue.py nor recorded"
    used = {n for e in exprs for n in promql.NAME.findall(e)}
    assert not set(promql.recorded_names()) - used, "a recorded series nobody uses"


@pytest.mark.unit
def test_prometheus_yml_scrapes_the_control_plane_with_the_participant_token() -> None:
    text = (DEPLOY / "prometheus.yml").read_text()
    assert 'targets: ["127.0.0.1:8000"]' in text
    assert "job_name: throttlescope" in text  # the alerts select job="throttlescope"
    assert "credentials_file: ../data/participant.token" in text
    assert "rules/*.yml" in text


def deploy_copy(tmp: Path, token: str) -> Path:
    """deploy/ copied next to a data directory holding the participant token, as in the repository."""
    shutil.copytree(DEPLOY, tmp / "deploy")
    (tmp / "data").mkdir()
    (tmp / "data" / "participant.token").write_text(token + "\n")
    return tmp / "deploy"


def _run(cmd: list[str], cwd: Path) -> str:
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout + out.stderr


@pytest.mark.prometheus
def test_promtool_checks_the_rules(promtool: str) -> None:
    out = _run([promtool, "check", "rules", *sorted(str(p) for p in (DEPLOY / "rules").glob("*.yml"))], DEPLOY)
    assert "SUCCESS: 4 rules found" in out and f"SUCCESS: {len(promql.recorded_names())} rules found" in out


@pytest.mark.prometheus
def test_promtool_rules_unit_tests_pass(promtool: str) -> None:
    out = _run([promtool, "test", "rules", "rules/tests/rules_test.yml"], DEPLOY)
    assert "SUCCESS" in out


@pytest.mark.prometheus
def test_promtool_checks_the_shipped_prometheus_config(promtool: str, tmp_path: Path) -> None:
    deploy = deploy_copy(tmp_path, "participant-token-for-tests-0123")
    out = _run([promtool, "check", "config", "prometheus.yml"], deploy)
    assert "SUCCESS" in out


@pytest.mark.unit
@pytest.mark.parametrize(("host", "port", "target"), [
    ("127.0.0.1", "8000", "127.0.0.1:8000"), ("0.0.0.0", 9000, "127.0.0.1:9000"), ("::", "8000", "[::1]:8000"),
    ("::1", "8000", "[::1]:8000"), ("[fe80::1]", "81", "[fe80::1]:81"), ("cp.internal", "8000", "cp.internal:8000")])
def test_the_scrape_target_is_where_the_control_plane_listens(host: str, port: str, target: str) -> None:
    assert scrape_target(host, port) == target


@pytest.mark.unit
@pytest.mark.parametrize(("host", "port", "message"), [
    ("127.0.0.1", "eighty", "port must be a whole number 1-65535, got 'eighty'"),
    ("127.0.0.1", "0", "port must be a whole number 1-65535, got '0'"),
    ("127.0.0.1", "70000", "port must be a whole number 1-65535, got '70000'"),
    (" ", "8000", "the control plane's host is empty")])
def test_a_bad_host_or_port_is_refused_naming_what_is_allowed(host: str, port: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        scrape_target(host, port)


@pytest.mark.unit
def test_the_rendered_config_changes_the_target_token_and_rules_only(tmp_path: Path) -> None:
    shipped = (DEPLOY / "prometheus.yml").read_text()
    text = render(shipped, "127.0.0.1:9123", tmp_path / "data" / "participant.token", DEPLOY / "rules")
    assert text.startswith("# Written by python -m metrics.scrape_config")
    text = text.split("\n", 2)[2]   # below its two lines saying so
    assert 'targets: ["127.0.0.1:9123"]' in text and '"127.0.0.1:8000"' not in text
    assert f"credentials_file: {tmp_path / 'data' / 'participant.token'}" in text
    assert f"- {DEPLOY / 'rules' / '*.yml'}" in text
    changed = [(a, b) for a, b in zip(shipped.splitlines(), text.splitlines(), strict=True) if a != b]
    assert len(changed) == 3, changed
    with pytest.raises(ValueError, match="no longer has 'credentials_file: ../data/participant.token' exactly once"):
        render(shipped.replace("../data/", "/srv/"), "127.0.0.1:8000", tmp_path / "t", DEPLOY / "rules")


@pytest.mark.unit
def test_the_command_refuses_a_bad_port_and_writes_nothing(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        scrape_config_main(["--port", "80a", "--out", str(tmp_path / "p.yml")])
    assert e.value.code == 2 and "got '80a'" in capsys.readouterr().err
    assert not (tmp_path / "p.yml").exists()


@pytest.mark.prometheus
def test_promtool_checks_the_config_written_for_other_settings(promtool: str, tmp_path: Path) -> None:
    data = tmp_path / "elsewhere"
    data.mkdir()
    (data / "participant.token").write_text("participant-token-for-tests-0123\n")
    out = tmp_path / "run" / "prometheus.yml"
    assert scrape_config_main(["--port", "8123", "--data-dir", str(data), "--out", str(out)]) == 0
    said = _run([promtool, "check", "config", str(out)], tmp_path)
    rule_files = len(list((DEPLOY / "rules").glob("*.yml")))   # found by their absolute path, from elsewhere
    assert f"SUCCESS: {rule_files} rule files found" in said and "is valid prometheus config" in said, said
