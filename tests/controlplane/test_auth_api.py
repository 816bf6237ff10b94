"""Who may call what, over every operation of the served OpenAPI document, so a new endpoint cannot escape.

The role x endpoint matrix: for each operation and each principal (super-user, tenant admin of acme, viewer,
participant, proxy alone, proxy acting for the tenant admin): no token is 401, an unknown token 403, a role that
may not is 403 with the reason, and a role that may gets a 2xx (a super-user first makes what the call needs
exist: the resource group it names, the value it reads or deletes). What each role may do is stated here again,
independently of controlplane/access.py, by the shape of the path, so an operation added later is classified
the day it appears. Also: revoking a principal (through the CLI) refuses its very next request; open reads;
no token in any log.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from .conftest import ADMIN, PARTICIPANT, REPO, ControlPlane, clean_env, report

pytestmark = [pytest.mark.integration, pytest.mark.parallel]
MUTATING = {"post", "put", "delete", "patch"}
ROLES = ("super-user", "tenant-admin", "viewer", "participant", "proxy", "proxy for tenant-admin")
SCOPED = {"namespaces": 5, "persistent": 6, "non-persistent": 6}   # where the policy's name is in the path
SAMPLE_QUERY = {"method": "GET", "path": "/healthz"}


def sample(prop: dict[str, Any]) -> Any:
    """A valid value of a required body field: the first allowed word, else one of its type."""
    if "enum" in prop:
        return prop["enum"][0]
    types = [prop.get("type")] + [a.get("type") for a in prop.get("anyOf", [])]
    kind = next((t for t in types if t not in (None, "null")), "string")
    return {"number": 1, "integer": 1, "boolean": True, "array": [], "object": {}}.get(kind, "x")


def kind_of(method: str, path: str) -> str:
    """What a call needs, stated by the shape of its path (the rule of the README's security section)."""
    parts = path.strip("/").split("/")
    if method in ("get", "head"):
        return ("open" if path == "/healthz" else "principal" if path.startswith("/v1/whoami")
                else "super-user" if path.startswith("/admin/v2/principals") else "reader")
    if method == "post" and path in ("/v1/report", "/v1/goodbye", "/v1/grant"):
        return "participant"
    at = SCOPED.get(parts[2]) if parts[:2] == ["admin", "v2"] and len(parts) > 3 else None
    if at is not None and len(parts) > at and parts[at].lower() != "resourcegroup":
        return "tenant-admin"
    return "super-user"


def may(role: str, kind: str, tenant: str | None) -> bool:
    role = role.removeprefix("proxy for ")
    return (kind in ("open", "reader", "principal") or role == "super-user"
            or (kind == "participant" and role == "participant")
            or (kind == "tenant-admin" and role == "tenant-admin" and tenant == "acme"))


class Matrix:
    """One control plane, its principals, and the calls that make each operation's target exist."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp, self.n = cp, 0
        self.su = cp.client(ADMIN)
        self.doc = httpx.get(cp.url + "/openapi.json").json()
        self.ops = {(m, t): op for t, ms in self.doc["paths"].items() for m, op in ms.items()}
        tokens = {name: self.su.put(f"/admin/v2/principals/{name}", json={"role": role}).json()["token"]
                  for name, role in (("acme-admin", "tenant-admin"), ("vic", "viewer"), ("dash", "proxy"))}
        assert self.su.put("/admin/v2/tenants/acme", json={"adminRoles": ["acme-admin"]}).status_code == 204
        self.clients = {"super-user": self.su, "tenant-admin": cp.client(tokens["acme-admin"]),
                        "viewer": cp.client(tokens["vic"]), "participant": cp.client(PARTICIPANT),
                        "proxy": cp.client(tokens["dash"]),
                        "proxy for tenant-admin": cp.client(tokens["dash"], **{"X-Original-Principal": "acme-admin"})}
        self.changes = 4              # the three principals and the tenant above

    def fill(self, template: str, tenant: str) -> str:
        self.n += 1
        brokers = "/brokers/configuration/" in template
        samples = {"tenant": tenant if kind_of("put", template) == "tenant-admin" else f"tn{self.n}",
                   "name": "dispatchThrottlingRateInMsg" if brokers else f"p{self.n}", "value": "1"}
        return re.sub(r"\{(\w+)\}", lambda m: samples.get(m.group(1), f"{m.group(1)[0]}{self.n}"), template)

    def body(self, method: str, template: str, path: str) -> Any:
        if template == "/v1/report":
            return report(pid=f"p{self.n}")
        if template == "/v1/goodbye":
            return {"participant_id": f"p{self.n}"}
        schema = self.ops[method, template].get("requestBody", {}).get("content", {}).get(
            "application/json", {}).get("schema")
        if schema is None:
            return None
        schema = self.doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]] if "$ref" in schema else schema
        return {k: sample(schema["properties"][k]) for k in schema.get("required", [])}

    def call(self, c: httpx.Client, method: str, template: str, path: str) -> httpx.Response:
        op = self.ops[method, template]
        query = {p["name"]: SAMPLE_QUERY.get(p["name"], "x") for p in op.get("parameters", [])
                 if p["in"] == "query" and p.get("required")}
        return c.request(method.upper(), path, params=query, json=self.body(method, template, path))

    def prepare(self, method: str, template: str, path: str) -> None:
        """As the super-user: create the resource groups the path names, and the value it reads or deletes."""
        for group in re.findall(r"/resourcegroups?/(g\d+)$|/resourcegroup/(g\d+)", path):
            name = group[0] or group[1]
            self.ok(self.su, "put", "/admin/v2/resourcegroups/{group}", f"/admin/v2/resourcegroups/{name}")
        if template == "/v1/goodbye":
            self.cp.client(PARTICIPANT).post("/v1/report", json=report(pid=f"p{self.n}")).raise_for_status()
            return
        if method not in ("get", "delete", "post") or template.startswith("/v1/") or \
                (method == "post" and (method, template) in self.ops and ("put", template) not in self.ops):
            return
        for maker, suffix in (("put", ""), ("post", ""), ("post", "/{group}"), ("post", "/{value}")):
            if maker != method and (maker, template + suffix) in self.ops:
                target = path + ("/1" if suffix == "/{value}" else f"/g{self.n}" if suffix else "")
                if suffix == "/{group}":
                    self.ok(self.su, "put", "/admin/v2/resourcegroups/{group}", f"/admin/v2/resourcegroups/g{self.n}")
                self.ok(self.su, maker, template + suffix, target)
                return

    def ok(self, c: httpx.Client, method: str, template: str, path: str) -> httpx.Response:
        r = self.call(c, method, template, path)
        assert 200 <= r.status_code < 300, (method, path, r.status_code, r.text[:300])
        if method in MUTATING and not template.startswith("/v1/"):
            self.changes += 1
        return r


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    cp = ControlPlane(tmp_path_factory.mktemp("matrix") / "data")
    try:
        yield Matrix(cp.start())
    finally:
        cp.kill()


def test_every_operation_for_every_role(matrix: Matrix) -> None:
    anonymous, unknown = matrix.cp.client(None), matrix.cp.client("not-a-token" * 3)
    assert len(matrix.ops) >= 70, "the OpenAPI document lists fewer operations than the API has"
    seen: dict[str, int] = {}
    for (method, template), op in sorted(matrix.ops.items(), key=lambda kv: (kv[0][0] == "delete", kv[0])):
        kind = kind_of(method, template)
        assert op["x-required-role"] == kind, (method, template, op["x-required-role"])
        seen[kind] = seen.get(kind, 0) + 1
        if kind == "open":
            assert matrix.call(anonymous, method, template, template).status_code == 200
            continue
        path = matrix.fill(template, "acme")
        r = matrix.call(anonymous, method, template, path)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (method, path, r.status_code)
        assert "needs a token" in r.json()["reason"]
        r = matrix.call(unknown, method, template, path)
        assert r.status_code == 403 and "unknown token" in r.json()["reason"], (method, path, r.status_code)
        for role in ROLES:
            tenants = ("acme", "globex") if kind == "tenant-admin" else ("acme",)
            for tenant in tenants:
                path = matrix.fill(template, tenant)
                if may(role, kind, tenant):
                    matrix.prepare(method, template, path)
                    matrix.ok(matrix.clients[role], method, template, path)
                else:
                    r = matrix.call(matrix.clients[role], method, template, path)
                    assert r.status_code == 403, (role, method, path, r.status_code, r.text[:200])
                    assert " may not " in r.json()["reason"], r.json()
    assert seen.get("tenant-admin", 0) >= 18 and seen.get("super-user", 0) >= 25 and seen.get("reader", 0) >= 25
    # every accepted change is in the audit log under its principal; no refused call left a trace
    audit = matrix.su.get("/admin/v2/audit", params={"limit": 1000}).json()
    assert audit["total"] == matrix.changes
    actors = {e["actor"] for e in audit["entries"]}
    assert actors == {"admin", "acme-admin", "acme-admin (via dash)"}, actors


def test_a_revoked_token_is_refused_from_the_very_next_request(start_cp: Any) -> None:
    cp: ControlPlane = start_cp()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "controlplane", "principals", "--url", cp.url, *args], cwd=REPO,
                              env=clean_env(THROTTLESCOPE_ADMIN_TOKEN=ADMIN), capture_output=True, text=True,
                              timeout=60)

    made = cli("create", "ana", "--role", "tenant-admin", "--tenant", "acme")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert "administers tenant 'acme'" in made.stderr and token not in made.stderr
    ana = cp.client(token)
    assert ana.get("/v1/whoami").json() == {"name": "ana", "role": "tenant-admin", "adminOf": ["acme"], "via": None}
    rate = {"publishThrottlingRateInMsg": 10}
    assert ana.put("/admin/v2/namespaces/acme/web/publishRate", json=rate).status_code == 204
    assert cli("revoke", "ana").returncode == 0
    r = ana.put("/admin/v2/namespaces/acme/web/publishRate", json={"publishThrottlingRateInMsg": 99})
    assert r.status_code == 403 and r.json()["reason"] == "the token of tenant-admin 'ana' was revoked"
    assert ana.get("/v1/whoami").status_code == 403 and ana.get("/v1/policies").status_code == 403
    admin = cp.client(ADMIN)
    assert admin.get("/admin/v2/namespaces/acme/web/publishRate").json()["publishThrottlingRateInMsg"] == 10
    entries = admin.get("/admin/v2/audit").json()["entries"]
    assert [(e["actor"], e["method"], e["endpoint"]) for e in entries[:2]] == [
        ("admin", "DELETE", "/admin/v2/principals/ana"), ("ana", "PUT", "/admin/v2/namespaces/acme/web/publishRate")]
    bad = cli("--url", "cp.example:8000", "list")      # (the last --url wins)
    assert bad.returncode == 1 and bad.stderr.strip() == (
        "throttlescope principals: --url must be the control plane's base URL, http(s)://host[:port][/path], "
        "got 'cp.example:8000'")
    listed = cli("list")
    assert "ana\ttenant-admin admin of acme  (revoked)" in listed.stdout and "admin\tsuper-user" in listed.stdout
    again = cli("revoke", "ana")
    assert again.returncode == 1 and "already revoked" in again.stderr
    cp.stop()
    cp.start()                                           # and after a restart
    assert cp.client(token).get("/v1/policies").status_code == 403


def test_open_reads(start_cp: Any) -> None:
    cp: ControlPlane = start_cp(args=["--open-reads"])
    anonymous = cp.client(None)
    assert anonymous.get("/admin/v2/resourcegroups").status_code == 200
    assert anonymous.get("/v1/state/participants").status_code == 200
    assert anonymous.get("/admin/v2/audit").status_code == 200
    assert anonymous.get("/v1/whoami").status_code == 401              # about yourself: a token, always
    assert anonymous.get("/admin/v2/principals").status_code == 401    # principals are not a read for anyone
    assert anonymous.put("/admin/v2/resourcegroups/x", json={}).status_code == 401
    assert anonymous.post("/v1/report", json={}).status_code == 401
    assert cp.client("unknown-token-0123456789").put("/admin/v2/resourcegroups/x", json={}).status_code == 403
    assert anonymous.get("/admin/v2/resourcegroups", headers={"Authorization": "Basic eDp5"}).status_code == 200
    assert cp.client(PARTICIPANT).delete("/admin/v2/resourcegroups/x").status_code == 403


def test_a_proxy_acts_only_for_an_active_principal_and_only_proxies_may(start_cp: Any) -> None:
    cp: ControlPlane = start_cp()
    admin = cp.client(ADMIN)
    dash = admin.put("/admin/v2/principals/dash", json={"role": "proxy"}).json()["token"]
    vic = admin.put("/admin/v2/principals/vic", json={"role": "viewer"}).json()["token"]
    for token, original, needle in ((dash, "nobody", "is not an active principal"), (dash, "dash", None),
                                    (vic, "admin", "only a proxy principal may act for another"),
                                    (ADMIN, "vic", "only a proxy principal may act for another")):
        r = cp.client(token, **{"X-Original-Principal": original}).get("/v1/whoami")
        if needle is None:
            assert r.status_code == 200 and r.json()["name"] == "dash"
        else:
            assert r.status_code == 403 and needle in r.json()["reason"], r.text
    as_admin = cp.client(dash, **{"X-Original-Principal": "admin"})
    assert as_admin.get("/v1/whoami").json() == {"name": "admin", "role": "super-user", "adminOf": [], "via": "dash"}
    assert as_admin.put("/admin/v2/resourcegroups/rg", json={}).status_code == 201
    assert admin.get("/admin/v2/audit").json()["entries"][0]["actor"] == "admin (via dash)"


def test_tokens_never_logged(start_cp: Any) -> None:
    cp: ControlPlane = start_cp(args=["--log-level", "debug"])
    admin = cp.client(ADMIN)
    made = admin.put("/admin/v2/principals/ana", json={"role": "viewer"}).json()["token"]
    admin.put("/admin/v2/resourcegroups/logged", json={})
    cp.client(PARTICIPANT).get("/v1/state/buckets")
    cp.client(made).get("/v1/state/buckets")
    cp.client("Bearer-guess-0123456789").get("/v1/state/buckets")
    seen = admin.get("/admin/v2/audit").text + admin.get("/admin/v2/principals").text
    cp.stop()
    log = cp.stderr()
    assert "/admin/v2/resourcegroups/logged" in log        # the request was logged ...
    for secret in (ADMIN, PARTICIPANT, made, "Bearer-guess-0123456789"):
        assert secret not in log and secret not in seen   # ... without any token
