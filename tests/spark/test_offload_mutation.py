"""The offload and mutation jobs on the session's SparkSession against the live control plane.

Both limits are per participant (PIP-211's flow permits are broker-wide; the mutation quota is per process
here), so rates are measured per participant with ``common.steady_rate``: between the first and the last
operation that waited for its limiter. The offload throttle refills per 1 s window, and a read that waited
starts at a window's start: the window [first, last) spans whole windows and leaves out the initial full one.
The KIP-599 bucket starts full (its burst, Q x S x W): from the first retried request on it admits exactly Q
per second.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.jobs import (
    MutationConfig,
    OffloadConfig,
    make_ledgers,
    plan_directories,
    run_mutation,
    run_offload,
)
from collectors.jobs.common import steady_rate
from collectors.jobs.offload import sha256_of
from tests.spark.conftest import ok, within

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def per_participant(events: list[tuple]) -> dict[str, tuple[list, list, list]]:
    out: dict[str, tuple[list, list, list]] = {}
    for participant, t, amount, waited in events:
        times, amounts, waits = out.setdefault(participant, ([], [], []))
        times.append(t)
        amounts.append(amount)
        waits.append(waited)
    return out


def test_offload_copies_verified_ledgers_at_the_flow_permits(spark, broker_settings, tmp_path: Path):
    limit = 2_000_000
    broker_settings("managedLedgerOffloadBrokerFlowPermitsPerSecond", limit)
    hot, cold = tmp_path / "hot", tmp_path / "cold"
    ledgers = make_ledgers(hot, 16, 1_500_000)
    config = OffloadConfig(hot=str(hot), cold=str(cold), chunk_bytes=32 * 1024, partitions=2)

    summary = run_offload(spark, config)

    assert summary["records_out"] == summary["verified"] == 16 and summary["bytes_out"] == 16 * 1_500_000
    for ledger in ledgers:
        digest = sha256_of(ledger)
        assert sha256_of(cold / ledger.name) == digest
        assert (cold / f"{ledger.name}.sha256").read_text().split()[0] == digest
    assert not [p for p in cold.iterdir() if p.name.startswith(".")]  # no temporary left behind
    timelines = per_participant(summary["events"])
    assert len(timelines) == 2
    for participant, (times, amounts, waited) in timelines.items():
        rate, first, last = steady_rate(times, amounts, waited, burst_gap_s=0.5)
        assert last - first >= 2.9, (participant, last - first)
        assert within(rate, limit), f"{participant}: {rate:.0f} B/s against {limit}"
        assert summary["participants"][participant]["reads_limited"] > 0

    again = run_offload(spark, config)  # idempotent: everything is offloaded already
    assert again["already_offloaded"] == 16 and again["records_in"] == again["records_out"] == 0


def test_mutation_creates_each_partition_once_under_the_quota(spark, admin, tmp_path: Path):
    quota = 40
    ok(admin.put("/admin/v2/quotas/mutations/etl-user/catalog-job",
                 json={"quotaPerSecond": quota, "samples": 1, "windowSeconds": 1}))
    config = MutationConfig(root=str(tmp_path / "catalog"), tables=2, days=7, hours=24, user="etl-user",
                            client_id="catalog-job", partitions=2)
    try:
        summary = run_mutation(spark, config)
    finally:
        admin.delete("/admin/v2/quotas/mutations/etl-user/catalog-job")

    planned = plan_directories(config)
    assert len(planned) == 336 and summary["records_out"] == 336 and summary["not_done"] == 0
    assert all((tmp_path / "catalog" / name).is_dir() for name in planned)
    assert sum(1 for p in (tmp_path / "catalog").glob("*/*/*") if p.is_dir()) == 336  # nothing else
    timelines = per_participant(summary["events"])
    assert len(timelines) == 2
    for participant, (times, amounts, waited) in timelines.items():
        rate, first, last = steady_rate(times, amounts, waited)
        assert last - first >= 2.5, (participant, last - first)
        assert within(rate, quota), f"{participant}: {rate:.2f} mutations/s against {quota}"
        assert summary["participants"][participant]["retries"] > 0

    again = run_mutation(spark, config)  # idempotent: every directory exists, none is charged again
    assert again["existing"] == 336 and again["records_out"] == 0 and not again["events"]
