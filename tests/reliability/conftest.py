"""Reliability tests: bad input, auth, durability, faults, churn.

Real control planes come from tests/controlplane (``start_cp``: ``python -m controlplane`` on a free loopback port
with the known ADMIN and PARTICIPANT tokens, killed in a finalizer); ``RestartableControlPlane`` (tests/collectors)
keeps its port across restarts, so participants pointed at it find it again.
"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.collectors.conftest import RestartableControlPlane
from tests.controlplane.conftest import ADMIN, PARTICIPANT, ControlPlane, start_cp  # start_cp: a fixture

__all__ = ["ADMIN", "PARTICIPANT", "ControlPlane", "RestartableControlPlane", "counters", "scrape", "start_cp"]


def counters(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every counter sample (``*_total``) of a Prometheus text exposition: (name, labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(text):
        if family.type != "counter":
            continue
        for s in family.samples:
            if s.name.endswith("_total"):
                out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def scrape(cp: ControlPlane, token: str = PARTICIPANT) -> str:
    r = httpx.get(cp.url + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    r.raise_for_status()
    return r.text
