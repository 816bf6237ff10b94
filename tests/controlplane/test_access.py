"""The access rule (access.need, access.refusal) and the principals' store (principals.Directory), no server."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest

from controlplane.access import need, refusal
from controlplane.auth import Tokens
from controlplane.config import ConfigError
from controlplane.errors import ApiError
from controlplane.principals import TENANT, Directory, Principal, digest
from controlplane.store import DB_FILE, MIGRATIONS, SCHEMA_VERSION, AuditInfo, Store

pytestmark = pytest.mark.unit
ADMIN, PART = "admin-token-0123456789", "participant-token-0123456789"
WHO = AuditInfo("admin", "PUT", "/admin/v2/principals/x")


@pytest.mark.parametrize(("method", "path", "kind", "tenant"), [
    ("GET", "/healthz", "open", None),
    ("GET", "/admin/v2/resourcegroups", "reader", None),
    ("HEAD", "/v1/state/buckets", "reader", None),
    ("GET", "/v1/whoami", "principal", None),
    ("GET", "/admin/v2/principals", "super-user", None),
    ("POST", "/v1/report", "participant", None),
    ("PUT", "/v1/report", "super-user", None),
    ("PUT", "/admin/v2/namespaces/acme/web/publishRate", "tenant-admin", "acme"),
    ("DELETE", "/admin/v2/namespaces/acme/web/subscriptionDispatchRate", "tenant-admin", "acme"),
    ("POST", "/admin/v2/persistent/acme/web/clicks/dispatchRate", "tenant-admin", "acme"),
    ("POST", "/admin/v2/non-persistent/acme/web/clicks/publishRate", "tenant-admin", "acme"),     # a later route
    ("POST", "/admin/v2/persistent/acme/web/clicks/sub-1/dispatchRate", "tenant-admin", "acme"),  # a later route
    ("POST", "/admin/v2/namespaces/acme/web/resourcegroup/rg", "super-user", None),
    ("DELETE", "/admin/v2/namespaces/acme/web/resourcegroup", "super-user", None),
    ("POST", "/admin/v2/persistent/acme/web/clicks/resourceGroup", "super-user", None),          # a later route
    ("PUT", "/admin/v2/tenants/acme/publishRate", "super-user", None),
    ("POST", "/admin/v2/tenants/acme/resourcegroup/rg", "super-user", None),
    ("PUT", "/admin/v2/tenants/acme", "super-user", None),
    ("PUT", "/admin/v2/resourcegroups/rg", "super-user", None),
    ("POST", "/admin/v2/brokers/configuration/x/1", "super-user", None),
    ("PUT", "/admin/v2/quotas/mutations/u/c", "super-user", None),
    ("PUT", "/admin/v2/principals/ana", "super-user", None),
    ("PUT", "/admin/v2/namespaces/acme/web", "super-user", None),       # not a policy of the namespace
    ("PATCH", "/anything/new", "super-user", None),
])
def test_what_each_call_needs(method: str, path: str, kind: str, tenant: str | None) -> None:
    n = need(method, path)
    assert (n.kind, n.tenant) == (kind, tenant)


def _p(role: str, name: str = "p") -> Principal:
    return Principal(name, role, 0.0, "t")  # type: ignore[arg-type]


def test_who_may_do_what() -> None:
    admins = {"acme": {"ana"}}

    def is_admin_of(p: Principal, tenant: str) -> bool:
        return p.role == "tenant-admin" and p.name in admins.get(tenant, set())

    acme = need("PUT", "/admin/v2/namespaces/acme/web/publishRate")
    globex = need("PUT", "/admin/v2/namespaces/globex/web/publishRate")
    group = need("PUT", "/admin/v2/resourcegroups/rg")
    report, read = need("POST", "/v1/report"), need("GET", "/v1/policies")
    ana, viewer, part, proxy, su = (_p("tenant-admin", "ana"), _p("viewer"), _p("participant"), _p("proxy"),
                                    _p("super-user"))
    assert [refusal(acme, p, is_admin_of) is None for p in (ana, viewer, part, proxy, su)] == [
        True, False, False, False, True]
    assert "not named in the adminRoles of tenant 'globex'" in refusal(globex, ana, is_admin_of)
    assert "resource groups are super-user only" in refusal(group, ana, is_admin_of)
    assert "a viewer only reads" in refusal(acme, viewer, is_admin_of)
    assert [refusal(report, p, is_admin_of) is None for p in (ana, viewer, part, proxy, su)] == [
        False, False, True, False, True]
    assert all(refusal(read, p, is_admin_of) is None for p in (ana, viewer, part, proxy, su))
    assert refusal(read, None, is_admin_of) == "this needs a principal's token"
    revoked = Principal("old", "super-user", 0.0, "t", revoked=1.0)
    assert refusal(read, revoked, is_admin_of) == "the token of super-user 'old' was revoked"


def test_bootstrap_principals_and_their_tokens_stored_only_as_digests(tmp_path: Path) -> None:
    d = Directory(Store(tmp_path), Tokens(ADMIN, PART))
    assert (d.lookup(ADMIN).name, d.lookup(ADMIN).role) == ("admin", "super-user")
    assert (d.lookup(PART).name, d.lookup(PART).role) == ("participant", "participant")
    assert d.lookup(ADMIN[:-1]) is None and d.lookup("") is None
    change, token = d.create("ana", "tenant-admin", WHO, "admin")
    assert d.lookup(token).name == "ana" and change.new == {"principal": "ana", "role": "tenant-admin"}
    d.store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith(DB_FILE))
    for secret in (ADMIN, PART, token):
        assert secret.encode() not in raw and digest(secret).encode() in raw
    assert token not in json.dumps(Store(tmp_path).audit()[1])


def test_revoked_at_once_and_kept_revoked_across_restarts(tmp_path: Path) -> None:
    d = Directory(Store(tmp_path), Tokens(ADMIN, PART))
    _, token = d.create("ana", "viewer", WHO, "admin")
    d.revoke("ana", WHO)
    assert d.lookup(token).revoked is not None
    with pytest.raises(ApiError) as e:
        d.revoke("ana", WHO)
    assert e.value.status == 409
    with pytest.raises(ApiError) as e:
        d.create("ana", "viewer", WHO, "admin")                  # a revoked name is not reused
    assert e.value.status == 409
    with pytest.raises(ApiError) as e:
        d.revoke("admin", WHO)                                   # the last super-user
    assert e.value.status == 409 and "last active super-user" in e.value.reason
    d.create("root", "super-user", WHO, "admin")
    d.revoke("admin", WHO)
    d.store.close()
    err = io.StringIO()
    d2 = Directory(Store(tmp_path), Tokens(ADMIN, PART), err=err)  # the same admin.token at the next start
    assert d2.lookup(ADMIN).revoked is not None and d2.lookup(token).revoked is not None
    assert "the bootstrap principal 'admin' is revoked" in err.getvalue()


def test_a_changed_token_file_replaces_the_bootstrap_digest(tmp_path: Path) -> None:
    Directory(Store(tmp_path), Tokens(ADMIN, PART)).store.close()
    d = Directory(Store(tmp_path), Tokens("rotated-admin-token-0123", PART))
    assert d.lookup("rotated-admin-token-0123").name == "admin" and d.lookup(ADMIN) is None
    _, token = d.create("ana", "viewer", WHO, "admin")
    d.store.close()
    with pytest.raises(ConfigError, match="already the token of principal 'ana'"):
        Directory(Store(tmp_path), Tokens(token, PART))


def test_tenant_admins_come_from_the_tenants_admin_roles(tmp_path: Path) -> None:
    d = Directory(Store(tmp_path), Tokens(ADMIN, PART))
    d.create("ana", "tenant-admin", WHO, "admin")
    d.create("vic", "viewer", WHO, "admin")
    d.store.change(TENANT, "acme", {"adminRoles": ["ana", "vic"], "allowedClusters": []}, WHO)
    ana, vic = d.get("ana"), d.get("vic")
    assert d.is_admin_of(ana, "acme") and not d.is_admin_of(ana, "globex")
    assert not d.is_admin_of(vic, "acme")                        # a viewer named there stays a viewer
    assert d.tenants_of("ana") == ["acme"]
    d.store.change(TENANT, "acme", {"adminRoles": [], "allowedClusters": []}, WHO)
    assert not d.is_admin_of(ana, "acme")                        # read at each call: no restart


def test_an_existing_data_dir_is_migrated_in_place(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / DB_FILE)                    # the layout of the previous release
    conn.executescript(MIGRATIONS[0] + "; CREATE TABLE schema_version (version INTEGER NOT NULL);"
                       "INSERT INTO schema_version VALUES (1);"
                       "INSERT INTO entries VALUES ('resourcegroup', 'rg', '{\"publishRateInMsgs\": 5}');"
                       "UPDATE meta SET value = 7 WHERE key = 'policy_version';")
    conn.close()
    store = Store(tmp_path)
    assert store.schema_version == SCHEMA_VERSION == 2
    assert store.get("resourcegroup", "rg") == {"publishRateInMsgs": 5} and store.policy_version() == 7
    d = Directory(store, Tokens(ADMIN, PART))
    assert d.lookup(ADMIN).role == "super-user" and store.policy_version() == 7 and store.audit()[0] == 0
