"""Overview: is the control plane up, who reports, how fresh the data is, who is throttled most, and how each
shared limit is shared.

Everything below the title is one live fragment (``ui.live``): health, participants alive, data freshness ("updated
2 s ago", a warning when stale), the most throttled targets, throttle time per second, admitted vs limit, and the
shared limits (``/v1/state/shared``): one row each, those over the limit or with quota stranded first, then for the
first few each participant's demand, usage and share against the limit (``derive_shared``).
"""

from __future__ import annotations

import time

import streamlit as st

from dashboard import data, derive, derive_participants, derive_shared, figures, ui
from protocol import parse_limit_key
from protocol.state import SharedState

__all__ = ["main"]

WINDOW_S = 300.0
TOP_N = 8
SHARED_N = 6


def _live() -> None:
    conn = ui.conn()
    health = data.health(conn)
    people = ui.need(data.participants(conn)) if not isinstance(health, data.Unavailable) else None
    c1, c2, c3, c4 = st.columns(4)
    if isinstance(health, data.Unavailable):
        c1.metric("Control plane", "down", border=True)
        ui.show_unavailable(health)
        return
    uptime = derive.ago(health["uptimeSeconds"]).removesuffix(" ago")
    c1.metric("Control plane", "up", f"v{health['version']}, up {uptime}", delta_color="off", delta_arrow="off",
              border=True)
    if people is None:
        return
    history = ui.need(data.history(conn, WINDOW_S))
    age, stale, text = derive_participants.freshness(people, time.time())
    c2.metric("Participants alive", len(people.participants), f"{len(people.departed)} departed",
              delta_color="off", delta_arrow="off", border=True)
    c3.metric("Data freshness", text.removeprefix("updated "), "stale" if stale else "live",
              delta_color="inverse" if stale else "off", delta_arrow="off", border=True)
    c4.metric("Policy version", health["policyVersion"], f"report every {health['reportIntervalSeconds']:g} s",
              delta_color="off", delta_arrow="off", border=True)
    if stale and age is not None:
        st.warning(f"Data is stale: the last report arrived {derive.ago(age)} (reports are due every "
                   f"{people.reportIntervalSeconds:g} s). Participants may have stopped, or cannot reach the "
                   "control plane.", icon=":material/schedule:")
    if history is None:
        return
    if derive_participants.is_empty(people, history):
        ui.empty_state()
        return
    top = derive.top_throttled(history, TOP_N)
    left, right = st.columns(2)
    with left:
        ui.plot(figures.top_throttled_figure(top), "overview.top")
    with right:
        wanted = {(r["level"], r["kind"], r["name"]) for r in top}
        series = [s for s in history.series if (s.level, s.kind, s.name) in wanted]
        ui.plot(figures.throttle_time_figure(series, [derive.label(s.level, s.name, s.kind) for s in series]),
                "overview.throttle")
    st.subheader("Most throttled targets")
    ui.table(top, "overview.top.table", empty="Nothing was throttled in the last 5 minutes.")
    buckets = ui.need(data.bucket_totals(conn))
    shared = ui.need(data.shared_summary(conn))
    if buckets is not None:   # (a shared limit's line is the limit as configured, not its buckets' summed pace)
        rows = derive.admitted_vs_limit(history, buckets, shared=shared)
        ui.plot(figures.admitted_vs_limit_figure(rows), "overview.admitted")
    if shared is not None:
        _shared(conn, shared)
        if any(limit.adaptive is not None for limit in shared.limits):
            _adaptive(conn)
    ui.stamp(participants=people, history=history, buckets=buckets, shared_limits=shared)


def _adaptive(conn: data.Conn) -> None:
    traces = ui.need(data.adaptive(conn))
    if traces is None:
        return
    st.subheader("Adaptive limits")
    st.caption("The rate each adaptive limit learnt from its sink's answers, under the configured ceiling: a "
               "refusal (429, 503) cuts it, clean seconds probe it back up, a Retry-After pauses every sender.")
    for trace in traces.limits:
        level, _, name = parse_limit_key(trace.key)
        ui.plot(figures.adaptive_figure(trace.points, title=f"{derive.label(level, name)}: learnt rate",
                                        uirevision=f"adaptive.{trace.key}"), f"overview.adaptive.{trace.key}")


def _shared(conn: data.Conn, doc: SharedState) -> None:
    st.subheader("Shared limits")
    st.caption("Each limit the participants share: what they admit against it, and how the control plane's grants "
               "split it (share: each one's max-min fair rate by what it wants). Over the limit or quota stranded "
               "(unused while demand waits) come first." + (" The control plane is re-learning after a restart."
                                                             if doc.learning else ""))
    tables = derive_shared.summary_tables(doc)
    if not tables:
        ui.table([], "overview.shared", empty="No participant reports a shared limit yet.")
    for unit, rows in tables.items():
        if len(tables) > 1:
            st.caption(f"Limits in {unit}" + (" (set in bytes only)" if unit == "B/s" else ""))
        ui.table(rows, "overview.shared" if unit == "msgs/s" else "overview.shared.bytes",
                 status=st.column_config.TextColumn(width="large"))
    limits = derive_shared.ordered(doc)
    # the participants of the limits drawn only (the summary lists none: 100,000 of them at 1,000 x 100)
    listed = ui.need(data.shared_limits(conn, [limit.key for limit in limits[:SHARED_N]])) if limits else None
    detail = {limit.key: limit for limit in (listed.limits if listed is not None else ())}
    for limit in limits[:SHARED_N]:
        rows = derive_shared.participant_rows(detail.get(limit.key, limit))
        name, cap, unit = derive_shared.chart(limit)
        ui.plot(figures.shared_limit_figure(rows, cap, unit, title=f"{name}: usage vs share",
                                            uirevision=f"shared.{limit.key}"), f"overview.shared.{limit.key}")
        ui.table(rows, f"overview.shared.table.{limit.key}")
    if len(limits) > SHARED_N:
        st.caption(f"Charts for {SHARED_N} of {len(limits)} shared limits; the table lists them all.")


def main() -> None:
    st.title("Overview")
    st.caption("Control plane health, who reports, and which limits hold producers back (last 5 minutes).")
    ui.live(_live)


if __name__ == "__main__":
    main()
