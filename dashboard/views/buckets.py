"""Buckets: every level's token buckets over time, rate vs limit, and how often they throttled.

The filters (levels, name, dimension, window) sit outside the live fragment, so they keep their values while
the charts below refresh; each chart has a stable key, so zoom survives refreshes. A balance below zero is debt
(PIP-322: a send may overdraw the bucket), drawn red below the zero line.
"""

from __future__ import annotations

import streamlit as st

from dashboard import data, derive, figures, ui

__all__ = ["main"]

LEVELS = ("broker", "resource_group", "tenant", "namespace", "topic", "subscription")
WINDOWS = (60, 300, 900)
MAX_BUCKETS = 12


def _live(levels: list[str], name: str, dim: str, window: int, only_limited: bool) -> None:
    conn = ui.conn()
    buckets = ui.need(data.bucket_totals(conn))
    history = ui.need(data.history(conn, window)) if buckets is not None else None
    if buckets is None or history is None:
        return
    if not buckets.totals and not history.series:
        ui.empty_state("No bucket has been reported yet")
        return
    wanted = name.strip().lower()
    shared = data.shared_summary(conn)   # the shared limits as configured (the buckets' rates are their grants' pace)
    shared = None if isinstance(shared, data.Unavailable) else shared
    rows = [r for r in derive.bucket_rows(buckets, shared) if r["level"] in levels and wanted in r["name"].lower()]
    limits = derive.limits_per_s(buckets, shared)
    capacity = {(t.level, t.kind, t.name): (t.msgs if dim == "msgs" else t.bytes).capacity for t in buckets.totals}
    series = [s for s in history.series if s.level in levels and wanted in s.name.lower() and s.kind != "offload"
              and (not only_limited or limits.get((s.level, s.kind, s.name), {}).get(dim) is not None)]
    st.subheader(f"Current buckets ({len(rows)})")
    ui.table(rows, "buckets.table", empty="No bucket matches the filters.",
             **{"in debt": st.column_config.CheckboxColumn("in debt", help="tokens below zero")})
    st.subheader(f"Over time ({len(series)} limiters)")
    if not series:
        st.caption("No limiter matches the filters" + (" (with a limit set)." if only_limited else "."))
    for s in series[:MAX_BUCKETS]:
        limiter = (s.level, s.kind, s.name)
        key = ".".join(limiter)
        st.markdown(f"**{derive.label(s.level, s.name, s.kind)}** &nbsp; "
                    f"`{s.points[-1].participants} participant(s)`")
        c1, c2, c3 = st.columns(3)
        with c1:
            ui.plot(figures.tokens_figure(s.points, dim, capacity.get(limiter), title=f"{dim} tokens",
                                          uirevision=key), f"buckets.tokens.{key}")
        with c2:
            limit = limits.get(limiter, {}).get(dim)
            ui.plot(figures.rate_vs_limit_figure(s.points, limit, dim, uirevision=key), f"buckets.rate.{key}")
        with c3:
            ui.plot(figures.throttled_figure(s.points, title="throttled per second", uirevision=key),
                    f"buckets.throttled.{key}")
    if len(series) > MAX_BUCKETS:
        st.caption(f"Showing {MAX_BUCKETS} of {len(series)}: narrow the filters to see the others.")
    st.caption(f"History from the {history.source}.")
    ui.stamp(buckets=buckets, history=history, shared_limits=shared)


def main() -> None:
    st.title("Buckets")
    st.caption("Every level's token buckets: balance (debt below zero in red), admitted rate vs limit, throttles.")
    c1, c2, c3, c4, c5 = st.columns([4, 3, 2, 2, 2], vertical_alignment="bottom")
    levels = c1.multiselect("Levels", LEVELS, default=list(LEVELS), key="buckets.levels",
                            format_func=lambda lv: lv.replace("_", " "))
    name = c2.text_input("Name contains", key="buckets.name", placeholder="e.g. acme/web")
    dim = c3.segmented_control("Dimension", ["msgs", "bytes"], default="msgs", key="buckets.dim") or "msgs"
    window = c4.selectbox("Window", WINDOWS, index=1, key="buckets.window", format_func=lambda s: f"{s // 60} min")
    only_limited = c5.toggle("Only limited", value=True, key="buckets.limited",
                             help="Hide limiters without a bucket (unlimited) in this dimension")
    ui.live(_live, levels, name, dim, window, only_limited)


if __name__ == "__main__":
    main()
