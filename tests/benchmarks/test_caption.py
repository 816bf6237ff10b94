"""The results table's caption: what was re-measured since the full run, and where, without what was superseded."""

from __future__ import annotations

import pytest

from benchmarks.table import remeasured

pytestmark = pytest.mark.unit

BASE = "Measured 2026-11-26 14:06 UTC on 2 CPUs."


def _listed(caption: str) -> list[str]:
    return caption.split("Some rows re-measured: ", 1)[1].removesuffix(".").split("; ")


def _row(workload: str, where: str) -> dict[str, object]:
    return {"section": "shared", "name": f"{workload} [ours, {where}]: mean admitted / limit"}


def test_an_entry_keeps_only_the_workloads_no_newer_entry_re_measured_where_it_did() -> None:
    old = (f"{BASE} Some rows re-measured: the shared (a / b) rows on local[2] 2026-12-04 10:00-10:10 UTC, turns; "
           "the shared (a / b / c) rows on the cluster 2026-12-04 09:00-09:10 UTC; "
           "the quota rows 2026-11-28 10:00-10:47 UTC.")
    got = remeasured(old, "shared (a)", "on the cluster 2026-12-04 11:00-11:05 UTC")
    assert _listed(got) == ["the shared (a) rows on the cluster 2026-12-04 11:00-11:05 UTC",
                            "the shared (a / b) rows on local[2] 2026-12-04 10:00-10:10 UTC, turns",
                            "the shared (b / c) rows on the cluster 2026-12-04 09:00-09:10 UTC",
                            "the quota rows 2026-11-28 10:00-10:47 UTC"]
    # all its workloads re-measured where it measured them: the entry goes
    again = remeasured(got, "shared (b / c)", "on the cluster 2026-12-04 12:00-12:05 UTC")
    assert [e for e in _listed(again) if "09:00" in e] == []
    assert got.startswith(BASE) and again.startswith(BASE)


def test_an_entry_that_names_no_place_goes_once_every_place_of_the_table_was_re_measured() -> None:
    old = f"{BASE} Some rows re-measured: the shared (a / d) rows 2026-12-04 08:00 UTC."
    rows = [_row("a", "local[2]"), _row("a", "cluster"), _row("d", "local[2]")]
    # a runs in both places: re-measured on local[2] alone, the older entry still holds its cluster rows
    one = remeasured(old, "shared (a / d)", "on local[2] 2026-12-04 09:00-09:10 UTC", rows)
    assert _listed(one)[1] == "the shared (a) rows 2026-12-04 08:00 UTC"
    both = remeasured(one, "shared (a)", "on the cluster 2026-12-04 10:00-10:10 UTC", rows)
    assert [e for e in _listed(both) if "08:00" in e] == []
    # without the table's rows an entry of no place is taken to have measured both
    assert "the shared (a / d) rows 2026-12-04 08:00 UTC" in remeasured(old, "shared (d)", "on local[2] 09:00 UTC")


def test_the_same_is_written_out_when_the_entry_it_followed_goes() -> None:
    old = (f"{BASE} Some rows re-measured: the shared (a) rows on the cluster 2026-12-04 10:00-10:10 UTC, ours and "
           "Redis taking turns; the shared (b) rows on local[2] 2026-12-04 09:00-09:10 UTC, the same.")
    got = remeasured(old, "shared (a)", "on the cluster 2026-12-04 11:00-11:05 UTC, alone")
    assert _listed(got) == ["the shared (a) rows on the cluster 2026-12-04 11:00-11:05 UTC, alone",
                            "the shared (b) rows on local[2] 2026-12-04 09:00-09:10 UTC, ours and Redis taking turns"]
    # and said as "the same" where it is the description of the entry now before it
    same = remeasured(old, "shared (a)", "on the cluster 2026-12-04 11:00-11:05 UTC, ours and Redis taking turns")
    assert _listed(same)[1] == "the shared (b) rows on local[2] 2026-12-04 09:00-09:10 UTC, the same"


def test_a_whole_module_re_measured_still_replaces_its_workloads_entries() -> None:
    old = (f"{BASE} Some rows re-measured: the shared (a) rows on local[2] 2026-12-04 10:00 UTC; the adaptive rows "
           "2026-12-04 06:41-06:56 UTC.")
    assert _listed(remeasured(old, "shared", "2026-12-04 12:00-13:00 UTC")) == [
        "the shared rows 2026-12-04 12:00-13:00 UTC", "the adaptive rows 2026-12-04 06:41-06:56 UTC"]


def test_an_entry_whose_description_holds_semicolons_stays_one_entry() -> None:
    scale = ("the scale rows 2026-12-06 15:34-16:04 UTC (a scrape read series by series; the heap's size read once a "
             "second; the report pace stretching)")
    old = f"{BASE} Some rows re-measured: {scale}; the quota rows 2026-11-28 10:00-10:47 UTC."
    got = remeasured(old, "shared (a)", "on local[2] 2026-12-06 18:00-18:10 UTC")
    assert got == (f"{BASE} Some rows re-measured: the shared (a) rows on local[2] 2026-12-06 18:00-18:10 UTC; "
                   f"{scale}; the quota rows 2026-11-28 10:00-10:47 UTC.")
    # and it goes whole when its own rows are re-measured
    again = remeasured(got, "scale", "2026-12-07 09:00 UTC")
    assert "heap" not in again and again.endswith("the quota rows 2026-11-28 10:00-10:47 UTC.")


def test_a_whole_module_re_measured_in_one_place_keeps_what_its_entries_say_of_the_other() -> None:
    """``bench_shared --where local[2] --write-readme``: every shared row on local[2] is new, and the entries that
    said when the cluster's rows were measured stay -- for those rows alone."""
    old = (f"{BASE} Some rows re-measured: the shared (a / b) rows on the cluster 2026-12-06 19:47-20:21 UTC; the "
           "shared (a / c) rows on local[2] 2026-12-06 18:34-19:42 UTC; the shared (b) rows 2026-12-05 10:00 UTC; "
           "the adaptive rows 2026-12-04 06:41-06:56 UTC.")
    rows = [_row("a", "local[2]"), _row("a", "cluster"), _row("b", "local[2]"), _row("b", "cluster"),
            _row("c", "local[2]")]
    got = remeasured(old, "shared", "on local[2] 2026-12-07 09:19-10:38 UTC", rows)
    assert _listed(got) == ["the shared rows on local[2] 2026-12-07 09:19-10:38 UTC",
                            "the shared (a / b) rows on the cluster 2026-12-06 19:47-20:21 UTC",
                            "the adaptive rows 2026-12-04 06:41-06:56 UTC"]
    # and once the cluster's are re-measured too, only the newest entries stay
    both = remeasured(got, "shared", "on the cluster 2026-12-07 11:00-11:30 UTC", rows)
    assert _listed(both) == ["the shared rows on the cluster 2026-12-07 11:00-11:30 UTC",
                             "the shared rows on local[2] 2026-12-07 09:19-10:38 UTC",
                             "the adaptive rows 2026-12-04 06:41-06:56 UTC"]
