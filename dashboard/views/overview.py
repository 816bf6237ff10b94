"""Overview: is the control plane up, who reports, how fresh the data is, and who is throttled most.

Everything below the title is one live fragment (``ui.live``): health, participants alive, data freshness ("updated
2 s ago", a warning when stale), the most throttled targets, throttle time per second, admitted vs limit.
"""

from __future__ import annotations

import time

import streamlit as st

from dashboard import data, derive, figures, ui

__all__ = ["main"]

WINDOW_S = 300.0
TOP_N = 8


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
    age, stale, text = derive.freshness(people, time.time())
    c2.metric("Participants alive", len(people["participants"]), f"{len(people['departed'])} departed",
              delta_color="off", delta_arrow="off", border=True)
    c3.metric("Data freshness", text.removeprefix("updated "), "stale" if stale else "live",
              delta_color="inverse" if stale else "off", delta_arrow="off", border=True)
    c4.metric("Policy version", health["policyVersion"], f"report every {health['reportIntervalSeconds']:g} s",
              delta_color="off", delta_arrow="off", border=True)
    if stale and age is not None:
        st.warning(f"Data is stale: the last report arrived {derive.ago(age)} (reports are due every "
                   f"{people['reportIntervalSeconds']:g} s). Participants may have stopped, or cannot reach the "
                   "control plane.", icon=":material/schedule:")
    if history is None:
        return
    if derive.is_empty(people, history):
        ui.empty_state()
        return
    top = derive.top_throttled(history, TOP_N)
    left, right = st.columns(2)
    with left:
        ui.plot(figures.top_throttled_figure(top), "overview.top")
    with right:
        wanted = {(r["level"], r["kind"], r["name"]) for r in top}
        series = [s for s in history["series"] if (s["level"], s["kind"], s["name"]) in wanted]
        ui.plot(figures.throttle_time_figure(series, [derive.label(s) for s in series]), "overview.throttle")
    st.subheader("Most throttled targets")
    ui.table(top, "overview.top.table", empty="Nothing was throttled in the last 5 minutes.")
    buckets = ui.need(data.buckets(conn))
    if buckets is not None:
        rows = derive.admitted_vs_limit(history, buckets)
        ui.plot(figures.admitted_vs_limit_figure(rows), "overview.admitted")
    ui.stamp()


def main() -> None:
    st.title("Overview")
    st.caption("Control plane health, who reports, and which limits hold producers back (last 5 minutes).")
    ui.live(_live)


if __name__ == "__main__":
    main()
