"""deploy/: the dashboard's datasource and names, the rules (promtool check and unit tests), prometheus.yml."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from metrics.catalogue import CATALOGUE

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
