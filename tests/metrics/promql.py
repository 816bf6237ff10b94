"""The PromQL shipped in deploy/: every expression of the Grafana dashboard and of the rules files."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "throttlescope.json"
DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources"
RULES = DEPLOY / "rules"
# Grafana's built-in interval variables, as a query run outside Grafana needs them
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m"}
NAME = re.compile(r"\b(?:throttlescope[_:]|brk_ledgeroffloader_)[A-Za-z0-9_:]*")


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels() -> list[dict[str, Any]]:
    """Every panel, rows' nested panels included, rows themselves excluded."""
    out: list[dict[str, Any]] = []
    for p in dashboard()["panels"]:
        if p.get("type") == "row":
            out += p.get("panels", [])
        else:
            out.append(p)
    return out


def grafana_to_promql(expr: str) -> str:
    for var, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
    return expr


def dashboard_exprs() -> list[str]:
    return [grafana_to_promql(t["expr"]) for p in panels() for t in p.get("targets", [])]


def _rule_values(key: str) -> list[str]:
    """The ``key:`` values of every rule in deploy/rules/*.yml (plain or folded ``>-`` scalars)."""
    values = []
    for path in sorted(RULES.glob("*.yml")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            m = re.match(rf"^(\s*)(?:- )?{key}:\s*(.*)$", line)
            if not m:
                continue
            indent, value = len(m.group(1)), m.group(2).strip()
            if value in (">-", ">", "|", "|-"):
                block = []
                for nxt in lines[i + 1:]:
                    if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                        break
                    block.append(nxt.strip())
                value = " ".join(b for b in block if b)
            values.append(value)
    return values


def rule_exprs() -> list[str]:
    return _rule_values("expr")


def recorded_names() -> list[str]:
    return _rule_values("record")


def fixed_datasource_uid() -> str:
    uids = re.findall(r"^\s*uid:\s*(\S+)\s*$", "".join(p.read_text() for p in sorted(DATASOURCES.glob("*.yml"))),
                      re.MULTILINE)
    assert len(uids) == 1, uids
    return uids[0]
