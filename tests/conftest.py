"""Shared fixtures. Layers are pytest markers (unit, integration, spark, browser, prometheus): `-m unit` etc."""

from collections.abc import Iterator

import pytest

from limiter import ManualClock

LAYERS = ("unit", "integration", "spark", "browser", "prometheus")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test is in a layer: ``make test`` runs the unit layer (and the tests marked ``parallel``) on every core
    at once and the others one at a time, and ``-m unit`` picks a layer -- a test in none would run with the slow
    ones and in no layer's choice."""
    loose = [item.nodeid for item in items if not any(item.get_closest_marker(layer) for layer in LAYERS)]
    if loose:
        raise pytest.UsageError(f"{len(loose)} tests are in no layer; mark each one of {', '.join(LAYERS)} "
                                f"(a module's pytestmark, or a test's own mark): {', '.join(loose[:10])}")


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
