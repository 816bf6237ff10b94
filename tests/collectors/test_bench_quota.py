"""benchmarks/bench_quota.py runs (quick) and reports what it promises; the numbers themselves are its business."""

import pytest

from benchmarks.bench_quota import run

pytestmark = pytest.mark.unit


def test_quick_run_reports_convergence_and_aggregate_error() -> None:
    rows = run(quick=True)
    assert all(set(r) == {"section", "name", "value", "unit", "goal", "ok", "note"} for r in rows)
    by_name = {r["name"]: r for r in rows}
    fair, proportional = by_name["fair: 70/30 -> 50/50"], by_name["proportional: 70/30 -> 50/50"]
    assert fair["value"] is not None and fair["value"] <= 8
    assert proportional["value"] is None                       # Pulsar's formula never gets there
    assert {r["section"] for r in rows} == {"convergence", "aggregate"}
    assert all(r["ok"] for r in rows), [(r["name"], r["value"]) for r in rows if not r["ok"]]
