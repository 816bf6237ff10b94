"""Offload and mutations: PIP-211 offload reads against their flow permits, and KIP-599 mutation quotas.

Offload permits are a broker (per process) limit, so the cluster-wide line is permits x participants that
offload. "Limited" counts reads that had to wait for a window (brk_ledgeroffloader_ledger_offload_limited).
Mutation quotas are token buckets per (user, client id): tokens below zero are debt, repaid at the quota rate,
and the throttle time is how long that takes.
"""

from __future__ import annotations

import time

import streamlit as st

from dashboard import data, derive, derive_participants, figures, ui
from dashboard.derive_participants import OffloadSample
from protocol.state import ParticipantsState

__all__ = ["main"]

PERMITS = "managedLedgerOffloadBrokerFlowPermitsPerSecond"
SAMPLES = "offload.samples"
MAX_SAMPLES = 600


def _samples(people: ParticipantsState) -> list[OffloadSample]:
    """Offload totals sampled at each refresh, kept in the session (the control plane keeps no offload history)."""
    samples: list[OffloadSample] = st.session_state.setdefault(SAMPLES, [])
    sample = derive_participants.offload_sample(people, time.time())
    if sample is not None and (not samples or sample.seen > samples[-1].seen):
        samples.append(sample)
        del samples[:-MAX_SAMPLES]
    return samples


def _offload(people: ParticipantsState, settings: dict | None) -> None:
    st.subheader("Offload")
    rows = derive_participants.offload_rows(people)
    points = derive_participants.offload_points(_samples(people))
    permits = settings.get(PERMITS) if settings else None
    c1, c2, c3 = st.columns(3)
    c1.metric("Flow permits per process", derive.limit_text(permits, "B/s"),
              help=f"Broker setting {PERMITS} (Limits page)", border=True)
    rate = derive.latest(points, lambda p: p.admittedBytesPerSecond)
    c2.metric("Offload read rate", "n/a" if rate is None else f"{rate:,.0f} B/s", f"{len(rows)} participant(s)",
              delta_color="off", delta_arrow="off", border=True)
    c3.metric("Limited reads", f"{sum(r['limited'] for r in rows):,}", "waited for a window", delta_color="off",
              delta_arrow="off", border=True)
    total = derive_participants.permits_line(permits, rows)
    ui.plot(figures.offload_figure(points, total, title="offload bytes/s vs permits (the participants that "
                                                         "offloaded, since this page opened)"), "offload.figure")
    ui.table(rows, "offload.table", empty="No participant reports offload statistics.")


def _mutations(people: ParticipantsState, policies: dict | None) -> None:
    st.subheader("Mutation quotas")
    rows = derive_participants.mutation_rows(people)
    names = derive.short_names(r["participant"] for r in rows)   # (one bar each: same-named bars would stack)
    ui.plot(figures.mutation_figure([{**r, "where": names[r["participant"]]} for r in rows]),
            "mutations.figure")
    ui.table(rows, "mutations.table", empty="No participant reports mutation quotas.")
    configured = (policies or {}).get("mutationQuotas", [])
    if configured:
        st.caption("Configured (Limits page): " + "; ".join(
            f"{q['user']} / {q['clientId']}: " + (
                f"{derive.limit_text(q['quotaPerSecond'], '/s')}, burst "
                f"{derive.limit_text(q['quotaPerSecond'] * q['samples'] * q['windowSeconds'])}"
                if derive.limit_value(q["quotaPerSecond"]) != derive.UNLIMITED else derive.UNLIMITED)
            + ("" if q["strict"] else " (permissive)") for q in configured))


def _live() -> None:
    conn = ui.conn()
    people = ui.need(data.participants(conn))
    if people is None:
        return
    if not people.participants:
        ui.empty_state("No participant is reporting right now")
        return
    settings = data.broker_values(conn)
    policies = data.policies(conn)
    _offload(people, None if isinstance(settings, data.Unavailable) else settings)
    _mutations(people, None if isinstance(policies, data.Unavailable) else policies)
    ui.stamp(participants=people)


def main() -> None:
    st.title("Offload and mutations")
    st.caption("Offload reads (PIP-211) against their flow permits, and mutation quotas (KIP-599) per user and "
               "client id.")
    ui.live(_live)


if __name__ == "__main__":
    main()
