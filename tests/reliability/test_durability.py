"""SIGKILL in the middle of a stream of admin writes (tests/controlplane/test_durability.py kills right after the
last acknowledged write; here writes are in flight when the process dies).

Six threads write as fast as the control plane acknowledges: resource groups, namespace publish rates, mutation
quotas, and (to a shared key) overwrites, each write with a value of its own. After ``ACKED`` acknowledgements the
control plane is killed with SIGKILL while the threads keep writing, three times over on the same data directory.
After each kill the SQLite file, opened read-only before anything else touches it, passes
``PRAGMA integrity_check`` and holds every acknowledged (2xx) write; every write it holds is whole (its entry and
its audit record, with consecutive policy versions); after the restart the API serves every acknowledged write.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from controlplane.store import DB_FILE

from .conftest import ADMIN, ControlPlane

pytestmark = [pytest.mark.integration, pytest.mark.parallel]
THREADS = 6
ACKED = 120         # acknowledgements per round before the kill
ROUNDS = 3
V2 = "/admin/v2"


def write(i: int, t: int, n: int) -> tuple[str, str, Any, str, str]:
    """(method, path, body, stored kind, stored key) of thread t's n-th write in round i."""
    key = f"r{i}-t{t}-n{n}"
    match n % 4:
        case 0:
            return "PUT", f"{V2}/resourcegroups/{key}", {"publishRateInMsgs": n + 1}, "resourcegroup", key
        case 1:
            return ("POST", f"{V2}/namespaces/acme/{key}/publishRate", {"publishThrottlingRateInMsg": n + 1},
                    "namespace.publishRate", f"acme/{key}")
        case 2:
            return ("PUT", f"{V2}/quotas/mutations/{key}/cli", {"quotaPerSecond": n + 1}, "mutationquota",
                    json.dumps([key, "cli"]))
        case _:   # everyone overwrites one group: the last acknowledged value per thread must not be older
            return "PUT", f"{V2}/resourcegroups/shared", {"publishRateInBytes": t * 100_000 + n}, "resourcegroup", "shared"


def read_only(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True)


def test_sigkill_mid_stream_keeps_every_acknowledged_write_and_an_intact_store(start_cp: Any) -> None:
    cp: ControlPlane = start_cp()
    db = cp.data_dir / DB_FILE
    acked: list[tuple[str, str, Any, int, float]] = []   # kind, key, body, version, when acknowledged
    lock = threading.Lock()
    in_flight_at_kill = 0

    for i in range(ROUNDS):
        if i:
            cp.start()
        stop = threading.Event()
        errors: list[str] = []

        def writer(t: int, i: int = i, stop: threading.Event = stop, errors: list[str] = errors) -> None:
            with httpx.Client(base_url=cp.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10) as c:
                n = 0
                while not stop.is_set() and n < 10_000:
                    method, path, body, kind, key = write(i, t, n)
                    try:
                        r = c.request(method, path, json=body)
                    except httpx.TransportError as exc:   # the kill: this write was in flight
                        errors.append(type(exc).__name__)
                        return
                    if r.status_code not in (201, 204):
                        errors.append(f"{r.status_code} {r.text}")
                        return
                    with lock:
                        acked.append((kind, key, body, int(r.headers["X-Policy-Version"]), time.monotonic()))
                    n += 1

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(THREADS)]
        start = len(acked)
        for th in threads:
            th.start()
        deadline = time.monotonic() + 30
        while len(acked) - start < ACKED and time.monotonic() < deadline:
            time.sleep(0.005)
        assert len(acked) - start >= ACKED, f"only {len(acked) - start} writes acknowledged in 30 s: {errors}"
        cp.kill()                                  # SIGKILL, writers still writing
        stop.set()
        for th in threads:
            th.join(timeout=20)
        assert not any(th.is_alive() for th in threads)
        in_flight_at_kill += sum(err in ("RemoteProtocolError", "ReadError", "ConnectError", "ReadTimeout",
                                         "ConnectTimeout", "WriteError") for err in errors)
        assert all(not err[0].isdigit() for err in errors), errors   # no write was refused

        # the file as the kill left it, read-only, before any restart touches it
        conn = read_only(db)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            version = conn.execute("SELECT value FROM meta WHERE key='policy_version'").fetchone()[0]
            stored = {(k, key): json.loads(v) for k, key, v in conn.execute("SELECT kind, key, value FROM entries")}
            audit = conn.execute("SELECT policy_version, endpoint, new FROM audit ORDER BY id").fetchall()
        finally:
            conn.close()
        # every change is whole: one audit record per version, consecutive, ending at the stored version
        assert [v for v, _, _ in audit] == list(range(2, version + 1))
        assert max(v for *_, v, _ in acked) <= version
        last_shared: dict[int, int] = {}
        for kind, key, body, v, _ in acked:
            if key == "shared":                                   # the shared key: the newest acknowledged
                last_shared[v] = body["publishRateInBytes"]
                continue
            assert stored.get((kind, key)) is not None and all(
                stored[kind, key][f] == value for f, value in body.items()), (kind, key, body)
        newest_acked = max(last_shared)
        newest_stored_version = max(v for v, endpoint, _ in audit if endpoint.endswith("/resourcegroups/shared"))
        assert newest_stored_version >= newest_acked
        assert stored["resourcegroup", "shared"]["publishRateInBytes"] == json.loads(
            next(new for v, endpoint, new in audit if v == newest_stored_version))["publishRateInBytes"]
        print(f"\nKILL round {i}: {len(acked) - start} acknowledged, {version - 1} changes stored "
              f"(version {version}), {len(errors)} writes in flight at the kill")

    assert in_flight_at_kill >= ROUNDS, "the kills did not hit writes in flight"
    # after a restart the API serves every acknowledged write
    cp.start()
    admin = cp.client(ADMIN)
    assert admin.get("/healthz").json()["policyVersion"] >= max(v for *_, v, _ in acked)
    for kind, key, body, _, _ in acked:
        if kind == "resourcegroup" and key != "shared":
            assert admin.get(f"{V2}/resourcegroups/{key}").json()["publishRateInMsgs"] == body["publishRateInMsgs"]
        elif kind == "namespace.publishRate":
            got = admin.get(f"{V2}/namespaces/{key}/publishRate").json()
            assert got["publishThrottlingRateInMsg"] == body["publishThrottlingRateInMsg"]
        elif kind == "mutationquota":
            user = json.loads(key)[0]
            assert admin.get(f"{V2}/quotas/mutations/{user}/cli").json()["quotaPerSecond"] == body["quotaPerSecond"]
    audit_total = admin.get(f"{V2}/audit", params={"limit": 1}).json()["total"]
    assert audit_total == admin.get("/healthz").json()["policyVersion"] - 1
    r = admin.put(f"{V2}/resourcegroups/after-the-kills", json={})
    assert r.status_code == 201 and int(r.headers["X-Policy-Version"]) == audit_total + 2
