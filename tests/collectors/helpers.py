"""Unit-test helpers: an in-process control plane (the real LiveState and GrantBook, no HTTP) and a paced sender on
a ManualClock."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from collectors import Participant, RuntimeConfig
from collectors.client import ControlPlaneError
from collectors.identity import Identity
from controlplane.api_participant import report_response
from controlplane.grants import GrantBook
from controlplane.state import LiveState
from limiter import ManualClock, Producer
from protocol import GrantAnswer, GrantRequest, PolicySet, Report, ReportResponse

KEEPER_S = 0.02


def identity(pid: str = "me") -> Identity:
    return Identity("app", "1", "host", 4242, pid)


class InProcessControlPlane:
    """What ``POST /v1/report`` and ``/v1/grant`` do (controlplane.api_participant), without HTTP; ``fail`` makes it
    unreachable. ``clock``: the grant windows' seconds (a ManualClock's ``now_s`` in unit tests)."""

    url = "http://in-process"

    def __init__(self, policies: PolicySet, interval_s: float = 0.25, clock: Callable[[], float] | None = None,
                 **book: Any):
        self.policies = policies
        self.live = LiveState(interval_s)
        self.told_s = interval_s   # the interval its answers tell (a loaded control plane's is longer)
        self.grants = GrantBook(interval_s, clock=clock or time.monotonic, **book)
        self.grant_requests: list[GrantRequest] = []
        self.reports: list[Report] = []
        self.goodbyes: list[str] = []
        self.fail: ControlPlaneError | None = None
        self.timeout_s = 1.0
        self.tells_place = True   # False: its answers say no place in the interval (``nextReportInSeconds``)

    def report(self, report: Report) -> ReportResponse:
        if self.fail is not None:
            raise self.fail
        self.reports.append(report)
        answer = report_response(self.live, self.policies, self.told_s, report)
        return answer if self.tells_place else answer.model_copy(update={"nextReportInSeconds": None})

    def grant(self, request: GrantRequest, timeout_s: float | None = None) -> GrantAnswer:
        if self.fail is not None:
            raise self.fail
        self.grant_requests.append(request)
        return GrantAnswer(policyVersion=self.policies.version,
                           grants=self.grants.answer(request.participant_id, request.asks, self.policies,
                                                     request.sent_s))

    def restart(self) -> None:
        """A restarted control plane: same policies, no live state, no grants."""
        self.live = LiveState(self.live.interval_s)
        self.grants = GrantBook(self.live.interval_s, clock=self.grants._clock)

    def goodbye(self, participant_id: str, timeout_s: float = 0.5) -> bool:
        self.goodbyes.append(participant_id)
        return self.live.goodbye(participant_id)

    def close(self) -> None:
        pass


def policies(version: int = 3, **kw: Any) -> PolicySet:
    return PolicySet.model_validate({"version": version, **kw})


def grouped(limit: float = 100, strategy: str | None = None, version: int = 3) -> PolicySet:
    rg: dict[str, Any] = {"publishRateInMsgs": limit}
    if strategy:
        rg["quotaStrategy"] = strategy
    return policies(version, resourceGroups={"g": rg}, namespaceResourceGroups={"acme/web": "g"})


def make_participant(clock: ManualClock, cp: Any, pid: str = "me", interval_s: float = 0.25,
                     **config: Any) -> Participant:
    cfg = RuntimeConfig(url=cp.url, report_interval_s=interval_s, **config)
    return Participant(cfg, identity=identity(pid), clock=clock, client=cp, start=False)


def send_paced(clock: ManualClock, producer: Producer, per_s: float, seconds: float, tick_s: float = 2e-4,
               keepers: list[Participant] = ()) -> int:
    """A producer that wants ``per_s`` msgs/s, as a blocking ``acquire`` loop behaves, on a ManualClock: one send
    every 1/per_s s; a send due while paused waits and goes the moment the producer resumes (no catch-up).
    ``keepers``: participants whose grant keeper runs every ``KEEPER_S`` meanwhile (as its thread would).
    Returns how many were admitted."""
    step, end = 1.0 / per_s, clock.now_s() + seconds
    due, sent = clock.now_s(), 0
    next_keep = clock.now_s()
    while clock.now_s() < end - 1e-9:
        now = clock.now_s()
        if keepers and now >= next_keep:
            for p in keepers:
                p.grant_keeper.run_once()
            next_keep = now + KEEPER_S
        if now >= due - 1e-9:
            if producer.paused:
                clock.advance(min(tick_s, end - now))
                continue
            if not producer.try_acquire(1):   # held by a dry pool: it is paused now, and waits like any
                continue
            sent += 1
            due = max(due, now - step) + step
        clock.advance(max(1e-9, min(due, end, next_keep if keepers else end) - clock.now_s()))
    return sent
