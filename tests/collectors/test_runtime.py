"""The participant runtime: lazy per-process accessor, fork safety, local mode, goodbye, identity, configuration."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

import collectors
from collectors import (
    ConfigError,
    Participant,
    RuntimeConfig,
    detect_identity,
    participant,
    reset_participant,
)
from collectors.runtime import current_participant
from controlplane import views
from limiter import ManualClock
from limiter.dispatch import Dispatcher
from limiter.offload import OffloadThrottle
from limiter.policy import Level, Rate

from .helpers import InProcessControlPlane, grouped, make_participant, policies

UNIT = pytest.mark.unit


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("THROTTLESCOPE_") or name.startswith("SPARK_"):
            monkeypatch.delenv(name)
    reset_participant(goodbye=False)
    yield
    reset_participant(goodbye=False)


@UNIT
def test_one_participant_per_process_created_on_first_use(no_env: None) -> None:
    assert current_participant() is None
    p = participant()
    assert participant() is p and current_participant() is p
    reset_participant()
    assert participant() is not p


@UNIT
def test_without_a_url_limits_are_local_and_nothing_talks_to_the_network(no_env: None) -> None:
    p = participant()
    assert p.reporter is None and p.wait_ready(0) and not p.connected and p.policy_version == 0
    assert not any(t.name == "throttlescope-reporter" for t in threading.enumerate())
    p.limits.set_limit(Level.NAMESPACE, "acme/web", Rate(5))
    producer = p.producer("acme/web/clicks")
    assert [lim.level for lim in producer.limiters][-2:] == [Level.NAMESPACE, Level.TOPIC]
    assert p.limits.limiter(Level.NAMESPACE, "acme/web").rate == Rate(5)   # a local static limit, kept
    assert isinstance(p.dispatcher("acme/web/clicks", "sub"), Dispatcher)
    assert isinstance(p.offload_throttle, OffloadThrottle) and p.mutation_quota("alice", "app") is None
    assert p.report_now() is False and p.last_report() is None


@pytest.mark.integration
def test_a_forked_child_gets_its_own_participant(no_env: None) -> None:
    parent = participant()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:   # pragma: no cover - runs in the child
        try:
            mine = participant()
            ok = mine is not parent and mine.pid == os.getpid() and mine.participant_id != parent.participant_id
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(child, 0)
    os.close(read)
    assert answer == b"1"
    assert participant() is parent


@pytest.mark.integration
def test_the_accessor_follows_the_environment(no_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THROTTLESCOPE_REPORT_INTERVAL_S", "soon")
    with pytest.raises(ConfigError, match="THROTTLESCOPE_REPORT_INTERVAL_S"):
        participant()
    monkeypatch.setenv("THROTTLESCOPE_REPORT_INTERVAL_S", "0.5")
    monkeypatch.setenv("THROTTLESCOPE_URL", "http://127.0.0.1:9")     # nothing listens: fail-static from start
    monkeypatch.setenv("THROTTLESCOPE_APP_ID", "app-42")
    p = participant()
    try:
        assert p.reporter is not None and p.reporter.running and p.config.report_interval_s == 0.5
        assert p.identity.application_id == "app-42" and p.participant_id.startswith("app-42/driver/")
        assert not p.wait_ready(0.3)
        assert p.producer("acme/web/t").try_acquire()                 # the hot path does not wait on it
    finally:
        reset_participant(goodbye=False)
    assert not p.reporter.running


@UNIT
def test_close_says_goodbye_once_and_a_forked_copy_does_not(clock: ManualClock) -> None:
    cp = InProcessControlPlane(grouped(100))
    p = make_participant(clock, cp)
    p.report_now()
    assert [x.participantId for x in views.participants(cp.live, 3).participants] == ["me"]
    other = make_participant(clock, cp, pid="copy")
    other.report_now()
    other.pid = -1                                     # as if this object had been inherited by a fork
    other._at_exit()
    assert cp.goodbyes == []
    p.close()
    p.close()
    assert cp.goodbyes == ["me"]
    assert [x.participantId for x in views.participants(cp.live, 3).participants] == ["copy"]


@UNIT
def test_policies_reach_every_kind_of_limiter(clock: ManualClock) -> None:
    cp = InProcessControlPlane(policies(
        resourceGroups={"g": {"dispatchRateInMsgs": 50}}, namespaceResourceGroups={"acme/web": "g"},
        topics={"acme/web/t": {"subscriptionDispatchRate": {"dispatchThrottlingRateInMsg": 7}}},
        brokerSettings={"managedLedgerOffloadBrokerFlowPermitsPerSecond": 2048},
        mutationQuotas=[{"user": "<default>", "clientId": "<default>", "quotaPerSecond": 3}]))
    p = make_participant(clock, cp)
    assert p.report_now()
    d = p.dispatcher("acme/web/t", "s")
    # shared limits are pools of the limit per period, filled by grants (the first one as the dispatcher is made)
    assert [(lim.level, lim.rate.msgs <= 0, lim.capacity) for lim in d.levels] == [
        (Level.BROKER, True, None), (Level.TOPIC, True, None), (Level.SUBSCRIPTION, False, (7, 0)),
        (Level.RESOURCE_GROUP, False, (50, 0))]
    assert d.levels[2].available_msgs() == pytest.approx(7 * 0.25, abs=1e-3)      # a quarter second's worth
    assert d.levels[3].available_msgs() == pytest.approx(50 * 0.25, abs=1e-3)
    assert p.offload.bytes_per_s == 2048
    assert p.mutation_quota("alice", "app").quota_per_s == 3
    assert p.policies is not None and p.policies.version == 3
    plan = d.plan_read(10)
    d.charge(7, 700, plan.entries, plan)
    assert p.dispatch.admitted(Level.SUBSCRIPTION, "acme/web/t/s") == (7, 700)
    assert p.report_now()
    report = cp.reports[-1]
    usage = {(u.level, u.direction, u.name): u for u in report.usage}
    assert ("subscription", "dispatch", "acme/web/t/s") in usage and ("resource_group", "dispatch", "g") in usage
    assert report.offload.limit_bytes_per_s == 2048
    assert report.mutation_quotas and report.mutation_quotas[0].user == "alice"
    assert any(b.kind == "dispatch" and b.level == "subscription" for b in report.buckets)


# --- identity ---------------------------------------------------------------------------------------------


@UNIT
def test_identity_from_the_environment_and_defaults() -> None:
    a = detect_identity(env={})
    assert (a.application_id, a.executor_id, a.pid) == ("local", "driver", os.getpid())
    assert a.participant_id.startswith(f"local/driver/{a.host}/{os.getpid()}/")
    assert detect_identity(env={}).participant_id != a.participant_id        # unique per process lifetime
    b = detect_identity(env={"SPARK_APPLICATION_ID": "app-1", "SPARK_EXECUTOR_ID": "3"})
    assert (b.application_id, b.executor_id) == ("app-1", "3")
    c = detect_identity(env={"THROTTLESCOPE_APP_ID": "mine", "SPARK_APPLICATION_ID": "app-1",
                             "THROTTLESCOPE_EXECUTOR_ID": "7", "SPARK_EXECUTOR_ID": "3"})
    assert (c.application_id, c.executor_id) == ("mine", "7")
    d = detect_identity("a/b\nc", "x" * 500, env={})
    assert d.application_id == "a_b_c" and len(d.executor_id) < 100 and d.participant_id.count("/") == 4
    assert d.to_wire().participant_id == d.participant_id


# --- configuration ----------------------------------------------------------------------------------------


@UNIT
def test_configuration_from_the_environment() -> None:
    assert RuntimeConfig.from_env({}) == RuntimeConfig()
    assert RuntimeConfig.from_env({}).url is None
    cfg = RuntimeConfig.from_env({"THROTTLESCOPE_URL": "https://cp.example:8443/base/", "THROTTLESCOPE_TOKEN": "t0ken-of-16-chars",
                                  "THROTTLESCOPE_REPORT_INTERVAL_S": "0.25", "THROTTLESCOPE_REPORT_TOLERANCE_PCT": "10",
                                  "THROTTLESCOPE_REPORT_MAX_ROUNDS": "3", "THROTTLESCOPE_BACKOFF_MAX_S": "4"})
    assert (cfg.url, cfg.token, cfg.report_interval_s, cfg.tolerance_pct, cfg.max_rounds) == (
        "https://cp.example:8443/base", "t0ken-of-16-chars", 0.25, 10.0, 3)
    assert cfg.backoff_cap_s(0.25) == 4 and "t0ken-of-16-chars" not in repr(cfg)
    assert RuntimeConfig().backoff_cap_s(0.25) == 2.5 and RuntimeConfig().backoff_cap_s(10) == 30
    assert RuntimeConfig().gc_freeze and not RuntimeConfig.from_env({"THROTTLESCOPE_GC_FREEZE": "off"}).gc_freeze


@pytest.mark.parametrize("name,value", [
    ("THROTTLESCOPE_REPORT_INTERVAL_S", "abc"), ("THROTTLESCOPE_REPORT_INTERVAL_S", "0.01"),
    ("THROTTLESCOPE_REPORT_INTERVAL_S", "nan"), ("THROTTLESCOPE_REPORT_INTERVAL_S", "-1"),
    ("THROTTLESCOPE_REPORT_TOLERANCE_PCT", "101"), ("THROTTLESCOPE_REPORT_TOLERANCE_PCT", "five"),
    ("THROTTLESCOPE_REPORT_MAX_ROUNDS", "0"), ("THROTTLESCOPE_REPORT_MAX_ROUNDS", "2.5"),
    ("THROTTLESCOPE_BACKOFF_MAX_S", "inf"), ("THROTTLESCOPE_URL", "ftp://cp:21"), ("THROTTLESCOPE_URL", "http://"),
    ("THROTTLESCOPE_URL", "http://cp:99999"), ("THROTTLESCOPE_URL", "cp.example:8000"),
    ("THROTTLESCOPE_TOKEN", "has space"),
    ("THROTTLESCOPE_TOKEN", "short"), ("THROTTLESCOPE_READY_TIMEOUT_S", "-1"), ("THROTTLESCOPE_SHIP_LIBRARY", "2"),
    ("THROTTLESCOPE_GC_FREEZE", "sometimes"),
])
@UNIT
def test_bad_values_are_refused_with_the_variable_named(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        RuntimeConfig.from_env({name: value})


@UNIT
def test_a_config_built_in_code_reads_no_environment_and_errors_name_what_the_user_wrote(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THROTTLESCOPE_REPORT_INTERVAL_S", "7")
    monkeypatch.setenv("THROTTLESCOPE_REPORT_TOLERANCE_PCT", "  ")          # blank: not set
    assert RuntimeConfig().report_interval_s == 1.0
    assert RuntimeConfig.from_env().report_interval_s == 7.0 and RuntimeConfig.from_env().tolerance_pct == 5.0
    with pytest.raises(ConfigError, match=r"^report_interval_s must be a number of seconds 0.05..3600, got 0$"):
        RuntimeConfig(report_interval_s=0)
    with pytest.raises(ConfigError, match=r"^THROTTLESCOPE_REPORT_MAX_ROUNDS must be a whole number of reports "
                                          r"1..1000, got '2.5'$"):
        RuntimeConfig.from_env({"THROTTLESCOPE_REPORT_MAX_ROUNDS": "2.5"})


@UNIT
def test_bad_programmatic_values_are_refused() -> None:
    for kw in ({"report_interval_s": 0}, {"tolerance_pct": -1}, {"max_rounds": 0}, {"max_rounds": True},
               {"backoff_max_s": 0.0}):
        with pytest.raises(ConfigError):
            RuntimeConfig(**kw)


@UNIT
def test_public_names() -> None:
    assert {"participant", "Participant", "RuntimeConfig", "ConfigError", "reset_participant"} <= set(collectors.__all__)
    assert isinstance(Participant(RuntimeConfig(), start=False), Participant)


@UNIT
def test_a_limit_set_just_before_a_job_holds_from_its_first_batch(clock: ManualClock) -> None:
    """A Python worker Spark reuses across jobs knows the policies of its last answer. The admin sets a topic
    limit and starts a job at once: the first producer of that topic refreshes the policies (one round trip), so
    the job's first batch is already under the limit -- not the next report interval."""
    cp = InProcessControlPlane(policies(3))
    p = make_participant(clock, cp)
    assert p.report_now()
    rounds = len(cp.reports)
    cp.policies = policies(4, topics={"acme/web/new": {"publishRate": {"publishThrottlingRateInMsg": 100}}})
    producer = p.producer("acme/web/new")
    assert len(cp.reports) == rounds + 1 and p.policies.version == 4
    assert producer.try_acquire(msgs=100)           # the limit's first second: its tokens, granted
    assert not producer.try_acquire(msgs=100)       # and no more
    p.producer("acme/web/new")                      # a second producer of the same topic: no round trip
    assert len(cp.reports) == rounds + 1


class _Gated(InProcessControlPlane):
    """Answers a grant ask only once ``gate`` is set (at most 10 s); ``asked`` is set when one arrives."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.asked, self.gate = threading.Event(), threading.Event()
        self.gate_timed_out = False

    def grant(self, request, timeout_s=None):
        self.asked.set()
        self.gate_timed_out |= not self.gate.wait(10)
        return super().grant(request, timeout_s)


@UNIT
def test_a_new_producer_does_not_wait_for_its_pools_and_its_first_send_holds_until_they_are_filled(
        clock: ManualClock) -> None:
    """A micro-batch task's producer: its pools are asked for on the keeper's thread while the task takes its first
    batch, and the first send holds on the dry pool for the rest of that round trip (never overdrawing it)."""
    topic = "acme/web/clicks"
    cp = _Gated(policies(3, topics={topic: {"publishRate": {"publishThrottlingRateInMsg": 1000}}}), interval_s=1.0,
                clock=clock.now_s)
    p = make_participant(clock, cp, interval_s=1.0)
    assert p.report_now()
    p.grant_keeper.start()
    try:
        producer = p.producer(topic)                 # returns while the ask is out (on this thread it would wait)
        assert cp.asked.wait(10) and not cp.gate.is_set()
        assert not producer.try_acquire(msgs=10)     # its pool is dry: held, nothing charged
        cp.gate.set()
        p.grant_keeper.stop(timeout_s=10)            # its round ends: the grant is in the pool
        assert not p.grant_keeper.running and not cp.gate_timed_out
        clock.advance(0.001)                         # (the limiter's timers run on this clock) released:
        assert producer.try_acquire(msgs=10)
        held = p.limits.limiter(Level.TOPIC, topic).balance()[0]
        assert held is not None and held >= 0       # spent from the grant, not overdrawn ahead of it
        assert len(cp.grant_requests) >= 1
    finally:
        p.grant_keeper.stop()
