"""Shared fixtures. Layers are pytest markers (unit, integration, spark, browser, prometheus): `-m unit` etc."""

import pytest

from limiter import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_s=100.0)
