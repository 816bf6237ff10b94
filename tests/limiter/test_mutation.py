import math
import pickle
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from limiter.clock import ManualClock
from limiter.mutation import (
    DEFAULT,
    MutationQuota,
    MutationQuotaConfig,
    MutationQuotaRegistry,
    ThrottlingQuotaExceeded,
    call_with_mutation_quota,
)

pytestmark = pytest.mark.unit


def test_seed_worked_example_burst_of_560_leaves_minus_60_and_12_s(clock):
    q = MutationQuota(quota_per_s=5, window_s=1.0, samples=100, strict=True, clock=clock)
    assert q.burst == 500 and q.tokens() == 500
    assert q.record(560) == 0           # admitted: the bucket was >= 0, and the request that overdraws is not throttled
    assert q.tokens() == pytest.approx(-60)     # the debt stays visible
    assert q.throttle_time_s() == 0             # strict: nothing was rejected yet
    with pytest.raises(ThrottlingQuotaExceeded) as info:
        q.record(1)
    assert info.value.throttle_time_s == pytest.approx(12.0)
    assert q.tokens() == pytest.approx(-60)  # nothing recorded
    assert q.throttle_time_s() == pytest.approx(12.0)
    clock.advance(6)
    assert q.throttle_time_s() == pytest.approx(6.0)
    with pytest.raises(ThrottlingQuotaExceeded) as info:
        q.record(1)
    assert info.value.throttle_time_s == pytest.approx(6.0)
    clock.advance(6)
    assert q.throttle_time_s() == 0 and q.tokens() == pytest.approx(0)
    assert q.record(1) == 0  # K = 0 >= 0: admitted
    assert q.tokens() == pytest.approx(-1) and q.throttle_time_s() == 0


# Kafka's own cases (core/src/test/scala/unit/kafka/server/ControllerMutationQuotaManagerTest.scala): a quota of
# 10/s over 10 samples of 1 s, so a bucket of 100 tokens.
def test_kafka_strict_controller_mutation_quota_violation(clock):
    q = MutationQuota(quota_per_s=10, window_s=1.0, samples=10, strict=True, clock=clock)
    assert q.record(90) == 0 and q.throttle_time_s() == 0          # tokens 10: accepted, not exhausted
    assert q.record(90) == 0 and q.throttle_time_s() == 0          # tokens -80: accepted, throttle time 0
    assert q.tokens() == pytest.approx(-80)
    with pytest.raises(ThrottlingQuotaExceeded) as info:            # no tokens: rejected at once
        q.record(90)
    assert info.value.throttle_time_s == pytest.approx(8.0) == q.throttle_time_s()
    clock.advance(5)
    assert q.throttle_time_s() == pytest.approx(3.0)                # adjusted with time


def test_kafka_permissive_controller_mutation_quota_violation(clock):
    q = MutationQuota(quota_per_s=10, window_s=1.0, samples=10, strict=False, clock=clock)
    assert q.record(90) == 0 and q.throttle_time_s() == 0
    assert q.record(90) == pytest.approx(8.0) == q.throttle_time_s()
    assert q.record(90) == pytest.approx(17.0) == q.throttle_time_s()   # accepted even though exhausted
    clock.advance(5)
    assert q.throttle_time_s() == pytest.approx(12.0)


def test_kafka_quota_manager_spike_is_accepted_then_the_next_waits_its_throttle_time(clock):
    q = MutationQuota(quota_per_s=10, window_s=1.0, samples=10, clock=clock)
    for _ in range(10):                                   # under the quota: never throttled
        assert q.record(10) == 0
        clock.advance(1)
    assert q.record(110) == 0                             # 100 tokens: the spike is accepted, not throttled
    with pytest.raises(ThrottlingQuotaExceeded) as info:  # -10 tokens: the next spike waits 10 / 10 = 1 s
        q.record(110)
    assert info.value.throttle_time_s == pytest.approx(1.0)
    clock.advance(info.value.throttle_time_s)
    assert q.record(110) == 0                             # retried after the throttle time: accepted


def test_design_example_and_kafka_defaults(clock):
    assert MutationQuota(quota_per_s=10, window_s=1.0, samples=10, clock=clock).burst == 100
    default = MutationQuota(quota_per_s=10, clock=clock)
    assert (default.samples, default.window_s, default.strict, default.burst) == (11, 1.0, True, 110)


def test_refill_is_q_per_second_and_capped_at_burst(clock):
    q = MutationQuota(quota_per_s=10, samples=10, clock=clock)
    q.record(100)
    assert q.tokens() == pytest.approx(0)
    clock.advance(2.5)
    assert q.tokens() == pytest.approx(25)
    clock.advance(1000)
    assert q.tokens() == pytest.approx(100)


def test_permissive_records_and_never_rejects(clock):
    q = MutationQuota(quota_per_s=5, samples=100, strict=False, clock=clock)
    assert q.record(560) == pytest.approx(12.0)
    assert q.record(40) == pytest.approx(20.0)
    assert q.tokens() == pytest.approx(-100)
    clock.advance(4)
    assert q.throttle_time_s() == pytest.approx(16.0)


def test_strict_rejects_only_below_zero_and_one_request_may_overdraw(clock):
    q = MutationQuota(quota_per_s=1, samples=10, clock=clock)
    q.record(9)
    q.record(1)  # exactly 0 left after this one
    q.record(50)  # K was 0 >= 0: admitted even though it overdraws by 50
    assert q.tokens() == pytest.approx(-50)
    with pytest.raises(ThrottlingQuotaExceeded):
        q.record(1)


def test_negative_n_unrecords_capped_at_burst_and_is_never_rejected(clock):
    q = MutationQuota(quota_per_s=5, samples=100, clock=clock)
    q.record(560)
    assert q.record(-30) == 0  # strict, negative balance, but un-recording is allowed (and never throttled)
    assert q.tokens() == pytest.approx(-30)
    q.record(-10_000)
    assert q.tokens() == pytest.approx(500)


def test_live_quota_change_settles_old_rate_then_recomputes_burst_and_caps(clock):
    q = MutationQuota(quota_per_s=10, samples=10, clock=clock)
    q.record(100)
    clock.advance(1)  # +10 at the old rate
    q.quota_per_s = 1
    assert q.burst == 10 and q.tokens() == pytest.approx(10)
    clock.advance(1)
    assert q.tokens() == pytest.approx(10)  # capped at the new burst
    q.quota_per_s = 20
    assert q.burst == 200 and q.tokens() == pytest.approx(10)  # no tokens invented
    clock.advance(1)
    assert q.tokens() == pytest.approx(30)


def test_debt_is_kept_across_a_live_change(clock):
    q = MutationQuota(quota_per_s=5, samples=100, clock=clock)
    q.record(560)
    q.quota_per_s = 10
    assert q.tokens() == pytest.approx(-60)
    with pytest.raises(ThrottlingQuotaExceeded) as info:
        q.record(1)
    assert info.value.throttle_time_s == pytest.approx(6.0)    # repaid at the new rate


def test_mutation_rate_is_recorded_over_samples_times_window(clock):
    q = MutationQuota(quota_per_s=5, samples=100, clock=clock)
    q.record(560)
    assert q.mutation_rate_per_s() == pytest.approx(5.6)  # the KIP's average rate R
    clock.advance(50)
    q.record(-60)  # un-recording lowers the rate too
    assert q.mutation_rate_per_s() == pytest.approx(5.0)
    clock.advance(51)
    assert q.mutation_rate_per_s() == pytest.approx(-0.6)  # only the un-record is left in the window
    clock.advance(100)
    assert q.mutation_rate_per_s() == 0


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "5", True, None])
def test_bad_quota_is_rejected_with_what_is_allowed(clock, bad):
    with pytest.raises(ValueError, match="quota_per_s must be a finite number > 0"):
        MutationQuota(quota_per_s=bad, clock=clock)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"samples": 0}, "samples must be an integer >= 1"), ({"samples": 1.5}, "samples must be an integer"),
    ({"window_s": 0}, "window_s must be"), ({"window_s": math.nan}, "window_s must be"),
    ({"strict": "yes"}, "strict must be True or False"),
])
def test_bad_config_is_rejected(clock, kwargs, message):
    with pytest.raises(ValueError, match=message):
        MutationQuota(quota_per_s=1, clock=clock, **kwargs)


@pytest.mark.parametrize("bad", [math.nan, math.inf, "1", True, None])
def test_bad_record_amount_is_rejected_and_nothing_changes(clock, bad):
    q = MutationQuota(quota_per_s=1, clock=clock)
    with pytest.raises(ValueError, match="finite number of mutations"):
        q.record(bad)
    assert q.tokens() == q.burst
    with pytest.raises(ValueError):
        q.quota_per_s = -3
    assert q.quota_per_s == 1


def test_exception_is_retryable_clear_and_picklable():
    exc = ThrottlingQuotaExceeded(12)
    assert exc.retryable and isinstance(exc, Exception)
    assert "12.000 s" in str(exc) and "retry" in str(exc)
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is ThrottlingQuotaExceeded and again.throttle_time_s == 12.0


def test_concurrent_strict_records_admit_exactly_while_non_negative(clock):
    q = MutationQuota(quota_per_s=10, samples=10, clock=clock)  # B = 100
    admitted = []
    lock = threading.Lock()

    def worker():
        ok = 0
        for _ in range(50):
            try:
                q.record(1)
                ok += 1
            except ThrottlingQuotaExceeded:
                pass
        with lock:
            admitted.append(ok)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(admitted) == 101  # K = 100, 99, ..., 0 are all >= 0
    assert q.tokens() == pytest.approx(-1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 50), st.integers(-300, 300)), max_size=40), st.booleans())
def test_tokens_never_exceed_burst_and_strict_overdraw_is_one_request(steps, strict):
    clock = ManualClock()
    q = MutationQuota(quota_per_s=3, window_s=1.0, samples=5, strict=strict, clock=clock)
    rejected_s, rejected_at_s = 0.0, clock.now_s()   # Kafka's lastThrottleTimeMs and when it was set
    for advance_s, n in steps:
        clock.advance(advance_s)
        before = q.tokens()
        try:
            answered = q.record(n)
        except ThrottlingQuotaExceeded as exc:
            assert strict and before < 0 and n > 0
            assert exc.throttle_time_s == pytest.approx(-before / 3)
            assert q.tokens() == pytest.approx(before)
            rejected_s, rejected_at_s = exc.throttle_time_s, clock.now_s()
        else:
            assert answered == (0 if strict else pytest.approx(max(0.0, -q.tokens() / 3)))
        tokens = q.tokens()
        assert tokens <= q.burst + 1e-9
        if strict:
            assert tokens >= -300 - 1e-9  # only a request that found K >= 0 can overdraw
            assert q.throttle_time_s() == pytest.approx(max(0.0, rejected_s - (clock.now_s() - rejected_at_s)))
        else:
            assert q.throttle_time_s() == pytest.approx(max(0.0, -tokens / 3))


# --- the registry -------------------------------------------------------------------------------------------


def test_registry_resolves_with_kafka_precedence_and_unlimited_fallback(clock):
    reg = MutationQuotaRegistry({
        ("alice", "app"): {"quota_per_s": 1},
        ("alice", DEFAULT): {"quota_per_s": 2},
        ("bob", None): {"quota_per_s": 3},
        (DEFAULT, DEFAULT): {"quota_per_s": 4},
    }, clock=clock)
    assert reg.get("alice", "app").quota_per_s == 1
    assert reg.get("alice", "other").quota_per_s == 2
    assert reg.get("bob", "x").quota_per_s == 3
    assert reg.get("carol", "x").quota_per_s == 4
    assert MutationQuotaRegistry({}, clock=clock).get("anyone", "any") is None
    only_clients = MutationQuotaRegistry({(None, "etl"): MutationQuotaConfig(7)}, clock=clock)
    assert only_clients.get("u", "etl").quota_per_s == 7
    assert only_clients.get("u", "web") is None
    assert only_clients.record("u", "web", 10**6) == 0.0  # unlimited


def test_registry_buckets_are_shared_only_where_the_entry_leaves_a_name_out(clock):
    reg = MutationQuotaRegistry({("bob", None): {"quota_per_s": 3}, (DEFAULT, DEFAULT): {"quota_per_s": 4}},
                                clock=clock)
    assert reg.get("bob", "a") is reg.get("bob", "b")  # (user, None): all of bob's clients share
    assert reg.get("carol", "a") is not reg.get("dave", "a")  # <default>: one bucket per entity
    assert reg.get("carol", "a") is reg.get("carol", "a")


def test_registry_apply_updates_live_keeps_tokens_and_removes_gone_entries(clock):
    reg = MutationQuotaRegistry({("alice", "app"): {"quota_per_s": 5, "samples": 100},
                                 ("bob", "app"): {"quota_per_s": 1}}, clock=clock)
    alice = reg.get("alice", "app")
    reg.record("alice", "app", 560)
    reg.apply({("alice", "app"): {"quota_per_s": 10, "samples": 100, "strict": False}})
    assert reg.get("alice", "app") is alice
    assert alice.tokens() == pytest.approx(-60) and alice.burst == 1000 and alice.strict is False
    assert reg.record("alice", "app", 1) == pytest.approx(6.1)  # permissive now: recorded, not rejected
    assert reg.get("bob", "app") is None
    assert [row["user"] for row in reg.snapshot()] == ["alice"]


def test_registry_rejects_bad_entries_and_changes_nothing(clock):
    reg = MutationQuotaRegistry({("alice", "app"): {"quota_per_s": 5}}, clock=clock)
    for bad in ({("alice",): {"quota_per_s": 1}}, {(None, None): {"quota_per_s": 1}},
                {("alice", "app"): {"quota": 1}}, {("alice", "app"): 5},
                {("alice", "app"): {"quota_per_s": 5}, ("bob", "app"): {"quota_per_s": -1}}):
        with pytest.raises(ValueError):
            reg.apply(bad)
        assert reg.get("alice", "app").quota_per_s == 5


def test_registry_snapshot_has_tokens_rate_and_throttle_time(clock):
    reg = MutationQuotaRegistry({("alice", "app"): {"quota_per_s": 5, "samples": 100}}, clock=clock)
    reg.record("alice", "app", 560)
    (row,) = reg.snapshot()
    assert row["user"] == "alice" and row["client_id"] == "app"
    assert row["tokens"] == pytest.approx(-60)            # the debt is visible
    assert row["mutation_rate_per_s"] == pytest.approx(5.6)
    assert row["throttle_time_s"] == 0                    # strict: the overdrawing request was not throttled
    with pytest.raises(ThrottlingQuotaExceeded):
        reg.record("alice", "app", 1)
    assert reg.snapshot()[0]["throttle_time_s"] == pytest.approx(12)   # the rejected one was


# --- the client helper --------------------------------------------------------------------------------------


def test_retry_helper_waits_the_throttle_time_and_succeeds(clock):
    q = MutationQuota(quota_per_s=5, samples=100, clock=clock)
    q.record(560)
    waits = []

    def sleep(seconds):
        waits.append(seconds)
        clock.advance(seconds)

    assert call_with_mutation_quota(q, 10, lambda: "created", timeout_s=30, clock=clock, sleep=sleep) == "created"
    assert waits == [pytest.approx(12.0)]
    assert q.tokens() == pytest.approx(-10)


def test_retry_helper_reraises_when_the_wait_would_pass_its_timeout(clock):
    q = MutationQuota(quota_per_s=5, samples=100, clock=clock)
    q.record(560)
    calls = []
    with pytest.raises(ThrottlingQuotaExceeded) as info:
        call_with_mutation_quota(q, 1, lambda: calls.append(1), timeout_s=11.9, clock=clock, sleep=clock.advance)
    assert info.value.throttle_time_s == pytest.approx(12.0) and calls == []
    assert clock.now_s() == 100.0  # gave up at once rather than sleep uselessly


def test_retry_helper_retries_a_remote_throttle_and_gives_the_local_tokens_back(clock):
    q = MutationQuota(quota_per_s=5, samples=100, clock=clock)
    answers = [ThrottlingQuotaExceeded(2.0), ThrottlingQuotaExceeded(3.0), "ok"]

    def fn():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert call_with_mutation_quota(q, 100, fn, timeout_s=10, clock=clock, sleep=clock.advance) == "ok"
    assert clock.now_s() == pytest.approx(105.0)
    assert q.tokens() == pytest.approx(400)  # charged once, for the mutation that happened

    answers[:] = [ThrottlingQuotaExceeded(4.0)] * 5
    with pytest.raises(ThrottlingQuotaExceeded):
        call_with_mutation_quota(None, 1, fn, timeout_s=10, clock=clock, sleep=clock.advance)
    assert clock.now_s() == pytest.approx(113.0)  # waited 4 + 4, then 4 more would pass the 10 s


def test_retry_helper_rejects_a_bad_timeout(clock):
    with pytest.raises(ValueError, match="timeout_s must be"):
        call_with_mutation_quota(None, 1, lambda: None, timeout_s=-1, clock=clock)


def test_retry_helper_sleeps_on_the_manual_clock_by_default(clock):
    q = MutationQuota(quota_per_s=5, samples=100, clock=clock)
    q.record(560)
    result = []
    worker = threading.Thread(
        target=lambda: result.append(call_with_mutation_quota(q, 1, lambda: "done", timeout_s=60, clock=clock)))
    worker.start()
    for _ in range(200):  # ManualClock.sleep blocks until this thread advances the clock
        if not worker.is_alive():
            break
        clock.advance(1)
        worker.join(0.01)
    worker.join(5)
    assert result == ["done"]
    assert clock.now_s() >= 112.0
