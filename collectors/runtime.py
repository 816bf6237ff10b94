"""The participant runtime: one per process, created lazily on first use, holding every limiter of the process.

How it works and why
--------------------
``participant()`` returns this process's ``Participant``, creating it on the first call. PySpark reuses its Python
workers across tasks, so the participant -- its limiters, their balances and queues, its reporter -- lives across
tasks too: a task asks for ``participant().producer("acme/web/clicks")`` and gets a producer wired to the same
limiters the previous task used (one that nothing used for a minute is forgotten, so a worker that ran many jobs of
topics of their own does not look at all of them every round: ``collectors.idle_limiters``). The accessor is
fork-safe: it remembers the pid it created the participant in, and a forked child (PySpark forks workers from its
daemon) gets a fresh participant with a new identity, its own timer thread and its own reporter (threads do not
survive ``fork``). An at-fork hook also forgets the parent's instance and replaces the accessor's lock, which
another thread may have held at the moment of the fork.

A participant holds, per process (the role of a Pulsar "broker"):

- ``limits`` -- ``limiter.PublishLimits``: publish limiters by level and name; ``producer(topic)`` wires a producer
  to broker -> resource group -> tenant -> namespace -> topic;
- ``dispatch`` -- ``collectors.dispatching.DispatchLimits``: dispatch limiters; ``dispatcher(topic, sub)``;
- ``mutation_quotas`` -- ``limiter.mutation.MutationQuotaRegistry`` (KIP-599, per (user, client-id));
- ``offload`` -- ``limiter.offload.OffloadThrottle`` (PIP-211, broker-wide bytes/s);

and, when ``THROTTLESCOPE_URL`` is set, a ``Reporter`` daemon thread that reports every interval and applies
the answer through an ``Applier`` (policies -> limits, usage map -> local shares; see apply.py and reporter.py).
Without a URL there is no thread and no network: the limiters enforce whatever the program sets on them
(``participant().limits.set_limit(...)``, local static limits). With one, the control plane's policies are the
source of truth: every round brings each limiter to its target, overriding local settings.

Before the first answer nothing is known, so limiters are unlimited; the first report goes out as soon as the
participant starts, and ``wait_ready(timeout_s)`` lets a caller that prefers to wait for the first policies do so
(bounded). Once known, limits stay enforced whatever happens to the control plane (fail-static).

At exit (``atexit``; ``close()`` does the same at once) the reporter stops and a goodbye (``POST /v1/goodbye``,
0.5 s timeout) frees this participant's shares for the others at once. A process that dies without it (SIGKILL,
or a PySpark worker ending with ``os._exit``) is expired by the control plane after 2 report intervals.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from limiter.adaptive import Outcome, checked_outcome
from limiter.clock import Clock, ManualClock, SystemClock, ThreadScheduler
from limiter.dispatch import Dispatcher
from limiter.levels import Bound, PublishLimits
from limiter.mutation import MutationQuota, MutationQuotaRegistry
from limiter.offload import OffloadThrottle
from limiter.policy import Level
from limiter.producer import Producer
from protocol import PolicySet, Report, limit_key, parse_limit_key, report_timeout_s

from .apply import DISPATCH, PUBLISH, Applier
from .config import RuntimeConfig
from .dispatching import DispatchLimits
from .grants import GrantKeeper, Pool, ask_timeout_s
from .identity import Identity, detect_identity
from .worker_heap import freeze_worker_heap

if TYPE_CHECKING:
    from .client import ParticipantClient
    from .reporter import Reporter

__all__ = ["Participant", "participant", "reset_participant", "current_participant"]

log = logging.getLogger(__name__)

GOODBYE_TIMEOUT_S = 0.5
MAX_TOPICS_REFRESHED = 10_000   # topics whose first producer or dispatcher refreshes the policies (then: the next report)
MAX_UNPACED_WARNINGS = 20   # topics a worker warns of, telling outcomes of sends that no producer of its paced


class Participant:
    """Every limiter of this process, and the reporter that keeps them at their shares (see the module essay)."""

    def __init__(self, config: RuntimeConfig | None = None, *, identity: Identity | None = None,
                 clock: Clock | None = None, client: ParticipantClient | None = None, start: bool = True,
                 wall_s: Callable[[], float] | None = None):
        self.config = config if config is not None else RuntimeConfig.from_env()
        self.identity = identity or detect_identity(self.config.app_id, self.config.executor_id)
        self.pid = os.getpid()
        self.clock = clock or SystemClock()
        # an own timer thread (not the module-wide default one, which a fork would leave dead in the child)
        self.scheduler = self.clock if isinstance(self.clock, ManualClock) else ThreadScheduler(
            self.clock, name="throttlescope-timer")
        self.limits = PublishLimits(self.clock, self.scheduler)
        self.dispatch = DispatchLimits(self.clock)
        self.mutation_quotas = MutationQuotaRegistry(clock=self.clock)
        self.offload = OffloadThrottle(-1, clock=self.clock)
        self.applier = Applier(self.identity.participant_id, self.limits, self.dispatch, self.offload,
                               self.mutation_quotas)
        self.reporter: Reporter | None = None
        self.grant_keeper: GrantKeeper | None = None
        self._dispatch_throttles: dict[str, int] = {}
        self._closed = False
        self._topics_seen: set[str] = set()
        self._unpaced: set[str] = set()   # topics report_outcome warned of: told outcomes, no producer here
        if client is None and self.config.url:
            from .client import ControlPlaneClient  # httpx: only where a control plane is
            client = ControlPlaneClient(self.config.url, self.config.token,
                                        report_timeout_s(self.config.report_interval_s))
        self.client = client
        if client is not None:
            from .reporter import Reporter, Sources
            sources = Sources(self.identity, self.clock, self.applier, self.limits, self.dispatch, self.offload,
                              self.mutation_quotas)
            self.reporter = Reporter(sources, client, interval_s=self.config.report_interval_s,
                                     tolerance_pct=self.config.tolerance_pct, max_rounds=self.config.max_rounds,
                                     backoff_cap_s=self.config.backoff_cap_s, wall_s=wall_s or time.time)
            def now_s() -> float:
                return self.clock.now_ns() / 1e9
            self.grant_keeper = GrantKeeper(self.identity.participant_id, self.applier.grants, self._pools,
                                            lambda req: client.grant(req, timeout_s=ask_timeout_s(len(req.asks))).grants,
                                            self.applier.refresh, now_s, known=self._shared_keys,
                                            adaptive=self._adaptive_key)
            self.limits.on_throttle = self.grant_keeper.wake
            if start:
                self.reporter.start()
                self.grant_keeper.start()
                atexit.register(self._at_exit)

    # --- what Spark helpers use ---------------------------------------------------------------------------

    def producer(self, topic: str, name: str | None = None, **options: Any) -> Producer:
        """A producer on ``topic`` (``tenant/namespace/topic``) under every publish level that applies.

        The first producer of a topic in this process runs a report round first (one round trip): a Python
        worker that Spark reuses across jobs knows the policies of its last answer, and a limit set just before
        a job starts must hold from the job's first batch, not from the next report interval on. In a Spark
        task, the first producer or dispatcher of the worker freezes its heap first (``collectors.worker_heap``)."""
        self._freeze_heap()
        self._first_of(topic)
        producer = self.limits.producer(topic, name, **options)
        self.applier.refresh()  # new limiters get their burst (the hook gave them their rate)
        if self.grant_keeper is not None:
            weakref.finalize(producer, self.grant_keeper.wake)  # a producer gone (its task ended): give back at once
            # its pools are asked for on the keeper's thread, while the task takes its first batch from Spark: its
            # first send holds (a pool that is dry holds a send, ``hold_if_dry``) only for what is left of that
            # round trip. Asked for here, on the task's thread, every micro-batch task waited the whole of it
            # first -- a stream at 60 % of its limit spent 1.1 % of its task time so, 0.6-0.7 % this way.
            # (A keeper whose thread does not run -- driven by hand -- fills them here.)
            if self.grant_keeper.running:
                self.grant_keeper.wake()
            else:
                self._fill()
        return producer

    def dispatcher(self, topic: str, subscription: str | None = None, **options: Any) -> Dispatcher:
        """A dispatcher for ``subscription`` reading ``topic``, under broker, topic, subscription and the resource
        group of the topic's namespace (else tenant), as the policies known now attach it (the first of a topic in
        this process refreshes them first, as ``producer`` does)."""
        self._freeze_heap()
        self._first_of(topic)
        dispatcher = self.dispatch.dispatcher(topic, subscription, self.applier.resource_group_of(topic), **options)
        self.applier.refresh()
        if self.grant_keeper is not None:
            self._fill()
            self.grant_keeper.wake()   # (a keeper with nothing to watch waits QUIET_S: its pools want it at its beat)
        return dispatcher

    def _freeze_heap(self) -> None:
        if self.config.gc_freeze:
            freeze_worker_heap()   # (before the task's producer is made: it is not frozen with the worker's heap)

    def report_outcome(self, topic: str, outcome: Outcome | str, n: float = 1,
                       retry_after_s: float | None = None, latency_s: float | None = None) -> None:
        """``n`` sends to ``topic``'s sink ended with ``outcome`` (``collectors.outcomes``); a refusal wakes the
        grant keeper. Without a control plane nothing is adaptive: the arguments are checked, nothing is kept."""
        keeper = self.grant_keeper
        if keeper is None:
            checked_outcome(outcome, n, retry_after_s, latency_s)
            return
        if keeper.outcomes.add(topic, outcome, n, retry_after_s, latency_s) is Outcome.THROTTLED:
            keeper.wake()
        if (topic not in self._topics_seen and len(self._topics_seen) < MAX_TOPICS_REFRESHED
                and len(self._unpaced) < MAX_UNPACED_WARNINGS and topic not in self._unpaced):
            self._unpaced.add(topic)
            log.warning("throttlescope: report_outcome(%r) in a Python worker that has no producer of that topic: "
                        "its sends do not pass the limiter, which cannot pace them nor hold them through a sink's "
                        "Retry-After. Send where the rows are throttled: df.foreachPartition(throttle_foreach(topic, "
                        "send)), or inside the function that iterates throttle_arrow(topic)(batches)", topic)

    def _first_of(self, topic: str) -> None:
        """The first producer or dispatcher of ``topic`` in this process: one report round first, so that the
        policies it starts under are those of now, not of this worker's last job."""
        if topic not in self._topics_seen and len(self._topics_seen) < MAX_TOPICS_REFRESHED:
            self._topics_seen.add(topic)
            if self.reporter is not None and self.reporter.ready.is_set():
                self.reporter.run_once()

    def _fill(self) -> None:
        """Fill the new dispatcher's (or, with no keeper thread, producer's) pools now, on this thread: its first
        read must not overdraw a shared limit before the first grant (a failure leaves it to the keeper and the
        outage rules)."""
        try:
            self.grant_keeper.run_once()
        except Exception:  # noqa: BLE001 - never fail a task for this
            log.debug("throttlescope: filling the pools of a new producer failed", exc_info=True)

    def mutation_quota(self, user: str, client_id: str) -> MutationQuota | None:
        """The KIP-599 quota of (user, client-id) by Kafka's precedence; None = unlimited."""
        return self.mutation_quotas.get(user, client_id)

    @property
    def offload_throttle(self) -> OffloadThrottle:
        return self.offload

    def _pools(self) -> list[Pool]:
        """Every limiter of a shared limit, as the grant keeper sees it now."""
        applier, out = self.applier, []
        bound = self.limits.bound()
        for lim in self.limits.limiters():
            limit = applier.pooled(lim.level, PUBLISH, lim.name)
            if limit is not None and lim.capacity is not None:
                full = applier.limit(lim.level, PUBLISH, lim.name)
                b = bound.get((lim.level, lim.name)) or Bound(coming_msgs=None)
                out.append(Pool(limit_key(lim.level.value, PUBLISH, lim.name), limit, b.producers,
                                lim.queue_length() > 0, b.paused > 0, lim.admitted()[0], lim.balance(),
                                lim.deposit, ceiling_msgs_per_s=self._ceiling(b.paths),
                                adaptive=full is not None and full.adaptive_floor_per_s is not None,
                                read_balance=lim.balance, charged_s=_seconds(lim.charged_ns()),
                                send_msgs=lim.send_msgs(), coming_msgs=b.coming_msgs))
        dispatchers = self.dispatch.dispatcher_counts()
        seen, self._dispatch_throttles = self._dispatch_throttles, {}   # (a forgotten limiter's count goes too)
        for lim in self.dispatch.limiters():
            limit = applier.pooled(lim.level, DISPATCH, lim.name)
            if limit is not None and lim.capacity is not None:
                key = limit_key(lim.level.value, DISPATCH, lim.name)
                throttles = seen.get(key, 0)
                self._dispatch_throttles[key] = lim.throttled_count
                waiting = lim.throttled_count > throttles
                out.append(Pool(key, limit, dispatchers.get((lim.level, lim.name), 0), waiting, False,
                                self.dispatch.admitted(lim.level, lim.name)[0], lim.balance(), lim.deposit,
                                eager=True, read_balance=lim.balance))
        return out

    def _shared_keys(self) -> set[str]:
        """Every shared limit with a limiter here, whatever it runs at now (its pool, or the safe split)."""
        applier = self.applier
        keys = {limit_key(lim.level.value, PUBLISH, lim.name) for lim in self.limits.limiters()
                if applier.pooled(lim.level, PUBLISH, lim.name) is not None}
        keys.update(limit_key(lim.level.value, DISPATCH, lim.name) for lim in self.dispatch.limiters()
                    if applier.pooled(lim.level, DISPATCH, lim.name) is not None)
        return keys

    def _adaptive_key(self, key: str) -> bool:
        """Whether ``key`` names an adaptive shared limit by this participant's policies."""
        level_name, direction, name = parse_limit_key(key)
        level = Level(level_name)
        return (self.applier.pooled(level, direction, name) is not None
                and self.applier.limit(level, direction, name).adaptive_floor_per_s is not None)

    def _ceiling(self, paths: Iterable[tuple[tuple[Level, str], ...]]) -> float | None:
        """The most a pool's producers can spend, msgs/s: each is held to the lowest configured limit of the other
        levels it passes, and producers held by the same one share it. None when one of them is held by none."""
        tightest: dict[tuple[Level, str], float] = {}
        for others in set(paths):   # (a topic's producers all pass the same levels: looked up once)
            best: tuple[float, tuple[Level, str]] | None = None
            for level, name in others:
                limit = self.applier.limit(level, PUBLISH, name)
                if limit is not None and limit.rate.msgs_limited:
                    per_s = limit.rate.msgs_per_s()
                    if best is None or per_s < best[0]:
                        best = (per_s, (level, name))
            if best is None:
                return None
            tightest[best[1]] = best[0]
        return sum(tightest.values()) if tightest else None

    # --- state --------------------------------------------------------------------------------------------

    @property
    def participant_id(self) -> str:
        return self.identity.participant_id

    @property
    def policies(self) -> PolicySet | None:
        view = self.applier.view
        return None if view is None else view.ps

    @property
    def policy_version(self) -> int:
        return self.applier.version

    @property
    def connected(self) -> bool:
        """True after a successful round, until a round fails."""
        r = self.reporter
        return r is not None and r.ready.is_set() and r.last_error is None

    def wait_ready(self, timeout_s: float = 5.0) -> bool:
        """Wait (bounded) for the first answer from the control plane; True at once without a control plane."""
        return True if self.reporter is None else self.reporter.ready.wait(timeout_s)

    def report_now(self) -> bool:
        """Run one report round now, on the calling thread (tests, or a job that wants fresh shares)."""
        return False if self.reporter is None else self.reporter.run_once()

    def last_report(self) -> Report | None:
        return None if self.reporter is None else self.reporter.last_report

    # --- the end ------------------------------------------------------------------------------------------

    def close(self, goodbye: bool = True) -> None:
        """Stop reporting and (by default) say goodbye so the others get this participant's shares at once.
        The limiters keep working locally at their last rates."""
        if self._closed:
            return
        self._closed = True
        reporter, client = self.reporter, self.client
        if reporter is None or client is None:
            return
        reporter.stop()
        if self.grant_keeper is not None:
            self.grant_keeper.stop()
        if goodbye and os.getpid() == self.pid and reporter.seq:
            client.goodbye(self.identity.participant_id, GOODBYE_TIMEOUT_S)
        client.close()

    def _at_exit(self) -> None:
        if os.getpid() == self.pid:  # a forked child inherits this handler: it is not this participant
            try:
                self.close(goodbye=True)
            except Exception:  # noqa: BLE001 - never fail the interpreter's exit
                log.debug("throttlescope: goodbye failed", exc_info=True)

    def __repr__(self) -> str:
        return (f"Participant({self.identity.participant_id!r}, url={self.config.url!r}, "
                f"policy_version={self.policy_version})")


_lock = threading.Lock()
_current: Participant | None = None


def _seconds(ns: int | None) -> float | None:
    """``ns`` in the keeper's seconds (its clock's ``now_ns`` / 1e9), None as None."""
    return None if ns is None else ns / 1e9


def participant() -> Participant:
    """This process's participant, created on first use from the environment (see config.py)."""
    p = _current
    if p is not None and p.pid == os.getpid():
        return p
    return _create()


def _create() -> Participant:
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid():
            _current = Participant()
        return _current


def current_participant() -> Participant | None:
    """The participant if one was created in this process, else None (never creates one)."""
    p = _current
    return p if p is not None and p.pid == os.getpid() else None


def reset_participant(goodbye: bool = True) -> None:
    """Close and forget this process's participant; the next ``participant()`` reads the environment again."""
    global _current
    with _lock:
        p, _current = _current, None
    if p is not None and p.pid == os.getpid():
        p.close(goodbye=goodbye)


def _after_fork_in_child() -> None:
    global _current, _lock
    _current = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
