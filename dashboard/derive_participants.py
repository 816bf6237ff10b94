"""Pure transforms of ``/v1/state/participants`` (a ``ParticipantsState``) into what the pages show of the
participants: how fresh their reports are, which policy version each applies, their offload reads and their
mutation quotas.

How and why
-----------
Each participant reports every interval, so the newest ``lastSeen`` says how fresh the whole page is: older
than three report intervals and the data is stale (the participants stopped, or cannot reach the control
plane). Offload statistics are counters (reads, limited reads) and the participants' own window rate; the
control plane keeps no history of them, so the offload page samples the totals at each refresh
(``offload_sample``) and turns successive samples into ``HistoryPoint``s (``offload_points``) -- the shape every
history has -- that the same figures draw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dashboard.derive import ago, limit_value
from protocol.state import HistoryPoint, HistoryState, ParticipantsState

__all__ = ["STALE_INTERVALS", "freshness", "applied", "is_empty", "offload_rows", "permits_line", "OffloadSample",
           "offload_sample", "offload_points", "mutation_rows"]

STALE_INTERVALS = 3


def freshness(doc: ParticipantsState, now: float) -> tuple[float | None, bool, str]:
    """(age of the newest report, stale?, "updated 2 s ago"); stale past 3 report intervals."""
    seen = [p.lastSeen for p in (*doc.participants, *doc.departed)]
    if not seen:
        return None, False, "no report yet"
    age = max(0.0, now - max(seen))
    return age, age > STALE_INTERVALS * doc.reportIntervalSeconds, f"updated {ago(age)}"


def applied(doc: ParticipantsState, version: int) -> tuple[int, int, list[dict[str, Any]]]:
    """(participants on ``version`` or later, live participants, one row each)."""
    rows = [{"participant": p.participantId, "host": p.host, "applied version": p.appliedPolicyVersion,
             "applied": "yes" if p.appliedPolicyVersion >= version else "not yet",
             "last report": ago(p.secondsSinceLastSeen)} for p in doc.participants]
    return sum(r["applied"] == "yes" for r in rows), len(rows), rows


def is_empty(participants: ParticipantsState, history: HistoryState | None = None) -> bool:
    """Nothing to show yet: no participant alive or departed, and no history."""
    return not (participants.participants or participants.departed or (history is not None and history.series))


def permits_line(permits_per_s: Any, rows: Sequence[dict[str, Any]]) -> float | None:
    """The cluster-wide flow permits against which the offload reads are drawn: a process's permits (a broker
    setting) times the participants that have offloaded anything (``offload_rows``; every worker reports its
    offload statistics, most of them zeros: counting them drew 8 MB/s for two workers that read). None where the
    permits are unlimited or nobody has read yet."""
    readers = sum(1 for r in rows if r["read bytes"] > 0)
    if not isinstance(permits_per_s, int | float) or permits_per_s <= 0 or not readers:
        return None
    return permits_per_s * readers


def offload_rows(doc: ParticipantsState) -> list[dict[str, Any]]:
    return [{"participant": p.participantId, "permits bytes/s": limit_value(o.limit_bytes_per_s),
             "limited": o.limited_total, "read bytes": o.read_bytes_total,
             "offload s": round(o.offload_time_seconds_total, 2), "max read bytes": o.reading_max_bytes,
             "errors": o.errors_total}
            for p in doc.participants if (o := p.offload) is not None]


@dataclass(frozen=True)
class OffloadSample:
    """Every live participant's offload totals, summed, as read at ``t`` (the page's clock)."""

    t: float
    seen: float       # the newest report they come from (control plane's clock): a new one is a new sample
    rate: float       # bytes/s read over the participants' last complete windows
    read: float       # bytes read (counter)
    limited: float    # reads delayed by the limit (counter)


def offload_sample(doc: ParticipantsState, now: float) -> OffloadSample | None:
    """One sample of every live participant's offload totals (None when none reports offload)."""
    stats = [(p.lastSeen, p.offload) for p in doc.participants if p.offload is not None]
    if not stats:
        return None
    return OffloadSample(t=now, seen=max(seen for seen, _ in stats),
                         rate=math.fsum(o.rate_bytes_per_s for _, o in stats),
                         read=math.fsum(o.read_bytes_total for _, o in stats),
                         limited=float(sum(o.limited_total for _, o in stats)))


def offload_points(samples: Sequence[OffloadSample]) -> list[HistoryPoint]:
    """History points from successive samples: read bytes/s (the participants' own window rate when they report
    one, else the counter's growth) and limited reads per second (a counter that went down restarts)."""
    points = []
    for a, b in zip(samples, samples[1:], strict=False):
        dt = b.t - a.t
        if dt <= 0:
            continue
        grew = b.read - a.read if b.read >= a.read else b.read
        limited = b.limited - a.limited if b.limited >= a.limited else b.limited
        points.append(HistoryPoint(t=b.t, admittedBytesPerSecond=b.rate if b.rate > 0 else grew / dt,
                                   throttledPerSecond=limited / dt))
    return points


def mutation_rows(doc: ParticipantsState) -> list[dict[str, Any]]:
    return [{"user": m.user, "client id": m.client_id, "participant": p.participantId,
             "tokens": round(m.tokens, 2), "rate /s": round(m.rate, 2), "throttle s": round(m.throttle_time_s, 3)}
            for p in doc.participants for m in p.mutationQuotas]
