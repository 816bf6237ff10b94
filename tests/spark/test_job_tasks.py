"""The jobs' task bodies run in this process, without Spark and without a control plane (local limits):
deadlines stop them cleanly, and what they leave behind is never half-written or duplicated."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collectors.jobs import (
    DispatchConfig,
    MutationConfig,
    OffloadConfig,
    PublishConfig,
    make_backlog,
    make_ledgers,
)
from collectors.jobs.common import per_participant, split_evenly, steady_rate
from collectors.jobs.consumer import ConsumeSettings, consume_partition, read_cursor
from collectors.jobs.mutation import mutate_partition, plan_directories
from collectors.jobs.offload import offload_groups
from collectors.jobs.sender import SendSettings, send_partition
from collectors.runtime import participant, reset_participant
from limiter.policy import Level, Rate

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def local_participant(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("THROTTLESCOPE_URL", "THROTTLESCOPE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    reset_participant(goodbye=False)
    yield
    reset_participant(goodbye=False)


def test_publish_task_stops_at_the_deadline_and_writes_only_what_it_sent(tmp_path: Path):
    participant().limits.set_topic_policy(Level.TOPIC, "t/ns/slow", Rate(200))
    ids = list(range(2000))
    table = pa.table({"id": ids, "topic": ["t/ns/slow", "t/ns/fast"] * 1000, "payload": ["x" * 10] * 2000})
    settings = SendSettings(str(tmp_path), batch_rows=20, producers_per_topic=2, deadline_at=time.time() + 1.0)
    started = time.time()
    rows = pa.Table.from_batches(list(send_partition(iter(table.to_batches(max_chunksize=300)), settings)))
    assert time.time() - started < 2.0  # a blocked acquire gave up at the deadline
    streams = [r for r in rows.to_pylist() if r["kind"] == "stream"]
    written = pq.read_table(tmp_path / "part-00000.parquet").to_pandas()
    assert sorted(written.id) == sorted(set(written.id))
    slow, fast = (written[written.topic == t] for t in ("t/ns/slow", "t/ns/fast"))
    assert len(fast) == 1000 and 150 <= len(slow) < 1000  # 200/s for about a second, plus the initial bucket
    assert sum(s["records_out"] for s in streams) == len(written)
    assert sum(s["records_in"] - s["records_out"] for s in streams) == 1000 - len(slow)
    assert not list(tmp_path.glob(".*"))


def test_dispatch_task_resumes_from_its_cursor(tmp_path: Path):
    participant().dispatch.limiter(Level.BROKER).rate = Rate(50)
    make_backlog(tmp_path / "backlog", {"t/ns/topic": 1}, entries=100, msgs_per_entry=4)
    item = {"topic": "t/ns/topic", "path": str(tmp_path / "backlog/t/ns/topic/partition-0.parquet")}
    seen: list[int] = []
    for _ in range(2):
        settings = ConsumeSettings(str(tmp_path / "out"), ("s",), precise=True, backoff_s=0.02,
                                   deadline_at=time.time() + 1.2)
        (result,) = consume_partition(iter([item]), settings)
        assert result["cursor_start"] == len(seen) and result["msgs"] > 0
        segment = pq.read_table(tmp_path / "out/s/t/ns/topic" / f"segment-{result['cursor_start']:08d}.parquet")
        seen += segment.column("entry").unique().to_pylist()
    assert seen == list(range(len(seen))) and read_cursor(tmp_path / "out", "s", "t/ns/topic") == len(seen)


def test_offload_task_stopped_mid_copy_leaves_no_partial_ledger(tmp_path: Path):
    # the throttle's windows are fixed seconds, at a phase of their own: the first ledger (100 kB) fits the window
    # the copy starts in (or, if earlier reads used some of it, the next, within 1 s), and the second (250 kB)
    # takes two and a half windows after that one, done no sooner than 2 s -- so the deadline at 1.5 s falls
    # between the two at any phase (two ledgers of 150 kB and a deadline of 1 s: the first done anywhere in 0-1 s,
    # the second as early as 1 s -- a CI run stopped the first)
    participant().offload_throttle.bytes_per_s = 100_000
    make_ledgers(tmp_path / "hot", 1, 100_000)
    (tmp_path / "hot" / "ledger-000001.bin").write_bytes(bytes(range(250)) * 1_000)
    config = OffloadConfig(hot=str(tmp_path / "hot"), cold=str(tmp_path / "cold"), chunk_bytes=10_000)
    (result,) = offload_groups(iter([["ledger-000000.bin", "ledger-000001.bin"]]), config, time.time() + 1.5)
    assert [c["ledger"] for c in result["copied"]] == ["ledger-000000.bin"]
    assert result["left"] == ["ledger-000001.bin"] and result["reads_limited"] > 0
    assert sorted(p.name for p in (tmp_path / "cold").iterdir()) == ["ledger-000000.bin", "ledger-000000.bin.sha256"]


def test_mutation_task_under_a_local_quota(tmp_path: Path):
    participant().mutation_quotas.apply({("u", "c"): {"quota_per_s": 50, "samples": 1}})
    config = MutationConfig(root=str(tmp_path), tables=1, days=4, hours=24, user="u", client_id="c")
    requests = [[name] for name in plan_directories(config)]
    (result,) = mutate_partition(iter(requests), config, float("inf"))
    assert result["done"] == 96 and result["retries"] > 0
    times, amounts, waited = zip(*[(t, n, w) for t, n, w in result["events"]], strict=True)
    assert abs(steady_rate(times, amounts, waited)[0] - 50) <= 2.5


def test_configs_and_helpers_reject_nonsense():
    with pytest.raises(ValueError, match="needs a duration_s"):
        PublishConfig(output="o", source="rate", duration_s=None)
    with pytest.raises(ValueError, match=r"topic_weights must be a whole number > 0, got 0"):
        PublishConfig(output="o", topics=("a/b/c", "a/b/d"), topic_weights=(2, 0))
    weighted = PublishConfig(output="o", topics=("a/b/c", "a/b/d"), topic_weights=(1, 3))
    assert weighted.topic_cycle() == ("a/b/c", "a/b/d", "a/b/d", "a/b/d")
    assert PublishConfig(output="o", topics=("a/b/c", "a/b/d")).topic_cycle() == ("a/b/c", "a/b/d")
    by_limits = PublishConfig(output="o", topics=("a/b/c", "a/b/d"), topic_weights=(150, 450))
    assert by_limits.topic_cycle() == weighted.topic_cycle()   # limits as weights: the same short cycle
    with pytest.raises(ValueError, match="mutually exclusive"):
        DispatchConfig(backlog="b", output="o", precise=True, count_entries=True)
    with pytest.raises(ValueError, match="different directories"):
        OffloadConfig(hot="x", cold="x")
    with pytest.raises(ValueError, match="did not bind"):
        steady_rate([1.0, 2.0], [1, 1], [False, True])
    groups = split_evenly([5, 1, 4, 2, 3], 2, weight=float)
    assert sorted(sum(g) for g in groups) == [7, 8]


def test_per_participant_sums_tasks_and_rates_over_each_participants_event_span():
    rows = [{"participant": "a", "done": 3, "events": [(10.0, 1), (11.0, 1)]},
            {"participant": "a", "done": 5, "events": [(12.0, 1), (14.0, 1)]},
            {"participant": "b", "done": 2, "events": []},
            {"participant": "c", "done": 1, "events": [(5.0, 1)]}]

    def add(agg, r):
        agg["done"] += r["done"]

    got = per_participant(rows, {"done": 0}, add, "done", "done_per_s", 2)
    assert got == {"a": {"done": 8, "done_per_s": 2.0},      # 8 over 10.0 .. 14.0
                   "b": {"done": 2, "done_per_s": None},     # no events: no span
                   "c": {"done": 1, "done_per_s": None}}     # one instant: no span
