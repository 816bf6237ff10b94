"""Churn: 100 participants joining and leaving over 2 minutes, against a real control plane.

What is shown
-------------
- Every leaver's share is redistributed: a participant that says goodbye is gone from the usage map of every
  answer sent after its goodbye was acknowledged; one that stops silently is gone once the control plane expires
  it (2 report intervals), so no answer after ``expiry + 1 interval`` holds it; and the control plane's own split
  of the group's quota (``/v1/state/resourcegroups``) always covers exactly the live participants and adds up to
  the whole quota. Figure: the worst time from a departure to the first answer (to each remaining participant)
  without the leaver, per way of leaving. At the end, the participants that stayed compute shares (with the same
  function as the real runtime, ``limiter.quota.local_quotas``) that add up to the quota.
- Metrics stay monotonic: ``/metrics`` is scraped every half interval; no ``*_total`` series ever goes down or
  disappears; at the end the admitted-messages counter of the group equals the sum of what every participant
  (left or not) last reported, and the departed counters equal the goodbyes and expiries.
- Memory stays bounded: the control plane's RSS (``/proc/<pid>/status``) is sampled throughout.

The participants are lightweight: asyncio tasks in this process, each posting real ``Report`` bodies (usage and
demand for one resource group, bucket and counter snapshots) with its own id every interval, and computing its
share from each answer. Each joins at a random time, stays a random while, and leaves by goodbye or silently
(alternately); a tenth stay to the end. Demands are random (20..200 msgs/s, above the quota in total).

``run()`` (``python -m benchmarks --only churn``): 100 participants over 120 s at a 1 s interval (``--quick``: 30
over 20 s at 0.5 s); tests/reliability/test_churn.py runs the compressed version and asserts on ``churn()``.
"""

from __future__ import annotations

import asyncio
import math
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from limiter.quota import local_quotas
from protocol import limit_key

from .bench_load import ADMIN, PARTICIPANT, ControlPlaneProcess, memory_kb
from .common import row

SECTION = "churn"
GROUP = "churn"
KEY = limit_key("resource_group", "publish", GROUP)
QUOTA = 1000.0


@dataclass
class Member:
    pid: str
    join_s: float                # offsets from the start
    leave_s: float | None        # None: stays to the end
    how: str                     # "goodbye", "silent" or "stay"
    demand: float
    seq: int = 0
    share: float | None = None
    admitted: float = 0.0
    reported_admitted: float = 0.0   # in its last accepted report
    first_answer: float | None = None
    last_sent: float | None = None
    left_at: float | None = None     # goodbye acknowledged, or (silent) last report sent
    answers: list[tuple[float, frozenset[str]]] = field(default_factory=list)  # (when, participants in the map)
    shares: list[tuple[float, float]] = field(default_factory=list)            # (when, the share it computed)


@dataclass
class Churn:
    members: list[Member]
    interval_s: float
    duration_s: float
    observations: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    metric_decreases: list[str] = field(default_factory=list)
    scrapes: int = 0
    first_counters: dict[Any, float] = field(default_factory=dict)
    final_counters: dict[Any, float] = field(default_factory=dict)
    rss_kb: list[tuple[float, int]] = field(default_factory=list)
    final_shares: dict[str, float] = field(default_factory=dict)

    # --- what the figures and the test use ----------------------------------------------------------------------

    def redistribution_delays(self) -> dict[str, list[float]]:
        """Per way of leaving: for each leaver, the worst (over the participants still there) time from its
        departure to the first answer without it. An answer that still holds it afterwards counts as infinite."""
        out: dict[str, list[float]] = {"goodbye": [], "silent": []}
        for d in self.members:
            if d.how not in out or d.left_at is None:
                continue
            worst = 0.0
            bound = self.bound_s(d.how)
            for m in self.members:   # the others that were there when it left, and stayed long enough to tell
                if m is d or m.first_answer is None or m.first_answer > d.left_at or (
                        m.left_at is not None and m.left_at < d.left_at + bound):
                    continue
                later = [(t, ids) for t, ids in m.answers if t > d.left_at]
                if not later:
                    continue
                gone = next((t for t, ids in later if d.pid not in ids), None)
                if gone is None or any(d.pid in ids for t, ids in later if t > gone):
                    worst = math.inf
                    break
                worst = max(worst, gone - d.left_at)
            out[d.how].append(worst)
        return out

    def bound_s(self, how: str) -> float:
        """The longest a leaver may linger: goodbye, one interval; silent, expiry (2 intervals) plus one."""
        return (1 if how == "goodbye" else 3) * self.interval_s + 0.5

    def membership_errors(self) -> list[str]:
        """Observations of the control plane's split that held a participant gone too long, missed one that had
        been answered and was still reporting, or did not add up to the quota."""
        errors = []
        for ob in self.observations:
            t0, t1, seen, total = ob["start"], ob["end"], ob["participants"], ob["allocated"]
            for m in self.members:
                if m.left_at is not None and m.pid in seen and t0 > m.left_at + self.bound_s(m.how):
                    errors.append(f"{t0:.1f}: {m.pid} ({m.how}, left at {m.left_at:.1f}) still in the split")
                live = m.first_answer is not None and m.first_answer < t0 and (m.left_at is None or m.left_at > t1)
                if live and m.pid not in seen:
                    errors.append(f"{t0:.1f}: {m.pid} reporting but missing from the split")
            if seen and abs(total - QUOTA) > 1e-6 * QUOTA:
                errors.append(f"{t0:.1f}: the split adds up to {total}, not {QUOTA}")
        return errors

    def rss_mb(self) -> tuple[float, float, float]:
        """RSS at the first sample after a tenth of the run (warm), at the end, and the largest, in MB."""
        warm = next((kb for t, kb in self.rss_kb if t >= 0.1 * self.duration_s), self.rss_kb[0][1])
        return warm / 1024, self.rss_kb[-1][1] / 1024, max(kb for _, kb in self.rss_kb) / 1024


def schedule(participants: int, duration_s: float, interval_s: float, seed: int = 10) -> list[Member]:
    rng = random.Random(seed)
    stayers = max(3, participants // 10)
    members = []
    last_leave = duration_s - 4 * interval_s - 1.0     # every departure is visible before the end
    for i in range(participants):
        join = rng.uniform(0, 0.6 * duration_s)
        if i < stayers:
            join = rng.uniform(0, 0.2 * duration_s)
            leave, how = None, "stay"
        else:
            leave = min(last_leave, join + rng.uniform(0.1, 0.5) * duration_s)
            how = "goodbye" if i % 2 else "silent"
            if leave - join < 3 * interval_s:
                join = max(0.0, leave - 3 * interval_s)
        members.append(Member(f"churn/{i:03d}", join, leave, how, rng.uniform(20, 200)))
    return members


def _report(m: Member, interval_s: float) -> dict[str, Any]:
    usage = min(m.demand, m.share) if m.share is not None else m.demand
    m.admitted += usage * interval_s
    m.seq += 1
    return {
        "participant": {"participant_id": m.pid, "application_id": "churn", "executor_id": m.pid.split("/")[1],
                        "host": "localhost", "pid": 100_000 + int(m.pid.split("/")[1])},
        "seq": m.seq, "sent_at": time.time(), "interval_s": interval_s, "applied_policy_version": 0,
        "usage": [{"level": "resource_group", "name": GROUP, "direction": "publish", "usage_msgs_per_s": usage,
                   "demand_msgs_per_s": m.demand}],
        "buckets": [{"level": "resource_group", "name": GROUP, "kind": "publish",
                     "msgs": {"tokens": 1.0, "rate": m.share or QUOTA, "capacity": m.share or QUOTA}}],
        "counters": [{"level": "resource_group", "name": GROUP, "kind": "publish", "admitted_msgs_total": m.admitted,
                      "throttled_count": m.seq, "throttle_time_seconds_total": 0.01 * m.seq}],
    }


async def _member(m: Member, c: httpx.AsyncClient, t0: float, end: float, interval_s: float, run: Churn) -> None:
    await asyncio.sleep(max(0.0, t0 + m.join_s - time.monotonic()))
    stop = end if m.leave_s is None else t0 + m.leave_s
    due = time.monotonic()
    while due < stop:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        body = _report(m, interval_s)
        m.last_sent = time.monotonic() - t0
        try:
            r = await c.post("/v1/report", json=body)
            answer = r.json()
        except (httpx.HTTPError, ValueError) as e:
            run.errors.append(f"{m.pid} report: {type(e).__name__}")
            due += interval_s
            continue
        now = time.monotonic() - t0
        if r.status_code != 200 or not answer.get("accepted"):
            run.errors.append(f"{m.pid} report: {r.status_code} {r.text[:200]}")
        else:
            m.reported_admitted = body["counters"][0]["admitted_msgs_total"]
            users = answer["usage"].get(KEY, {})
            m.answers.append((now, frozenset(users)))
            if m.first_answer is None:
                m.first_answer = now
            if m.pid in users:
                usages = {p: u["usage_msgs_per_s"] for p, u in users.items()}
                demands = {p: u["demand_msgs_per_s"] for p, u in users.items()}
                m.share = local_quotas("fair", QUOTA, usages, demands)[m.pid]
                m.shares.append((now, m.share))
        due += interval_s
    await asyncio.sleep(max(0.0, stop - time.monotonic()))   # leave at the time set, not at the last report
    if m.how in ("goodbye", "stay"):      # stayers say goodbye at the end
        for attempt in (1, 2):   # a pooled connection the server closed as idle fails once; a retry is a new one
            try:
                r = await c.post("/v1/goodbye", json={"participant_id": m.pid})
            except httpx.TransportError as e:
                if attempt == 2:
                    run.errors.append(f"{m.pid} goodbye: {type(e).__name__}")
                continue
            if r.status_code != 204:
                run.errors.append(f"{m.pid} goodbye: {r.status_code} {r.text[:200]}")
            break
        m.left_at = time.monotonic() - t0
    elif m.how == "silent":
        m.left_at = m.last_sent


def _counters(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        if family.type == "counter":
            for s in family.samples:
                if s.name.endswith("_total"):
                    out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


async def _observe(c: httpx.AsyncClient, cp: ControlPlaneProcess, t0: float, end: float, every_s: float,
                   run: Churn) -> None:
    previous: dict[Any, float] = {}
    while time.monotonic() < end + 4 * run.interval_s:
        start = time.monotonic() - t0
        try:
            groups = (await c.get("/v1/state/resourcegroups")).json()["resourceGroups"]
            text = (await c.get("/metrics")).text
        except (httpx.HTTPError, ValueError, KeyError) as e:
            run.errors.append(f"observer: {type(e).__name__}: {e}")
            await asyncio.sleep(every_s)
            continue
        stop = time.monotonic() - t0
        split = next(g for g in groups if g["name"] == GROUP)["publish"]["participants"]
        run.observations.append({"start": start, "end": stop, "participants": set(split),
                                 "allocated": math.fsum(p["allocation_msgs_per_s"] for p in split.values())})
        current = _counters(text)
        run.scrapes += 1
        if not run.first_counters:
            run.first_counters = dict(current)
        for key, value in previous.items():
            if key not in current:
                run.metric_decreases.append(f"{start:.1f}: {key} disappeared (was {value})")
            elif current[key] < value:
                run.metric_decreases.append(f"{start:.1f}: {key} went down {value} -> {current[key]}")
        previous = current
        run.final_counters = current
        run.rss_kb.append((start, memory_kb(cp.pid)["VmRSS"]))
        await asyncio.sleep(max(0.0, every_s - (time.monotonic() - t0 - start)))


async def _run(cp: ControlPlaneProcess, run: Churn) -> None:
    limits = httpx.Limits(max_connections=len(run.members) + 4, max_keepalive_connections=len(run.members) + 4)
    async with httpx.AsyncClient(base_url=cp.url, headers={"Authorization": f"Bearer {PARTICIPANT}"},
                                 timeout=10, limits=limits) as c, \
            httpx.AsyncClient(base_url=cp.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10) as admin:
        t0 = time.monotonic()
        end = t0 + run.duration_s
        observer = asyncio.create_task(_observe(admin, cp, t0, end, run.interval_s / 2, run))
        await asyncio.gather(*(_member(m, c, t0, end, run.interval_s, run) for m in run.members))
        for m in run.members:   # the stayers' last shares before any of them left (the others had gone by then)
            if m.how == "stay" and (last := [s for t, s in m.shares if t < run.duration_s]):
                run.final_shares[m.pid] = last[-1]
        await observer     # runs on until the silent leavers have expired and the stayers said goodbye


def churn(participants: int = 100, duration_s: float = 120.0, interval_s: float = 1.0,
          seed: int = 10) -> tuple[Churn, ControlPlaneProcess]:
    """Run the churn against a fresh control plane (stopped before returning; its data dir is kept until then)."""
    run = Churn(schedule(participants, duration_s, interval_s, seed), interval_s, duration_s)
    cp = ControlPlaneProcess(interval_s).start()
    try:
        with cp.admin() as admin:
            admin.put(f"/admin/v2/resourcegroups/{GROUP}", json={"publishRateInMsgs": QUOTA}).raise_for_status()
        asyncio.run(_run(cp, run))
    finally:
        cp.stop()
    return run, cp


def rows_of(run: Churn) -> list[dict[str, Any]]:
    what = f"{len(run.members)} participants over {run.duration_s:g} s"
    delays = run.redistribution_delays()
    membership = run.membership_errors()
    warm, end, peak = run.rss_mb()
    out = []
    for how, label in (("goodbye", "by goodbye"), ("silent", "silently (expired)")):
        worst = max(delays[how], default=math.nan)
        bound = run.bound_s(how)
        out.append(row(SECTION, f"{what}: leaver {label} gone from every answer within", worst, "s",
                       f"<= {bound:g} s", bool(worst <= bound),
                       note=f"{len(delays[how])} leavers; report interval {run.interval_s:g} s"))
    out.append(row(SECTION, f"{what}: split of the quota wrong or stale", len(membership), "observations", "0",
                   not membership, note=f"of {len(run.observations)}; the split always covers exactly the live "
                                        f"participants and adds up to the quota"))
    stay_sum = math.fsum(run.final_shares.values())
    out.append(row(SECTION, f"{what}: shares the stayers computed, summed", stay_sum / QUOTA, "x quota",
                   "0.99-1.01", bool(abs(stay_sum / QUOTA - 1) <= 0.01),
                   note=f"{len(run.final_shares)} stayers, each from its own last answer"))
    out.append(row(SECTION, f"{what}: counter series that went down", len(run.metric_decreases), "series", "0",
                   not run.metric_decreases, note=f"{run.scrapes} scrapes of /metrics"))
    out.append(row(SECTION, f"{what}: control plane RSS growth", end - warm, "MB", "< 20 MB",
                   bool(end - warm < 20), note=f"{warm:.1f} MB warm, {end:.1f} MB at the end, peak {peak:.1f} MB"))
    out.append(row(SECTION, f"{what}: report errors", len(run.errors), "reports", "0", not run.errors,
                   note="; ".join(run.errors[:3])))
    return out


def run(quick: bool = False) -> list[dict[str, Any]]:
    result, _ = churn(30, 20.0, 0.5) if quick else churn(100, 120.0, 1.0)
    return rows_of(result)


if __name__ == "__main__":
    from .common import text_table

    print(text_table(run(quick="--quick" in sys.argv)))
