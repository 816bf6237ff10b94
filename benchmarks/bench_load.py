"""Control-plane load: N simulated participants reporting once a second on loopback.

What is measured
----------------
1,000 participants (``--quick``: 200) each send one ``POST /v1/report`` per second for 60 s (``--quick``: 10 s) to a
real control plane (``python -m controlplane``: uvicorn, one process) on 127.0.0.1. Then 1,000, 500 and 400 of them
for 30 s whose jobs' shared limits are all held at their ceiling: each participant also asks for grants (``POST
/v1/grant``) on a connection of its own, as its grant keeper does, and follows the answers (``_asker``): 50 (25)
limits of 20 participants, more busy limits than the control plane's budget of asks gives 100 a second each
(``controlplane.ask_pace``), so their asks are spaced further apart; 20 limits of 20 at the full 100 a second each,
20 askers a limit 0.2 s apart. Figures: the report latency (p50, p99, max: from writing a report to reading its
whole answer, client side; and the asks'), the share of reports answered and accepted, the asks a second, what was
granted of each limit, the control plane's CPU (utime + stime from ``/proc/<pid>/stat`` over the measured window, as
a percentage of one core) and memory (VmRSS at the start and end of the window, VmHWM). Goal: p99 < 100 ms on this
(2-core) machine.

How the load is made, and why this way
--------------------------------------
- One asyncio task per participant, in this process, each with its own keep-alive HTTP/1.1 connection, as a real
  participant's httpx client has. Requests are written and answers read on raw asyncio streams with
  pre-rendered bodies (only ``seq``, ``sent_at`` and the counters change), so a report costs the generator tens
  of microseconds: its own CPU is measured too (``generator CPU``) and stays well under a core, so the figures
  are the control plane's, not the generator's. No request queues behind another one: each participant waits
  only for its own answer.
- Participant i reports at phase i/N of each second, so the load is even (N reports/s), as independent workers
  drift apart in practice. A report answered after its next one was due delays that next one (as the real
  reporter does); the latency of every report counts, and a report without an answer within the reporter's
  timeout (twice the interval it follows, 0.5-5 s) is an error, after which the next report waits the reporter's
  backoff (from the interval, doubling, jittered, at most ten intervals), as ``collectors.reporter`` does: sent
  at the interval instead, a loaded control plane's unanswered participants never learnt a longer one and
  flooded it (300 participants of 1,000 limits: 168 of 266 reports timed out at a full core, told 10 s).
- Reports are realistic: participants come in jobs of ``GROUP`` (20) workers that share a resource group and a
  topic, so each report carries usage for two shared limits, bucket and counter snapshots of five limiters
  (broker, resource group, tenant, namespace, topic), and each answer carries the usage map of its job's shared
  limits (20 participants per key; not in the runs that ask for grants, whose participants report as the project's
  do, without asking for it). The first report of each participant also brings the policy document.
- Prometheus reads ``/metrics`` beside them, as under ``make run``: every ``deploy/prometheus.yml`` scrape interval
  (5 s), on a connection of its own (``_scraper``). Without it the figures were those of a control plane nobody
  watched: at 1,000 participants of 100 limits a scrape of 4.7 MB took the core for 1.2-1.6 s, and the reports
  that came meanwhile took the p99 from 36 ms to 723 ms (since, ``controlplane.scrapes`` lets them in).
- One cell has the dashboard open beside them as well: 1,000 participants of 100 shared limits (told up to 10 s, as
  the scale curve's cell), and every ``THROTTLESCOPE_DASHBOARD_REFRESH`` (2 s) the seven ``/v1/state/*`` views the
  live pages read (``_dashboard_reader``; the buckets' totals and the shared limits' summary, as
  ``dashboard.data.bucket_totals`` and ``shared_summary`` read them; the overview's read of its six charted limits'
  participants, a few kB, is left out). Those views grow with participants x limits (21.7 MB of buckets' rows and
  28.6 MB of shares there), and built on worker threads they took the reports' p99 to 1.2 s (since, every view is
  built a step at a time on the event loop: ``controlplane.renders``).
- A warm-up (connections opened, staggered, and a few rounds of reports) precedes the measured window.
- The generator's own garbage collector runs under the control plane's policy (``controlplane.heap``): its record
  of answers grows through the run, and CPython's full collections over it paused every participant 30-130 ms
  every 40 s or so, which read as the control plane's latency.

Run: ``python -m benchmarks --only load`` (``--quick``: 200 participants x 10 s; the dashboard's cell 200 of 10
limits), or
``python -m benchmarks.bench_load [--quick] [--participants N] [--duration S]``.
``benchmarks/bench_churn.py`` reuses the process helpers below.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from collectors.client import GZIP_ABOVE_BYTES, KEEPALIVE_EXPIRY_S
from collectors.config import backoff_cap_s
from collectors.grants import DEFAULT_CHUNK_S, SOONEST_RETRY_S
from collectors.report_schedule import ReportSchedule
from controlplane.ask_pace import ASKS_BUDGET_PER_S
from controlplane.heap import HeapFreezer
from controlplane.launcher import end, env_without_settings, free_port, spawn
from dashboard.config import DEFAULT_REFRESH_S
from protocol import report_timeout_s

from .common import percentile, row

SECTION = "load"
ADMIN = "bench-admin-token-0123456789abcdef"
PARTICIPANT = "bench-participant-token-0123456789"
REPO = Path(__file__).resolve().parents[1]
GROUP = 20               # participants per job: they share a resource group and a topic
TOPIC_LIMIT_PER_S = 500.0   # each job's topic limit (msgs/s)
DEMAND_SHARE = 2.0       # a participant at its limit's ceiling wants this many times its fair share
GOAL_USED = 0.97         # of a limit held at its ceiling: granted, on average
GOAL_P99_MS = 100.0
ANSWER_TIMEOUT_S = 5.0
SETTLE_MAX_S = 90.0      # the longest a warm-up waits, past its own length, for the report interval to settle
START_TIMEOUT_S = 30.0
SCRAPE_TIMEOUT_S = 60.0
# what the dashboard's live pages read (dashboard.data: the overview, buckets, limits, fairness, resource groups and
# adaptive pages between them; the overview's few charted limits with their participants left out)
DASHBOARD_VIEWS = ("/v1/state/participants", "/v1/state/buckets?rows=false", "/v1/state/queues",
                   "/v1/state/resourcegroups", "/v1/state/shared?participants=false", "/v1/state/history",
                   "/v1/state/adaptive")
DASHBOARD_LIMITS = 100   # shared limits a participant reports in the dashboard's cell
TICKS = os.sysconf("SC_CLK_TCK")


def scrape_every_s() -> float:
    """How often Prometheus reads ``/metrics`` under ``make run``: ``deploy/prometheus.yml``'s scrape interval."""
    text = (REPO / "deploy" / "prometheus.yml").read_text()
    found = re.search(r"^\s*scrape_interval:\s*(\d+(?:\.\d+)?)s\s*$", text, re.MULTILINE)
    if found is None:
        raise ValueError("deploy/prometheus.yml: no 'scrape_interval: <seconds>s' line")
    return float(found.group(1))


# --- the control plane process and /proc readings ------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` (its threads included), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS   # fields 14 and 15 of proc(5), after "pid (comm)"


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of process ``pid``, in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


class ControlPlaneProcess:
    """``python -m controlplane`` on a free loopback port with known tokens, data in a temporary directory."""

    def __init__(self, report_interval_s: float = 1.0, data_dir: Path | None = None) -> None:
        self._tmp = None if data_dir is not None else tempfile.TemporaryDirectory(prefix="throttlescope-bench-")
        self.data_dir = data_dir if data_dir is not None else Path(self._tmp.name)  # type: ignore[union-attr]
        self.report_interval_s = report_interval_s
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.data_dir / "controlplane.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> ControlPlaneProcess:
        self.port = free_port()
        self.proc = spawn(self.port, self.data_dir / "data", ["--report-interval", f"{self.report_interval_s:g}"],
                          env_without_settings(THROTTLESCOPE_ADMIN_TOKEN=ADMIN, THROTTLESCOPE_TOKEN=PARTICIPANT),
                          self.log, cwd=REPO, timeout_s=START_TIMEOUT_S)
        return self

    def admin(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)

    def stop(self) -> None:
        end(self.proc)
        self.proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


@contextmanager
def control_plane(report_interval_s: float = 1.0) -> Iterator[ControlPlaneProcess]:
    cp = ControlPlaneProcess(report_interval_s)
    try:
        yield cp.start()
    finally:
        cp.stop()


# --- simulated participants ------------------------------------------------------------------------------------

def _report_template(i: int, limits: int = 1, usage_map: bool = True) -> tuple[bytes, ...]:
    """Participant ``i``'s report as byte pieces around its seq, sent_at, interval (the one it follows, as a
    participant says it: the control plane reads its sender's timeout from it), applied policy version and
    admitted counters (filled per send). ``limits`` > 1: as many topics of its namespace, each a shared limit of
    its own (the namespace's rate, per topic), with usage, a bucket and counters each (``bench_scale``'s curve).
    ``usage_map``: the report asks for the usage map (PIP-82's relay); the project's participants do not."""
    job = i // GROUP
    tenant, group = f"tenant{job % 10}", f"rg{job}"
    ns = f"{tenant}/ns{job}"
    topic = f"{ns}/t"
    limiters = [("broker", "broker"), ("resource_group", group), ("tenant", tenant), ("namespace", ns),
                ("topic", topic)]
    report = {
        "participant": {"participant_id": f"load/{job}/{i}", "application_id": f"load-app-{job}",
                        "executor_id": str(i % GROUP), "host": f"host{i % 7}", "pid": 10_000 + i},
        "seq": "@SEQ@", "sent_at": "@SENT@", "interval_s": "@INT@", "applied_policy_version": "@VER@",
        "usage_map": usage_map,
        "usage": [{"level": level, "name": name, "direction": "publish", "usage_msgs_per_s": 40.0 + i % 13,
                   "usage_bytes_per_s": 4000.0 + i, "demand_msgs_per_s": 55.0 + i % 17,
                   "demand_bytes_per_s": 5500.0 + i} for level, name in (("resource_group", group), ("topic", topic))],
        "buckets": [{"level": level, "name": name, "kind": "publish",
                     "msgs": {"tokens": 12.5, "rate": 50.0, "capacity": 100.0, "period_s": 1.0}}
                    for level, name in limiters],
        "counters": [{"level": level, "name": name, "kind": "publish", "throttled_count": 3,
                      "throttle_time_seconds_total": 0.25, "admitted_msgs_total": "@ADMITTED@",
                      "admitted_bytes_total": 1000.0} for level, name in limiters],
        "queues": [{"level": "topic", "name": topic, "length": 1,
                    "entries": [{"producer": f"{topic}#p{i % GROUP}", "waiting_s": 0.01}]}],
    }
    for j in range(1, limits):
        name = f"{ns}/t{j}"
        report["usage"].append({"level": "topic", "name": name, "direction": "publish", "usage_msgs_per_s": 4.0 + j % 7,
                                "demand_msgs_per_s": 5.0 + j % 11})
        report["buckets"].append({"level": "topic", "name": name, "kind": "publish",
                                  "msgs": {"tokens": 1.5 + j % 5, "rate": 10.0, "capacity": 10.0, "period_s": 1.0}})
        report["counters"].append({"level": "topic", "name": name, "kind": "publish", "throttled_count": j % 3,
                                   "admitted_msgs_total": 1000.0 + j})
    text = json.dumps(report, separators=(",", ":"))
    return tuple(part.encode() for part in re.split(r'"@(?:SEQ|SENT|INT|VER|ADMITTED)@"', text))


@dataclass
class Sample:
    due: float          # when the report was due (monotonic)
    latency_s: float    # write -> whole answer read; nan when there was no answer
    problem: str | None = None   # what was wrong (None: HTTP 200 and accepted)
    interval_s: float = math.nan  # a report's: the interval its participant was following when it sent it

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclass
class Load:
    samples: list[Sample] = field(default_factory=list)
    unsettled_at: float = 0.0   # when an answer last told a participant an interval it was not following, or a
                                # report failed and its participant backed off

    @property
    def errors(self) -> dict[str, int]:
        """How many samples had each problem (the measured window's, once ``_run_load`` kept only those)."""
        return dict(Counter(s.problem for s in self.samples if s.problem is not None))


@dataclass
class Until:
    """When the senders stop (monotonic seconds): moved on while they run, when the warm-up waits to settle."""

    at: float


async def _send_every(port: int, connect_at: float, first_due: float,
                      next_due: Callable[[bool, float, float], float], end: Until, load: Load,
                      request: Callable[[], bytes], wrong: Callable[[int, bytes], str | None],
                      following: Callable[[], float] | None = None,
                      timeout_s: Callable[[], float] = lambda: ANSWER_TIMEOUT_S) -> None:
    """Sends ``request()`` from ``first_due`` until ``end`` on one keep-alive connection (opened at ``connect_at``,
    again after a failure, and after ``KEEPALIVE_EXPIRY_S`` idle, as a participant's client does), each answer's
    latency into ``load``; ``wrong(status, answer)`` says what is wrong with an answer (None: it is OK), and
    ``next_due(ok, due, now)``, told whether the send due at ``due`` was answered with HTTP 200 by ``now``, when
    the next is due (a report's: ``collectors.report_schedule``; an ask's: a wait after the answer, as the grant
    keeper counts a retry). ``following()``: the interval a sample was sent under (a report's); ``timeout_s()``:
    how long to wait for a connection and an answer."""
    await asyncio.sleep(max(0.0, connect_at - time.monotonic()))
    reader = writer = None
    due = used_at = first_due
    while due < end.at:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        under_s = following() if following is not None else math.nan
        if writer is not None and time.monotonic() - used_at > KEEPALIVE_EXPIRY_S:
            writer.close()   # (idle longer than a participant keeps a connection: it opens a new one)
            reader = writer = None
        try:
            wait_s = timeout_s()
            if writer is None:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), wait_s)
            data = request()
            start = time.monotonic()
            writer.write(data)
            status, answer = await asyncio.wait_for(_answer(reader), wait_s)  # type: ignore[arg-type]
            latency = time.monotonic() - start
            load.samples.append(Sample(due, latency, wrong(status, answer), under_s))
            ok = status == 200   # (an error status is a failed round to the reporter too)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as e:
            load.samples.append(Sample(due, math.nan, type(e).__name__, under_s))
            if writer is not None:
                writer.close()
            reader = writer = None
            ok = False
        now = used_at = time.monotonic()
        due = next_due(ok, due, now)
    if writer is not None:
        writer.close()


async def _participant(i: int, port: int, first_due: float, interval_s: float, end: Until, load: Load,
                       connect_at: float, limits: int = 1, usage_map: bool = True) -> None:
    """Participant ``i``'s reporter: a report every ``interval_s``, its policy version applied from the answers,
    and then every interval an answer tells (a loaded control plane stretches it: ``controlplane.report_pace``), at
    the place in it the answer tells (``controlplane.report_phase``)."""
    pieces = _report_template(i, limits, usage_map)
    # a report of many limits goes gzip-compressed, as a participant sends it: its fixed pieces compressed once,
    # each a gzip member, the values of each send as small members between them (RFC 1952: the body inflates to
    # their concatenation), so the generator's CPU stays the figures' bystander
    packed = (lambda b: gzip.compress(b, 1)) if len(b"".join(pieces)) > GZIP_ABOVE_BYTES else None
    if packed is not None:
        pieces = tuple(packed(p) for p in pieces)
    encoding = "Content-Encoding: gzip\r\n" if packed is not None else ""
    head = (f"POST /v1/report HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {PARTICIPANT}\r\n"
            f"Content-Type: application/json\r\n{encoding}User-Agent: throttlescope-bench\r\nContent-Length: ").encode()
    value = packed or (lambda b: b)
    seq, applied = 0, b"0"
    # when each report goes, as the reporter's: the interval told, the place in it told, the backoff of a failure
    schedule = ReportSchedule(interval_s, backoff_cap_s, random.Random(i).random)

    def request() -> bytes:
        nonlocal seq
        seq += 1
        admitted = value(str(seq * 100).encode())
        body = b"".join((pieces[0], value(str(seq).encode()), pieces[1], value(repr(time.time()).encode()),
                         pieces[2], value(f"{schedule.interval_s:g}".encode()), pieces[3], value(applied),
                         *(p + admitted for p in pieces[4:-1]), pieces[-1]))
        return head + str(len(body)).encode() + b"\r\n\r\n" + body

    def wrong(status: int, answer: bytes) -> str | None:
        nonlocal applied
        if status != 200:
            return f"HTTP {status}"
        version = _POLICY_VERSION.search(answer)
        if version is not None:   # applied, as a participant does: the next answers omit the policy document
            applied = version.group(1)
        told, place = _TOLD.search(answer), _NEXT.search(answer)
        if schedule.answered(float(told.group(1)) if told else schedule.interval_s,
                             float(place.group(1)) if place else None, time.monotonic()):
            load.unsettled_at = time.monotonic()   # (an interval told that it was not following)
        if b'"accepted":true' in answer:
            return None
        reason = _REASON.search(answer)   # (its words up to the first number: "the report was sent", "seq")
        return "not accepted" + (f" ({reason.group(1).decode().strip()})" if reason else "")

    def next_due(ok: bool, due: float, now: float) -> float:
        if not ok:
            load.unsettled_at = now
        return schedule.next_due(ok, due, now)

    await _send_every(port, connect_at, first_due, next_due, end, load, request, wrong,
                      following=lambda: schedule.interval_s, timeout_s=lambda: report_timeout_s(schedule.interval_s))


_POLICY_VERSION = re.compile(rb'"policyVersion":(\d+)')
_TOLD = re.compile(rb'"reportIntervalSeconds":([0-9.eE+]+)')
_NEXT = re.compile(rb'"nextReportInSeconds":([0-9.eE+]+)')
_REASON = re.compile(rb'"reason":"([^"0-9]{1,40})')


async def _asker(i: int, port: int, first_due: float, end: Until, load: Load, connect_at: float,
                 granted: list[tuple[float, float]]) -> None:
    """Participant ``i``'s grant keeper for its job's topic limit (the limit its reports share), held at its
    ceiling, on a connection of its own as the keeper has: it wants ``DEMAND_SHARE`` times its fair share, so it asks
    for that many of the chunks the last answer said (what it would spend in a chunk's time), spends a grant at its
    rate and asks again when it is spent, or ``retry_s`` after the answer when it got less than it asked for (as
    ``collectors.grants`` does: in tests/collectors' simulation of keepers at their limits' ceiling, every answer
    was short of the ask). Each grant goes into ``granted`` (when it was asked for, messages); an answer is OK when
    it answers that limit."""
    job = i // GROUP
    demand_per_s = DEMAND_SHARE * TOPIC_LIMIT_PER_S / GROUP
    head = (f"POST /v1/grant HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {PARTICIPANT}\r\n"
            f"Content-Type: application/json\r\nContent-Length: ").encode()
    ask = {"level": "topic", "name": f"tenant{job % 10}/ns{job}/t", "direction": "publish",
           "wants_msgs": DEMAND_SHARE * TOPIC_LIMIT_PER_S * DEFAULT_CHUNK_S / GROUP, "rate_msgs_per_s": demand_per_s}
    sent_at = wait_s = 0.0

    def request() -> bytes:
        nonlocal sent_at
        sent_at = time.monotonic()
        body = json.dumps({"participant_id": f"load/{job}/{i}", "asks": [ask]}, separators=(",", ":")).encode()
        return head + str(len(body)).encode() + b"\r\n\r\n" + body

    def wrong(status: int, answer: bytes) -> str | None:
        nonlocal wait_s
        wait_s = DEFAULT_CHUNK_S   # (no grant read: as a keeper whose ask failed, back after a chunk's time)
        if status != 200:
            return f"HTTP {status}"
        grants = json.loads(answer).get("grants") or [{}]
        grant = grants[0]
        if "msgs" not in grant:
            return "no grant"
        got, wanted = grant["msgs"], ask["wants_msgs"]
        granted.append((sent_at, got))
        wait_s = max(SOONEST_RETRY_S, grant["retry_s"]) if got < wanted else got / demand_per_s
        if grant["chunk_msgs"] > 0:
            ask["wants_msgs"] = DEMAND_SHARE * grant["chunk_msgs"]
        return None

    await _send_every(port, connect_at, first_due, lambda ok, due, now: now + wait_s, end, load, request, wrong)


async def _reader(port: int, paths: tuple[str, ...], every_s: float, end: Until,
                  took: list[tuple[float, float]]) -> None:
    """A reader beside the participants on a connection of its own: every ``every_s``, as long as they send, each of
    ``paths`` in turn; ``took``: (when, how long) of each round (nan: one of it failed). Prometheus as ``make run``
    runs it reads ``("/metrics",)`` (``_scraper``); the dashboard's live pages, ``DASHBOARD_VIEWS``, as
    ``dashboard.data`` reads them (``_dashboard_reader``)."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=SCRAPE_TIMEOUT_S,
                                 headers={"Authorization": f"Bearer {ADMIN}"}) as client:
        while time.monotonic() + every_s < end.at:
            await asyncio.sleep(every_s)
            start = time.monotonic()
            try:
                for path in paths:
                    (await client.get(path)).raise_for_status()
                took.append((start, time.monotonic() - start))
            except httpx.HTTPError:
                took.append((start, math.nan))


def _scraper(port: int, every_s: float, end: Until, took: list[tuple[float, float]]) -> Coroutine[Any, Any, None]:
    return _reader(port, ("/metrics",), every_s, end, took)


def _dashboard_reader(port: int, every_s: float, end: Until,
                      took: list[tuple[float, float]]) -> Coroutine[Any, Any, None]:
    return _reader(port, DASHBOARD_VIEWS, every_s, end, took)


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    match = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    if match is None:
        raise ValueError("an answer without Content-Length")
    return status, await reader.readexactly(int(match.group(1)))


async def _run_load(port: int, participants: int, interval_s: float, warmup_s: float, duration_s: float,
                    cp_pid: int, limits: int = 1, usage_map: bool = True, asking: bool = False,
                    settle_s: float = 0.0, scrape_s: float = 5.0, dashboard_s: float | None = None
                    ) -> tuple[Load, Load, list[list[tuple[float, float]]], dict[str, float]]:
    load, asks = Load(), Load()
    granted: list[list[tuple[float, float]]] = [[] for _ in range(math.ceil(participants / GROUP))]   # per job
    t0 = load.unsettled_at = time.monotonic()
    measure_from = t0 + warmup_s
    end = Until(measure_from + duration_s + (SETTLE_MAX_S if settle_s else 0.0))
    connect_spread = max(0.5, warmup_s / 2)
    tasks = [asyncio.create_task(_participant(i, port, t0 + connect_spread + interval_s * i / participants,
                                              interval_s, end, load, t0 + connect_spread * i / participants,
                                              limits, usage_map))
             for i in range(participants)]
    scrapes: list[tuple[float, float]] = []
    tasks.append(asyncio.create_task(_scraper(port, scrape_s, end, scrapes)))
    reads: list[tuple[float, float]] = []
    if dashboard_s is not None:
        tasks.append(asyncio.create_task(_dashboard_reader(port, dashboard_s, end, reads)))
    if asking:   # (first asks spread over a chunk's time, apart from the reports')
        tasks += [asyncio.create_task(_asker(i, port, t0 + connect_spread + DEFAULT_CHUNK_S * (i + 0.5) / participants,
                                             end, asks, t0 + connect_spread * i / participants, granted[i // GROUP]))
                  for i in range(participants)]
    await asyncio.sleep(max(0.0, measure_from - time.monotonic()))
    # (settle_s: on until no participant was told a new interval, or backed off, for that long; SETTLE_MAX_S at most)
    while settle_s and time.monotonic() - load.unsettled_at < settle_s and time.monotonic() < end.at - duration_s:
        await asyncio.sleep(0.25)
    measure_from = time.monotonic()
    quiet_s = measure_from - load.unsettled_at   # (under settle_s: the warm-up's most ran out before it settled)
    end.at = measure_from + duration_s
    cpu0, gen0, wall0, mem0 = cpu_seconds(cp_pid), _own_cpu(), time.monotonic(), memory_kb(cp_pid)
    await asyncio.sleep(max(0.0, end.at - time.monotonic()))
    cpu1, gen1, wall1, mem1 = cpu_seconds(cp_pid), _own_cpu(), time.monotonic(), memory_kb(cp_pid)
    await asyncio.gather(*tasks)
    wall = wall1 - wall0
    for each in (load, asks):
        each.samples = [s for s in each.samples if measure_from <= s.due < end.at]
    granted = [[(t, n) for t, n in job if measure_from <= t < end.at] for job in granted]
    scraped, read = _rounds(scrapes, measure_from, end.at), _rounds(reads, measure_from, end.at)
    return load, asks, granted, {"cp_cpu_pct": 100 * (cpu1 - cpu0) / wall, "gen_cpu_pct": 100 * (gen1 - gen0) / wall,
                  **dict(zip(("scrapes", "scrapes_failed", "scrape_max_ms"), scraped, strict=True)),
                  **dict(zip(("dashboard_reads", "dashboard_reads_failed", "dashboard_max_ms"), read, strict=True)),
                  "rss_start_mb": mem0["VmRSS"] / 1024, "rss_end_mb": mem1["VmRSS"] / 1024,
                  "hwm_mb": mem1["VmHWM"] / 1024, "window_s": wall, "warmed_s": measure_from - t0,
                  "quiet_s": quiet_s}


def _rounds(took: list[tuple[float, float]], start: float, end: float) -> tuple[int, int, float]:
    """Of a reader's rounds begun in [``start``, ``end``) (``_reader``): how many, how many failed, and the longest
    answered in ms (nan: none was)."""
    times = [t for at, t in took if start <= at < end]
    return len(times), sum(math.isnan(t) for t in times), 1000 * max((t for t in times if not math.isnan(t)),
                                                                       default=math.nan)


def _server_stack() -> str:
    """What uvicorn serves with here: it picks uvloop and httptools when they are installed (uvicorn[standard])."""
    from importlib.util import find_spec

    loop = "uvloop" if find_spec("uvloop") else "asyncio"
    return f"{loop} + {'httptools' if find_spec('httptools') else 'h11'}"


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def _server_mean_ms(cp: ControlPlaneProcess) -> float:
    """Mean report handling time from the control plane's own histogram; NaN when it is not read in
    ``SCRAPE_TIMEOUT_S`` (a fresh scrape of a large cell is rendered a piece at a time, within a tenth of the
    core: a cell of the curve took more than 10 s, and a figure of a note failed the whole curve)."""
    try:
        text = httpx.get(cp.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"},
                         timeout=SCRAPE_TIMEOUT_S).text
    except httpx.HTTPError:
        return math.nan
    total = count = math.nan
    for line in text.splitlines():
        if line.startswith("throttlescope_report_latency_seconds_sum"):
            total = float(line.split()[-1])
        elif line.startswith("throttlescope_report_latency_seconds_count"):
            count = float(line.split()[-1])
    return 1000 * total / count if count else math.nan


def _ms_or_unread(ms: float) -> str:
    return "not read" if math.isnan(ms) else f"{ms:.2f} ms"


def measure(participants: int, duration_s: float, interval_s: float = 1.0, warmup_s: float | None = None,
            limits: int = 1, usage_map: bool = True, asking: bool = False, settle_s: float = 0.0,
            scrape_s: float | None = None, dashboard_s: float | None = None) -> dict[str, Any]:
    """Run the load against a fresh control plane; the raw figures (see the module essay). ``limits``: shared
    limits a participant reports; ``usage_map``: whether its reports ask for the usage map (see
    ``_report_template``); ``asking``: each participant also asks for grants at its limit's ceiling (``_asker``);
    ``settle_s``: the warm-up goes on until no participant was told a new report interval, or backed off after a
    failed report, for this long (the control plane stretches it under load: ``controlplane.report_pace``), at
    most ``SETTLE_MAX_S`` more; ``scrape_s``: Prometheus's scrape interval (``_scraper``; default: as shipped,
    ``scrape_every_s``); ``dashboard_s``: how often the dashboard's live views are read (``_dashboard_reader``;
    None: nobody has the dashboard open)."""
    scrape_s = scrape_s if scrape_s is not None else scrape_every_s()
    warmup_s = warmup_s if warmup_s is not None else min(5.0, 2.0 + participants / 500)
    load_before = os.getloadavg()[0]
    with control_plane(interval_s) as cp:
        with cp.admin() as admin:  # the jobs' resource groups and topic limits exist: answers carry real policies
            for job in range(math.ceil(participants / GROUP)):
                admin.put(f"/admin/v2/resourcegroups/rg{job}", json={"publishRateInMsgs": 1000}).raise_for_status()
                admin.post(f"/admin/v2/persistent/tenant{job % 10}/ns{job}/t/publishRate",
                           json={"publishThrottlingRateInMsg": TOPIC_LIMIT_PER_S}).raise_for_status()
                if limits > 1:
                    admin.post(f"/admin/v2/namespaces/tenant{job % 10}/ns{job}/publishRate",
                               json={"publishThrottlingRateInMsg": 10}).raise_for_status()
        # the generator's own collector kept off its latencies: its record of answers grows, and CPython's full
        # collections over it paused every participant 30-130 ms every 40 s or so of a long run (and no full
        # collection of its own within a run: the sweeps free its cycles)
        freezer = HeapFreezer(min_interval_s=24 * 3600.0).start()
        try:
            load, asks, granted, usage = asyncio.run(_run_load(cp.port, participants, interval_s, warmup_s,
                                                               duration_s, cp.pid, limits, usage_map, asking,
                                                               settle_s, scrape_s, dashboard_s))
        finally:
            freezer.stop()
        server_ms = _server_mean_ms(cp)
    answered = sorted(s.latency_s for s in load.samples if not math.isnan(s.latency_s))
    # the reports due: each participant's, at the interval it was told (the median of those it sent under)
    told_s = statistics.median(s.interval_s for s in load.samples) if load.samples else interval_s
    expected = participants * duration_s / told_s
    return {"participants": participants, "limits": limits, "duration_s": duration_s, "expected": expected,
            "told_s": told_s,
            "sent": len(load.samples), "answered": len(answered), "ok": sum(s.ok for s in load.samples),
            "ok_at_told": accepted_at_told(load.samples, told_s),
            "errors": dict(load.errors), "p50_ms": 1000 * percentile(answered, 50),
            "p99_ms": 1000 * percentile(answered, 99), "max_ms": 1000 * answered[-1] if answered else math.nan,
            "server_mean_ms": server_ms, "loadavg_before": load_before, "scrape_s": scrape_s,
            "dashboard_s": dashboard_s, **usage,
            **_asks_of(asks, granted, duration_s, asking)}


def _asks_of(asks: Load, granted: list[list[tuple[float, float]]], duration_s: float, asking: bool
             ) -> dict[str, Any]:
    """The grant asks' figures; ``used``: each job's grants over the window, of its limit."""
    answered = sorted(s.latency_s for s in asks.samples if not math.isnan(s.latency_s))
    used = [sum(n for _, n in job) / duration_s / TOPIC_LIMIT_PER_S for job in granted] if asking else []
    return {"asking": asking, "asks_sent": len(asks.samples), "asks_ok": sum(s.ok for s in asks.samples),
            "ask_errors": dict(asks.errors), "ask_p50_ms": 1000 * percentile(answered, 50) if answered else math.nan,
            "ask_p99_ms": 1000 * percentile(answered, 99) if answered else math.nan,
            "used_mean": sum(used) / len(used) if used else math.nan, "used_min": min(used, default=math.nan)}


def accepted_at_told(samples: list[Sample], told_s: float) -> float:
    """The reports answered and accepted, each counted as the intervals of ``told_s`` its participant's interval
    spans (one sent under 2 s, when the median told is 1 s, stands for two of them)."""
    return sum(s.interval_s for s in samples if s.ok) / told_s


def reports_due_floor(m: dict[str, Any]) -> float:
    """The fewest reports answered and accepted in the window that still say none was lost, counted at the median
    told interval (``ok_at_told``: a report sent under twice that counts twice -- participants told different
    intervals send different numbers). At a report a second the window holds a whole number of each participant's
    (0.999 of them); at a told interval ``T`` of a window ``W`` it holds ``W / T`` on average and a participant's
    spare fraction of one is a coin its phase throws (the reporter spreads its phase after a change): 3 standard
    deviations of that binomial (1,000 participants told 6 s, 8 s: 1,333 due, 45 fewer by chance alone)."""
    spare = (m["duration_s"] / m["told_s"]) % 1.0
    return min(0.999 * m["expected"], m["expected"] - 3 * math.sqrt(m["participants"] * spare * (1 - spare)))


def _longest_failed(rounds: int, failed: int, longest_ms: float) -> tuple[str, str]:
    """A note's ", the longest N ms" (none when no round was answered) and ", N failed" (none when none did)."""
    return (f", the longest {longest_ms:.0f} ms" if rounds > failed else "", f", {failed} failed" if failed else "")


def scrapes_note(m: dict[str, Any]) -> str:
    """What Prometheus's scrapes beside the load did (``_scraper``)."""
    longest, failed = _longest_failed(m["scrapes"], m["scrapes_failed"], m["scrape_max_ms"])
    return (f"a /metrics scrape every {m['scrape_s']:g} s beside, as deploy/prometheus.yml: {m['scrapes']} in the "
            f"window{longest}{failed}")


def dashboard_note(m: dict[str, Any]) -> str:
    """What the dashboard's reads beside the load did (``_dashboard_reader``); empty when nobody read."""
    if m.get("dashboard_s") is None:
        return ""
    longest, failed = _longest_failed(m["dashboard_reads"], m["dashboard_reads_failed"], m["dashboard_max_ms"])
    return (f"; the dashboard's {len(DASHBOARD_VIEWS)} live views read every {m['dashboard_s']:g} s beside: "
            f"{m['dashboard_reads']} rounds{failed}{longest}; told {m['told_s']:g} s")


def errors_text(errors: dict[str, int]) -> str:
    """How many sends had each problem, for a row's note ("none" when none had one)."""
    return ", ".join(f"{kind}: {n}" for kind, n in sorted(errors.items())) or "none"


def rows_of(m: dict[str, Any]) -> list[dict[str, Any]]:
    asking = m.get("asking", False)
    what = f"{m['participants']:,} participants x {m['duration_s']:g} s" + (
        ", asking for grants at their limits' ceiling" if asking else "") + (
        f", {m['limits']} limits each, the dashboard open" if m.get("dashboard_s") is not None else "")
    p99 = m["p99_ms"]
    errors = errors_text(m["errors"])
    ok_share = m["ok"] / m["expected"] if m["expected"] else math.nan
    due_floor = reports_due_floor(m)
    handled = m["answered"] / m["window_s"]
    asks_per_s = m["asks_sent"] / m["window_s"] if asking else 0.0
    requests = handled + asks_per_s
    cpu_ms = 10 * m["cp_cpu_pct"] / requests if requests else math.nan   # % of a core / (requests/s) -> ms each
    if asking:
        limits = math.ceil(m["participants"] / GROUP)
        sent = m["asks_sent"]
        ask_errors = errors_text(m["ask_errors"])
        asks = [row(SECTION, f"{what}: grant ask latency p99", m["ask_p99_ms"], "ms", f"< {GOAL_P99_MS:g} ms",
                    bool(m["ask_p99_ms"] < GOAL_P99_MS), note=f"p50 {m['ask_p50_ms']:.2f} ms; one connection each"),
                row(SECTION, f"{what}: grant asks answered", m["asks_ok"] / sent if sent else math.nan, "of sent",
                    ">= 0.999", bool(sent and m["asks_ok"] >= 0.999 * sent),
                    note=f"{m['asks_ok']:,} of {sent:,}; errors: {ask_errors}"),
                row(SECTION, f"{what}: grant asks a second", asks_per_s, "asks/s",
                    f"<= {1.1 * ASKS_BUDGET_PER_S:,.0f}", bool(asks_per_s <= 1.1 * ASKS_BUDGET_PER_S),
                    note=f"{asks_per_s / m['participants']:.2f} a participant, {asks_per_s / limits:.0f} a limit "
                         f"({limits} limit{'s' * (limits != 1)} of {GROUP}); the control plane's budget "
                         f"{ASKS_BUDGET_PER_S:,.0f} a second, shared between its busy limits"),
                row(SECTION, f"{what}: granted of each limit, mean", m["used_mean"], "of limit", f">= {GOAL_USED:g}",
                    bool(m["used_mean"] >= GOAL_USED),
                    note=f"least {m['used_min']:.3f}; each participant wants {DEMAND_SHARE:g}x its fair share of "
                         f"{TOPIC_LIMIT_PER_S:g} msgs/s")]
    else:
        asks = []
    return [
        row(SECTION, f"{what}: report latency p50", m["p50_ms"], "ms", note="write -> whole answer read, loopback"),
        row(SECTION, f"{what}: report latency p99", p99, "ms", f"< {GOAL_P99_MS:g} ms",
            bool(p99 < GOAL_P99_MS), note=f"max {m['max_ms']:.1f} ms; server-side handling mean "
                                          f"{_ms_or_unread(m['server_mean_ms'])}; {scrapes_note(m)}"
                                          f"{dashboard_note(m)}"),
        row(SECTION, f"{what}: reports answered and accepted", ok_share, "of due",
            f">= {due_floor / m['expected']:.3f}" if m["expected"] else ">= 0.999", bool(m["ok_at_told"] >= due_floor),
            note=f"{m['ok']:,} of {m['expected']:,.0f} due; errors: {errors}"),
        row(SECTION, f"{what}: reports answered per second", handled, "reports/s",
            note=f"{m['participants'] / 1.0:,.0f}/s offered; each participant waits for its answer before the next"),
        row(SECTION, f"{what}: control plane CPU", m["cp_cpu_pct"], "% of 1 core",
            note=f"{cpu_ms:.2f} ms of CPU per {'request (report or ask)' if asking else 'report'}; one uvicorn "
                 f"process ({_server_stack()}); {os.cpu_count()} cores shared "
                 f"with the load generator; load average {m['loadavg_before']:.2f} before the run"),
        row(SECTION, f"{what}: control plane memory (RSS)", m["rss_end_mb"], "MB",
            note=f"{m['rss_start_mb']:.1f} MB at the window's start, peak {m['hwm_mb']:.1f} MB"),
        row(SECTION, f"{what}: load generator CPU", m["gen_cpu_pct"], "% of 1 core",
            note="asyncio, one keep-alive connection per participant; well under a core: not the bottleneck"),
        *asks,
    ]


def run(quick: bool = False) -> list[dict[str, Any]]:
    participants, duration_s = (200, 10.0) if quick else (1000, 60.0)
    rows = rows_of(measure(participants, duration_s))
    for asking in ((200,) if quick else (1000, 500, 400)):   # every job's limit at its ceiling: reports and asks
        # (their reports without the usage map, as the project's participants send them: collectors.report_builder)
        rows += rows_of(measure(asking, 10.0 if quick else 30.0, usage_map=False, asking=True))
    # the dashboard's live pages open beside a large fleet (settled at the interval the control plane tells)
    rows += rows_of(measure(200 if quick else 1000, 10.0 if quick else 20.0, limits=10 if quick else DASHBOARD_LIMITS,
                            usage_map=False, settle_s=12.0, dashboard_s=DEFAULT_REFRESH_S))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_load", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="200 participants x 10 s")
    p.add_argument("--participants", type=int)
    p.add_argument("--duration", type=float, help="measured seconds")
    args = p.parse_args(argv)
    participants, duration_s = (200, 10.0) if args.quick else (1000, 60.0)
    m = measure(args.participants or participants, args.duration or duration_s)
    print(json.dumps(m, indent=2))
    from .common import text_table
    print(text_table(rows_of(m)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
