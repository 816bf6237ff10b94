"""The several-applications workload's drivers (``benchmarks.shared.apps``): a driver that fails says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.shared import apps

pytestmark = pytest.mark.integration   # (a driver process of its own)


def test_a_driver_that_fails_stops_the_run_with_what_it_said(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"kind must be one of \('ours', 'static', 'redis', 'redis-sliced', "
                       r"'none'\), got 'nope'"):
        apps.run([apps.App("nope", "t/n/a")], "http://127.0.0.1:9", "token", tmp_path, tmp_path, 1.0)


def test_an_application_of_no_task_slots_is_refused_before_any_driver_starts() -> None:
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=r"slots must be a whole number > 0, got"):
            apps.App("ours", "t/n/a", slots=bad)
