"""Fairness: who waits in each limiter's queue, how throughput is shared, and how resource groups split quotas.

- Queues: each participant's limiters keep a FIFO of throttled producers (PIP-322); the head resumes first. The
  table and bars show them in that order with how long each has waited.
- Shares: under each limit shared by several topics (a tenant, a namespace, a resource group), each topic's
  producer's part of the admitted msgs/s over the last minute, and Jain's index of those parts.
- Resource groups (PIP-82): per participant, usage, demand and the quota it computes from the usage map.
"""

from __future__ import annotations

import streamlit as st

from dashboard import data, derive, figures, ui
from protocol.state import QueuesState, ResourceGroupsState

__all__ = ["main"]

SHARE_WINDOW_S = 60.0
MAX_PARENTS = 6


def _queues(queues: QueuesState) -> None:
    st.subheader("Fairness queues")
    rows = derive.queue_rows(queues)
    if not rows:
        st.caption("No producer is waiting right now: every limit has tokens.")
        return
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["queue"], r["participant"]), []).append(r)
    cols = st.columns(2)
    names = derive.short_names(participant for _, participant in groups)
    for i, ((queue, participant), entries) in enumerate(groups.items()):
        with cols[i % 2]:
            ui.plot(figures.queue_figure(entries, title=f"{queue} @ {names[participant]}",
                                         uirevision=f"{queue}.{participant}"), f"fairness.queue.{queue}.{participant}")
    ui.table(rows, "fairness.queues.table")


def _shares(history: data.History, rgs: ResourceGroupsState | None) -> None:
    st.subheader("Share of admitted throughput")
    st.caption("Under each limit shared by several topics, each topic's producers' part of the admitted msgs/s "
               "(last minute). Jain's index: 1 = equal shares, 1/n = one takes everything.")
    parents = derive.parents(history, rgs)
    if not parents:
        st.caption("No limit is shared by two or more topics yet.")
        return
    cols = st.columns(2)
    for i, (level, name) in enumerate(parents[:MAX_PARENTS]):
        shares = derive.child_shares(history, (level, name), rgs, SHARE_WINDOW_S)
        index = derive.jain(shares.values())
        with cols[i % 2]:
            st.metric(f"Jain's index, {level.replace('_', ' ')} {name}", "n/a" if index is None else f"{index:.3f}",
                      f"{len(shares)} topics", delta_color="off", delta_arrow="off", border=True)
            ui.plot(figures.shares_figure(shares, index, title=f"{level.replace('_', ' ')} {name}",
                                          uirevision=f"share.{level}.{name}"), f"fairness.share.{level}.{name}")


def _groups(rgs: ResourceGroupsState) -> None:
    st.subheader("Resource groups")
    if not rgs.resourceGroups:
        st.caption("No resource group is configured (Limits page, or PUT /admin/v2/resourcegroups/{name}).")
        return
    rows = derive.rg_rows(rgs)
    for g in rgs.resourceGroups:
        attached = ", ".join([*(f"topic {t}" for t in g.topics), *(f"namespace {n}" for n in g.namespaces),
                              *(f"tenant {t}" for t in g.tenants)])
        q, lim = g.configured, derive.limit_text     # configured: the group's Pulsar fields, as its JSON
        st.markdown(f"**{g.name}**: publish {lim(q.get('publishRateInMsgs'), 'msgs/s')}, "
                    f"{lim(q.get('publishRateInBytes'), 'B/s')}; dispatch {lim(q.get('dispatchRateInMsgs'), 'msgs/s')}, "
                    f"{lim(q.get('dispatchRateInBytes'), 'B/s')}; attached to {attached or 'nothing'}")
        mine = [r for r in rows if r["group"] == g.name and r["direction"] == "publish"]
        ui.plot(figures.resource_group_figure(mine, title=f"{g.name}: publish per participant",
                                              uirevision=f"rg.{g.name}"), f"fairness.rg.{g.name}")
        ui.table([r for r in rows if r["group"] == g.name], f"fairness.rg.table.{g.name}",
                 empty="No participant uses this group right now.")
    st.caption("Quota: a participant's fair rate from the control plane's grants where it asks for them; "
               f"otherwise its part of what is left by the '{rgs.strategy}' strategy, as it computes it (PIP-82).")


def _live() -> None:
    conn = ui.conn()
    queues = ui.need(data.queues(conn))
    if queues is None:
        return
    history, rgs = ui.need(data.history(conn, 300)), ui.need(data.resource_groups(conn))
    if history is not None and not history.series and not queues.queues:
        ui.empty_state()
        return
    _queues(queues)
    if history is not None:
        _shares(history, rgs)
    if rgs is not None:
        _groups(rgs)
    ui.stamp(queues=queues, history=history, resource_groups=rgs)


def main() -> None:
    st.title("Fairness")
    st.caption("Who waits, in order and for how long; how producers share admitted throughput; how resource "
               "groups split their quota between participants.")
    ui.live(_live)


if __name__ == "__main__":
    main()
