"""Limits: edit every policy live, confirm old -> new, then watch the audit log and the participants apply it.

How and why
-----------
The editor (tabs of forms from ``editors.py``) is outside the live fragment, so a refresh never resets what is
being typed. "Review change" stores a ``Pending`` in the session; the confirmation box shows old -> new and only
"Confirm" sends it (``data.send``, with the signed-in principal's credentials, so the control plane applies that
principal's rights and audits the change under its name). A form the principal may not use is read-only with
the control plane's reason. The control plane answers with the new policy version (``X-Policy-Version``), or a
``{"reason"}`` that is shown as is. The live part below follows that version:
which participants report it as applied (``/v1/state/participants``), and the audit log.
"""

from __future__ import annotations

import time
from dataclasses import asdict

import pandas as pd
import streamlit as st

from dashboard import data, derive, derive_participants, editors, signin, ui
from protocol.state import BucketsState

__all__ = ["main"]

PENDING, OUTCOME, LAST = "limits.pending", "limits.outcome", "limits.last"
TABS = ("Resource groups", "Namespaces", "Topics", "Subscriptions", "Broker and offload", "Mutation quotas")


def _known(ps: dict, buckets: BucketsState | None) -> dict[str, list[str]]:
    seen = {"namespace": set(ps.get("namespaces", {})), "topic": set(ps.get("topics", {}))}
    for b in buckets.totals if buckets is not None else []:
        if b.level in seen:
            seen[b.level].add(b.name)
    return {k: sorted(v, key=lambda n: (n not in ps.get(k + "s", {}), n)) for k, v in seen.items()}


def _editor(conn: data.Conn, ps: dict, refusal: editors.Refusal) -> None:
    known = _known(ps, ui.need(data.bucket_totals(conn)))
    settings = ui.need(data.broker_values(conn))
    tabs = st.tabs(TABS)
    found: list[editors.Pending | None] = []
    with tabs[0]:
        found.append(editors.resource_group(conn, ps, refusal))
    with tabs[1]:
        found.append(editors.level_policy(conn, ps, "namespace", known["namespace"], refusal))
    with tabs[2]:
        found.append(editors.level_policy(conn, ps, "topic", known["topic"], refusal))
    with tabs[3]:
        found.append(editors.subscription(conn, ps, known, refusal))
    with tabs[4]:
        if settings is not None:
            found.append(editors.broker(conn, settings, refusal))
    with tabs[5]:
        found.append(editors.mutation_quota(conn, ps, refusal))
    for pending in found:
        if pending is not None:
            st.session_state[PENDING] = asdict(pending)
            st.session_state.pop(OUTCOME, None)


def _confirm(conn: data.Conn) -> None:
    pending = st.session_state.get(PENDING)
    if not pending:
        return
    with st.container(border=True):
        st.subheader("Confirm the change")
        st.markdown(f"**{pending['title']}**: `{pending['method']} {pending['path']}`")
        ui.table(derive.diff_rows(pending["old"], pending["new"]), "limits.diff")
        c1, c2, _ = st.columns([1, 1, 4])
        if c1.button("Confirm", type="primary", key="limits.confirm", icon=":material/check:"):
            outcome = data.send(conn, pending["method"], pending["path"], pending["body"])
            st.session_state[OUTCOME] = {**asdict(outcome), "title": pending["title"]}
            if outcome.ok:
                st.session_state[LAST] = {"version": outcome.version, "title": pending["title"], "at": time.time()}
            del st.session_state[PENDING]
            st.rerun()
        if c2.button("Cancel", key="limits.cancel"):
            del st.session_state[PENDING]
            st.rerun()


def _outcome() -> None:
    out = st.session_state.get(OUTCOME)
    if not out:
        return
    if out["ok"]:
        st.success(f"Changed {out['title']}: policy version {out['version']}. Participants apply it at their next "
                   "report.", icon=":material/check_circle:")
    else:
        st.error(f"The control plane refused {out['title']} (HTTP {out['status']}): {out['reason']}. Nothing was "
                 "changed.", icon=":material/block:")


def _live() -> None:
    conn = ui.conn()
    last = st.session_state.get(LAST)
    st.subheader("Applied by participants")
    people = ui.need(data.participants(conn))
    if people is not None:
        version = last["version"] if last else people.policyVersion
        done, total, rows = derive_participants.applied(people, version)
        what = f"your change to {last['title']}" if last else "the current policies"
        st.metric(f"Participants on policy version {version} ({what})", f"{done} of {total}",
                  "all applied" if total and done == total else "waiting" if total else "no participant",
                  delta_color="normal" if total and done == total else "off", delta_arrow="off", border=True)
        ui.table(rows, "limits.applied", empty="No participant is reporting right now.")
    st.subheader("Audit log")
    log = ui.need(data.audit(conn, 50))
    if log is not None:
        rows = derive.audit_rows(log)
        for r in rows:
            r["time"] = pd.Timestamp(r["time"], unit="s", tz="UTC").tz_convert(None).strftime("%Y-%m-%d %H:%M:%S")
        if rows:
            r = rows[0]
            st.markdown(f"Latest: `v{r['version']}: {r['method']} {r['endpoint']}` by {r['actor']} at {r['time']} "
                        f"UTC: {r['change']}")
        st.caption(f"{log['total']} changes in all, newest first (times in UTC).")
        text = st.column_config.TextColumn
        ui.table(rows, "limits.audit", empty="No change yet.", version=st.column_config.NumberColumn(width="small"),
                 actor=text(width="small"), method=text(width="small"), endpoint=text(width="medium"),
                 change=text(width="large"), old=None, new=None)
    ui.stamp(participants=people)


def main() -> None:
    st.title("Limits")
    session = signin.session()
    conn = session.conn
    if session.who is None:
        st.caption("Change limits live: every change is reviewed (old -> new), audited under your name, and applied "
                   "by the participants at their next report.")
        st.warning("Sign in (in the sidebar) to change limits.", icon=":material/key:")
    else:
        st.caption(f"Change limits live as {signin.describe(session.who)}: every change is reviewed (old -> new), "
                   "audited under that name, and applied by the participants at their next report.")

    def refusal(method: str, path: str) -> str | None:
        return "nobody is signed in" if session.who is None else data.refusal(conn, method, path)

    ps = ui.need(data.policies(conn))
    if ps is not None:
        _editor(conn, ps, refusal)
        _confirm(conn)
        _outcome()
    ui.live(_live)


if __name__ == "__main__":
    main()
