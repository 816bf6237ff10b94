"""The benchmark's Redis limiter (``benchmarks.shared.kinds``): its limit changes live and its window stays one."""

from __future__ import annotations

import pytest

from benchmarks.shared.kinds import _redis_acquire, redis_limit_key

pytestmark = pytest.mark.integration


def test_a_live_limit_counts_what_the_old_limit_let_through_in_the_window(redis_url: str) -> None:
    import redis
    from limits import parse
    from limits.storage import storage_from_string

    acquire = _redis_acquire(redis_url, 5, "run1", refresh_s=0.0)   # reads the live limit at every acquire
    for _ in range(5):
        acquire(1)
    with redis.Redis.from_url(redis_url) as client:
        client.set(redis_limit_key("run1"), 8)
    for _ in range(3):
        acquire(1)    # the raise lets 3 more through at once (a blocked acquire would hang the test)
    # one window whatever the limit: the 8 hits are counted together, so a cut now would refuse the next
    window_key = parse("5/second").key_for("run1")
    assert storage_from_string(redis_url).get_moving_window(window_key, 8, 1)[1] == 8
    assert not storage_from_string(redis_url).acquire_entry(window_key, 8, 1, amount=1)
