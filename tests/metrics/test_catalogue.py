"""The catalogue's conventions, and docs/metrics.md generated from it (so the two cannot drift)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from metrics.catalogue import BY_NAME, CATALOGUE, LABELS, PREFIX, render_markdown

from .conftest import REPO

pytestmark = pytest.mark.unit
SEED_OFFLOAD = {  # PIP-211's names and types, kept exactly (counters get _total from the client library)
    "brk_ledgeroffloader_ledger_offload_limited": "counter",
    "brk_ledgeroffloader_ledger_offload_time": "counter",
    "brk_ledgeroffloader_ledger_reading_max_bytes": "gauge",
    "brk_ledgeroffloader_offload_rate": "gauge",
    "brk_ledgeroffloader_offload_error": "counter",
}


def test_committed_reference_equals_the_generated_one() -> None:
    committed = (REPO / "docs" / "metrics.md").read_text()
    assert committed == render_markdown(), (
        "docs/metrics.md is out of date: run `.venv/bin/python -m metrics.catalogue --markdown > docs/metrics.md`")


def test_the_command_line_prints_the_reference() -> None:
    out = subprocess.run([sys.executable, "-m", "metrics.catalogue", "--markdown"], cwd=REPO, check=True,
                         capture_output=True, text=True, timeout=60)
    assert out.stdout == render_markdown() and out.stderr == ""


def test_every_metric_is_in_the_table() -> None:
    text = render_markdown()
    for m in CATALOGUE:
        assert f"| `{m.exposed}` |" in text


def test_names_prefix_units_and_counters() -> None:
    for m in CATALOGUE:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", m.name), m.name
        assert m.name.startswith(PREFIX) or m.name in SEED_OFFLOAD, m.name
        assert not m.name.endswith("_total"), "families are declared without _total"
        assert m.exposed.endswith("_total") == (m.type == "counter")
        if m.unit == "seconds" and m.name.startswith(PREFIX):
            assert m.name.endswith("_seconds"), m.name
        if m.unit == "bytes" and m.name.startswith(PREFIX):
            assert m.name.endswith("_bytes"), m.name
        assert not re.search(r"_(ms|millis|milliseconds|kb|mb|minutes)(_|$)", m.name), "base units only"
        assert m.help and "\n" not in m.help


def test_the_seed_offload_names_are_kept() -> None:
    assert {n: BY_NAME[n].type for n in SEED_OFFLOAD} == SEED_OFFLOAD
    assert BY_NAME["brk_ledgeroffloader_ledger_offload_limited"].exposed == \
        "brk_ledgeroffloader_ledger_offload_limited_total"


def test_labels_are_bounded_and_declared() -> None:
    used = {label for m in CATALOGUE for label in m.labels}
    assert used <= set(LABELS)
    assert not used & {"pid", "participant", "participant_id", "task", "host", "executor", "topic"}
    assert BY_NAME["throttlescope_dispatch_throttled_events"].labels == ("reason",)
    assert BY_NAME["throttlescope_resource_group_calculated_quota"].labels == \
        ("resource_group", "monitoring_class", "dimension")
    assert BY_NAME["throttlescope_mutation_throttle_time_seconds"].labels == ("user", "client_id")
