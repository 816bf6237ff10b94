"""The durable store: one SQLite file (``throttlescope.db`` in the data directory), WAL, one transaction per change.

How it works
------------
Every durable object is one row of ``entries(kind, key, value)`` with a JSON value: a resource group
(``resourcegroup``/name), an attachment (``tenant.resourcegroup``/tenant, ``namespace.resourcegroup``/'t/ns',
``topic.resourcegroup``/'t/ns/topic'), a policy (``<tenant|namespace|topic>.<publishRate|dispatchRate|
subscriptionDispatchRate>``/target, ``subscription.dispatchRate``/'t/ns/topic/subscription'), a broker setting (``broker``/name), a mutation quota (``mutationquota``/'["user","client"]') or a tenant's TenantInfo
(``tenant``/name). Principals (who may call the API) have a table of their own, ``principals``, written by
``controlplane.principals``: their token is kept only as a SHA-256 digest.

``transact`` is the only audited writer. In one ``BEGIN IMMEDIATE`` transaction it runs the caller's write
(which may refuse with an ApiError: 404 missing, 409 in use, and then nothing is written), bumps the policy
version and appends the audit record (time, actor, method, endpoint, old, new, version). Either all of it happens
or none of it. ``change`` is the write of one ``entries`` row through it. A lock serialises writers in this
process and ``BEGIN IMMEDIATE`` against other processes, so concurrent writers never lose an update and the
policy version counts the accepted changes exactly. ``setup`` is the one unaudited writer, for what the
control plane itself puts in place at start (the bootstrap principals), which is configuration, not a change.

``schema_version`` records the layout; ``MIGRATIONS[i]`` upgrades version i to i+1, so a later release migrates
an older file in place and refuses a newer one.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DB_FILE = "throttlescope.db"

MIGRATIONS: list[str] = [
    # 0 -> 1
    """
    CREATE TABLE entries (kind TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (kind, key));
    CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
    INSERT INTO meta (key, value) VALUES ('policy_version', 1);
    CREATE TABLE audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, actor TEXT NOT NULL, method TEXT NOT NULL,
        endpoint TEXT NOT NULL, old TEXT, new TEXT, policy_version INTEGER NOT NULL);
    """,
    # 1 -> 2: named principals (token digests only; revoked ones are kept, so a name is never reused)
    """
    CREATE TABLE principals (
        name TEXT PRIMARY KEY, role TEXT NOT NULL, token_sha256 TEXT NOT NULL UNIQUE, created REAL NOT NULL,
        created_by TEXT NOT NULL, revoked REAL);
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


class StoreError(RuntimeError):
    """The store cannot be opened (newer schema, unreadable file)."""


@dataclass(frozen=True)
class Change:
    old: Any
    new: Any
    version: int


@dataclass(frozen=True)
class AuditInfo:
    actor: str
    method: str
    endpoint: str


class Reader:
    """Read access inside a transaction, for ``check`` callbacks."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def get(self, kind: str, key: str) -> Any:
        row = self._conn.execute("SELECT value FROM entries WHERE kind=? AND key=?", (kind, key)).fetchone()
        return None if row is None else json.loads(row[0])

    def items(self, kind: str) -> dict[str, Any]:
        rows = self._conn.execute("SELECT key, value FROM entries WHERE kind=? ORDER BY key", (kind,))
        return {k: json.loads(v) for k, v in rows}

    def all(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for kind, key, value in self._conn.execute("SELECT kind, key, value FROM entries ORDER BY kind, key"):
            out.setdefault(kind, {})[key] = json.loads(value)
        return out

    def policy_version(self) -> int:
        return int(self._conn.execute("SELECT value FROM meta WHERE key='policy_version'").fetchone()[0])

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of a query on a table other than ``entries`` (the principals)."""
        return self._conn.execute(sql, params).fetchall()


class Writer(Reader):
    """Read and write access inside a write transaction (``Store.transact`` and ``Store.setup``)."""

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        self._conn.execute(sql, params)

    def put(self, kind: str, key: str, value: Any) -> None:
        """Set (``value`` not None) or delete (None) one entry."""
        if value is None:
            self._conn.execute("DELETE FROM entries WHERE kind=? AND key=?", (kind, key))
        else:
            self._conn.execute("INSERT INTO entries (kind, key, value) VALUES (?, ?, ?) ON CONFLICT (kind, key) "
                               "DO UPDATE SET value=excluded.value", (kind, key, json.dumps(value, sort_keys=True)))


class Store:
    def __init__(self, data_dir: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(data_dir) / DB_FILE
        self._clock = clock
        self._lock = threading.Lock()
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._migrate()
        except sqlite3.Error as e:
            raise StoreError(f"cannot open {self.path}: {e}") from e
        self._reader = Writer(self._conn)

    def _migrate(self) -> None:
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = c.execute("SELECT version FROM schema_version").fetchone()
            current = 0 if row is None else int(row[0])
            if current > SCHEMA_VERSION:
                raise StoreError(f"{self.path} has schema version {current}; this release knows up to "
                                 f"{SCHEMA_VERSION}: upgrade throttlescope")
            for sql in MIGRATIONS[current:]:
                for statement in filter(str.strip, sql.split(";")):
                    c.execute(statement)
            if row is None:
                c.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            else:
                c.execute("UPDATE schema_version SET version=?", (SCHEMA_VERSION,))
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    @property
    def schema_version(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT version FROM schema_version").fetchone()[0])

    def read(self, fn: Callable[[Reader], Any]) -> Any:
        """Run ``fn`` on one consistent snapshot."""
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                return fn(self._reader)
            finally:
                self._conn.execute("COMMIT")

    def get(self, kind: str, key: str) -> Any:
        return self.read(lambda r: r.get(kind, key))

    def items(self, kind: str) -> dict[str, Any]:
        return self.read(lambda r: r.items(kind))

    def policy_version(self) -> int:
        return self.read(Reader.policy_version)

    def change(self, kind: str, key: str, value: Any, audit: AuditInfo,
               check: Callable[[Reader, Any], None] | None = None) -> Change:
        """Set (``value`` not None) or delete (None) one entry, atomically with the version bump and audit record."""
        def new(r: Reader, old: Any) -> Any:
            if check is not None:
                check(r, old)
            return value
        return self.update(kind, key, new, audit)

    def update(self, kind: str, key: str, new: Callable[[Reader, Any], Any], audit: AuditInfo) -> Change:
        """Read-modify-write of one entry: ``new(reader, old)`` gives the value to store (None deletes) or refuses
        with an ApiError; in one transaction with the version bump and audit record."""
        def write(w: Writer) -> tuple[Any, Any]:
            old = w.get(kind, key)
            value = new(w, old)
            w.put(kind, key, value)
            return old, value
        return self.transact(audit, write)

    def transact(self, audit: AuditInfo, write: Callable[[Writer], tuple[Any, Any]]) -> Change:
        """Run ``write`` (which returns the old and new value for the audit record), bump the policy version and
        append the audit record, all in one transaction; an exception from ``write`` rolls everything back."""
        with self._lock:
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                old, new = write(self._reader)
                c.execute("UPDATE meta SET value = value + 1 WHERE key='policy_version'")
                version = self._reader.policy_version()
                c.execute("INSERT INTO audit (time, actor, method, endpoint, old, new, policy_version) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?)",
                          (self._clock(), audit.actor, audit.method, audit.endpoint,
                           None if old is None else json.dumps(old, sort_keys=True),
                           None if new is None else json.dumps(new, sort_keys=True), version))
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        return Change(old=old, new=new, version=version)

    def setup(self, write: Callable[[Writer], Any]) -> Any:
        """Run ``write`` in one transaction without a version bump or audit record (start-up configuration)."""
        with self._lock:
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                result = write(self._reader)
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        return result

    def audit(self, limit: int = 100, offset: int = 0) -> tuple[int, list[dict[str, Any]]]:
        """Total number of audit records, and ``limit`` of them newest first from ``offset``."""
        def q(r: Reader) -> tuple[int, list[dict[str, Any]]]:
            conn = r._conn
            total = int(conn.execute("SELECT COUNT(*) FROM audit").fetchone()[0])
            rows = conn.execute("SELECT id, time, actor, method, endpoint, old, new, policy_version FROM audit "
                                "ORDER BY id DESC LIMIT ? OFFSET ?", (limit, offset)).fetchall()
            return total, [
                {"id": i, "time": t, "actor": a, "method": m, "endpoint": e,
                 "oldValue": None if o is None else json.loads(o), "newValue": None if n is None else json.loads(n),
                 "policyVersion": v}
                for i, t, a, m, e, o, n, v in rows]
        return self.read(q)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
