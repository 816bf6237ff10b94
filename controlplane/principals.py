"""Named principals: who may call the control plane, in which role, and the token that proves it.

How and why
-----------
A principal is a name (``ana``, ``ana@acme.com``, ``spark-etl``) with one role:

- ``super-user`` may do everything (Pulsar's ``superUserRoles``);
- ``tenant-admin`` changes the namespace and topic policies of the tenants whose ``adminRoles`` name it (Pulsar's
  ``TenantInfo.adminRoles``; ``access.py`` says exactly what that covers);
- ``viewer`` reads;
- ``participant`` reports (``/v1/report``, ``/v1/goodbye``) and reads;
- ``proxy`` reads, and acts for a principal it names in ``X-Original-Principal`` (Pulsar's ``proxyRoles``): the
  dashboard signs people in with OIDC and calls the control plane as a proxy on their behalf.

Tokens are made here (``secrets.token_urlsafe(32)``: 256 random bits), handed out once at creation and stored only
as their SHA-256 digest. A presented token is looked up by its digest in an in-memory index: the lookup's timing
depends on the digest of what was presented, which tells nothing about any stored token, so no constant-time
comparison is needed; and the tokens being random rather than chosen passwords, a slow salted hash would add
cost per request and no safety. Neither a token nor its digest is ever logged or put in the audit log (it records
the name and role).

Revoking keeps the row, so a name is never reused and old audit records stay readable, and rebuilds the index at
once: the next request with that token is refused, no restart. The last active super-user cannot be revoked, so
the API cannot be locked out.

Bootstrap: the admin token (THROTTLESCOPE_ADMIN_TOKEN or the data dir's ``admin.token``) is the principal
``admin``, a super-user, and the participant token the principal ``participant``. ``Directory`` puts them in place
at start without an audit record: a token file that changed replaces the stored digest, and a bootstrap principal
that was revoked stays revoked (the start says so), so revocation survives a restart.
"""

from __future__ import annotations

import hashlib
import secrets
import sys
import time
from dataclasses import dataclass
from typing import Any, Literal, TextIO

from controlplane.auth import Tokens
from controlplane.config import ConfigError
from controlplane.errors import ApiError, not_found
from controlplane.store import AuditInfo, Change, Reader, Store, Writer

__all__ = ["ROLES", "Role", "Principal", "Directory", "digest", "TENANT", "BOOTSTRAP_ADMIN", "BOOTSTRAP_PARTICIPANT"]

Role = Literal["super-user", "tenant-admin", "viewer", "participant", "proxy"]
ROLES: tuple[Role, ...] = ("super-user", "tenant-admin", "viewer", "participant", "proxy")
TENANT = "tenant"                     # store kind of a tenant's TenantInfo ({"adminRoles": [...], ...})
BOOTSTRAP_ADMIN = "admin"
BOOTSTRAP_PARTICIPANT = "participant"
_COLUMNS = "name, role, token_sha256, created, created_by, revoked"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role
    created: float
    created_by: str
    revoked: float | None = None

    def public(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "created": self.created, "createdBy": self.created_by,
                "revoked": self.revoked is not None, "revokedAt": self.revoked}

    def describe(self) -> str:
        return f"{self.role} {self.name!r}"


def admin_roles(info: Any) -> list[str]:
    return list(info.get("adminRoles", [])) if isinstance(info, dict) else []


class Directory:
    """The principals: created, revoked and listed through the store; looked up by token digest in memory."""

    def __init__(self, store: Store, tokens: Tokens, clock: Any = time.time, err: TextIO | None = None) -> None:
        self.store = store
        self._clock = clock
        self._by_digest: dict[str, Principal] = {}
        self._by_name: dict[str, Principal] = {}
        for note in store.setup(lambda w: self._bootstrap(w, tokens)):
            print(f"throttlescope control plane: {note}", file=err or sys.stderr, flush=True)
        self.reload()

    def _bootstrap(self, w: Writer, tokens: Tokens) -> list[str]:
        notes = []
        for name, role, token, source in (
                (BOOTSTRAP_ADMIN, "super-user", tokens.admin, "THROTTLESCOPE_ADMIN_TOKEN or admin.token"),
                (BOOTSTRAP_PARTICIPANT, "participant", tokens.participant,
                 "THROTTLESCOPE_TOKEN or participant.token")):
            d = digest(token)
            holder = w.rows("SELECT name FROM principals WHERE token_sha256=?", (d,))
            if holder and holder[0][0] != name:
                raise ConfigError(f"the {name} token ({source}) is already the token of principal {holder[0][0]!r}; "
                                  "give the bootstrap principal a token of its own")
            row = w.rows("SELECT token_sha256, revoked FROM principals WHERE name=?", (name,))
            if not row:
                w.execute(f"INSERT INTO principals ({_COLUMNS}) VALUES (?, ?, ?, ?, 'bootstrap', NULL)",
                          (name, role, d, self._clock()))
            elif row[0][1] is not None:
                notes.append(f"the bootstrap principal {name!r} is revoked: its token ({source}) is refused")
            elif row[0][0] != d:
                w.execute("UPDATE principals SET token_sha256=? WHERE name=?", (d, name))
        return notes

    def reload(self) -> None:
        """Rebuild the index from the store (after every change of a principal)."""
        rows = self.store.read(lambda r: r.rows(f"SELECT {_COLUMNS} FROM principals ORDER BY name"))
        by_digest, by_name = {}, {}
        for name, role, d, created, created_by, revoked in rows:
            p = Principal(name, role, created, created_by, revoked)
            by_digest[d], by_name[name] = p, p
        self._by_digest, self._by_name = by_digest, by_name   # two reference swaps: readers never see a mix

    def lookup(self, token: str) -> Principal | None:
        """The principal (maybe revoked) whose token this is, or None."""
        return self._by_digest.get(digest(token))

    def get(self, name: str) -> Principal | None:
        return self._by_name.get(name)

    def all(self) -> list[Principal]:
        return list(self._by_name.values())

    def admins_of(self, tenant: str) -> list[str]:
        return admin_roles(self.store.get(TENANT, tenant))

    def tenants_of(self, name: str) -> list[str]:
        return sorted(t for t, info in self.store.items(TENANT).items() if name in admin_roles(info))

    def is_admin_of(self, p: Principal, tenant: str) -> bool:
        """A tenant admin named in the tenant's adminRoles (read from the store at each call: always current)."""
        return p.role == "tenant-admin" and p.revoked is None and p.name in self.admins_of(tenant)

    def create(self, name: str, role: Role, audit: AuditInfo, created_by: str) -> tuple[Change, str]:
        """A new principal and its token (returned here only). 409 when the name exists (revoked names too)."""
        token = secrets.token_urlsafe(32)

        def write(w: Writer) -> tuple[Any, Any]:
            if w.rows("SELECT revoked FROM principals WHERE name=?", (name,)):
                raise ApiError(409, f"principal {name!r} already exists (names of revoked principals are not "
                                    "reused); pick another name, or revoke and recreate under a new one")
            w.execute(f"INSERT INTO principals ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, NULL)",
                      (name, role, digest(token), self._clock(), created_by))
            return None, {"principal": name, "role": role}
        change = self.store.transact(audit, write)
        self.reload()
        return change, token

    def revoke(self, name: str, audit: AuditInfo) -> Change:
        """Refuse this principal's token from the next request on. 404 unknown, 409 revoked or the last super-user."""
        def write(w: Writer) -> tuple[Any, Any]:
            row = w.rows("SELECT role, revoked FROM principals WHERE name=?", (name,))
            if not row:
                raise not_found(f"no principal named {name!r} (GET /admin/v2/principals lists them)")
            role, revoked = row[0]
            if revoked is not None:
                raise ApiError(409, f"principal {name!r} is already revoked")
            if role == "super-user" and _active_super_users(w) == 1:
                raise ApiError(409, f"{name!r} is the last active super-user; create another super-user before "
                                    "revoking this one, so that someone can still administer the control plane")
            w.execute("UPDATE principals SET revoked=? WHERE name=?", (self._clock(), name))
            return {"principal": name, "role": role}, None
        change = self.store.transact(audit, write)
        self.reload()
        return change


def _active_super_users(r: Reader) -> int:
    return int(r.rows("SELECT COUNT(*) FROM principals WHERE role='super-user' AND revoked IS NULL")[0][0])
