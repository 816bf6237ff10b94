"""A session's unmeasured warm-up is run once more when Spark fails it, and not a third time."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from benchmarks.shared.jobs import twice_if_failed

pytestmark = pytest.mark.unit


def _runs(failures: int) -> tuple[list[int], Callable[[], None]]:
    calls: list[int] = []

    def run() -> None:
        calls.append(len(calls))
        if len(calls) <= failures:
            raise RuntimeError("the streaming workload failed: java.nio.channels.ClosedChannelException")
    return calls, run


def test_a_warm_up_that_spark_failed_once_runs_again_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    calls, run = _runs(failures=1)
    twice_if_failed(run, "the session's warm-up stream")
    assert len(calls) == 2
    err = capsys.readouterr().err
    assert "the session's warm-up stream failed (the streaming workload failed: java.nio" in err
    assert "running it once more" in err


def test_a_warm_up_that_went_through_runs_once(capsys: pytest.CaptureFixture[str]) -> None:
    calls, run = _runs(failures=0)
    twice_if_failed(run, "the warm-up")
    assert len(calls) == 1 and capsys.readouterr().err == ""


def test_a_second_failure_is_raised_and_other_errors_are_not_retried() -> None:
    calls, run = _runs(failures=2)
    with pytest.raises(RuntimeError, match="ClosedChannelException"):
        twice_if_failed(run, "the warm-up")
    assert len(calls) == 2

    def broken() -> None:
        calls.append(-1)
        raise ValueError("a bad workload")
    with pytest.raises(ValueError):
        twice_if_failed(broken, "the warm-up")
    assert calls.count(-1) == 1
