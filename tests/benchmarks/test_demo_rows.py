"""benchmarks.bench_demo: the demo's figures from two scrapes, judged as the goals say."""

from __future__ import annotations

import pytest

from benchmarks.bench_demo import _rows

pytestmark = pytest.mark.unit

RG = ("resource_group", "publish", "rg-etl")
ACME = ("tenant", "publish", "acme")
BLOBS = ("topic", "publish", "initech/data/blobs")


def scrapes(admitted: dict, throttled: dict, span_s: float = 60.0, nbytes: dict | None = None):
    first = {"admitted_msgs": {}, "admitted_bytes": {}, "throttle_s": {}}
    last = {"admitted_msgs": {k: v * span_s for k, v in admitted.items()},
            "admitted_bytes": {k: v * span_s for k, v in (nbytes or {}).items()},
            "throttle_s": {k: v * span_s for k, v in throttled.items()}}
    return first, last


def by_name(rows: list[dict]) -> dict[str, dict]:
    return {r["name"]: r for r in rows}


def test_a_binding_limit_must_admit_95_percent() -> None:
    seeded = {RG: (400.0, -1.0), ACME: (600.0, -1.0)}
    first, last = scrapes({RG: 390.0, ACME: 317.0}, {RG: 3.8, ACME: 4.5})
    rows = by_name(_rows(seeded, first, last, 60.0))
    assert rows["resource_group rg-etl (publish, 400 msgs/s): admitted / limit"]["ok"] is True
    assert rows["tenant acme (publish, 600 msgs/s): admitted / limit"]["value"] == pytest.approx(317 / 600)
    assert rows["tenant acme (publish, 600 msgs/s): admitted / limit"]["ok"] is False   # stranded quota
    # and throttled heavily far below its limit: the second goal fails too
    assert rows["tenant acme (publish, 600 msgs/s): throttle time"]["ok"] is False


def test_a_limit_with_room_must_not_throttle() -> None:
    seeded = {ACME: (600.0, -1.0)}
    quiet = by_name(_rows(seeded, *scrapes({ACME: 300.0}, {ACME: 0.05}), 60.0))
    assert quiet["tenant acme (publish, 600 msgs/s): throttle time"]["ok"] is True
    assert quiet["tenant acme (publish, 600 msgs/s): admitted / limit"]["ok"] is None   # not binding: no goal


def test_a_bytes_only_limit_is_read_in_bytes() -> None:
    seeded = {BLOBS: (-1.0, 100_000.0)}
    rows = by_name(_rows(seeded, *scrapes({BLOBS: 5.0}, {BLOBS: 2.0}, nbytes={BLOBS: 98_000.0}), 60.0))
    ratio = rows["topic initech/data/blobs (publish, 100000 bytes/s): admitted / limit"]
    assert ratio["value"] == pytest.approx(0.98)
    assert ratio["ok"] is True


def test_a_dispatch_limit_is_shown_without_a_goal() -> None:
    """The demo's dispatch job runs a third of the time: its 60-s mean is shown, never judged."""
    key = ("topic", "dispatch", "demo/backlog/events")
    rows = by_name(_rows({key: (200.0, -1.0)}, *scrapes({key: 60.0}, {key: 3.0}), 60.0))
    ratio = rows["topic demo/backlog/events (dispatch, 200 msgs/s): admitted / limit"]
    assert ratio["value"] == pytest.approx(0.3) and ratio["ok"] is None and "30 s" in ratio["note"]
    assert rows["topic demo/backlog/events (dispatch, 200 msgs/s): throttle time"]["ok"] is None
