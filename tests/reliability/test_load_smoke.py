"""The load benchmark's generator and figures work (a small load; no timing asserted: the figures, 1,000
participants for 60 s, are ``python -m benchmarks --only load``)."""

from __future__ import annotations

import math

import pytest

from benchmarks.bench_load import measure, rows_of

pytestmark = pytest.mark.integration


def test_load_generator_reports_for_every_participant_and_reads_the_control_plane() -> None:
    m = measure(participants=40, duration_s=3.0, warmup_s=1.5)
    assert m["sent"] == m["expected"] == 120 and m["ok"] == 120 and not m["errors"], m
    assert 0 < m["p50_ms"] <= m["p99_ms"] <= m["max_ms"] < 5000
    assert m["cp_cpu_pct"] > 0 and m["rss_end_mb"] > 10 and m["hwm_mb"] >= m["rss_end_mb"]
    assert math.isfinite(m["server_mean_ms"]) and m["server_mean_ms"] > 0
    rows = rows_of(m)
    assert len(rows) == 7 and all(set(r) == {"section", "name", "value", "unit", "goal", "ok", "note"} for r in rows)
    assert all((r["ok"] is None) == (r["goal"] == "") for r in rows)


def test_the_curve_s_reports_of_many_limits_without_the_usage_map_are_accepted() -> None:
    # as the project's participants report (bench_scale's curve); a field the control plane does not know would be
    # refused (422) and counted as an error
    m = measure(participants=20, duration_s=2.0, warmup_s=1.0, limits=30, usage_map=False)
    assert m["sent"] == m["expected"] == 40 and m["ok"] == 40 and not m["errors"], m


def test_participants_that_also_ask_for_grants_get_them_and_the_rows_say_so() -> None:
    m = measure(participants=20, duration_s=2.0, warmup_s=1.0, asks_per_s=3.0)
    # (an ask answered later than its period moves the next one: a slow host may fit a few fewer in the window)
    assert m["ok"] == 40 and 110 <= m["asks_sent"] == m["asks_ok"] <= 120 and not m["ask_errors"], m
    assert 0 < m["ask_p50_ms"] <= m["ask_p99_ms"] < 5000
    rows = rows_of(m)
    assert [r["name"].split(": ")[1] for r in rows[-2:]] == ["grant ask latency p99",
                                                             "grant asks answered with a grant"]
    assert rows[-1]["value"] == m["asks_ok"] / 120 and rows[-1]["ok"] is (m["asks_ok"] >= 0.999 * 120)
    assert all("3 grant asks a second each" in r["name"] for r in rows)
