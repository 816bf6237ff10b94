"""The SQLite store without a server: one transaction per change, versions, audit, migrations."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from controlplane.errors import ApiError
from controlplane.store import DB_FILE, SCHEMA_VERSION, AuditInfo, Store, StoreError

pytestmark = pytest.mark.unit
WHO = AuditInfo("admin", "PUT", "/admin/v2/resourcegroups/a")


def test_change_bumps_version_and_audits(tmp_path: Path) -> None:
    s = Store(tmp_path, clock=lambda: 1234.5)
    assert s.policy_version() == 1 and s.schema_version == SCHEMA_VERSION
    c1 = s.change("resourcegroup", "a", {"x": 1}, WHO)
    c2 = s.change("resourcegroup", "a", {"x": 2}, WHO)
    assert (c1.old, c1.version, c2.old, c2.version) == (None, 2, {"x": 1}, 3)
    assert s.get("resourcegroup", "a") == {"x": 2}
    s.change("resourcegroup", "a", None, AuditInfo("admin (bob)", "DELETE", "/admin/v2/resourcegroups/a"))
    assert s.get("resourcegroup", "a") is None and s.policy_version() == 4
    total, entries = s.audit()
    assert total == 3
    assert [(e["oldValue"], e["newValue"], e["policyVersion"]) for e in entries] == [
        ({"x": 2}, None, 4), ({"x": 1}, {"x": 2}, 3), (None, {"x": 1}, 2)]
    assert entries[0]["actor"] == "admin (bob)" and entries[0]["method"] == "DELETE" and entries[0]["time"] == 1234.5
    assert [e["policyVersion"] for e in s.audit(limit=1, offset=1)[1]] == [3]


def test_refused_change_changes_nothing(tmp_path: Path) -> None:
    s = Store(tmp_path)
    s.change("resourcegroup", "a", {"x": 1}, WHO)

    def refuse(r: Any, old: Any) -> None:
        raise ApiError(409, "no")

    with pytest.raises(ApiError):
        s.change("resourcegroup", "a", {"x": 9}, WHO, refuse)
    assert s.get("resourcegroup", "a") == {"x": 1}
    assert s.policy_version() == 2 and s.audit()[0] == 1


def test_reopen_keeps_everything_and_uses_wal(tmp_path: Path) -> None:
    s = Store(tmp_path)
    s.change("broker", "dispatchThrottlingRateInMsg", 5, WHO)
    s.close()
    s2 = Store(tmp_path)
    assert s2.get("broker", "dispatchThrottlingRateInMsg") == 5 and s2.policy_version() == 2
    mode = sqlite3.connect(tmp_path / DB_FILE).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    Store(tmp_path).close()
    conn = sqlite3.connect(tmp_path / DB_FILE)
    conn.execute("UPDATE schema_version SET version=?", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="upgrade throttlescope"):
        Store(tmp_path)


def test_threads_lose_no_update(tmp_path: Path) -> None:
    s = Store(tmp_path)
    versions: list[int] = []
    lock = threading.Lock()

    def work(t: int) -> None:
        for i in range(20):
            v = s.change("resourcegroup", "same" if i % 2 else f"k{t}-{i}", {"v": t * 100 + i}, WHO).version
            with lock:
                versions.append(v)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(versions) == list(range(2, 2 + 120))
    assert s.policy_version() == 121
    assert len(s.items("resourcegroup")) == 6 * 10 + 1
