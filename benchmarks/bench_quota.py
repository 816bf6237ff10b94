"""Shared quota (PIP-82): convergence in report intervals, fair against proportional, and the aggregate error.

The participants are simulated in one process on one ManualClock, but with the real machinery: each is a
``collectors.Participant`` (its limiters, reporter, grant keeper and Applier), talking to an in-process relay that
does what ``POST /v1/report`` and ``POST /v1/grant`` do with the control plane's own ``LiveState`` and
``GrantBook``; each keeper runs every 20 ms at its own phase, as its thread polls, and at once when one of its
producers is throttled (the throttle wakes it). (Keepers all run in the same tick, a lockstep no two processes
keep, hid a second of 1.11x the limit at the 4 unequal participants' start, and a later one of 0.92.)
Only HTTP and OS processes are left out. Each participant's producer behaves like a blocking ``acquire`` loop
paced to its demand: one message every 1/demand s; a send due while paused goes the moment it resumes (no
catch-up). Participants report every 0.25 s, each at its own phase.

Scenarios
- ``70/30 -> 50/50``: a group of 1000 msgs/s; A wants 700 throughout, B wants 300 until the change, then 700.
  Convergence = intervals after the change until B's admitted rate per interval is within 5 % of 500 and stays
  there (None: never, within the run).
  ``fair`` should take <= 3; ``proportional`` (Pulsar's formula) keeps 70/30 for ever, by design.
- ``4 unequal``: demands 100/200/500/800 against 1000 (fair: 100/200/350/350). Aggregate admitted rate over
  1 s windows from 6 intervals on (each newcomer's first grants hold half a second of its share): mean and
  worst error against the limit (goal: within 5 %); and the most admitted in any 1 s of the whole run (windows
  starting at every send: the limit held from the first grant on).
- ``one leaves``: 3 participants wanting 600 of 900; one says goodbye; intervals until the other two get 450.

Run: ``python -m benchmarks.bench_quota`` (``--quick`` for a shorter run).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from collectors import Participant, RuntimeConfig
from collectors.identity import Identity
from controlplane.grants import GrantBook
from controlplane.state import LiveState
from limiter import ManualClock
from limiter.policy import Level
from protocol import GrantAnswer, GrantRequest, PolicySet, Report, ReportResponse, limit_key

from .shared.windows import worst_window_ratio

INTERVAL_S = 0.25
TICK_S = 0.0005
KEEPER_S = 0.02
GOAL_INTERVALS = 8
GOAL_ERROR = 0.05


class _Relay:
    """``POST /v1/report`` and ``/v1/grant`` without HTTP: the control plane's LiveState and GrantBook on the
    simulation's clock."""

    url = "in-process"

    def __init__(self, policies: PolicySet, clock: ManualClock):
        self.policies = policies
        self.live = LiveState(INTERVAL_S, clock.now_s)
        self.grants = GrantBook(INTERVAL_S, clock=clock.now_s)
        self.timeout_s = 1.0

    def grant(self, request: GrantRequest, timeout_s: float | None = None) -> GrantAnswer:
        return GrantAnswer(policyVersion=self.policies.version,
                           grants=self.grants.answer(request.participant_id, request.asks, self.policies))

    def report(self, report: Report) -> ReportResponse:
        accepted, reason = self.live.ingest(report)
        keys = [limit_key(u.level, u.direction, u.name) for u in report.usage] + list(report.usage_unchanged)
        ps = self.policies
        return ReportResponse(policyVersion=ps.version,
                              policies=ps if report.applied_policy_version != ps.version else None,
                              usage=self.live.usage_map(keys), reportIntervalSeconds=INTERVAL_S,
                              accepted=accepted, reason=reason)

    def goodbye(self, participant_id: str, timeout_s: float = 0.5) -> bool:
        return self.live.goodbye(participant_id)

    def close(self) -> None:
        pass


class _Sim:
    def __init__(self, limit: float, strategy: str = "fair"):
        self.clock = ManualClock(start_s=1_000_000.0)
        ps = PolicySet.model_validate({"version": 1, "resourceGroups": {"g": {"publishRateInMsgs": limit,
                                                                                "quotaStrategy": strategy}},
                                       "namespaceResourceGroups": {"acme/web": "g"}})
        self.relay = _Relay(ps, self.clock)
        self.t0 = self.clock.now_s()
        self.members: list[dict[str, Any]] = []
        self.sent_at: list[float] = []   # every send's time, in order

    def join(self, demand: float) -> dict[str, Any]:
        i = len(self.members)
        cfg = RuntimeConfig(url="http://in-process", report_interval_s=INTERVAL_S)
        p = Participant(cfg, identity=Identity("bench", str(i), "sim", i, f"p{i}"), clock=self.clock,
                        client=self.relay, start=False, wall_s=self.clock.now_s)
        p.report_now()
        m = {"p": p, "producer": p.producer(f"acme/web/t{i}"), "demand": demand, "due": self.clock.now_s(),
             "sent": 0, "next_report": self.clock.now_s() + INTERVAL_S * (1 + i / 7), "alive": True,
             "next_keep": self.clock.now_s() + KEEPER_S * (i % 7) / 7,
             "rg": p.limits.limiter(Level.RESOURCE_GROUP, "g"), "woken": False}
        p.limits.on_throttle = lambda: m.__setitem__("woken", True)   # as a throttled producer wakes the keeper
        self.members.append(m)
        return m

    def leave(self, m: dict[str, Any]) -> None:
        m["alive"] = False
        m["p"].close(goodbye=True)

    def run(self, seconds: float, on_interval=None) -> None:
        """Advance ``seconds``; ``on_interval(k)`` after every INTERVAL_S of simulated time."""
        end = self.clock.now_s() + seconds
        next_mark = self.clock.now_s() + INTERVAL_S
        while self.clock.now_s() < end - 1e-9:
            now = self.clock.now_s()
            for m in self.members:
                if not m["alive"]:
                    continue
                if m["woken"] or now >= m["next_keep"] - 1e-9:
                    m["woken"] = False
                    m["p"].grant_keeper.run_once()
                    m["next_keep"] = now + KEEPER_S
                # (a send held by a dry pool pauses the producer and waits, uncounted)
                if now >= m["due"] - 1e-9 and not m["producer"].paused and m["producer"].try_acquire(1):
                    m["sent"] += 1
                    self.sent_at.append(now)
                    step = 1.0 / m["demand"]
                    m["due"] = max(m["due"], now - step) + step
                if now >= m["next_report"] - 1e-9:
                    m["p"].report_now()
                    m["next_report"] += INTERVAL_S
            if on_interval is not None and now >= next_mark - 1e-9:
                on_interval(round((now - self.t0) / INTERVAL_S))
                next_mark += INTERVAL_S
            self.clock.advance(TICK_S)


def _convergence(strategy: str, quick: bool) -> dict[str, Any]:
    sim = _Sim(1000, strategy)
    a, b = sim.join(700), sim.join(300)
    sim.run(2.0)
    b["demand"] = 700
    counts: list[tuple[int, int]] = [(a["sent"], b["sent"])]
    sim.run(3.0 if quick else 6.0, lambda k: counts.append((a["sent"], b["sent"])))
    # B's admitted rate over each interval (averaged over two, as the grants' window is 4 intervals long)
    shares = [(counts[k][1] - counts[k - 2][1]) / (2 * INTERVAL_S) for k in range(2, len(counts))]
    ok_from = None
    for k in range(len(shares)):
        if all(abs(s - 500) <= 0.05 * 500 for s in shares[k:]):
            ok_from = k + 2
            break
    last = len(counts) - 1
    sent_a, sent_b = (counts[last][i] - counts[max(0, last - 4)][i] for i in (0, 1))
    final = sent_b / max(1, sent_a + sent_b)
    if strategy == "fair":
        return {"section": "convergence", "name": "fair: 70/30 -> 50/50", "unit": "intervals",
                "value": ok_from, "goal": f"<= {GOAL_INTERVALS}",
                "ok": ok_from is not None and ok_from <= GOAL_INTERVALS,
                "note": f"B's admitted msgs/s after the change, per interval: {[round(s) for s in shares[:8]]}; "
                        f"final split {1 - final:.2f}/{final:.2f}"}
    return {"section": "convergence", "name": "proportional: 70/30 -> 50/50", "unit": "intervals",
            "value": ok_from, "goal": "never (None)", "ok": ok_from is None,
            "note": f"{len(shares)} intervals simulated; final split {1 - final:.2f}/{final:.2f}: Pulsar's formula keeps "
                    "whoever was throttled first throttled"}


def _aggregate(quick: bool) -> list[dict[str, Any]]:
    sim = _Sim(1000)
    members = [sim.join(d) for d in (100, 200, 500, 800)]
    counts: list[int] = []
    sim.run(4.0 if quick else 10.0, lambda k: counts.append(sum(m["sent"] for m in members)))
    per = 4  # 1 s windows of 4 intervals, from 3 intervals on
    errors = [(counts[k + per] - counts[k]) / (per * INTERVAL_S) / 1000 - 1 for k in range(6, len(counts) - per)]
    per_interval = [round((counts[k + 1] - counts[k]) / INTERVAL_S) for k in range(min(12, len(counts) - 1))]
    shares = [round(m["sent"] / (sim.clock.now_s() - sim.t0)) for m in members]
    worst, mean = max(abs(e) for e in errors), sum(abs(e) for e in errors) / len(errors)
    most = worst_window_ratio([(t, 1) for t in sim.sent_at], 1000, sim.t0, sim.clock.now_s())
    series = [f"{100 * e:+.1f}" for e in errors[:16]]
    return [
        {"section": "aggregate", "name": "4 unequal: error of the 1 s window from interval 6",
         "value": round(100 * errors[0], 2), "unit": "% of limit", "goal": f"within {100 * GOAL_ERROR:g}",
         "ok": abs(errors[0]) <= GOAL_ERROR,
         "note": f"aggregate msgs/s per interval from the start: {per_interval}"},
        {"section": "aggregate", "name": "4 unequal: worst 1 s window error, from interval 6 on",
         "value": round(100 * worst, 2), "unit": "% of limit", "goal": f"<= {100 * GOAL_ERROR:g}",
         "ok": worst <= GOAL_ERROR, "note": f"error (%) of the 1 s window starting at interval 6, 7, ...: {series}"},
        {"section": "aggregate", "name": "4 unequal: mean 1 s window error, from interval 6 on",
         "value": round(100 * mean, 2), "unit": "% of limit", "goal": f"<= {100 * GOAL_ERROR:g}",
         "ok": mean <= GOAL_ERROR, "note": f"admitted msgs/s over the run {shares} (max-min fair: [100, 200, 350, 350])"},
        {"section": "aggregate", "name": "4 unequal: most admitted in any 1 s, from the start / limit",
         "value": round(most, 3), "unit": "x", "goal": f"<= {1 + GOAL_ERROR:g}", "ok": most <= 1 + GOAL_ERROR,
         "note": "windows start at every send: the newcomers' first grants included"},
    ]


def _leave(quick: bool) -> dict[str, Any]:
    sim = _Sim(900)
    members = [sim.join(600) for _ in range(3)]
    sim.run(2.0)
    sim.leave(members[2])
    counts: list[list[int]] = [[m["sent"] for m in members[:2]]]
    sim.run(2.0 if quick else 3.0, lambda k: counts.append([m["sent"] for m in members[:2]]))
    rates = [[(counts[k][i] - counts[k - 2][i]) / (2 * INTERVAL_S) for i in (0, 1)] for k in range(2, len(counts))]
    back = next((k + 2 for k in range(len(rates)) if all(all(abs(r - 450) <= 0.05 * 450 for r in x)
                                                           for x in rates[k:])), None)
    return {"section": "convergence", "name": "one of 3 leaves (goodbye): the others get its share",
            "value": back, "unit": "intervals", "goal": "<= 6", "ok": back is not None and back <= 6,
            "note": f"admitted msgs/s per interval: {[[round(r) for r in x] for x in rates[:8]]} (its grants leave "
                    "the 1 s window within 4 intervals)"}


def run(quick: bool = False) -> list[dict[str, Any]]:
    started = time.perf_counter()
    rows = [_convergence("fair", quick), _convergence("proportional", quick), _leave(quick), *_aggregate(quick)]
    for row in rows:
        row.setdefault("note", "")
    rows[-1]["note"] += f" (whole benchmark {time.perf_counter() - started:.1f} s of wall time)"
    return rows


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv):
        print(f"{row['section']:12} {row['name']:55} {row['value']!s:>8} {row['unit']:11} goal {row['goal']:10} "
              f"{'ok' if row['ok'] else 'FAIL'}  {row['note']}")
