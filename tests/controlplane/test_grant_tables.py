"""The grant book on a real Redis (``RedisTable``): replicas that share it answer as one book would."""

from __future__ import annotations

import os
import pickle
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.grant_tables import RedisTable, StateStoreUnavailable, loads
from controlplane.grants import MARKER, GrantBook
from controlplane.launcher import RedisServer
from limiter import ManualClock
from protocol import GrantAsk, PolicySet, ResourceGroup, limit_key

pytestmark = pytest.mark.integration

LIMIT = 1000.0
POLICIES = PolicySet(version=1, resourceGroups={"rg": ResourceGroup(publishRateInMsgs=LIMIT)})
KEY = limit_key("resource_group", "publish", "rg")


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def url(redis_server: RedisServer) -> str:
    import redis
    redis.Redis.from_url(redis_server.url).flushall()
    return redis_server.url


def ask(wants: float, rate: float = LIMIT, safe: float = 0.0) -> list[GrantAsk]:
    return [GrantAsk(level="resource_group", name="rg", direction="publish", wants_msgs=wants,
                     rate_msgs_per_s=rate, safe_msgs_per_s=safe)]


def test_replicas_on_one_redis_answer_exactly_as_one_book(url: str) -> None:
    clock = ManualClock()
    one = GrantBook(0.25, clock=clock.now_s)
    replicas = [GrantBook(0.25, clock=clock.now_s, table=RedisTable(url)) for _ in range(3)]
    # three participants ask in turn, each time through another replica, over three windows
    for step in range(60):
        pid = f"p{step % 3}"
        wants = 40.0 + 15 * (step % 5)
        alone = one.answer(pid, ask(wants), POLICIES)[0]
        shared = replicas[step % 2].answer(pid, ask(wants), POLICIES)[0]
        assert shared == alone, f"step {step}"
        clock.advance(0.05)
    assert replicas[2].view() == one.view()
    # a view reads the book a few limits at a time: the same from Redis as from one process
    assert replicas[1].limit_keys() == one.limit_keys() == [KEY]
    holders = {KEY: ["p0", "p1", "p2", "p9"]}
    assert replicas[2].shares(holders, POLICIES, keys=[KEY]) == one.shares(holders, POLICIES, keys=[KEY]) \
        == one.shares(holders, POLICIES)
    assert replicas[0].shares({}, POLICIES, keys=["resource_group:publish:other"]) == \
        one.shares({}, POLICIES, keys=["resource_group:publish:other"])


def test_concurrent_edits_through_two_tables_lose_no_update(url: str) -> None:
    tables = [RedisTable(url), RedisTable(url)]

    def append_many(table: RedisTable) -> None:
        for _ in range(150):
            table.edit(["k"], lambda limits, _learning: limits.setdefault("k", deque()).append(1), lambda: 0.0)

    threads = [threading.Thread(target=append_many, args=(t,)) for t in tables for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tables[0].read(lambda limits: len(limits["k"])) == 600


def test_a_blob_of_another_class_is_never_run_and_the_limit_starts_afresh(url: str, tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    import redis
    canary = tmp_path / "ran"
    table = RedisTable(url)

    class Exploit:
        def __reduce__(self):  # what a hostile writer of the Redis would store
            return (os.system, (f"touch {canary}",))

    store = redis.Redis.from_url(url)
    store.set(f"{table.prefix}limit:{KEY}", pickle.dumps(Exploit()))
    book = GrantBook(0.25, table=table)
    assert book.answer("a", ask(10), POLICIES)[0].msgs == pytest.approx(10)   # as a fresh window would
    assert not canary.exists()
    assert "system is not a grant-state class" in caplog.text and "starts afresh" in caplog.text
    assert loads(store.get(f"{table.prefix}limit:{KEY}")).msgs.granted(0.0) > 0   # overwritten by the answer
    store.set(f"{table.prefix}limit:{KEY}", b"\x80\x05truncated")             # and a truncated one, the same
    assert book.answer("b", ask(10), POLICIES)[0].msgs > 0


def test_an_unreachable_redis_is_a_clear_error() -> None:
    from controlplane.launcher import free_port
    url = f"redis://127.0.0.1:{free_port()}"
    book = GrantBook(0.25, table=RedisTable(url, timeout_s=0.5))
    with pytest.raises(StateStoreUnavailable, match=f"shared state store {url} cannot be used"):
        book.answer("a", ask(10), POLICIES)
    # and for a moment after, every request fails at once, not after a timeout of its own
    with pytest.raises(StateStoreUnavailable, match=r"failing fast for 0.5 s"):
        book.answer("b", ask(10), POLICIES)


def test_a_flushed_redis_makes_every_replica_re_learn_when_participants_may_be_out_there(url: str,
                                                                                       tmp_path: Path) -> None:
    import redis
    clock = ManualClock()
    (tmp_path / MARKER).touch()   # participants asked a moment ago
    a = GrantBook(0.25, tmp_path, clock=clock.now_s, table=RedisTable(url), learning_s=5.0)
    b = GrantBook(0.25, tmp_path, clock=clock.now_s, table=RedisTable(url), learning_s=5.0)
    a.answer("p1", ask(100, safe=300), POLICIES)
    assert a.learning and b.learning is a.learning   # b starts from its own marker too
    clock.advance(5.1)
    assert a.answer("p1", ask(100, safe=300), POLICIES)[0].msgs > 0
    assert not a.learning
    b.answer("p2", ask(100), POLICIES)
    assert not b.learning   # the epoch in Redis says so, whatever b thought at its start
    redis.Redis.from_url(url).flushall()   # a Redis restarted without its data
    grant = b.answer("p2", ask(100, safe=300), POLICIES)[0]
    assert b.learning and grant.msgs == 0   # no first burst: paced at the fallback rate it brings
    a.answer("p1", ask(100, safe=300), POLICIES)
    assert a.learning   # the other replica reads the same epoch


def test_without_a_recent_marker_a_fresh_redis_grants_at_once(url: str, tmp_path: Path) -> None:
    book = GrantBook(0.25, tmp_path, clock=ManualClock().now_s, table=RedisTable(url))
    assert book.answer("p1", ask(100), POLICIES)[0].msgs == pytest.approx(100)
    assert not book.learning


def test_a_pause_the_sink_asked_for_through_one_replica_holds_on_every_other(url: str) -> None:
    from tests.controlplane.test_grant_book import adaptive_policies, topic_ask
    clock = ManualClock()
    a, b = (GrantBook(0.25, clock=clock.now_s, wall=lambda: 1e6 + clock.now_s(), table=RedisTable(url))
            for _ in range(2))
    ps = adaptive_policies(1000)
    a.answer("p1", topic_ask(250), ps)
    clock.advance(1.0)
    a.answer("p1", topic_ask(1, ok=400), ps)
    a.answer("p1", topic_ask(1, throttled=20), ps)                               # refused: the rate is cut
    assert b.shares({}, ps)["topic:publish:t/ns/x"]["adaptive"]["ratePerSecond"] == pytest.approx(500)
    assert a.answer("p1", topic_ask(100, throttled=5, retry_after_s=3.0), ps)[0].pause_s == pytest.approx(3.0)
    assert b.answer("p2", topic_ask(100), ps)[0].pause_s == pytest.approx(3.0)   # another replica's asker too
    assert len(b.adaptive_trace()["topic:publish:t/ns/x"]) >= 1
