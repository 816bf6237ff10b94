"""Shared fixtures. Layers are pytest markers (unit, integration, spark, browser, prometheus): `-m unit` etc."""

from collections.abc import Iterator

import pytest

from limiter import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_s=100.0)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """Debian's ``redis-server`` on a free loopback port, for one test module (its keys are the module's to pick)."""
    from controlplane.launcher import RedisServer

    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.close()
